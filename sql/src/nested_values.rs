//! Reading arrays, maps and rows in SQL: `r.field` and `r.a.b` paths,
//! `arr[i]` (1-based) and `m['k']`, and the functions over them
//! (CARDINALITY, ELEMENT_AT, ARRAY_CONTAINS, ARRAY_POSITION,
//! ARRAY_JOIN / ARRAY_TO_STRING, MAP_KEYS, MAP_VALUES), as Flink SQL
//! spells them.

use sqlparser::ast::{Expr, Ident};

use crate::diagnostic::Located;

use crate::typing::{cast, coerce_literal_to};
use sluice_plan::{DataType, PhysExpr, Scalar, ScalarFunc, SqlError};

/// The functions this file compiles (known beside `KNOWN_FUNCTIONS`).
pub(crate) const NESTED_FUNCTIONS: &[&str] = &[
    "CARDINALITY",
    "ELEMENT_AT",
    "ARRAY_CONTAINS",
    "ARRAY_POSITION",
    "ARRAY_JOIN",
    "ARRAY_TO_STRING",
    "MAP_KEYS",
    "MAP_VALUES",
    "ROW",
];

/// Field `id` of row `e`.
pub(crate) fn row_field(e: PhysExpr, id: &Ident, node: &Expr) -> Result<PhysExpr, SqlError> {
    let t = e.data_type();
    if !matches!(t, DataType::Row(_)) {
        return Err(SqlError::at_span(id.span, format!("`.{}` reads a field of a row, but this is {t}", id.value)));
    }
    let Some((index, data_type)) = t.field(&id.value) else {
        let names: Vec<&str> = t.fields().iter().map(|(n, _)| n.as_str()).collect();
        return Err(SqlError::at_span(
            id.span,
            format!("{t} has no field `{}`{}", id.value, crate::diagnostic::suggestion(&id.value, names.into_iter())),
        ));
    };
    let _ = node;
    Ok(PhysExpr::Func { func: ScalarFunc::RowField(index), args: vec![e], data_type })
}

/// Element `at` of an array (a bigint, 1-based) or the value of key `at`
/// in a map.
pub(crate) fn element_at(e: PhysExpr, at: PhysExpr, node: &Expr) -> Result<PhysExpr, SqlError> {
    let t = e.data_type();
    let (at, data_type) = match t {
        DataType::Array(_) => {
            let at = match at.data_type() {
                DataType::Bigint => at,
                DataType::Null => cast(at, DataType::Bigint),
                other => {
                    return Err(SqlError::at_node(
                        node,
                        format!("an array's index is a bigint (1 is the first), got {other}"),
                    ));
                }
            };
            (at, t.element().unwrap_or(DataType::Null))
        }
        DataType::Map(_) => {
            let (k, v) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            (coerce_key(at, k, node)?, v)
        }
        DataType::Null => return Ok(PhysExpr::literal(Scalar::Null)),
        other => {
            return Err(SqlError::at_node(
                node,
                format!("`[…]` reads an element of an array or map, but this is {other}"),
            ));
        }
    };
    Ok(PhysExpr::Func { func: ScalarFunc::ElementAt, args: vec![e, at], data_type })
}

fn coerce_key(at: PhysExpr, key: DataType, node: &Expr) -> Result<PhysExpr, SqlError> {
    match at.data_type() {
        t if t == key => Ok(at),
        DataType::Null => Ok(cast(at, key)),
        t => Err(SqlError::at_node(node, format!("this map's keys are {key}, got {t}"))),
    }
}

