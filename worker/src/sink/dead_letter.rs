//! Records that could not be processed, with where they came from and why.

use std::time::{Duration, Instant};

use crate::Error;
use sluice_formats::decode::RecordHeaders;

/// One dead letter: the original payload, its source coordinates and the reason.
#[derive(Clone, Copy)]
pub struct DeadLetter<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub reason: &'a str,
    /// The value, `None` where the input record's was null (a tombstone).
    pub payload: Option<&'a [u8]>,
    /// The input record's key and headers, kept as they were (none for a
    /// row Sluice made: a late row re-encoded, a result not written).
    pub key: Option<&'a [u8]>,
    pub headers: Option<&'a dyn RecordHeaders>,
    pub stage: Stage,
}

impl std::fmt::Debug for DeadLetter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetter")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("reason", &self.reason)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

/// Where a record failed, as Kafka Connect's dead-letter headers name the
/// stage (`__connect.errors.stage`), so tools that read Connect's dead
/// letter queues read these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The value could not be decoded (malformed, wrong type, missing
    /// field, unknown schema): Connect's value converter.
    Decode,
    /// A row that arrived after its window had closed (`lateRecords:
    /// DeadLetter`), re-encoded as JSON of the columns the query reads.
    Late,
    /// A result or intermediate row the producer refused (too large).
    Produce,
}

impl Stage {
    /// Connect's name for the stage.
    pub fn connect_name(self) -> &'static str {
        match self {
            Self::Decode => "VALUE_CONVERTER",
            Self::Late => "TASK_PUT",
            Self::Produce => "KAFKA_PRODUCE",
        }
    }

    /// What failed, as Connect's `exception.class.name` header says it.
    pub fn error_class(self) -> &'static str {
        match self {
            Self::Decode => "dev.sluice.DecodeError",
            Self::Late => "dev.sluice.LateRecord",
            Self::Produce => "dev.sluice.RecordTooLarge",
        }
    }
}

impl DeadLetter<'_> {
    /// A self-describing JSON line (file and log outputs): the payload is
    /// kept as text when it is UTF-8, otherwise hex-encoded.
    pub fn to_json_line(&self, out: &mut Vec<u8>) {
        use sluice_formats::encode::write_str;
        out.extend_from_slice(b"{\"reason\":");
        write_str(self.reason, out);
        out.extend_from_slice(b",\"topic\":");
        write_str(self.topic, out);
        out.extend_from_slice(
            format!(",\"partition\":{},\"offset\":{},\"timestamp\":{}", self.partition, self.offset, self.timestamp_ms)
                .as_bytes(),
        );
        match self.payload.map(std::str::from_utf8) {
            None => out.extend_from_slice(b",\"payload\":null"),
            Some(Ok(text)) => {
                out.extend_from_slice(b",\"payload\":");
                write_str(text, out);
            }
            Some(Err(_)) => {
                out.extend_from_slice(b",\"payload_hex\":\"");
                for b in self.payload.unwrap_or_default() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.push(b'"');
            }
        }
        out.extend_from_slice(b"}\n");
    }
}

pub trait DeadLetterSink: Send {
    fn send(&mut self, record: &DeadLetter<'_>) -> Result<(), Error>;
    fn poll(&mut self) -> Result<(), Error> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// No dead-letter output configured: dead letters are logged (and
/// counted), so nothing disappears silently — but bounded, because a bad
/// producer can send millions: 100,000 bad records once wrote 51 MB of log
/// in 0.4 s, their payloads (user data) included. The first
/// [`LOG_FIRST`] are logged one by one with their coordinates and reason;
/// after that each interval's are summed up, one line per kind of reason
/// (the reason up to its first `:`). Payloads are logged at debug level
/// only.
#[derive(Debug)]
pub struct LogDeadLetter {
    logged: u64,
    /// Since the last summary: per kind of reason, how many and the first
    /// one's coordinates.
    pending: Vec<(String, u64, String)>,
    since: Instant,
    interval: Duration,
}

/// How many dead letters are logged one by one before summaries take over.
pub const LOG_FIRST: u64 = 10;
/// The most kinds of reason a summary tells apart (the rest are "other").
const MAX_KINDS: usize = 16;

impl Default for LogDeadLetter {
    fn default() -> Self {
        Self::new(Duration::from_secs(10))
    }
}

impl LogDeadLetter {
    /// Summing up every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self { logged: 0, pending: Vec::new(), since: Instant::now(), interval }
    }

    fn summarize(&mut self) {
        let secs = self.since.elapsed().as_secs_f64();
        for (kind, n, first) in self.pending.drain(..) {
            tracing::warn!(
                reason = %kind, records = n, first = %first,
                "{n} more records not processed in the last {secs:.0} s (configure spec.deadLetter to keep them)"
            );
        }
        self.since = Instant::now();
    }
}

impl DeadLetterSink for LogDeadLetter {
    fn send(&mut self, r: &DeadLetter<'_>) -> Result<(), Error> {
        self.logged += 1;
        tracing::debug!(
            topic = r.topic, partition = r.partition, offset = r.offset, reason = r.reason,
            payload = %String::from_utf8_lossy(&r.payload.unwrap_or_default()[..r.payload.map_or(0, <[u8]>::len).min(512)]),
            "record not processed"
        );
        if self.logged <= LOG_FIRST {
            tracing::warn!(
                topic = r.topic,
                partition = r.partition,
                offset = r.offset,
                reason = r.reason,
                "record not processed (configure spec.deadLetter to keep such records; payloads are logged at \
                 debug level)"
            );
            if self.logged == LOG_FIRST {
                tracing::warn!(
                    "further records not processed are summed up every {} s, per reason",
                    self.interval.as_secs()
                );
                self.since = Instant::now();
            }
            return Ok(());
        }
        let kind = r.reason.split(':').next().unwrap_or_default();
        let mut end = kind.len().min(80);
        while !kind.is_char_boundary(end) {
            end -= 1;
        }
        let kind = &kind[..end];
        let at = match self.pending.iter().position(|(k, _, _)| k == kind) {
            Some(at) => at,
            None if self.pending.len() < MAX_KINDS || self.pending.iter().all(|(k, _, _)| k != "other") => {
                let kind = if self.pending.len() < MAX_KINDS { kind } else { "other" };
                self.pending.push((kind.to_owned(), 0, format!("{}/{}@{}", r.topic, r.partition, r.offset)));
                self.pending.len() - 1
            }
            None => self.pending.iter().position(|(k, _, _)| k == "other").unwrap_or(0),
        };
        self.pending[at].1 += 1;
        self.poll()
    }

