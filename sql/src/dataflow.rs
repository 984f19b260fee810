//! A query → the stages it needs on its partitioned input.
//!
//! A stateful query whose source is not partitioned by its state key (a
//! `GROUP BY symbol` over a topic keyed by trader, a global aggregate over
//! several partitions) is cut at the state: the first stage applies WHERE
//! and forwards the columns the query reads, keyed by the state key; an
//! exchange puts every record of a key in one partition; the second stage
//! is the query itself, minus the WHERE already applied. When the source is
//! already keyed right (`partitionKey`), there is one stage and no exchange.

use sluice_crds::SourceSpec;
use sluice_plan::{
    Dataflow, EmitMode, OperatorPlan, OutputColumn, Partitioning, PhysExpr, Plan, SqlError, Stage, StageOutput,
};

use crate::plan_query;

/// Plans `sql` for sources of `partitions` partitions.
pub fn plan_dataflow(sql: &str, sources: &[SourceSpec], partitions: i32) -> Result<Dataflow, SqlError> {
    let plan = plan_query(sql, sources)?;
    match plan.check_partitioning(partitions) {
        Ok(()) => Ok(Dataflow::single(plan)),
        Err(misaligned) => split_at_state(plan).ok_or(misaligned),
    }
}

/// The two stages of a query whose state needs an exchange; `None` when
/// the query keeps no keyed state.
fn split_at_state(plan: Plan) -> Option<Dataflow> {
    let keys: Vec<OutputColumn> = match (&plan.operator, &plan.partitioning) {
        // Aggregates are keyed by their group expressions: every row of a
        // group has the same values, so lands in the same partition. No
        // group expression (a global aggregate): no key, one partition.
        // Windows are assigned after the exchange, from the forwarded event
        // time; the exchange carries the watermark (see Engine::advance_watermark).
        (OperatorPlan::Aggregate(a), _) => a
            .group_exprs
            .iter()
            .enumerate()
            .map(|(i, e)| OutputColumn { name: format!("key{i}"), expr: e.clone() })
            .collect(),
        // ROWS frames are keyed by the columns every PARTITION BY shares.
        (OperatorPlan::Rows(_), Partitioning::KeyedBy(columns)) => columns
            .iter()
            .filter_map(|name| plan.source.schema.index_of(name))
            .map(|index| {
                let f = &plan.source.schema.fields[index];
                OutputColumn { name: f.name.clone(), expr: PhysExpr::Column { index, data_type: f.data_type } }
            })
            .collect(),
        _ => return None,
    };
    let forwarded: Vec<OutputColumn> = plan
        .source
        .schema
        .fields
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.used_columns.get(*i).copied().unwrap_or(false))
        .map(|(index, f)| OutputColumn {
            name: f.name.clone(),
            expr: PhysExpr::Column { index, data_type: f.data_type },
        })
        .collect();
    let exchange = Plan {
        source: plan.source.clone(),
        used_columns: plan.used_columns.clone(),
        filter: plan.filter.clone(),
        operator: OperatorPlan::Stateless,
        intermediate: plan.source.schema.clone(),
        having: None,
        outputs: forwarded,
        keys,
        emit: EmitMode::PerRecord,
        partitioning: Partitioning::Any,
    };
    let mut stateful = plan;
    stateful.filter = None;
    // Records on the exchange were validated by the first stage; columns
    // the query does not read are not forwarded at all.
    stateful.source.required = vec![false; stateful.source.required.len()];
    stateful.partitioning = Partitioning::ByExchange;
    Some(Dataflow {
        stages: vec![
            Stage { plan: exchange, output: StageOutput::Exchange },
            Stage { plan: stateful, output: StageOutput::Sink },
        ],
    })
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
    use sluice_plan::{OperatorPlan, Partitioning, StageOutput};

    use super::plan_dataflow;

    fn trades() -> SourceSpec {
        SourceSpec {
            partition_key: vec!["trader".into()],
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table(
                "trades",
                &[
                    ("trader", ColumnType::String, true),
                    ("symbol", ColumnType::String, true),
                    ("qty", ColumnType::Bigint, true),
                    ("ts", ColumnType::Timestamp, true),
                    ("note", ColumnType::String, false),
                ],
            )
        }
    }

    #[test]
    fn a_source_keyed_by_the_state_key_needs_no_exchange() {
        let d = plan_dataflow("SELECT trader, COUNT(*) FROM trades GROUP BY trader", &[trades()], 4).unwrap();
        assert!(!d.has_exchange());
        // One partition holds every group whatever the key.
        let d = plan_dataflow("SELECT symbol, COUNT(*) FROM trades GROUP BY symbol", &[trades()], 1).unwrap();
        assert!(!d.has_exchange());
    }

    #[test]
    fn a_re_keyed_group_by_is_cut_at_its_state() {
        let d = plan_dataflow("SELECT symbol, SUM(qty) AS q FROM trades WHERE qty > 0 GROUP BY symbol", &[trades()], 4)
            .unwrap();
        let [first, second] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        assert_eq!(first.output, StageOutput::Exchange);
        assert!(matches!(first.plan.operator, OperatorPlan::Stateless));
        assert!(first.plan.filter.is_some(), "WHERE runs before the exchange");
        let forwarded: Vec<&str> = first.plan.outputs.iter().map(|o| o.name.as_str()).collect();
        // Only the columns the query reads cross, and the event time, which
        // the watermark is computed from.
        assert_eq!(forwarded, ["symbol", "qty", "ts"]);
        assert_eq!(first.plan.keys.len(), 1, "keyed by the group expression");
        assert_eq!(second.output, StageOutput::Sink);
        assert!(second.plan.filter.is_none(), "WHERE is not applied twice");
        assert!(matches!(second.plan.operator, OperatorPlan::Aggregate(_)));
        assert_eq!(second.plan.partitioning, Partitioning::ByExchange);
        assert!(second.plan.source.required.iter().all(|r| !r));
        assert!(second.plan.check_partitioning(4).is_ok());
    }

    #[test]
    fn a_global_aggregate_over_several_partitions_has_no_key() {
        let d = plan_dataflow("SELECT COUNT(*) AS n FROM trades", &[trades()], 3).unwrap();
        assert!(d.has_exchange());
        assert!(d.stages[0].plan.keys.is_empty(), "every record goes to one partition");
    }

    #[test]
    fn a_windowed_aggregate_is_cut_with_the_event_time_forwarded() {
        let d = plan_dataflow(
            "SELECT symbol, COUNT(*) FROM trades GROUP BY symbol, TUMBLE(ts, INTERVAL '1' MINUTE)",
            &[trades()],
            4,
        )
        .unwrap();
        let [first, second] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        assert!(first.plan.outputs.iter().any(|o| o.name == "ts"));
        assert!(second.plan.is_windowed());
        assert_eq!(second.plan.partitioning, Partitioning::ByExchange);
    }
}
