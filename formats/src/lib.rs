//! Record formats at the edges of the data path: [`decode`] turns payload
//! bytes into the plan's typed column batches (skipping unused fields,
//! naming what is wrong with a bad record), [`encode`] turns result rows
//! into bytes. No Kafka here: the runtime hands payloads in and takes
//! bytes out.

pub mod decode;
pub mod encode;
pub mod registry_columns;
