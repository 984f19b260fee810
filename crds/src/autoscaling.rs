//! `spec.autoscaling`: the operator picks the worker count from the job's
//! consumer lag and its workers' busy time (docs/operations.md, "Autoscaling").

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Lag-driven autoscaling. While set, the operator decides how many workers
/// run (between `minWorkers` and `maxWorkers`, never more than the
/// partitions can keep busy) and `spec.workers` is only the count the job
/// starts with. Every change goes through the usual drain-and-restart
/// rescale: no partition is ever owned twice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.minWorkers <= self.maxWorkers").message("autoscaling.minWorkers must not exceed autoscaling.maxWorkers"))]
pub struct AutoscalingSpec {
    /// The fewest workers the job runs with.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1024))]
    pub min_workers: i32,
    /// The most workers the job runs with (also capped by the partitions:
    /// a worker that would own none is never added).
    #[schemars(range(min = 1, max = 1024))]
    pub max_workers: i32,
    /// A backlog is to be worked off within this many seconds, on top of
    /// keeping up with the input.
    #[serde(default = "default_target_lag_seconds")]
    #[schemars(range(min = 1, max = 86_400))]
    pub target_lag_seconds: i32,
    /// The share of each core's time the engine should be busy at a steady
    /// input rate, in percent: the headroom left for bursts.
    #[serde(default = "default_target_utilization_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub target_utilization_percent: i32,
    /// A lower worker count is only applied when every recommendation of
    /// this many seconds asked for it (a scale-up applies at once).
    #[serde(default = "default_scale_down_stabilization_seconds")]
    #[schemars(range(min = 0, max = 86_400))]
    pub scale_down_stabilization_seconds: i32,
    /// Rates are measured over this many seconds of running (and only
    /// while every worker of the current scale is ready).
    #[serde(default = "default_metrics_window_seconds")]
    #[schemars(range(min = 1, max = 3_600))]
    pub metrics_window_seconds: i32,
    /// How often the operator measures and decides.
    #[serde(default = "default_period_seconds")]
    #[schemars(range(min = 1, max = 3_600))]
    pub period_seconds: i32,
}

fn one() -> i32 {
    1
}
fn default_target_lag_seconds() -> i32 {
    60
}
fn default_target_utilization_percent() -> i32 {
    70
}
fn default_scale_down_stabilization_seconds() -> i32 {
    300
}
fn default_metrics_window_seconds() -> i32 {
    60
}
fn default_period_seconds() -> i32 {
    15
}

/// What the autoscaler last measured and decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStatus {
    /// The worker count the autoscaler asks for (what the job runs at once
    /// a rescale completes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_workers: Option<i32>,
    /// When the worker count last changed by the autoscaler's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The last decision: `ScaleUp`, `ScaleDown`, `Hold` or `Collecting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<String>,
    /// Why, with the figures it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Records per second arriving at the sources, over the metrics window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_rate: Option<i64>,
    /// Records per busy second of one core, over the metrics window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing_rate_per_core: Option<i64>,
    /// Busy share of the job's cores over the metrics window, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_percent: Option<i32>,
}
