//! Retry delays per StreamJob: exponential, so a job whose broker is down
//! or whose reconcile keeps failing is retried quickly at first and then
//! every few minutes, not every few seconds forever (which is what floods
//! API servers and brokers when many jobs share an outage).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

const FIRST: Duration = Duration::from_secs(5);
const MAX: Duration = Duration::from_secs(300);

/// Consecutive failures per job (`namespace/name`), reset by a success.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Counts a failure of `job` and returns how long to wait before the
    /// next attempt: 5 s, 10 s, 20 s, … up to 5 minutes.
    pub fn failed(&self, job: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(job.to_owned()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1);
        FIRST.saturating_mul(2u32.saturating_pow(n.saturating_sub(1).min(16))).min(MAX)
    }

    /// `job` succeeded: its next failure starts from the first delay again.
    pub fn succeeded(&self, job: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_five_minutes_and_resets_on_success() {
        let b = Backoff::default();
        let delays: Vec<u64> = (0..9).map(|_| b.failed("ns/a").as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.failed("ns/b").as_secs(), 5, "per job");
        b.succeeded("ns/a");
        assert_eq!(b.failed("ns/a").as_secs(), 5);
    }
}
