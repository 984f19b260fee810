//! The Sluice worker. The engine (SQL planner and batch operators) and the
//! runtime (per-core Kafka consumers, sinks, metrics) land with their issues.
