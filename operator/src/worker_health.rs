//! What each worker says about itself. A worker that stopped on a fatal
//! error keeps serving `/readyz` (503, `failed: <reason>`) instead of
//! exiting into a crash loop, and one whose bounded input is read to the end
//! stays up too (200, `finished: <summary>`) rather than exiting into a
//! restart that would generate it all again. The operator reads `/readyz`
//! of every pod, so the job's status names a failed worker and why — not
//! `WorkersStarting` forever — and tells a finished job from a running one.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::names;

/// A worker that reported a fatal failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFailure {
    pub pod: String,
    pub reason: String,
}

/// What the workers' `/readyz` answers say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReports {
    pub failures: Vec<WorkerFailure>,
    /// Workers with a core that keeps failing and restarting (`degraded:`).
    pub restarting: Vec<WorkerFailure>,
    /// Pods whose job finished its bounded input, with their summaries.
    pub finished: Vec<(String, String)>,
}

/// How long one /readyz request may take: a hung worker is not a failed one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest reason kept (status messages should stay readable).
const MAX_REASON: usize = 1024;

/// Asks every pod that has an IP.
pub async fn probe(pods: &[Pod]) -> WorkerReports {
    // Probed concurrently: a reconcile waits for the slowest pod's timeout,
    // not the sum of them.
    let probes = pods.iter().filter_map(|pod| {
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        Some(async move { (pod.name_any(), readyz(&ip, names::WORKER_HTTP_PORT).await) })
    });
    let mut reports = WorkerReports::default();
    for (pod, answer) in futures::future::join_all(probes).await {
        let Some((code, body)) = answer else { continue };
        if let Some(reason) = failure(code, &body) {
            reports.failures.push(WorkerFailure { pod, reason });
        } else if let Some(reason) = restarting(code, &body) {
            reports.restarting.push(WorkerFailure { pod, reason });
        } else if let Some(summary) = finished(code, &body) {
            reports.finished.push((pod, summary));
        }
    }
    reports
}

