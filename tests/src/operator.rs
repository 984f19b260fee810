//! Running the real `sluice-operator` binary against the harness API server.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness;
use crate::worker::{Worker, free_port};

/// The operator binary: `$SLUICE_OPERATOR_BIN`, else `<target>/debug/sluice-operator`.
pub fn operator_bin() -> PathBuf {
    if let Ok(p) = std::env::var("SLUICE_OPERATOR_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| harness().repo.join("target"));
    let bin = target.join("debug").join("sluice-operator");
    assert!(bin.exists(), "{} not built: run `cargo build -p sluice-operator` (tests/run.sh does)", bin.display());
    bin
}

/// Starts an operator watching `namespace`, electing a leader with a Lease
/// there. `identity` names the replica.
pub fn start_operator(namespace: &str, identity: &str) -> Worker {
    start_operator_with(&harness().kubeconfig, namespace, namespace, "sluice-operator", identity)
}

/// Starts an operator with the credentials of `kubeconfig`, watching
/// `namespace`, with its Lease `lease_name` in `lease_namespace`.
pub fn start_operator_with(
    kubeconfig: &Path,
    namespace: &str,
    lease_namespace: &str,
    lease_name: &str,
    identity: &str,
) -> Worker {
    let port = free_port();
    let mut cmd = Command::new(operator_bin());
    cmd.env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", identity)
        .env("RUST_LOG", "info,kube=warn")
        .args(["--namespace", namespace, "--lease-namespace", lease_namespace, "--lease-name", lease_name])
        .args(["--http-address", "127.0.0.1"])
        .args([
            "--http-port",
            &port.to_string(),
            "--worker-image",
            "sluice-worker:test",
            "--kafka-timeout-seconds",
            "5",
            "--resync-seconds",
            "5",
        ]);
    Worker::from_command(cmd, "127.0.0.1", port)
}
