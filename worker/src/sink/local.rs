//! Local outputs for `sluice-worker run`: JSON lines on stdout or in a file.

use std::fs::{File, OpenOptions};
use std::io::Write;

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
}

impl LineSink {
    pub fn stdout() -> Self {
        Self { file: None, what: "stdout".into(), buf: Vec::new() }
    }

    pub fn file(path: &str) -> Result<Self, Error> {
        Ok(Self { file: Some(open_append(path)?), what: path.to_owned(), buf: Vec::new() })
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
        for i in 0..rows.len() {
            self.buf.extend_from_slice(rows.value(i));
            self.buf.push(b'\n');
        }
        let written = match &mut self.file {
            Some(f) => f.write_all(&self.buf),
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(&self.buf).and_then(|()| out.flush())
            }
        };
        written.map(|()| 0).map_err(|e| Error::io(format!("write {}", self.what), e))
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
