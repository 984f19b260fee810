//! The Sluice operator. Reconciliation of StreamJobs lands with its issue.
