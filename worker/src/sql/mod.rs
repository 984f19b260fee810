//! The SQL front end: parse (with the streaming clauses), resolve names and
//! types against the declared source schemas, and produce a [`Plan`].
//!
//! This module has no Kafka or runtime dependency: the operator links it to
//! validate a StreamJob's SQL before launching anything, with exactly the
//! rules the workers will apply.

mod compile;
mod diagnostic;
mod expr;
mod functions;
mod plan;
mod planner;
mod rewrite;
mod schema;
mod types;

pub use diagnostic::SqlError;
pub use expr::{ArithOp, CmpOp, LikePattern, LikeToken, PhysExpr, ScalarFunc, TimePart, TrimSide};
pub use plan::{
    AggFunc, AggregateCall, AggregatePlan, EmitMode, OperatorPlan, OutputColumn, Partitioning, Plan, RowsFunction,
    RowsFunctionKind, RowsPlan, RowsSpec, TimeWindow,
};
pub use planner::plan_query;
pub use schema::{EventTime, Field, Schema, SourceSchema};
pub use types::{DataType, Scalar};
