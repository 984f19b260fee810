//! Local outputs for `sluice-worker run`: JSON lines on stdout or in a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DeadLetter, DeadLetterSink, Sink};
use crate::Error;
use sluice_formats::encode::EncodedRows;

/// One JSON object per line, to stdout or a file (appended). Each batch is
/// written with a single `write` (under the stdout lock, or to an O_APPEND
/// file), so lines of several cores never interleave.
#[derive(Debug)]
pub struct LineSink {
    file: Option<File>,
    what: String,
    buf: Vec<u8>,
    /// The rows left to print, shared by the cores (a preview's
    /// `--limit`).
    budget: Option<Arc<RowBudget>>,
}

/// Lines a sink gathers before a write: results written mid-batch come
/// 32 MiB at a time, and a copy of each whole was as much memory again.
const WRITE_BYTES: usize = 1 << 20;

impl LineSink {
    /// Writes the lines gathered.
    fn write_buf(&mut self) -> Result<(), Error> {
        let written = match &mut self.file {
            Some(f) => f.write_all(&self.buf),
            None => std::io::stdout().lock().write_all(&self.buf),
        };
        self.buf.clear();
        written.map_err(|e| Error::io(format!("write {}", self.what), e))
    }

    pub fn stdout() -> Self {
        Self { file: None, what: "stdout".into(), buf: Vec::new(), budget: None }
    }

    /// Standard output, up to the rows `budget` has left.
    pub fn stdout_within(budget: Arc<RowBudget>) -> Self {
        Self { budget: Some(budget), ..Self::stdout() }
    }

    pub fn file(path: &str) -> Result<Self, Error> {
        Ok(Self { file: Some(open_append(path)?), what: path.to_owned(), buf: Vec::new(), budget: None })
    }
}

/// How many more rows the cores of a preview may print together; the one
/// that prints the last calls `spent` (which asks the job to stop).
pub struct RowBudget {
    left: AtomicU64,
    spent: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for RowBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowBudget").field("left", &self.left.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl RowBudget {
    pub fn new(limit: u64, spent: impl Fn() + Send + Sync + 'static) -> Self {
        Self { left: AtomicU64::new(limit), spent: Box::new(spent) }
    }

    /// Takes up to `wanted` rows from the budget; how many were granted.
    pub fn take(&self, wanted: u64) -> u64 {
        let mut left = self.left.load(Ordering::Acquire);
        loop {
            let granted = left.min(wanted);
            if granted == 0 {
                return 0;
            }
            match self.left.compare_exchange(left, left - granted, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if left == granted {
                        (self.spent)();
                    }
                    return granted;
                }
                Err(now) => left = now,
            }
        }
    }
}

fn open_append(path: &str) -> Result<File, Error> {
    if let Some(parent) = std::path::Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
    }
    OpenOptions::new().create(true).append(true).open(path).map_err(|e| Error::io(format!("open {path}"), e))
}

impl Sink for LineSink {
    fn send(&mut self, rows: &EncodedRows, _timestamps: &[i64], _: &mut dyn DeadLetterSink) -> Result<u64, Error> {
        self.buf.clear();
        let count = match &self.budget {
            Some(budget) => usize::try_from(budget.take(rows.len() as u64)).unwrap_or(usize::MAX),
            None => rows.len(),
        };
        for i in 0..count {
            self.buf.extend_from_slice(rows.value(i));
            self.buf.push(b'\n');
            if self.buf.len() >= WRITE_BYTES {
                self.write_buf()?;
            }
        }
        self.write_buf()?;
        if self.file.is_none() {
            std::io::stdout().lock().flush().map_err(|e| Error::io(format!("write {}", self.what), e))?;
        }
        Ok(0)
    }

    fn poll(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        match &mut self.file {
            Some(f) => f.flush().map_err(|e| Error::io(format!("flush {}", self.what), e)),
            None => Ok(()),
        }
    }
}

/// Dead letters as JSON lines in a file, one `write` per line (O_APPEND).
#[derive(Debug)]
pub struct FileDeadLetter {
    file: File,
    path: String,
    line: Vec<u8>,
}

impl FileDeadLetter {
    pub fn open(path: &str) -> Result<Self, Error> {
        Ok(Self { file: open_append(path)?, path: path.to_owned(), line: Vec::new() })
    }
}

impl DeadLetterSink for FileDeadLetter {
    fn send(&mut self, r: &DeadLetter<'_>) -> Result<(), Error> {
        self.line.clear();
        r.to_json_line(&mut self.line);
        self.file.write_all(&self.line).map_err(|e| Error::io(format!("write {}", self.path), e))
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.file.flush().map_err(|e| Error::io(format!("flush {}", self.path), e))
    }
}

#[cfg(test)]
mod tests {
    use super::RowBudget;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A file sink writes its lines as they come, a MiB at a time: every
    /// line once and in order, and no copy of the whole as large as what
    /// it was given (32 MiB of results written mid-batch).
    #[test]
    fn a_file_sink_writes_every_line_in_order_without_a_copy_of_the_whole() {
        use super::{LineSink, WRITE_BYTES};
        use crate::sink::{LogDeadLetter, Sink};
        use sluice_formats::encode::EncodedRows;

        let path = std::env::temp_dir().join(format!("sluice-line-sink-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut sink = LineSink::file(path.to_str().unwrap()).unwrap();
        let mut rows = EncodedRows::default();
        for i in 0..100_000 {
            rows.values.extend_from_slice(format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(80)).as_bytes());
            rows.value_ends.push(rows.values.len());
        }
        let mut dead = LogDeadLetter::new(std::time::Duration::from_secs(60));
        assert_eq!(sink.send(&rows, &[], &mut dead).unwrap(), 0);
        assert!(WRITE_BYTES < rows.values.len() / 4);
        assert!(
            sink.buf.capacity() < rows.values.len() / 2,
            "{} bytes held for {}",
            sink.buf.capacity(),
            rows.values.len()
        );
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100_000);
        assert!(lines.iter().enumerate().all(|(i, l)| l.starts_with(&format!("{{\"n\":{i},"))));
    }

    /// Cores share a preview's budget: together they get exactly the
    /// limit, and `spent` is called once, by the one that takes the last row.
    #[test]
    fn a_row_budget_grants_exactly_its_limit_across_threads_and_says_so_once() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let budget = Arc::new(RowBudget::new(1_000, move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = Arc::clone(&budget);
                std::thread::spawn(move || (0..400).map(|_| budget.take(3)).sum::<u64>())
            })
            .collect();
        let granted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 1_000);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert_eq!(budget.take(5), 0);
    }
}
