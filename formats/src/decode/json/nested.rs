//! JSON arrays and objects into `array`, `map` and `row` columns.
//!
//! Values go straight into the column's child columns (an array's
//! elements into the one child column of the batch, a row's fields into
//! one column each), with the flat value visitor ([`ValueSeed`]) for flat
//! elements. A value that does not fit fails the whole record with the
//! path to it (`items[3].price`), built only when it fails: descending
//! pushes a step onto [`NestedPath`], which keeps its room across records.
//! The record's rollback then takes back every element it had pushed
//! (`Column::truncate` cuts a list's child at the row's offset).

use std::fmt;

use serde::de::{self, DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};

use sluice_plan::{Column, ColumnData, DataType};

use super::value::{FieldName, NestedPath, Step, ValueSeed};

/// Reads one nested value into `column`, of the column's type.
pub(crate) struct NestedSeed<'a> {
    pub(crate) path: &'a mut NestedPath,
    pub(crate) column: &'a mut Column,
    pub(crate) required: bool,
}

impl NestedSeed<'_> {
    fn mismatch<E: de::Error>(&self, got: fmt::Arguments<'_>) -> E {
        E::custom(format_args!("field `{}`: expected {}, got {got}", self.path, self.column.data_type))
    }
}

/// Reads one element (or field, or map value) into `column`.
fn element<'de, D: de::Deserializer<'de>>(path: &mut NestedPath, column: &mut Column, d: D) -> Result<(), D::Error> {
    let t = column.data_type;
    if t.is_nested() {
        NestedSeed { path, column, required: false }.deserialize(d)
    } else {
        ValueSeed {
            name: FieldName::Path(path),
            data_type: t,
            required: false,
            time_bounded: t == DataType::Timestamp,
            column: Some(column),
        }
        .deserialize(d)
    }
}

/// [`element`] as a seed.
struct Element<'a> {
    path: &'a mut NestedPath,
    column: &'a mut Column,
}

impl<'de> DeserializeSeed<'de> for Element<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        element(self.path, self.column, d)
    }
}

