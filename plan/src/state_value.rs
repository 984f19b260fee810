//! A value read back from state: flat values borrowed from the checkpoint's
//! bytes as [`ScalarRef`]s are (a join's page read back allocates no
//! string), a nested one owned — serde hands a value's parts to a visitor,
//! never its raw bytes, so an array or a row cannot be borrowed whole.
//!
//! It reads what [`Scalar`] and [`ScalarRef`] write (the same enum, the
//! same variants in the same order), so state written before nested
//! values existed reads as it did.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, EnumAccess, SeqAccess, VariantAccess, Visitor};

use crate::{NestedRef, Scalar, ScalarRef};

/// A state value: flat and borrowed, or nested and owned.
#[derive(Debug, Clone, PartialEq)]
pub enum StateValue<'a> {
    Flat(ScalarRef<'a>),
    Nested(Scalar),
}

impl StateValue<'_> {
    /// The value, borrowed.
    pub fn as_ref(&self) -> ScalarRef<'_> {
        match self {
            Self::Flat(v) => *v,
            Self::Nested(s @ Scalar::List(_)) => ScalarRef::List(NestedRef::Scalar(s)),
            Self::Nested(s @ Scalar::Map(_)) => ScalarRef::Map(NestedRef::Scalar(s)),
            Self::Nested(s @ Scalar::Row(_)) => ScalarRef::Row(NestedRef::Scalar(s)),
            Self::Nested(s) => s.borrowed(),
        }
    }
}

const VARIANTS: &[&str] =
    &["Null", "Bigint", "Double", "String", "Boolean", "Timestamp", "Decimal", "List", "Map", "Row"];

impl<'de: 'a, 'a> Deserialize<'de> for StateValue<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum("Scalar", VARIANTS, ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = StateValue<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Scalar")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let (index, v): (u32, _) = data.variant()?;
        Ok(match index {
            0 => {
                v.unit_variant()?;
                StateValue::Flat(ScalarRef::Null)
            }
            1 => StateValue::Flat(ScalarRef::Bigint(v.newtype_variant()?)),
            2 => StateValue::Flat(ScalarRef::Double(v.newtype_variant()?)),
            3 => StateValue::Flat(ScalarRef::String(v.newtype_variant::<&'de str>()?)),
            4 => StateValue::Flat(ScalarRef::Boolean(v.newtype_variant()?)),
            5 => StateValue::Flat(ScalarRef::Timestamp(v.newtype_variant()?)),
            6 => {
                let (x, s) = v.tuple_variant(2, DecimalVisitor)?;
                StateValue::Flat(ScalarRef::Decimal(x, s))
            }
            7 => StateValue::Nested(Scalar::List(v.newtype_variant()?)),
            8 => StateValue::Nested(Scalar::Map(v.newtype_variant()?)),
            9 => StateValue::Nested(Scalar::Row(v.newtype_variant()?)),
            other => return Err(de::Error::custom(format_args!("value variant {other}"))),
        })
    }
}

struct DecimalVisitor;

impl<'de> Visitor<'de> for DecimalVisitor {
    type Value = (i128, u8);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a decimal's unscaled value and scale")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let x = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let s = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
        Ok((x, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_value_reads_back_as_written_flat_ones_borrowed() {
        let values = vec![
            Scalar::Null,
            Scalar::Bigint(-7),
            Scalar::Double(1.5),
            Scalar::String("é".into()),
            Scalar::Boolean(true),
            Scalar::Timestamp(1_700_000_000_000),
            Scalar::Decimal(-12345, 2),
            Scalar::List(vec![Scalar::Bigint(1), Scalar::Null]),
            Scalar::Map(vec![(Scalar::String("k".into()), Scalar::Row(vec![Scalar::Boolean(false)]))]),
            Scalar::Row(vec![Scalar::String("a".into()), Scalar::List(vec![])]),
        ];
        let bytes = postcard::to_allocvec(&values).unwrap();
        let read: Vec<StateValue<'_>> = postcard::from_bytes(&bytes).unwrap();
        let back: Vec<Scalar> = read.iter().map(|v| v.as_ref().to_scalar()).collect();
        assert_eq!(back, values);
        assert!(matches!(read[3], StateValue::Flat(ScalarRef::String(_))), "strings stay borrowed");
    }
}
