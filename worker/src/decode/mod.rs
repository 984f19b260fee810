//! Record bytes → columns.

mod json;

pub use json::{DecodeError, JsonDecoder};
