//! Avro arrays, maps and records into `array`, `map` and `row` columns.
//!
//! A writer type is resolved against the column's type once per writer
//! schema, as the flat columns are ([`compile`]): an `array` against an
//! `array<T>` (items against `T`), a `map` against a `map<K, V>` (Avro's
//! keys are strings; a `bigint` key reads the text of an integer), a
//! `record` against a `row<…>` — fields matched by name, exactly and then
//! ignoring case, writer fields the row lacks skipped, row fields the
//! writer lacks NULL — and a union branch by branch. Records then decode
//! straight into the column's child columns ([`Reader`]).
//!
//! A value that does not fit fails the record with the path to it
//! (`items[3].price`); the record's rollback takes back what it pushed.

use sluice_plan::{Column, ColumnData, DataType};

use super::super::nested_path::{Path, Step, render};
use super::schema::{Type, TypeId};
use super::values::{Budget, Conv, Counted, Cursor, Target, blocks, conv, read_into, skip};

/// A writer value resolved against a nested column's type.
#[derive(Debug, Clone)]
pub(super) enum Nested {
    /// A flat value into the column.
    Value(Conv),
    /// A `null` into the column.
    Null,
    Array(Box<Nested>),
    Map {
        bigint_keys: bool,
        value: Box<Nested>,
    },
    /// Per writer field, in the writer's order: the row field it fills
    /// (`None`: skipped); then the row fields no writer field fills.
    Record {
        fields: Vec<(Option<usize>, TypeId, Nested)>,
        absent: Vec<usize>,
    },
    Union(Vec<Nested>),
    /// A branch the column cannot take: the record fails with this reason.
    Fail(String),
}

/// Resolves writer type `ty` against column type `t`; an error says why
/// no value of it fits.
pub(super) fn compile(
    types: &[Type],
    ty: TypeId,
    t: DataType,
    symbols: &mut Vec<Vec<String>>,
    depth: usize,
) -> Result<Nested, String> {
    if depth > 64 {
        return Err("a type nested more than 64 levels".into());
    }
    Ok(match (&types[ty], t) {
        (Type::Union(branches), _) => Nested::Union(
            branches.iter().map(|&b| compile(types, b, t, symbols, depth + 1).unwrap_or_else(Nested::Fail)).collect(),
        ),
        (Type::Null, _) => Nested::Null,
        (Type::Array(item), DataType::Array(_)) => {
            let element = t.element().unwrap_or(DataType::Null);
            Nested::Array(Box::new(compile(types, *item, element, symbols, depth + 1)?))
        }
        (Type::Map(value), DataType::Map(_)) => {
            let (k, v) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            Nested::Map {
                bigint_keys: k == DataType::Bigint,
                value: Box::new(compile(types, *value, v, symbols, depth + 1)?),
            }
        }
        (Type::Record { fields: writer, .. }, DataType::Row(_)) => {
            let row = t.fields();
            let mut filled = vec![false; row.len()];
            let mut fields = Vec::with_capacity(writer.len());
            for f in writer {
                let at = row
                    .iter()
                    .position(|(n, _)| *n == f.name)
                    .or_else(|| row.iter().position(|(n, _)| n.eq_ignore_ascii_case(&f.name)))
                    .filter(|&i| !filled[i]);
                match at {
                    Some(i) => {
                        filled[i] = true;
                        let read = compile(types, f.ty, row[i].1, symbols, depth + 1)
                            .map_err(|e| format!("field `{}`: {e}", f.name))?;
                        fields.push((Some(i), f.ty, read));
                    }
                    None => fields.push((None, f.ty, Nested::Null)),
                }
            }
            let absent = (0..row.len()).filter(|&i| !filled[i]).collect();
            Nested::Record { fields, absent }
        }
        (other, t) if !t.is_nested() => match conv(other, t, symbols) {
            Some(c) => Nested::Value(c),
            None => return Err(format!("the writer's {} cannot be read as {t}", other.describe())),
        },
        (other, t) => return Err(format!("the writer's {} cannot be read as {t}", other.describe())),
    })
}

/// Reads one record's value of a nested column.
pub(super) struct Reader<'a> {
    pub(super) types: &'a [Type],
    pub(super) symbols: &'a [Vec<String>],
    pub(super) budget: &'a mut Budget,
    /// The column's name, for errors.
    name: &'a [u8],
    path: &'a mut Path,
}

