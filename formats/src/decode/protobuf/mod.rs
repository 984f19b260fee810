//! Protobuf record values in the Confluent wire format → columns.
//!
//! A value is a magic byte `0`, the writer schema's registry id (4 bytes,
//! big-endian), the message indexes — which message of the schema's file
//! the value is: a zig-zag varint count then that many zig-zag varint
//! indexes (top-level message, then nested), the single byte `0` standing
//! for `[0]` — then the message's Protobuf encoding. As for Avro, the
//! runtime fetches each schema id once per worker and hands its text over
//! ([`ProtobufDecoder::add_schema`]): `.proto` source, or the base64 of a
//! serialized `FileDescriptorProto` (how Python's serializer registers
//! it), compiled with `protox` (the well-known `google/protobuf/*` files
//! importable). Each (schema, message) is compiled against the columns
//! once ([`program`]); records then decode by hand, field number by field
//! number, with no lookup by name and no allocation.
//!
//! A record's fields may come in any order and a field more than once
//! (the last counts, as Protobuf merges): values are gathered into one
//! slot per column and pushed when the message ends. A record that cannot
//! be read — not in the wire format, an unknown id or message, a field of
//! the wrong wire type, bytes that end early — is rejected with a reason,
//! and the batch is left as before it (the dead-letter output gets it).

mod program;

use std::collections::HashMap;
use std::path::Path;

use base64::Engine;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use protox::prost::Message;
use protox::prost_reflect::{DescriptorPool, MessageDescriptor};
use sluice_plan::time::parse_timestamp_ms;
use sluice_plan::{Batch, ColumnOrigin, Plan};

use self::program::{Action, Columns, Default, Fill, Node, Program, Read, Step};
use super::cells::{name, push_null, time};
use super::encoding::{Encoding, MAX_SCHEMAS};
use super::wire::{HEADER, schema_id as wire_id};
use super::{DecodeError, SourceColumns};

/// Nesting a message may reach.
const MAX_NESTING: usize = 64;
/// Message indexes a value may name.
const MAX_INDEXES: usize = 32;
/// The most (schema, message) programs kept compiled: the message indexes
/// come from records, so the cache is bounded.
const MAX_PROGRAMS: usize = 256;
/// What one compiled program is taken to hold in memory.
const PROGRAM_BYTES: usize = 4096;
/// The name the registry's schema text is compiled under.
const SCHEMA_FILE: &str = "registry-schema.proto";

/// Reads Protobuf values of one source.
#[derive(Debug, Clone)]
pub struct ProtobufDecoder {
    /// The columns' names, types, nullability and use, and the metadata
    /// columns, as the JSON decoder reads them.
    pub(super) columns: SourceColumns,
    /// Each field column and its path.
    fields: Vec<(usize, Vec<String>)>,
    /// Per writer schema id: its file's messages, or why its records
    /// cannot be read.
    schemas: HashMap<u32, Result<DescriptorPool, String>>,
    /// Per writer schema id: about how many bytes it holds in memory.
    sizes: HashMap<u32, usize>,
    /// Per (schema id, message indexes): an index into `programs`.
    compiled: HashMap<(u32, Vec<i64>), usize>,
    programs: Vec<Result<Program, String>>,
    /// The header bytes (magic, id, indexes) of the last record and its
    /// program: records of a topic name the same message one after another.
    last: Option<(Vec<u8>, usize)>,
    /// Per column, the value the record set (scratch).
    slots: Vec<Slot>,
    /// Per message node, whether the record has it (scratch).
    present: Vec<bool>,
    indexes: Vec<i64>,
    /// Whether records in field-number order take the one-pass path
    /// (`Program::flat`); off only to test the two paths against each
    /// other.
    flat_path: bool,
    /// Records the one-pass path read (tests check it is taken).
    #[cfg(test)]
    flat_reads: usize,
}

/// A column's value in the record being read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    Unset,
    Int(i64),
    Float(f64),
    Bool(bool),
    /// `payload[start..end]`, UTF-8.
    Text(usize, usize),
    /// Value `number` of enum `enum_index`.
    Enum(usize, i32),
}

