//! Running a job: one pinned thread per core, each driving its own
//! partitions end to end (consume → decode → engine → encode → produce →
//! checkpoint), plus process-wide health and shutdown signalling.

mod commit_position;
mod core_loop;
mod direct;
pub mod exchange;
mod health;
mod job;
pub mod local_exchange;
mod local_state;
mod outputs;
mod partition;
mod setup;
mod shared_source;
mod spill_store;
mod state_group;
mod state_pages;
mod state_store;
mod summary;
pub mod topology;

pub use health::{CoreStatus, Health};
pub use job::{JobSummary, RunOptions, run_job};
