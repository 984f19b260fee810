//! Records that could not be processed, with where they came from and why.

use crate::Error;

/// One dead letter: the original payload, its source coordinates and the reason.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetter<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub reason: &'a str,
    pub payload: &'a [u8],
}

impl DeadLetter<'_> {
    /// A self-describing JSON line (file and log outputs): the payload is
    /// kept as text when it is UTF-8, otherwise hex-encoded.
    pub fn to_json_line(&self, out: &mut Vec<u8>) {
        use sluice_formats::encode::write_str;
        out.extend_from_slice(b"{\"reason\":");
        write_str(self.reason, out);
        out.extend_from_slice(b",\"topic\":");
        write_str(self.topic, out);
        out.extend_from_slice(
            format!(",\"partition\":{},\"offset\":{},\"timestamp\":{}", self.partition, self.offset, self.timestamp_ms)
                .as_bytes(),
        );
        match std::str::from_utf8(self.payload) {
            Ok(text) => {
                out.extend_from_slice(b",\"payload\":");
                write_str(text, out);
            }
            Err(_) => {
                out.extend_from_slice(b",\"payload_hex\":\"");
                for b in self.payload {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.push(b'"');
            }
        }
        out.extend_from_slice(b"}\n");
    }
}

pub trait DeadLetterSink: Send {
    fn send(&mut self, record: &DeadLetter<'_>) -> Result<(), Error>;
    fn poll(&mut self) -> Result<(), Error> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// No dead-letter output configured: every dead letter is logged (and
/// counted), so nothing disappears silently.
#[derive(Debug, Default)]
pub struct LogDeadLetter;

impl DeadLetterSink for LogDeadLetter {
    fn send(&mut self, r: &DeadLetter<'_>) -> Result<(), Error> {
        let payload = String::from_utf8_lossy(&r.payload[..r.payload.len().min(512)]);
        tracing::warn!(
            topic = r.topic, partition = r.partition, offset = r.offset, reason = r.reason, payload = %payload,
            "record not processed (configure spec.deadLetter to keep such records)"
        );
        Ok(())
    }
}
