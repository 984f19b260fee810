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

mod program;
mod resolve;
mod schema;
mod writers;

use std::collections::HashMap;

use sluice_crds::SourceSpec;
use sluice_plan::time::parse_timestamp_ms;
use sluice_plan::{Batch, ColumnOrigin, Plan, Scalar};

use self::program::{Conv, Op, Program};
use self::resolve::{absent, default_value};
use self::schema::{Type, TypeId};
use super::cells::{name, push_null, time};
use super::wire::HEADER;
use super::{DecodeError, SourceColumns, wire};

const MS_PER_DAY: i64 = 86_400_000;
/// Nesting a datum may reach (a recursive type's values nest as deep as
/// the writer made them; decoding recurses).
const MAX_NESTING: usize = 64;
/// Array and map items a value may hold beyond one per byte (items of
/// no bytes: nulls).
const ITEMS_BEYOND_BYTES: u64 = 65_536;

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
        let mut run = Run { program, columns: &self.columns, batch: &mut nothing, depth: 0, items: 0 };
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
        let mut run = Run { program, columns: &self.columns, batch, depth: 0, items: 0 };
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

/// The bytes of one datum, read front to back.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A zig-zag varint of at most 10 bytes.
    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.at) else { return Err(self.ended("a number")) };
            self.at += 1;
            if shift == 63 && b > 1 {
                return Err(format!("a number longer than 64 bits at byte {}", self.at));
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(format!("a number longer than 10 bytes at byte {}", self.at))
    }

    fn int(&mut self) -> Result<i32, String> {
        let v = self.long()?;
        i32::try_from(v).map_err(|_| format!("{v} is out of range for an Avro int"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| self.ended("bytes"))?;
        let bytes = &self.buf[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    /// Length-prefixed bytes (`bytes`, `string`).
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.long()?;
        let n = usize::try_from(n).map_err(|_| format!("a negative length {n}"))?;
        self.take(n)
    }

    fn text(&mut self) -> Result<&'a str, String> {
        std::str::from_utf8(self.bytes()?).map_err(|_| "a string that is not UTF-8".to_owned())
    }

    fn ended(&self, what: &str) -> String {
        format!("the value ends at byte {} in the middle of {what}", self.buf.len())
    }
}

/// One record's decoding.
struct Run<'a, 'b> {
    program: &'a Program,
    columns: &'a SourceColumns,
    batch: &'b mut Batch,
    depth: usize,
    /// Array and map items so far.
    items: u64,
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
        }
    }

    /// Skips a value of writer type `ty`.
    fn skip(&mut self, ty: TypeId, cur: &mut Cursor<'_>) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("a value nested more than {MAX_NESTING} levels"));
        }
        let types = &self.program.schema.types;
        let skipped = match &types[ty] {
            Type::Null => Ok(()),
            Type::Boolean => cur.take(1).map(drop),
            Type::Int(_) | Type::Long(_) | Type::Enum { .. } => cur.long().map(drop),
            Type::Float => cur.take(4).map(drop),
            Type::Double => cur.take(8).map(drop),
            Type::Bytes(_) | Type::String(_) => cur.bytes().map(drop),
            Type::Fixed { size, .. } => cur.take(*size).map(drop),
            Type::Record { fields, .. } => fields.iter().try_for_each(|f| self.skip(f.ty, cur)),
            Type::Union(branches) => {
                let b = cur.long()?;
                let branch = usize::try_from(b).ok().and_then(|b| branches.get(b)).copied();
                let branch = branch.ok_or_else(|| format!("union branch {b} of {}", branches.len()))?;
                self.skip(branch, cur)
            }
            Type::Array(item) => self.blocks(cur, |run, cur| run.skip(*item, cur)),
            Type::Map(value) => self.blocks(cur, |run, cur| {
                cur.bytes()?;
                run.skip(*value, cur)
            }),
        };
        self.depth -= 1;
        skipped
    }

    /// An array's or map's blocks: a count (negative: followed by the
    /// block's size in bytes), its items, until a count of 0.
    fn blocks(
        &mut self,
        cur: &mut Cursor<'_>,
        mut item: impl FnMut(&mut Self, &mut Cursor<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        loop {
            let count = cur.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                cur.long()?;
            }
            // An item takes a byte at least, unless it is a null (or a
            // record of nothing): items beyond the value's bytes, past a
            // margin for those, cannot be honest — and would loop for
            // ever over a few bytes of counts.
            let n = count.unsigned_abs();
            self.items = self.items.saturating_add(n);
            if self.items > cur.buf.len() as u64 + ITEMS_BEYOND_BYTES {
                return Err(format!("{} array or map items in a value of {} bytes", self.items, cur.buf.len()));
            }
            for _ in 0..n {
                item(self, cur)?;
            }
        }
    }

    fn push_null(&mut self, col: usize) -> Result<(), String> {
        push_null(self.columns, self.batch, col)
    }

    fn read(&mut self, col: usize, conv: Conv, cur: &mut Cursor<'_>) -> Result<(), String> {
        read_value(self.columns, self.batch, col, conv, cur, &self.program.symbols)
    }
}