impl ProtobufDecoder {
    pub fn new(plan: &Plan) -> Self {
        let fields: Vec<(usize, Vec<String>)> = (0..plan.source.schema.fields.len())
            .filter_map(|i| match plan.source.origin(i) {
                ColumnOrigin::Field(path) => Some((i, path)),
                ColumnOrigin::Metadata { .. } => None,
            })
            .collect();
        let columns = SourceColumns::new(plan);
        let slots = vec![Slot::Unset; columns.types.len()];
        Self {
            columns,
            fields,
            schemas: HashMap::new(),
            sizes: HashMap::new(),
            compiled: HashMap::new(),
            programs: Vec::new(),
            last: None,
            slots,
            present: Vec::new(),
            indexes: Vec::new(),
            flat_path: true,
            #[cfg(test)]
            flat_reads: 0,
        }
    }

    /// An empty batch with a builder for each used column.
    pub fn new_batch(&self, capacity: usize) -> Batch {
        self.columns.new_batch(capacity)
    }

    /// The schema registered under `id` (its text): `.proto` source, or
    /// a base64 `FileDescriptorProto`. One that cannot be read makes each
    /// record written with it a dead letter saying why.
    pub fn add_schema(&mut self, id: u32, text: &str) {
        self.add_schema_with(id, text, &[]);
    }

    /// Keeps schema `id`, within [`MAX_SCHEMAS`] (the ids come from
    /// records, which anyone may write).
    fn keep(&mut self, id: u32, pool: Result<DescriptorPool, String>) {
        if self.schemas.len() >= MAX_SCHEMAS {
            self.forget_unknown();
            if self.schemas.len() >= MAX_SCHEMAS {
                self.schemas.clear();
                self.sizes.clear();
            }
        }
        // The descriptors' encoded size, times what a parsed descriptor
        // takes beside it: an estimate, counted in the core's budget.
        let size = match &pool {
            Ok(pool) => 4 * pool.file_descriptor_protos().map(Message::encoded_len).sum::<usize>() + 1024,
            Err(why) => why.len(),
        };
        self.sizes.insert(id, size);
        self.schemas.insert(id, pool);
    }

