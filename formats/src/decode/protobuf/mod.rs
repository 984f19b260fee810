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

mod cell;
mod nested;
mod program;
mod wire;

use std::collections::HashMap;
use std::path::Path;

use base64::Engine;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use protox::prost::Message;
use protox::prost_reflect::{DescriptorPool, FileDescriptor, MessageDescriptor};
use sluice_plan::{Batch, ColumnOrigin, Plan};

use self::cell::{push, push_default};
use self::nested::{Reader, Scratch, Spans, through};
use self::program::{Action, Columns, FieldKind, Fill, Node, Program, Read, Step};
use self::wire::{Slot, skip, take, value, varint, zigzag};
use super::cells::push_null;
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
    /// What reading nested columns reuses from record to record.
    scratch: Scratch,
    /// Whether records in field-number order take the one-pass path
    /// (`Program::flat`); off only to test the two paths against each
    /// other.
    flat_path: bool,
    /// Records the one-pass path read (tests check it is taken).
    #[cfg(test)]
    flat_reads: usize,
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
            scratch: Scratch::default(),
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
            match (self.slots[col], fill) {
                (Slot::Seen, Fill::Nested { index, .. }) => {
                    let nested = &program.nested[*index];
                    if !self.columns.used[col] {
                        continue;
                    }
                    let mut reader = Reader {
                        payload,
                        enums: &program.enums,
                        name: &self.columns.names[col],
                        scratch: &mut self.scratch,
                    };
                    reader.scratch.path.clear();
                    // The messages the field is in: the root, or every
                    // occurrence of the message fields on its path.
                    let parents = &nested.numbers[..nested.numbers.len().saturating_sub(1)];
                    let column = &mut batch.columns[col];
                    through(&Spans::One(body, payload.len()), parents, &mut |spans| {
                        reader.field(&nested.field, spans, column)
                    })?;
                }
                // A repeated or map field left out has no elements.
                (Slot::Unset, Fill::Nested { index, node })
                    if self.present[*node]
                        && matches!(
                            program.nested[*index].field.kind,
                            FieldKind::Repeated(_) | FieldKind::Map { .. }
                        ) =>
                {
                    if self.columns.used[col] {
                        batch.columns[col].end_nested_row().map_err(|e| e.to_string())?;
                    }
                }
                (Slot::Unset, Fill::Default { node, value }) if self.present[*node] => {
                    push_default(&self.columns, batch, col, value)?;
                }
                (Slot::Unset | Slot::Seen, _) => push_null(&self.columns, batch, col)?,
                (slot, _) => push(&self.columns, batch, col, slot, payload, &program.enums)?,
            }
        }
        Ok(())
    }
}

/// The message `indexes` names in the schema's file.
fn message(pool: &DescriptorPool, indexes: &[i64]) -> Result<MessageDescriptor, String> {
    let file = schema_file(pool).ok_or("an empty schema")?;
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

/// The registry's schema itself among the files compiled with it (those
/// it imports).
pub(crate) fn schema_file(pool: &DescriptorPool) -> Option<FileDescriptor> {
    pool.get_file_by_name(SCHEMA_FILE).or_else(|| pool.files().last())
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
                Some(Action::Nested { col, wires }) if wires & 1 << wire != 0 => {
                    self.slots[*col] = Slot::Seen;
                    skip(bytes, &mut at, wire, end)?;
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
        // No flat path reads a message with a nested column.
        Fill::Nested { .. } => false,
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
        if push(columns, batch, step.col, slot, payload, &program.enums).is_err() {
            return false;
        }
        next += skipped + 1;
    }
    steps[next..].iter().all(|step| fill(step.col, &step.fill, batch))
        && program.unfed.iter().all(|(col, f)| fill(*col, f, batch))
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
