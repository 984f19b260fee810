//! Prometheus metrics of a worker.
//!
//! Every series is resolved to its labelled child once, when a core starts
//! ([`CoreMetrics`]), and updated once per batch — never per record, never
//! through a map lookup by name. The one exception is the end-to-end latency
//! histogram: the ack time of each produced record is only known in the
//! producer's delivery callback, so [`LatencyHistogram`] takes three relaxed
//! atomic adds on a core-private cache line per acknowledged record (no lock,
//! no allocation) and is exported by a small custom collector.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram as HistogramProto, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::Error;

/// Upper bounds (seconds) of the end-to-end latency buckets. They reach two
/// hours, so a latency of up to an hour (a long window, a job catching up)
/// lands in a bucket: in `+Inf` alone no quantile can be read.
const LATENCY_BOUNDS: [f64; 24] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
];

/// A cumulative histogram of record timestamp → sink acknowledgement.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len()],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl LatencyHistogram {
    #[inline]
    pub fn observe_millis(&self, ms: i64) {
        let secs = ms.max(0) as f64 / 1000.0;
        if let Some(i) = LATENCY_BOUNDS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros.fetch_add(ms.max(0).unsigned_abs() * 1000, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// (count, sum in seconds, cumulative bucket counts).
    pub fn snapshot(&self) -> (u64, f64, Vec<u64>) {
        let mut cumulative = 0;
        let buckets = self
            .buckets
            .iter()
            .map(|b| {
                cumulative += b.load(Ordering::Relaxed);
                cumulative
            })
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (self.count.load(Ordering::Relaxed), sum, buckets)
    }

    /// The `q` quantile (0..1), estimated from the buckets (upper bound).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let (count, _, buckets) = self.snapshot();
        if count == 0 {
            return None;
        }
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((count as f64) * q).ceil().max(1.0) as u64;
        buckets.iter().position(|c| *c >= rank).map(|i| LATENCY_BOUNDS[i])
    }
}

/// Label pairs of one series and its histogram.
type LatencySeries = (Vec<(String, String)>, Arc<LatencyHistogram>);

/// Exports every core's [`LatencyHistogram`] as `sluice_end_to_end_latency_seconds`.
struct LatencyCollector {
    desc: Desc,
    series: Mutex<Vec<LatencySeries>>,
}

const LATENCY_NAME: &str = "sluice_end_to_end_latency_seconds";

impl Collector for LatencyCollector {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut family = MetricFamily::default();
        family.set_name(LATENCY_NAME.into());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::HISTOGRAM);
        let series = self.series.lock().map(|s| s.clone()).unwrap_or_default();
        for (labels, h) in series {
            let (count, sum, cumulative) = h.snapshot();
            let mut proto = HistogramProto::default();
            proto.set_sample_count(count);
            proto.set_sample_sum(sum);
            proto.set_bucket(
                LATENCY_BOUNDS
                    .iter()
                    .zip(cumulative)
                    .map(|(bound, c)| {
                        let mut b = Bucket::default();
                        b.set_upper_bound(*bound);
                        b.set_cumulative_count(c);
                        b
                    })
                    .collect(),
            );
            let mut m = Metric::default();
            m.set_label(
                labels
                    .into_iter()
                    .map(|(k, v)| {
                        let mut l = LabelPair::default();
                        l.set_name(k);
                        l.set_value(v);
                        l
                    })
                    .collect(),
            );
            m.set_histogram(proto);
            family.mut_metric().push(m);
        }
        vec![family]
    }
}

/// All metric families of a worker process.
pub struct Metrics {
    pub registry: Registry,
    job: String,
    worker: String,
    records_in: IntCounterVec,
    records_out: IntCounterVec,
    bytes_in: IntCounterVec,
    bytes_out: IntCounterVec,
    batches: IntCounterVec,
    batch_seconds: HistogramVec,
    busy_seconds: CounterVec,
    consumer_lag: IntGaugeVec,
    position: IntGaugeVec,
    watermark_lag: GaugeVec,
    late: IntCounterVec,
    dead_letter: IntCounterVec,
    state_entries: IntGaugeVec,
    state_bytes: IntGaugeVec,
    state_largest: IntGaugeVec,
    state_spilled: IntGaugeVec,
    state_limit: IntGaugeVec,
    checkpoints: IntCounterVec,
    checkpoint_seconds: HistogramVec,
    checkpoint_failures: IntCounterVec,
    state_bytes_written: IntCounterVec,
    state_restore_seconds: HistogramVec,
    state_restores: IntCounterVec,
    produce_errors: IntCounterVec,
    latency: Arc<LatencyCollector>,
    pub ready: IntGauge,
    pub failed: IntGauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("job", &self.job).field("worker", &self.worker).finish()
    }
}

