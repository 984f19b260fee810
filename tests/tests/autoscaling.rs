//! `spec.autoscaling` end to end: the real operator reads the job's lag
//! from the real broker and its workers' busy time from their metrics (the
//! harness's kubelet runs them as processes), and rescales through its own
//! drain-and-restart path.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use sluice_e2e::jobs::*;
use sluice_e2e::kube::{kubectl_ok, new_namespace};
use sluice_e2e::kubelet::kubelet;
use sluice_e2e::operator::start_operator;

/// One of the autoscaler's events.
#[derive(Debug, Clone, PartialEq)]
struct Change {
    at: Timestamp,
    reason: String,
    message: String,
    from: i64,
    to: i64,
}

/// The autoscaler's events in `ns`, oldest first.
fn scaling_events(ns: &str) -> Vec<Change> {
    let v: Value = serde_json::from_str(&kubectl_ok(["get", "events", "-n", ns, "-o", "json"])).unwrap();
    let mut events: Vec<Change> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "ScaledUp" || e["reason"] == "ScaledDown")
        .map(|e| {
            let at = e["eventTime"].as_str().or_else(|| e["firstTimestamp"].as_str()).unwrap();
            let message = e["message"].as_str().unwrap().to_owned();
            // "1 → 4 worker(s): why"
            let (from, rest) = message.split_once(" → ").unwrap();
            let to = rest.split(' ').next().unwrap();
            Change {
                at: at.parse().unwrap(),
                reason: e["reason"].as_str().unwrap().to_owned(),
                from: from.parse().unwrap(),
                to: to.parse().unwrap(),
                message,
            }
        })
        .collect();
    events.sort_by_key(|c| c.at);
    events
}

/// A backlog makes the job scale up — to the partition count at most, not
/// the larger `maxWorkers`; once it is worked off, the idle job scales back
/// down, but only after the stabilization window; a steady input it keeps
/// up with then changes nothing over several decision periods. No
/// partition is ever owned by two workers at once, every worker that
/// stopped drained cleanly, the totals of everything produced are exact,
/// and every change is an event saying why.
#[test]
fn a_backlog_scales_the_job_up_within_its_partitions_and_idle_back_down_after_the_window() {
    let ns = new_namespace("op-autoscale");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(4);
    let file = example("s2-group-by.yaml", &t, |s| {
        s.replace(
            "  workers: 2\n  coresPerWorker: 2",
            "  workers: 1\n  coresPerWorker: 1\n  suspend: true\n  engine: { batchMaxRecords: 16 }\n  \
             autoscaling:\n    minWorkers: 1\n    maxWorkers: 6\n    targetLagSeconds: 1\n    \
             targetUtilizationPercent: 50\n    scaleDownStabilizationSeconds: 20\n    metricsWindowSeconds: 3\n    \
             periodSeconds: 1",
        )
    });
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s2-group-by";
    // A backlog built while the job is suspended: far more than one worker
    // works off within the 1 s target (in batches of 16 records, a debug
    // build's core does some 20-40 K records/s).
    const BACKLOG: u64 = 600_000;
    for chunk in 0..4 {
        produce_trades(&t.trades, chunk * BACKLOG / 4..(chunk + 1) * BACKLOG / 4, 4);
    }
    kubectl_ok(["patch", "sj", name, "-n", &ns, "--type=merge", "-p", r#"{"spec":{"suspend":false}}"#]);

    let up = wait_until("a ScaledUp event", Duration::from_secs(120), || {
        scaling_events(&ns).into_iter().find(|c| c.reason == "ScaledUp")
    });
    assert_eq!(up.from, 1, "{up:?}");
    assert!(up.message.contains("backlog") && up.message.contains("busy"), "says why, with the figures: {up:?}");
    assert!((2..=4).contains(&up.to), "up, but never beyond the 4 partitions (maxWorkers is 6): {up:?}");

    // The backlog is worked off; idle, the job goes back to one worker —
    // in one step or more, each only after a whole 20 s window at the
    // count before it.
    let changes = wait_until("back to one worker", Duration::from_secs(240), || {
        let job = get("sj", name, &ns)?;
        let changes = scaling_events(&ns);
        (job["status"]["readyWorkers"] == 1 && changes.last()?.to == 1).then_some(changes)
    });
    assert_eq!(changes[0], up, "{changes:#?}");
    for pair in changes.windows(2) {
        let (before, down) = (&pair[0], &pair[1]);
        assert_eq!(down.reason, "ScaledDown", "{changes:#?}");
        assert!(down.from == before.to && down.to < down.from, "{changes:#?}");
        let waited = down.at.duration_since(before.at).as_secs_f64();
        assert!(waited >= 20.0, "scaled down {waited} s after the change before: {changes:#?}");
    }

    // A steady 2.5 K records/s, which one worker (a debug build, beside
    // the broker, the API server and the operator on a 2-core machine)
    // keeps up with: several decision periods (1 s) and metrics windows
    // (3 s) without a change.
    let mut produced = BACKLOG;
    let steady_since = Instant::now();
    while steady_since.elapsed() < Duration::from_secs(14) {
        produce_trades(&t.trades, produced..produced + 500, 4);
        produced += 500;
        std::thread::sleep(Duration::from_millis(200));
        let job = get("sj", name, &ns).unwrap();
        assert_eq!(job["status"]["autoscaling"]["desiredWorkers"], 1, "{}", job["status"]);
    }
    assert_eq!(scaling_events(&ns), changes, "no flapping");
    let holding = get("sj", name, &ns).unwrap();
    assert_eq!(holding["status"]["autoscaling"]["lastDecision"], "Hold", "{}", holding["status"]);
    assert!(holding["status"]["autoscaling"]["inputRate"].as_i64().unwrap() > 0, "{}", holding["status"]);

    wait_for_counts(&t.out, &expected_counts(0..produced), Duration::from_secs(120));
    // And the operator reads from Kafka that everything is committed.
    wait_until("status.lag 0", Duration::from_secs(30), || (get("sj", name, &ns)?["status"]["lag"] == 0).then_some(()));

    // Never more than 4 workers, never two owners of a partition.
    let history = kubelet().history(&ns);
    let pods: BTreeSet<&str> = history.iter().map(|r| r.pod.as_str()).collect();
    assert!(pods.iter().all(|p| ["s2-group-by-0", "s2-group-by-1", "s2-group-by-2", "s2-group-by-3"].contains(p)));
    assert_no_overlap_and_clean_drains(&ns);
    for c in changes {
        println!("{} {}: {}", c.at, c.reason, c.message);
    }
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}
