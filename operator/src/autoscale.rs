//! The autoscaler's decision: how many workers a job needs, from what the
//! operator measures while every worker of the current scale runs.
//!
//! It is DS2's rule, as Flink's autoscaler applies it, on Kafka's terms:
//! the load is the input rate plus the backlog to work off within
//! `targetLagSeconds`; the capacity of one core is the records it processes
//! per second it is busy (so an idle core still tells what it could do).
//! The job needs `max(λ / (μ·u), (λ + backlog / T) / μ)` cores — `λ` the
//! input rate, `μ` records per busy core-second, `u` the target
//! utilization, `T` the target lag — rounded up to whole workers, within
//! `[minWorkers, maxWorkers]` and never more workers than the partitions
//! can keep busy.
//!
//! Against flapping (Flink users' most-reported trouble): a scale-up applies
//! at once, a scale-down only when every recommendation over the
//! stabilization window asked for at most that count (the highest of them
//! is taken, as the HPA does), and every change starts the measurements
//! over — no decision is made from a window that saw two scales.
//!
//! Pure: the reconcile measures and applies; this decides.

use std::collections::VecDeque;

use sluice_crds::AutoscalingSpec;

/// One measurement of a running job, taken every `periodSeconds`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds on a monotonic clock.
    pub at: f64,
    /// The sources' end offsets, summed over partitions.
    pub end_offsets: i64,
    /// Records behind: end minus committed offset, summed over partitions.
    pub lag: i64,
    /// `sluice_records_in_total`, summed over the job's cores.
    pub records_in: f64,
    /// `sluice_core_busy_seconds_total`, summed over the job's cores.
    pub busy_seconds: f64,
}

/// The scale a job runs at, and what bounds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub workers: i32,
    pub cores_per_worker: i32,
    /// The most workers that each own a partition.
    pub useful_workers: i32,
    /// Committed offsets trail consumption by up to one checkpoint: that
    /// much lag is in flight, not backlog.
    pub checkpoint_interval_seconds: f64,
}

/// What the autoscaler remembers of a job between decisions. Forgotten on
/// every change of scale (and when the operator restarts): decisions are
/// only made from measurements of the scale that is running.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    samples: VecDeque<Sample>,
    /// (when, workers) of each recommendation, for the stabilization window.
    recommendations: VecDeque<(f64, i32)>,
    /// When the first measurement of this scale was taken.
    since: Option<f64>,
}

impl Memory {
    /// When the last measurement was taken.
    pub fn last_sample_at(&self) -> Option<f64> {
        self.samples.back().map(|s| s.at)
    }
}

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Not enough measurements of this scale yet.
    Collecting,
    /// Keep the current count.
    Hold,
    ScaleUp,
    ScaleDown,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Collecting => "Collecting",
            Self::Hold => "Hold",
            Self::ScaleUp => "ScaleUp",
            Self::ScaleDown => "ScaleDown",
        }
    }
}

/// The rates a decision was made from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rates {
    /// Records per second arriving at the sources.
    pub input: f64,
    /// Records per busy second of one core, if the cores processed any.
    pub per_core: Option<f64>,
    /// Busy share of the running cores (0..1).
    pub utilization: f64,
    /// Records behind that are not merely in flight.
    pub backlog: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub action: Action,
    /// The worker count to run (the current one unless scaling).
    pub workers: i32,
    pub rates: Option<Rates>,
    /// Why, with the figures.
    pub message: String,
}

/// The policy of `spec.autoscaling`, in the units the rule uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub min_workers: i32,
    pub max_workers: i32,
    pub target_lag_seconds: f64,
    pub target_utilization: f64,
    pub stabilization_seconds: f64,
    pub window_seconds: f64,
}

