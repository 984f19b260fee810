//! Bounds on how deep a query may nest, and the stack planning runs on.
//!
//! Parsing, rewriting and compiling a query recurse once per level of its
//! expressions. sqlparser builds a chain of binary operators (`x+x+…`,
//! `a AND b AND …`) iteratively, so 2 KB of SQL makes a tree a thousand
//! levels deep, and the recursive passes over it overflowed a 2 MiB thread
//! stack. A stack overflow is not an error a process can report: it aborts,
//! and the operator, restarted, reconciled the same job and aborted again,
//! for every job in the cluster. So:
//!
//! * a query longer than [`MAX_SQL_BYTES`] is refused before it is parsed
//!   (Kubernetes stores no object that large anyway);
//! * before parsing, the tokens are scanned for runs of more than
//!   [`MAX_OPERATOR_RUN`] operators on one path of the expression: the tree
//!   such a run parses into would be deep enough to overflow the stack when
//!   it is merely dropped (a level of a debug build's drop takes kilobytes);
//! * an expression nested more than [`MAX_EXPR_DEPTH`] levels is refused
//!   with its position, right after parsing, before any recursive pass;
//! * merging views counts what it copies ([`MAX_EXPR_NODES`]: a view read
//!   twice by each of twenty views above it is a million copies) and checks
//!   the depth again, since it stacks expressions into one; compiling
//!   counts its own depth as a last line;
//! * every public entry point plans on a thread of its own with
//!   [`PLANNING_STACK_BYTES`] of stack, whatever thread calls it (a tokio
//!   worker of the operator, the worker's main thread): what is left that
//!   recurses over a whole tree — dropping the parsed tree of a refused
//!   query — fits it with room to spare.

use std::cell::Cell;
use std::ops::ControlFlow;

use sluice_plan::SqlError;
use sqlparser::ast::{Expr, Query, Spanned, Visit, Visitor};
use sqlparser::tokenizer::{Token, TokenWithSpan, Word};

use crate::diagnostic::Located;

/// The most levels an expression may nest (operators, function calls,
/// parentheses and subqueries all count). Hand-written queries stay far
/// below it; generated ones that reach it should be flattened (`IN (…)`
/// instead of a chain of `OR`s).
pub const MAX_EXPR_DEPTH: usize = 256;

/// The longest query text accepted.
pub const MAX_SQL_BYTES: usize = 1 << 20;

/// The most binary operators on one path of an expression's tokens
/// (counted through parentheses; a comma or a clause starts a new path).
/// Above [`MAX_EXPR_DEPTH`], so that the precise check on the parsed tree
/// names the place for everything between the two.
pub const MAX_OPERATOR_RUN: usize = 4 * MAX_EXPR_DEPTH;

/// The most expression nodes merging views may copy into a query.
pub const MAX_EXPR_NODES: usize = 100_000;

/// The stack planning runs on. Only the pages used are backed by memory.
/// The deepest tree the token scan lets the parser build is about
/// [`MAX_OPERATOR_RUN`] plus the parser's own nesting limit (50) levels;
/// dropping it takes a few MiB in a debug build.
pub const PLANNING_STACK_BYTES: usize = 64 << 20;

/// Refuses a query text over [`MAX_SQL_BYTES`].
pub(crate) fn check_length(sql: &str) -> Result<(), SqlError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::unpositioned(format!(
            "the query is {} bytes long; the most accepted is {MAX_SQL_BYTES} (1 MiB)",
            sql.len()
        )));
    }
    Ok(())
}

