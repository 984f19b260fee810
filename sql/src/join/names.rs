//! The names the join's layout reserves, and a column reference's output
//! name: the other files of the join all read them, so they sit in a leaf
//! that imports none of those files.

use sqlparser::ast::{Expr, Ident};

/// The joined layout's BOOLEAN column: true on the right side's rows.
pub(super) const RIGHT: &str = "__right";
/// The joined layout's event-time column: each row's own side's.
pub(super) const TIME: &str = "__time";
/// The name the outer query reads the joined layout by.
pub(super) const JOINED: &str = "__join";
/// A table's field, and the joined layout's BOOLEAN column, that marks a
/// deletion of the row with the key.
pub(crate) const DELETED: &str = "__deleted";

/// The output name of an unaliased column reference: the column's own.
pub(super) fn column_name(e: &Expr) -> Option<Ident> {
    match e {
        Expr::Identifier(id) => Some(id.clone()),
        Expr::CompoundIdentifier(ids) => ids.last().cloned(),
        _ => None,
    }
}
