//! What /healthz and /readyz report: each core's status, and why the job
//! stopped if it did.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use crate::sink::DrainDeadline;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CoreStatus {
    /// Creating clients, restoring state.
    Starting = 0,
    /// Assigned and consuming.
    Running = 1,
    /// A bounded run reached its end.
    Finished = 2,
    Failed = 3,
}

/// Shared by the core threads (writers) and the HTTP server (reader).
#[derive(Debug, Default)]
pub struct Health {
    cores: Mutex<Vec<AtomicU8>>,
    failure: Mutex<Option<String>>,
    /// Set when every source reached the end of its bounded input under
    /// `serve`: the worker stays up and says so, rather than exiting (which
    /// Kubernetes would answer with a restart that generates it all again).
    finished: Mutex<Option<String>>,
    /// Set on SIGTERM/SIGINT: cores finish their batch, checkpoint and stop.
    pub shutdown: AtomicBool,
    /// When a drain after SIGTERM stops waiting on the broker.
    pub drain: DrainDeadline,
    /// Set when a core failed for good: the other cores stop too (the job
    /// cannot go on without that core's partitions), but the process keeps
    /// serving /readyz with the reason instead of exiting into a crash loop.
    aborted: AtomicBool,
    /// Per core: how many times in a row it failed and was restarted, and
    /// the last error (see [`Health::restarting`]).
    restarts: Mutex<Vec<(u32, String)>>,
}

/// Consecutive restarts of one core from which `/readyz` reports the job
/// degraded (`degraded: …`), so the operator says so on the StreamJob: a
/// failure that looks transient but keeps coming back (a broker that
/// refuses, a listener that is not Kafka) is not hidden as "starting".
pub const RESTARTS_REPORTED: u32 = 3;

impl Health {
    pub fn set_cores(&self, n: usize) {
        if let Ok(mut c) = self.cores.lock() {
            *c = (0..n).map(|_| AtomicU8::new(CoreStatus::Starting as u8)).collect();
        }
    }

    pub fn set(&self, core: usize, status: CoreStatus) {
        if let Ok(c) = self.cores.lock()
            && let Some(s) = c.get(core)
        {
            s.store(status as u8, Ordering::Release);
        }
    }

    /// Core `core` failed (`error`, transient) and restarts: the
    /// `consecutive`-th time in a row (0: it is running again).
    pub fn restarting(&self, core: usize, consecutive: u32, error: &str) {
        if let Ok(mut r) = self.restarts.lock() {
            if r.len() <= core {
                r.resize(core + 1, (0, String::new()));
            }
            r[core] = (consecutive, error.to_owned());
        }
    }

    pub fn fail(&self, reason: String) {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert(reason);
        }
    }

    /// A core failed for good: record why and stop every core.
    pub fn abort(&self, reason: String) {
        self.fail(reason);
        self.aborted.store(true, Ordering::Release);
    }

    /// The job read all of its bounded input; `summary` says how much.
    pub fn finish(&self, summary: String) {
        if let Ok(mut f) = self.finished.lock() {
            f.get_or_insert(summary);
        }
    }

    pub fn finished(&self) -> Option<String> {
        self.finished.lock().ok().and_then(|f| f.clone())
    }

    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// SIGTERM/SIGINT: stop polling, finish the batch, flush and commit —
    /// with every wait on the broker ending `within` from now, so the
    /// process is gone before the grace period ends.
    pub fn request_shutdown(&self, within: Duration) {
        self.drain.start(within);
        self.shutdown.store(true, Ordering::Release);
    }

    /// Cores stop polling: a signal asked for it, or the job failed.
    pub fn stopping(&self) -> bool {
        self.signalled() || self.aborted.load(Ordering::Acquire)
    }

    /// SIGTERM/SIGINT arrived.
    pub fn signalled(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Ready = no core failed, and every core assigned and consuming — or
    /// the job finished its bounded input (`Ok` with `finished: <summary>`).
    pub fn readiness(&self) -> Result<String, String> {
        if let Some(f) = self.failure() {
            return Err(format!("failed: {f}"));
        }
        if let Some(summary) = self.finished() {
            return Ok(format!("finished: {summary}"));
        }
        if let Ok(r) = self.restarts.lock()
            && let Some((core, (n, error))) = r.iter().enumerate().find(|(_, (n, _))| *n >= RESTARTS_REPORTED)
        {
            return Err(format!("degraded: core {core} restarted {n} times in a row; last error: {error}"));
        }
        let cores = self.cores.lock().map_err(|_| "poisoned".to_owned())?;
        if cores.is_empty() {
            return Err("starting".into());
        }
        let starting = cores.iter().filter(|s| s.load(Ordering::Acquire) == CoreStatus::Starting as u8).count();
        if starting > 0 {
            return Err(format!("{starting} of {} cores still starting", cores.len()));
        }
        Ok("ready".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_core_runs_and_none_failed() {
        let h = Health::default();
        assert!(h.readiness().is_err(), "no cores yet");
        h.set_cores(2);
        h.set(0, CoreStatus::Running);
        assert!(h.readiness().unwrap_err().contains("1 of 2 cores still starting"));
        h.set(1, CoreStatus::Running);
        assert_eq!(h.readiness(), Ok("ready".into()));
        h.set(1, CoreStatus::Failed);
        h.abort("core 1: state limit exceeded".into());
        let e = h.readiness().unwrap_err();
        assert!(e.contains("state limit exceeded"), "{e}");
        assert!(h.stopping(), "the other cores stop");
        assert!(!h.signalled(), "a failure is not a signal: serve keeps reporting it");
    }

    #[test]
    fn a_core_restarting_again_and_again_is_reported_degraded_with_its_last_error() {
        let h = Health::default();
        h.set_cores(2);
        h.set(0, CoreStatus::Running);
        h.set(1, CoreStatus::Starting);
        h.restarting(1, 2, "kafka: deliver to out: timed out");
        assert!(h.readiness().unwrap_err().contains("still starting"), "two restarts: starting");
        h.restarting(1, 3, "kafka: deliver to out: broker refused");
        let e = h.readiness().unwrap_err();
        assert_eq!(e, "degraded: core 1 restarted 3 times in a row; last error: kafka: deliver to out: broker refused");
        // Running again for long enough: the count starts over.
        h.restarting(1, 0, "");
        h.set(1, CoreStatus::Running);
        assert_eq!(h.readiness(), Ok("ready".into()));
    }

    #[test]
    fn a_finished_job_stays_ready_and_says_so() {
        let h = Health::default();
        h.set_cores(1);
        h.set(0, CoreStatus::Finished);
        h.finish("records in: 10, records out: 2".into());
        assert_eq!(h.readiness(), Ok("finished: records in: 10, records out: 2".into()));
    }
}
