//! Sluice's plan IR: what a query means, independent of how it was written
//! (the SQL front end builds it) and of where records come from (the worker
//! runtime feeds it).
//!
//! * [`types`] — SQL types and scalar values
//! * [`schema`] — source schemas, their event time and partitioning
//! * [`expr`] — typed physical expressions, and [`eval`] their vectorised
//!   evaluation over columnar [`Batch`]es (the planner folds constants with
//!   the same kernels the engine runs, so both agree by construction)
//! * [`plan`] — the operator plan one engine instance executes, and its
//!   stable fingerprint
//! * [`Dataflow`] — a query as stages joined by exchanges (repartitioning)
//! * [`state_signature`] — the part of a plan its saved state depends on
//!   (what a query upgrade must keep)
//! * [`time`] — timestamp parsing and formatting
//! * [`row_bytes`] — a row's values as one run of bytes (rows kept in state)
//!
//! The bottom of the crate graph: it depends on nothing of Sluice but the
//! contract types of `sluice-crds`.

mod batch;
mod column;
mod cse;
mod dataflow;
pub mod decimal;
mod emitted;
mod error;
pub mod eval;
mod expr;
mod json_path;
mod literal_pattern;
mod nested_column;
mod plan;
pub mod row_bytes;
mod scalar_fns;
mod schema;
mod sql_text;
mod state;
mod state_value;
pub mod time;
pub mod time_zone;
mod types;

pub use batch::{Batch, Selection};
pub use column::{Column, ColumnData, ListData, StrData, StructData, broadcast, retain_rows};
pub use dataflow::{Branch, Dataflow, Stage, StageOutput};
pub use emitted::EmittedRows;
pub use error::{Error, SqlError};
pub use eval::{Value, eval, filter_rows, fold_constant};
pub use expr::{
    ArithOp, CmpOp, DigestKind, JsonStep, LikePattern, LikeToken, PhysExpr, ScalarFunc, TimePart, TrimSide,
};
pub use json_path::parse_json_path;
pub use plan::{
    AggFunc, AggregateCall, AggregatePlan, ChangelogPlan, EmitMode, JoinKind, JoinPlan, MergeCall, MergePlan,
    OperatorPlan, OutputColumn, Partitioning, Plan, RowsFunction, RowsFunctionKind, RowsPlan, RowsSpec, SortKey,
    TableJoinPlan, TableVersion, TimeWindow, TopNPlan, UnnestPlan, plan_fingerprint,
};
pub use schema::{ColumnOrigin, EventTime, Field, Schema, SourceSchema};
pub use sql_text::{expr_sql, interval_sql, scalar_sql};
pub use state::{state_difference, state_fingerprint, state_layout, state_signature};
pub use state_value::StateValue;
pub use types::{
    DataType, MAX_INTERNED_TYPES, Nested, NestedCells, NestedRef, NestedType, Scalar, ScalarRef, TooManyTypes,
};
