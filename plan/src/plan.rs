//! A query plan: what one engine instance executes for each batch.
//!
//! Every plan has the same shape:
//!
//! ```text
//! input batch ─▶ filter (WHERE) ─▶ operator ─▶ intermediate rows ─▶ HAVING ─▶ projection ─▶ output
//! ```
//!
//! The operator is stateless (rows pass through), an aggregation (groups,
//! optionally per time window), or a ROWS window (analytic functions over the
//! last N rows per partition key). Its output — the "intermediate" schema — is
//! what HAVING and the SELECT list are compiled against, so one projection
//! routine serves every kind of query.

use serde::{Deserialize, Serialize};

use super::{DataType, PhysExpr, Schema, SourceSchema};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub source: SourceSchema,
    /// Source columns the plan reads; the decoder skips the others.
    pub used_columns: Vec<bool>,
    /// WHERE, over the source schema.
    pub filter: Option<PhysExpr>,
    pub operator: OperatorPlan,
    /// What the operator produces, and HAVING / outputs / keys read.
    pub intermediate: Schema,
    pub having: Option<PhysExpr>,
    /// The SELECT list.
    pub outputs: Vec<OutputColumn>,
    /// Columns of the sink record key (the GROUP BY key and window start).
    pub keys: Vec<OutputColumn>,
    pub emit: EmitMode,
    /// How the source must be partitioned for per-partition engines to give
    /// complete results.
    pub partitioning: Partitioning,
    /// Subexpressions the filter, outputs and keys share, evaluated once
    /// per batch before the filter: the `i`-th is column
    /// `source.schema.fields.len() + i` (`cse.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<PhysExpr>,
    /// `CROSS JOIN UNNEST(…)`: each source row expanded into one row per
    /// element, before the filter; its columns follow the source's (and
    /// [`Plan::shared`] follows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unnest: Option<UnnestPlan>,
}

/// `FROM s CROSS JOIN UNNEST(s.arr) [WITH ORDINALITY] AS t(…)`, or `LEFT
/// JOIN UNNEST(…) ON TRUE`: a row per element of the array (or entry of
/// the map), with the source row's columns, then the element's — a row
/// element's fields (a map's key and value) as columns of their own, any
/// other element as one column — then its 1-based position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnnestPlan {
    /// The array or map, over the source's columns.
    pub array: PhysExpr,
    /// LEFT: a row whose array is empty or NULL is kept once, its element
    /// columns NULL.
    pub left: bool,
    /// A row element (or a map entry) is split into its fields.
    pub split_fields: bool,
    /// WITH ORDINALITY: a BIGINT column of the element's position.
    pub ordinality: bool,
    /// The names of the columns it adds, as the query gives them.
    pub names: Vec<String>,
    /// Per source column: whether the rows carry it (the rest of the query
    /// reads it); the others are NULL placeholders in the unnested rows.
    pub keep: Vec<bool>,
}

impl UnnestPlan {
    /// The types of the columns the unnest adds.
    pub fn columns(&self) -> Vec<DataType> {
        let element = self.array.data_type().element().unwrap_or(DataType::Null);
        let mut out: Vec<DataType> =
            if self.split_fields { element.fields().iter().map(|(_, t)| *t).collect() } else { vec![element] };
        if self.ordinality {
            out.push(DataType::Bigint);
        }
        out
    }
}

impl Plan {
    /// How many columns a batch has before the shared subexpressions: the
    /// source's, and the unnest's after them.
    pub fn input_width(&self) -> usize {
        self.source.schema.fields.len() + self.unnest.as_ref().map_or(0, |u| u.columns().len())
    }

