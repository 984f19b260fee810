//! Avro record values in the Confluent wire format → columns.
//!
//! A value is a magic byte `0`, the writer schema's registry id (4 bytes,
//! big-endian), then the Avro binary encoding of one datum. The decoder
//! knows nothing of the registry: the runtime asks [`AvroDecoder::needs_schema`]
//! before decoding, fetches the schema the id names (once per worker) and
//! hands it over with [`AvroDecoder::add_schema`]. Each writer schema is
//! compiled against the source's columns once ([`program`]); records then
//! decode with no lookup by name and no allocation.
//!
//! A record that cannot be read — not in the wire format, an id the
//! registry does not know, a writer schema no column list can take, bytes
//! that end early or run on — is rejected with a reason, and the batch is
//! left as before it (the dead-letter output gets the record).

mod nested;
mod program;
mod resolve;
mod schema;
mod values;
mod writers;

use std::collections::HashMap;

use sluice_crds::SourceSpec;
use sluice_plan::{Batch, ColumnOrigin, Plan, Scalar};

use self::program::{Op, Program};
use self::resolve::{absent, default_value};
use self::schema::{Type, TypeId};
use self::values::Conv;
use self::values::{Budget, Cursor, read_value, skip};
use super::cells::{name, push_null};
use super::nested_path::Path;
use super::wire::HEADER;
use super::{DecodeError, SourceColumns, wire};

/// Reads Avro values of one source.
#[derive(Debug, Clone)]
pub struct AvroDecoder {
    /// The columns' names, types, nullability and use, and the metadata
    /// columns, as the JSON decoder reads them (a record's key, headers
    /// and offsets are read the same whatever the value's format).
    pub(super) columns: SourceColumns,
    /// Each field column and its path.
    fields: Vec<(usize, Vec<String>)>,
    /// Per writer schema id: its program, or why its records cannot be read.
    programs: HashMap<u32, Result<Program, String>>,
    /// The id the last record named (one the decoder has a program or a
    /// reason for) and its flat program, if it has one:
    /// records of a topic name the same id one after another, and a flat
    /// record of values (most are) runs without the tree's recursion.
    last: Option<(u32, Option<Vec<Step>>)>,
    /// Where in a nested column's value a record is being read, for
    /// errors (kept here so that reading allocates nothing).
    nested_path: Path,
    /// A writer schema that is not a record is read whole into the one
    /// field column (a record key's decoder: a `string` or `long` key).
    pub(crate) whole_primitive: bool,
    /// The reader's aliases of each field column (other paths it is read
    /// from when the writer has no field at its own), and its default.
    aliases: Vec<(usize, Vec<String>)>,
    defaults: Vec<Option<Scalar>>,
}

impl AvroDecoder {
    pub fn new(plan: &Plan) -> Self {
        let fields = (0..plan.source.schema.fields.len())
            .filter_map(|i| match plan.source.origin(i) {
                ColumnOrigin::Field(path) => Some((i, path)),
                ColumnOrigin::Metadata { .. } => None,
            })
            .collect();
        Self {
            defaults: vec![None; plan.source.schema.fields.len()],
            columns: SourceColumns::new(plan),
            fields,
            programs: HashMap::new(),
            last: None,
            nested_path: Path::new(),
            whole_primitive: false,
            aliases: Vec::new(),
        }
    }

    /// Resolves writer fields against `source`'s columns as Avro's schema
    /// resolution resolves them against a reader schema: by name, then by
    /// the column's `aliases`, then the column's `default`. A default that
    /// is no value of its column's type is the job's error, named.
    pub fn resolve_with(&mut self, source: &SourceSpec) -> Result<(), String> {
        for &(col, _) in &self.fields {
            let name = name(&self.columns, col);
            let Some(spec) = source.schema.columns.iter().find(|c| c.name == name) else { continue };
            for alias in &spec.aliases {
                self.aliases.push((col, alias.split('.').map(str::to_owned).collect()));
            }
            if let Some(text) = &spec.default {
                let value = default_value(text, self.columns.types[col]).ok_or_else(|| {
                    format!(
                        "source `{}`, column `{name}`: default {:?} is not a {} value",
                        source.name,
                        text.chars().take(40).collect::<String>(),
                        self.columns.types[col]
                    )
                })?;
                self.defaults[col] = Some(value);
            }
        }
        Ok(())
    }