    /// Appends `payload` as one row of `batch`, or explains why it cannot.
    pub fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let (program, body) = self.program(payload).map_err(|e| DecodeError(format!("protobuf: {e}")))?;
        let rows = batch.len;
        match self.run(program, payload, body, batch) {
            Ok(()) => {
                batch.len = rows + 1;
                Ok(())
            }
            Err(e) => {
                self.columns.rollback(batch, rows);
                Err(DecodeError(format!("protobuf: {e}")))
            }
        }
    }

    /// Without the one-pass path for records in field-number order: what
    /// [`ProtobufDecoder::decode`] falls back to, and the reference that
    /// path is tested against.
    #[doc(hidden)]
    pub fn without_flat_path(mut self) -> Self {
        self.flat_path = false;
        self
    }

    /// The program for `payload`'s schema and message, and where the
    /// message's bytes start.
    fn program(&mut self, payload: &[u8]) -> Result<(usize, usize), String> {
        // Byte by byte: the header is a few bytes, and `starts_with` calls
        // memcmp, which took a seventh of a record's decoding.
        if let Some((header, program)) = &self.last
            && payload.len() >= header.len()
            && header.iter().zip(payload).all(|(h, p)| h == p)
        {
            return Ok((*program, header.len()));
        }
        let id = wire_id(payload)?;
        let mut at = HEADER;
        self.indexes.clear();
        let count = zigzag(varint(payload, &mut at).map_err(|e| format!("the message indexes: {e}"))?);
        if count == 0 {
            self.indexes.push(0);
        } else {
            if !(1..=MAX_INDEXES as i64).contains(&count) {
                return Err(format!("{count} message indexes"));
            }
            for _ in 0..count {
                self.indexes.push(zigzag(varint(payload, &mut at).map_err(|e| format!("the message indexes: {e}"))?));
            }
        }
        let key = (id, std::mem::take(&mut self.indexes));
        let program = match self.compiled.get(&key) {
            Some(&p) => p,
            None => {
                let compiled = match self.schemas.get(&id) {
                    Some(Ok(pool)) => message(pool, &key.1).and_then(|m| {
                        let columns = Columns {
                            fields: &self.fields,
                            types: &self.columns.types,
                            required: &self.columns.required,
                            names: &self.columns.names,
                        };
                        Program::compile(&m, &columns)
                            .map_err(|e| format!("schema id {id}, message {}: {e}", m.full_name()))
                    }),
                    Some(Err(why)) => Err(why.clone()),
                    None => return Err(format!("schema id {id} was not fetched")),
                };
                // Only programs are kept, and at most MAX_PROGRAMS: the
                // message indexes come from records, which anyone may
                // write (2 M distinct paths once held 898 MB). A path that
                // names no message costs a lookup, never a compiled entry.
                let compiled = match compiled {
                    Ok(program) => program,
                    Err(why) => {
                        self.indexes = key.1;
                        return Err(why);
                    }
                };
                if self.programs.len() >= MAX_PROGRAMS {
                    self.programs.clear();
                    self.compiled.clear();
                    self.last = None;
                }
                self.programs.push(Ok(compiled));
                let p = self.programs.len() - 1;
                self.compiled.insert(key.clone(), p);
                p
            }
        };
        self.indexes = key.1;
        if let Err(why) = &self.programs[program] {
            return Err(why.clone());
        }
        self.last = Some((payload[..at].to_vec(), program));
        Ok((program, at))
    }

    fn run(&mut self, program: usize, payload: &[u8], body: usize, batch: &mut Batch) -> Result<(), String> {
        let Some(Ok(program)) = self.programs.get(program) else {
            return Err("internal: no program".into());
        };
        if self.flat_path
            && let Some(steps) = &program.flat
        {
            let rows = batch.len;
            if read_flat(&self.columns, program, steps, payload, body, batch) {
                #[cfg(test)]
                {
                    self.flat_reads += 1;
                }
                return Ok(());
            }
            self.columns.rollback(batch, rows);
        }
        self.slots.fill(Slot::Unset);
        if self.present.len() == program.nodes {
            self.present.fill(false);
        } else {
            self.present.clear();
            self.present.resize(program.nodes, false);
        }
        let mut reading = Reading { slots: &mut self.slots, present: &mut self.present, payload };
        reading.message(&program.root, body, payload.len(), 0)?;
        // Every field column, as the record set it or as it was left.
        for (col, fill) in &program.fill {
            let col = *col;
            match self.slots[col] {
                Slot::Unset => match fill {
                    Fill::Default { node, value } if self.present[*node] => {
                        push_default(&self.columns, batch, col, value)?;
                    }
                    _ => push_null(&self.columns, batch, col)?,
                },
                slot => push(&self.columns, batch, col, slot, payload, program)?,
            }
        }
        Ok(())
    }
}

/// The message `indexes` names in the schema's file.
fn message(pool: &DescriptorPool, indexes: &[i64]) -> Result<MessageDescriptor, String> {
    let file = pool.get_file_by_name(SCHEMA_FILE).or_else(|| pool.files().last()).ok_or("an empty schema")?;
    let bad = || format!("message indexes {indexes:?} name no message of the schema");
    let at = |i: i64, mut messages: Box<dyn Iterator<Item = MessageDescriptor> + '_>| {
        usize::try_from(i).ok().and_then(|i| messages.nth(i)).ok_or_else(bad)
    };
    let (first, rest) = indexes.split_first().ok_or_else(bad)?;
    let mut m = at(*first, Box::new(file.messages()))?;
    for &i in rest {
        m = at(i, Box::new(m.child_messages()))?;
    }
    Ok(m)
}

/// Files from the registry — the schema and the files it imports (its
/// references) — by the names they are compiled under.
struct Registered(Vec<(String, File)>);

