//! librdkafka's client-wide errors as log lines.
//!
//! rust-rdkafka's default context logs every error librdkafka reports on
//! a client's main queue at ERROR, the end of a partition included — which
//! a reader with `enable.partition.eof` (a state restore) reaches on every
//! run. The end of a partition is how such a read finishes, not a fault:
//! it is logged at debug; anything else keeps its ERROR line.

use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// Whether a client error only says a partition was read to its end.
pub fn is_end_of_partition(error: &KafkaError) -> bool {
    matches!(error, KafkaError::PartitionEOF(_)) || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
}

/// Logs a client error at the level it deserves.
pub fn log_client_error(error: &KafkaError, reason: &str) {
    if is_end_of_partition(error) {
        tracing::debug!(%error, reason, "librdkafka: end of partition");
    } else {
        tracing::error!(%error, reason, "librdkafka");
    }
}

/// A consumer's context that logs as [`log_client_error`] does and does
/// nothing else (rust-rdkafka's default, quieter).
#[derive(Debug, Default, Clone, Copy)]
pub struct QuietContext;

impl ClientContext for QuietContext {
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl ConsumerContext for QuietContext {}

#[cfg(test)]
mod tests {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    use super::is_end_of_partition;

    #[test]
    fn the_end_of_a_partition_is_not_an_error_and_anything_else_is() {
        assert!(is_end_of_partition(&KafkaError::PartitionEOF(3)));
        assert!(is_end_of_partition(&KafkaError::Global(RDKafkaErrorCode::PartitionEOF)));
        assert!(!is_end_of_partition(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure)));
        assert!(!is_end_of_partition(&KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition)));
    }
}
