//! A Protobuf message compiled against the source's columns: per field
//! number, what a record's field does (read into a column, descend into
//! a nested message some column reads, or skip), and for every column
//! what it holds when a record does not set it.
//!
//! Columns name fields by path (`meta.venue` is field `venue` of message
//! field `meta`), as JSON and Avro columns do. A scalar without presence
//! (a proto3 field not marked `optional`) that a record leaves out has its
//! default — 0, `""`, `false`, the enum's first value — as every Protobuf
//! reader gives it, when its message is there; a field with presence (a
//! message, `optional`, proto2, a oneof's) left out is NULL.

use std::collections::HashMap;

use protox::prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use sluice_plan::DataType;

/// How a field's wire value becomes a column's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// A varint: `int32`/`int64`/`uint32`/`bool`/enum numbers, as a number
    /// (`int32` read as 64 bits and truncated, as Protobuf does).
    Varint,
    /// A `uint64` varint, which may exceed a bigint.
    Unsigned,
    /// A zig-zag varint (`sint32`, `sint64`).
    ZigZag,
    Fixed32Unsigned,
    Fixed32Signed,
    Fixed64Unsigned,
    Fixed64Signed,
    Float,
    Double,
    Bool,
    /// Length-delimited UTF-8 (`string`).
    Text,
    /// A varint naming a value of enum `i` of [`Program::enums`].
    EnumName(usize),
    /// A `google.protobuf.Timestamp` message: seconds and nanos.
    Timestamp,
}