impl FileResolver for Registered {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.iter().find(|(n, _)| n == name) {
            Some((_, file)) => Ok(File::from_file_descriptor_proto(file.file_descriptor_proto().clone())),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// The registry's text of a Protobuf schema, compiled.
#[cfg(test)]
pub(crate) fn parse_schema(text: &str) -> Result<DescriptorPool, String> {
    parse_schema_with(text, &[])
}

/// One file's registry text (`.proto` source, or a base64
/// FileDescriptorProto as Python's serializer registers it), as the file
/// `name`.
fn registry_file(name: &str, text: &str) -> Result<File, String> {
    let trimmed = text.trim();
    match base64::engine::general_purpose::STANDARD.decode(trimmed) {
        // Named as the compiler will open it.
        Ok(bytes) if !trimmed.is_empty() && !trimmed.contains(' ') => {
            let file = File::decode_file_descriptor_proto(bytes.as_slice())
                .map_err(|e| format!("base64 text that is not a FileDescriptorProto: {e}"))?;
            let mut proto = file.file_descriptor_proto().clone();
            proto.name = Some(name.into());
            Ok(File::from_file_descriptor_proto(proto))
        }
        _ => File::from_source(name, text).map_err(|e| e.to_string()),
    }
}

/// [`parse_schema`] for a schema that imports `references` (`(import
/// name, text)`: Confluent's schema references, each under the name the
/// schema's `import` gives it).
pub(crate) fn parse_schema_with(text: &str, references: &[(String, String)]) -> Result<DescriptorPool, String> {
    let mut files = vec![(SCHEMA_FILE.to_owned(), registry_file(SCHEMA_FILE, text)?)];
    for (name, reference) in references {
        let file = registry_file(name, reference).map_err(|e| format!("referenced file `{name}`: {e}"))?;
        files.push((name.clone(), file));
    }
    let mut resolver = ChainFileResolver::new();
    resolver.add(Registered(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.open_file(Path::new(SCHEMA_FILE)).map_err(|e| e.to_string())?;
    Ok(compiler.descriptor_pool())
}

/// A varint of at most 10 bytes at `payload[*at..]`. Field keys and most
/// lengths are one byte: those return at once.
#[inline]
fn varint(payload: &[u8], at: &mut usize) -> Result<u64, String> {
    if let Some(&b) = payload.get(*at)
        && b < 0x80
    {
        *at += 1;
        return Ok(u64::from(b));
    }
    varint_long(payload, at)
}

#[inline(never)]
fn varint_long(payload: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value: u64 = 0;
    let mut shift = 0;
    loop {
        let Some(&b) = payload.get(*at) else {
            return Err(format!("the value ends at byte {} in a number", payload.len()));
        };
        *at += 1;
        if shift == 63 && b > 1 {
            return Err(format!("a number longer than 64 bits at byte {at}"));
        }
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(value);
        }
        shift += 7;
        if shift > 63 {
            return Err(format!("a number longer than 10 bytes at byte {at}"));
        }
    }
}

#[inline]
fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// `n` bytes at `payload[*at..end]`, or an error if fewer are left.
#[inline]
fn take(at: &mut usize, n: u64, end: usize) -> Result<(usize, usize), String> {
    let start = *at;
    let stop = usize::try_from(n).ok().and_then(|n| start.checked_add(n)).filter(|&s| s <= end);
    let stop = stop.ok_or_else(|| format!("a field of {n} bytes where {} are left", end.saturating_sub(start)))?;
    *at = stop;
    Ok((start, stop))
}

/// One record's reading.
struct Reading<'a> {
    slots: &'a mut [Slot],
    present: &'a mut [bool],
    payload: &'a [u8],
}

impl Reading<'_> {
    /// The fields of the message at `payload[at..end]`.
    fn message(&mut self, node: &Node, mut at: usize, end: usize, depth: usize) -> Result<(), String> {
        if depth > MAX_NESTING {
            return Err(format!("messages nested more than {MAX_NESTING} levels"));
        }
        self.present[node.id] = true;
        let bytes = &self.payload[..end];
        while at < end {
            let key = varint(bytes, &mut at)?;
            let number = u32::try_from(key >> 3).map_err(|_| format!("field number {}", key >> 3))?;
            let wire = (key & 7) as u8;
            if number == 0 {
                return Err(format!("field number 0 at byte {at}"));
            }
            match node.action(number) {
                Some(Action::Value { col, read, .. }) if read.wire() == wire => {
                    self.slots[*col] = self.value(*read, &mut at, end)?;
                }
                Some(Action::Message(child)) if wire == 2 => {
                    let n = varint(bytes, &mut at)?;
                    let (start, stop) = take(&mut at, n, end)?;
                    self.message(child, start, stop, depth + 1)?;
                }
                Some(_) => {
                    return Err(format!(
                        "field {number} has wire type {wire}, not the schema's{}",
                        if wire == 2 { " (a packed repeated field?)" } else { "" }
                    ));
                }
                None => skip(bytes, &mut at, wire, end)?,
            }
        }
        Ok(())
    }

