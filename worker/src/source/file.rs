//! A local JSON-lines file: one partition, one record per line, the line
//! number as offset. Read to the end, then exhausted.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use super::{Deliver, PollEnd, Record, Source};
use crate::Error;

#[derive(Debug)]
pub struct FileSource {
    path: String,
    reader: BufReader<std::fs::File>,
    line: Vec<u8>,
    offset: i64,
    done: bool,
}

impl FileSource {
    pub fn open(path: &str) -> Result<Self, Error> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(format!("open source file {path}"), e))?;
        Ok(Self {
            path: path.to_owned(),
            reader: BufReader::with_capacity(1 << 20, file),
            line: Vec::new(),
            offset: 0,
            done: false,
        })
    }
}

impl Source for FileSource {
    fn poll(&mut self, max: usize, _timeout: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
        let now = crate::clock::now_ms();
        let mut n = 0;
        while n < max && !self.done {
            self.line.clear();
            let read = self
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|e| Error::io(format!("read {}", self.path), e))?;
            if read == 0 {
                self.done = true;
                break;
            }
            let payload = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let payload = payload.strip_suffix(b"\r").unwrap_or(payload);
            let offset = self.offset;
            self.offset += 1;
            if payload.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            n += f(Record { slot: 0, offset, timestamp_ms: now, payload: Some(payload), key: None, headers: None })
                .max(1);
        }
        Ok((n, if self.done { PollEnd::Exhausted } else { PollEnd::Open }))
    }
}