impl From<&AutoscalingSpec> for Policy {
    fn from(a: &AutoscalingSpec) -> Self {
        Self {
            min_workers: a.min_workers.max(1),
            max_workers: a.max_workers.max(a.min_workers.max(1)),
            target_lag_seconds: f64::from(a.target_lag_seconds.max(1)),
            target_utilization: f64::from(a.target_utilization_percent.clamp(1, 100)) / 100.0,
            stabilization_seconds: f64::from(a.scale_down_stabilization_seconds.max(0)),
            window_seconds: f64::from(a.metrics_window_seconds.max(1)),
        }
    }
}

impl Policy {
    /// The worker count within the policy's and the partitions' bounds.
    pub fn bound(&self, workers: i32, useful_workers: i32) -> i32 {
        workers.clamp(self.min_workers.min(useful_workers.max(1)), self.max_workers.min(useful_workers.max(1)))
    }
}

/// The worker count the job runs at: what the autoscaler decided last, or
/// `spec.workers` before its first decision, within the bounds.
pub fn effective_workers(spec_workers: i32, policy: Option<&Policy>, decided: Option<i32>, useful_workers: i32) -> i32 {
    match policy {
        None => spec_workers,
        Some(p) => p.bound(decided.unwrap_or(spec_workers), useful_workers),
    }
}

/// Records one measurement and decides.
pub fn decide(policy: &Policy, scale: &Scale, memory: &mut Memory, sample: Sample) -> Decision {
    let current = scale.workers;
    let hold = |action, message: String, rates| Decision { action, workers: current, rates, message };
    // A counter that went down is a worker that restarted: its rates
    // across the restart mean nothing.
    if let Some(last) = memory.samples.back()
        && (sample.records_in < last.records_in
            || sample.busy_seconds < last.busy_seconds
            || sample.end_offsets < last.end_offsets
            || sample.at <= last.at)
    {
        *memory = Memory::default();
    }
    let since = *memory.since.get_or_insert(sample.at);
    memory.samples.push_back(sample);
    // Keep the newest sample at or before the window's start, so the
    // window is spanned whole.
    while memory.samples.len() > 2 && memory.samples[1].at <= sample.at - policy.window_seconds {
        memory.samples.pop_front();
    }
    let Some(first) = memory.samples.front().copied() else {
        return hold(Action::Collecting, "no measurement yet".into(), None);
    };
    let span = sample.at - first.at;
    if span < policy.window_seconds {
        return hold(
            Action::Collecting,
            format!(
                "measuring {current} worker(s): {:.0} of {:.0} s of the metrics window",
                span, policy.window_seconds
            ),
            None,
        );
    }
    let rates = rates(scale, &first, &sample);
    let (wanted, keep) = match recommend(policy, scale, &rates) {
        Ok(w) => w,
        Err(why) => return hold(Action::Hold, why, Some(rates)),
    };
    memory.recommendations.push_back((sample.at, keep));
    while memory.recommendations.front().is_some_and(|(at, _)| *at < sample.at - policy.stabilization_seconds) {
        memory.recommendations.pop_front();
    }
    let figures = describe(scale, &rates);
    if wanted > current {
        return Decision {
            action: Action::ScaleUp,
            workers: wanted,
            rates: Some(rates),
            message: format!("{figures}: {wanted} worker(s) needed, {current} running"),
        };
    }
    if keep < current {
        // The highest recommendation over the window; and the window must
        // have been watched whole at this scale.
        let highest = memory.recommendations.iter().map(|(_, w)| *w).max().unwrap_or(current);
        let watched = sample.at - since;
        if highest < current && watched >= policy.stabilization_seconds {
            return Decision {
                action: Action::ScaleDown,
                workers: highest,
                rates: Some(rates),
                message: format!(
                    "{figures}: at most {highest} worker(s) needed for the last {:.0} s, {current} running",
                    policy.stabilization_seconds
                ),
            };
        }
        let left = (policy.stabilization_seconds - watched).max(0.0);
        return hold(
            Action::Hold,
            format!(
                "{figures}: {keep} worker(s) would do, but {highest} were needed within the stabilization \
                 window{}",
                if left > 0.0 { format!(" ({left:.0} s of it still to watch)") } else { String::new() }
            ),
            Some(rates),
        );
    }
    hold(Action::Hold, format!("{figures}: {current} worker(s) fit"), Some(rates))
}