impl Read {
    /// The wire type a field read this way is written with.
    pub fn wire(self) -> u8 {
        match self {
            Self::Varint | Self::Unsigned | Self::ZigZag | Self::Bool | Self::EnumName(_) => 0,
            Self::Fixed64Unsigned | Self::Fixed64Signed | Self::Double => 1,
            Self::Text | Self::Timestamp => 2,
            Self::Fixed32Unsigned | Self::Fixed32Signed | Self::Float => 5,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum Action {
    Value {
        col: usize,
        read: Read,
    },
    /// A nested message some column reads a field of.
    Message(Box<Node>),
    /// The field of a nested column ([`Program::nested`]): the record has
    /// it when its wire type is one of `wires` (a bit per wire type), and
    /// the column's value is read from every occurrence when the record
    /// ends.
    Nested {
        col: usize,
        wires: u8,
    },
}

/// One message: its actions by field number.
#[derive(Debug, Clone, Default)]
pub(super) struct Node {
    /// Index of this message's presence flag ([`Program::nodes`]).
    pub id: usize,
    /// By field number, for numbers below [`DENSE`].
    pub dense: Vec<Option<Action>>,
    pub sparse: HashMap<u32, Action>,
}

/// Field numbers below this are looked up in a vector.
const DENSE: u32 = 256;

impl Node {
    #[inline]
    pub fn action(&self, number: u32) -> Option<&Action> {
        if number < DENSE { self.dense.get(number as usize).and_then(Option::as_ref) } else { self.sparse.get(&number) }
    }

    fn insert(&mut self, number: u32, action: Action) {
        if number < DENSE {
            let i = number as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, None);
            }
            self.dense[i] = Some(action);
        } else {
            self.sparse.insert(number, action);
        }
    }

    /// The node of message field `number`, made (with presence flag `id`)
    /// if no column reached it before.
    fn child(&mut self, number: u32, id: usize) -> Result<&mut Node, String> {
        if !matches!(self.action(number), Some(Action::Message(_))) {
            self.insert(number, Action::Message(Box::new(Node { id, ..Node::default() })));
        }
        let action = if number < DENSE { self.dense[number as usize].as_mut() } else { self.sparse.get_mut(&number) };
        match action {
            Some(Action::Message(node)) => Ok(node),
            _ => Err(format!("internal: field {number} has no message node")),
        }
    }
}

/// What a column holds when the record does not set its field.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Fill {
    Null,
    /// Nested column `index` of [`Program::nested`]: an empty array or
    /// map (a repeated field left out has no elements) when message
    /// `node` is in the record, NULL otherwise.
    Nested {
        index: usize,
        node: usize,
    },
    /// The field's default, when message `node` is in the record (NULL
    /// otherwise).
    Default {
        node: usize,
        value: Default,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Default {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

/// A message compiled against the columns.
#[derive(Debug, Clone)]
pub(super) struct Program {
    pub root: Node,
    /// How many messages have a presence flag (the root is 0).
    pub nodes: usize,
    /// Every field column and what it holds when unset.
    pub fill: Vec<(usize, Fill)>,
    /// Enum value names by number, per enum read as text: sorted by
    /// number, found by binary search (an enum has a handful of values;
    /// no hashing per record).
    pub enums: Vec<Vec<(i32, String)>>,
    /// For a message whose columns are all fields of its own (none in a
    /// nested message): its field columns in field-number order, the order
    /// every serializer writes them in. A record that follows it is read
    /// in one pass straight into the columns ([`Step`]).
    pub flat: Option<Vec<Step>>,
    /// With `flat`: the columns no field of the message feeds.
    pub unfed: Vec<(usize, Fill)>,
    /// The columns of a repeated, map or message field.
    pub nested: Vec<NestedColumn>,
}

/// A column read from a repeated field (an array), a map field, or a
/// message read as a row.
#[derive(Debug, Clone)]
pub(super) struct NestedColumn {
    /// The field numbers from the root message to the field.
    pub numbers: Vec<u32>,
    pub field: FieldRead,
}

/// How a field becomes a value of a column, or of a row's field.
#[derive(Debug, Clone)]
pub(super) struct FieldRead {
    pub number: u32,
    pub kind: FieldKind,
}

#[derive(Debug, Clone)]
pub(super) enum FieldKind {
    /// One value: the last occurrence counts, as Protobuf merges; left
    /// out, its default (`None`: NULL, for a field with presence).
    Scalar { read: Read, default: Option<Default> },
    /// A message read as a row: NULL when left out; written more than
    /// once, merged (each field's last value, repeated fields' elements
    /// of every occurrence).
    Message(RowRead),
    /// A repeated field read as an array: every element of every
    /// occurrence, in order, packed runs and single elements alike.
    Repeated(Elem),
    /// A map field: entry messages of key (field 1) and value (field 2),
    /// a key written twice keeping its last value, as Protobuf's maps do.
    Map { key: Read, key_default: Default, value: Elem },
}

/// An element of a repeated field or a map's value.
#[derive(Debug, Clone)]
pub(super) enum Elem {
    /// A value; `default` where a map entry leaves it out.
    Scalar { read: Read, default: Option<Default> },
    /// A message, read as a row (a map entry that leaves it out: the
    /// message with every field left out).
    Row(RowRead),
}

/// A message read as a row: per row field, in the row's order, the
/// message field it reads (`None`: no field of that name, NULL).
#[derive(Debug, Clone)]
pub(super) struct RowRead {
    pub fields: Vec<Option<FieldRead>>,
}

/// How deep a nested column's type may lead into messages.
const MAX_DEPTH: usize = 64;

/// One field of the flat path: the key it is written with (field number
/// and wire type, as a varint's value), the column it feeds, how, and
/// what the column holds when a record leaves the field out.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Step {
    pub key: u64,
    pub col: usize,
    pub read: Read,
    pub fill: Fill,
}

/// The source's field columns, as the compiler needs them.
pub(super) struct Columns<'a> {
    pub fields: &'a [(usize, Vec<String>)],
    pub types: &'a [DataType],
    pub required: &'a [bool],
    pub names: &'a [Box<[u8]>],
}

impl Columns<'_> {
    fn name(&self, col: usize) -> String {
        String::from_utf8_lossy(&self.names[col]).into_owned()
    }
}

impl Program {
    pub fn compile(message: &MessageDescriptor, columns: &Columns<'_>) -> Result<Self, String> {
        let mut program = Program {
            root: Node::default(),
            nodes: 1,
            fill: Vec::with_capacity(columns.fields.len()),
            enums: Vec::new(),
            flat: None,
            unfed: Vec::new(),
            nested: Vec::new(),
        };
        for (col, path) in columns.fields {
            let (col, fill) = program.column(message, *col, path, columns)?;
            program.fill.push((col, fill));
        }
        program.flatten();
        Ok(program)
    }