    /// The columns a batch has before the shared subexpressions, named:
    /// the source's, then the unnest's.
    pub fn input_schema(&self) -> Schema {
        let mut schema = self.source.schema.clone();
        if let Some(u) = &self.unnest {
            for (name, t) in u.names.iter().zip(u.columns()) {
                schema.push(name.clone(), t);
            }
        }
        schema
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputColumn {
    pub name: String,
    pub expr: PhysExpr,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum OperatorPlan {
    /// Filter and project only; one output row per passing input row.
    Stateless,
    Aggregate(AggregatePlan),
    Rows(RowsPlan),
    TopN(TopNPlan),
    /// The final phase of a global aggregate computed in two phases.
    Merge(MergePlan),
    /// A stream–stream interval join of two sources.
    Join(JoinPlan),
    /// A stream joined with a table (the latest or the event-time version
    /// of the row with the key). Appended last: variant numbers are part of
    /// the plan fingerprint.
    TableJoin(TableJoinPlan),
    /// A table's changes as signed rows, for an aggregate over the table.
    Changelog(ChangelogPlan),
}

/// A table source (each record the latest version of the row with its
/// primary key, or its deletion) turned into signed rows: for each new
/// version, the row's previous version taken back (`__retract` TRUE) and
/// the new one added. This is what an aggregate over a table needs (Flink's
/// ChangelogNormalize): an update or delete must take the old row out of
/// the group it was counted in, and the old row — not the new one, and not
/// a delete's key alone — says which group that was and on which
/// partition it lives. The stage runs where the table is keyed by its
/// primary key and keeps each key's last row; its rows then cross an
/// exchange keyed by the aggregate's groups. The intermediate schema is
/// the source schema plus `__retract` (BOOLEAN) last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangelogPlan {
    /// The table's primary key.
    pub key: Vec<PhysExpr>,
    /// TRUE on a row that deletes its key: the table's deletion marker,
    /// or a version WHERE rejects (it leaves the query's input as a delete
    /// would).
    pub deleted: PhysExpr,
    /// The source columns the query reads: each key's last row keeps these
    /// (the others are emitted NULL).
    pub kept: Vec<usize>,
}

/// A stream–table join: `FROM s [LEFT] JOIN t [FOR SYSTEM_TIME AS OF
/// s.ts] ON s.x = t.id`, where `t` is a table source (each record the
/// latest version of the row with its primary key, or its deletion). Both
/// sides' rows reach the join's stage through one exchange keyed by the
/// key — the table's primary key, the stream's side of the equality — in
/// the layout of [`JoinPlan`], plus a BOOLEAN saying a table row deletes
/// its key. The stream is the left side, the table the right.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableJoinPlan {
    /// INNER or LEFT.
    pub kind: JoinKind,
    pub left: (usize, usize),
    pub right: (usize, usize),
    /// The BOOLEAN source column that is true on table rows.
    pub side: usize,
    /// The source column holding each row's event time.
    pub time: usize,
    /// The BOOLEAN source column that is true on a table row that deletes
    /// its key.
    pub deleted: usize,
    /// `left_keys[i] = right_keys[i]`; the right keys are the table's
    /// primary key.
    pub left_keys: Vec<PhysExpr>,
    pub right_keys: Vec<PhysExpr>,
    /// The rest of ON, over a joined row.
    pub residual: Option<PhysExpr>,
    pub version: TableVersion,
}

/// Which version of a table row a stream row joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableVersion {
    /// The version current when the stream row is processed (ksqlDB's
    /// stream–table join): rows are joined as they arrive.
    Latest,
    /// `FOR SYSTEM_TIME AS OF s.ts`: the version valid at the stream row's
    /// event time (Flink's event-time temporal join): stream rows wait
    /// until the watermark passes them.
    AsOfEventTime,
}