fn rates(scale: &Scale, first: &Sample, last: &Sample) -> Rates {
    let dt = (last.at - first.at).max(f64::EPSILON);
    #[allow(clippy::cast_precision_loss)]
    let input = (last.end_offsets - first.end_offsets).max(0) as f64 / dt;
    let records = last.records_in - first.records_in;
    let busy = last.busy_seconds - first.busy_seconds;
    let cores = f64::from(scale.workers.max(1) * scale.cores_per_worker.max(1));
    // Below a millisecond of busy time per second there is too little work
    // to tell a rate from.
    let per_core = (records > 0.0 && busy > 0.001 * dt).then(|| records / busy);
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let in_flight = (input * scale.checkpoint_interval_seconds).ceil() as i64;
    Rates {
        input,
        per_core,
        utilization: (busy / (dt * cores)).clamp(0.0, 1.0),
        backlog: (last.lag - in_flight).max(0),
    }
}

/// How much more load than measured a lower count must carry before the
/// autoscaler picks it: the band between scaling up and scaling down that
/// keeps a load near a boundary from flapping (the HPA's tolerance).
const SCALE_DOWN_TOLERANCE: f64 = 0.1;

/// The worker counts the rates call for — the count to scale up to, and
/// the count a scale-down may go to (carrying [`SCALE_DOWN_TOLERANCE`] more
/// load) — or why none can be told.
fn recommend(policy: &Policy, scale: &Scale, r: &Rates) -> Result<(i32, i32), String> {
    let cores = match r.per_core {
        Some(mu) => {
            #[allow(clippy::cast_precision_loss)]
            let backlog = r.backlog as f64;
            (r.input / (mu * policy.target_utilization)).max((r.input + backlog / policy.target_lag_seconds) / mu)
        }
        // Nothing processed: an idle job needs no capacity...
        None if r.backlog == 0 && r.input < 1.0 => 0.0,
        // ...but a backlog nobody works on says nothing about capacity.
        None => {
            return Err(format!(
                "{} record(s) behind and {:.0} record(s)/s arriving, but the workers processed too little to \
                 measure their rate: holding",
                r.backlog, r.input
            ));
        }
    };
    let per_worker = f64::from(scale.cores_per_worker.max(1));
    #[allow(clippy::cast_possible_truncation)]
    let workers =
        |cores: f64| policy.bound((cores / per_worker).ceil().min(f64::from(i32::MAX)) as i32, scale.useful_workers);
    Ok((workers(cores), workers(cores * (1.0 + SCALE_DOWN_TOLERANCE))))
}

fn describe(scale: &Scale, r: &Rates) -> String {
    let per_core = r
        .per_core
        .map_or_else(|| "no processing to measure".to_owned(), |mu| format!("{} records per busy core-second", si(mu)));
    format!(
        "input {}/s, backlog {} record(s), {per_core}, {:.0} % busy on {} core(s)",
        si(r.input),
        r.backlog,
        r.utilization * 100.0,
        scale.workers * scale.cores_per_worker
    )
}

