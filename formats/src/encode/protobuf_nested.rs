//! The fields of a Protobuf result message, flat and nested, and their
//! values: an `array` is a `repeated` field (packed for numbers and
//! booleans, as proto3 writes them), a `map` a `map<K, V>` field, a `row`
//! a message defined inside the one that holds it, its fields `optional`
//! so a NULL field is one left out, as at the top level.
//!
//! Protobuf has no NULL element: a NULL inside an array or as a map's
//! value is written as the type's default (0, `""`, `false`, the epoch,
//! the message with no field set), as Flink's Protobuf format writes it.
//! A list of lists or of maps has no Protobuf type and is refused with
//! the column's path.

use sluice_crds::SinkFormat;
use sluice_plan::{Column, ColumnData, DataType, NestedRef, Scalar, ScalarRef};

use super::protobuf_wire::{FIXED64, VARINT, decimal, delimited, text, timestamp, varint};
use super::view::decimal_constant;

/// A flat column's Protobuf type. A column of NULLs only is a `string`
/// field that is never set.
fn proto_type(t: DataType) -> &'static str {
    match t {
        DataType::Bigint => "int64",
        DataType::Double => "double",
        DataType::String | DataType::Null => "string",
        DataType::Boolean => "bool",
        DataType::Timestamp => "google.protobuf.Timestamp",
        // Every digit, as text: proto3 has no decimal scalar.
        DataType::Decimal(..) => "string",
        DataType::Array(_) | DataType::Map(_) | DataType::Row(_) => "bytes",
    }
}

/// Whether a value of `t` is, or holds, a timestamp (the schema imports
/// Protobuf's `timestamp.proto`).
pub(super) fn uses_timestamp(t: DataType) -> bool {
    match t {
        DataType::Timestamp => true,
        DataType::Array(_) => t.element().is_some_and(uses_timestamp),
        DataType::Map(_) => t.map_types().is_some_and(|(k, v)| uses_timestamp(k) || uses_timestamp(v)),
        DataType::Row(_) => t.fields().iter().any(|(_, f)| uses_timestamp(*f)),
        _ => false,
    }
}

/// The body of a message of `columns` (fields numbered from 1 in order):
/// the messages its rows need, then its fields, each line after
/// `indent`. `path` names the message's column for errors (empty at the
/// top).
pub(super) fn message_body(columns: &[(String, DataType)], path: &str, indent: &str) -> Result<String, String> {
    if !path.is_empty()
        && let Some(problem) = SinkFormat::Protobuf.outputs_problem(columns.iter().map(|c| c.0.as_str()))
    {
        return Err(format!("output column `{path}`: its row's fields: {problem}"));
    }
    let mut body = Body { indent, types: String::new(), taken: Vec::new(), names: columns };
    let mut fields = String::new();
    for (number, (name, t)) in (1u32..).zip(columns) {
        let at = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        let line = match *t {
            DataType::Array(_) => {
                let e = t.element().unwrap_or(DataType::Null);
                format!("repeated {} {name} = {number};", body.element(e, name, number, &at)?)
            }
            DataType::Map(_) => {
                let (k, v) = t.map_types().unwrap_or((DataType::String, DataType::Null));
                let key = if k == DataType::Bigint { "int64" } else { "string" };
                format!("map<{key}, {}> {name} = {number};", body.element(v, name, number, &at)?)
            }
            DataType::Row(_) => format!("{} {name} = {number};", body.row(*t, name, number, &at)?),
            flat => format!("optional {} {name} = {number};", proto_type(flat)),
        };
        fields.push_str(indent);
        fields.push_str(&line);
        fields.push('\n');
    }
    Ok(body.types + &fields)
}

/// A message body being written: the messages defined in it so far.
struct Body<'a> {
    indent: &'a str,
    types: String,
    taken: Vec<String>,
    /// The message's fields: a type is not named as one is.
    names: &'a [(String, DataType)],
}

impl Body<'_> {
    /// The Protobuf type of an array's element or a map's value.
    fn element(&mut self, t: DataType, name: &str, number: u32, at: &str) -> Result<String, String> {
        match t {
            DataType::Row(_) => self.row(t, name, number, at),
            DataType::Array(_) | DataType::Map(_) => Err(format!(
                "output column `{at}` holds {}s as elements or map values, which Protobuf cannot write (repeated \
                 and map fields do not nest): use format json or avro, or UNNEST it",
                if matches!(t, DataType::Map(_)) { "map" } else { "list" }
            )),
            flat => Ok(proto_type(flat).to_owned()),
        }
    }

    /// Defines the message of row type `t` for field `name`, and names it:
    /// the field's name capitalised, its number after it where that name
    /// is taken.
    fn row(&mut self, t: DataType, name: &str, number: u32, at: &str) -> Result<String, String> {
        let mut chars = name.chars();
        let mut type_name: String = chars.next().map(|c| c.to_ascii_uppercase()).into_iter().chain(chars).collect();
        if self.taken.contains(&type_name) || self.names.iter().any(|(n, _)| *n == type_name) {
            type_name = format!("{type_name}_{number}");
        }
        let inner = format!("{}  ", self.indent);
        let body = message_body(t.fields(), at, &inner)?;
        self.types.push_str(&format!("{}message {type_name} {{\n{body}{}}}\n", self.indent, self.indent));
        self.taken.push(type_name.clone());
        Ok(type_name)
    }
}

/// A nested value where it lies: a cell of a batch's column, or owned (a
/// constant, a value read back from state).
enum View<'a> {
    Cell(&'a Column, usize),
    Owned(Scalar),
}

