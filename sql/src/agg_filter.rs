//! `agg(x) FILTER (WHERE p)`: the aggregate over the rows where `p` holds.
//!
//! Every aggregate Sluice has ignores NULL inputs, so the clause is exactly
//! `agg(CASE WHEN p THEN x END)` — and `COUNT(*) FILTER (WHERE p)` is
//! `COUNT(CASE WHEN p THEN 1 END)`; DISTINCT stays on the aggregate. The
//! rewrite happens on the parsed query, so the aggregate operators need no
//! second input path, and positions in error messages still point at what
//! the user wrote (`p` and `x` keep their spans). Nexmark q15–q17 count
//! bids and distinct bidders per price range this way.

use std::ops::ControlFlow;

use sqlparser::ast::helpers::attached_token::AttachedToken;
use sqlparser::ast::{
    CaseWhen, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Query, Value, visit_expressions_mut,
};

/// Aggregates a FILTER clause may follow; on anything else the clause
/// stays and the compiler reports it.
const AGGREGATES: &[&str] =
    &["COUNT", "SUM", "MIN", "MAX", "AVG", "STDDEV", "STDDEV_SAMP", "STDDEV_POP", "VARIANCE", "VAR_SAMP", "VAR_POP"];

pub(crate) fn rewrite_aggregate_filters(query: &mut Query) {
    let _ = visit_expressions_mut(query, |e| {
        if let Expr::Function(f) = e
            && f.over.is_none()
            && f.filter.is_some()
            && AGGREGATES.iter().any(|a| f.name.to_string().eq_ignore_ascii_case(a))
            && let FunctionArguments::List(list) = &mut f.args
            && let Some(p) = f.filter.take()
        {
            let when = |result: Expr| Expr::Case {
                case_token: AttachedToken::empty(),
                end_token: AttachedToken::empty(),
                operand: None,
                conditions: vec![CaseWhen { condition: (*p).clone(), result }],
                else_result: None,
            };
            for arg in &mut list.args {
                match arg {
                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => {
                        *arg = FunctionArg::Unnamed(FunctionArgExpr::Expr(when(Expr::value(Value::Number(
                            "1".into(),
                            false,
                        )))));
                    }
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => *x = when(x.clone()),
                    _ => {}
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
}