impl<'a> Reader<'a> {
    pub(super) fn new(
        types: &'a [Type],
        symbols: &'a [Vec<String>],
        budget: &'a mut Budget,
        name: &'a [u8],
        path: &'a mut Path,
    ) -> Self {
        path.clear();
        Self { types, symbols, budget, name, path }
    }

    /// Where the reader is: `items[3].price`.
    fn at(&self) -> String {
        render(self.name, self.path)
    }

    /// Reads a value of `read` into `column` (`None`: checked, not kept).
    pub(super) fn read(
        &mut self,
        read: &Nested,
        cur: &mut Cursor<'_>,
        column: Option<&mut Column>,
    ) -> Result<(), String> {
        self.budget.enter()?;
        let done = self.read_value(read, cur, column);
        self.budget.leave();
        done
    }

    fn read_value(&mut self, read: &Nested, cur: &mut Cursor<'_>, column: Option<&mut Column>) -> Result<(), String> {
        match read {
            Nested::Value(c) => {
                let time_bounded = column.as_ref().is_some_and(|c| c.data_type == DataType::Timestamp);
                let at = || self.at();
                read_into(*c, cur, self.symbols, Target { column, time_bounded, name: &at })
            }
            Nested::Null => {
                if let Some(c) = column {
                    c.push_null();
                }
                Ok(())
            }
            Nested::Fail(why) => Err(format!("`{}`: {why}", self.at())),
            Nested::Union(branches) => {
                let b = cur.long()?;
                let branch = usize::try_from(b).ok().and_then(|b| branches.get(b));
                let branch =
                    branch.ok_or_else(|| format!("`{}`: union branch {b} of {}", self.at(), branches.len()))?;
                self.read(branch, cur, column)
            }
            Nested::Array(item) => {
                let mut column = column;
                let t = column.as_ref().map_or(DataType::Null, |c| c.data_type);
                let mut i = 0;
                blocks(self, cur, |reader, cur| {
                    reader.path.push((Step::Index(i), t));
                    let values = column.as_deref_mut().and_then(list_values);
                    reader.read(item, cur, values)?;
                    reader.path.pop();
                    i += 1;
                    Ok(())
                })?;
                end_row(column)
            }
            Nested::Map { bigint_keys, value } => {
                let mut column = column;
                let t = column.as_ref().map_or(DataType::Null, |c| c.data_type);
                let mut i = 0;
                blocks(self, cur, |reader, cur| {
                    reader.path.push((Step::Entry(i), t));
                    let key = cur.text().map_err(|e| format!("`{}`: {e}", reader.at()))?;
                    let entries = column.as_deref_mut().and_then(list_values);
                    let (keys, values) = match entries.map(|e| &mut e.data) {
                        Some(ColumnData::Struct(s)) if s.fields.len() == 2 => {
                            s.len += 1;
                            let (k, v) = s.fields.split_at_mut(1);
                            (Some(&mut k[0]), Some(&mut v[0]))
                        }
                        _ => (None, None),
                    };
                    if let Some(keys) = keys {
                        let pushed = if *bigint_keys {
                            let k = key.parse::<i64>().map_err(|_| {
                                format!("`{}`: a bigint map key {:?} that is not an integer", reader.at(), key)
                            })?;
                            keys.push_i64(k)
                        } else {
                            keys.push_str(key)
                        };
                        pushed.map_err(|e| e.to_string())?;
                    }
                    reader.read(value, cur, values)?;
                    if let Some(entries) = column.as_deref_mut().and_then(list_values) {
                        entries.mark_valid(1);
                    }
                    reader.path.pop();
                    i += 1;
                    Ok(())
                })?;
                end_row(column)
            }
            Nested::Record { fields, absent } => {
                let t = column.as_ref().map_or(DataType::Null, |c| c.data_type);
                let mut column = column;
                for (at, ty, read) in fields {
                    match at {
                        Some(f) => {
                            self.path.push((Step::Field(*f), t));
                            let field = column.as_deref_mut().and_then(|c| match &mut c.data {
                                ColumnData::Struct(s) => s.fields.get_mut(*f),
                                _ => None,
                            });
                            self.read(read, cur, field)?;
                            self.path.pop();
                        }
                        None => skip(self.types, *ty, cur, self.budget)?,
                    }
                }
                if let Some(c) = column {
                    if let ColumnData::Struct(s) = &mut c.data {
                        for &f in absent {
                            s.fields[f].push_null();
                        }
                        s.len += 1;
                    }
                    c.mark_valid(1);
                }
                Ok(())
            }
        }
    }
}

impl Counted for Reader<'_> {
    fn budget(&mut self) -> &mut Budget {
        self.budget
    }
}

