//! Names resolved against the source: columns, qualifiers, and the scope of
//! WHERE, GROUP BY and function arguments.

use crate::diagnostic::Located;
use sqlparser::ast::{Expr, Function, Ident, SelectItem};

use crate::compile::{Scope, compile};
use crate::diagnostic::suggestion;
use sluice_plan::AggFunc;
use sluice_plan::{OutputColumn, PhysExpr, SourceSchema, SqlError};

pub(crate) const WINDOW_START: &str = "window_start";
pub(crate) const WINDOW_END: &str = "window_end";

pub(super) fn output_name(item: &SelectItem, index: usize) -> String {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
        SelectItem::UnnamedExpr(Expr::Identifier(id)) => id.value.clone(),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => {
            ids.last().map(|i| i.value.clone()).unwrap_or_default()
        }
        SelectItem::UnnamedExpr(Expr::Function(f)) => f.name.to_string().to_ascii_lowercase(),
        _ => format!("expr{index}"),
    }
}

/// A span-only node, to point errors at a clause the AST does not keep.
pub(super) struct WindowSpanned(pub(super) sqlparser::tokenizer::Span);

impl sqlparser::ast::Spanned for WindowSpanned {
    fn span(&self) -> sqlparser::tokenizer::Span {
        self.0
    }
}

/// The span of an unquoted identifier spelled `keyword` inside `e`.
pub(super) fn find_keyword_ident(e: &Expr, keyword: &str) -> Option<sqlparser::tokenizer::Span> {
    match e {
        Expr::Identifier(id) if id.quote_style.is_none() && id.value.eq_ignore_ascii_case(keyword) => Some(id.span),
        Expr::BinaryOp { left, right, .. } => {
            find_keyword_ident(left, keyword).or_else(|| find_keyword_ident(right, keyword))
        }
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => find_keyword_ident(expr, keyword),
        _ => None,
    }
}

pub(super) fn group_window_function(f: &Function) -> Option<&'static str> {
    match f.name.to_string().to_ascii_uppercase().as_str() {
        "TUMBLE" => Some("TUMBLE"),
        "HOP" => Some("HOP"),
        "SESSION" => Some("SESSION"),
        _ => None,
    }
}

pub(super) fn is_window_bound_function(name: &str) -> Option<&'static str> {
    match name {
        "TUMBLE_START" | "HOP_START" | "SESSION_START" => Some(WINDOW_START),
        "TUMBLE_END" | "HOP_END" | "SESSION_END" => Some(WINDOW_END),
        _ => None,
    }
}

pub(super) fn split_column_ref<'a>(
    idents: &'a [Ident],
    qualifiers: &[String],
    node: &Expr,
) -> Result<&'a Ident, SqlError> {
    match idents {
        [name] => Ok(name),
        [q, name] => {
            if qualifiers.contains(&q.value.to_ascii_lowercase()) {
                Ok(name)
            } else {
                Err(SqlError::at_span(
                    q.span,
                    format!("unknown table `{}` (the query reads `{}`)", q.value, qualifiers[0]),
                ))
            }
        }
        _ => Err(SqlError::at_node(node, "nested field access is not supported")),
    }
}

/// Resolves names against the source (WHERE, GROUP BY, function arguments).
pub(super) struct InputScope<'a> {
    pub(super) source: &'a SourceSchema,
    pub(super) qualifiers: &'a [String],
    pub(super) used: &'a mut Vec<bool>,
    pub(super) context: &'static str,
}

/// Compiles a SELECT list in `scope`: `*` as every column of the source
/// (`columns`, resolved by name like any reference), each expression as
/// written, named by its alias or its text.
pub(super) fn select_list(
    items: &[SelectItem],
    columns: &[String],
    scope: &mut dyn Scope,
) -> Result<Vec<OutputColumn>, SqlError> {
    let mut outputs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                for name in columns {
                    let ident = Ident::new(name);
                    let expr = scope.resolve_column(std::slice::from_ref(&ident), &Expr::Identifier(ident.clone()))?;
                    outputs.push(OutputColumn { name: name.clone(), expr });
                }
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let expr = compile(e, scope)?;
                outputs.push(OutputColumn { name: output_name(item, i), expr });
            }
            SelectItem::ExprWithAliases { expr, .. } => {
                return Err(SqlError::at_node(expr, "multiple aliases are not supported"));
            }
        }
    }
    Ok(outputs)
}

pub(super) fn resolve_input(
    source: &SourceSchema,
    qualifiers: &[String],
    used: &mut [bool],
    idents: &[Ident],
    node: &Expr,
) -> Result<PhysExpr, SqlError> {
    let name = split_column_ref(idents, qualifiers, node)?;
    match source.schema.index_of(&name.value) {
        Some(index) => {
            used[index] = true;
            Ok(PhysExpr::Column { index, data_type: source.schema.fields[index].data_type })
        }
        None => {
            let extra = if name.value.eq_ignore_ascii_case(WINDOW_START) || name.value.eq_ignore_ascii_case(WINDOW_END)
            {
                " (window_start and window_end exist only in the SELECT list of a windowed GROUP BY)".to_owned()
            } else {
                suggestion(&name.value, source.schema.names())
            };
            Err(SqlError::at_span(
                name.span,
                format!("unknown column `{}` in source `{}`{extra}", name.value, source.name),
            ))
        }
    }
}

impl Scope for InputScope<'_> {
    fn resolve_column(&mut self, idents: &[Ident], node: &Expr) -> Result<PhysExpr, SqlError> {
        resolve_input(self.source, self.qualifiers, self.used, idents, node)
    }

    fn resolve_call(&mut self, call: &Function, node: &Expr) -> Option<Result<PhysExpr, SqlError>> {
        let name = call.name.to_string().to_ascii_uppercase();
        if call.over.is_some() {
            return Some(Err(SqlError::at_node(node, format!("window functions are not allowed in {}", self.context))));
        }
        if AggFunc::from_name(&name).is_some() {
            return Some(Err(SqlError::at_node(
                node,
                format!("aggregate functions are not allowed in {}", self.context),
            )));
        }
        if group_window_function(call).is_some() || is_window_bound_function(&name).is_some() {
            return Some(Err(SqlError::at_node(node, format!("{name} is only allowed in a windowed GROUP BY query"))));
        }
        None
    }
}
