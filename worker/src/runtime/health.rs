//! What /healthz and /readyz report: each core's status, and why the job
//! stopped if it did.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

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
    /// Set on SIGTERM/SIGINT: cores finish their batch, checkpoint and stop.
    pub shutdown: AtomicBool,
}

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

    pub fn fail(&self, reason: String) {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert(reason);
        }
    }

    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Ready = not failed, and every core assigned and consuming.
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(f) = self.failure() {
            return Err(format!("failed: {f}"));
        }
        let cores = self.cores.lock().map_err(|_| "poisoned".to_owned())?;
        if cores.is_empty() {
            return Err("starting".into());
        }
        let starting = cores.iter().filter(|s| s.load(Ordering::Acquire) == CoreStatus::Starting as u8).count();
        if starting > 0 {
            return Err(format!("{starting} of {} cores still starting", cores.len()));
        }
        Ok(())
    }
}
