//! Debezium change events in Avro (Debezium with Confluent's
//! `AvroConverter`) → the rows of a table source.
//!
//! The value is Debezium's `Envelope` record in the Confluent wire format:
//! `before` and `after` (each `null` or the table's `Value` record),
//! `source`, `op`, `ts_ms`, `transaction`. A row's columns are read from
//! `after` for an insert (`c`), snapshot read (`r`) or update (`u`), and
//! from `before` for a delete (`d`), whose row is then a deletion; the
//! envelope's `op`, `source.*` and `ts_ms` are readable as columns, as
//! with `debezium-json`.
//!
//! Each writer schema compiles into two programs of the Avro decoder, one
//! reading the row under `after`, one under `before`; a record's `op`
//! (written after both images) is found first by skipping them, then the
//! program of its image decodes it.

use sluice_plan::{Batch, ColumnOrigin, Plan};

use crate::decode::cells::DELETED;
use crate::decode::columns::SourceColumns;
use crate::decode::encoding::Encoding;
use crate::decode::{AvroDecoder, DecodeError, RecordMeta};

/// The envelope's own fields, read where they are rather than in an image.
const ENVELOPE: [&str; 3] = ["op", "source", "ts_ms"];

#[derive(Debug, Clone)]
pub struct DebeziumAvroDecoder {
    after: AvroDecoder,
    before: AvroDecoder,
    /// The deletion marker's column.
    deleted: Option<usize>,
}

impl DebeziumAvroDecoder {
    pub fn new(plan: &Plan) -> Self {
        let image = |image: &'static str| {
            move |path: &[String]| match path.first().map(String::as_str) {
                Some(DELETED) => None,
                Some(first) if ENVELOPE.contains(&first) => Some(path.to_vec()),
                _ => Some(std::iter::once(image.to_owned()).chain(path.iter().cloned()).collect()),
            }
        };
        let deleted = (0..plan.source.schema.fields.len())
            .find(|&i| matches!(plan.source.origin(i), ColumnOrigin::Field(p) if p.len() == 1 && p[0] == DELETED));
        Self {
            after: AvroDecoder::with_paths(plan, image("after")),
            before: AvroDecoder::with_paths(plan, image("before")),
            deleted,
        }
    }

    pub fn new_batch(&self, capacity: usize) -> Batch {
        self.after.new_batch(capacity)
    }

    /// See [`AvroDecoder::add_schema`].
    pub fn add_schema(&mut self, id: u32, text: &str) {
        self.add_schema_with(id, text, &[]);
    }

    /// See [`AvroDecoder::add_schema_with`].
    pub fn add_schema_with(&mut self, id: u32, text: &str, references: &[(String, String)]) {
        self.after.add_schema_with(id, text, references);
        self.before.add_schema_with(id, text, references);
    }

    /// Appends the change `payload` describes as one row of `batch` (a new
    /// version, or a deletion), or explains why it cannot.
    pub fn decode_record(
        &mut self,
        payload: &[u8],
        meta: &RecordMeta<'_>,
        batch: &mut Batch,
    ) -> Result<(), DecodeError> {
        let bad = |why: String| DecodeError(format!("debezium-avro: {why}"));
        let op = self.after.peek_string(payload, "op").map_err(bad)?;
        let (decoder, deleted) = match op {
            Some("c" | "r" | "u") => (&mut self.after, false),
            Some("d") => (&mut self.before, true),
            Some("t") => return Err(bad("a truncate event: not supported (it would delete every row)".into())),
            Some(other) => return Err(bad(format!("unknown op \"{other}\""))),
            None => return Err(bad("no `op` (not a Debezium change event)".into())),
        };
        let rows = batch.len;
        decoder.decode(payload, batch).map_err(|e| bad(e.0))?;
        if let Some(col) = self.deleted
            && decoder.columns.used[col]
            && let Err(e) = batch.columns[col].push_bool(deleted)
        {
            decoder.columns.rollback(batch, rows);
            return Err(bad(e.to_string()));
        }
        // Both decoders have the same columns: the metadata (and the
        // key's decoder) are `after`'s.
        self.after.columns.push_metadata_columns(meta, batch)
    }
}

