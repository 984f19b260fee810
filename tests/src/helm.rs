//! The harness's real Helm (`$SLUICE_HELM`) against the harness API server.

use std::process::Command;

use crate::harness;

/// The result of one helm invocation.
#[derive(Debug)]
pub struct Helm {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `$SLUICE_HELM ARGS` against the harness, from the repository root.
pub fn helm(args: &[&str]) -> Helm {
    let h = harness();
    let bin = std::env::var("SLUICE_HELM")
        .unwrap_or_else(|_| panic!("SLUICE_HELM is not set: run `source target/harness/env` (tests/run.sh does)"));
    let out = Command::new(&bin)
        .env("KUBECONFIG", &h.kubeconfig)
        .current_dir(&h.repo)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run helm ({bin}): {e}"));
    Helm {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs helm and panics with its output unless it succeeds.
pub fn helm_ok(args: &[&str]) -> String {
    let r = helm(args);
    assert!(r.success, "helm {args:?} failed:\n{}\n{}", r.stdout, r.stderr);
    r.stdout
}
