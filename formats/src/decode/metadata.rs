//! Columns read from the Kafka record around the value: its key,
//! timestamp, partition, offset and headers (a source column's
//! `metadata`), as Flink's `METADATA FROM` and ksqlDB's `ROWTIME`,
//! `ROWPARTITION` and `ROWOFFSET` columns are.
//!
//! They are filled after the value decoded, so a record whose value is bad
//! is a dead letter whatever its metadata; a key or header that does not
//! parse as its column's type makes the record a dead letter too, with the
//! reason naming the column.

use serde::de::DeserializeSeed;
use sluice_crds::RecordMetadata;
use sluice_plan::time::MAX_TIMESTAMP_MS;
use sluice_plan::{Batch, DataType};

use super::columns::SourceColumns;
use super::error::DecodeError;
use super::json::{ValueSeed, describe};
use super::record::{RecordHeaders, RecordMeta};

impl SourceColumns {
    /// Whether some column is the processing time (the source then reads
    /// the clock for every record).
    pub fn reads_processing_time(&self) -> bool {
        self.metadata.iter().any(|(_, what, _)| *what == RecordMetadata::ProcessingTime)
    }

    /// Fills the metadata columns of the row just decoded into `batch`
    /// (its last), whatever the value's format; a failure takes the row
    /// back out.
    pub(super) fn push_metadata_columns(
        &mut self,
        meta: &RecordMeta<'_>,
        batch: &mut Batch,
    ) -> Result<(), DecodeError> {
        if self.metadata.is_empty() {
            return Ok(());
        }
        let row = batch.len - 1;
        if let Some(key) = &mut self.key
            && let Err(e) = key.decode(meta.key)
        {
            batch.len = row;
            self.rollback(batch, row);
            return Err(e);
        }
        let mut text = std::mem::take(&mut self.scratch);
        let pushed = (0..self.metadata.len()).try_for_each(|m| self.push_metadata(m, meta, batch, &mut text));
        self.scratch = text;
        if pushed.is_err() {
            batch.len = row;
            self.rollback(batch, row);
        }
        pushed
    }

    /// Pushes metadata column `m`'s value for the record.
    fn push_metadata(
        &self,
        m: usize,
        meta: &RecordMeta<'_>,
        batch: &mut Batch,
        text: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        let (col, what, header) = &self.metadata[m];
        let col = *col;
        let name = String::from_utf8_lossy(&self.names[col]);
        let mut column = if self.used[col] { Some(&mut batch.columns[col]) } else { None };
        let number = match what {
            RecordMetadata::Key => {
                if let Some(cell) = self.key.as_ref().and_then(|k| k.cell(col)) {
                    if let Some(c) = column {
                        c.push_from(cell, 0).map_err(|e| DecodeError(format!("column `{name}`: {e}")))?;
                    }
                    return Ok(());
                }
                return self.push_bytes(col, None, meta.key, column);
            }
            RecordMetadata::Header => {
                let wanted = header.as_deref().unwrap_or_default();
                let value = meta.headers.and_then(|h| {
                    (0..h.count()).rev().filter_map(|i| h.header(i)).find(|(n, _)| *n == wanted).and_then(|(_, v)| v)
                });
                return self.push_bytes(col, Some(wanted), value, column);
            }
            RecordMetadata::Headers => {
                let Some(headers) = meta.headers else { return self.push_null(col, || "no headers".into(), column) };
                headers_json(headers, text).map_err(|e| DecodeError(format!("column `{name}`: {e}")))?;
                let json = std::str::from_utf8(text).map_err(|e| DecodeError(e.to_string()))?;
                if let Some(c) = column.as_deref_mut() {
                    c.push_str(json).map_err(|e| DecodeError(e.to_string()))?;
                }
                return Ok(());
            }
            RecordMetadata::Timestamp => meta.timestamp_ms,
            RecordMetadata::Partition => meta.partition.map(i64::from),
            RecordMetadata::Offset => meta.offset,
            RecordMetadata::ProcessingTime => meta.processing_time_ms,
        };
        let Some(x) = number else { return self.push_null(col, || what.as_str().into(), column) };
        if self.time_bounded[col] && !(-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&x) {
            return Err(DecodeError(format!(
                "column `{name}`: the record's {} {x} is outside ±{MAX_TIMESTAMP_MS} ms from the epoch",
                what.as_str()
            )));
        }
        if let Some(c) = column {
            c.push_i64(x).map_err(|e| DecodeError(e.to_string()))?;
        }
        Ok(())
    }

