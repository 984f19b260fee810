use thiserror::Error;

/// Errors of the contract crate: documents that cannot be read or do not
/// describe a runnable job. Every variant names the offending field.
#[derive(Debug, Error)]
pub enum CrdsError {
    #[error("cannot parse {what}: {message}")]
    Parse { what: String, message: String },
    #[error("invalid {field}: {message}")]
    Invalid { field: String, message: String },
    #[error("cannot serialize {what}: {message}")]
    Serialize { what: &'static str, message: String },
}

impl CrdsError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), message: message.into() }
    }
}