/// 12.3 K, 4.5 M.
fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} K", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            min_workers: 1,
            max_workers: 8,
            target_lag_seconds: 10.0,
            target_utilization: 0.5,
            stabilization_seconds: 60.0,
            window_seconds: 10.0,
        }
    }

    fn scale(workers: i32) -> Scale {
        Scale { workers, cores_per_worker: 2, useful_workers: 6, checkpoint_interval_seconds: 1.0 }
    }

    /// A job whose cores each process `mu` records per busy second, fed
    /// `input` records/s, with `lag` behind, measured every 5 s from `t0`.
    struct Feed {
        at: f64,
        end: i64,
        records: f64,
        busy: f64,
    }

    impl Feed {
        fn new(at: f64) -> Self {
            Self { at, end: 1_000, records: 0.0, busy: 0.0 }
        }
        #[allow(clippy::cast_possible_truncation)]
        fn step(&mut self, s: &Scale, input: f64, mu: f64, lag: i64) -> Sample {
            self.at += 5.0;
            self.end += (input * 5.0) as i64;
            let cores = f64::from(s.workers * s.cores_per_worker);
            // Processed what came in (capped by capacity).
            let processed = (input * 5.0).min(mu * cores * 5.0);
            self.records += processed;
            self.busy += processed / mu;
            Sample { at: self.at, end_offsets: self.end, lag, records_in: self.records, busy_seconds: self.busy }
        }
    }

    #[test]
    fn nothing_is_decided_before_a_whole_window_is_measured() {
        let (p, s) = (policy(), scale(1));
        let mut m = Memory::default();
        let mut f = Feed::new(0.0);
        assert_eq!(decide(&p, &s, &mut m, f.step(&s, 50_000.0, 10_000.0, 0)).action, Action::Collecting);
        assert_eq!(decide(&p, &s, &mut m, f.step(&s, 50_000.0, 10_000.0, 0)).action, Action::Collecting);
        // 10 s spanned: now it decides, and the load is far over one worker.
        let d = decide(&p, &s, &mut m, f.step(&s, 50_000.0, 10_000.0, 0));
        assert_eq!(d.action, Action::ScaleUp, "{d:?}");
    }

    /// The rule: cores = max(λ/(μ·u), (λ + backlog/T)/μ), in whole workers.
    #[test]
    fn the_worker_count_keeps_up_at_the_target_utilization_and_clears_the_backlog_in_time() {
        let (p, s) = (policy(), scale(1));
        let r = |input: f64, backlog: i64| Rates { input, per_core: Some(10_000.0), utilization: 0.5, backlog };
        // 15 K/s at 10 K per core at 50 %: 3 cores → 2 workers of 2 cores.
        assert_eq!(recommend(&p, &s, &r(15_000.0, 0)), Ok((2, 2)));
        // Plus 300 K behind to clear in 10 s: (15 K + 30 K)/10 K = 4.5 cores → 3 workers.
        assert_eq!(recommend(&p, &s, &r(15_000.0, 300_000)), Ok((3, 3)));
        // Never beyond the partitions (6 useful workers) however large the backlog.
        assert_eq!(recommend(&p, &s, &r(15_000.0, 100_000_000)), Ok((6, 6)));
        // 19 K/s is 3.8 cores: 2 workers keep up, but a scale-down from 3
        // to 2 needs 10 % to spare.
        assert_eq!(recommend(&p, &s, &r(19_000.0, 0)), Ok((2, 3)));
        // Idle: the minimum.
        let idle = Rates { input: 0.0, per_core: None, utilization: 0.0, backlog: 0 };
        assert_eq!(recommend(&p, &s, &idle), Ok((1, 1)));
        // A backlog nobody processes tells nothing: no guess.
        let stuck = Rates { input: 0.0, per_core: None, utilization: 0.0, backlog: 5_000 };
        assert!(recommend(&p, &s, &stuck).unwrap_err().contains("5000 record(s) behind"));
    }

    #[test]
    fn lag_of_one_checkpoint_is_in_flight_not_backlog() {
        let s = scale(2);
        let first = Sample { at: 0.0, end_offsets: 0, lag: 0, records_in: 0.0, busy_seconds: 0.0 };
        let last = Sample { at: 10.0, end_offsets: 100_000, lag: 9_000, records_in: 100_000.0, busy_seconds: 10.0 };
        let r = rates(&s, &first, &last);
        assert_eq!(r.backlog, 0, "10 K/s with 1 s checkpoints: 9 K committed later is normal");
        assert!((r.input - 10_000.0).abs() < 1e-6);
        assert_eq!(r.per_core, Some(10_000.0));
        assert!((r.utilization - 0.25).abs() < 1e-9, "10 busy seconds of 40 core-seconds");
    }

    #[test]
    fn a_scale_down_waits_for_the_whole_stabilization_window_and_takes_its_highest_recommendation() {
        let p = policy();
        let s = scale(4);
        let mut m = Memory::default();
        let mut f = Feed::new(100.0);
        let mut decisions = Vec::new();
        // 12 s of 25 K/s (needs 3 workers at 50 %), then 5 K/s (needs 1).
        for i in 0..20 {
            let input = if i < 3 { 25_000.0 } else { 5_000.0 };
            decisions.push(decide(&p, &s, &mut m, f.step(&s, input, 10_000.0, 0)));
        }
        let first_down = decisions.iter().position(|d| d.action == Action::ScaleDown).unwrap();
        // Not before 60 s of watching (the first sample is at 105 s).
        assert!(f64::from(u32::try_from(first_down).unwrap()) * 5.0 >= 60.0, "{decisions:#?}");
        // The window still held the 3-worker recommendations when it was
        // first watched whole: down to the highest of them first.
        assert_eq!(decisions[first_down].workers, 3, "{:?}", decisions[first_down]);
        assert!(decisions[first_down].message.contains("at most 3 worker(s)"), "{}", decisions[first_down].message);
    }

    #[test]
    fn a_restarted_worker_starts_the_measurement_over() {
        let (p, s) = (policy(), scale(1));
        let mut m = Memory::default();
        let mut f = Feed::new(0.0);
        for _ in 0..3 {
            decide(&p, &s, &mut m, f.step(&s, 1_000.0, 10_000.0, 0));
        }
        // The counters fall back to near zero.
        let restarted =
            Sample { at: f.at + 5.0, end_offsets: f.end + 5_000, lag: 0, records_in: 10.0, busy_seconds: 0.1 };
        assert_eq!(decide(&p, &s, &mut m, restarted).action, Action::Collecting);
    }

    /// A constant input rate with measurement noise across a boundary (the
    /// load needs 3.85–4.17 cores at the target: 2 workers of 2 cores, or
    /// 3): the count changes at most once after converging, over 200
    /// decision periods.
    #[test]
    fn a_constant_input_rate_does_not_flap() {
        // A short stabilization window (3 periods), so the tolerance band
        // is what holds the count, not the window alone.
        let p = Policy { stabilization_seconds: 15.0, ..policy() };
        let mut workers = 1;
        let mut m = Memory::default();
        let mut f = Feed::new(0.0);
        let mut changes = Vec::new();
        // Deterministic noise (a fixed LCG): ±4 % on the measured capacity.
        let mut seed: u64 = 0x5eed;
        for period in 0..200 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            #[allow(clippy::cast_precision_loss)]
            let noise = ((seed >> 33) as f64 / f64::from(1u32 << 31)) * 0.08 - 0.04;
            let s = scale(workers);
            let d = decide(&p, &s, &mut m, f.step(&s, 20_000.0, 10_000.0 * (1.0 + noise), 0));
            if matches!(d.action, Action::ScaleUp | Action::ScaleDown) {
                changes.push((period, workers, d.workers));
                workers = d.workers;
                m = Memory::default();
            }
        }
        assert!(!changes.is_empty(), "it scales up from 1 worker");
        assert_eq!(changes[0].1, 1);
        assert!(changes.len() <= 2, "converged, then changed at most once: {changes:?}");
        assert!((2..=3).contains(&workers), "{changes:?}");
    }

    #[test]
    fn bounds_hold_the_count_within_the_spec_and_the_partitions() {
        let p = Policy { min_workers: 2, max_workers: 10, ..policy() };
        assert_eq!(effective_workers(1, Some(&p), None, 8), 2, "spec.workers below the minimum");
        assert_eq!(effective_workers(1, Some(&p), Some(9), 4), 4, "never more workers than own partitions");
        assert_eq!(effective_workers(3, None, Some(9), 4), 3, "without autoscaling, spec.workers");
        assert_eq!(effective_workers(3, Some(&p), Some(1), 1), 1, "one partition: one worker, whatever the minimum");
    }
}
