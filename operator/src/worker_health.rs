//! What each worker says about itself: a worker that stopped on a fatal
//! error keeps serving `/readyz` (503, `failed: <reason>`) instead of
//! exiting into a crash loop, and the operator reads that reason from every
//! pod that is not ready, so the job's status names the worker and why —
//! not `WorkersStarting` forever.

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

/// How long one /readyz request may take: a hung worker is not a failed one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest reason kept (status messages should stay readable).
const MAX_REASON: usize = 1024;

/// The failures reported by `pods` that are not ready (pods that are ready,
/// or have no IP yet, are not asked).
pub async fn failures(pods: &[Pod]) -> Vec<WorkerFailure> {
    // Probed concurrently: a reconcile waits for the slowest pod's timeout,
    // not the sum of them.
    let probes = pods.iter().filter_map(|pod| {
        let status = pod.status.as_ref()?;
        let ready =
            status.conditions.as_ref().is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let ip = status.pod_ip.clone().filter(|_| !ready)?;
        Some(async move {
            let reason = readyz(&ip, names::WORKER_HTTP_PORT).await.and_then(|(code, body)| failure(code, &body))?;
            Some(WorkerFailure { pod: pod.name_any(), reason })
        })
    });
    futures::future::join_all(probes).await.into_iter().flatten().collect()
}

/// The failure a /readyz answer reports, if it reports one (a worker that
/// is only starting or restoring answers 503 too, without `failed:`).
pub fn failure(code: u16, body: &str) -> Option<String> {
    let reason = body.trim().strip_prefix("failed: ").filter(|_| code == 503)?;
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Some(reason[..end].to_owned())
}

async fn readyz(ip: &str, port: i32) -> Option<(u16, String)> {
    let port = u16::try_from(port).ok()?;
    let request = async {
        let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        s.write_all(format!("GET /readyz HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).await.ok()?;
        let mut text = Vec::new();
        s.take(64 * 1024).read_to_end(&mut text).await.ok()?;
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
}
