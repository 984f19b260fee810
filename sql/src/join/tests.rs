//! The join's planning, tested end to end through `plan_dataflow`: each
//! shape of join a query may write, and what its stages come out as.

use sluice_crds::{ColumnSpec, ColumnType, EventTimeSpec, SourceSpec, TableSpec};
use sluice_plan::{OperatorPlan, Partitioning, StageOutput, TableVersion};

use crate::plan_dataflow;

fn sources() -> Vec<SourceSpec> {
    let time = Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 });
    vec![
        SourceSpec {
            event_time: time.clone(),
            ..SourceSpec::table(
                "orders",
                &[
                    ("id", ColumnType::Bigint, true),
                    ("cid", ColumnType::Bigint, false),
                    ("ts", ColumnType::Timestamp, true),
                ],
            )
        },
        SourceSpec {
            event_time: time,
            table: Some(TableSpec { primary_key: vec!["id".into()] }),
            ..SourceSpec::table(
                "customers",
                &[
                    ("id", ColumnType::Bigint, true),
                    ("name", ColumnType::String, true),
                    ("ts", ColumnType::Timestamp, true),
                ],
            )
        },
    ]
}

/// Nexmark q7's shape: a stream joined with a windowed aggregate of
/// itself. Both plans read `orders` (the runtime reads it once for
/// both); WHERE's bound between the stream's time and the window's end
/// (its `window_end` column) becomes the join's time bound, so the
/// join lets rows go; a one-sided conjunct still filters its side.
#[test]
fn a_stream_joins_a_windowed_aggregate_of_itself_bounded_by_where() {
    let sql = "SELECT o.id, o.cid FROM orders o JOIN (SELECT MAX(cid) AS top, window_end AS wend FROM orders \
               GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)) m ON o.cid = m.top \
               WHERE o.ts BETWEEN m.wend - INTERVAL '10' SECOND AND m.wend AND o.id > 0";
    let flow = plan_dataflow(sql, &sources(), 2).unwrap();
    let reads: Vec<&str> = flow.source_plans().map(|p| p.source.name.as_str()).collect();
    assert_eq!(reads, ["orders", "orders"]);
    let OperatorPlan::Join(join) = &flow.stages.last().unwrap().plan.operator else { panic!("{flow:?}") };
    // right − left: the window's end is 0 to 10 s after the order.
    assert_eq!((join.lower, join.upper), (0, 10_000), "{join:?}");
    assert!(join.residual.is_none(), "the bound is no residual: {join:?}");
    let last = &flow.stages.last().unwrap().plan;
    assert!(last.filter.is_none(), "WHERE is all taken: {last:?}");
    let stream = flow.branches.iter().find(|b| matches!(b.plan.operator, OperatorPlan::Stateless)).unwrap();
    assert!(stream.plan.filter.is_some(), "`o.id > 0` filters the stream side before the exchange");
    // A self-join of two streams plans too, each side under its alias.
    let flow = plan_dataflow(
        "SELECT a.id, b.id AS other FROM orders a JOIN orders b ON a.cid = b.cid \
         WHERE b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE",
        &sources(),
        2,
    )
    .unwrap();
    let OperatorPlan::Join(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
    assert_eq!((join.lower, join.upper), (0, 60_000));
    // An outer join keeps WHERE after it: the NULL-extended rows must
    // meet it. Without a bound in ON it is refused.
    let err = plan_dataflow(
        "SELECT a.id FROM orders a LEFT JOIN orders b ON a.cid = b.cid \
         WHERE b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE",
        &sources(),
        2,
    )
    .unwrap_err();
    assert!(err.message.contains("needs a time bound"), "{err}");
}

/// Nexmark q9's bound, `b.ts BETWEEN a.ts AND a.expires`: the low end
/// bounds `right − left`, the high end is a left column (kept as a
/// residual) by which left rows are let go; an outer join with it, or
/// an upper end on a right column, is not one.
#[test]
fn a_bound_by_a_left_column_lets_left_rows_go_by_it() {
    let mut sources = sources();
    sources[1].table = None;
    sources[0].schema.columns.push(ColumnSpec::field("until", ColumnType::Timestamp, false));
    let sql = "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id AND c.ts BETWEEN o.ts AND o.until";
    let flow = plan_dataflow(sql, &sources, 2).unwrap();
    let OperatorPlan::Join(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
    assert_eq!((join.lower, join.upper, join.until), (0, i64::MAX, Some(3)), "{join:?}");
    assert!(join.residual.is_some(), "the column comparison stays a residual");
    let flow = plan_dataflow(&sql.replace("BETWEEN o.ts AND o.until", "<= o.until AND c.ts >= o.ts"), &sources, 2);
    let OperatorPlan::Join(join) = &flow.unwrap().stages[1].plan.operator else { panic!() };
    assert_eq!((join.lower, join.until), (0, Some(3)));
    let err = plan_dataflow(&sql.replace(" JOIN ", " LEFT JOIN "), &sources, 2).unwrap_err();
    assert!(err.message.contains("needs both ends"), "{err}");
    let flow = plan_dataflow(
        &sql.replace("BETWEEN o.ts AND o.until", "BETWEEN o.ts AND o.ts + INTERVAL '1' SECOND"),
        &sources,
        2,
    );
    let OperatorPlan::Join(join) = &flow.unwrap().stages[1].plan.operator else { panic!() };
    assert_eq!((join.upper, join.until), (1_000, None));
}

/// Without a time bound an INNER join of two streams is a regular
/// join, whose rows have no event time to join again by; an outer one,
/// or a bound with one end, is refused with what to add.
#[test]
fn an_inner_join_without_a_time_bound_is_a_regular_join_and_an_outer_one_is_refused() {
    let mut sources = sources();
    sources[1].table = None;
    let flow =
        plan_dataflow("SELECT o.id, c.name FROM orders o JOIN customers c ON o.cid = c.id", &sources, 2).unwrap();
    let OperatorPlan::Join(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
    assert!(join.unbounded(), "{join:?}");
    for (sql, message) in [
        ("SELECT o.id FROM orders o LEFT JOIN customers c ON o.cid = c.id", "a LEFT join needs a time bound"),
        ("SELECT o.id FROM orders o FULL JOIN customers c ON o.cid = c.id", "a FULL join needs a time bound"),
        ("SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id AND c.ts >= o.ts", "needs both ends"),
    ] {
        let err = plan_dataflow(sql, &sources, 2).unwrap_err();
        assert!(err.message.contains(message), "{sql}: {err}");
    }
    sources.push(SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
        ..SourceSpec::table("payments", &[("order_id", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
    });
    // A regular join's rows have no event time, so `o.ts` bounds nothing
    // after it: the next join is a regular one too, `BETWEEN` its residual.
    let flow = plan_dataflow(
        "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id \
         JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts",
        &sources,
        2,
    )
    .unwrap();
    let OperatorPlan::Join(join) = &flow.stages[2].plan.operator else { panic!("{flow:?}") };
    assert!(join.unbounded() && join.residual.is_some(), "{join:?}");
    assert_eq!(
        flow.stages[1].plan.outputs.last().map(|o| &o.expr),
        Some(&sluice_plan::PhysExpr::Literal {
            value: sluice_plan::Scalar::Null,
            data_type: sluice_plan::DataType::Timestamp
        }),
        "the first join's rows cross with no time"
    );
}

#[test]
fn a_join_with_a_table_is_a_table_join_as_of_event_time_only_when_asked() {
    for (sql, version) in [
        ("SELECT o.id, c.name FROM orders o JOIN customers c ON o.cid = c.id", TableVersion::Latest),
        (
            "SELECT o.id, c.name FROM orders o JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.cid = c.id",
            TableVersion::AsOfEventTime,
        ),
    ] {
        let flow = plan_dataflow(sql, &sources(), 2).unwrap();
        let OperatorPlan::TableJoin(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
        assert_eq!(join.version, version, "{sql}");
        let table = &flow.branches[0].plan;
        assert!(table.source.schema.index_of("__deleted").is_some(), "the table's side reads the deletion marker");
        assert!(
            table.source.required.iter().filter(|r| **r).count() == 2,
            "only the key and the event time are required of a table row"
        );
    }
}

#[test]
fn a_join_of_a_join_is_a_stage_per_join_with_each_right_side_beside_the_stage_before() {
    let mut sources = sources();
    sources.push(SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
        ..SourceSpec::table(
            "payments",
            &[
                ("order_id", ColumnType::Bigint, true),
                ("name", ColumnType::String, false),
                ("ts", ColumnType::Timestamp, true),
            ],
        )
    });
    let flow = plan_dataflow(
        "SELECT o.id, c.name AS customer, p.name AS payer FROM orders o \
         JOIN customers c ON o.cid = c.id \
         LEFT JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE",
        &sources,
        2,
    )
    .unwrap();
    let [orders, first, second] = flow.stages.as_slice() else { panic!("a stage per join: {flow:?}") };
    assert_eq!(orders.plan.source.name, "orders");
    let beside: Vec<(usize, &str)> = flow.branches.iter().map(|b| (b.beside, b.plan.source.name.as_str())).collect();
    assert_eq!(beside, [(0, "customers"), (1, "payments")]);
    assert!(matches!(first.plan.operator, OperatorPlan::TableJoin(_)));
    assert_eq!(first.output, StageOutput::Exchange);
    assert_eq!(first.plan.keys.len(), 1, "the first join's rows are keyed by the second join's key");
    let layout = |p: &sluice_plan::Plan| p.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>();
    assert_eq!(layout(&first.plan), layout(&flow.branches[1].plan), "both sides of the second join write one layout");
    let OperatorPlan::Join(join) = &second.plan.operator else {
        panic!("an interval join: {:?}", second.plan.operator)
    };
    assert_eq!((join.lower, join.upper), (0, 60_000));
    let names: Vec<&str> = second.plan.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["id", "customer", "payer"]);
    // A bound on a column that is not the rows' event time (the table's
    // `c.ts`; the rows' is `o.ts`) bounds nothing the join can let go
    // by: a regular join, with the comparison as its residual (Flink
    // plans it so too).
    let flow = plan_dataflow(
        "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id \
         JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN c.ts AND c.ts",
        &sources,
        2,
    )
    .unwrap();
    let OperatorPlan::Join(join) = &flow.stages[2].plan.operator else { panic!("{flow:?}") };
    assert!(join.unbounded() && join.residual.is_some(), "{join:?}");
    for (sql, message) in [
        (
            "SELECT name FROM orders o JOIN customers c ON o.cid = c.id \
          JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts",
            "write c.name or p.name",
        ),
        (
            "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id \
          JOIN payments c ON o.id = c.order_id AND c.ts BETWEEN o.ts AND o.ts",
            "two sides are named `c`",
        ),
    ] {
        let err = plan_dataflow(sql, &sources, 2).unwrap_err();
        assert!(err.message.contains(message), "{sql}: {err}");
    }
}

#[test]
fn an_aggregate_over_a_join_is_a_third_stage_keyed_by_its_group() {
    let flow = plan_dataflow(
        "SELECT c.name, COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id \
         WHERE o.id > 0 AND o.id <> c.id GROUP BY c.name",
        &sources(),
        2,
    )
    .unwrap();
    let [orders, join, aggregate] = flow.stages.as_slice() else { panic!("three stages: {flow:?}") };
    assert!(orders.plan.filter.is_some(), "a conjunct on one stream filters it before the join");
    assert!(flow.branches[0].plan.filter.is_none(), "the table's updates are never filtered");
    assert!(matches!(join.plan.operator, OperatorPlan::TableJoin(_)));
    assert!(join.plan.having.is_some(), "WHERE filters the joined rows before they cross");
    let forwarded: Vec<&str> = join.plan.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(forwarded, ["c.name"], "only what the aggregate reads crosses");
    assert_eq!(join.plan.keys.len(), 1, "keyed by the group");
    assert!(matches!(aggregate.plan.operator, OperatorPlan::Aggregate(_)));
    assert!(aggregate.plan.filter.is_none());
    let err = plan_dataflow(
        "SELECT COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id \
         WINDOW TUMBLING (o.ts, INTERVAL '1' MINUTE)",
        &sources(),
        2,
    )
    .unwrap_err();
    assert!(err.message.contains("time window over a join"), "{err}");
}

/// Nexmark q3's shape: each side's WHERE conjunct filters its source
/// before the exchange, and only the columns the query names (with
/// the event time) cross and are kept; the rest of WHERE stays with
/// the join. An outer join keeps WHERE after it; `*` carries every column.
#[test]
fn where_on_one_stream_filters_it_before_the_join_and_only_named_columns_cross() {
    let nexmark = vec![
        SourceSpec::table(
            "auction",
            &[
                ("id", ColumnType::Bigint, true),
                ("seller", ColumnType::Bigint, true),
                ("category", ColumnType::Bigint, true),
                ("description", ColumnType::String, false),
            ],
        ),
        SourceSpec::table(
            "person",
            &[
                ("id", ColumnType::Bigint, true),
                ("name", ColumnType::String, false),
                ("state", ColumnType::String, false),
                ("extra", ColumnType::String, false),
            ],
        ),
    ];
    let sql = "SELECT P.name, A.id FROM auction A JOIN person P ON A.seller = P.id \
               WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'CA') AND A.id <> P.id";
    let flow = plan_dataflow(sql, &nexmark, 2).unwrap();
    let [auctions, join] = flow.stages.as_slice() else { panic!("two stages: {flow:?}") };
    let people = &flow.branches[0].plan;
    assert!(auctions.plan.filter.is_some() && people.filter.is_some(), "{flow:?}");
    let layout: Vec<&str> = join.plan.source.schema.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(layout, ["A.id", "A.seller", "A.category", "P.id", "P.name", "P.state", "__right", "__time"]);
    // `A.id <> P.id` reads both sides: in an INNER join it is ON's.
    let OperatorPlan::Join(j) = &join.plan.operator else { panic!("{join:?}") };
    assert!(join.plan.having.is_none() && j.residual.is_some(), "A.id <> P.id is the join's condition");
    assert_eq!(auctions.plan.source.schema.fields.len(), 4, "records are still checked against the whole schema");
    let mut streams = sources();
    streams[1].table = None;
    let outer = plan_dataflow(
        "SELECT o.id FROM orders o LEFT JOIN customers c ON o.cid = c.id AND c.ts BETWEEN o.ts AND o.ts \
         WHERE o.id > 0 AND c.name = 'x'",
        &streams,
        2,
    )
    .unwrap();
    assert!(outer.stages[0].plan.filter.is_none() && outer.branches[0].plan.filter.is_none(), "{outer:?}");
    assert!(outer.stages[1].plan.having.is_some());
    let err = plan_dataflow("SELECT P.nmae FROM auction A JOIN person P ON A.seller = P.id", &nexmark, 2);
    assert!(err.unwrap_err().message.contains("did you mean `name`?"), "suggested from every declared column");
    let flow = plan_dataflow("SELECT A.*, P.name FROM auction A JOIN person P ON A.seller = P.id", &nexmark, 2);
    let layout = flow.unwrap().stages[1].plan.source.schema.fields.len();
    assert_eq!(layout, 4 + 2 + 2, "every column of A, the two of P it names, and the layout's two");
    let flow = plan_dataflow("SELECT * FROM auction A JOIN person P ON A.seller = P.id", &nexmark, 2).unwrap();
    assert_eq!(flow.stages[1].plan.source.schema.fields.len(), 10, "every column, and the layout's two");
}

fn people_and_auctions() -> Vec<SourceSpec> {
    let time = Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 });
    vec![
        SourceSpec {
            event_time: time.clone(),
            partition_key: vec!["id".into()],
            ..SourceSpec::table("person", &[("id", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
        },
        SourceSpec {
            event_time: time,
            partition_key: vec!["seller".into()],
            ..SourceSpec::table("auction", &[("seller", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
        },
    ]
}

const Q8: &str = "SELECT p.id, p.s FROM (SELECT id, window_start AS s FROM person GROUP BY id, \
    TUMBLE(ts, INTERVAL '10' SECOND)) AS p JOIN (SELECT seller, window_start AS s FROM auction GROUP BY seller, \
    TUMBLE(ts, INTERVAL '10' SECOND)) AS a ON p.id = a.seller";

#[test]
fn a_join_of_windowed_aggregates_aggregates_each_side_on_its_partitions_then_joins_by_window() {
    let flow = plan_dataflow(&format!("{Q8} AND p.s = a.s"), &people_and_auctions(), 4).unwrap();
    let [side, join] = flow.stages.as_slice() else { panic!("two stages: {flow:?}") };
    assert!(side.plan.is_windowed() && flow.branches[0].plan.is_windowed(), "each side aggregates before the exchange");
    assert_eq!(side.plan.keys.len(), 2, "keyed by the id and the window");
    let OperatorPlan::Join(j) = &join.plan.operator else { panic!("{join:?}") };
    assert_eq!((j.lower, j.upper), (0, 0), "rows of one window have one time, its end");
    let err = plan_dataflow(Q8, &people_and_auctions(), 4).unwrap_err();
    assert!(err.message.contains("equates their windows"), "{err}");
    // Auctions keyed otherwise than by seller (Nexmark's are keyed by
    // id): that side crosses an exchange keyed by seller first, and,
    // being the chain's, goes first; people write beside its aggregate.
    let mut misaligned = people_and_auctions();
    misaligned[1].partition_key = vec!["ts".into()];
    let flow = plan_dataflow(&format!("{Q8} AND p.s = a.s"), &misaligned, 4).unwrap();
    let [rekey, sellers, join] = flow.stages.as_slice() else { panic!("three stages: {flow:?}") };
    assert_eq!(rekey.plan.source.name, "auction");
    assert!(matches!(rekey.plan.operator, OperatorPlan::Stateless));
    assert_eq!(rekey.plan.keys.len(), 1, "keyed by seller");
    assert!(sellers.plan.is_windowed() && sellers.plan.partitioning == Partitioning::ByExchange);
    assert_eq!(sellers.plan.keys.len(), 2, "the join's keys: seller and window");
    assert!(rekey.output == StageOutput::Exchange && sellers.output == StageOutput::Exchange);
    let [people] = flow.branches.as_slice() else { panic!("one branch: {flow:?}") };
    assert_eq!((people.plan.source.name.as_str(), people.beside), ("person", 1));
    assert!(matches!(join.plan.operator, OperatorPlan::Join(_)));
    // With one partition, nothing is re-keyed.
    assert_eq!(plan_dataflow(&format!("{Q8} AND p.s = a.s"), &misaligned, 1).unwrap().stages.len(), 2);
    misaligned[0].partition_key = vec!["ts".into()];
    let err = plan_dataflow(&format!("{Q8} AND p.s = a.s"), &misaligned, 4).unwrap_err();
    assert!(err.message.contains("both sides of this join aggregate by a key"), "{err}");
    let err = plan_dataflow(
        "SELECT p.id FROM (SELECT id, COUNT(*) AS n FROM person GROUP BY id) AS p JOIN \
         (SELECT seller, COUNT(*) AS n FROM auction GROUP BY seller) AS a ON p.id = a.seller",
        &people_and_auctions(),
        4,
    )
    .unwrap_err();
    assert!(err.message.contains("per time window"), "{err}");
}

#[test]
fn for_system_time_as_of_outside_a_table_join_is_refused_where_it_is() {
    let err = plan_dataflow("SELECT id FROM orders FOR SYSTEM_TIME AS OF ts", &sources(), 1).unwrap_err();
    assert_eq!((err.line, err.column), (1, 23), "{err}");
    assert!(err.message.contains("applies to a table joined to a stream"), "{err}");
}
