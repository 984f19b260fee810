//! Resolved schemas: source columns with types, and the columns an operator
//! hands to the final projection.

use serde::{Deserialize, Serialize};
use sluice_crds::{ColumnType, RecordMetadata, SourceSpec};

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
    /// Where each column's value comes from; empty when every column is a
    /// top-level field of the value (the internal sources of later stages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origins: Vec<ColumnOrigin>,
}

/// Where a source column's value comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnOrigin {
    /// A field of the JSON value: its path of keys (one for a top-level field).
    Field(Vec<String>),
    /// Something Kafka records about the record (`RecordMetadata::Header`
    /// with the header's name in `header`).
    Metadata { what: RecordMetadata, header: Option<String> },
}

impl ColumnOrigin {
    /// The origin a column of a later stage's internal source has.
    pub fn field(name: &str) -> Self {
        Self::Field(vec![name.to_owned()])
    }
}

impl SourceSchema {
    /// The column names, in declaration order (what `*` stands for).
    pub fn column_names(&self) -> Vec<String> {
        self.schema.fields.iter().map(|f| f.name.clone()).collect()
    }

    pub fn from_spec(spec: &SourceSpec) -> Result<Self, SqlError> {
        let mut schema = Schema::default();
        let mut required = Vec::with_capacity(spec.schema.columns.len());
        let mut origins = Vec::with_capacity(spec.schema.columns.len());
        for c in &spec.schema.columns {
            if schema.fields.iter().any(|f| f.name.eq_ignore_ascii_case(&c.name)) {
                return Err(SqlError::unpositioned(format!(
                    "source `{}` declares column `{}` twice",
                    spec.name, c.name
                )));
            }
            origins.push(origin(&spec.name, c)?);
            schema.push(
                c.name.clone(),
                DataType::of_column(&c.type_)
                    .map_err(|e| SqlError::unpositioned(format!("source `{}`: column `{}`: {e}", spec.name, c.name)))?,
            );
            required.push(c.required);
        }
        nested_fields_agree(&spec.name, &schema)?;
        // Plain top-level fields need no record of their origin, which
        // keeps the serialised plan (and its fingerprint) of every source
        // that has only those exactly as before origins existed.
        if origins.iter().all(|o| matches!(o, ColumnOrigin::Field(path) if path.len() == 1)) {
            origins.clear();
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
                let t = &spec.schema.columns[column].type_;
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
        Ok(Self {
            name: spec.name.clone(),
            schema,
            required,
            event_time,
            partition_key: spec.partition_key.clone(),
            origins,
        })
    }

    /// Where column `i` comes from.
    pub fn origin(&self, i: usize) -> ColumnOrigin {
        self.origins.get(i).cloned().unwrap_or_else(|| ColumnOrigin::field(&self.schema.fields[i].name))
    }
}

/// A column's origin, checking that its type suits it.
fn origin(source: &str, c: &sluice_crds::ColumnSpec) -> Result<ColumnOrigin, SqlError> {
    let Some(what) = c.metadata else {
        if c.header.is_some() {
            return Err(SqlError::unpositioned(format!(
                "source `{source}`: column `{}` names a header but is not a `metadata: header` column",
                c.name
            )));
        }
        let path: Vec<String> = c.name.split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            return Err(SqlError::unpositioned(format!(
                "source `{source}`: column `{}` has an empty part in its dotted path",
                c.name
            )));
        }
        return Ok(ColumnOrigin::Field(path));
    };
    let fits = match what {
        RecordMetadata::Key | RecordMetadata::Header => true,
        RecordMetadata::Timestamp | RecordMetadata::ProcessingTime => {
            matches!(c.type_, ColumnType::Timestamp | ColumnType::Bigint)
        }
        RecordMetadata::Partition | RecordMetadata::Offset => c.type_ == ColumnType::Bigint,
        RecordMetadata::Headers => c.type_ == ColumnType::String,
    };
    let name = what.as_str();
    if !fits {
        let wanted = match what {
            RecordMetadata::Timestamp | RecordMetadata::ProcessingTime => "timestamp or bigint",
            RecordMetadata::Headers => "string",
            _ => "bigint",
        };
        return Err(SqlError::unpositioned(format!(
            "source `{source}`: metadata column `{}` reads the record's {name}, which is a {wanted} column, not {}",
            c.name,
            c.type_.name()
        )));
    }
    if c.name.contains('.') {
        return Err(SqlError::unpositioned(format!(
            "source `{source}`: metadata column `{}` cannot hold a dot (a dot addresses a nested field of the value)",
            c.name
        )));
    }
    let header = match (what, &c.header) {
        (RecordMetadata::Header, Some(h)) if !h.is_empty() => Some(h.clone()),
        (RecordMetadata::Header, _) => {
            return Err(SqlError::unpositioned(format!(
                "source `{source}`: column `{}` is `metadata: header` without the `header` it reads",
                c.name
            )));
        }
        (_, Some(_)) => {
            return Err(SqlError::unpositioned(format!(
                "source `{source}`: column `{}` names a header but reads the record's {name}",
                c.name
            )));
        }
        (_, None) => None,
    };
    Ok(ColumnOrigin::Metadata { what, header })
}

/// A field cannot be both a value and an object holding others: `bid` and
/// `bid.price` together describe no JSON record.
fn nested_fields_agree(source: &str, schema: &Schema) -> Result<(), SqlError> {
    for outer in schema.names() {
        for inner in schema.names() {
            if inner.len() > outer.len()
                && inner.as_bytes()[outer.len()] == b'.'
                && inner[..outer.len()].eq_ignore_ascii_case(outer)
            {
                return Err(SqlError::unpositioned(format!(
                    "source `{source}`: column `{outer}` cannot be a value when `{inner}` makes it an object"
                )));
            }
        }
    }
    Ok(())
}