    /// Sets `flat` (and `unfed`) when every action of the root message
    /// reads a value.
    fn flatten(&mut self) {
        let actions =
            self.root.dense.iter().enumerate().filter_map(|(n, a)| Some((u32::try_from(n).ok()?, a.as_ref()?)));
        let mut steps = Vec::new();
        for (number, action) in actions.chain(self.root.sparse.iter().map(|(n, a)| (*n, a))) {
            let Action::Value { col, read } = action else { return };
            let fill = self.fill.iter().find(|(c, _)| c == col).map_or(Fill::Null, |(_, f)| f.clone());
            steps.push(Step { key: u64::from(number) << 3 | u64::from(read.wire()), col: *col, read: *read, fill });
        }
        steps.sort_by_key(|s| s.key);
        self.unfed = self.fill.iter().filter(|(c, _)| steps.iter().all(|s| s.col != *c)).cloned().collect();
        self.flat = Some(steps);
    }

    /// Files column `col` (the field at `path`) into the tree.
    fn column(
        &mut self,
        message: &MessageDescriptor,
        col: usize,
        path: &[String],
        columns: &Columns<'_>,
    ) -> Result<(usize, Fill), String> {
        let column = columns.name(col);
        let mut msg = message.clone();
        let mut numbers = Vec::with_capacity(path.len());
        // Each message on the way, by its presence flag.
        let mut node_ids = vec![0];
        for (depth, key) in path.iter().enumerate() {
            let Some(field) = msg.get_field_by_name(key) else {
                if columns.required[col] {
                    return Err(format!(
                        "required column `{column}`: message {} has no field `{key}`",
                        msg.full_name()
                    ));
                }
                return Ok((col, Fill::Null));
            };
            let last = depth + 1 == path.len();
            if last && (field.is_list() || field.is_map() || columns.types[col].is_nested()) {
                numbers.push(field.number());
                return self.nested_column(&field, col, &numbers, &node_ids, columns.types[col], &column);
            }
            if field.is_list() || field.is_map() {
                return Err(format!(
                    "column `{column}`: field `{}` of {} is {}: declare the column on the field itself, {}",
                    field.name(),
                    msg.full_name(),
                    if field.is_map() { "a map" } else { "repeated" },
                    if field.is_map() { "typed map<K, V>" } else { "typed array<T>" }
                ));
            }
            match field.kind() {
                Kind::Message(m) if !last => {
                    numbers.push(field.number());
                    // The message's node, shared by the columns under it.
                    let id = self.node_id(&numbers).unwrap_or_else(|| {
                        self.nodes += 1;
                        self.nodes - 1
                    });
                    node_ids.push(id);
                    msg = m;
                }
                _ if !last => {
                    return Err(format!(
                        "column `{column}`: field `{}` of {} is not a message, so it has no field `{}`",
                        field.name(),
                        msg.full_name(),
                        path[depth + 1]
                    ));
                }
                _ => {
                    let (read, default) = self.conversion(&field, columns.types[col], &column)?;
                    let parent = *node_ids.last().unwrap_or(&0);
                    let mut node = &mut self.root;
                    for (i, &n) in numbers.iter().enumerate() {
                        node = node.child(n, node_ids[i + 1])?;
                    }
                    node.insert(field.number(), Action::Value { col, read });
                    let fill = match default {
                        Some(value) if !field.supports_presence() => Fill::Default { node: parent, value },
                        _ => Fill::Null,
                    };
                    return Ok((col, fill));
                }
            }
        }
        Err(format!("column `{column}`: an empty field path"))
    }

