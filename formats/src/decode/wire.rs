//! The Confluent wire format every registry-aware serializer writes: a
//! magic byte `0`, the writer schema's registry id (4 bytes, big-endian),
//! then the encoded value (Protobuf puts its message indexes first).

/// The first byte of a value in the Confluent wire format.
const MAGIC: u8 = 0;
/// Magic byte and schema id.
pub(super) const HEADER: usize = 5;

/// The schema id of a value in the Confluent wire format.
pub(super) fn schema_id(payload: &[u8]) -> Result<u32, String> {
    match payload {
        [MAGIC, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        [MAGIC, ..] => Err(format!("{} bytes, shorter than the wire format's 5-byte header", payload.len())),
        [] => Err("an empty value (a tombstone?)".into()),
        [first, ..] => Err(format!(
            "not in the Confluent wire format (first byte {first:#04x}, not 0): written without a schema registry?"
        )),
    }
}
