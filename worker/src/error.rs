//! The worker crate's one error type.
//!
//! Errors are classified where they are created: the user's fault
//! (`Sql`, `Config`, an engine state limit) is reported and not retried; external
//! failures (`Kafka`, `Io`) are retried with backoff by the caller; `Internal`
//! is a bug, reported as one instead of a panic.

use thiserror::Error as ThisError;

use sluice_plan::SqlError;

#[derive(Debug, ThisError)]
pub enum Error {
    /// The query is not valid for its sources (with line:column).
    #[error("{0}")]
    Sql(#[from] SqlError),
    /// A configuration or manifest problem, naming the field.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The engine refused: a state limit, an unreadable checkpoint, or a
    /// bug (classified where it was created, in `sluice-engine`).
    #[error(transparent)]
    Engine(#[from] sluice_engine::Error),
    /// A state checkpoint could not be written or read back.
    #[error("state checkpoint: {0}")]
    Checkpoint(String),
    /// The state of all a core's partitions together outgrew
    /// `spec.engine.stateMemoryLimit`, the state one core may hold (what
    /// the pod's memory is sized from): the core stops before the kernel
    /// kills the pod, and a restart would only restore the same state.
    /// `largest` names the partition engine holding the most of it.
    #[error(
        "the state of core {core} ({partitions} partition engine(s)) is {used} bytes, over \
         spec.engine.stateMemoryLimit ({limit} bytes), the state one core may hold; {largest}: raise it (the \
         worker pods' memory is sized from it), spread the partitions over more cores or workers, or shorten \
         windows"
    )]
    StateLimit { core: usize, partitions: usize, used: usize, limit: usize, largest: String },
    /// The state a core spilled to disk outgrew its share of the worker's
    /// volume (half of it, split across the worker's cores; the other
    /// half is the checkpoint copy's): the core stops before the kubelet
    /// would evict the pod for the volume's size.
    #[error(
        "the state core {core} spilled to disk is {used} bytes, over its share of the worker's volume ({limit} \
         bytes, spec.engine.localState.size): raise the size, or spread the partitions over more cores or workers"
    )]
    SpillLimit { core: usize, used: u64, limit: u64 },
    /// A keyed job's source topic no longer has the partition count its
    /// state was laid out for (partitions were added). Keys hash to other
    /// partitions now, so running on would split each key's state between
    /// engines and emit partial results; the job stops instead, before
    /// consuming anything, and says how to start over.
    #[error(
        "source topic {topic} has {now} partitions but this job's keyed state was laid out for {was} \
         (state topic {state_topic}): records of a key now land on other partitions, so running on \
         would split every key's state between engines. Nothing was consumed. To start over on {now} \
         partitions, rename the job (a new consumer group and state topic) or delete its consumer \
         group and the state topic; it then starts per spec.startFrom"
    )]
    SourcePartitionsChanged { topic: String, now: i32, state_topic: String, was: i32 },
    /// The Schema Registry did not answer, or answered with an error that
    /// is not "no such schema" (which is a dead letter instead): retried
    /// with backoff like a broker that is down.
    #[error("schema registry {url}: {message}")]
    Registry { url: String, message: String },
    /// The copy of a partition's checkpoint on the worker's volume was
    /// taken and did not restore (a damaged volume): the copy is cleared
    /// and the core restarts, reading the state topic.
    #[error(
        "the local copy of the state of partition {partition} did not restore ({message}); it was cleared, and \
         the core restarts from the state topic"
    )]
    LocalCopy { partition: i32, message: String },
    /// Kafka client failure.
    #[error("kafka: {context}: {message}")]
    Kafka { context: String, message: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// One record is larger than its producer's `message.max.bytes`: the
    /// broker would refuse it however often it is sent. A result goes to
    /// the dead-letter output instead ([`crate::sink::KafkaSink`]); met
    /// anywhere else it stops the core, naming the size.
    #[error(
        "kafka: a record of {bytes} bytes for topic {topic} is over the producer's message.max.bytes: raise it (and \
         the topic's max.message.bytes) in the output's properties, or make the rows smaller"
    )]
    RecordTooLarge { topic: String, bytes: usize },
    /// Kafka refused for good: the job's principal may not do what it
    /// needs (a missing ACL), or a topic it writes does not exist and the
    /// broker does not create topics. Retrying cannot help (it would
    /// restart the core forever and, at least once, re-send its results
    /// each time): the core stops, the worker reports why in `/readyz`,
    /// and the operator sets `Degraded`.
    #[error("kafka refused: {0}")]
    Refused(String),
    /// A transactional producer was fenced: a newer producer of this
    /// core's transactional id started (a replacement of this worker,
    /// while this one was paused or cut off), or the broker aborted a
    /// transaction that outlived `transaction.timeout.ms` (a broker outage
    /// longer than that), which librdkafka reports the same way. This
    /// process must not write anything more: retrying would fence the
    /// replacement in turn. The worker process exits; the kubelet restarts
    /// its container, and the new process takes the id over and resumes
    /// from the last commit.
    #[error(
        "fenced: another instance of this worker took over its transactional id, or the broker aborted a \
         transaction that outlived transaction.timeout.ms; this process exits without writing more ({0})"
    )]
    Fenced(String),
    /// A broken internal invariant: a bug in Sluice.
    #[error("internal error (please report): {0}")]
    Internal(String),
}

impl From<sluice_plan::Error> for Error {
    fn from(e: sluice_plan::Error) -> Self {
        Self::Engine(e.into())
    }
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }

    pub fn kafka(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        Self::Kafka { context: context.into(), message: err.to_string() }
    }

    /// Whether retrying could help (the broker, or the schema registry,
    /// may come back).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Kafka { .. }
                | Self::Io { .. }
                | Self::Registry { .. }
                | Self::LocalCopy { .. }
                | Self::Engine(sluice_engine::Error::Spill(_))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    /// A registry that does not answer restarts the core with backoff, as
    /// a broker that is down does; a registry's refusal of a schema is the
    /// job's fault and stops it.
    #[test]
    fn an_unreachable_registry_is_retried_a_refused_schema_is_not() {
        assert!(Error::Registry { url: "http://r".into(), message: "connection refused".into() }.is_transient());
        assert!(Error::kafka("poll", "broker down").is_transient());
        assert!(!Error::Config("the schema registry refused".into()).is_transient());
        assert!(!Error::Refused("no ACL".into()).is_transient());
        assert!(Error::LocalCopy { partition: 0, message: "a page missing".into() }.is_transient(), "read the topic");
    }
}
