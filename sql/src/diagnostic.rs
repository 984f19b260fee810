//! Errors about a query, with the line and column they refer to.

use sluice_plan::SqlError;

use sqlparser::ast::Spanned;
use sqlparser::tokenizer::{Location, Span};

/// Constructors of [`SqlError`] from the parser's positions: the plan IR
/// knows nothing of the parser, so they live here, with it.
pub trait Located: Sized {
    fn at(location: Location, message: impl Into<String>) -> Self;
    fn at_span(span: Span, message: impl Into<String>) -> Self;
    /// An error located at an AST node.
    fn at_node(node: &impl Spanned, message: impl Into<String>) -> Self;
    /// Converts a sqlparser error, whose message ends with
    /// "at Line: L, Column: C", into a positioned error.
    fn from_parser(err: &sqlparser::parser::ParserError) -> Self;
}

impl Located for SqlError {
    fn at(location: Location, message: impl Into<String>) -> Self {
        Self { line: location.line, column: location.column, message: message.into() }
    }

    fn at_span(span: Span, message: impl Into<String>) -> Self {
        Self::at(span.start, message)
    }

    fn at_node(node: &impl Spanned, message: impl Into<String>) -> Self {
        Self::at_span(node.span(), message)
    }

    fn from_parser(err: &sqlparser::parser::ParserError) -> Self {
        use sqlparser::parser::ParserError as P;
        let text = match err {
            P::TokenizerError(m) | P::ParserError(m) => m.clone(),
            P::RecursionLimitExceeded => {
                return Self::unpositioned("query is nested too deeply (more than 50 levels)");
            }
        };
        match text.rfind(" at Line: ") {
            Some(at) => {
                let (message, position) = text.split_at(at);
                let mut numbers = position
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty())
                    .filter_map(|s| s.parse::<u64>().ok());
                let line = numbers.next().unwrap_or(0);
                let column = numbers.next().unwrap_or(0);
                Self { line, column, message: format!("syntax error: {}", message.trim()) }
            }
            None => Self::unpositioned(format!("syntax error: {text}")),
        }
    }
}

/// " (did you mean `x`?)" when one of `candidates` is close to `name`, or
/// is a nested field of that name (`country` for a declared
/// `meta.country`, which SQL writes whole).
pub fn suggestion<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let lower = name.to_ascii_lowercase();
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let nested =
        candidates.iter().find(|c| c.rsplit_once('.').is_some_and(|(_, field)| field.eq_ignore_ascii_case(name)));
    if let Some(c) = nested {
        return format!(" (did you mean `{c}`? a nested field is named with its path)");
    }
    let within = |c: &str| (c.len().max(3) / 3).max(2);
    let chars = lower.chars().count();
    candidates
        .into_iter()
        // The distance is at least the difference in length: a name far
        // longer than every candidate (a 20,000-character literal) costs
        // nothing, where the distance itself is quadratic.
        .filter(|c| chars.abs_diff(c.chars().count()) <= within(c))
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= within(c))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_positions_are_extracted() {
        let e = sqlparser::parser::ParserError::ParserError(
            "Expected: an expression, found: FROM at Line: 2, Column: 8".into(),
        );
        let s = SqlError::from_parser(&e);
        assert_eq!((s.line, s.column), (2, 8));
        assert_eq!(s.to_string(), "line 2, column 8: syntax error: Expected: an expression, found: FROM");
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(suggestion("symbl", ["symbol", "price"]), " (did you mean `symbol`?)");
        assert_eq!(suggestion("PRICE", ["symbol", "price"]), " (did you mean `price`?)");
        // A 60,000-character name against 600 zone names: the distance
        // to each would take seconds (it took the fuzzer's 10 s watchdog).
        let long = format!("Europe/Paris{}", "(n+".repeat(20_000));
        let zones: Vec<String> = (0..600).map(|i| format!("Region/City_{i}")).collect();
        let started = std::time::Instant::now();
        assert_eq!(suggestion(&long, zones.iter().map(String::as_str)), "");
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(
            suggestion("country", ["symbol", "meta.country"]),
            " (did you mean `meta.country`? a nested field is named with its path)"
        );
        assert_eq!(suggestion("zzz", ["symbol", "price"]), "");
    }
}
