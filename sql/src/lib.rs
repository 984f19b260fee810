//! The SQL front end: parse (with the streaming clauses), resolve names and
//! types against the declared source schemas, and produce a
//! [`sluice_plan::Plan`].
//!
//! This crate depends only on the plan IR (`sluice-plan`) and the contract
//! (`sluice-crds`), no engine, codec or Kafka: the operator links it to
//! validate a StreamJob's SQL before launching anything, with exactly the
//! rules the workers will apply.

mod agg_filter;
mod cascade;
mod changelog;
mod compile;
mod cut;
mod dataflow;
mod depth;
mod diagnostic;
mod distinct;
mod functions;
mod join;
mod nested;
mod nested_values;
mod planner;
mod rewrite;
mod top_n;
mod typing;
mod union;
mod unnest;
mod views;

pub use depth::{MAX_EXPR_DEPTH, MAX_SQL_BYTES};
pub use diagnostic::Located;

use sluice_crds::SourceSpec;
use sluice_plan::{Dataflow, Plan, SqlError};

/// Plans `sql` against the declared sources as the stages a job runs
/// (`partitions`: how many each exchange has). Runs on a planning thread
/// of its own (`depth`): no query, however nested, can overflow the
/// caller's stack.
pub fn plan_dataflow(sql: &str, sources: &[SourceSpec], partitions: i32) -> Result<Dataflow, SqlError> {
    depth::on_planning_stack(|| dataflow::plan_dataflow(sql, sources, partitions))
}

/// Plans `sql` against the declared sources as one plan, on a planning
/// thread of its own like [`plan_dataflow`].
pub fn plan_query(sql: &str, sources: &[SourceSpec]) -> Result<Plan, SqlError> {
    depth::on_planning_stack(|| planner::plan_query(sql, sources))
}