    /// The key (`header` None) or a header: its bytes as text for a string
    /// column, a JSON scalar of the column's type otherwise. Messages are
    /// made only for a record that needs one.
    fn push_bytes(
        &self,
        col: usize,
        header: Option<&[u8]>,
        bytes: Option<&[u8]>,
        column: Option<&mut sluice_plan::Column>,
    ) -> Result<(), DecodeError> {
        let what = || match header {
            None => "the record's key".to_owned(),
            Some(h) => format!("header `{}`", String::from_utf8_lossy(h)),
        };
        let Some(bytes) = bytes else {
            let missing = || match header {
                None => "no key".to_owned(),
                Some(h) => format!("no header `{}`", String::from_utf8_lossy(h)),
            };
            return self.push_null(col, missing, column);
        };
        if self.types[col] == DataType::String {
            let text = std::str::from_utf8(bytes).map_err(|_| {
                DecodeError(format!(
                    "column `{}`: {} is not valid UTF-8",
                    String::from_utf8_lossy(&self.names[col]),
                    what()
                ))
            })?;
            if let Some(c) = column {
                c.push_str(text).map_err(|e| DecodeError(e.to_string()))?;
            }
            return Ok(());
        }
        let seed = ValueSeed {
            name: super::json::FieldName::Column(&self.names[col]),
            data_type: self.types[col],
            required: self.required[col],
            time_bounded: self.time_bounded[col],
            column,
        };
        let mut de = serde_json::Deserializer::from_slice(bytes);
        seed.deserialize(&mut de)
            .and_then(|()| de.end())
            .map_err(|e| DecodeError(format!("{}: {}", what(), describe(&e))))
    }

    /// A NULL, unless the column is required (`why` says what the record lacks).
    fn push_null(
        &self,
        col: usize,
        why: impl FnOnce() -> String,
        column: Option<&mut sluice_plan::Column>,
    ) -> Result<(), DecodeError> {
        if self.required[col] {
            return Err(DecodeError(format!(
                "required column `{}` is null: the record has {}",
                String::from_utf8_lossy(&self.names[col]),
                why()
            )));
        }
        if let Some(c) = column {
            c.push_null();
        }
        Ok(())
    }
}

