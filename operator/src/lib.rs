//! The Sluice operator: reconciles each StreamJob into a ConfigMap (the
//! worker config), a headless Service, a PodDisruptionBudget and a
//! StatefulSet of workers, after validating its SQL with the worker's own
//! planner, and reports honest status.
//!
//! Control path: [`reconcile`] → [`validate`] → [`partitions`] →
//! [`upgrade`] (which consumer group the query runs in) → [`desired`] → [`rescale`] → [`render`] (server-side apply) → [`status`].

pub mod autoscale;
pub mod backoff;
pub mod controller;
pub mod desired;
mod error;
pub mod http;
pub mod lag;
pub mod leader;
pub mod measure;
pub mod metrics;
pub mod names;
pub mod partitions;
pub mod reclaim;
pub mod reconcile;
pub mod registry;
pub mod registry_http;
pub mod render;
pub mod rescale;
pub mod status;
pub mod upgrade;
pub mod validate;
pub mod worker_health;

pub use error::Error;
