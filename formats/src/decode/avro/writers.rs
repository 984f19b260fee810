//! The Avro decoder as an [`Encoding`]: its writer schemas, by registry
//! id, fetched by the runtime and compiled against the columns (a bounded
//! cache: ids come from records, which anyone may write).

use super::program::{Columns, Program};
use super::schema::{Schema, Type};
use super::{AvroDecoder, Op, schema_id};
use crate::decode::columns::SourceColumns;
use crate::decode::encoding::{Encoding, MAX_SCHEMAS};
use crate::decode::error::DecodeError;
use sluice_plan::Batch;

impl AvroDecoder {
    /// The writer schema registered under `id` (its JSON text): compiled
    /// against the columns. One that cannot be read makes each record
    /// written with it a dead letter saying why.
    pub fn add_schema(&mut self, id: u32, text: &str) {
        self.add_schema_with(id, text, &[]);
    }

    /// Keeps schema `id`'s program, within [`MAX_SCHEMAS`]: the ids
    /// come from records, which anyone may write.
    fn keep(&mut self, id: u32, program: Result<Program, String>) {
        if self.programs.len() >= MAX_SCHEMAS {
            self.programs.retain(|_, p| p.is_ok());
            if self.programs.len() >= MAX_SCHEMAS {
                self.programs.clear();
            }
        }
        self.programs.insert(id, program);
        self.last = None;
    }
}

impl Encoding for AvroDecoder {
    fn columns(&self) -> &SourceColumns {
        &self.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        AvroDecoder::decode(self, payload, batch)
    }

    fn registry_type(&self) -> Option<&'static str> {
        Some("AVRO")
    }

    /// The writer schema id of `payload`, when no schema is known for it
    /// yet: the runtime fetches it and calls [`AvroDecoder::add_schema`]
    /// (or [`AvroDecoder::add_unknown`]) before decoding.
    fn needs_schema(&self, payload: &[u8]) -> Option<u32> {
        let id = schema_id(payload).ok()?;
        // Asked for every record: the id the last record named is known
        // without a lookup.
        if self.last.as_ref().is_some_and(|(last, _)| *last == id) {
            return None;
        }
        (!self.programs.contains_key(&id)).then_some(id)
    }

    /// [`AvroDecoder::add_schema`] for a schema whose named types may be
    /// defined in `references` (`(name, text)`, dependencies first).
    fn add_schema_with(&mut self, id: u32, text: &str, references: &[(String, String)]) {
        let program = Schema::parse_with(text, references)
            .map_err(|e| format!("schema id {id} is not a valid Avro schema: {e}"))
            .and_then(|schema| {
                let whole: Vec<(usize, Vec<String>)>;
                let fields = match self.fields.as_slice() {
                    [(col, _)]
                        if self.whole_primitive && !matches!(schema.types[schema.root()], Type::Record { .. }) =>
                    {
                        whole = vec![(*col, Vec::new())];
                        &whole
                    }
                    fields => fields,
                };
                let defaulted: Vec<bool> = self.defaults.iter().map(Option::is_some).collect();
                let columns = Columns {
                    fields,
                    aliases: &self.aliases,
                    defaulted: &defaulted,
                    types: &self.columns.types,
                    required: &self.columns.required,
                    used: &self.columns.used,
                    names: &self.columns.names,
                };
                Program::compile(schema, &columns).map_err(|e| format!("schema id {id}: {e}"))
            });
        self.keep(id, program);
    }

    /// The registry has no schema `id`: its records are dead letters, `why`
    /// (until [`AvroDecoder::forget_unknown`]).
    fn add_unknown(&mut self, id: u32, why: String) {
        self.keep(id, Err(why));
    }

    /// About how many bytes the compiled writer schemas take (the core
    /// counts them against its memory budget): a few of them in a topic.
    fn cache_bytes(&self) -> usize {
        let type_bytes = size_of::<Type>() + size_of::<Op>() + 64;
        self.programs.values().map(|p| p.as_ref().map_or_else(String::len, |p| p.schema.types.len() * type_bytes)).sum()
    }

    /// Forgets the ids the registry did not have (and schemas that could
    /// not be read): each is asked for again when a record names it.
    fn forget_unknown(&mut self) {
        self.programs.retain(|_, p| p.is_ok());
        self.last = None;
    }
}