impl Encoding for DebeziumAvroDecoder {
    /// `after`'s: both decoders have the same columns, and the metadata
    /// (and the key's decoder) are `after`'s.
    fn columns(&self) -> &SourceColumns {
        &self.after.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.after.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        DebeziumAvroDecoder::decode_record(self, payload, &RecordMeta::default(), batch)
    }

    fn decode_record(&mut self, payload: &[u8], meta: &RecordMeta<'_>, batch: &mut Batch) -> Result<(), DecodeError> {
        DebeziumAvroDecoder::decode_record(self, payload, meta, batch)
    }

    fn registry_type(&self) -> Option<&'static str> {
        Some("AVRO")
    }

    fn needs_schema(&self, payload: &[u8]) -> Option<u32> {
        self.after.needs_schema(payload)
    }

    fn add_schema_with(&mut self, id: u32, text: &str, references: &[(String, String)]) {
        DebeziumAvroDecoder::add_schema_with(self, id, text, references);
    }

    fn add_unknown(&mut self, id: u32, why: String) {
        self.after.add_unknown(id, why.clone());
        self.before.add_unknown(id, why);
    }

    fn cache_bytes(&self) -> usize {
        self.after.cache_bytes() + self.before.cache_bytes()
    }

    fn forget_unknown(&mut self) {
        self.after.forget_unknown();
        self.before.forget_unknown();
    }
}
#[cfg(test)]
mod tests {
    use sluice_plan::{Batch, Scalar};

    use super::DebeziumAvroDecoder;
    use crate::decode::avro::tests::Datum;
    use crate::decode::{Encoding, RecordMeta};

