//! Record bytes → columns.

mod binary;
mod flat_json;
mod json;

pub use binary::{BinaryDecoder, RowDecoder};
pub use json::{DecodeError, JsonDecoder};