    /// A decoder whose field columns read the value at `path_of(their
    /// path)`, or nothing for `None` (the caller fills those): Debezium's
    /// envelope holds a row's columns under `after` or `before`.
    pub(crate) fn with_paths(plan: &Plan, path_of: impl Fn(&[String]) -> Option<Vec<String>>) -> Self {
        let mut d = Self::new(plan);
        d.fields = d.fields.into_iter().filter_map(|(col, path)| Some((col, path_of(&path)?))).collect();
        d
    }

    /// Top-level field `name` of `payload`'s record, a string (or a
    /// nullable one: `None` for NULL), found by skipping the fields before
    /// it. The writer schema must have been handed over.
    pub(crate) fn peek_string<'p>(&self, payload: &'p [u8], name: &str) -> Result<Option<&'p str>, String> {
        let id = schema_id(payload)?;
        let program = match self.programs.get(&id) {
            Some(Ok(p)) => p,
            Some(Err(why)) => return Err(why.clone()),
            None => return Err(format!("schema id {id} was not fetched")),
        };
        let types = &program.schema.types;
        let Type::Record { fields, .. } = &types[program.schema.root()] else {
            return Err(format!("schema id {id} is not a record"));
        };
        let mut cursor = Cursor { buf: &payload[HEADER..], at: 0 };
        let mut nothing = Batch::new(Vec::new(), 0);
        let mut path = Path::new();
        let mut run = Run {
            program,
            columns: &self.columns,
            batch: &mut nothing,
            budget: Budget::default(),
            nested_path: &mut path,
        };
        for field in fields {
            if field.name != name {
                run.skip(field.ty, &mut cursor)?;
                continue;
            }
            let mut ty = field.ty;
            if let Type::Union(branches) = &types[ty] {
                let b = cursor.long()?;
                ty = usize::try_from(b)
                    .ok()
                    .and_then(|b| branches.get(b).copied())
                    .ok_or_else(|| format!("union branch {b} of {}", branches.len()))?;
            }
            return match &types[ty] {
                Type::Null => Ok(None),
                Type::String(_) => cursor.text().map(Some),
                other => Err(format!("field `{name}` is {}, not a string", other.describe())),
            };
        }
        Err(format!("the writer schema (id {id}) has no field `{name}`"))
    }

    /// An empty batch with a builder for each used column.
    pub fn new_batch(&self, capacity: usize) -> Batch {
        self.columns.new_batch(capacity)
    }

    /// Appends `payload` as one row of `batch`, or explains why it cannot.
    pub fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let id = schema_id(payload).map_err(DecodeError)?;
        if self.last.as_ref().is_none_or(|(last, _)| *last != id)
            && let Some(program) = self.programs.get(&id)
        {
            // Kept only for an id the decoder has an answer for, so that
            // `needs_schema` may trust it.
            let flat = program.as_ref().ok().and_then(|p| flatten(&p.root, p));
            self.last = Some((id, flat));
        }
        if let Some((last, Some(steps))) = &self.last
            && *last == id
        {
            let rows = batch.len;
            let mut cursor = Cursor { buf: &payload[HEADER..], at: 0 };
            match run_flat(steps, &self.columns, &self.defaults, batch, &mut cursor) {
                Ok(()) if cursor.at == cursor.buf.len() => {
                    batch.len = rows + 1;
                    return Ok(());
                }
                // Anything else: rolled back and decoded by the tree, which
                // says why.
                _ => self.columns.rollback(batch, rows),
            }
        }
        self.decode_by_tree(payload, batch)
    }

    /// The program's tree alone, without the flat path: what `decode`
    /// falls back to, and the reference the flat path is tested against.
    #[doc(hidden)]
    pub fn decode_by_tree(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let id = schema_id(payload).map_err(DecodeError)?;
        let program = match self.programs.get(&id) {
            Some(Ok(p)) => p,
            Some(Err(why)) => return Err(DecodeError(why.clone())),
            None => return Err(DecodeError(format!("schema id {id} was not fetched"))),
        };
        let rows = batch.len;
        let mut cursor = Cursor { buf: &payload[HEADER..], at: 0 };
        let mut run = Run {
            program,
            columns: &self.columns,
            batch,
            budget: Budget::default(),
            nested_path: &mut self.nested_path,
        };
        let result = run.op(&program.root, &mut cursor).and_then(|()| {
            for &col in &program.absent {
                absent(run.columns, &self.defaults, run.batch, col)?;
            }
            match cursor.buf.len() - cursor.at {
                0 => Ok(()),
                n => Err(format!("{n} bytes after the value (written with another schema than id {id}?)")),
            }
        });
        match result {
            Ok(()) => {
                batch.len = rows + 1;
                Ok(())
            }
            Err(e) => {
                self.columns.rollback(batch, rows);
                Err(DecodeError(format!("avro: {e}")))
            }
        }
    }
}