/// The nested function `name` (upper case, one of [`NESTED_FUNCTIONS`]).
pub(crate) fn nested_function(name: &str, mut args: Vec<PhysExpr>, node: &Expr) -> Result<PhysExpr, SqlError> {
    if name == "ROW" {
        return make_row(args, node);
    }
    let (min, max) = match name {
        "CARDINALITY" | "MAP_KEYS" | "MAP_VALUES" => (1, 1),
        "ARRAY_JOIN" | "ARRAY_TO_STRING" => (2, 3),
        _ => (2, 2),
    };
    if args.len() < min || args.len() > max {
        let expected = if min == max { format!("{min}") } else { format!("{min} to {max}") };
        return Err(SqlError::at_node(node, format!("{name} takes {expected} argument(s), got {}", args.len())));
    }
    let first = args.remove(0);
    let t = first.data_type();
    let wrong = |wanted: &str| SqlError::at_node(node, format!("{name} needs {wanted}, got {t}"));
    let func = |func, args, data_type| Ok(PhysExpr::Func { func, args, data_type });
    match name {
        "CARDINALITY" if matches!(t, DataType::Array(_) | DataType::Map(_)) => {
            func(ScalarFunc::Cardinality, vec![first], DataType::Bigint)
        }
        "CARDINALITY" => Err(wrong("an array or map")),
        "ELEMENT_AT" => element_at(first, args.remove(0), node),
        "MAP_KEYS" | "MAP_VALUES" => {
            let Some((k, v)) = t.map_types() else { return Err(wrong("a map")) };
            let element = if name == "MAP_KEYS" { k } else { v };
            let (f, data_type) =
                if name == "MAP_KEYS" { (ScalarFunc::MapKeys, element) } else { (ScalarFunc::MapValues, element) };
            func(f, vec![first], array_of(data_type, node)?)
        }
        "ARRAY_CONTAINS" | "ARRAY_POSITION" => {
            let Some(element) = t.element().filter(|_| matches!(t, DataType::Array(_))) else {
                return Err(wrong("an array"));
            };
            if element.is_nested() {
                return Err(SqlError::at_node(
                    node,
                    format!("{name} compares flat elements; this array holds {element}"),
                ));
            }
            let needle = args.remove(0);
            let needle = match needle.data_type() {
                n if n == element => needle,
                DataType::Null => cast(needle, element),
                _ if needle.is_literal() => coerce_literal_to(needle, element, node)?,
                n => match n.common(element) {
                    Some(c) if c == element => cast(needle, element),
                    _ => return Err(SqlError::at_node(node, format!("{name}: the array holds {element}, got {n}"))),
                },
            };
            let (f, data_type) = if name == "ARRAY_CONTAINS" {
                (ScalarFunc::ArrayContains, DataType::Boolean)
            } else {
                (ScalarFunc::ArrayPosition, DataType::Bigint)
            };
            func(f, vec![first, needle], data_type)
        }
        _ => {
            // ARRAY_JOIN / ARRAY_TO_STRING: elements as text.
            let Some(element) = t.element().filter(|_| matches!(t, DataType::Array(_))) else {
                return Err(wrong("an array"));
            };
            if element.is_nested() {
                return Err(SqlError::at_node(node, format!("{name} joins flat elements; this array holds {element}")));
            }
            let array = if element == DataType::String {
                first
            } else {
                PhysExpr::Cast { expr: Box::new(first), to: array_of(DataType::String, node)? }
            };
            let mut rest = vec![array];
            for a in args {
                rest.push(crate::typing::expect_string(a, node, name)?);
            }
            func(ScalarFunc::ArrayJoin, rest, DataType::String)
        }
    }
}

/// `ARRAY[a, b, …]`: the elements cast to the type they share.
pub(crate) fn make_array(elements: Vec<PhysExpr>, node: &Expr) -> Result<PhysExpr, SqlError> {
    let element = crate::typing::common_type(&elements, "ARRAY[…]", node)?;
    if elements.is_empty() || element == DataType::Null {
        return Err(SqlError::at_node(
            node,
            "ARRAY[…] takes its element type from its elements: give one that is not NULL, or CAST(NULL AS \
             ARRAY<BIGINT>)",
        ));
    }
    let args = elements.into_iter().map(|e| cast(e, element)).collect();
    Ok(PhysExpr::Func { func: ScalarFunc::MakeArray, args, data_type: array_of(element, node)? })
}

