//! An aggregate over a table source (a CDC topic: each record the latest
//! version of its primary key's row, or its deletion), in two stages.
//!
//! Where the table is keyed by its primary key, a changelog stage keeps
//! each key's last row and turns every version into signed rows: the old
//! row taken back, the new one added (`sluice_plan::ChangelogPlan`). Those
//! cross an exchange keyed by the aggregate's groups, where the aggregate
//! adds and takes back (`AggregatePlan::retract`) and deletes a group left
//! with no rows. The retraction of an update goes to the partition and
//! group the old row was counted in — which the new version, or a delete
//! carrying only the key, cannot say. This is Flink's ChangelogNormalize
//! in front of a retracting group aggregate.
//!
//! WHERE is applied in the changelog stage, as a deletion: a version that
//! fails it takes the key's old row back and adds nothing, so a row that
//! stops matching leaves the totals it was counted in.

use sluice_crds::SourceSpec;
use sluice_plan::{
    ChangelogPlan, DataType, Dataflow, EmitMode, OperatorPlan, OutputColumn, Partitioning, PhysExpr, Plan, Scalar,
    SqlError, Stage, StageOutput,
};
use sqlparser::ast::{ObjectNamePart, SetExpr, Spanned, TableFactor};

use crate::diagnostic::Located;
use crate::join::{DELETED, table_source};
use crate::planner::plan_parsed;
use crate::rewrite::ParsedQuery;
use crate::views::aggregates_rows;

/// The signed rows' marker: TRUE on a row taken back.
pub(crate) const RETRACT: &str = "__retract";

