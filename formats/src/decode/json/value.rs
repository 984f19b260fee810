//! One JSON value into a flat column: the visitor every JSON path shares
//! (a record's field, a nested value's element, a metadata column's
//! text), and the names its errors give.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};

use sluice_plan::time::{MAX_TIMESTAMP_MS, parse_timestamp_ms};
use sluice_plan::{Column, DataType};

/// Where in a nested value the decoder is: the column, then each step.
#[derive(Debug, Clone, Default)]
pub(crate) struct NestedPath {
    column: Vec<u8>,
    steps: Vec<Step>,
    /// The text of the map keys in `steps`, back to back.
    pub(super) keys: String,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    Index(usize),
    Field(&'static str),
    /// A map key: `keys[start..end]`.
    Key(usize, usize),
}

impl NestedPath {
    pub(crate) fn start(&mut self, column: &[u8]) {
        // Room kept from record to record: nothing allocated per record.
        self.column.clear();
        self.column.extend_from_slice(column);
        self.steps.clear();
        self.keys.clear();
    }

    pub(super) fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    pub(super) fn pop(&mut self) {
        if let Some(Step::Key(start, _)) = self.steps.pop() {
            self.keys.truncate(start);
        }
    }
}

impl fmt::Display for NestedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.column))?;
        for step in &self.steps {
            match *step {
                // 1-based, as SQL's `items[i]` reads it.
                Step::Index(i) => write!(f, "[{}]", i + 1)?,
                Step::Field(name) => write!(f, ".{name}")?,
                Step::Key(start, end) => write!(f, "[{:?}]", &self.keys[start..end])?,
            }
        }
        Ok(())
    }
}

/// What an error calls the value being read: a column, or a place in a
/// nested one.
#[derive(Clone, Copy)]
pub(crate) enum FieldName<'a> {
    Column(&'a [u8]),
    Path(&'a NestedPath),
}

impl fmt::Display for FieldName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Column(name) => f.write_str(&String::from_utf8_lossy(name)),
            Self::Path(path) => path.fmt(f),
        }
    }
}

/// Parses one field's value into its column (or only checks it when the
/// query does not read the column).
pub(crate) struct ValueSeed<'a> {
    pub(crate) name: FieldName<'a>,
    pub(crate) data_type: DataType,
    pub(crate) required: bool,
    pub(crate) time_bounded: bool,
    pub(crate) column: Option<&'a mut Column>,
}