/// One value of a flat record: a column's, or one skipped.
#[derive(Debug, Clone, Copy)]
enum Step {
    Read {
        col: usize,
        conv: Conv,
    },
    /// A `["null", T]` union into a column (`null_branch`: the index of
    /// its `null`).
    Nullable {
        col: usize,
        conv: Conv,
        null_branch: i64,
    },
    Skip(Width),
    /// A union no column reads (`["null", "string"]`: most real schemas
    /// have one): its branch, then that branch's value, skipped.
    SkipUnion {
        branches: u8,
        widths: [Width; MAX_FLAT_BRANCHES],
    },
    /// A column the writer has no field for (never `required`: such a
    /// schema does not compile).
    Absent(usize),
}

/// The most branches of a union the flat path skips (a wider one sends
/// the record to the tree).
const MAX_FLAT_BRANCHES: usize = 4;

/// How many bytes a skipped value takes.
#[derive(Debug, Clone, Copy)]
enum Width {
    Varint,
    Fixed(usize),
    Prefixed,
}

/// The steps of a program whose root record holds only values (read or
/// skipped) and nullable values, then a NULL for each column the writer
/// has no field for; `None` for any other.
fn flatten(root: &Op, program: &Program) -> Option<Vec<Step>> {
    let Op::Record(ops) = root else { return None };
    let width = |ty: TypeId| match &program.schema.types[ty] {
        Type::Boolean => Some(Width::Fixed(1)),
        Type::Int(_) | Type::Long(_) | Type::Enum { .. } => Some(Width::Varint),
        Type::Float => Some(Width::Fixed(4)),
        Type::Double => Some(Width::Fixed(8)),
        Type::Bytes(_) | Type::String(_) => Some(Width::Prefixed),
        Type::Fixed { size, .. } => Some(Width::Fixed(*size)),
        Type::Null => Some(Width::Fixed(0)),
        _ => None,
    };
    let skip = |ty: TypeId| match &program.schema.types[ty] {
        Type::Union(branches) if branches.len() <= MAX_FLAT_BRANCHES => {
            let mut widths = [Width::Fixed(0); MAX_FLAT_BRANCHES];
            for (w, &b) in widths.iter_mut().zip(branches) {
                *w = width(b)?;
            }
            Some(Step::SkipUnion { branches: u8::try_from(branches.len()).ok()?, widths })
        }
        _ => width(ty).map(Step::Skip),
    };
    ops.iter()
        .map(|op| match op {
            Op::Read { col, conv } => Some(Step::Read { col: *col, conv: *conv }),
            Op::Skip(ty) => skip(*ty),
            Op::Union(branches) => match branches.as_slice() {
                [Op::Nulls(cols, _), Op::Read { col, conv }] if cols == &[*col] => {
                    Some(Step::Nullable { col: *col, conv: *conv, null_branch: 0 })
                }
                [Op::Read { col, conv }, Op::Nulls(cols, _)] if cols == &[*col] => {
                    Some(Step::Nullable { col: *col, conv: *conv, null_branch: 1 })
                }
                _ => None,
            },
            _ => None,
        })
        .chain(program.absent.iter().map(|&col| Some(Step::Absent(col))))
        .collect()
}

