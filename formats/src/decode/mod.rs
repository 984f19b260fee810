//! Record bytes → columns.

mod flat_json;
mod json;

pub use json::{DecodeError, JsonDecoder};