/// Refuses, before the parser builds it into a tree, an expression whose
/// tokens could nest more than [`MAX_OPERATOR_RUN`] levels deep, and more
/// than [`MAX_OPERATOR_RUN`] set operations (`UNION ALL` …) at one level.
///
/// An upper bound on the depth, per parenthesised group (`CASE … END`
/// counts as one): the operators of its current part (every token but a
/// word, a number, a parenthesis, a comma, a dot or white space counts,
/// and the words `AND OR XOR IS LIKE ILIKE IN BETWEEN DIV NOT`), plus the
/// deepest group closed among them; a group is one level more than its
/// deepest comma-separated part. A comma, `WHEN`, `THEN`, `ELSE` or a
/// clause keyword starts a new part. The sqlparser builds operator chains
/// iteratively, so without this a 1 MiB chain parses into a tree half a
/// million levels deep, and any pass over it (dropping it included)
/// overflows the stack. Overcounting (a string literal counts) is
/// harmless: the bound is four times the precise check's.
pub(crate) fn check_operator_runs(tokens: &[TokenWithSpan]) -> Result<(), SqlError> {
    #[derive(Default)]
    struct Level {
        /// Operators of the current part.
        chain: usize,
        /// The deepest group closed in the current part.
        deepest: usize,
        /// The deepest finished part.
        most: usize,
        /// Set operations at this level.
        sets: usize,
    }
    impl Level {
        fn depth(&self) -> usize {
            self.chain + self.deepest
        }
        fn next_part(&mut self) {
            self.most = self.most.max(self.depth());
            self.chain = 0;
            self.deepest = 0;
        }
    }
    let mut levels = vec![Level::default()];
    for t in tokens {
        let word = match &t.token {
            Token::Word(Word { value, quote_style: None, .. }) => Some(value.to_ascii_uppercase()),
            _ => None,
        };
        let Some(level) = levels.last_mut() else { break };
        match (&t.token, word.as_deref()) {
            (Token::LParen, _) | (_, Some("CASE")) => levels.push(Level::default()),
            (Token::RParen, _) | (_, Some("END")) => {
                if levels.len() > 1
                    && let Some(mut closed) = levels.pop()
                {
                    closed.next_part();
                    if let Some(parent) = levels.last_mut() {
                        parent.deepest = parent.deepest.max(closed.most + 1);
                    }
                }
            }
            (Token::Comma, _) => level.next_part(),
            (_, Some("UNION" | "EXCEPT" | "INTERSECT")) => {
                level.next_part();
                level.sets += 1;
            }
            (
                _,
                Some(
                    "WHEN" | "THEN" | "ELSE" | "SELECT" | "FROM" | "WHERE" | "GROUP" | "HAVING" | "ON" | "JOIN"
                    | "WINDOW" | "ORDER" | "LIMIT",
                ),
            ) => level.next_part(),
            (_, Some("AND" | "OR" | "XOR" | "IS" | "LIKE" | "ILIKE" | "IN" | "BETWEEN" | "DIV" | "NOT")) => {
                level.chain += 1;
            }
            (
                Token::Word(_)
                | Token::Number(..)
                | Token::Period
                | Token::Whitespace(_)
                | Token::EOF
                | Token::SemiColon,
                _,
            ) => {}
            _ => level.chain += 1,
        }
        let Some(level) = levels.last() else { break };
        if level.depth() > MAX_OPERATOR_RUN || level.sets > MAX_OPERATOR_RUN {
            return Err(SqlError::at_span(
                t.span,
                format!(
                    "more than {MAX_OPERATOR_RUN} operators in one expression (or set operations in one query): \
                     it would nest more than {MAX_EXPR_DEPTH} levels deep; split it, or use IN (…) for a long \
                     chain of ORs"
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a statement, or a part of one, with an expression nested more
/// than [`MAX_EXPR_DEPTH`] levels, naming where. The walk stops at the
/// first level too deep, so it never recurses further than that itself.
pub(crate) fn check_nesting(node: &impl Visit) -> Result<(), SqlError> {
    struct Depth {
        now: usize,
    }
    impl Depth {
        fn enter(&mut self, node: &impl Spanned) -> ControlFlow<SqlError> {
            self.now += 1;
            if self.now > MAX_EXPR_DEPTH {
                return ControlFlow::Break(too_deep(node));
            }
            ControlFlow::Continue(())
        }
    }
    impl Visitor for Depth {
        type Break = SqlError;
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<SqlError> {
            self.enter(expr)
        }
        fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<SqlError> {
            self.now -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<SqlError> {
            self.enter(query)
        }
        fn post_visit_query(&mut self, _: &Query) -> ControlFlow<SqlError> {
            self.now -= 1;
            ControlFlow::Continue(())
        }
    }
    match node.visit(&mut Depth { now: 0 }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn too_deep(node: &impl Spanned) -> SqlError {
    SqlError::at_node(
        node,
        format!(
            "expression nested more than {MAX_EXPR_DEPTH} levels deep (a chain of operators counts one level \
             per operator): split it, or use IN (…) for a long chain of ORs"
        ),
    )
}

/// How many expression nodes `expr` holds, or `None` past `limit`
/// (the count stops there).
pub(crate) fn count_nodes(expr: &Expr, limit: usize) -> Option<usize> {
    let mut n = 0usize;
    let flow = sqlparser::ast::visit_expressions(expr, |_| {
        n += 1;
        if n > limit { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    });
    flow.is_continue().then_some(n)
}

/// The error for views that expand past [`MAX_EXPR_NODES`].
pub(crate) fn too_many_nodes(at: sqlparser::tokenizer::Span) -> SqlError {
    SqlError::at_span(
        at,
        format!(
            "merging this subquery or CTE into the query that reads it copies more than {MAX_EXPR_NODES} \
             expression nodes (each reference to one of its columns is a copy of the expression behind it): \
             reference its expressions fewer times"
        ),
    )
}

thread_local! {
    static COMPILING: Cell<usize> = const { Cell::new(0) };
}

/// One level of [`crate::compile::compile`]'s recursion, counted while it
/// lives: more than [`MAX_EXPR_DEPTH`] at once is an error at `node`.
#[derive(Debug)]
pub(crate) struct CompileLevel(());

impl CompileLevel {
    pub(crate) fn enter(node: &Expr) -> Result<Self, SqlError> {
        let now = COMPILING.with(|d| {
            d.set(d.get() + 1);
            d.get()
        });
        let level = Self(());
        if now > MAX_EXPR_DEPTH {
            return Err(too_deep(node));
        }
        Ok(level)
    }
}

impl Drop for CompileLevel {
    fn drop(&mut self) {
        COMPILING.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs `plan` on a thread with [`PLANNING_STACK_BYTES`] of stack and
/// returns what it returned. A panic in it (a bug) comes back as an
/// internal error instead of taking the caller down with it.
pub(crate) fn on_planning_stack<T: Send>(plan: impl FnOnce() -> Result<T, SqlError> + Send) -> Result<T, SqlError> {
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("sluice-plan".into())
            .stack_size(PLANNING_STACK_BYTES)
            .spawn_scoped(s, plan)
            .map_err(|e| SqlError::unpositioned(format!("cannot start the planning thread: {e}")))?;
        thread.join().unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(SqlError::unpositioned(format!("internal error (please report): the planner panicked: {what}")))
        })
    })
}

#[cfg(test)]
mod tests {
    // Test code: failing loudly is its job.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn chain(op: &str, terms: usize) -> String {
        vec!["v"; terms].join(op)
    }

    #[test]
    fn a_chain_at_the_limit_plans_and_one_past_it_is_refused_where_it_goes_too_deep() {
        let source = sluice_crds::SourceSpec::table("t", &[("v", sluice_crds::ColumnType::Bigint, true)]);
        let sources = [source];
        // `v+v+…` with n terms nests n-1 operators under the select item.
        // The chain of n terms is n levels (n-1 operators and a column),
        // under the query's own level.
        let ok = format!("SELECT {} AS s FROM t", chain("+", MAX_EXPR_DEPTH - 1));
        crate::plan_query(&ok, &sources).unwrap();
        let deep = format!("SELECT {} AS s FROM t", chain("+", MAX_EXPR_DEPTH));
        let err = crate::plan_query(&deep, &sources).unwrap_err();
        assert!(err.message.contains(&format!("nested more than {MAX_EXPR_DEPTH} levels")), "{err}");
        assert_eq!((err.line, err.column), (1, 8), "{err}");
    }

    #[test]
    fn long_chains_of_every_kind_are_errors_not_aborts() {
        let source = sluice_crds::SourceSpec::table(
            "t",
            &[("v", sluice_crds::ColumnType::Bigint, true), ("b", sluice_crds::ColumnType::Boolean, true)],
        );
        let sources = [source];
        let queries = [
            format!("SELECT {} AS s FROM t", chain("+", 1_000)),
            format!("SELECT v FROM t WHERE {}", chain(" AND ", 1_000).replace('v', "b")),
            format!("SELECT v FROM t WHERE {}", chain(" OR ", 50_000).replace('v', "b")),
            format!("SELECT {} AS s FROM t", chain("*", 400_000)),
            // Parenthesised runs, each short, stacked: one path.
            format!("SELECT {} AS s FROM t", format!("({}+", chain("+", 30)).repeat(45) + "v" + &")".repeat(45)),
            format!("SELECT {} AS s FROM t", "(".repeat(45) + &format!("{})+", chain("+", 30)).repeat(45) + "v"),
            // Operators the old scan did not count, and CASE chains.
            format!("SELECT v FROM t WHERE {}", chain(" ~ ", 200_000)),
            format!("SELECT {} AS s FROM t", "v".to_owned() + &"::bigint".repeat(100_000)),
            format!("SELECT {} AS s FROM t", vec!["CASE WHEN b THEN v END"; 40_000].join(" + ")),
            format!("SELECT v, COUNT(*) FROM t GROUP BY v HAVING SUM({}) > 0", chain("-", 5_000)),
            format!("SELECT {} AS s FROM t", "COALESCE(".repeat(300) + "v" + &")".repeat(300)),
        ];
        for sql in &queries {
            let err = crate::plan_query(sql, &sources).unwrap_err();
            assert!(err.message.contains("levels deep") || err.message.contains("deeply"), "{}: {err}", &sql[..60]);
            let err = crate::plan_dataflow(sql, &sources, 4).unwrap_err();
            assert!(err.message.contains("levels deep") || err.message.contains("deeply"), "{}: {err}", &sql[..60]);
        }
    }

    #[test]
    fn wide_but_shallow_expressions_are_not_refused() {
        let source = sluice_crds::SourceSpec::table(
            "t",
            &[("x", sluice_crds::ColumnType::Double, true), ("w", sluice_crds::ColumnType::Double, true)],
        );
        // 200 terms of five operators each: a thousand operators, but
        // only the chain of + nests (about 205 levels).
        let terms: Vec<String> = (0..200).map(|i| format!("(x-{i})*(x-{i})*w")).collect();
        let sql = format!("SELECT {} AS s FROM t", terms.join(" + "));
        crate::plan_query(&sql, std::slice::from_ref(&source)).unwrap();
        // A thousand columns, each a short expression, and a long IN list.
        let items: Vec<String> = (0..1_000).map(|i| format!("x * {i} + w AS c{i}")).collect();
        let list: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
        let sql = format!("SELECT {} FROM t WHERE x IN ({})", items.join(", "), list.join(", "));
        crate::plan_query(&sql, &[source]).unwrap();
    }

    #[test]
    fn a_long_union_chain_is_refused_before_it_is_parsed() {
        let branches: Vec<String> = (0..2_000).map(|i| format!("SELECT v FROM t{i}")).collect();
        let err = crate::plan_query(&branches.join(" UNION ALL "), &[]).unwrap_err();
        assert!(err.message.contains("set operations"), "{err}");
    }

    #[test]
    fn views_that_stack_their_expressions_are_bounded_when_merged() {
        let source = sluice_crds::SourceSpec::table("t", &[("v", sluice_crds::ColumnType::Bigint, true)]);
        let sources = [source];
        // Each view adds 100 levels to the one before: each within the
        // parse-time bound, merged past it.
        let views = |n: usize| {
            let hundred = format!("v{}", "+1".repeat(99));
            let mut sql = format!("WITH w0 AS (SELECT {hundred} AS v FROM t)");
            for i in 1..n {
                sql += &format!(", w{i} AS (SELECT {hundred} AS v FROM w{})", i - 1);
            }
            sql + &format!(" SELECT v FROM w{}", n - 1)
        };
        let err = crate::plan_query(&views(4), &sources).unwrap_err();
        assert!(err.message.contains(&format!("nested more than {MAX_EXPR_DEPTH} levels")), "{err}");
        crate::plan_query(&views(2), &sources).unwrap();
        // Each view reads the one below twice: 2^30 copies, refused after
        // the first few hundred thousand.
        let mut sql = "WITH w0 AS (SELECT v + v AS v FROM t)".to_owned();
        for i in 1..30 {
            sql += &format!(", w{i} AS (SELECT v + v AS v FROM w{})", i - 1);
        }
        sql += " SELECT v FROM w29";
        let err = crate::plan_query(&sql, &sources).unwrap_err();
        assert!(err.message.contains(&format!("more than {MAX_EXPR_NODES} expression nodes")), "{err}");
        assert_eq!(COMPILING.with(Cell::get), 0, "every level entered was left");
    }

    #[test]
    fn compiling_counts_its_levels_and_leaves_every_one() {
        use sqlparser::ast::{BinaryOperator, Ident};
        let mut e = Expr::Identifier(Ident::new("v"));
        for _ in 0..MAX_EXPR_DEPTH {
            e = Expr::BinaryOp {
                left: Box::new(e),
                op: BinaryOperator::Plus,
                right: Box::new(Expr::Identifier(Ident::new("v"))),
            };
        }
        let mut levels = Vec::new();
        let mut at = &e;
        let err = loop {
            match CompileLevel::enter(at) {
                Ok(level) => levels.push(level),
                Err(err) => break err,
            }
            let Expr::BinaryOp { left, .. } = at else { unreachable!() };
            at = left;
        };
        assert_eq!(levels.len(), MAX_EXPR_DEPTH);
        assert!(err.message.contains("levels deep"), "{err}");
        drop(levels);
        assert_eq!(COMPILING.with(Cell::get), 0);
    }

    #[test]
    fn a_query_over_the_length_limit_is_refused_before_parsing() {
        let sql = format!("SELECT v FROM t WHERE v = '{}'", "x".repeat(MAX_SQL_BYTES));
        let source = sluice_crds::SourceSpec::table("t", &[("v", sluice_crds::ColumnType::String, true)]);
        let err = crate::plan_query(&sql, &[source]).unwrap_err();
        assert!(err.message.contains("the most accepted is 1048576"), "{err}");
    }
}