    /// Debezium's envelope for a `customers` table as its Avro converter
    /// registers it (trimmed of fields no test reads, with `transaction`
    /// kept to be skipped).
    const ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"shop.public.customers","fields":[
        {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
            {"name":"id","type":"long"},{"name":"name","type":["null","string"],"default":null}]}],"default":null},
        {"name":"after","type":["null","Value"],"default":null},
        {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql",
            "fields":[{"name":"connector","type":"string"},{"name":"table","type":"string"},
            {"name":"ts_ms","type":"long"}]}},
        {"name":"op","type":"string"},
        {"name":"ts_ms","type":["null","long"],"default":null},
        {"name":"transaction","type":["null",{"type":"record","name":"block","namespace":"event",
            "fields":[{"name":"id","type":"string"},{"name":"total_order","type":"long"}]}],"default":null}
    ]}"#;

    fn decoder() -> DebeziumAvroDecoder {
        let mut d = DebeziumAvroDecoder::new(&crate::decode::debezium::tests::customers_plan());
        d.add_schema(7, ENVELOPE);
        d
    }

    /// An image: `null` (union branch 0) or the row (branch 1).
    fn image(d: Datum, row: Option<(i64, Option<&str>)>) -> Datum {
        match row {
            None => d.long(0),
            Some((id, name)) => {
                let d = d.long(1).long(id);
                match name {
                    None => d.long(0),
                    Some(n) => d.long(1).string(n),
                }
            }
        }
    }

    fn event(before: Option<(i64, Option<&str>)>, after: Option<(i64, Option<&str>)>, op: &str, ts: i64) -> Vec<u8> {
        let d = image(image(Datum::framed(7), before), after);
        let d = d.string("postgresql").string("customers").long(ts - 5);
        let d = d.string(op).long(1).long(ts);
        // A transaction block, skipped.
        d.long(1).string("tx-1").long(3).0
    }

    fn row(batch: &Batch, r: usize) -> Vec<Scalar> {
        batch.columns.iter().map(|c| c.scalar(r)).collect()
    }

    #[test]
    fn inserts_snapshot_reads_updates_and_deletes_become_versions_and_deletions() {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        let meta = RecordMeta::default();
        let events = [
            event(None, Some((1, Some("Ann"))), "c", 1000),
            event(None, Some((2, Some("Bob"))), "r", 1001),
            event(Some((1, Some("Ann"))), Some((1, Some("Anne"))), "u", 5000),
            // A delete's `before` holds the key only (REPLICA IDENTITY DEFAULT).
            event(Some((2, None)), None, "d", 7000),
        ];
        for e in &events {
            assert_eq!(d.needs_schema(e), None);
            d.decode_record(e, &meta, &mut batch).unwrap_or_else(|err| panic!("{err}"));
        }
        let s = |x: &str| Scalar::String(x.into());
        assert_eq!(
            row(&batch, 0),
            [Scalar::Bigint(1), s("Ann"), Scalar::Boolean(false), s("c"), s("customers"), Scalar::Timestamp(1000)]
        );
        assert_eq!(row(&batch, 1)[3], s("r"));
        assert_eq!(row(&batch, 2)[..3], [Scalar::Bigint(1), s("Anne"), Scalar::Boolean(false)]);
        assert_eq!(
            row(&batch, 3),
            [Scalar::Bigint(2), Scalar::Null, Scalar::Boolean(true), s("d"), s("customers"), Scalar::Timestamp(7000)]
        );
    }

    #[test]
    fn what_is_not_a_change_event_is_rejected_with_a_reason_and_leaves_the_batch_as_it_was() {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        let meta = RecordMeta::default();
        let full = event(None, Some((1, Some("Ann"))), "c", 1000);
        for (bytes, why) in [
            (event(None, None, "c", 1000), "required column `id` is null"),
            (event(None, None, "d", 1000), "required column `id` is null"),
            (event(None, None, "t", 1000), "truncate event"),
            (event(None, None, "x", 1000), "unknown op \"x\""),
            (full[..full.len() - 3].to_vec(), "ends"),
            (full[..9].to_vec(), "ends"),
            (Datum::framed(8).long(0).0, "schema id 8 was not fetched"),
            (b"{\"op\":\"c\"}".to_vec(), "wire format"),
        ] {
            let e = d.decode_record(&bytes, &meta, &mut batch).unwrap_err();
            assert!(e.0.contains(why), "want {why:?}: {e}");
            assert!(e.0.starts_with("debezium-avro: "), "{e}");
            assert_eq!(batch.len, 0);
            assert!(batch.columns.iter().all(sluice_plan::Column::is_empty), "rolled back");
        }
    }

    /// A `NUMERIC(10,2)` column as Debezium's Avro converter registers it
    /// (`decimal.handling.mode: precise`, the default): Connect's Decimal,
    /// `bytes` with the `decimal` logical type.
    #[test]
    fn decimals_read_exactly_from_connects_decimal() {
        const ACCOUNTS: &str = r#"{"type":"record","name":"Envelope","namespace":"shop.public.accounts","fields":[
            {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
                {"name":"id","type":"long"},
                {"name":"balance","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,
                    "connect.parameters":{"scale":"2","connect.decimal.precision":"10"},
                    "connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null}
            ]}],"default":null},
            {"name":"after","type":["null","Value"],"default":null},
            {"name":"op","type":"string"},
            {"name":"ts_ms","type":["null","long"],"default":null}
        ]}"#;
        let mut d = DebeziumAvroDecoder::new(&crate::decode::debezium::tests::accounts_plan());
        d.add_schema(9, ACCOUNTS);
        let mut batch = d.new_batch(2);
        // -1234.50 is -123450: 0xfe 0x1d 0xc6 in two's complement.
        for unscaled in [&[0x01, 0xe2, 0x3a][..], &[0xfe, 0x1d, 0xc6][..]] {
            let e = Datum::framed(9).long(0).long(1).long(7).long(1).bytes(unscaled).string("c").long(1).long(1).0;
            d.decode_record(&e, &RecordMeta::default(), &mut batch).unwrap_or_else(|err| panic!("{err}"));
        }
        assert_eq!(row(&batch, 0), [Scalar::Bigint(7), Scalar::Decimal(123_450, 2)]);
        assert_eq!(row(&batch, 1), [Scalar::Bigint(7), Scalar::Decimal(-123_450, 2)]);
    }
}
