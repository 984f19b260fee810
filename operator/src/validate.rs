//! Whether a StreamJob can run, decided with the workers' own SQL front end (`sluice-sql`)
//! before anything is launched.

use sha2::{Digest, Sha256};
use sluice_crds::{StreamJobSpec, reasons};
use sluice_plan::Plan;
use sluice_sql::plan_query;

/// Why a job cannot run: a condition reason and a message for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

/// Checks the spec (as the CRD's rules do) and plans the SQL against the
/// declared schemas. The message of a SQL error carries its line:column.
pub fn validate(spec: &StreamJobSpec) -> Result<Plan, Invalid> {
    spec.validate().map_err(|e| Invalid { reason: reasons::INVALID_SPEC, message: e.to_string() })?;
    plan_query(&spec.sql, &spec.sources).map_err(|e| Invalid { reason: reasons::INVALID_SQL, message: e.to_string() })
}

/// Checks the plan against the source's actual partition count.
pub fn check_partitioning(plan: &Plan, partitions: i32) -> Result<(), Invalid> {
    plan.check_partitioning(partitions)
        .map_err(|e| Invalid { reason: reasons::PARTITION_KEY_MISMATCH, message: e.to_string() })
}

/// Identity of the query: its SQL and the schemas it reads. Engine state is
/// only valid for the query that wrote it, so a changed query gets its own
/// consumer group and state (it starts over from `startFrom`), while other
/// changes (image, resources, tuning, scale) keep both.
pub fn query_identity(spec: &StreamJobSpec) -> String {
    let mut h = Sha256::new();
    h.update(spec.sql.trim().as_bytes());
    for s in &spec.sources {
        h.update(s.name.as_bytes());
        h.update(serde_json::to_vec(&s.schema).unwrap_or_default());
        h.update(serde_json::to_vec(&s.event_time).unwrap_or_default());
        h.update(serde_json::to_vec(&s.partition_key).unwrap_or_default());
    }
    hex8(&h.finalize())
}

pub fn hex8(bytes: &[u8]) -> String {
    bytes.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_crds::StreamJob;

    fn job(sql: &str) -> StreamJob {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples/s2-group-by.yaml"))
                .unwrap();
        let mut j: StreamJob = serde_saphyr::from_str(&text).unwrap();
        j.spec.sql = sql.into();
        j
    }

    #[test]
    fn bad_sql_is_invalid_sql_with_a_position() {
        let e =
            validate(&job("SELECT trader_id,\n  COUNT(*) AS n FROM market_data GROUP BY tradr_id").spec).unwrap_err();
        assert_eq!(e.reason, reasons::INVALID_SQL);
        assert!(e.message.starts_with("line 2, column"), "{}", e.message);
        assert!(e.message.contains("did you mean `trader_id`"), "{}", e.message);
    }

    #[test]
    fn unaligned_partitioning_is_reported() {
        let plan = validate(&job("SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol").spec).unwrap();
        assert_eq!(check_partitioning(&plan, 4).unwrap_err().reason, reasons::PARTITION_KEY_MISMATCH);
        assert!(check_partitioning(&plan, 1).is_ok());
    }

    #[test]
    fn query_identity_ignores_scale_but_not_sql() {
        let a = job("SELECT trader_id FROM market_data");
        let mut b = a.clone();
        b.spec.workers = 7;
        assert_eq!(query_identity(&a.spec), query_identity(&b.spec));
        b.spec.sql = "SELECT symbol FROM market_data".into();
        assert_ne!(query_identity(&a.spec), query_identity(&b.spec));
    }
}