    #[inline]
    fn value(&mut self, read: Read, at: &mut usize, end: usize) -> Result<Slot, String> {
        value(self.payload, read, at, end)
    }
}

/// The value of a field read as `read`, at `payload[*at..end]`.
#[inline(always)]
fn value(payload: &[u8], read: Read, at: &mut usize, end: usize) -> Result<Slot, String> {
    let bytes = &payload[..end];
    let fixed = |at: &mut usize, n: u64| take(at, n, end).map(|(s, e)| &bytes[s..e]);
    Ok(match read {
        Read::Varint => Slot::Int(varint(bytes, at)? as i64),
        Read::Unsigned => {
            let v = varint(bytes, at)?;
            Slot::Int(i64::try_from(v).map_err(|_| format!("uint64 {v} is larger than a bigint"))?)
        }
        Read::ZigZag => Slot::Int(zigzag(varint(bytes, at)?)),
        Read::Bool => Slot::Bool(varint(bytes, at)? != 0),
        Read::EnumName(e) => Slot::Enum(e, varint(bytes, at)? as i32),
        Read::Fixed32Unsigned | Read::Fixed32Signed | Read::Float => {
            let b = fixed(at, 4)?;
            let w = [b[0], b[1], b[2], b[3]];
            match read {
                Read::Fixed32Unsigned => Slot::Int(i64::from(u32::from_le_bytes(w))),
                Read::Fixed32Signed => Slot::Int(i64::from(i32::from_le_bytes(w))),
                _ => Slot::Float(f64::from(f32::from_le_bytes(w))),
            }
        }
        Read::Fixed64Unsigned | Read::Fixed64Signed | Read::Double => {
            let mut w = [0; 8];
            w.copy_from_slice(fixed(at, 8)?);
            match read {
                Read::Fixed64Unsigned => {
                    let v = u64::from_le_bytes(w);
                    Slot::Int(i64::try_from(v).map_err(|_| format!("fixed64 {v} is larger than a bigint"))?)
                }
                Read::Fixed64Signed => Slot::Int(i64::from_le_bytes(w)),
                _ => Slot::Float(f64::from_le_bytes(w)),
            }
        }
        // Checked for UTF-8 when pushed (once, and only the value
        // that counts).
        Read::Text => {
            let n = varint(bytes, at)?;
            let (start, stop) = take(at, n, end)?;
            Slot::Text(start, stop)
        }
        Read::Timestamp => {
            let n = varint(bytes, at)?;
            let (start, stop) = take(at, n, end)?;
            let (mut seconds, mut nanos, mut i) = (0i64, 0i64, start);
            while i < stop {
                let key = varint(bytes, &mut i)?;
                match (key >> 3, key & 7) {
                    (1, 0) => seconds = varint(bytes, &mut i)? as i64,
                    (2, 0) => nanos = i64::from(varint(bytes, &mut i)? as i32),
                    (_, wire) => skip(bytes, &mut i, (wire & 7) as u8, stop)?,
                }
            }
            let ms = seconds.checked_mul(1000).and_then(|s| s.checked_add(nanos.div_euclid(1_000_000)));
            Slot::Int(ms.ok_or_else(|| format!("a Timestamp of {seconds} s out of range"))?)
        }
    })
}

/// One pass over a record whose fields come in field-number order, each
/// at most once, every value pushed as it is read and every field left
/// out filled as [`ProtobufDecoder::run`] fills it. `false` at anything
/// else (a field out of order or repeated, one the message does not
/// declare, a wrong wire type, a value that does not fit): the caller
/// rolls the row back and reads the record the general way, which decodes
/// it or says why not, so both paths give the same rows and reasons.
fn read_flat(
    columns: &SourceColumns,
    program: &Program,
    steps: &[Step],
    payload: &[u8],
    body: usize,
    batch: &mut Batch,
) -> bool {
    // The root message is there: a field's default applies.
    let fill = |col: usize, fill: &Fill, batch: &mut Batch| match fill {
        Fill::Default { value, .. } => push_default(columns, batch, col, value).is_ok(),
        Fill::Null => push_null(columns, batch, col).is_ok(),
    };
    let end = payload.len();
    let (mut at, mut next) = (body, 0);
    while at < end {
        let Ok(key) = varint(payload, &mut at) else { return false };
        let Some(skipped) = steps[next..].iter().position(|s| s.key == key) else { return false };
        for step in &steps[next..next + skipped] {
            if !fill(step.col, &step.fill, batch) {
                return false;
            }
        }
        let step = &steps[next + skipped];
        let Ok(slot) = value(payload, step.read, &mut at, end) else { return false };
        if push(columns, batch, step.col, slot, payload, program).is_err() {
            return false;
        }
        next += skipped + 1;
    }
    steps[next..].iter().all(|step| fill(step.col, &step.fill, batch))
        && program.unfed.iter().all(|(col, f)| fill(*col, f, batch))
}

/// Skips a field of wire type `wire`.
fn skip(bytes: &[u8], at: &mut usize, wire: u8, end: usize) -> Result<(), String> {
    match wire {
        0 => varint(bytes, at).map(drop),
        1 => take(at, 8, end).map(drop),
        2 => {
            let n = varint(bytes, at)?;
            take(at, n, end).map(drop)
        }
        5 => take(at, 4, end).map(drop),
        3 | 4 => Err("a group (deprecated wire types 3 and 4) is not supported".into()),
        w => Err(format!("wire type {w} at byte {at}")),
    }
}

/// A column's default, for a field the record leaves out.
fn push_default(columns: &SourceColumns, batch: &mut Batch, col: usize, value: &Default) -> Result<(), String> {
    if !columns.used[col] {
        return Ok(());
    }
    let column = &mut batch.columns[col];
    let pushed = match value {
        // A decimal's default is zero, in its storage.
        Default::Int(x) if matches!(column.data_type, sluice_plan::DataType::Decimal(..)) => {
            column.push_decimal(i128::from(*x))
        }
        Default::Int(x) => column.push_i64(time(columns, col, Some(*x))?),
        Default::Float(x) => column.push_f64(*x),
        Default::Bool(x) => column.push_bool(*x),
        Default::Text(x) => column.push_str(x),
    };
    pushed.map_err(|e| e.to_string())
}

/// The value the record set, into column `col`.
#[inline(always)]
fn push(
    columns: &SourceColumns,
    batch: &mut Batch,
    col: usize,
    slot: Slot,
    payload: &[u8],
    program: &Program,
) -> Result<(), String> {
    let into = columns.types[col];
    let text = |s: usize, e: usize| {
        std::str::from_utf8(&payload[s..e])
            .map_err(|_| format!("column `{}`: a string that is not UTF-8", name(columns, col)))
    };
    let pushed = match (slot, into) {
        (Slot::Unset, _) => return push_null(columns, batch, col),
        (Slot::Int(x), sluice_plan::DataType::Timestamp) => {
            let x = time(columns, col, Some(x))?;
            if !columns.used[col] {
                return Ok(());
            }
            batch.columns[col].push_i64(x)
        }
        (Slot::Text(s, e), sluice_plan::DataType::Timestamp) => {
            let t = text(s, e)?;
            let ms = parse_timestamp_ms(t)
                .ok_or_else(|| format!("column `{}`: `{t}` is not a timestamp", name(columns, col)))?;
            let x = time(columns, col, Some(ms))?;
            if !columns.used[col] {
                return Ok(());
            }
            batch.columns[col].push_i64(x)
        }
        (slot @ (Slot::Int(_) | Slot::Float(_) | Slot::Text(..)), sluice_plan::DataType::Decimal(p, s)) => {
            use sluice_plan::decimal;
            let v = match slot {
                Slot::Int(x) => decimal::rescale(i128::from(x), 0, s, p),
                Slot::Float(x) => decimal::from_f64(x, p, s),
                Slot::Text(a, b) => decimal::parse(text(a, b)?, p, s),
                _ => None,
            };
            let v = v.ok_or_else(|| format!("column `{}`: a value that is no {into} value", name(columns, col)))?;
            if !columns.used[col] {
                return Ok(());
            }
            batch.columns[col].push_decimal(v)
        }
        _ if !columns.used[col] => return Ok(()),
        (Slot::Int(x), sluice_plan::DataType::Double) =>
        {
            #[allow(clippy::cast_precision_loss)]
            batch.columns[col].push_f64(x as f64)
        }
        (Slot::Int(x), _) => batch.columns[col].push_i64(x),
        (Slot::Float(x), _) => batch.columns[col].push_f64(x),
        (Slot::Bool(x), _) => batch.columns[col].push_bool(x),
        (Slot::Text(s, e), _) => batch.columns[col].push_str(text(s, e)?),
        (Slot::Enum(e, number), _) => {
            let names = &program.enums[e];
            match names.binary_search_by_key(&number, |n| n.0) {
                Ok(i) => batch.columns[col].push_str(&names[i].1),
                // An unknown number (a newer writer's value): its number.
                Err(_) => batch.columns[col].push_str(&number.to_string()),
            }
        }
    };
    pushed.map_err(|e| e.to_string())
}

impl Encoding for ProtobufDecoder {
    fn columns(&self) -> &SourceColumns {
        &self.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        ProtobufDecoder::decode(self, payload, batch)
    }