/// A stream–stream interval join: `a JOIN b ON a.k = b.k AND b.ts BETWEEN
/// a.ts - INTERVAL … AND a.ts + INTERVAL …`. Both sides' rows reach the
/// join's stage through one exchange, keyed by the join key, in one layout
/// (the source schema): the left side's columns, the right side's, a
/// BOOLEAN that is true on right rows and the row's event time (its side's).
/// A row fills its own side's columns; the join fills both. The
/// intermediate schema is the source schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JoinPlan {
    pub kind: JoinKind,
    /// Source columns of the left side's row (`start..end`).
    pub left: (usize, usize),
    /// Source columns of the right side's row.
    pub right: (usize, usize),
    /// The BOOLEAN source column that is true on right rows.
    pub side: usize,
    /// The source column holding each row's event time.
    pub time: usize,
    /// `left_keys[i] = right_keys[i]`, over the source schema.
    pub left_keys: Vec<PhysExpr>,
    pub right_keys: Vec<PhysExpr>,
    /// The right row's event time minus the left row's lies in
    /// `lower..=upper` (milliseconds).
    pub lower: i64,
    pub upper: i64,
    /// A TIMESTAMP source column of the left side that the right row's
    /// event time may not pass (`b.ts BETWEEN a.ts AND a.expires`; then
    /// `upper` is unbounded and the comparison is in `residual`): a left
    /// row is let go once the watermark passes its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<usize>,
    /// The rest of ON, over a joined row.
    pub residual: Option<PhysExpr>,
}

impl JoinPlan {
    /// A regular join (no time bound, INNER): every row is kept for good,
    /// and any two rows of a key join, whenever each arrives.
    pub const UNBOUNDED: (i64, i64) = (i64::MIN, i64::MAX);

    /// Whether this is a regular join: no time bound, rows kept for good.
    pub fn unbounded(&self) -> bool {
        (self.lower, self.upper) == Self::UNBOUNDED
    }
}

/// Which unmatched rows a join emits, NULL-extended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
}

impl JoinKind {
    /// Whether unmatched rows of the side (`right`: the right side) are emitted.
    pub fn keeps_unmatched(self, right: bool) -> bool {
        match self {
            Self::Inner => false,
            Self::Left => !right,
            Self::Right => right,
            Self::Full => true,
        }
    }
}

/// The final phase of a two-phase aggregate. Each upstream partition
/// aggregates its own rows (the partial phase, an ordinary
/// [`AggregatePlan`]) and sends its running partials — per group and
/// window — through an exchange to the partition of the group, which keeps
/// the latest partial of every part and combines them. A part is an
/// upstream partition, or with `parts` an upstream partition and the
/// values of those columns (the family of distinct values a partial
/// counts, see `sluice_sql`'s cut). A newer partial replaces the older one
/// of its part rather than adding to it, so a partial sent again after a
/// crash is harmless. The intermediate columns are those the one-phase
/// aggregate would have: the group keys, `window_start` and `window_end`
/// when windowed, then the aggregates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MergePlan {
    /// Source columns of each partial's window start and end (windowed).
    pub window: Option<(usize, usize)>,
    pub calls: Vec<MergeCall>,
    /// Source columns of the group keys (none for a global aggregate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<usize>,
    /// Source columns that, with the upstream partition, name the part a
    /// partial accounts for (none: the upstream partition alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<usize>,
}

/// One aggregate of the query, combined from its partials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MergeCall {
    /// The query's aggregate: COUNT(*) and COUNT add partial counts, SUM
    /// adds partial sums, MIN and MAX take the least and greatest partial,
    /// AVG divides the sum of partial sums by the sum of partial counts.
    pub func: AggFunc,
    /// Source columns of its partials (two for AVG: sum, then count).
    pub partials: Vec<usize>,
    pub data_type: DataType,
}

impl AggFunc {
    /// Whether a global aggregate of this function can be computed in two
    /// phases (see [`MergePlan`]); variances and DISTINCT cannot be
    /// combined from the partials Sluice keeps.
    pub fn merges(self) -> bool {
        matches!(self, Self::CountStar | Self::Count | Self::Sum | Self::Min | Self::Max | Self::Avg)
    }

    /// Whether a value folded in can be taken back out (an aggregate over
    /// an updating input, see [`AggregatePlan::upsert_key`]): MIN and MAX
    /// would have to keep every value to find the next extreme.
    pub fn retracts(self) -> bool {
        matches!(self, Self::CountStar | Self::Count | Self::Sum | Self::Avg | Self::ArrayAgg | Self::MapAgg)
    }
}

