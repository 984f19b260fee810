//! Errors of the plan IR: a problem with a query (what and where), and an
//! evaluation error, which is always a bug (the planner types every
//! expression, so a kernel meeting the wrong column type is not the user's
//! fault).

use std::fmt;

/// A problem with a query: what is wrong and where (1-based line and column
/// of the user's original SQL text; 0 when no position applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

impl std::error::Error for SqlError {}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}, column {}: {}", self.line, self.column, self.message)
        }
    }
}

impl SqlError {
    pub fn unpositioned(message: impl Into<String>) -> Self {
        Self { line: 0, column: 0, message: message.into() }
    }
}

/// A broken invariant while evaluating a plan: a bug in Sluice, reported
/// as an error instead of a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    Internal(String),
}

impl std::error::Error for Error {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Internal(m) => write!(f, "internal error (please report): {m}"),
        }
    }
}
