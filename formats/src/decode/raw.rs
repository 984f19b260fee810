//! A record value as it is, as text: `format: raw`. The source declares
//! one field column, of type `string`, which holds the whole value (a log
//! line, a CSV row, an id); metadata columns read the key, headers and the
//! rest as for any format. A value that is not UTF-8 is rejected.

use sluice_plan::{Batch, ColumnOrigin, Plan};

use super::encoding::Encoding;
use super::{DecodeError, RecordMeta, SourceColumns};

#[derive(Debug, Clone)]
pub struct RawDecoder {
    /// Names, use and metadata columns, as the JSON decoder keeps them.
    pub(super) columns: SourceColumns,
    /// The column the value goes to.
    value: usize,
}

impl RawDecoder {
    /// `None` unless the source has exactly one field column (`validate`
    /// says why before anything runs).
    pub fn new(plan: &Plan) -> Option<Self> {
        let mut fields =
            (0..plan.source.schema.fields.len()).filter(|&i| matches!(plan.source.origin(i), ColumnOrigin::Field(_)));
        let value = fields.next()?;
        fields.next().is_none().then(|| Self { columns: SourceColumns::new(plan), value })
    }

    pub fn new_batch(&self, capacity: usize) -> Batch {
        self.columns.new_batch(capacity)
    }

    /// Appends the value (and the record's metadata columns) as one row.
    pub fn decode_record(
        &mut self,
        payload: &[u8],
        meta: &RecordMeta<'_>,
        batch: &mut Batch,
    ) -> Result<(), DecodeError> {
        let text = std::str::from_utf8(payload).map_err(|e| {
            DecodeError(format!("raw: the value is not UTF-8 text (byte {} of {})", e.valid_up_to(), payload.len()))
        })?;
        if self.columns.used[self.value] {
            batch.columns[self.value].push_str(text).map_err(|e| DecodeError(e.to_string()))?;
        }
        batch.len += 1;
        self.columns.push_metadata_columns(meta, batch)
    }
}

impl Encoding for RawDecoder {
    fn columns(&self) -> &SourceColumns {
        &self.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        RawDecoder::decode_record(self, payload, &RecordMeta::default(), batch)
    }

    fn decode_record(&mut self, payload: &[u8], meta: &RecordMeta<'_>, batch: &mut Batch) -> Result<(), DecodeError> {
        RawDecoder::decode_record(self, payload, meta, batch)
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnSpec, ColumnType, RecordMetadata, SourceSpec};
    use sluice_plan::Scalar;

    use super::RawDecoder;
    use crate::decode::RecordMeta;

    #[test]
    fn the_value_is_one_column_beside_the_records_metadata() {
        let mut source = SourceSpec::table("logs", &[("line", ColumnType::String, true)]);
        source.schema.columns.push(ColumnSpec {
            metadata: Some(RecordMetadata::Offset),
            ..ColumnSpec::field("at", ColumnType::Bigint, false)
        });
        let plan = sluice_sql::plan_query("SELECT line, at FROM logs", &[source]).unwrap();
        let mut d = RawDecoder::new(&plan).unwrap();
        let mut batch = d.new_batch(2);
        let meta = RecordMeta { offset: Some(7), ..RecordMeta::default() };
        d.decode_record(b"ERROR disk full, {not json}", &meta, &mut batch).unwrap();
        d.decode_record(b"", &meta, &mut batch).unwrap();
        assert_eq!(batch.columns[0].scalar(0), Scalar::String("ERROR disk full, {not json}".into()));
        assert_eq!(batch.columns[1].scalar(0), Scalar::Bigint(7));
        assert_eq!(batch.columns[0].scalar(1), Scalar::String(String::new()));
        let e = d.decode_record(&[b'a', 0xff], &meta, &mut batch).unwrap_err();
        assert!(e.0.contains("not UTF-8 text (byte 1 of 2)"), "{e}");
        assert_eq!(batch.len, 2);
    }
}