/// Reads one value and pushes it into column `col` (when the query uses it).
#[inline]
fn read_value(
    columns: &SourceColumns,
    batch: &mut Batch,
    col: usize,
    conv: Conv,
    cur: &mut Cursor<'_>,
    symbols: &[Vec<String>],
) -> Result<(), String> {
    let used = columns.used[col];
    let pushed = match conv {
        Conv::Null => return push_null(columns, batch, col),
        Conv::Boolean => {
            let b = match cur.take(1)?[0] {
                0 => false,
                1 => true,
                b => return Err(format!("column `{}`: boolean byte {b}", name(columns, col))),
            };
            if !used {
                return Ok(());
            }
            batch.columns[col].push_bool(b)
        }
        Conv::IntToBigint | Conv::LongToBigint | Conv::MillisToTimestamp => {
            let x = if conv == Conv::IntToBigint { i64::from(cur.int()?) } else { cur.long()? };
            let x = if conv == Conv::MillisToTimestamp { time(columns, col, Some(x))? } else { x };
            if !used {
                return Ok(());
            }
            batch.columns[col].push_i64(x)
        }
        Conv::MicrosToTimestamp | Conv::DaysToTimestamp => {
            let ms = if conv == Conv::MicrosToTimestamp {
                Some(cur.long()?.div_euclid(1000))
            } else {
                i64::from(cur.int()?).checked_mul(MS_PER_DAY)
            };
            let x = time(columns, col, ms)?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_i64(x)
        }
        Conv::IntToDouble | Conv::LongToDouble | Conv::FloatToDouble | Conv::DoubleToDouble => {
            #[allow(clippy::cast_precision_loss)]
            let x = match conv {
                Conv::IntToDouble => f64::from(cur.int()?),
                Conv::LongToDouble => cur.long()? as f64,
                Conv::FloatToDouble => {
                    let b = cur.take(4)?;
                    f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                }
                _ => {
                    let mut w = [0; 8];
                    w.copy_from_slice(cur.take(8)?);
                    f64::from_le_bytes(w)
                }
            };
            if !used {
                return Ok(());
            }
            batch.columns[col].push_f64(x)
        }
        Conv::StringToTimestamp => {
            let text = cur.text()?;
            let ms = parse_timestamp_ms(text)
                .ok_or_else(|| format!("column `{}`: `{text}` is not a timestamp", name(columns, col)))?;
            let x = time(columns, col, Some(ms))?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_i64(x)
        }
        Conv::StringToString | Conv::BytesToString | Conv::FixedToString(_) => {
            let bytes = match conv {
                Conv::FixedToString(n) => cur.take(n)?,
                _ => cur.bytes()?,
            };
            let text = std::str::from_utf8(bytes)
                .map_err(|_| format!("column `{}`: a string that is not UTF-8", name(columns, col)))?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_str(text)
        }
        Conv::EnumToString(e) => {
            let i = cur.long()?;
            let symbols = symbols.get(e).map_or(&[][..], Vec::as_slice);
            let symbol = usize::try_from(i).ok().and_then(|i| symbols.get(i));
            let symbol = symbol.ok_or_else(|| format!("enum symbol {i} of {}", symbols.len()))?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_str(symbol)
        }
        Conv::DecimalToDouble { scale, fixed } | Conv::DecimalToString { scale, fixed } => {
            let bytes = match fixed {
                Some(n) => cur.take(n)?,
                None => cur.bytes()?,
            };
            let unscaled = unscaled(bytes)
                .ok_or_else(|| format!("column `{}`: a decimal of {} bytes", name(columns, col), bytes.len()))?;
            if !used {
                return Ok(());
            }
            let column = &mut batch.columns[col];
            if matches!(conv, Conv::DecimalToDouble { .. }) {
                #[allow(clippy::cast_precision_loss)]
                column.push_f64(unscaled as f64 / 10f64.powi(i32::try_from(scale).unwrap_or(0)))
            } else {
                column.push_str(&decimal_text(unscaled, scale))
            }
        }
        Conv::DecimalToDecimal { scale, fixed, precision, to } => {
            let bytes = match fixed {
                Some(n) => cur.take(n)?,
                None => cur.bytes()?,
            };
            let v = unscaled(bytes).and_then(|v| {
                use sluice_plan::decimal::{div_round, fit, pow10};
                let from = u8::try_from(scale).ok()?;
                let v = if to >= from { v.checked_mul(pow10(to - from))? } else { div_round(v, pow10(from - to)) };
                fit(v, precision)
            });
            let v = v.ok_or_else(|| {
                format!("column `{}`: a decimal that does not fit decimal({precision},{to})", name(columns, col))
            })?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_decimal(v)
        }
        Conv::IntegerToDecimal { wide, precision, to } => {
            let x = if wide { cur.long()? } else { i64::from(cur.int()?) };
            let v = sluice_plan::decimal::rescale(i128::from(x), 0, to, precision).ok_or_else(|| {
                format!("column `{}`: {x} does not fit decimal({precision},{to})", name(columns, col))
            })?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_decimal(v)
        }
        Conv::StringToDecimal { precision, to } => {
            let text = cur.text()?;
            let v = sluice_plan::decimal::parse(text, precision, to).ok_or_else(|| {
                let shown: String = text.chars().take(40).collect();
                format!("column `{}`: {shown:?} is no decimal({precision},{to}) value", name(columns, col))
            })?;
            if !used {
                return Ok(());
            }
            batch.columns[col].push_decimal(v)
        }
    };
    pushed.map_err(|e| e.to_string())
}

/// A big-endian two's-complement integer that fits 16 bytes (a longer
/// `fixed` whose leading bytes only extend the sign, as a `fixed(20)` of a
/// small value has, reads too).
fn unscaled(mut bytes: &[u8]) -> Option<i128> {
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    while bytes.len() > 16 {
        // A dropped byte must be fill, and the byte after it keep the sign.
        if bytes[0] != fill || (bytes[1] & 0x80 != 0) != (fill != 0) {
            return None;
        }
        bytes = &bytes[1..];
    }
    let mut word = [fill; 16];
    word[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(word))
}

/// `unscaled × 10^-scale`, exactly (`-12345`, scale 2 → `-123.45`).
fn decimal_text(unscaled: i128, scale: u32) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    let scale = scale as usize;
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{frac}")
}

#[cfg(test)]
pub(in crate::decode) mod tests;
