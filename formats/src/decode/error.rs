//! Why a record could not be decoded: the reason its dead letter carries,
//! whatever the format that refused it.

use std::fmt;

/// Why a record could not be decoded (the dead-letter reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