fn labels3() -> [&'static str; 3] {
    ["streamjob", "worker", "core"]
}

impl Metrics {
    pub fn new(job: &str, worker: i32) -> Result<Self, Error> {
        let registry = Registry::new();
        let err = |e: prometheus::Error| Error::Internal(format!("metrics: {e}"));
        macro_rules! counter {
            ($name:expr, $help:expr, $labels:expr) => {{
                let c = IntCounterVec::new(Opts::new($name, $help), &$labels).map_err(err)?;
                registry.register(Box::new(c.clone())).map_err(err)?;
                c
            }};
        }
        macro_rules! gauge {
            ($name:expr, $help:expr, $labels:expr) => {{
                let g = IntGaugeVec::new(Opts::new($name, $help), &$labels).map_err(err)?;
                registry.register(Box::new(g.clone())).map_err(err)?;
                g
            }};
        }
        macro_rules! histogram {
            ($name:expr, $help:expr, $buckets:expr) => {{
                let h =
                    HistogramVec::new(HistogramOpts::new($name, $help).buckets($buckets), &labels3()).map_err(err)?;
                registry.register(Box::new(h.clone())).map_err(err)?;
                h
            }};
        }
        let partition_labels = ["streamjob", "worker", "core", "topic", "partition"];
        let watermark_lag = GaugeVec::new(
            Opts::new("sluice_watermark_lag_seconds", "Wall clock minus the partition's event-time watermark"),
            &partition_labels,
        )
        .map_err(err)?;
        registry.register(Box::new(watermark_lag.clone())).map_err(err)?;
        let busy_seconds = CounterVec::new(
            Opts::new(
                "sluice_core_busy_seconds_total",
                "Time the core spent on anything but waiting for input: processing, producing, checkpointing, and \
                 polls that returned all the records asked for (the autoscaler's capacity is records in per busy \
                 second)",
            ),
            &labels3(),
        )
        .map_err(err)?;
        registry.register(Box::new(busy_seconds.clone())).map_err(err)?;
        let latency = Arc::new(LatencyCollector {
            desc: Desc::new(
                LATENCY_NAME.into(),
                "Record timestamp to acknowledgement of the derived result by the sink".into(),
                labels3().iter().map(|s| (*s).to_owned()).collect(),
                Default::default(),
            )
            .map_err(err)?,
            series: Mutex::new(Vec::new()),
        });
        registry.register(Box::new(SharedCollector(Arc::clone(&latency)))).map_err(err)?;
        let ready = IntGauge::new("sluice_worker_ready", "1 when every core is assigned and consuming").map_err(err)?;
        registry.register(Box::new(ready.clone())).map_err(err)?;
        let failed = IntGauge::new("sluice_worker_failed", "1 when the job stopped on an error that needs a fix")
            .map_err(err)?;
        registry.register(Box::new(failed.clone())).map_err(err)?;
        let info =
            IntGaugeVec::new(Opts::new("sluice_worker_info", "Worker version"), &["streamjob", "worker", "version"])
                .map_err(err)?;
        registry.register(Box::new(info.clone())).map_err(err)?;
        let worker_label = worker.to_string();
        info.with_label_values(&[job, &worker_label, env!("CARGO_PKG_VERSION")]).set(1);
        Ok(Self {
            records_in: counter!("sluice_records_in_total", "Records read from the source", labels3()),
            records_out: counter!("sluice_records_out_total", "Result records produced to the sink", labels3()),
            bytes_in: counter!("sluice_bytes_in_total", "Payload bytes read from the source", labels3()),
            bytes_out: counter!("sluice_bytes_out_total", "Payload bytes produced to the sink", labels3()),
            batches: counter!("sluice_batches_total", "Batches processed", labels3()),
            batch_seconds: histogram!(
                "sluice_batch_duration_seconds",
                "Time to decode, process, encode and hand a batch to the sink",
                vec![0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0]
            ),
            busy_seconds,
            consumer_lag: gauge!("sluice_consumer_lag", "Records in the partition not yet consumed", partition_labels),
            position: gauge!(
                "sluice_consumer_position",
                "Next offset this core reads from the partition",
                partition_labels
            ),
            watermark_lag,
            late: counter!("sluice_late_records_total", "Records that arrived after their window closed", labels3()),
            dead_letter: counter!(
                "sluice_dead_letter_records_total",
                "Records sent to the dead-letter output",
                ["streamjob", "worker", "core", "reason"]
            ),
            state_entries: gauge!("sluice_state_entries", "Groups, windows or partition keys held in state", labels3()),
            state_bytes: gauge!("sluice_state_bytes", "Approximate memory held by engine state", labels3()),
            state_largest: gauge!(
                "sluice_state_bytes_largest_partition",
                "Approximate state of the core's largest partition engine",
                labels3()
            ),
            state_spilled: gauge!(
                "sluice_state_spilled_bytes",
                "State the core's partition engines moved to disk past their memory budget",
                labels3()
            ),
            state_limit: gauge!(
                "sluice_state_memory_limit_bytes",
                "spec.engine.stateMemoryLimit: the state the core's partition engines may hold together",
                labels3()
            ),
            checkpoints: counter!(
                "sluice_checkpoints_total",
                "Completed checkpoints (state saved, offsets committed)",
                labels3()
            ),
            checkpoint_seconds: histogram!(
                "sluice_checkpoint_duration_seconds",
                "Time to flush the sink, save state and commit offsets",
                vec![0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0]
            ),
            checkpoint_failures: counter!(
                "sluice_checkpoint_failures_total",
                "Checkpoints that failed (flush, state save or commit); the core restarts from its last checkpoint",
                labels3()
            ),
            state_bytes_written: counter!(
                "sluice_state_written_bytes_total",
                "Bytes checkpoints wrote to the state topic (incremental ones: the pages that changed, and a head)",
                labels3()
            ),
            state_restore_seconds: histogram!(
                "sluice_state_restore_seconds",
                "Time to read and restore one partition's checkpointed state",
                vec![0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]
            ),
            state_restores: counter!(
                "sluice_state_restores_total",
                "Partitions whose state was restored, by where it came from: the worker's volume or the state topic",
                ["streamjob", "worker", "core", "from"]
            ),
            produce_errors: counter!(
                "sluice_produce_errors_total",
                "Records the sink failed to acknowledge",
                labels3()
            ),
            latency,
            ready,
            failed,
            registry,
            job: job.to_owned(),
            worker: worker_label,
        })
    }