    /// Files nested column `col`, of type `t`, on `field` (at field-number
    /// path `numbers`, through the messages of presence flags `node_ids`).
    fn nested_column(
        &mut self,
        field: &FieldDescriptor,
        col: usize,
        numbers: &[u32],
        node_ids: &[usize],
        t: DataType,
        column: &str,
    ) -> Result<(usize, Fill), String> {
        let read = self.field_read(field, t, column, 0)?;
        let wires = match &read.kind {
            FieldKind::Repeated(Elem::Scalar { read, .. }) => 1 << read.wire() | 1 << 2,
            _ => 1 << 2,
        };
        let mut node = &mut self.root;
        let (last, parents) = numbers.split_last().ok_or("internal: an empty field path")?;
        for (i, &n) in parents.iter().enumerate() {
            node = node.child(n, node_ids[i + 1])?;
        }
        // (A column and columns under its path are refused when the
        // query is planned: no other action is there.)
        node.insert(*last, Action::Nested { col, wires });
        self.nested.push(NestedColumn { numbers: numbers.to_vec(), field: read });
        let parent = *node_ids.last().unwrap_or(&0);
        Ok((col, Fill::Nested { index: self.nested.len() - 1, node: parent }))
    }

    /// How `field` is read into a value of type `t` (`column` names it
    /// for errors).
    fn field_read(
        &mut self,
        field: &FieldDescriptor,
        t: DataType,
        column: &str,
        depth: usize,
    ) -> Result<FieldRead, String> {
        if depth > MAX_DEPTH {
            return Err(format!("column `{column}`: messages nested more than {MAX_DEPTH} levels"));
        }
        let refuse = |what: &str, declare: &str| {
            Err(format!("column `{column}` is {t}, but field `{}` is {what} (declare it {declare})", field.full_name()))
        };
        let kind = if field.is_map() {
            let (Some((k, v)), Kind::Message(entry)) = (t.map_types(), field.kind()) else {
                return refuse("a map", "map<K, V>");
            };
            let (key, key_default) = self.conversion(&entry.map_entry_key_field(), k, &format!("{column} key"))?;
            let key_default = key_default.unwrap_or(Default::Int(0));
            let value = self.elem(&entry.map_entry_value_field(), v, column, depth)?;
            FieldKind::Map { key, key_default, value }
        } else if field.is_list() {
            let Some(element) = t.element().filter(|_| matches!(t, DataType::Array(_))) else {
                return refuse("repeated", "array<T>");
            };
            FieldKind::Repeated(self.elem(field, element, column, depth)?)
        } else {
            match (field.kind(), t) {
                (Kind::Message(m), DataType::Row(_)) if !is_timestamp(&m) => {
                    FieldKind::Message(self.row(&m, t, column, depth)?)
                }
                (Kind::Message(m), _) if t.is_nested() && !is_timestamp(&m) => {
                    return refuse(&format!("a message ({})", m.full_name()), "row<…>");
                }
                _ if t.is_nested() => return refuse("a single value", "a flat type"),
                _ => {
                    let (read, default) = self.conversion(field, t, column)?;
                    let default = if field.supports_presence() { None } else { default };
                    FieldKind::Scalar { read, default }
                }
            }
        };
        Ok(FieldRead { number: field.number(), kind })
    }

    /// An element of repeated `field`, or a map's value, as type `t`.
    fn elem(&mut self, field: &FieldDescriptor, t: DataType, column: &str, depth: usize) -> Result<Elem, String> {
        match field.kind() {
            Kind::Message(m) if !is_timestamp(&m) => match t {
                DataType::Row(_) => Ok(Elem::Row(self.row(&m, t, column, depth)?)),
                _ => Err(format!(
                    "column `{column}`: the elements of field `{}` are messages ({}), read as rows (declare them row<…>), not {t}",
                    field.full_name(),
                    m.full_name()
                )),
            },
            _ if t.is_nested() => Err(format!(
                "column `{column}`: the elements of field `{}` are single values, not {t} (Protobuf has no \
                 repeated of repeated)",
                field.full_name()
            )),
            _ => {
                let (read, default) = self.conversion(field, t, column)?;
                Ok(Elem::Scalar { read, default })
            }
        }
    }

    /// Message `m` read as row type `t`: fields matched by name, exactly
    /// and then ignoring case.
    fn row(&mut self, m: &MessageDescriptor, t: DataType, column: &str, depth: usize) -> Result<RowRead, String> {
        let mut fields = Vec::with_capacity(t.fields().len());
        for (name, ft) in t.fields() {
            let field = m.get_field_by_name(name).or_else(|| m.fields().find(|f| f.name().eq_ignore_ascii_case(name)));
            fields.push(match field {
                Some(f) => Some(self.field_read(&f, *ft, &format!("{column}.{name}"), depth + 1)?),
                None => None,
            });
        }
        Ok(RowRead { fields })
    }

