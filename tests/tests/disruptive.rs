//! Fault suite, disruptive part: faults of the shared infrastructure itself
//! — the broker stopped, the broker frozen (SIGSTOP) while workers restore,
//! the control plane restarted. They would break every other test running
//! beside them, so they are `#[ignore]`d in the normal run and executed one
//! at a time by `bench/faults.sh` on a harness of their own. Results are
//! checked against counts computed here.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use sluice_e2e::harness;
use sluice_e2e::jobs::*;
use sluice_e2e::kube::{kubectl_ok, new_namespace};
use sluice_e2e::kubelet::kubelet;
use sluice_e2e::operator::start_operator;

fn infra(script: &str, args: &[&str]) {
    let status = Command::new("bash")
        .arg(harness().repo.join("tests/infra").join(script))
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    assert!(status.success(), "{script} {args:?} failed");
}

fn broker_pid() -> String {
    std::fs::read_to_string(harness().run_dir.join("kafka.pid")).unwrap().trim().to_owned()
}

fn signal_broker(signal: &str) {
    let status = Command::new("kill").args([&format!("-{signal}"), &broker_pid()]).status().unwrap();
    assert!(status.success());
}

#[test]
#[ignore = "disruptive: stops the shared broker; run by bench/faults.sh"]
fn the_broker_stopped_and_started_mid_run_loses_nothing() {
    let ns = new_namespace("faults-broker");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 2, 3_000);
    infra("kafka.sh", &["stop"]);
    std::thread::sleep(Duration::from_secs(20));
    infra("kafka.sh", &["start"]);
    produce_trades(&t.trades, 3_000..6_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..6_000), Duration::from_secs(180));
    let runs = kubelet().history(&ns).len();
    println!("FIGURES broker-stop: outage=20s records=6000 lost=0 worker_processes={runs} wedged=0");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
#[ignore = "disruptive: freezes the shared broker; run by bench/faults.sh"]
fn the_broker_frozen_during_a_restore_for_longer_than_every_timeout_loses_nothing() {
    let ns = new_namespace("faults-freeze");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 2, 3_000);
    // Restart the worker; freeze the broker as the new one starts restoring.
    let before = kubelet().history(&ns).len();
    kubectl_ok(["delete", "pod", "s2-group-by-0", "-n", &ns, "--wait=false"]);
    wait_until("a new worker process", Duration::from_secs(60), || {
        (kubelet().history(&ns).len() > before).then_some(())
    });
    signal_broker("STOP");
    let frozen = Instant::now();
    std::thread::sleep(Duration::from_secs(75));
    signal_broker("CONT");
    println!("broker frozen for {:?}", frozen.elapsed());
    wait_ready("s2-group-by", &ns, 1);
    produce_trades(&t.trades, 3_000..6_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..6_000), Duration::from_secs(180));
    println!("FIGURES broker-freeze-during-restore: frozen=75s records=6000 lost=0 wedged=0");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
#[ignore = "disruptive: restarts the shared control plane; run by bench/faults.sh"]
fn the_control_plane_restarted_leaves_jobs_running_and_the_operator_reconciling() {
    let ns = new_namespace("faults-apiserver");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 4, 3_000);
    infra("kube.sh", &["stop"]);
    // The workers need no API server: records keep flowing meanwhile.
    produce_trades(&t.trades, 3_000..6_000, 4);
    wait_for_counts(&t.out, &expected_counts(0..6_000), Duration::from_secs(120));
    infra("kube.sh", &["start", harness().repo.join("crds/streamjob.yaml").to_str().unwrap()]);
    // The operator reconnects and acts again: a rescale completes.
    kubectl_ok(["scale", "sj", "s2-group-by", "-n", &ns, "--replicas=2"]);
    wait_ready("s2-group-by", &ns, 2);
    produce_trades(&t.trades, 6_000..8_000, 4);
    wait_for_counts(&t.out, &expected_counts(0..8_000), Duration::from_secs(120));
    println!("FIGURES apiserver-restart: records=8000 lost=0 rescale_after_restart=ok wedged=0");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}
