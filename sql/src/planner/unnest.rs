//! An UNNEST clause ([`crate::unnest`]) planned over the query's source:
//! the array compiled, its columns typed and named.

use crate::compile::{Scope, compile};
use crate::diagnostic::Located;
use crate::unnest::UnnestClause;
use sluice_plan::{DataType, Field, SqlError, UnnestPlan};

/// What the planner makes of an [`UnnestClause`]: the plan, and the
/// columns it adds, named.
pub(crate) struct UnnestColumns {
    pub plan: UnnestPlan,
    pub fields: Vec<Field>,
    /// The alias its columns may be qualified by.
    pub qualifier: Option<String>,
}

/// Plans `clause` over the source (`scope`), naming its columns; `taken`
/// are the source's column names, which they may not repeat.
pub(crate) fn plan_unnest(
    clause: &UnnestClause,
    scope: &mut dyn Scope,
    taken: &[String],
) -> Result<UnnestColumns, SqlError> {
    let array = compile(&clause.array, scope)?;
    let t = array.data_type();
    let element = match t {
        DataType::Array(_) | DataType::Map(_) => t.element().unwrap_or(DataType::Null),
        other => {
            return Err(SqlError::at_node(&clause.array, format!("UNNEST takes an array or a map, got {other}")));
        }
    };
    let split_fields = matches!(element, DataType::Row(_));
    let mut defaults: Vec<(String, DataType)> = if split_fields {
        element.fields().to_vec()
    } else {
        let name = clause.alias.as_ref().map_or("unnest".to_owned(), |a| a.name.value.clone());
        vec![(name, element)]
    };
    if clause.ordinality {
        defaults.push(("ordinality".to_owned(), DataType::Bigint));
    }
    let given = clause.alias.as_ref().map(|a| &a.columns[..]).unwrap_or_default();
    if !given.is_empty() && given.len() != defaults.len() {
        let what: Vec<&str> = defaults.iter().map(|(n, _)| n.as_str()).collect();
        return Err(SqlError::at_span(
            clause.span,
            format!(
                "UNNEST of {t} gives {} column(s) ({}); the alias names {}",
                defaults.len(),
                what.join(", "),
                given.len()
            ),
        ));
    }
    let mut fields = Vec::with_capacity(defaults.len());
    for (i, (name, data_type)) in defaults.into_iter().enumerate() {
        let name = given.get(i).map_or(name, |c| c.name.value.clone());
        if taken.iter().chain(fields.iter().map(|f: &Field| &f.name)).any(|n| n.eq_ignore_ascii_case(&name)) {
            return Err(SqlError::at_span(
                clause.span,
                format!(
                    "UNNEST's column `{name}` has the name of another column of the query: name the unnested \
                     columns with AS alias(a, b, …)"
                ),
            ));
        }
        fields.push(Field { name, data_type });
    }
    Ok(UnnestColumns {
        plan: UnnestPlan {
            array,
            left: clause.left,
            split_fields,
            ordinality: clause.ordinality,
            names: fields.iter().map(|f| f.name.clone()).collect(),
            keep: Vec::new(),
        },
        fields,
        qualifier: clause.alias.as_ref().map(|a| a.name.value.to_ascii_lowercase()),
    })
}