    /// The series of one core and its partitions (`(topic, partition)`:
    /// a multi-stage query's cores read a source and repartition topics),
    /// resolved once.
    pub fn core(&self, core: usize, partitions: &[(&str, i32)]) -> CoreMetrics {
        let core_label = core.to_string();
        let l = [self.job.as_str(), self.worker.as_str(), core_label.as_str()];
        let latency = Arc::new(LatencyHistogram::default());
        if let Ok(mut s) = self.latency.series.lock() {
            let mut labels: Vec<(String, String)> =
                labels3().iter().zip(l).map(|(k, v)| ((*k).to_owned(), v.to_owned())).collect();
            labels.sort();
            s.push((labels, Arc::clone(&latency)));
        }
        let dl = |reason: &str| self.dead_letter.with_label_values(&[l[0], l[1], l[2], reason]);
        CoreMetrics {
            records_in: self.records_in.with_label_values(&l),
            records_out: self.records_out.with_label_values(&l),
            bytes_in: self.bytes_in.with_label_values(&l),
            bytes_out: self.bytes_out.with_label_values(&l),
            batches: self.batches.with_label_values(&l),
            batch_seconds: self.batch_seconds.with_label_values(&l),
            busy_seconds: self.busy_seconds.with_label_values(&l),
            late: self.late.with_label_values(&l),
            dead_letter_malformed: dl("malformed"),
            dead_letter_late: dl("late"),
            state_entries: self.state_entries.with_label_values(&l),
            state_bytes: self.state_bytes.with_label_values(&l),
            state_largest: self.state_largest.with_label_values(&l),
            state_spilled: self.state_spilled.with_label_values(&l),
            state_limit: self.state_limit.with_label_values(&l),
            checkpoints: self.checkpoints.with_label_values(&l),
            checkpoint_seconds: self.checkpoint_seconds.with_label_values(&l),
            checkpoint_failures: self.checkpoint_failures.with_label_values(&l),
            state_bytes_written: self.state_bytes_written.with_label_values(&l),
            state_restore_seconds: self.state_restore_seconds.with_label_values(&l),
            state_restores_volume: self.state_restores.with_label_values(&[l[0], l[1], l[2], "volume"]),
            state_restores_topic: self.state_restores.with_label_values(&[l[0], l[1], l[2], "topic"]),
            produce_errors: self.produce_errors.with_label_values(&l),
            partitions: partitions
                .iter()
                .map(|(topic, p)| {
                    let p = p.to_string();
                    let pl = [l[0], l[1], l[2], topic, p.as_str()];
                    PartitionMetrics {
                        consumer_lag: self.consumer_lag.with_label_values(&pl),
                        position: self.position.with_label_values(&pl),
                        watermark_lag: self.watermark_lag.with_label_values(&pl),
                    }
                })
                .collect(),
            latency,
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        prometheus::TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap_or_default()
    }
}

/// Registers an `Arc`-held collector.
struct SharedCollector(Arc<LatencyCollector>);

impl Collector for SharedCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}