/// A flat record's values into their columns; an `Err` leaves the
/// caller to roll back.
fn run_flat(
    steps: &[Step],
    columns: &SourceColumns,
    defaults: &[Option<Scalar>],
    batch: &mut Batch,
    cur: &mut Cursor<'_>,
) -> Result<(), String> {
    for step in steps {
        match *step {
            Step::Read { col, conv } => read_value(columns, batch, col, conv, cur, &[])?,
            Step::Nullable { col, conv, null_branch } => match cur.long()? {
                b if b == null_branch => push_null(columns, batch, col)?,
                b if b == 1 - null_branch => read_value(columns, batch, col, conv, cur, &[])?,
                _ => return Err(String::new()),
            },
            Step::Skip(width) => skip_value(width, cur)?,
            Step::SkipUnion { branches, widths } => {
                let b = cur.long()?;
                // A branch out of range: the tree says why.
                let width = usize::try_from(b).ok().filter(|&b| b < usize::from(branches)).ok_or_else(String::new)?;
                skip_value(widths[width], cur)?;
            }
            Step::Absent(col) => absent(columns, defaults, batch, col)?,
        }
    }
    Ok(())
}

/// Skips one value of a known width.
#[inline]
fn skip_value(width: Width, cur: &mut Cursor<'_>) -> Result<(), String> {
    match width {
        Width::Varint => drop(cur.long()?),
        Width::Fixed(n) => drop(cur.take(n)?),
        Width::Prefixed => drop(cur.bytes()?),
    }
    Ok(())
}

/// The schema id of a value in the Confluent wire format.
pub fn schema_id(payload: &[u8]) -> Result<u32, String> {
    wire::schema_id(payload).map_err(|e| format!("avro: {e}"))
}

/// One record's decoding.
struct Run<'a, 'b> {
    program: &'a Program,
    columns: &'a SourceColumns,
    batch: &'b mut Batch,
    /// How deep and how many items the value has gone so far.
    budget: Budget,
    nested_path: &'b mut Path,
}

impl Run<'_, '_> {
    fn op(&mut self, op: &Op, cur: &mut Cursor<'_>) -> Result<(), String> {
        match op {
            Op::Skip(ty) => self.skip(*ty, cur),
            Op::Read { col, conv } => self.read(*col, *conv, cur),
            Op::Record(ops) => ops.iter().try_for_each(|op| self.op(op, cur)),
            Op::Union(branches) => {
                let b = cur.long()?;
                let op = usize::try_from(b)
                    .ok()
                    .and_then(|b| branches.get(b))
                    .ok_or_else(|| format!("union branch {b} of {}", branches.len()))?;
                self.op(op, cur)
            }
            Op::Nulls(cols, then) => {
                for &c in cols {
                    self.push_null(c)?;
                }
                self.op(then, cur)
            }
            Op::Fail(why) => Err(why.clone()),
            Op::Nested { col, read } => {
                let col = *col;
                let types = &self.program.schema.types;
                let (symbols, names) = (&self.program.symbols, &self.columns.names);
                let mut reader = nested::Reader::new(types, symbols, &mut self.budget, &names[col], self.nested_path);
                let column = &mut self.batch.columns[col];
                reader.read(read, cur, Some(&mut *column))?;
                if self.columns.required[col] && !column.is_valid(column.len() - 1) {
                    return Err(format!("required column `{}` is null", name(self.columns, col)));
                }
                Ok(())
            }
        }
    }

    /// Skips a value of writer type `ty`.
    fn skip(&mut self, ty: TypeId, cur: &mut Cursor<'_>) -> Result<(), String> {
        skip(&self.program.schema.types, ty, cur, &mut self.budget)
    }

    fn push_null(&mut self, col: usize) -> Result<(), String> {
        push_null(self.columns, self.batch, col)
    }

    fn read(&mut self, col: usize, conv: Conv, cur: &mut Cursor<'_>) -> Result<(), String> {
        read_value(self.columns, self.batch, col, conv, cur, &self.program.symbols)
    }
}

#[cfg(test)]
pub(in crate::decode) mod tests;