impl View<'_> {
    fn of(n: NestedRef<'_>) -> View<'_> {
        if let NestedRef::Cell(cells, i) = n
            && let Some(c) = cells.as_any().downcast_ref::<Column>()
        {
            return View::Cell(c, i);
        }
        View::Owned(n.to_scalar())
    }

    /// Whether an array or map has no element.
    fn is_empty(&self) -> bool {
        match self {
            View::Cell(c, i) => match &c.data {
                ColumnData::List(list) => list.range(*i).is_empty(),
                _ => true,
            },
            View::Owned(Scalar::List(v)) => v.is_empty(),
            View::Owned(Scalar::Map(v)) => v.is_empty(),
            View::Owned(_) => true,
        }
    }

    /// Calls `f` with each element (an array) or each key and value (a map).
    fn each(&self, mut f: impl FnMut(ScalarRef<'_>, ScalarRef<'_>)) {
        match self {
            View::Cell(c, i) => {
                let ColumnData::List(list) = &c.data else { return };
                match &list.values.data {
                    ColumnData::Struct(e) if matches!(c.data_type, DataType::Map(_)) && e.fields.len() == 2 => {
                        list.range(*i).for_each(|j| f(e.fields[0].value(j), e.fields[1].value(j)));
                    }
                    _ => list.range(*i).for_each(|j| f(list.values.value(j), ScalarRef::Null)),
                }
            }
            View::Owned(Scalar::List(items)) => items.iter().for_each(|v| f(v.borrowed(), ScalarRef::Null)),
            View::Owned(Scalar::Map(entries)) => entries.iter().for_each(|(k, v)| f(k.borrowed(), v.borrowed())),
            View::Owned(_) => {}
        }
    }

    /// Calls `f` with each field of a row, in order.
    fn fields(&self, mut f: impl FnMut(usize, ScalarRef<'_>)) {
        match self {
            View::Cell(c, i) => {
                if let ColumnData::Struct(row) = &c.data {
                    row.fields.iter().enumerate().for_each(|(k, field)| f(k, field.value(*i)));
                }
            }
            View::Owned(Scalar::Row(values)) => values.iter().enumerate().for_each(|(k, v)| f(k, v.borrowed())),
            View::Owned(_) => {}
        }
    }
}

/// `value` of type `t` as field `key >> 3`; NULL is no field at all.
pub(super) fn write_field(key: u32, value: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    match value {
        ScalarRef::Null => {}
        ScalarRef::List(n) | ScalarRef::Map(n) | ScalarRef::Row(n) => nested(key, &View::of(n), t, out),
        ScalarRef::Bigint(x) if t == DataType::Timestamp => timestamp(key, x, out),
        ScalarRef::Timestamp(x) => timestamp(key, x, out),
        ScalarRef::Bigint(x) => {
            varint(u64::from(key | VARINT), out);
            // int64: a negative number is its ten-byte two's complement.
            varint(x as u64, out);
        }
        ScalarRef::Double(x) => {
            varint(u64::from(key | FIXED64), out);
            out.extend_from_slice(&x.to_le_bytes());
        }
        ScalarRef::Boolean(x) => {
            varint(u64::from(key | VARINT), out);
            out.push(u8::from(x));
        }
        ScalarRef::String(x) => text(key, x, out),
        ScalarRef::Decimal(x, s) => {
            if let Some((x, s)) = decimal_constant(x, s, t) {
                decimal(key, x, s, out);
            }
        }
    }
}

/// An element of a repeated field, which cannot be absent: a NULL is the
/// type's default.
fn element(key: u32, value: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    match (value, t) {
        (ScalarRef::Null, DataType::Row(_) | DataType::Timestamp) => delimited(key, out, |_| {}),
        (ScalarRef::Null, DataType::Bigint) => write_field(key, ScalarRef::Bigint(0), t, out),
        (ScalarRef::Null, DataType::Double) => write_field(key, ScalarRef::Double(0.0), t, out),
        (ScalarRef::Null, DataType::Boolean) => write_field(key, ScalarRef::Boolean(false), t, out),
        (ScalarRef::Null, _) => text(key, "", out),
        (v, _) => write_field(key, v, t, out),
    }
}

/// A number or boolean of type `t` in a packed run: its value alone.
fn packed(value: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    match value {
        ScalarRef::Bigint(x) => varint(x as u64, out),
        ScalarRef::Double(x) => out.extend_from_slice(&x.to_le_bytes()),
        ScalarRef::Boolean(x) => out.push(u8::from(x)),
        // NULL: the default.
        _ if t == DataType::Double => out.extend_from_slice(&0f64.to_le_bytes()),
        _ => out.push(0),
    }
}

/// A nested value of type `t` as field `key >> 3`.
fn nested(key: u32, view: &View<'_>, t: DataType, out: &mut Vec<u8>) {
    match t {
        DataType::Array(_) => match t.element().unwrap_or(DataType::Null) {
            // An empty packed run is no field at all.
            e @ (DataType::Bigint | DataType::Double | DataType::Boolean) if !view.is_empty() => {
                delimited(key, out, |out| view.each(|v, _| packed(v, e, out)));
            }
            DataType::Bigint | DataType::Double | DataType::Boolean => {}
            e => view.each(|v, _| element(key, v, e, out)),
        },
        DataType::Map(_) => {
            let (kt, vt) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            view.each(|k, v| {
                delimited(key, out, |out| {
                    write_field(1 << 3, k, kt, out);
                    write_field(2 << 3, v, vt, out);
                });
            });
        }
        DataType::Row(_) => {
            let fields = t.fields();
            delimited(key, out, |out| {
                view.fields(|k, v| {
                    let number = u32::try_from(k + 1).unwrap_or(u32::MAX >> 3);
                    write_field(number << 3, v, fields.get(k).map_or(DataType::Null, |f| f.1), out);
                });
            });
        }
        _ => {}
    }
}