/// One core's series.
#[derive(Debug, Clone)]
pub struct CoreMetrics {
    pub records_in: IntCounter,
    pub records_out: IntCounter,
    pub bytes_in: IntCounter,
    pub bytes_out: IntCounter,
    pub batches: IntCounter,
    pub batch_seconds: Histogram,
    pub busy_seconds: Counter,
    pub late: IntCounter,
    pub dead_letter_malformed: IntCounter,
    pub dead_letter_late: IntCounter,
    pub state_entries: IntGauge,
    pub state_bytes: IntGauge,
    pub state_largest: IntGauge,
    pub state_spilled: IntGauge,
    pub state_limit: IntGauge,
    pub checkpoints: IntCounter,
    pub checkpoint_seconds: Histogram,
    pub checkpoint_failures: IntCounter,
    pub state_bytes_written: IntCounter,
    pub state_restore_seconds: Histogram,
    state_restores_volume: IntCounter,
    state_restores_topic: IntCounter,
    pub produce_errors: IntCounter,
    pub partitions: Vec<PartitionMetrics>,
    pub latency: Arc<LatencyHistogram>,
}

impl CoreMetrics {
    /// The counter of restores from the worker's volume, or the state topic.
    pub fn state_restores(&self, from_volume: bool) -> &IntCounter {
        if from_volume { &self.state_restores_volume } else { &self.state_restores_topic }
    }
}

#[derive(Debug, Clone)]
pub struct PartitionMetrics {
    pub consumer_lag: IntGauge,
    pub position: IntGauge,
    pub watermark_lag: Gauge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_core_labels() {
        let m = Metrics::new("demo", 1).unwrap();
        let c = m.core(0, &[("trades", 3)]);
        c.records_in.inc_by(10);
        c.latency.observe_millis(3);
        c.latency.observe_millis(40);
        c.partitions[0].consumer_lag.set(5);
        let text = m.render();
        for needle in [
            r#"sluice_records_in_total{core="0",streamjob="demo",worker="1"} 10"#,
            r#"sluice_end_to_end_latency_seconds_bucket{core="0",streamjob="demo",worker="1",le="0.005"} 1"#,
            r#"sluice_end_to_end_latency_seconds_count{core="0",streamjob="demo",worker="1"} 2"#,
            r#"sluice_consumer_lag{core="0",partition="3",streamjob="demo",topic="trades",worker="1"} 5"#,
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        assert_eq!(c.latency.quantile(0.5), Some(0.005));
        assert_eq!(c.latency.quantile(0.99), Some(0.05));
    }
}
