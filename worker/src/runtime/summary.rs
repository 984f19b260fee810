//! What a core did: its part of the end-of-run summary.

/// What a core did, for the end-of-run summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct CoreSummary {
    pub records_in: u64,
    pub records_out: u64,
    pub dead_lettered: u64,
    pub late: u64,
    /// The most state the core held after any batch (`Engine::stats`).
    pub peak_state_bytes: u64,
    /// The most state the core had spilled to disk.
    pub peak_spilled_bytes: u64,
}

impl CoreSummary {
    /// Adds another core's (peaks add up: an upper bound on the job's).
    pub fn add(&mut self, o: &CoreSummary) {
        self.records_in += o.records_in;
        self.records_out += o.records_out;
        self.dead_lettered += o.dead_lettered;
        self.late += o.late;
        self.peak_state_bytes += o.peak_state_bytes;
        self.peak_spilled_bytes += o.peak_spilled_bytes;
    }
}
