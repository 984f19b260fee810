//! How long a draining worker still waits on the broker.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// The moment a draining worker stops waiting on the broker. After SIGTERM
/// the worker must flush, checkpoint and exit before Kubernetes kills it at
/// the end of the grace period; every wait on the broker (a full producer
/// queue, a flush before the final checkpoint) gives up at this deadline.
/// Giving up loses nothing: offsets are committed only after a complete
/// flush, so what was not acknowledged is replayed by the next worker.
#[derive(Clone, Debug, Default)]
pub struct DrainDeadline(Arc<AtomicI64>);

impl DrainDeadline {
    /// Starts the drain: waits end `within` from now.
    pub fn start(&self, within: Duration) {
        let at = crate::clock::now_ms().saturating_add(i64::try_from(within.as_millis()).unwrap_or(i64::MAX));
        self.0.store(at, Ordering::Release);
    }

    /// The earlier of `now + wait` and the drain deadline.
    pub fn bound(&self, wait: Duration) -> Instant {
        let now = Instant::now();
        match self.0.load(Ordering::Acquire) {
            0 => now + wait,
            at => {
                let left = u64::try_from(at - crate::clock::now_ms()).unwrap_or(0);
                now + wait.min(Duration::from_millis(left))
            }
        }
    }

    /// Whether a drain started and its deadline has passed.
    pub fn passed(&self) -> bool {
        let at = self.0.load(Ordering::Acquire);
        at != 0 && crate::clock::now_ms() >= at
    }
}