/// GROUP BY (with an optional time window). Intermediate columns are the
/// group expressions, then `window_start`, `window_end`, then the aggregates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregatePlan {
    pub group_exprs: Vec<PhysExpr>,
    pub aggregates: Vec<AggregateCall>,
    pub window: Option<TimeWindow>,
    /// A tumbling window of this zone's wall clock (`TUMBLE(ts AT TIME
    /// ZONE 'Europe/Paris', INTERVAL '1' DAY)`): its bounds are the
    /// instants the zone's clock reads them, so a day is 23 or 25 hours
    /// on a clock change. `None`: UTC, every window `size_ms` long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_zone: Option<String>,
    /// When not empty, the input is a changelog keyed by these (the rows
    /// of an updating aggregate, keyed by its group): a row replaces the
    /// last one of its key, whose contribution is taken back first. Only
    /// aggregates that can take a value back (`AggFunc::retracts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upsert_key: Vec<PhysExpr>,
    /// When set, the input is signed rows ([`ChangelogPlan`]): a row where
    /// this BOOLEAN is TRUE takes its values back out of its group instead
    /// of adding them, and a group left with no rows is deleted. Only
    /// aggregates that can take a value back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retract: Option<PhysExpr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggFunc {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
    StddevSamp,
    StddevPop,
    VarSamp,
    VarPop,
    /// Each group's values as an array (NULLs kept), in the order of the
    /// call's ORDER BY ([`AggregateCall::order`]), else as they came. Its
    /// argument is `ROW(x, order keys…)`.
    ArrayAgg,
    /// Each group's `(key, value)` pairs as a map (a NULL key skipped, a
    /// key seen twice keeping its latest value). Its argument is
    /// `ROW(key, value)`.
    MapAgg,
}

impl AggFunc {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "COUNT" => Self::Count,
            "SUM" => Self::Sum,
            "MIN" => Self::Min,
            "MAX" => Self::Max,
            "AVG" => Self::Avg,
            "STDDEV" | "STDDEV_SAMP" => Self::StddevSamp,
            "STDDEV_POP" => Self::StddevPop,
            "VARIANCE" | "VAR_SAMP" => Self::VarSamp,
            "VAR_POP" => Self::VarPop,
            "ARRAY_AGG" => Self::ArrayAgg,
            "MAP_AGG" => Self::MapAgg,
            _ => return None,
        })
    }

    /// The function's SQL name (COUNT(*) is COUNT).
    pub fn name(self) -> &'static str {
        match self {
            Self::CountStar | Self::Count => "COUNT",
            Self::Sum => "SUM",
            Self::Min => "MIN",
            Self::Max => "MAX",
            Self::Avg => "AVG",
            Self::StddevSamp => "STDDEV_SAMP",
            Self::StddevPop => "STDDEV_POP",
            Self::VarSamp => "VAR_SAMP",
            Self::VarPop => "VAR_POP",
            Self::ArrayAgg => "ARRAY_AGG",
            Self::MapAgg => "MAP_AGG",
        }
    }

    /// Result type for an argument of type `arg`.
    pub fn result_type(self, arg: DataType) -> DataType {
        match self {
            Self::CountStar | Self::Count => DataType::Bigint,
            Self::Sum if arg == DataType::Bigint => DataType::Bigint,
            // Every digit the sum can take in the argument's storage (18 for
            // a decimal of up to 18 digits, 38 beyond), at its scale.
            Self::Sum if matches!(arg, DataType::Decimal(..)) => {
                DataType::Decimal(DataType::decimal_cap(&[arg]), arg.decimal_parts().1)
            }
            Self::Min | Self::Max => arg,
            // The argument is a row: the value (and its order keys), or
            // the key and the value.
            Self::ArrayAgg => {
                DataType::array(arg.fields().first().map_or(DataType::Null, |f| f.1)).unwrap_or(DataType::Null)
            }
            Self::MapAgg => match arg.fields() {
                [k, v] => DataType::map(k.1, v.1).unwrap_or(DataType::Null),
                _ => DataType::Null,
            },
            _ => DataType::Double,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregateCall {
    pub func: AggFunc,
    /// None for COUNT(*).
    pub arg: Option<PhysExpr>,
    pub distinct: bool,
    pub data_type: DataType,
    /// ARRAY_AGG's `ORDER BY` inside the call: per order key (fields 2…
    /// of its argument row), whether it is descending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<bool>,
}

/// Event-time windows. The time column is always the source's eventTime
/// column, whose watermark closes the windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeWindow {
    Tumbling { size_ms: i64 },
    Hopping { size_ms: i64, advance_ms: i64 },
    Session { gap_ms: i64 },
}

/// Analytic functions over ROWS frames. Intermediate columns are the source
/// columns followed by one column per function, in `functions` order across specs.
/// Top-N per key (`ROW_NUMBER() OVER (PARTITION BY … ORDER BY …)` filtered
/// by `rn <= N`), and deduplication (N = 1). The intermediate columns are
/// the source's, then the row number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopNPlan {
    pub partition_by: Vec<PhysExpr>,
    pub order_by: PhysExpr,
    pub descending: bool,
    /// Rows kept per key.
    pub limit: u64,
    /// The further ORDER BY keys, each deciding between rows the keys
    /// before it tie on (`ORDER BY price DESC, ts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then_by: Vec<SortKey>,
}

