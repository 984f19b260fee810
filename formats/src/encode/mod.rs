//! Result rows → record bytes.

mod json;

pub use json::{EncodedRows, JsonEncoder, write_float, write_str};
