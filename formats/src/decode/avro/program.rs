//! A writer schema compiled against a source's columns: Avro schema
//! resolution, done once per writer schema instead of per record.
//!
//! The reader is the source's column list: a column named `bid.price`
//! reads field `price` of record field `bid`. Fields are matched by name,
//! in whatever order the writer wrote them; a writer field no column reads
//! is skipped; a column the writer has no field for is NULL (refused if
//! the column is `required`). So a producer that adds a field or drops an
//! optional one keeps every record readable — the compatible evolutions
//! the Schema Registry lets through. As Avro's schema resolution has it,
//! a column the writer has no field of its name for reads the field of
//! one of its aliases (the reader's names in earlier versions), and one
//! found neither way takes its default (refused if `required` and it has
//! none). A union is resolved per branch: its
//! `null` branch makes the columns under it NULL, a branch whose type no
//! column can take fails only the records that use it.
//!
//! The compiled program is a tree of [`Op`]s in the writer's field order:
//! decoding walks it and the record's bytes side by side, pushing each
//! value straight into its column, with no lookup by name and no
//! allocation per record.

use super::nested::{self, Nested};
use super::schema::{Schema, Type, TypeId};
use super::values::{Conv, conv};
use sluice_plan::DataType;

/// One step of a compiled program.
#[derive(Debug, Clone)]
pub(super) enum Op {
    /// A value no column reads.
    Skip(TypeId),
    /// A value read into column `col`.
    Read { col: usize, conv: Conv },
    /// A record's fields, in the writer's order.
    Record(Vec<Op>),
    /// A union: the op of each branch, by the branch index the record gives.
    Union(Vec<Op>),
    /// NULL into each of these columns (a union's `null` branch, or a
    /// branch that holds none of them), then `then`.
    Nulls(Vec<usize>, Box<Op>),
    /// A branch no column can take: the record is a dead letter, with this reason.
    Fail(String),
    /// A value read into nested column `col` ([`super::nested`]).
    Nested { col: usize, read: Nested },
}

/// A writer schema resolved against the columns.
#[derive(Debug, Clone)]
pub(super) struct Program {
    pub(super) schema: Schema,
    pub(super) root: Op,
    /// Columns the writer schema has no field for: NULL in every record.
    pub(super) absent: Vec<usize>,
    /// The symbols of every enum a column reads.
    pub(super) symbols: Vec<Vec<String>>,
}

/// What the compiler knows of the columns.
pub(super) struct Columns<'a> {
    /// Each field column's index and path (`bid.price` → `["bid", "price"]`).
    pub(super) fields: &'a [(usize, Vec<String>)],
    /// Other paths a column is read from when the writer has no field at
    /// its own (its aliases), in the order tried.
    pub(super) aliases: &'a [(usize, Vec<String>)],
    /// Per column: whether it has a default (it may then be absent, even
    /// `required`).
    pub(super) defaulted: &'a [bool],
    pub(super) types: &'a [DataType],
    pub(super) required: &'a [bool],
    /// Per column: whether the query reads it (a nested one it does not
    /// is skipped whole).
    pub(super) used: &'a [bool],
    pub(super) names: &'a [Box<[u8]>],
}

impl Columns<'_> {
    fn name(&self, col: usize) -> String {
        String::from_utf8_lossy(&self.names[col]).into_owned()
    }
}

impl Program {
    /// Compiles `schema` against `columns`; an error says why no record
    /// written with it can be read.
    pub(super) fn compile(schema: Schema, columns: &Columns<'_>) -> Result<Self, String> {
        let mut compiler = Compiler { schema: &schema, columns, fields: columns.fields, symbols: Vec::new() };
        let all: Vec<usize> = (0..columns.fields.len()).collect();
        let (mut root, mut covered) = compiler.op(schema.root(), &[], &all)?;
        // A column the writer has no field of its name for: its aliases,
        // the first the writer has (compiled again, once per schema).
        let uncovered = |covered: &[usize]| {
            columns.fields.iter().map(|(col, _)| *col).filter(|col| !covered.contains(col)).collect::<Vec<_>>()
        };
        let mut missing = uncovered(&covered);
        let mut symbols = compiler.symbols;
        let most = columns.fields.iter().map(|(col, _)| columns.aliases.iter().filter(|(c, _)| c == col).count()).max();
        let mut chosen: Vec<(usize, Vec<String>)> = Vec::new();
        for round in 0..most.unwrap_or(0) {
            if missing.is_empty() {
                break;
            }
            let trying: Vec<(usize, Vec<String>)> = missing
                .iter()
                .filter_map(|col| columns.aliases.iter().filter(|(c, _)| c == col).nth(round).cloned())
                .collect();
            if trying.is_empty() {
                continue;
            }
            let fields: Vec<(usize, Vec<String>)> =
                columns.fields.iter().chain(&chosen).chain(&trying).cloned().collect();
            let mut again = Compiler { schema: &schema, columns, fields: &fields, symbols: Vec::new() };
            let all: Vec<usize> = (0..fields.len()).collect();
            // An alias the writer's field cannot fill is no alias of it.
            let Ok((r, c)) = again.op(schema.root(), &[], &all) else { continue };
            chosen.extend(trying.into_iter().filter(|(col, _)| c.contains(col)));
            (root, covered, symbols) = (r, c, again.symbols);
            missing = uncovered(&covered);
        }
        let mut absent = Vec::new();
        for col in missing {
            if columns.required[col] && !columns.defaulted[col] {
                return Err(format!("the writer schema has no field for required column `{}`", columns.name(col)));
            }
            absent.push(col);
        }
        Ok(Self { schema, root, absent, symbols })
    }
}