    /// The presence flag of the message at field-number path `numbers`,
    /// if an earlier column created it.
    fn node_id(&self, numbers: &[u32]) -> Option<usize> {
        let mut node = &self.root;
        for &n in numbers {
            match node.action(n) {
                Some(Action::Message(child)) => node = child,
                _ => return None,
            }
        }
        Some(node.id)
    }

    /// How field `field` is read into a column of type `t`, and its
    /// default (`None`: a message, NULL when absent).
    fn conversion(
        &mut self,
        field: &FieldDescriptor,
        t: DataType,
        column: &str,
    ) -> Result<(Read, Option<Default>), String> {
        let refuse = |what: &str| Err(format!("column `{column}` is {t}, but field `{}` is {what}", field.full_name()));
        let number = |read: Read| match t {
            DataType::Bigint | DataType::Timestamp | DataType::Decimal(..) => Ok((read, Some(Default::Int(0)))),
            DataType::Double => Ok((read, Some(Default::Float(0.0)))),
            _ => refuse("a number"),
        };
        match field.kind() {
            Kind::Int32 | Kind::Int64 | Kind::Uint32 => number(Read::Varint),
            Kind::Uint64 => number(Read::Unsigned),
            Kind::Sint32 | Kind::Sint64 => number(Read::ZigZag),
            Kind::Fixed32 => number(Read::Fixed32Unsigned),
            Kind::Sfixed32 => number(Read::Fixed32Signed),
            Kind::Fixed64 => number(Read::Fixed64Unsigned),
            Kind::Sfixed64 => number(Read::Fixed64Signed),
            Kind::Float | Kind::Double => {
                let read = if field.kind() == Kind::Float { Read::Float } else { Read::Double };
                match t {
                    DataType::Double => Ok((read, Some(Default::Float(0.0)))),
                    // Read through the double's shortest text; the default
                    // 0 is the decimal 0.
                    DataType::Decimal(..) => Ok((read, Some(Default::Int(0)))),
                    _ => refuse("a floating-point number (declare the column double)"),
                }
            }
            Kind::Bool => match t {
                DataType::Boolean => Ok((Read::Bool, Some(Default::Bool(false)))),
                _ => refuse("a bool"),
            },
            Kind::String => match t {
                DataType::String => Ok((Read::Text, Some(Default::Text(String::new())))),
                // An ISO-8601 text, as JSON timestamps are read; its
                // default (the empty text) is no time: NULL.
                DataType::Timestamp => Ok((Read::Text, None)),
                // Decimal text (`"12.50"`), as the Protobuf sink writes
                // decimals; the empty default is no number: NULL.
                DataType::Decimal(..) => Ok((Read::Text, None)),
                _ => refuse("a string"),
            },
            Kind::Enum(e) => match t {
                DataType::String => {
                    let mut names: Vec<(i32, String)> = e.values().map(|v| (v.number(), v.name().to_owned())).collect();
                    // An alias (`allow_alias`) keeps the first name of its number.
                    names.sort_by_key(|n| n.0);
                    names.dedup_by_key(|n| n.0);
                    let first = e.default_value().name().to_owned();
                    self.enums.push(names);
                    Ok((Read::EnumName(self.enums.len() - 1), Some(Default::Text(first))))
                }
                DataType::Bigint => Ok((Read::Varint, Some(Default::Int(0)))),
                _ => refuse("an enum (declare the column string for its names, or bigint for its numbers)"),
            },
            Kind::Message(m) if is_timestamp(&m) => match t {
                DataType::Timestamp => Ok((Read::Timestamp, None)),
                _ => refuse("a google.protobuf.Timestamp (declare the column timestamp)"),
            },
            Kind::Message(m) => {
                refuse(&format!("a message ({}): columns read its fields (`{column}.<field>`)", m.full_name()))
            }
            Kind::Bytes => refuse("bytes, which no column type holds"),
        }
    }
}

fn is_timestamp(m: &MessageDescriptor) -> bool {
    m.full_name() == "google.protobuf.Timestamp"
}