impl ValueSeed<'_> {
    fn mismatch<E: de::Error>(&self, got: fmt::Arguments<'_>) -> E {
        E::custom(format_args!("field `{}`: expected {}, got {got}", self.name, self.data_type))
    }

    fn push_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        if self.time_bounded && !(-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&v) {
            return Err(self.mismatch(format_args!("{v}, outside ±{MAX_TIMESTAMP_MS} ms from the epoch")));
        }
        if let Some(c) = self.column {
            c.push_i64(v).map_err(E::custom)?;
        }
        Ok(())
    }

    /// A decimal read from `text` (a number's digits or a string), rounded
    /// to the column's scale; a value too large for it is an error.
    fn push_decimal<E: de::Error>(self, shown: &dyn fmt::Display, read: Option<i128>) -> Result<(), E> {
        match read {
            Some(v) => {
                if let Some(c) = self.column {
                    c.push_decimal(v).map_err(E::custom)?;
                }
                Ok(())
            }
            None => Err(self.mismatch(format_args!("{shown}, which does not fit {}", self.data_type))),
        }
    }

    /// A decimal column's raw JSON value: a number, a string of one, or
    /// null.
    fn decimal_text<E: de::Error>(self, raw: &str, p: u8, s: u8) -> Result<(), E> {
        match raw.as_bytes().first() {
            Some(b'n') => self.visit_unit(),
            Some(b'"') => {
                let text: std::borrow::Cow<'_, str> = serde_json::from_str(raw).map_err(E::custom)?;
                self.push_decimal(
                    &format_args!("string {:?}", shorten(&text)),
                    sluice_plan::decimal::parse(&text, p, s),
                )
            }
            Some(b'-' | b'0'..=b'9') => self.push_decimal(&raw, sluice_plan::decimal::parse(raw, p, s)),
            _ => Err(self.mismatch(format_args!("{}", shorten(raw)))),
        }
    }

    fn push_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if let Some(c) = self.column {
            c.push_f64(v).map_err(E::custom)?;
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // A decimal is read from its text, every digit of it: the visitor
        // would see a number only as a double (15 to 17 digits), and the
        // flat path reads the text too, so both paths agree.
        if let DataType::Decimal(p, s) = self.data_type {
            let raw = <&'de serde_json::value::RawValue as de::Deserialize<'de>>::deserialize(d)?;
            return self.decimal_text(raw.get(), p, s);
        }
        // Columns the query does not read are still type-checked (the
        // visitor stores nothing when `column` is None): a declared column
        // holding the wrong type makes the record a dead letter either way.
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} value", self.data_type)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        match self.data_type {
            DataType::Bigint | DataType::Timestamp => self.push_i64(v),
            #[allow(clippy::cast_precision_loss)]
            DataType::Double => self.push_f64(v as f64),
            DataType::Decimal(p, s) => self.push_decimal(&v, sluice_plan::decimal::rescale(i128::from(v), 0, s, p)),
            _ => Err(self.mismatch(format_args!("number {v}"))),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        match (self.data_type, i64::try_from(v)) {
            (DataType::Bigint | DataType::Timestamp, Ok(x)) => self.push_i64(x),
            #[allow(clippy::cast_precision_loss)]
            (DataType::Double, _) => self.push_f64(v as f64),
            (DataType::Decimal(p, s), _) => {
                self.push_decimal(&v, sluice_plan::decimal::rescale(i128::from(v), 0, s, p))
            }
            _ => Err(self.mismatch(format_args!("number {v}"))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match self.data_type {
            DataType::Double => self.push_f64(v),
            // 150.0 is a fine bigint; 150.5 is not.
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
            DataType::Bigint | DataType::Timestamp if v.fract() == 0.0 && v.abs() < 9.0e18 => self.push_i64(v as i64),
            // The double's shortest text: exact for the 15 significant
            // digits a double holds (flat records read the text itself).
            DataType::Decimal(p, s) => self.push_decimal(&v, sluice_plan::decimal::from_f64(v, p, s)),
            _ => Err(self.mismatch(format_args!("number {v}"))),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if self.data_type != DataType::Boolean {
            return Err(self.mismatch(format_args!("boolean {v}")));
        }
        if let Some(c) = self.column {
            c.push_bool(v).map_err(E::custom)?;
        }
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        match self.data_type {
            DataType::String => {
                if let Some(c) = self.column {
                    c.push_str(v).map_err(E::custom)?;
                }
                Ok(())
            }
            DataType::Timestamp => match parse_timestamp_ms(v) {
                Some(ms) => self.push_i64(ms),
                // Shortened as every value in a reason is: reasons are logged.
                None => Err(self.mismatch(format_args!("string {:?}, which is not an RFC 3339 timestamp", shorten(v)))),
            },
            // Debezium's `decimal.handling.mode: string`, and any producer
            // that keeps every digit by quoting them.
            DataType::Decimal(p, s) => {
                self.push_decimal(&format_args!("string {:?}", shorten(v)), sluice_plan::decimal::parse(v, p, s))
            }
            _ => {
                let shown = shorten(v);
                Err(self.mismatch(format_args!("string {shown:?}")))
            }
        }
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        if self.required {
            return Err(E::custom(format_args!("required field `{}` is null", self.name)));
        }
        if let Some(c) = self.column {
            c.push_null();
        }
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<(), A::Error> {
        Err(self.mismatch(format_args!("an object")))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _seq: A) -> Result<(), A::Error> {
        Err(self.mismatch(format_args!("an array")))
    }
}

/// At most 40 characters of a value, for an error message.
pub(super) fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}