impl<'de> DeserializeSeed<'de> for NestedSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NestedSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} value", self.column.data_type)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        if self.required {
            return Err(E::custom(format_args!("required field `{}` is null", self.path)));
        }
        self.column.push_null();
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Self { path, column, .. } = self;
        let ColumnData::List(list) = &mut column.data else {
            return Err(NestedSeed { path, column, required: false }.mismatch(format_args!("an array")));
        };
        if matches!(column.data_type, DataType::Map(_)) {
            return Err(A::Error::custom(format_args!(
                "field `{path}`: expected {} (a JSON object), got an array",
                column.data_type
            )));
        }
        let mut i = 0;
        loop {
            path.push(Step::Index(i));
            let more = seq.next_element_seed(Element { path, column: &mut list.values })?;
            path.pop();
            if more.is_none() {
                break;
            }
            i += 1;
        }
        column.end_nested_row().map_err(A::Error::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let t = self.column.data_type;
        let Self { path, column, .. } = self;
        match (&mut column.data, t) {
            (ColumnData::List(list), DataType::Map(_)) => {
                let ColumnData::Struct(entries) = &mut list.values.data else {
                    return Err(A::Error::custom("a map column without its entries"));
                };
                let (keys, values) = entries.fields.split_at_mut(1);
                let (keys, values) = (&mut keys[0], &mut values[0]);
                let mut n = 0;
                while let Some(()) = map.next_key_seed(MapKey { path, column: keys })? {
                    map.next_value_seed(Element { path, column: values })?;
                    path.pop();
                    n += 1;
                }
                entries.len += n;
                list.values.mark_valid(n);
                column.end_nested_row().map_err(A::Error::custom)
            }
            (ColumnData::Struct(row), DataType::Row(_)) => {
                let fields = t.fields();
                // Which fields this object gave: a bit each (up to 64), or
                // a vector for wider rows.
                let mut seen = Seen::new(fields.len());
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let found = fields
                        .iter()
                        .position(|(n, _)| *n == key)
                        .or_else(|| fields.iter().position(|(n, _)| n.eq_ignore_ascii_case(&key)));
                    let Some(f) = found else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    if seen.set(f) {
                        return Err(A::Error::custom(format_args!("field `{path}`: duplicate field `{key}`")));
                    }
                    path.push(Step::Field(&fields[f].0));
                    map.next_value_seed(Element { path, column: &mut row.fields[f] })?;
                    path.pop();
                }
                for (f, c) in row.fields.iter_mut().enumerate() {
                    if !seen.get(f) {
                        c.push_null();
                    }
                }
                row.len += 1;
                column.mark_valid(1);
                Ok(())
            }
            _ => Err(NestedSeed { path, column, required: false }.mismatch(format_args!("an object"))),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        Err(self.mismatch(format_args!("boolean {v}")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        Err(self.mismatch(format_args!("number {v}")))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        Err(self.mismatch(format_args!("number {v}")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        Err(self.mismatch(format_args!("number {v}")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let shown: String = v.chars().take(40).collect();
        Err(self.mismatch(format_args!("string {shown:?}")))
    }
}

/// A map's key into its key column (a `bigint` key from the text of an
/// integer), and onto the path for the value after it.
struct MapKey<'a> {
    path: &'a mut NestedPath,
    column: &'a mut Column,
}

impl<'de> DeserializeSeed<'de> for MapKey<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for MapKey<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let start = self.path.keys.len();
        self.path.keys.push_str(v);
        self.path.push(Step::Key(start, self.path.keys.len()));
        match self.column.data_type {
            DataType::Bigint => match v.parse::<i64>() {
                Ok(k) => self.column.push_i64(k).map_err(E::custom),
                Err(_) => {
                    Err(E::custom(format_args!("field `{}`: a bigint map key that is not an integer", self.path)))
                }
            },
            _ => self.column.push_str(v).map_err(E::custom),
        }
    }
}

/// The fields one JSON object gave.
enum Seen {
    Bits(u64),
    Wide(Vec<bool>),
}

impl Seen {
    fn new(fields: usize) -> Self {
        if fields <= 64 { Self::Bits(0) } else { Self::Wide(vec![false; fields]) }
    }

    /// Marks field `f`; whether it was marked already.
    fn set(&mut self, f: usize) -> bool {
        match self {
            Self::Bits(b) => std::mem::replace(b, *b | (1 << f)) & (1 << f) != 0,
            Self::Wide(v) => std::mem::replace(&mut v[f], true),
        }
    }

    fn get(&self, f: usize) -> bool {
        match self {
            Self::Bits(b) => b & (1 << f) != 0,
            Self::Wide(v) => v[f],
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::Scalar;

    use super::super::JsonDecoder;

    fn decoder(sql: &str) -> JsonDecoder {
        let t = |s: &str| ColumnType::parse(s).unwrap();
        let source = SourceSpec::table(
            "orders",
            &[
                ("id", ColumnType::Bigint, true),
                ("items", t("array<row<sku string, qty bigint, price decimal(9,2)>>"), false),
                ("attrs", t("map<string, string>"), false),
                ("tags", t("array<array<bigint>>"), false),
            ],
        );
        JsonDecoder::new(&sluice_sql::plan_query(sql, &[source]).unwrap())
    }

    fn item(sku: &str, qty: i64, cents: i128) -> Scalar {
        Scalar::Row(vec![Scalar::String(sku.into()), Scalar::Bigint(qty), Scalar::Decimal(cents, 2)])
    }

    #[test]
    fn arrays_maps_and_rows_fill_nested_columns() {
        let mut d = decoder("SELECT id, items, attrs, tags FROM orders");
        let mut b = d.new_batch(4);
        d.decode(
            br#"{"id":1,"items":[{"sku":"a","qty":2,"price":"1.50"},{"QTY":1,"sku":"b","price":0.1,"x":[1]}],
                "attrs":{"color":"red","size":"L"},"tags":[[1,2],[],null]}"#,
            &mut b,
        )
        .unwrap();
        d.decode(br#"{"id":2,"items":[],"attrs":null}"#, &mut b).unwrap();
        d.decode(br#"{"id":3,"items":[{"sku":"c"}],"attrs":{}}"#, &mut b).unwrap();
        assert_eq!(b.len, 3);
        assert_eq!(b.columns[1].scalar(0), Scalar::List(vec![item("a", 2, 150), item("b", 1, 10)]));
        assert_eq!(b.columns[1].scalar(1), Scalar::List(vec![]));
        assert_eq!(
            b.columns[1].scalar(2),
            Scalar::List(vec![Scalar::Row(vec![Scalar::String("c".into()), Scalar::Null, Scalar::Null])])
        );
        assert_eq!(
            b.columns[2].scalar(0),
            Scalar::Map(vec![
                (Scalar::String("color".into()), Scalar::String("red".into())),
                (Scalar::String("size".into()), Scalar::String("L".into())),
            ])
        );
        assert_eq!((b.columns[2].scalar(1), b.columns[3].scalar(1)), (Scalar::Null, Scalar::Null));
        assert_eq!(b.columns[2].scalar(2), Scalar::Map(vec![]));
        assert_eq!(
            b.columns[3].scalar(0),
            Scalar::List(vec![
                Scalar::List(vec![Scalar::Bigint(1), Scalar::Bigint(2)]),
                Scalar::List(vec![]),
                Scalar::Null
            ])
        );
    }

    #[test]
    fn a_malformed_element_fails_the_record_naming_its_path_and_leaves_nothing_behind() {
        let mut d = decoder("SELECT id, items, attrs, tags FROM orders");
        let mut b = d.new_batch(4);
        d.decode(br#"{"id":1,"items":[{"sku":"a"}]}"#, &mut b).unwrap();
        for (record, says) in [
            (
                &br#"{"id":2,"items":[{"sku":"a"},{"sku":"b"},{"sku":"c","price":"x"}]}"#[..],
                "field `items[3].price`: expected decimal(9,2)",
            ),
            (br#"{"id":2,"items":{"sku":"a"}}"#, "field `items`: expected array<row<"),
            (br#"{"id":2,"tags":[[1],[2,"x"]]}"#, "field `tags[2][2]`: expected bigint, got string \"x\""),
            (br#"{"id":2,"attrs":{"a":"1","b":2}}"#, "field `attrs[\"b\"]`: expected string, got number 2"),
            (br#"{"id":2,"attrs":["a"]}"#, "field `attrs`: expected map<string, string> (a JSON object), got an array"),
            (br#"{"id":2,"items":[{"sku":"a","sku":"b"}]}"#, "field `items[1]`: duplicate field `sku`"),
        ] {
            let e = d.decode(record, &mut b).unwrap_err().0;
            assert!(e.contains(says), "{e}");
            assert_eq!(b.len, 1);
            for c in &b.columns {
                assert_eq!(c.len(), 1, "a failed record leaves no element behind");
            }
        }
        d.decode(br#"{"id":3,"items":[{"sku":"z"}]}"#, &mut b).unwrap();
        assert_eq!(
            b.columns[1].scalar(1),
            Scalar::List(vec![Scalar::Row(vec![Scalar::String("z".into()), Scalar::Null, Scalar::Null])])
        );
    }

    #[test]
    fn a_nested_column_the_query_never_reads_is_skipped_unread() {
        let mut d = decoder("SELECT id FROM orders");
        let mut b = d.new_batch(1);
        d.decode(br#"{"id":1,"items":"not even an array","tags":[[{"deep":[1]}]]}"#, &mut b).unwrap();
        assert_eq!(b.columns[0].scalar(0), Scalar::Bigint(1));
    }
}
