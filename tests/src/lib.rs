//! Support for tests that run against the real harness started by
//! `tests/infra/up.sh` (a Kafka broker and a Kubernetes control plane on
//! 127.0.0.1). `tests/run.sh` starts it and exports where everything is.
//!
//! These helpers fail loudly: a test that cannot reach its infrastructure
//! must fail, never skip.
#![allow(clippy::expect_used, clippy::panic)]

pub mod helm;
pub mod jobs;
pub mod kafka;
pub mod kube;
pub mod kubelet;
pub mod operator;
pub mod prometheus;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the harness services are.
#[derive(Debug)]
pub struct Harness {
    pub bootstrap: String,
    /// The Schema Registry's Confluent-compatible API.
    pub registry_url: String,
    /// The same API behind nginx: TLS and HTTP basic authentication.
    pub registry_secure_url: String,
    /// `ca.crt` (the TLS front's CA), `user` and `password` for it.
    pub registry_tls_dir: PathBuf,
    /// A Python with confluent-kafka and its serializers.
    pub clients_python: PathBuf,
    pub kubeconfig: PathBuf,
    pub repo: PathBuf,
    pub run_dir: PathBuf,
}

/// The running harness. Panics with instructions when it is not running.
pub fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!(
                    "{name} is not set: these tests need the real harness. Run `bash tests/run.sh`, \
                     or `bash tests/infra/up.sh && source target/harness/env` first."
                )
            })
        };
        let _ = var("SLUICE_HARNESS");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo root").to_path_buf();
        Harness {
            bootstrap: var("SLUICE_KAFKA_BOOTSTRAP"),
            registry_url: var("SLUICE_REGISTRY_URL"),
            registry_secure_url: var("SLUICE_REGISTRY_SECURE_URL"),
            registry_tls_dir: PathBuf::from(var("SLUICE_REGISTRY_TLS_DIR")),
            clients_python: PathBuf::from(var("SLUICE_CLIENTS_PYTHON")),
            kubeconfig: PathBuf::from(var("KUBECONFIG")),
            run_dir: PathBuf::from(var("SLUICE_RUN_DIR")),
            repo,
        }
    })
}

/// Wall-clock time in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A name no other test (or earlier run) uses: Kubernetes- and Kafka-safe.
/// Copies a directory tree (a stopped worker's local state, a chart).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    for entry in std::fs::read_dir(from).expect("read the directory to copy") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("{prefix}-{}-{n}-{}", std::process::id(), t % 1_000_000)
}
