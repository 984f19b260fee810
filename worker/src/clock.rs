//! Wall-clock time, read by the sources (a record's processing time), the
//! sinks (delivery deadlines) and the runtime alike: below all three.

/// Wall-clock time in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