/// The stages of an aggregate whose FROM is a table source; `None` for any
/// other query.
pub(crate) fn plan_over_table(parsed: &mut ParsedQuery, sources: &[SourceSpec]) -> Result<Option<Dataflow>, SqlError> {
    let SetExpr::Select(select) = parsed.query.body.as_ref() else { return Ok(None) };
    let [from] = select.from.as_slice() else { return Ok(None) };
    let TableFactor::Table { name, args: None, .. } = &from.relation else { return Ok(None) };
    let Some(ObjectNamePart::Identifier(ident)) = name.0.last() else { return Ok(None) };
    let Some(spec) = sources.iter().find(|s| s.name.eq_ignore_ascii_case(&ident.value) && s.table.is_some()) else {
        return Ok(None);
    };
    if !from.joins.is_empty() || !aggregates_rows(select) {
        return Ok(None);
    }
    let at = select.span();
    let refused = |why: String| {
        SqlError::at_span(
            at,
            format!(
                "`{}` is a table (each record the latest version of its row): an aggregate over it takes a \
                 row's old version back out of its group when a new one comes or the row is deleted; {why}",
                spec.name
            ),
        )
    };
    let table = table_source(spec);
    let read: Vec<SourceSpec> =
        sources.iter().map(|s| if std::ptr::eq(s, spec) { table.clone() } else { s.clone() }).collect();
    let mut plan = plan_parsed(parsed, &read)?;
    let OperatorPlan::Aggregate(aggregate) = &mut plan.operator else {
        return Err(refused("only GROUP BY (with its aggregates and HAVING) is supported over a table".into()));
    };
    if aggregate.window.is_some() {
        return Err(refused(
            "a time window over a table is not supported (a row's versions have no event time to window by); \
             window the stream the table changes with instead"
                .into(),
        ));
    }
    if let Some(a) = aggregate.aggregates.iter().find(|a| !a.func.retracts() || a.distinct) {
        return Err(refused(format!(
            "{}{} cannot take a value back (COUNT, SUM and AVG can)",
            a.func.name(),
            if a.distinct { " DISTINCT" } else { "" }
        )));
    }
    let groups = aggregate.group_exprs.len();
    let fields = &plan.source.schema.fields;
    let column = |name: &str| {
        plan.source.schema.index_of(name).map(|index| PhysExpr::Column { index, data_type: fields[index].data_type })
    };
    let primary_key = spec.table.as_ref().map(|t| t.primary_key.clone()).unwrap_or_default();
    let key = primary_key.iter().map(|k| column(k)).collect::<Option<Vec<_>>>();
    let (Some(key), Some(deleted_column)) = (key, column(DELETED)) else {
        return Err(SqlError::unpositioned("internal: a table source without its key or deletion marker"));
    };
    let no = PhysExpr::Literal { value: Scalar::Boolean(false), data_type: DataType::Boolean };
    let coalesce = |e: PhysExpr| PhysExpr::Coalesce { args: vec![e, no.clone()], data_type: DataType::Boolean };
    let mut deleted = coalesce(deleted_column.clone());
    if let Some(filter) = plan.filter.take() {
        deleted = PhysExpr::Or(Box::new(deleted), Box::new(PhysExpr::Not(Box::new(coalesce(filter)))));
    }
    let marker = deleted_column.as_column().unwrap_or(usize::MAX);
    // What each key's last row keeps, and the exchange carries: the
    // columns the aggregate reads (WHERE is the changelog stage's).
    let mut kept = Vec::new();
    for e in reads_of(&plan) {
        e.columns(&mut kept);
    }
    kept.sort_unstable();
    kept.dedup();
    kept.retain(|&c| c != marker);
    let retract = fields.len();
    let mut intermediate = plan.source.schema.clone();
    intermediate.push(RETRACT, DataType::Boolean);
    let mut outputs: Vec<OutputColumn> = kept
        .iter()
        .map(|&index| OutputColumn {
            name: fields[index].name.clone(),
            expr: PhysExpr::Column { index, data_type: fields[index].data_type },
        })
        .collect();
    outputs.push(OutputColumn {
        name: RETRACT.into(),
        expr: PhysExpr::Column { index: retract, data_type: DataType::Boolean },
    });
    let keys = reads_of(&plan)[..groups]
        .iter()
        .enumerate()
        .map(|(i, e)| OutputColumn { name: format!("key{i}"), expr: e.clone() })
        .collect();
    let mut used = plan.used_columns.clone();
    for k in &key {
        if let Some(c) = k.as_column() {
            used[c] = true;
        }
    }
    used[marker] = true;
    let changelog = Plan {
        unnest: None,
        source: plan.source.clone(),
        used_columns: used,
        filter: None,
        operator: OperatorPlan::Changelog(ChangelogPlan { key, deleted, kept: kept.clone() }),
        intermediate,
        having: None,
        outputs,
        keys,
        emit: EmitMode::Changes,
        partitioning: Partitioning::KeyedBy(primary_key),
        shared: Vec::new(),
    };
    // The aggregate, over the exchange: the kept columns and the marker.
    let mut aggregating = plan;
    aggregating.source.schema.push(RETRACT, DataType::Boolean);
    if !aggregating.source.origins.is_empty() {
        aggregating.source.origins.push(sluice_plan::ColumnOrigin::Field(vec![RETRACT.into()]));
    }
    aggregating.source.required = vec![false; retract + 1];
    aggregating.source.event_time = None;
    aggregating.used_columns = (0..=retract).map(|i| i == retract || kept.contains(&i)).collect();
    aggregating.partitioning = Partitioning::ByExchange;
    if let OperatorPlan::Aggregate(a) = &mut aggregating.operator {
        a.retract = Some(PhysExpr::Column { index: retract, data_type: DataType::Boolean });
    }
    Ok(Some(Dataflow {
        stages: vec![
            Stage { plan: changelog, output: StageOutput::Exchange },
            Stage { plan: aggregating, output: StageOutput::Sink },
        ],
        branches: Vec::new(),
    }))
}

/// The expressions of an aggregate plan that read its input rows: the
/// groups and the aggregates' arguments.
fn reads_of(plan: &Plan) -> Vec<PhysExpr> {
    let OperatorPlan::Aggregate(a) = &plan.operator else { return Vec::new() };
    a.group_exprs.iter().cloned().chain(a.aggregates.iter().filter_map(|c| c.arg.clone())).collect()
}
