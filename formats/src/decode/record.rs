//! What the source knows of a record besides its value: the key,
//! timestamp, partition, offset and headers a decoder's metadata columns
//! read (`metadata.rs`).

#[cfg(doc)]
use super::columns::SourceColumns;

/// A record's headers, in the order the record lists them.
pub trait RecordHeaders {
    fn count(&self) -> usize;
    /// The `i`-th header's name and value (`None` for a null value).
    fn header(&self, i: usize) -> Option<(&[u8], Option<&[u8]>)>;
}

/// What the source knows of a record besides its value.
#[derive(Clone, Copy, Default)]
pub struct RecordMeta<'a> {
    pub key: Option<&'a [u8]>,
    pub timestamp_ms: Option<i64>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// When the record was read; set only for a decoder that
    /// [`SourceColumns::reads_processing_time`].
    pub processing_time_ms: Option<i64>,
    /// `None` where the source has no headers (files, datagen) or the job
    /// reads none (they are not parsed then).
    pub headers: Option<&'a dyn RecordHeaders>,
}

impl std::fmt::Debug for RecordMeta<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordMeta")
            .field("key", &self.key)
            .field("timestamp_ms", &self.timestamp_ms)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("processing_time_ms", &self.processing_time_ms)
            .field("headers", &self.headers.map(|h| h.count()))
            .finish()
    }
}
