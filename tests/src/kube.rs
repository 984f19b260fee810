//! Kubernetes helpers: the real `kubectl` against the harness API server.

use std::path::Path;
use std::process::{Command, Output};

use crate::harness;

/// The result of one kubectl invocation.
#[derive(Debug)]
pub struct Kubectl {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Kubectl {
    fn from(o: Output) -> Self {
        Self {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Runs `kubectl ARGS` against the harness, from the repository root.
pub fn kubectl<I, S>(args: I) -> Kubectl
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let h = harness();
    Command::new("kubectl")
        .env("KUBECONFIG", &h.kubeconfig)
        .current_dir(&h.repo)
        .args(args)
        .output()
        .expect("kubectl must be installed")
        .into()
}

/// Runs kubectl and panics with its output unless it succeeds.
pub fn kubectl_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let r = kubectl(&args);
    assert!(r.success, "kubectl {args:?} failed:\n{}\n{}", r.stdout, r.stderr);
    r.stdout
}

/// Creates a namespace for one test and returns its name.
pub fn new_namespace(prefix: &str) -> String {
    let ns = crate::unique_name(prefix);
    kubectl_ok(["create", "namespace", &ns]);
    ns
}

/// Files under `dir` (relative to the repo root) ending in `.yaml`, sorted.
pub fn yaml_files(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = harness().repo.join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// Lines of the form `# expect: TEXT` in a fixture file.
pub fn expectations(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
        .lines()
        .filter_map(|l| l.strip_prefix("# expect:"))
        .map(|s| s.trim().to_owned())
        .collect()
}
