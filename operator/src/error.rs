use thiserror::Error;

/// Errors of the operator, classified where they arise: the user's fault is
/// reported in status and not retried quickly; the cluster's or the
/// broker's is retried with backoff.
#[derive(Debug, Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("kafka: {0}")]
    Kafka(String),
    #[error("{0}")]
    Serialize(String),
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// Deletion waits for the workers to drain (not a failure; retried).
    #[error("{0}")]
    Draining(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Every value [`Error::reason`] can take (so each series exists from the start).
pub const REASONS: [&str; 7] = ["ApiError", "KubeClient", "Kafka", "Serialize", "Finalizer", "Draining", "Internal"];

impl Error {
    /// A short, stable label for the errors metric.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(_)) => "ApiError",
            Self::Kube(_) => "KubeClient",
            Self::Kafka(_) => "Kafka",
            Self::Serialize(_) => "Serialize",
            Self::Finalizer(_) => "Finalizer",
            Self::Draining(_) => "Draining",
            Self::Internal(_) => "Internal",
        }
    }
}