    fn registry_type(&self) -> Option<&'static str> {
        Some("PROTOBUF")
    }

    /// The writer schema id of `payload`, when no schema is known for it
    /// yet: the runtime fetches it and calls [`ProtobufDecoder::add_schema`]
    /// (or [`ProtobufDecoder::add_unknown`]) before decoding.
    fn needs_schema(&self, payload: &[u8]) -> Option<u32> {
        if let Some((header, _)) = &self.last
            && payload.starts_with(header)
        {
            return None;
        }
        let id = wire_id(payload).ok()?;
        (!self.schemas.contains_key(&id)).then_some(id)
    }

    /// [`ProtobufDecoder::add_schema`] for a schema that imports the files
    /// of `references` (`(import name, text)`).
    fn add_schema_with(&mut self, id: u32, text: &str, references: &[(String, String)]) {
        let pool = parse_schema_with(text, references)
            .map_err(|e| format!("schema id {id} is not a Protobuf schema Sluice can read: {e}"));
        self.keep(id, pool);
    }

    /// The registry has no schema `id`: its records are dead letters, `why`.
    fn add_unknown(&mut self, id: u32, why: String) {
        self.keep(id, Err(why));
    }

    /// About how many bytes the compiled schemas and programs take (the
    /// core counts them against its memory budget).
    fn cache_bytes(&self) -> usize {
        self.sizes.values().sum::<usize>() + self.programs.len() * PROGRAM_BYTES
    }

    /// Forgets the ids the registry did not have (and schemas that could
    /// not be read): each is asked for again when a record names it.
    fn forget_unknown(&mut self) {
        self.schemas.retain(|_, p| p.is_ok());
        let schemas = &self.schemas;
        self.sizes.retain(|id, _| schemas.contains_key(id));
    }
}
#[cfg(test)]
mod tests;
