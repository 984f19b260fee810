//! A real Prometheus (the Debian package) scraping processes on loopback.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::worker::{Worker, free_port, http_get, write_temp};

/// A running Prometheus.
#[derive(Debug)]
pub struct Prometheus {
    process: Worker,
    pub port: u16,
}

/// One scrape target: its `host:port` and extra labels.
#[derive(Debug, Clone)]
pub struct Target {
    pub job: String,
    pub port: u16,
    pub labels: Vec<(String, String)>,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second.
    pub fn start(targets: &[Target]) -> Self {
        Self::start_with_rules(targets, None)
    }

    /// Starts Prometheus scraping `targets` and evaluating the rule file
    /// `rules` every second.
    pub fn start_with_rules(targets: &[Target], rules: Option<&std::path::Path>) -> Self {
        let bin = std::env::var("SLUICE_PROMETHEUS").unwrap_or_else(|_| "/usr/bin/prometheus".into());
        let mut config = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
        if let Some(r) = rules {
            config.push_str(&format!("rule_files: ['{}']\n", r.display()));
        }
        config.push_str("scrape_configs:\n");
        for t in targets {
            // As the chart's ServiceMonitor: the operator's per-job series
            // keep their own `namespace` label.
            let honor = if t.job == "sluice-operator" { "    honor_labels: true\n" } else { "" };
            config.push_str(&format!(
                "  - job_name: {}\n{honor}    static_configs:\n      - targets: ['127.0.0.1:{}']\n        labels: {{{}}}\n",
                t.job,
                t.port,
                t.labels.iter().map(|(k, v)| format!("{k}: '{v}'")).collect::<Vec<_>>().join(", ")
            ));
        }
        let file = write_temp("prometheus.yml", &config);
        let data: PathBuf = file.with_extension("data");
        let port = free_port();
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        let process = Worker::from_command(cmd, "127.0.0.1", port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(port, "/-/ready").map(|(s, _)| s) != Some(200) {
            assert!(Instant::now() < deadline, "Prometheus did not start:\n{}", process.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { process, port }
    }

    /// Runs an instant PromQL query; returns the result vector.
    pub fn query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let q: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) =
            http_get(self.port, &format!("/api/v1/query?query={q}")).ok_or_else(|| "no answer".to_owned())?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("HTTP {status}: {}", v["error"]));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// Every alerting rule with its state, health and last error
    /// (`/api/v1/rules`).
    pub fn rules(&self) -> Vec<Value> {
        let Some((200, body)) = http_get(self.port, "/api/v1/rules?type=alert") else { return Vec::new() };
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["groups"]
            .as_array()
            .map(|g| g.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect())
            .unwrap_or_default()
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}