/// The summary a /readyz answer of a finished worker carries.
pub fn finished(code: u16, body: &str) -> Option<String> {
    body.trim().strip_prefix("finished: ").filter(|_| code == 200).map(|s| truncate(s).to_owned())
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(MAX_REASON);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The failure a /readyz answer reports, if it reports one (a worker that
/// is only starting or restoring answers 503 too, without `failed:`).
pub fn failure(code: u16, body: &str) -> Option<String> {
    let reason = body.trim().strip_prefix("failed: ").filter(|_| code == 503)?;
    Some(truncate(reason).to_owned())
}

/// What a /readyz answer says of a core that keeps restarting.
pub fn restarting(code: u16, body: &str) -> Option<String> {
    let reason = body.trim().strip_prefix("degraded: ").filter(|_| code == 503)?;
    Some(truncate(reason).to_owned())
}

async fn readyz(ip: &str, port: i32) -> Option<(u16, String)> {
    get(ip, port, "/readyz", 64 * 1024).await
}

/// What the autoscaler reads of the workers: records in and busy seconds,
/// summed over every core of every pod.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkTotals {
    pub records_in: f64,
    pub busy_seconds: f64,
}

/// Reads `/metrics` of every pod; `None` unless all of them answer (a sum
/// missing a pod would look like a restart).
pub async fn work_totals(pods: &[Pod]) -> Option<WorkTotals> {
    let scrapes = pods.iter().map(|pod| async move {
        let ip = pod.status.as_ref()?.pod_ip.clone()?;
        let (code, body) = get(&ip, names::WORKER_HTTP_PORT, "/metrics", 16 * 1024 * 1024).await?;
        (code == 200).then(|| WorkTotals {
            records_in: sum_of(&body, "sluice_records_in_total"),
            busy_seconds: sum_of(&body, "sluice_core_busy_seconds_total"),
        })
    });
    let mut total = WorkTotals::default();
    for t in futures::future::join_all(scrapes).await {
        let t = t?;
        total.records_in += t.records_in;
        total.busy_seconds += t.busy_seconds;
    }
    Some(total)
}

/// The sum of every series of metric `name` in a Prometheus text exposition.
pub fn sum_of(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            // `name{...} v` or `name v`, not `name_suffix...`.
            let value = match rest.strip_prefix('{') {
                Some(labels) => labels.rsplit_once('}')?.1,
                None if rest.starts_with(' ') => rest,
                None => return None,
            };
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .filter(|v| v.is_finite())
        .sum()
}

async fn get(ip: &str, port: i32, path: &str, limit: u64) -> Option<(u16, String)> {
    let port = u16::try_from(port).ok()?;
    let request = async {
        let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).await.ok()?;
        let mut text = Vec::new();
        s.take(limit).read_to_end(&mut text).await.ok()?;
        let text = String::from_utf8_lossy(&text);
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(PROBE_TIMEOUT, request).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_worker_is_a_failure() {
        assert_eq!(
            failure(503, "failed: core 0: state of partition 3 is 900 bytes, over the limit\n").as_deref(),
            Some("core 0: state of partition 3 is 900 bytes, over the limit")
        );
        assert_eq!(failure(503, "1 of 2 cores still starting"), None, "starting is not failing");
        assert_eq!(failure(200, "ready"), None);
        let long = format!("failed: {}", "é".repeat(2000));
        assert!(failure(503, &long).unwrap().len() <= MAX_REASON);
    }

    #[test]
    fn a_metric_is_summed_over_its_series_and_no_other() {
        let text = "# TYPE sluice_records_in_total counter\n\
                    sluice_records_in_total{core=\"0\",streamjob=\"a\",worker=\"0\"} 10\n\
                    sluice_records_in_total{core=\"1\",streamjob=\"a\",worker=\"0\"} 32.5\n\
                    sluice_records_in_total_extra 1000\n\
                    sluice_records_in_total 7\n\
                    sluice_core_busy_seconds_total{core=\"0\",streamjob=\"a\",worker=\"0\"} 1.25\n";
        assert!((sum_of(text, "sluice_records_in_total") - 49.5).abs() < 1e-9);
        assert!((sum_of(text, "sluice_core_busy_seconds_total") - 1.25).abs() < 1e-9);
        assert!(sum_of(text, "sluice_missing").abs() < f64::EPSILON);
    }

    #[test]
    fn a_core_restarting_again_and_again_is_told_from_a_failure_and_from_starting() {
        let body = "degraded: core 1 restarted 3 times in a row; last error: kafka: deliver to out: refused\n";
        assert_eq!(
            restarting(503, body).as_deref(),
            Some("core 1 restarted 3 times in a row; last error: kafka: deliver to out: refused")
        );
        assert_eq!(failure(503, body), None, "it is not stopped");
        assert_eq!(restarting(503, "1 of 2 cores still starting"), None);
        assert_eq!(restarting(503, "failed: x"), None);
    }

    /// What a pod answers is read up to the limit and for a second at
    /// most: a worker (or whatever listens at its address) that streams
    /// without end, or never answers, cannot hold the operator's memory
    /// or its reconcile.
    #[tokio::test]
    async fn a_pods_answer_is_read_up_to_its_limit_and_for_a_second() {
        use crate::registry_http::test_server::{Answer, serve};
        let head = "HTTP/1.0 503 X\r\n\r\nfailed: ".to_owned();
        let server = serve(move |_| Answer::Endless { head: head.clone(), chunked: false }).await;
        let port = i32::from(server.url.rsplit_once(':').unwrap().1.parse::<u16>().unwrap());
        let started = std::time::Instant::now();
        let (code, body) = readyz("127.0.0.1", port).await.unwrap();
        assert_eq!(code, 503);
        assert!(body.len() < 64 * 1024, "{}", body.len());
        assert_eq!(failure(code, &body).map(|r| r.len()), Some(MAX_REASON), "the reason is cut to 1 KiB");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());

        // A listener that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = i32::from(silent.local_addr().unwrap().port());
        let hold = tokio::spawn(async move {
            let conn = silent.accept().await;
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(conn);
        });
        let started = std::time::Instant::now();
        assert_eq!(readyz("127.0.0.1", port).await, None);
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        hold.abort();
    }

    #[test]
    fn a_finished_worker_is_told_from_a_running_one() {
        assert_eq!(finished(200, "finished: records in: 200000\n").as_deref(), Some("records in: 200000"));
        assert_eq!(finished(200, "ready"), None);
        assert_eq!(finished(503, "failed: x"), None);
    }
}