    fn poll(&mut self) -> Result<(), Error> {
        if !self.pending.is_empty() && self.since.elapsed() >= self.interval {
            self.summarize();
        }
        Ok(())
    }

    /// Called at every checkpoint: a summary only once it is due (at the
    /// end, [`Drop`] writes what is left).
    fn flush(&mut self) -> Result<(), Error> {
        self.poll()
    }
}

impl Drop for LogDeadLetter {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.summarize();
        }
    }
}

#[cfg(test)]
mod tests {
    // Test code: failing loudly is its job.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `bad` dead letters of `topic` log. Each test names its own
    /// topic and reads only its lines: tests run side by side, and a line
    /// of another test's subscriber must not count here.
    fn logged(level: tracing::Level, interval: Duration, bad: usize, topic: &str) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let mut sink = LogDeadLetter::new(interval);
            let summaries = |out: &Captured| {
                let first = format!("first={topic}/");
                String::from_utf8_lossy(&out.0.lock().unwrap())
                    .lines()
                    .filter(|l| l.contains("more records not processed") && l.contains(&first))
                    .count()
            };
            for i in 0..bad {
                let reason =
                    if i % 3 == 0 { "late: its window had closed (watermark 5)" } else { "malformed JSON: at byte 3" };
                let offset = i64::try_from(i).unwrap();
                let payload = b"{\"card\":\"4111-1111-1111-1111\"}";
                sink.send(&DeadLetter {
                    topic,
                    partition: 0,
                    offset,
                    timestamp_ms: 0,
                    reason,
                    payload: Some(payload),
                    key: None,
                    headers: None,
                    stage: Stage::Decode,
                })
                .unwrap();
                if i % 1_000 == 0 {
                    // A checkpoint: no summary before the interval is up.
                    let before = summaries(&out);
                    sink.flush().unwrap();
                    assert!(interval.is_zero() || summaries(&out) == before);
                }
            }
            // The end: what is pending is summed up.
            drop(sink);
        });
        let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let mine =
            |l: &&str| l.contains(&format!("\"{topic}\"")) || l.contains(&format!("={topic}/")) || !l.contains("topic");
        log.lines().filter(mine).map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn a_flood_of_bad_records_logs_a_bounded_summary_without_payloads() {
        let log = logged(tracing::Level::INFO, Duration::from_secs(3600), 100_000, "flood");
        let lines: Vec<&str> = log.lines().collect();
        // Ten one by one, the note that summaries follow, one per reason.
        assert_eq!(lines.len(), 10 + 1 + 2, "{log}");
        assert!(!log.contains("4111"), "no payload at info level: {log}");
        assert!(log.contains("offset=9 ") && !log.contains("offset=10 "), "{log}");
        let late = lines.iter().find(|l| l.contains("reason=late")).unwrap();
        // 100,000 records, every third late: 33,334 late, 4 of them among the first ten.
        assert!(late.contains("records=33330") && late.contains("first=flood/0@12"), "{late}");
        assert!(lines.iter().any(|l| l.contains("reason=malformed JSON") && l.contains("records=66660")), "{log}");
        assert!(log.len() < 4096, "{} bytes", log.len());
    }

    #[test]
    fn payloads_are_logged_at_debug_level_and_summaries_come_each_interval() {
        let log = logged(tracing::Level::DEBUG, Duration::ZERO, 20, "debug");
        // Which offsets the matching lines name, as a set: what is asserted
        // is what was logged, not how many times a subscriber saw a line.
        let offsets = |with: &str, after: &str| -> std::collections::BTreeSet<i64> {
            log.lines()
                .filter(|l| l.contains(with))
                .filter_map(|l| l.split(after).nth(1)?.split(' ').next()?.parse().ok())
                .collect()
        };
        assert_eq!(offsets("4111", "offset="), (0..20).collect(), "{log}");
        // With a zero interval every record after the tenth is its own summary.
        assert_eq!(offsets("more records not processed", "first=debug/0@"), (10..20).collect(), "{log}");
    }
}
