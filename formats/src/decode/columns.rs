//! The columns a source's record fills, whatever its encoding: their
//! names, types, whether each is required or read by the query, which are
//! read from the Kafka record rather than its value (`metadata.rs` fills
//! them), and the key's decoder. Every encoding's decoder writes its row
//! through one of these; it knows nothing of JSON, Avro or Protobuf.

use sluice_crds::RecordMetadata;
use sluice_plan::{Batch, Column, ColumnData, ColumnOrigin, DataType, Plan};

use super::error::DecodeError;
use super::key_cells::KeyCells;

#[derive(Debug, Clone)]
pub struct SourceColumns {
    /// Each column's name, as error messages give it (`bid.price`).
    pub(super) names: Vec<Box<[u8]>>,
    pub(super) types: Vec<DataType>,
    pub(super) required: Vec<bool>,
    pub(super) used: Vec<bool>,
    /// Integers this column takes must lie within ±[`MAX_TIMESTAMP_MS`]:
    /// every timestamp column, and the event-time column whatever its type
    /// (a `bigint` event time near `i64::MIN` would overflow window
    /// arithmetic; it is a dead letter instead).
    ///
    /// [`MAX_TIMESTAMP_MS`]: sluice_plan::time::MAX_TIMESTAMP_MS
    pub(super) time_bounded: Vec<bool>,
    /// Columns read from the Kafka record rather than its value
    /// (`metadata.rs` fills them).
    pub(super) metadata: Vec<MetadataColumn>,
    /// The columns the record being decoded has filled so far.
    pub(super) seen: Vec<bool>,
    /// Reused for a `headers` column's text.
    pub(super) scratch: Vec<u8>,
    /// The key's decoder, for a source with a `keyFormat`.
    pub(super) key: Option<Box<dyn KeyCells>>,
}

/// An empty batch of columns of `types`, with room for `capacity` rows in
/// each `used` one (the others hold nothing: the query never reads them).
pub(super) fn empty_batch(types: &[DataType], used: &[bool], capacity: usize) -> Batch {
    let columns = types
        .iter()
        .zip(used)
        .map(
            |(t, used)| {
                if *used { Column::with_capacity(*t, capacity) } else { Column::new(*t, ColumnData::Null(0), None) }
            },
        )
        .collect();
    Batch::new(columns, 0)
}

/// A column read from the Kafka record: its index, what it reads, and the
/// header's name for a `header` column.
pub(super) type MetadataColumn = (usize, RecordMetadata, Option<Box<[u8]>>);

impl SourceColumns {
    /// The columns of `plan`'s source.
    pub fn new(plan: &Plan) -> Self {
        let fields = &plan.source.schema.fields;
        let event_time = plan.source.event_time.map(|e| e.column);
        let metadata = (0..fields.len())
            .filter_map(|i| match plan.source.origin(i) {
                ColumnOrigin::Metadata { what, header } => {
                    Some((i, what, header.map(|h| h.into_bytes().into_boxed_slice())))
                }
                ColumnOrigin::Field(_) => None,
            })
            .collect();
        Self {
            time_bounded: fields
                .iter()
                .enumerate()
                .map(|(i, f)| f.data_type == DataType::Timestamp || event_time == Some(i))
                .collect(),
            names: fields.iter().map(|f| f.name.as_bytes().into()).collect(),
            types: fields.iter().map(|f| f.data_type).collect(),
            required: plan.source.required.clone(),
            used: plan.used_columns.clone(),
            metadata,
            seen: vec![false; fields.len()],
            scratch: Vec::new(),
            key: None,
        }
    }

    /// An empty batch with a builder for each used column.
    pub fn new_batch(&self, capacity: usize) -> Batch {
        empty_batch(&self.types, &self.used, capacity)
    }

    /// No field seen yet; metadata columns are not fields of the value.
    pub(super) fn reset_seen(&mut self) {
        self.seen.fill(false);
        for &(col, ..) in &self.metadata {
            self.seen[col] = true;
        }
    }

    /// Drops whatever a failed decode appended after row `rows`.
    pub(super) fn rollback(&self, batch: &mut Batch, rows: usize) {
        for (c, used) in batch.columns.iter_mut().zip(&self.used) {
            if *used {
                c.truncate(rows);
            }
        }
    }

    /// Fills absent optional fields with NULL; rejects absent required ones.
    pub(super) fn finish_row(&self, batch: &mut Batch) -> Result<(), DecodeError> {
        for (i, seen) in self.seen.iter().enumerate() {
            if !seen {
                if self.required[i] {
                    return Err(DecodeError(format!(
                        "missing required field `{}`",
                        String::from_utf8_lossy(&self.names[i])
                    )));
                }
                if self.used[i] {
                    batch.columns[i].push_null();
                }
            }
        }
        Ok(())
    }
}
