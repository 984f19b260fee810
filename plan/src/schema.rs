//! Resolved schemas: source columns with types, and the columns an operator
//! hands to the final projection.

use serde::{Deserialize, Serialize};
use sluice_crds::{ColumnType, SourceSpec};

use super::{DataType, SqlError};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    pub data_type: DataType,
}

/// Named, typed columns. Names are matched case-insensitively (an exact
/// match wins), as unquoted SQL identifiers are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    pub fields: Vec<Field>,
}

impl Schema {
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields
            .iter()
            .position(|f| f.name == name)
            .or_else(|| self.fields.iter().position(|f| f.name.eq_ignore_ascii_case(name)))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|f| f.name.as_str())
    }

    pub fn push(&mut self, name: impl Into<String>, data_type: DataType) -> usize {
        self.fields.push(Field { name: name.into(), data_type });
        self.fields.len() - 1
    }
}

/// Event time of a source: which column, and how far the watermark trails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTime {
    pub column: usize,
    pub delay_ms: i64,
}

/// A source as the planner and decoder see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceSchema {
    pub name: String,
    pub schema: Schema,
    /// `required` per column: missing or null values send the record to the dead-letter output.
    pub required: Vec<bool>,
    pub event_time: Option<EventTime>,
    pub partition_key: Vec<String>,
}

impl SourceSchema {
    /// The column names, in declaration order (what `*` stands for).
    pub fn column_names(&self) -> Vec<String> {
        self.schema.fields.iter().map(|f| f.name.clone()).collect()
    }

    pub fn from_spec(spec: &SourceSpec) -> Result<Self, SqlError> {
        let mut schema = Schema::default();
        let mut required = Vec::with_capacity(spec.schema.columns.len());
        for c in &spec.schema.columns {
            if schema.fields.iter().any(|f| f.name.eq_ignore_ascii_case(&c.name)) {
                return Err(SqlError::unpositioned(format!(
                    "source `{}` declares column `{}` twice",
                    spec.name, c.name
                )));
            }
            schema.push(c.name.clone(), c.type_.into());
            required.push(c.required);
        }
        let event_time = match &spec.event_time {
            None => None,
            Some(et) => {
                let column = schema.index_of(&et.column).ok_or_else(|| {
                    SqlError::unpositioned(format!(
                        "source `{}`: eventTime.column `{}` is not a declared column",
                        spec.name, et.column
                    ))
                })?;
                let t = spec.schema.columns[column].type_;
                if !matches!(t, ColumnType::Timestamp | ColumnType::Bigint) {
                    return Err(SqlError::unpositioned(format!(
                        "source `{}`: eventTime.column `{}` must be a timestamp or bigint (epoch ms) column",
                        spec.name, et.column
                    )));
                }
                // A record without event time cannot be placed in any window.
                required[column] = true;
                Some(EventTime { column, delay_ms: et.watermark_delay_millis.max(0) })
            }
        };
        for k in &spec.partition_key {
            if schema.index_of(k).is_none() {
                return Err(SqlError::unpositioned(format!(
                    "source `{}`: partitionKey column `{k}` is not a declared column",
                    spec.name
                )));
            }
        }
        Ok(Self { name: spec.name.clone(), schema, required, event_time, partition_key: spec.partition_key.clone() })
    }
}