/// `MAP {k: v, …}`: keys (string or bigint) and values each cast to the
/// type they share.
pub(crate) fn make_map(args: Vec<PhysExpr>, node: &Expr) -> Result<PhysExpr, SqlError> {
    let (keys, values): (Vec<_>, Vec<_>) = args.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let keys: Vec<PhysExpr> = keys.into_iter().map(|(_, e)| e).collect();
    let values: Vec<PhysExpr> = values.into_iter().map(|(_, e)| e).collect();
    let k = crate::typing::common_type(&keys, "MAP keys", node)?;
    let v = crate::typing::common_type(&values, "MAP values", node)?;
    if !matches!(k, DataType::String | DataType::Bigint) || v == DataType::Null {
        return Err(SqlError::at_node(
            node,
            format!("MAP {{…}} takes string or bigint keys and values of one type that is not NULL, got {k} keys"),
        ));
    }
    let args = keys.into_iter().zip(values).flat_map(|(key, value)| [cast(key, k), cast(value, v)]).collect();
    let data_type = DataType::map(k, v).map_err(|e| SqlError::at_node(node, e.to_string()))?;
    Ok(PhysExpr::Func { func: ScalarFunc::MakeMap, args, data_type })
}

/// `ROW(a, b, …)`: a row of fields `f1`, `f2`, … (PostgreSQL's names).
pub(crate) fn make_row(args: Vec<PhysExpr>, node: &Expr) -> Result<PhysExpr, SqlError> {
    if args.is_empty() {
        return Err(SqlError::at_node(node, "ROW() needs at least one field"));
    }
    let mut fields = Vec::with_capacity(args.len());
    let mut cast_args = Vec::with_capacity(args.len());
    for (i, a) in args.into_iter().enumerate() {
        // A NULL field is a string one, as PostgreSQL types an unknown.
        let t = if a.data_type() == DataType::Null { DataType::String } else { a.data_type() };
        fields.push((format!("f{}", i + 1), t));
        cast_args.push(cast(a, t));
    }
    let data_type = DataType::row(fields).map_err(|e| SqlError::at_node(node, e.to_string()))?;
    Ok(PhysExpr::Func { func: ScalarFunc::MakeRow, args: cast_args, data_type })
}

