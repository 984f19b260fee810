//! Common subexpressions of a filter-and-project plan, evaluated once per
//! batch.
//!
//! Queries repeat costly expressions: Nexmark q21 tests
//! `REGEXP_EXTRACT(url, …)` in WHERE and returns it from a CASE in SELECT,
//! and compares `lower(channel)` five times. Evaluated as written, the
//! regular expression ran twice per record and `lower` five times — a third
//! of the query's time. [`Plan::share_subexpressions`] moves each costly
//! subexpression that occurs more than once into [`Plan::shared`]; the
//! engine evaluates those over the batch before the filter, as extra
//! columns after the source's, and every occurrence reads the column.
//!
//! Only plans whose operator passes its input through with no columns of
//! its own (filter and project) are rewritten, where the filter and the
//! SELECT list are evaluated over the same rows; and every expression is
//! total (a failed conversion or a division by zero is NULL, not an
//! error), so evaluating a subexpression once for every row — also rows a
//! CASE branch or the filter would not have reached — changes no result.

use crate::{OperatorPlan, PhysExpr, Plan};

impl Plan {
    /// Hoists every costly subexpression the filter, outputs and keys
    /// evaluate more than once into [`Plan::shared`] (smallest first, so a
    /// shared expression reads only the columns of those before it).
    pub fn share_subexpressions(&mut self) {
        if !matches!(self.operator, OperatorPlan::Stateless) || !self.shared.is_empty() {
            return;
        }
        let base = self.input_width();
        while let Some(common) = self.most_shared() {
            let column = PhysExpr::Column { index: base + self.shared.len(), data_type: common.data_type() };
            for root in self.roots_mut() {
                replace(root, &common, &column);
            }
            self.shared.push(common);
        }
    }

    fn roots_mut(&mut self) -> impl Iterator<Item = &mut PhysExpr> {
        self.filter
            .iter_mut()
            .chain(self.outputs.iter_mut().map(|o| &mut o.expr))
            .chain(self.keys.iter_mut().map(|k| &mut k.expr))
            .chain(self.shared.iter_mut())
    }

    /// The smallest costly subexpression occurring at least twice (the
    /// first such, in evaluation order, among equals).
    fn most_shared(&self) -> Option<PhysExpr> {
        let mut seen: Vec<(&PhysExpr, usize)> = Vec::new();
        let roots = self
            .filter
            .iter()
            .chain(self.outputs.iter().map(|o| &o.expr))
            .chain(self.keys.iter().map(|k| &k.expr))
            .chain(self.shared.iter());
        for root in roots {
            visit(root, &mut |e| {
                if costly(e) {
                    match seen.iter_mut().find(|(s, _)| *s == e) {
                        Some((_, n)) => *n += 1,
                        None => seen.push((e, 1)),
                    }
                }
            });
        }
        seen.iter().filter(|(_, n)| *n >= 2).min_by_key(|(e, _)| size(e)).map(|(e, _)| (*e).clone())
    }
}

/// Worth evaluating once: string work, pattern matching and branching.
/// Column reads, literals, casts, arithmetic and comparisons cost about
/// what reading a shared column does.
fn costly(e: &PhysExpr) -> bool {
    matches!(
        e,
        PhysExpr::Func { .. }
            | PhysExpr::Like { .. }
            | PhysExpr::Concat(_)
            | PhysExpr::ConcatOp(..)
            | PhysExpr::Case { .. }
            | PhysExpr::Coalesce { .. }
    )
}

fn size(e: &PhysExpr) -> usize {
    let mut n = 0;
    visit(e, &mut |_| n += 1);
    n
}

/// Calls `f` on `e` and every subexpression, children first.
fn visit<'a>(e: &'a PhysExpr, f: &mut impl FnMut(&'a PhysExpr)) {
    for child in e.children() {
        visit(child, f);
    }
    f(e);
}

/// Replaces every occurrence of `from` in `e` with `to`.
fn replace(e: &mut PhysExpr, from: &PhysExpr, to: &PhysExpr) {
    if e == from {
        *e = to.clone();
        return;
    }
    for child in e.children_mut() {
        replace(child, from, to);
    }
}