/// Every header as a JSON object of strings (null for a null value; a
/// repeated name keeps its last value, as a map would).
fn headers_json(headers: &dyn RecordHeaders, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    out.push(b'{');
    let n = headers.count();
    let named = |j: usize, name: &[u8]| headers.header(j).is_some_and(|(m, _)| m == name);
    for i in 0..n {
        let Some((name, _)) = headers.header(i) else { continue };
        // A name is written where it first occurs, with its last value.
        if (0..i).any(|j| named(j, name)) {
            continue;
        }
        let last = (i..n).rev().find(|&j| named(j, name)).unwrap_or(i);
        let value = headers.header(last).and_then(|(_, v)| v);
        let name = std::str::from_utf8(name).map_err(|_| "a header name is not valid UTF-8".to_owned())?;
        let value =
            value.map(std::str::from_utf8).transpose().map_err(|_| format!("header `{name}` is not valid UTF-8"))?;
        if out.len() > 1 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, name).map_err(|e| e.to_string())?;
        out.push(b':');
        serde_json::to_writer(&mut *out, &value).map_err(|e| e.to_string())?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnSpec, ColumnType, RecordMetadata, SourceSpec};
    use sluice_plan::Scalar;

    use super::*;
    use crate::decode::Encoding;
    use crate::decode::json::JsonDecoder;

    struct Headers(Vec<(&'static [u8], Option<&'static [u8]>)>);

    impl RecordHeaders for Headers {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn header(&self, i: usize) -> Option<(&[u8], Option<&[u8]>)> {
            self.0.get(i).copied()
        }
    }

    fn meta_column(name: &str, type_: ColumnType, what: RecordMetadata, header: Option<&str>) -> ColumnSpec {
        ColumnSpec { metadata: Some(what), header: header.map(str::to_owned), ..ColumnSpec::field(name, type_, false) }
    }

    fn decoder(extra: Vec<ColumnSpec>, required_key: bool) -> JsonDecoder {
        let mut source =
            SourceSpec::table("t", &[("bid.price", ColumnType::Bigint, true), ("v", ColumnType::String, false)]);
        source.schema.columns.extend(extra);
        if required_key {
            source.schema.columns.push(ColumnSpec {
                required: true,
                ..meta_column("k2", ColumnType::String, RecordMetadata::Key, None)
            });
        }
        let names: Vec<String> = source.schema.columns.iter().map(|c| format!("\"{}\"", c.name)).collect();
        let plan = sluice_sql::plan_query(&format!("SELECT {} FROM t", names.join(", ")), &[source]).unwrap();
        JsonDecoder::new(&plan)
    }

    fn all_metadata() -> Vec<ColumnSpec> {
        vec![
            meta_column("k", ColumnType::Bigint, RecordMetadata::Key, None),
            meta_column("ts", ColumnType::Timestamp, RecordMetadata::Timestamp, None),
            meta_column("p", ColumnType::Bigint, RecordMetadata::Partition, None),
            meta_column("o", ColumnType::Bigint, RecordMetadata::Offset, None),
            meta_column("hs", ColumnType::String, RecordMetadata::Headers, None),
            meta_column("trace", ColumnType::String, RecordMetadata::Header, Some("trace")),
            meta_column("read_at", ColumnType::Timestamp, RecordMetadata::ProcessingTime, None),
        ]
    }

    #[test]
    fn nested_fields_and_metadata_fill_their_columns() {
        let mut d = decoder(all_metadata(), false);
        assert!(d.columns().reads_processing_time());
        let mut b = d.new_batch(4);
        let headers = Headers(vec![(b"trace", Some(b"a")), (b"x", None), (b"trace", Some(b"b\""))]);
        let meta = RecordMeta {
            key: Some(b"42"),
            timestamp_ms: Some(1_700_000_000_000),
            partition: Some(3),
            offset: Some(17),
            processing_time_ms: Some(1_800_000_000_000),
            headers: Some(&headers),
        };
        d.decode_record(br#"{"v":"x","bid":{"auction":1,"price":7}}"#, &meta, &mut b).unwrap();
        d.decode_record(br#"{"bid":{"price":8},"bid2":{"price":"no"}}"#, &RecordMeta::default(), &mut b).unwrap();
        assert_eq!(b.len, 2);
        let row = |r: usize| (0..b.columns.len()).map(|c| b.columns[c].scalar(r)).collect::<Vec<_>>();
        assert_eq!(
            row(0),
            [
                Scalar::Bigint(7),
                Scalar::String("x".into()),
                Scalar::Bigint(42),
                Scalar::Timestamp(1_700_000_000_000),
                Scalar::Bigint(3),
                Scalar::Bigint(17),
                Scalar::String(r#"{"trace":"b\"","x":null}"#.into()),
                Scalar::String("b\"".into()),
                Scalar::Timestamp(1_800_000_000_000),
            ]
        );
        assert_eq!(
            row(1),
            [
                Scalar::Bigint(8),
                Scalar::Null,
                Scalar::Null,
                Scalar::Null,
                Scalar::Null,
                Scalar::Null,
                Scalar::Null,
                Scalar::Null,
                Scalar::Null
            ]
        );
    }

    #[test]
    fn metadata_columns_beside_flat_fields_take_the_fast_path_as_the_visitor_would() {
        let mut source = SourceSpec::table("t", &[("id", ColumnType::Bigint, true), ("v", ColumnType::String, false)]);
        source.schema.columns.insert(0, meta_column("p", ColumnType::Bigint, RecordMetadata::Partition, None));
        source.schema.columns.push(meta_column("k", ColumnType::String, RecordMetadata::Key, None));
        let plan = sluice_sql::plan_query("SELECT p, id, v, k FROM t", &[source]).unwrap();
        let (mut fast, mut visitor) = (JsonDecoder::new(&plan), JsonDecoder::new(&plan));
        let (mut a, mut b) = (fast.new_batch(4), visitor.new_batch(4));
        let meta = RecordMeta { key: Some(b"x"), partition: Some(2), ..RecordMeta::default() };
        for record in [&br#"{"id":1,"v":"a"}"#[..], br#"{"v":"b","id":2,"extra":[1]}"#, br#"{"id":3}"#] {
            fast.decode_record(record, &meta, &mut a).unwrap();
            visitor.decode_with_serde(record, &mut b).unwrap();
            let row = b.len - 1;
            visitor.columns.push_metadata(0, &meta, &mut b, &mut Vec::new()).unwrap();
            visitor.columns.push_metadata(1, &meta, &mut b, &mut Vec::new()).unwrap();
            assert_eq!(b.len, row + 1);
        }
        for c in 0..4 {
            assert_eq!(
                (0..3).map(|r| a.columns[c].scalar(r)).collect::<Vec<_>>(),
                (0..3).map(|r| b.columns[c].scalar(r)).collect::<Vec<_>>()
            );
        }
        assert_eq!(a.columns[0].scalar(0), Scalar::Bigint(2));
        assert_eq!(a.columns[3].scalar(2), Scalar::String("x".into()));
        assert!(fast.decode_record(br#"{"v":"no id"}"#, &meta, &mut a).is_err());
        assert_eq!(a.len, 3);
    }

    #[test]
    fn bad_nested_fields_and_metadata_are_dead_letters_naming_the_column() {
        let mut d = decoder(all_metadata(), true);
        let mut b = d.new_batch(4);
        let key = RecordMeta { key: Some(b"k"), ..RecordMeta::default() };
        d.decode_record(br#"{"bid":{"price":1}}"#, &key, &mut b).unwrap_err();
        let ok_key = RecordMeta { key: Some(b"7"), ..RecordMeta::default() };
        let bad_headers = Headers(vec![(b"trace", Some(b"\xff"))]);
        let cases: [(&[u8], RecordMeta<'_>, &str); 7] = [
            (br#"{"bid":{"auction":1}}"#, ok_key, "missing required field `bid.price`"),
            (br#"{"bid":null}"#, ok_key, "missing required field `bid.price`"),
            (br#"{"bid":5}"#, ok_key, "field `bid`: expected an object, got number 5"),
            (br#"{"bid":{"price":"x"}}"#, ok_key, "field `bid.price`: expected bigint, got string \"x\""),
            (br#"{"bid":{"price":1}}"#, RecordMeta { key: Some(b"abc"), ..ok_key }, "the record's key: malformed JSON"),
            (
                br#"{"bid":{"price":1}}"#,
                RecordMeta { key: None, ..ok_key },
                "required column `k2` is null: the record has no key",
            ),
            (
                br#"{"bid":{"price":1}}"#,
                RecordMeta { headers: Some(&bad_headers), ..ok_key },
                "column `hs`: header `trace` is not valid UTF-8",
            ),
        ];
        for (input, meta, reason) in cases {
            let e = d.decode_record(input, &meta, &mut b).unwrap_err();
            assert!(e.0.contains(reason), "{}: {e}", String::from_utf8_lossy(input));
            assert_eq!(b.len, 0);
            assert!(
                b.columns.iter().all(sluice_plan::Column::is_empty),
                "rolled back after {}",
                String::from_utf8_lossy(input)
            );
        }
        d.decode_record(br#"{"bid":{"price":1}}"#, &ok_key, &mut b).unwrap();
        assert_eq!(b.len, 1);
    }
}
