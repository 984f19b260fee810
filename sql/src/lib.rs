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
mod compile;
mod cut;
mod dataflow;
mod diagnostic;
mod distinct;
mod functions;
mod join;
mod nested;
mod planner;
mod rewrite;
mod top_n;
mod typing;
mod union;
mod views;

pub use dataflow::plan_dataflow;
pub use diagnostic::Located;
pub use planner::plan_query;
