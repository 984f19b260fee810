//! Running the real `sluice-worker` binary from tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_crds::{JobIdentity, SourcePartitions, StreamJob, WorkerConfig, WorkerSettings};

use crate::harness;

/// The worker binary: `$SLUICE_WORKER_BIN`, else `<target>/debug/sluice-worker`.
pub fn worker_bin() -> PathBuf {
    if let Ok(p) = std::env::var("SLUICE_WORKER_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| harness().repo.join("target"));
    let bin = target.join("debug").join("sluice-worker");
    assert!(bin.exists(), "{} not built: run `cargo build -p sluice-worker` (tests/run.sh does)", bin.display());
    bin
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A running worker process, its stderr captured.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    /// The address its HTTP endpoint listens on (127.0.0.1, or a pod's own
    /// loopback address under the harness kubelet).
    pub http_host: String,
    pub http_port: u16,
    log: Arc<Mutex<String>>,
    /// Closed by the stderr reader at end of file. A process's exit does
    /// not mean its last lines were read: they may still sit in the pipe,
    /// so [`Worker::wait`] waits for this before the log is looked at.
    log_done: std::sync::mpsc::Receiver<()>,
    pub stdout: Option<std::process::ChildStdout>,
}

impl Worker {
    fn spawn(cmd: Command, http_port: u16) -> Self {
        Self::spawn_at(cmd, "127.0.0.1", http_port, Stdio::piped())
    }

    /// `stdout`: piped (read by [`Worker::stdout_text`] after exit) or a file.
    fn spawn_at(mut cmd: Command, http_host: &str, http_port: u16, stdout: Stdio) -> Self {
        cmd.stdin(Stdio::null()).stdout(stdout).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = Arc::clone(&log);
        let (done, log_done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
            drop(done);
        });
        let stdout = child.stdout.take();
        Self { child, http_host: http_host.to_owned(), http_port, log, log_done, stdout }
    }

    /// `sluice-worker run -f <manifest> <args>` on a free HTTP port.
    pub fn run(manifest: &Path, args: &[&str]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(worker_bin());
        cmd.arg("run").arg("-f").arg(manifest).arg("--http-port").arg(port.to_string()).args(args);
        Self::spawn(cmd, port)
    }

    /// `sluice-worker serve --config <file>` with the given environment.
    pub fn serve(config: &Path, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(worker_bin());
        cmd.arg("serve").arg("--config").arg(config).env("SLUICE_WORKER__HTTP_PORT", port.to_string());
        cmd.env("SLUICE_WORKER__HTTP_ADDRESS", "127.0.0.1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self::spawn(cmd, port)
    }

    /// Runs any prepared command, whose HTTP endpoint listens on
    /// `http_host:http_port`.
    pub fn from_command(cmd: Command, http_host: &str, http_port: u16) -> Self {
        Self::spawn_at(cmd, http_host, http_port, Stdio::piped())
    }

    /// Runs a container's command with its stdout appended to `log`, as a
    /// kubelet keeps container logs: a pipe nobody reads would block a
    /// long-running process (a `stdout` sink) once it filled.
    pub fn container(cmd: Command, http_host: &str, http_port: u16, log: &Path) -> Self {
        let stdout =
            std::fs::OpenOptions::new().create(true).append(true).open(log).map_or_else(|_| Stdio::null(), Stdio::from);
        Self::spawn_at(cmd, http_host, http_port, stdout)
    }

    /// Whether the process has exited (and how), without waiting.
    pub fn try_exit(&mut self) -> Option<bool> {
        let exited = self.child.try_wait().ok().flatten().map(|s| s.success());
        if exited.is_some() {
            self.drain_log();
        }
        exited
    }

    /// Waits (a bounded while: a child of its own could hold the pipe open)
    /// until the stderr reader has read to the end of an exited process's
    /// output.
    fn drain_log(&self) {
        let _ = self.log_done.recv_timeout(Duration::from_secs(10));
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.drain_log();
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.drain_log();
                panic!("worker did not exit within {timeout:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a signal to this process (and only this one).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{signal} {}", self.pid());
    }

    /// GET `path` on the worker's HTTP port: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get_at(&self.http_host, self.http_port, path)
    }

    /// Waits until /readyz answers 200.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some((200, _)) = self.get("/readyz") {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.drain_log();
                panic!("worker exited ({status}) before becoming ready; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("worker not ready after {timeout:?}; /readyz: {:?}; log:\n{}", self.get("/readyz"), self.log());
    }

    /// Reads everything the worker wrote to stdout (after it exited).
    pub fn stdout_text(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut out) = self.stdout.take() {
            let _ = out.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A minimal HTTP/1.0 GET on loopback.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at("127.0.0.1", port, path)
}

/// [`http_get`] at another address.
pub fn http_get_at(host: &str, port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect((host, port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// Value of the series `name{labels...}` in Prometheus text, matching every
/// `label="value"` given.
pub fn metric_values(text: &str, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let labels = labels
                .split(',')
                .filter(|p| !p.is_empty())
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect();
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// Writes `text` to a fresh file under the harness run directory.
pub fn write_temp(name: &str, text: &str) -> PathBuf {
    let dir = harness().run_dir.join("tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{}-{name}", crate::unique_name("f")));
    std::fs::write(&path, text).expect("write temp file");
    path
}

/// The worker config a pod of this job would get (what the operator writes):
/// `manifest`'s job as worker `ordinal` of `workers`, its first source with
/// `partitions` partitions, committing as `group`.
pub fn worker_config(
    manifest: &str,
    partitions: i32,
    workers: i32,
    cores: i32,
    ordinal: i32,
    group: &str,
) -> WorkerConfig {
    let job: StreamJob = serde_saphyr::from_str(manifest).expect("manifest");
    let mut spec = job.spec;
    spec.workers = workers;
    spec.cores_per_worker = cores;
    // Every source with the same partition count (as the tests create them).
    let partitions = spec.sources.iter().map(|s| SourcePartitions { source: s.name.clone(), partitions }).collect();
    WorkerConfig {
        job: JobIdentity { name: job.metadata.name.unwrap_or_default(), namespace: "test".into() },
        spec,
        partitions,
        assignment_epoch: 1,
        earlier_slots: Vec::new(),
        worker: WorkerSettings {
            ordinal: Some(ordinal),
            http_address: "127.0.0.1".into(),
            consumer_group: Some(group.to_owned()),
            ..WorkerSettings::default()
        },
    }
}

/// `c` written to a temporary file, for `sluice-worker serve --config`.
pub fn config_file(c: &WorkerConfig) -> PathBuf {
    write_temp("worker.yaml", &c.to_yaml().expect("worker config yaml"))
}