/// The child column of an array or map column.
fn list_values(c: &mut Column) -> Option<&mut Column> {
    match &mut c.data {
        ColumnData::List(l) => Some(&mut l.values),
        _ => None,
    }
}

fn end_row(column: Option<&mut Column>) -> Result<(), String> {
    match column {
        Some(c) => c.end_nested_row().map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::Scalar;

    use super::super::AvroDecoder;
    use super::super::tests::Datum;

    const ORDER: &str = r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
            {"name":"sku","type":"string"},
            {"name":"note","type":["null","string"],"default":null},
            {"name":"qty","type":"int"},
            {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}}},
        {"name":"attrs","type":["null",{"type":"map","values":"string"}],"default":null},
        {"name":"tags","type":{"type":"array","items":["null","long"]}}
    ]}"#;

    fn decoder(sql: &str) -> AvroDecoder {
        let t = |s: &str| ColumnType::parse(s).unwrap();
        let source = SourceSpec::table(
            "orders",
            &[
                ("id", ColumnType::Bigint, true),
                ("items", t("array<row<SKU string, qty bigint, price decimal(9,2), missing string>>"), false),
                ("attrs", t("map<string, string>"), false),
                ("tags", t("array<bigint>"), false),
            ],
        );
        let mut d = AvroDecoder::new(&sluice_sql::plan_query(sql, &[source]).unwrap());
        d.add_schema(1, ORDER);
        d
    }

    /// An order: id 7, two items (one in each of two blocks, the second
    /// block with its byte size), attrs {color: red}, tags [1, null].
    fn order() -> Datum {
        Datum::framed(1)
            .long(7)
            .long(1)
            .string("a")
            .long(0)
            .long(2)
            .bytes(&[0x00, 0x96])
            .long(-1)
            .long(6)
            .string("b")
            .long(1)
            .string("gift")
            .long(1)
            .bytes(&[0x0a])
            .long(0)
            .long(1)
            .long(1)
            .string("color")
            .string("red")
            .long(0)
            .long(2)
            .long(1)
            .long(1)
            .long(0)
            .long(0)
    }

    #[test]
    fn arrays_of_records_maps_and_unions_fill_nested_columns() {
        let mut d = decoder("SELECT id, items, attrs, tags FROM orders");
        let mut b = d.new_batch(2);
        d.decode(&order().0, &mut b).unwrap();
        let item = |sku: &str, qty, cents| {
            Scalar::Row(vec![Scalar::String(sku.into()), Scalar::Bigint(qty), Scalar::Decimal(cents, 2), Scalar::Null])
        };
        assert_eq!(b.columns[1].scalar(0), Scalar::List(vec![item("a", 2, 150), item("b", 1, 10)]));
        assert_eq!(
            b.columns[2].scalar(0),
            Scalar::Map(vec![(Scalar::String("color".into()), Scalar::String("red".into()))])
        );
        assert_eq!(b.columns[3].scalar(0), Scalar::List(vec![Scalar::Bigint(1), Scalar::Null]));
    }

    #[test]
    fn a_bad_element_fails_the_record_naming_its_path_and_leaves_nothing() {
        let mut d = decoder("SELECT id, items, attrs, tags FROM orders");
        let mut b = d.new_batch(2);
        d.decode(&order().0, &mut b).unwrap();
        // The second item's price: 0x7f repeated past any decimal(9,2).
        let bad = Datum::framed(1)
            .long(8)
            .long(2)
            .string("a")
            .long(0)
            .long(2)
            .bytes(&[0x01])
            .string("b")
            .long(0)
            .long(2)
            .bytes(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff])
            .long(0)
            .long(0)
            .long(0);
        let e = d.decode(&bad.0, &mut b).unwrap_err().0;
        assert!(e.contains("items[2].price"), "{e}");
        assert_eq!(b.len, 1);
        assert!(b.columns.iter().all(|c| c.len() == 1), "nothing of the failed record stays");
        // A hostile count: billions of items in a few bytes.
        let hostile = Datum::framed(1).long(9).long(4_000_000_000).long(0);
        let e = d.decode(&hostile.0, &mut b).unwrap_err().0;
        assert!(e.contains("array or map items"), "{e}");
    }

    #[test]
    fn a_nested_column_the_query_does_not_read_is_skipped() {
        let mut d = decoder("SELECT id FROM orders");
        let mut b = d.new_batch(1);
        d.decode(&order().0, &mut b).unwrap();
        assert_eq!(b.columns[0].scalar(0), Scalar::Bigint(7));
    }
}