fn array_of(t: DataType, node: &Expr) -> Result<DataType, SqlError> {
    DataType::array(t).map_err(|e| SqlError::at_node(node, e.to_string()))
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, SourceSpec};

    fn orders() -> SourceSpec {
        let t = |s: &str| ColumnType::parse(s).unwrap();
        SourceSpec::table(
            "orders",
            &[
                ("id", ColumnType::Bigint, true),
                ("items", t("array<row<sku string, qty bigint>>"), false),
                ("attrs", t("map<string, string>"), false),
                ("customer", t("row<name string, addr row<city string>>"), false),
                ("ts", ColumnType::Timestamp, false),
            ],
        )
    }

    fn error(sql: &str) -> String {
        match crate::plan_dataflow(sql, &[orders()], 2) {
            Ok(_) => panic!("planned: {sql}"),
            Err(e) => e.message,
        }
    }

    #[test]
    fn paths_functions_and_unnest_plan() {
        for sql in [
            "SELECT o.customer.addr.city, customer.name, items[1].sku, attrs['k'], CARDINALITY(items) FROM orders o",
            "SELECT id FROM orders WHERE customer = customer AND items <> CAST(items AS ARRAY<STRUCT<sku VARCHAR, qty BIGINT>>)",
            "SELECT o.id, i.sku FROM orders o CROSS JOIN UNNEST(o.items) WITH ORDINALITY AS i(sku, qty, n)",
            "SELECT i.sku, COUNT(*) FROM orders o LEFT JOIN UNNEST(o.items) AS i ON TRUE GROUP BY i.sku",
            "SELECT k, v FROM orders, UNNEST(attrs) AS a(k, v)",
            "SELECT customer, COUNT(*) FROM orders GROUP BY customer",
        ] {
            if let Err(e) = crate::plan_dataflow(sql, &[orders()], 2) {
                panic!("{sql}: {e}");
            }
        }
    }

    /// Flink's `MAP[k, v, …]` is DuckDB's `MAP {k: v, …}`, nested commas
    /// and brackets included; `attrs['k']` stays an element.
    #[test]
    fn flinks_map_constructor_is_a_map_literal() {
        let plan = |sql: &str| crate::plan_dataflow(sql, &[orders()], 2).unwrap().stages.pop().unwrap().plan.outputs;
        assert_eq!(
            plan("SELECT MAP['id', id, 'first', items[1].qty, 'n', CARDINALITY(ARRAY[1, 2])] AS m FROM orders"),
            plan("SELECT MAP {'id': id, 'first': items[1].qty, 'n': CARDINALITY(ARRAY[1, 2])} AS m FROM orders"),
        );
        assert_eq!(plan("SELECT attrs['k'] AS v FROM orders"), plan("SELECT ELEMENT_AT(attrs, 'k') AS v FROM orders"));
        assert!(error("SELECT MAP['a', 1, 'b'] FROM orders").contains("keys and values in pairs"));
    }

    #[test]
    fn what_nested_values_cannot_do_is_refused_naming_it() {
        for (sql, says) in [
            ("SELECT id FROM orders WHERE items < items", "no order"),
            ("SELECT MAX(customer) FROM orders", "MAX orders its values"),
            ("SELECT customer.nam FROM orders", "has no field `nam` (did you mean `name`?)"),
            ("SELECT id.x FROM orders", "reads a field of a row, but this is bigint"),
            ("SELECT items['a'] FROM orders", "an array's index is a bigint"),
            ("SELECT attrs[1] FROM orders", "this map's keys are string"),
            ("SELECT id[1] FROM orders", "reads an element of an array or map, but this is bigint"),
            ("SELECT CARDINALITY(id) FROM orders", "CARDINALITY needs an array or map, got bigint"),
            ("SELECT ARRAY_CONTAINS(items, 1) FROM orders", "compares flat elements"),
            ("SELECT * FROM orders o CROSS JOIN UNNEST(o.id) AS x", "UNNEST takes an array or a map, got bigint"),
            (
                "SELECT * FROM orders o CROSS JOIN UNNEST(o.items) AS i(a)",
                "gives 2 column(s) (sku, qty); the alias names 1",
            ),
            ("SELECT * FROM orders o CROSS JOIN UNNEST(o.attrs) AS a(id, v)", "has the name of another column"),
            ("SELECT * FROM orders o JOIN UNNEST(o.items) AS i ON i.qty > 1", "LEFT JOIN UNNEST(…) ON TRUE"),
            ("SELECT * FROM orders o CROSS JOIN UNNEST(o.items) WITH OFFSET AS i", "WITH ORDINALITY"),
            (
                "SELECT id, ROW_NUMBER() OVER (PARTITION BY id ORDER BY items) AS rn FROM orders",
                "have no order: ORDER BY a field",
            ),
            ("SELECT ARRAY_AGG(id ORDER BY items) FROM orders", "have no order: ORDER BY a field"),
            ("SELECT MAP_AGG(items, id) FROM orders", "MAP_AGG's keys are string or bigint"),
            ("SELECT MAP_AGG(id) FROM orders", "MAP_AGG takes a key and a value"),
            ("SELECT ARRAY_AGG(DISTINCT id) FROM orders", "ARRAY_AGG(DISTINCT …)"),
            ("SELECT ARRAY_AGG(id ORDER BY id NULLS FIRST) FROM orders", "NULLS FIRST / LAST is not supported"),
            ("SELECT SUM(id ORDER BY id) FROM orders", "clauses inside SUM(...) are not supported"),
            (
                "SELECT id, ARRAY_AGG(id) OVER (PARTITION BY customer ORDER BY id) AS a FROM orders",
                "ARRAY_AGG is not supported as a window function",
            ),
        ] {
            let e = error(sql);
            assert!(e.contains(says), "{sql}: {e}");
        }
    }
}