/// One ORDER BY key after the first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SortKey {
    pub expr: PhysExpr,
    pub descending: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsPlan {
    pub specs: Vec<RowsSpec>,
    /// When not empty, the input is a changelog keyed by these (the rows
    /// of a top-1, keyed by its PARTITION BY: Nexmark q6): a row replaces
    /// the last one of its key, every frame it was in is computed again,
    /// and the results are upserts keyed by the same key. One spec then,
    /// with an ORDER BY, `n PRECEDING`, and a PARTITION BY within the key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upsert_key: Vec<PhysExpr>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsSpec {
    pub partition_by: Vec<PhysExpr>,
    /// The window's ORDER BY column. Over a stream, rows are taken in
    /// arrival order (the column is the event time), so it is kept only
    /// for a changelog input ([`RowsPlan::upsert_key`]), whose replaced
    /// rows move to their new place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_by: Option<PhysExpr>,
    /// Rows before the current one in the frame; None = UNBOUNDED PRECEDING.
    pub preceding: Option<u64>,
    pub functions: Vec<RowsFunction>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsFunction {
    pub kind: RowsFunctionKind,
    pub arg: Option<PhysExpr>,
    pub data_type: DataType,
    /// Index of this function's column in the intermediate schema.
    pub output: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowsFunctionKind {
    Aggregate(AggFunc),
    RowNumber,
}

/// When results are emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EmitMode {
    /// One output per input row (filters, projections, ROWS windows).
    PerRecord,
    /// Updated aggregate rows as input arrives (coalesced per batch or per
    /// record, as the engine is configured).
    Changes,
    /// One row per window and group, when the watermark closes the window.
    Final,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Partitioning {
    /// Any partitioning gives complete results (stateless queries).
    Any,
    /// State is keyed by these source columns: every record with the same
    /// values must be in the same partition. Empty = a single global group.
    KeyedBy(Vec<String>),
    /// State is keyed, and the input was repartitioned by that key through
    /// an exchange (see [`crate::Dataflow`]): complete by construction.
    ByExchange,
}

/// Whether a Protobuf message can hold a value of `t`: no array or map
/// directly inside an array or a map.
fn protobuf_holds(t: DataType) -> bool {
    let inner = match t {
        DataType::Array(_) => t.element().into_iter().collect::<Vec<_>>(),
        DataType::Map(_) => t.map_types().map(|(_, v)| vec![v]).unwrap_or_default(),
        DataType::Row(_) => return t.fields().iter().all(|(_, f)| protobuf_holds(*f)),
        _ => return true,
    };
    inner.into_iter().all(|e| !matches!(e, DataType::Array(_) | DataType::Map(_)) && protobuf_holds(e))
}

impl Plan {
    /// Why these results cannot be written to `sink`: a column its format
    /// cannot name ([`sluice_crds::SinkSpec::results_problem`]), or a
    /// nested key column — a Kafka record key is a flat value, what
    /// partitioning, compaction and joins on the key compare. Checked by
    /// `validate`, the operator and the worker before anything runs.
    pub fn results_problem(&self, sink: &sluice_crds::SinkSpec) -> Option<String> {
        if let Some(problem) = sink
            .results_problem(self.outputs.iter().map(|o| o.name.as_str()), self.keys.iter().map(|k| k.name.as_str()))
        {
            return Some(problem);
        }
        if sink.format == sluice_crds::SinkFormat::Protobuf
            && let Some(o) = self.outputs.iter().find(|o| !protobuf_holds(o.expr.data_type()))
        {
            return Some(format!(
                "spec.sink.format protobuf: output column `{}` is {}, which holds lists or maps as elements or map \
                 values, and Protobuf's repeated and map fields do not nest: use format json or avro, or UNNEST it",
                o.name,
                o.expr.data_type()
            ));
        }
        let nested = self.keys.iter().find(|k| k.expr.data_type().is_nested())?;
        sink.kafka.as_ref()?;
        Some(format!(
            "spec.sink: key column `{}` is {}, and a record key is flat: group by its fields (`{}.<field>`) or \
             its elements, or keep it as a value column",
            nested.name,
            nested.expr.data_type(),
            nested.name
        ))
    }

    pub fn is_windowed(&self) -> bool {
        matches!(&self.operator, OperatorPlan::Aggregate(a) if a.window.is_some())
    }

    /// Whether rows are judged against the watermark as they arrive: a
    /// windowed aggregate's (late for a closed window), an interval join's
    /// (late rows could miss partners that were already let go) and a
    /// temporal join's (the stream rows before the watermark were joined).
    pub fn judges_lateness(&self) -> bool {
        self.is_windowed()
            || matches!(
                self.operator,
                OperatorPlan::Join(_)
                    | OperatorPlan::TableJoin(TableJoinPlan { version: TableVersion::AsOfEventTime, .. })
            )
    }

    /// Checks that the declared partitioning of the source gives complete
    /// results with one engine per partition, given the number of partitions.
    pub fn check_partitioning(&self, partitions: i32) -> Result<(), super::SqlError> {
        let Partitioning::KeyedBy(keys) = &self.partitioning else {
            // Any, or ByExchange: complete with any number of partitions.
            return Ok(());
        };
        if partitions <= 1 {
            return Ok(());
        }
        let declared = &self.source.partition_key;
        let aligned = !declared.is_empty() && declared.iter().all(|d| keys.iter().any(|k| k.eq_ignore_ascii_case(d)));
        if aligned {
            return Ok(());
        }
        let state = if keys.is_empty() { "a single global group".to_owned() } else { format!("({})", keys.join(", ")) };
        let declared_text = if declared.is_empty() {
            "no partitionKey".to_owned()
        } else {
            format!("partitionKey [{}]", declared.join(", "))
        };
        Err(super::SqlError::unpositioned(format!(
            "the query keeps state per {state}, but source `{}` has {partitions} partitions and declares \
             {declared_text}: each partition is processed by its own engine, so records of one group must \
             share a partition. Key the topic by a subset of the grouping columns and declare it in \
             partitionKey, or use a single-partition topic",
            self.source.name
        )))
    }
}

/// Names the fingerprint scheme; part of what is hashed. A change to how
/// plans serialise changes every fingerprint, so it is a deliberate step:
/// `tests/fingerprint.rs` pins the fingerprints of known plans.
const FINGERPRINT_SCHEME: &[u8] = b"sluice.plan.v1\0";

/// The plan's identity for state: a checkpoint is only restored into the
/// plan that wrote it. Stable across builds and versions (SHA-256 of the
/// plan's postcard encoding, a format with a stable specification), unlike
/// an in-process hasher that may change with any dependency update and
/// would make every checkpoint unreadable after an image upgrade.
pub fn plan_fingerprint(plan: &Plan) -> u64 {
    use sha2::{Digest, Sha256};
    let bytes = postcard::to_allocvec(plan).unwrap_or_default();
    let digest = Sha256::new().chain_update(FINGERPRINT_SCHEME).chain_update(&bytes).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}
