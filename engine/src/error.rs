//! The engine's errors, classified where they are created: a state limit is
//! the user's to raise, an unreadable checkpoint is reported with what to
//! do, an internal error is a bug reported instead of a panic. None is
//! transient: the engine does no I/O.

use thiserror::Error as ThisError;

#[derive(Debug, ThisError)]
pub enum Error {
    /// An engine's state outgrew `spec.engine.stateMemoryLimit`.
    #[error(
        "state of partition {partition} is {used} bytes, over the limit of {limit} bytes \
         (spec.engine.stateMemoryLimit); raise the limit or shorten windows"
    )]
    StateLimit { partition: i32, used: usize, limit: usize },
    /// One group's state cannot grow further (a COUNT(DISTINCT) group
    /// past 4 GiB of values): the query's to key more finely.
    #[error("{0}")]
    GroupLimit(String),
    /// A state checkpoint could not be serialised or read back.
    #[error("state checkpoint: {0}")]
    Checkpoint(String),
    /// The store that state spilled to (`crate::SpillStore`) failed: the
    /// core restarts from its checkpoint, as after any failure of its
    /// machine.
    #[error("spilled state: {0}")]
    Spill(String),
    /// A broken internal invariant: a bug in Sluice.
    #[error("internal error (please report): {0}")]
    Internal(String),
}

impl From<sluice_plan::Error> for Error {
    fn from(e: sluice_plan::Error) -> Self {
        match e {
            sluice_plan::Error::Internal(m) => Self::Internal(m),
        }
    }
}