struct Compiler<'a, 'c> {
    schema: &'a Schema,
    columns: &'a Columns<'c>,
    /// The paths read: each column's own, and aliases being tried.
    fields: &'a [(usize, Vec<String>)],
    symbols: Vec<Vec<String>>,
}

impl Compiler<'_, '_> {
    /// The op reading a value of type `ty` at `path`, for the columns
    /// (indices into `columns.fields`) whose path starts with it; and the
    /// columns it fills.
    fn op(&mut self, ty: TypeId, path: &[String], wanted: &[usize]) -> Result<(Op, Vec<usize>), String> {
        // A column's path is finite: a recursive type is followed only as
        // deep as some column reads, then skipped.
        if wanted.is_empty() {
            return Ok((Op::Skip(ty), Vec::new()));
        }
        let fields = self.fields;
        let here = wanted.iter().copied().find(|&w| fields[w].1.len() == path.len());
        // A nested column takes the writer's value whole, whatever its
        // type: an array, map or record, or a union of them and null.
        if let Some(w) = here
            && let col = fields[w].0
            && self.columns.types[col].is_nested()
        {
            if !self.columns.used[col] {
                return Ok((Op::Skip(ty), vec![col]));
            }
            let read = nested::compile(&self.schema.types, ty, self.columns.types[col], &mut self.symbols, 0)
                .map_err(|e| format!("column `{}`: {e}", self.columns.name(col)))?;
            return Ok((Op::Nested { col, read }, vec![col]));
        }
        match &self.schema.types[ty] {
            Type::Union(branches) => {
                let mut ops = Vec::with_capacity(branches.len());
                let mut covered: Vec<usize> = Vec::new();
                for &b in branches {
                    let (op, filled) = match self.op(b, path, wanted) {
                        Ok(done) => done,
                        Err(why) => (Op::Fail(why), Vec::new()),
                    };
                    for c in filled.iter() {
                        if !covered.contains(c) {
                            covered.push(*c);
                        }
                    }
                    ops.push((op, filled));
                }
                // Every branch fills the same columns: what one leaves out is NULL.
                let ops = ops
                    .into_iter()
                    .map(|(op, filled)| {
                        let missing: Vec<usize> = covered.iter().copied().filter(|c| !filled.contains(c)).collect();
                        match op {
                            Op::Fail(_) => op,
                            op if missing.is_empty() => op,
                            op => Op::Nulls(missing, Box::new(op)),
                        }
                    })
                    .collect();
                Ok((Op::Union(ops), covered))
            }
            Type::Null => {
                let cols: Vec<usize> = wanted.iter().map(|&w| fields[w].0).collect();
                Ok((Op::Nulls(cols.clone(), Box::new(Op::Skip(ty))), cols))
            }
            Type::Record { fields: writer, .. } => {
                if let Some(w) = here {
                    let col = fields[w].0;
                    return Err(format!(
                        "column `{}`: field `{}` is a record, not a value (read its fields as `{}.<field>`)",
                        self.columns.name(col),
                        path.join("."),
                        self.columns.name(col)
                    ));
                }
                let mut ops = Vec::with_capacity(writer.len());
                let mut covered = Vec::new();
                for f in writer.clone() {
                    let mut child = path.to_vec();
                    child.push(f.name.clone());
                    let under: Vec<usize> =
                        wanted.iter().copied().filter(|&w| fields[w].1.starts_with(&child)).collect();
                    let (op, filled) = self.op(f.ty, &child, &under)?;
                    covered.extend(filled);
                    ops.push(op);
                }
                Ok((Op::Record(ops), covered))
            }
            other => {
                let Some(w) = here else {
                    let col = fields[wanted[0]].0;
                    return Err(format!(
                        "column `{}`: field `{}` is {}, not a record",
                        self.columns.name(col),
                        path.join("."),
                        other.describe()
                    ));
                };
                let col = fields[w].0;
                let conv = conv(other, self.columns.types[col], &mut self.symbols).ok_or_else(|| {
                    format!(
                        "column `{}` is {}, but the writer's field `{}` is {}",
                        self.columns.name(col),
                        self.columns.types[col],
                        path.join("."),
                        other.describe()
                    )
                })?;
                Ok((Op::Read { col, conv }, vec![col]))
            }
        }
    }
}
