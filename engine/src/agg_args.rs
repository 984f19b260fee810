//! An aggregate's argument over a batch, with its condition as a selection.
//!
//! `agg(x) FILTER (WHERE p)` reaches the engine as `agg(CASE WHEN p THEN x
//! END)` (`sluice_sql`'s FILTER rewrite), and a three-phase plan gates each
//! aggregate by the family of its row the same way. Evaluated as written,
//! every such argument builds a column as long as the batch, mostly NULLs,
//! that the accumulator then skips. Here the condition and the value are
//! evaluated apart, and the accumulator is handed only the rows where the
//! condition holds: the same result (every aggregate ignores NULL
//! inputs), without the column of NULLs. Nested conditions are ANDed.

use std::borrow::Cow;

use sluice_plan::{AggFunc, AggregateCall, Batch, Column, ColumnData, PhysExpr, Scalar, eval};

use crate::Error;
use crate::accumulators::Accumulator;

/// One aggregate's argument for one batch.
pub(crate) struct ArgColumns<'a> {
    /// Conditions a row must meet to be aggregated (all of them).
    when: Vec<Cow<'a, Column>>,
    /// The value; `None` for `COUNT(*)` and for a count of a condition's
    /// rows (`COUNT(*) FILTER`), which counts rows.
    value: Option<Cow<'a, Column>>,
}

/// Reusable row and group lists of the selected rows.
#[derive(Debug, Default)]
pub(crate) struct Selected {
    rows: Vec<u32>,
    gids: Vec<u32>,
}

/// `x` and the conditions of `CASE WHEN p THEN x END`, nested or not; the
/// argument itself and no condition otherwise.
fn peel(mut arg: &PhysExpr) -> (Vec<&PhysExpr>, &PhysExpr) {
    let mut when = Vec::new();
    while let PhysExpr::Case { whens, otherwise, data_type } = arg
        && let [(condition, value)] = whens.as_slice()
        && matches!(otherwise.as_ref(), PhysExpr::Literal { value: Scalar::Null, .. })
        && value.data_type() == *data_type
    {
        when.push(condition);
        arg = value;
    }
    (when, arg)
}

/// Every aggregate's argument over `batch`.
pub(crate) fn eval_args<'a>(aggregates: &[AggregateCall], batch: &'a Batch) -> Result<Vec<ArgColumns<'a>>, Error> {
    let n = batch.len;
    aggregates
        .iter()
        .map(|a| {
            let Some(arg) = &a.arg else { return Ok(ArgColumns { when: Vec::new(), value: None }) };
            let (when, value) = peel(arg);
            let when = when.into_iter().map(|c| Ok(eval(c, batch)?.into_column(n))).collect::<Result<_, Error>>()?;
            let counts_rows = a.func == AggFunc::Count
                && !a.distinct
                && matches!(value, PhysExpr::Literal { value, .. } if !value.is_null());
            let value = if counts_rows { None } else { Some(eval(value, batch)?.into_column(n)) };
            Ok(ArgColumns { when, value })
        })
        .collect()
}

impl ArgColumns<'_> {
    /// Folds `rows` (of groups `gids`) into `acc`: those that meet every
    /// condition.
    pub(crate) fn update(
        &self,
        acc: &mut Accumulator,
        rows: &[u32],
        gids: &[u32],
        selected: &mut Selected,
    ) -> Result<(), Error> {
        if self.when.is_empty() {
            return acc.update(rows, gids, self.value.as_deref());
        }
        selected.rows.clear();
        selected.gids.clear();
        for (&r, &g) in rows.iter().zip(gids) {
            if self.when.iter().all(|c| holds(c, r as usize)) {
                selected.rows.push(r);
                selected.gids.push(g);
            }
        }
        acc.update(&selected.rows, &selected.gids, self.value.as_deref())
    }
}

/// Whether a condition is TRUE (not FALSE, not NULL) at `row`.
fn holds(condition: &Column, row: usize) -> bool {
    let valid = condition.validity.as_deref().is_none_or(|v| v[row]);
    valid && matches!(&condition.data, ColumnData::Bool(b) if b[row])
}

#[cfg(test)]
mod tests {
    // Test code: failing loudly is its job.
    #![allow(clippy::unwrap_used)]

    use sluice_plan::{DataType, Scalar};

    use super::*;

    fn column(index: usize, data_type: DataType) -> PhysExpr {
        PhysExpr::Column { index, data_type }
    }

    fn when(condition: PhysExpr, value: PhysExpr) -> PhysExpr {
        let data_type = value.data_type();
        PhysExpr::Case {
            whens: vec![(condition, value)],
            otherwise: Box::new(PhysExpr::Literal { value: Scalar::Null, data_type }),
            data_type,
        }
    }

    #[test]
    fn a_filtered_argument_aggregates_the_rows_its_conditions_select() {
        // x: 1..=6; p: x > 2 (NULL at row 4); q: x is even.
        let mut x = Column::with_capacity(DataType::Bigint, 6);
        let mut p = Column::with_capacity(DataType::Boolean, 6);
        let mut q = Column::with_capacity(DataType::Boolean, 6);
        for v in 1..=6i64 {
            x.push_i64(v).unwrap();
            if v == 4 {
                p.push_null()
            } else {
                p.push_bool(v > 2).unwrap()
            }
            q.push_bool(v % 2 == 0).unwrap();
        }
        let batch = Batch::new(vec![x, p, q], 6);
        let (x, p, q) = (column(0, DataType::Bigint), column(1, DataType::Boolean), column(2, DataType::Boolean));
        let call = |func, arg: PhysExpr| AggregateCall {
            func,
            arg: Some(arg),
            distinct: false,
            data_type: DataType::Bigint,
            order: Vec::new(),
        };
        let one = PhysExpr::literal(Scalar::Bigint(1));
        let calls = [
            call(AggFunc::Sum, when(p.clone(), when(q.clone(), x.clone()))),
            call(AggFunc::Count, when(p, one)),
            call(AggFunc::Sum, x.clone()),
            // Not a FILTER: a second branch.
            call(
                AggFunc::Sum,
                PhysExpr::Case {
                    whens: vec![(q, x)],
                    otherwise: Box::new(PhysExpr::literal(Scalar::Bigint(100))),
                    data_type: DataType::Bigint,
                },
            ),
        ];
        let args = eval_args(&calls, &batch).unwrap();
        assert_eq!(
            args.iter().map(|a| (a.when.len(), a.value.is_some())).collect::<Vec<_>>(),
            [(2, true), (1, false), (0, true), (0, true)]
        );
        let rows: Vec<u32> = (0..6).collect();
        let gids = vec![0; 6];
        let mut selected = Selected::default();
        let sums: Vec<String> = calls
            .iter()
            .zip(&args)
            .map(|(c, a)| {
                let mut acc = Accumulator::new(c);
                acc.ensure(1);
                a.update(&mut acc, &rows, &gids, &mut selected).unwrap();
                let mut out = Column::with_capacity(DataType::Bigint, 1);
                acc.emit(0, &mut out).unwrap();
                format!("{:?}", out.scalar(0))
            })
            .collect();
        // 6 (x = 6 only: 4's p is NULL); 3 rows with p (3, 5, 6); 21; 2+4+6+300.
        assert_eq!(sums, ["Bigint(6)", "Bigint(3)", "Bigint(21)", "Bigint(312)"]);
    }
}
