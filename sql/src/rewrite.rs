//! Streaming clauses that standard SQL (and sqlparser) lacks.
//!
//! The query is tokenized once. The streaming clauses are taken out of the
//! token stream, and the seeds' `ROWS WINDOW BUFFER n ROWS` frame is replaced
//! by its standard equivalent, before the remaining tokens go to sqlparser.
//! Because the parser consumes the original tokens, every span in the AST —
//! and so every error message — points into the text the user wrote.
//!
//! Recognised clauses (at the top level of the query):
//! * `WINDOW TUMBLING ([time_col,] INTERVAL '1' MINUTE)` (also `SIZE 1 MINUTE`)
//! * `WINDOW HOPPING ([time_col,] size, advance)` (also `SIZE …, ADVANCE BY …`)
//! * `WINDOW SESSION ([time_col,] gap)`
//! * `EMIT CHANGES`, `EMIT FINAL`
//! * after a joined table's name: `FOR SYSTEM_TIME AS OF s.ts` (sqlparser's
//!   generic dialect does not parse it)
//! * inside `OVER (…)`: `ROWS WINDOW BUFFER n ROWS` = `ROWS BETWEEN n-1 PRECEDING AND CURRENT ROW`
//! * Flink's `MAP[k1, v1, k2, v2]` = `MAP {k1: v1, k2: v2}`

use crate::diagnostic::Located;
use sqlparser::ast::{DateTimeField, Expr, Query, Statement, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer, Whitespace, Word};

use sluice_plan::SqlError;

/// A parsed query and the streaming clauses taken out of it.
#[derive(Debug)]
pub struct ParsedQuery {
    pub query: Box<Query>,
    pub window: Option<WindowClause>,
    pub emit: Option<EmitClause>,
    /// Where top-level clauses the AST keeps no position for begin
    /// (ORDER, LIMIT, WITH, UNION...), for error messages.
    pub clauses: Vec<(&'static str, Span)>,
    /// The query was a top-N over its subquery, which `query` now is
    /// (see `crate::top_n`).
    pub top_n: Option<TopNSpec>,
    /// Each `FOR SYSTEM_TIME AS OF <column>` after a table in FROM, in
    /// the order written.
    pub as_of: Vec<AsOf>,
    /// The query's `CROSS JOIN UNNEST(…)`, taken out of FROM
    /// (`crate::unnest`).
    pub unnest: Option<crate::unnest::UnnestClause>,
}

impl ParsedQuery {
    /// A query planned as written: no streaming clauses of its own (a
    /// subquery, or a query the planner rewrote).
    pub fn of(query: Query) -> Self {
        Self {
            query: Box::new(query),
            window: None,
            emit: None,
            clauses: Vec::new(),
            top_n: None,
            as_of: Vec::new(),
            unnest: None,
        }
    }
}

/// `FOR SYSTEM_TIME AS OF <column>`: the temporal join's version time.
#[derive(Debug, Clone)]
pub struct AsOf {
    /// The column, as written (`s.ts` or `ts`).
    pub column: Vec<sqlparser::ast::Ident>,
    /// Where `FOR` is.
    pub span: Span,
}

/// What a top-N query keeps of its outer SELECT once its subquery (the
/// one with `ROW_NUMBER() OVER (…)`) is planned in its place.
#[derive(Debug, Clone)]
pub struct TopNSpec {
    /// `rn <= limit`.
    pub limit: u64,
    /// The subquery's name for the row number.
    pub row_number: String,
    /// The outer SELECT list: the subquery's columns, by name.
    pub outer: Vec<sqlparser::ast::SelectItem>,
}

/// Keywords whose clause positions [`ParsedQuery::clauses`] records.
const POSITIONED: [&str; 9] = ["ORDER", "LIMIT", "OFFSET", "FETCH", "WITH", "UNION", "EXCEPT", "INTERSECT", "ROLLUP"];

impl ParsedQuery {
    /// Position of the first top-level `keyword`, if present.
    pub fn clause(&self, keyword: &str) -> Option<Span> {
        self.clauses.iter().find(|(k, _)| *k == keyword).map(|(_, s)| *s)
    }
}

/// A time window declared with a `WINDOW` clause.
#[derive(Clone, Debug)]
pub struct WindowClause {
    pub kind: WindowClauseKind,
    /// The event-time column, when named; otherwise the source's eventTime column.
    pub time_column: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowClauseKind {
    Tumbling { size_ms: i64 },
    Hopping { size_ms: i64, advance_ms: i64 },
    Session { gap_ms: i64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmitKind {
    Changes,
    Final,
}

#[derive(Clone, Copy, Debug)]
pub struct EmitClause {
    pub kind: EmitKind,
    pub span: Span,
}

/// Parses one SELECT statement with streaming clauses.
pub fn parse(sql: &str) -> Result<ParsedQuery, SqlError> {
    crate::depth::check_length(sql)?;
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::at(e.location, format!("syntax error: {}", e.message)))?;
    crate::depth::check_operator_runs(&tokens)?;
    let clauses = top_level_clauses(&tokens);
    let mut rewriter = Rewriter { tokens, window: None, emit: None, as_of: Vec::new() };
    rewriter.rewrite()?;
    let Rewriter { tokens, window, emit, as_of } = rewriter;
    let statements = Parser::new(&dialect)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|e| SqlError::from_parser(&e))?;
    let mut statements = statements.into_iter();
    let (Some(first), None) = (statements.next(), statements.next()) else {
        return Err(SqlError::unpositioned("expected exactly one SELECT statement"));
    };
    // Before any pass that recurses over the whole tree.
    crate::depth::check_nesting(&first)?;
    match first {
        Statement::Query(mut query) => {
            crate::agg_filter::rewrite_aggregate_filters(&mut query);
            let unnest = crate::unnest::take_unnest(&mut query)?;
            Ok(ParsedQuery { query, window, emit, clauses, top_n: None, as_of, unnest })
        }
        other => Err(SqlError::unpositioned(format!(
            "only SELECT queries can run as stream jobs, found: {}",
            other.to_string().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        ))),
    }
}

fn top_level_clauses(tokens: &[TokenWithSpan]) -> Vec<(&'static str, Span)> {
    let mut depth = 0usize;
    let mut out = Vec::new();
    for t in tokens {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0
            && let Some(k) = POSITIONED.iter().find(|k| word_is(t, k))
            && !out.iter().any(|(seen, _)| seen == k)
        {
            out.push((*k, t.span));
        }
    }
    out
}

struct Rewriter {
    tokens: Vec<TokenWithSpan>,
    window: Option<WindowClause>,
    emit: Option<EmitClause>,
    as_of: Vec<AsOf>,
}

fn word_is(t: &TokenWithSpan, value: &str) -> bool {
    matches!(&t.token, Token::Word(Word { value: v, quote_style: None, .. }) if v.eq_ignore_ascii_case(value))
}

fn is_ws(t: &TokenWithSpan) -> bool {
    matches!(t.token, Token::Whitespace(_))
}

impl Rewriter {
    /// Index of the next non-whitespace token at or after `i`.
    fn next_significant(&self, mut i: usize) -> Option<usize> {
        while i < self.tokens.len() {
            if !is_ws(&self.tokens[i]) {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Index of the `)` matching the `(` at `open`.
    fn matching_paren(&self, open: usize) -> Result<usize, SqlError> {
        let mut depth = 0usize;
        for (i, t) in self.tokens.iter().enumerate().skip(open) {
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(i);
                    }
                }
                _ => {}
            }
        }
        Err(SqlError::at_span(self.tokens[open].span, "syntax error: unbalanced parenthesis"))
    }

    /// Flink's map constructor `MAP[k1, v1, k2, v2]` at `map`, as the
    /// `MAP {k1: v1, k2: v2}` sqlparser reads: brackets become braces and
    /// every other top-level comma a colon, each token keeping its span.
    /// `map[x]` (one value: an element of a column named `map`) is left.
    fn rewrite_map_brackets(&mut self, map: usize) -> Result<(), SqlError> {
        let Some(open) = self.next_significant(map + 1) else { return Ok(()) };
        if self.tokens[open].token != Token::LBracket {
            return Ok(());
        }
        let mut depth = 0usize;
        let mut commas = Vec::new();
        let mut close = None;
        for (i, t) in self.tokens.iter().enumerate().skip(open) {
            match t.token {
                Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
                Token::RParen | Token::RBracket | Token::RBrace => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                Token::Comma if depth == 1 => commas.push(i),
                _ => {}
            }
        }
        let Some(close) = close else {
            return Err(SqlError::at_span(self.tokens[open].span, "syntax error: MAP[ without its ]"));
        };
        if commas.is_empty() {
            return Ok(());
        }
        if commas.len() % 2 == 0 {
            return Err(SqlError::at_span(
                self.tokens[map].span,
                "MAP[…] takes keys and values in pairs: MAP[k1, v1, k2, v2]",
            ));
        }
        self.tokens[open].token = Token::LBrace;
        self.tokens[close].token = Token::RBrace;
        for &c in commas.iter().step_by(2) {
            self.tokens[c].token = Token::Colon;
        }
        Ok(())
    }

    fn rewrite(&mut self) -> Result<(), SqlError> {
        let mut depth = 0usize;
        let mut i = 0;
        while i < self.tokens.len() {
            match self.tokens[i].token {
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                _ => {}
            }
            if word_is(&self.tokens[i], "OVER") {
                self.rewrite_rows_buffer(i)?;
            } else if word_is(&self.tokens[i], "MAP") {
                self.rewrite_map_brackets(i)?;
            } else if word_is(&self.tokens[i], "FOR")
                && let Some(end) = self.take_as_of(i)?
            {
                self.tokens.drain(i..=end);
                continue;
            } else if depth == 0 && word_is(&self.tokens[i], "WINDOW") {
                if let Some(kind_at) = self.next_significant(i + 1)
                    && ["TUMBLING", "HOPPING", "SESSION"].iter().any(|k| word_is(&self.tokens[kind_at], k))
                {
                    let end = self.take_window(i, kind_at)?;
                    self.tokens.drain(i..=end);
                    continue;
                }
            } else if depth == 0 && word_is(&self.tokens[i], "EMIT") {
                let Some(mode_at) = self.next_significant(i + 1) else {
                    return Err(SqlError::at_span(self.tokens[i].span, "EMIT must be followed by CHANGES or FINAL"));
                };
                let kind = if word_is(&self.tokens[mode_at], "CHANGES") {
                    EmitKind::Changes
                } else if word_is(&self.tokens[mode_at], "FINAL") {
                    EmitKind::Final
                } else {
                    return Err(SqlError::at_span(
                        self.tokens[mode_at].span,
                        "EMIT must be followed by CHANGES or FINAL",
                    ));
                };
                if self.emit.is_some() {
                    return Err(SqlError::at_span(self.tokens[i].span, "EMIT given twice"));
                }
                self.emit = Some(EmitClause { kind, span: self.tokens[i].span });
                self.tokens.drain(i..=mode_at);
                continue;
            }
            i += 1;
        }
        Ok(())
    }

    /// Takes `FOR SYSTEM_TIME AS OF <column>` starting at `start`, if that
    /// is what is there; returns the index of its last token.
    fn take_as_of(&mut self, start: usize) -> Result<Option<usize>, SqlError> {
        let mut at = start;
        for word in ["SYSTEM_TIME", "AS", "OF"] {
            match self.next_significant(at + 1) {
                Some(next) if word_is(&self.tokens[next], word) => at = next,
                _ => return Ok(None),
            }
        }
        let span = self.tokens[start].span;
        let mut column = Vec::new();
        while let Some(next) = self.next_significant(at + 1) {
            match &self.tokens[next].token {
                Token::Word(w) if column.is_empty() || matches!(self.tokens[at].token, Token::Period) => {
                    let mut ident = w.to_ident(self.tokens[next].span);
                    ident.span = self.tokens[next].span;
                    column.push(ident);
                }
                Token::Period if !column.is_empty() && !matches!(self.tokens[at].token, Token::Period) => {}
                _ => break,
            }
            at = next;
        }
        if column.is_empty() || matches!(self.tokens[at].token, Token::Period) {
            return Err(SqlError::at_span(
                span,
                "FOR SYSTEM_TIME AS OF takes the stream's event-time column, as in FOR SYSTEM_TIME AS OF o.order_time",
            ));
        }
        self.as_of.push(AsOf { column, span });
        Ok(Some(at))
    }

    /// Parses `WINDOW <kind> ( args )` starting at `start`; returns the index
    /// of its closing parenthesis.
    fn take_window(&mut self, start: usize, kind_at: usize) -> Result<usize, SqlError> {
        let span = self.tokens[start].span;
        if self.window.is_some() {
            return Err(SqlError::at_span(span, "only one WINDOW clause is allowed"));
        }
        let kind_word = match &self.tokens[kind_at].token {
            Token::Word(w) => w.value.to_ascii_uppercase(),
            _ => String::new(),
        };
        let open =
            self.next_significant(kind_at + 1).filter(|&o| self.tokens[o].token == Token::LParen).ok_or_else(|| {
                SqlError::at_span(self.tokens[kind_at].span, format!("expected ( after WINDOW {kind_word}"))
            })?;
        let close = self.matching_paren(open)?;
        // Split the arguments on top-level commas.
        let mut args: Vec<Vec<TokenWithSpan>> = vec![Vec::new()];
        let mut depth = 0usize;
        for t in &self.tokens[open + 1..close] {
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                Token::Comma if depth == 0 => {
                    args.push(Vec::new());
                    continue;
                }
                _ => {}
            }
            if let Some(last) = args.last_mut() {
                last.push(t.clone());
            }
        }
        let mut time_column = None;
        let mut durations: Vec<(Option<String>, i64, Span)> = Vec::new();
        for arg in args {
            let significant: Vec<&TokenWithSpan> = arg.iter().filter(|t| !is_ws(t)).collect();
            let Some(first) = significant.first() else {
                return Err(SqlError::at_span(self.tokens[open].span, "empty argument in WINDOW clause"));
            };
            match parse_duration_arg(&significant)? {
                Some((label, ms)) => durations.push((label, ms, first.span)),
                None if time_column.is_none() && durations.is_empty() => {
                    let expr = Parser::new(&GenericDialect {})
                        .with_tokens_with_locations(arg.clone())
                        .parse_expr()
                        .map_err(|e| SqlError::from_parser(&e))?;
                    time_column = Some(expr);
                }
                None => {
                    return Err(SqlError::at_span(
                        first.span,
                        "expected a duration such as INTERVAL '1' MINUTE in the WINDOW clause",
                    ));
                }
            }
        }
        let wrong_arity = |expected: &str| {
            SqlError::at_span(span, format!("WINDOW {kind_word} takes {expected}, got {} duration(s)", durations.len()))
        };
        let kind = match kind_word.as_str() {
            "TUMBLING" => match durations.as_slice() {
                [(_, size_ms, _)] => WindowClauseKind::Tumbling { size_ms: *size_ms },
                _ => return Err(wrong_arity("a size")),
            },
            "HOPPING" => match durations.as_slice() {
                [(_, size_ms, _), (_, advance_ms, s)] => {
                    if advance_ms > size_ms {
                        return Err(SqlError::at_span(*s, "the hop advance must not exceed the window size"));
                    }
                    if size_ms / advance_ms > 1000 {
                        return Err(SqlError::at_span(*s, "a record would fall into more than 1000 hopping windows"));
                    }
                    WindowClauseKind::Hopping { size_ms: *size_ms, advance_ms: *advance_ms }
                }
                _ => return Err(wrong_arity("a size and an advance")),
            },
            _ => match durations.as_slice() {
                [(_, gap_ms, _)] => WindowClauseKind::Session { gap_ms: *gap_ms },
                _ => return Err(wrong_arity("a gap")),
            },
        };
        self.window = Some(WindowClause { kind, time_column, span });
        Ok(close)
    }

    /// Replaces `ROWS WINDOW BUFFER n ROWS` inside the OVER clause at `over`
    /// with `ROWS BETWEEN n-1 PRECEDING AND CURRENT ROW`, placed at the end of
    /// the clause where the standard grammar expects the frame.
    fn rewrite_rows_buffer(&mut self, over: usize) -> Result<(), SqlError> {
        let Some(open) = self.next_significant(over + 1).filter(|&o| self.tokens[o].token == Token::LParen) else {
            return Ok(());
        };
        let close = self.matching_paren(open)?;
        let significant: Vec<usize> = (open + 1..close).filter(|&i| !is_ws(&self.tokens[i])).collect();
        let Some(pos) = significant.windows(5).position(|w| {
            word_is(&self.tokens[w[0]], "ROWS")
                && word_is(&self.tokens[w[1]], "WINDOW")
                && word_is(&self.tokens[w[2]], "BUFFER")
                && word_is(&self.tokens[w[4]], "ROWS")
        }) else {
            return Ok(());
        };
        let idx = &significant[pos..pos + 5];
        let n_token = &self.tokens[idx[2 + 1]];
        let n: u64 = match &n_token.token {
            Token::Number(s, _) => s.parse().unwrap_or(0),
            _ => 0,
        };
        if n == 0 {
            return Err(SqlError::at_span(n_token.span, "ROWS WINDOW BUFFER needs a positive whole number of rows"));
        }
        let span = n_token.span;
        let mk = |token: Token| TokenWithSpan { token, span };
        let space = || mk(Token::Whitespace(Whitespace::Space));
        let frame = vec![
            space(),
            mk(Token::make_keyword("ROWS")),
            space(),
            mk(Token::make_keyword("BETWEEN")),
            space(),
            mk(Token::Number((n - 1).to_string(), false)),
            space(),
            mk(Token::make_keyword("PRECEDING")),
            space(),
            mk(Token::make_keyword("AND")),
            space(),
            mk(Token::make_keyword("CURRENT")),
            space(),
            mk(Token::make_keyword("ROW")),
            space(),
        ];
        // Insert at the closing parenthesis first so earlier indices stay valid.
        self.tokens.splice(close..close, frame);
        let (first, last) = (idx[0], idx[4]);
        self.tokens.drain(first..=last);
        Ok(())
    }
}

/// Recognises a duration argument: `INTERVAL '1' MINUTE`, `INTERVAL '1 minute'`,
/// `1 MINUTE`, optionally labelled `SIZE`, `ADVANCE BY`, `GAP`. `Ok(None)`
/// means the argument is not a duration (it may be the time column).
fn parse_duration_arg(tokens: &[&TokenWithSpan]) -> Result<Option<(Option<String>, i64)>, SqlError> {
    let mut rest = tokens;
    let mut label = None;
    if let Some(first) = rest.first()
        && ["SIZE", "ADVANCE", "GAP"].iter().any(|l| word_is(first, l))
    {
        if let Token::Word(w) = &first.token {
            label = Some(w.value.to_ascii_uppercase());
        }
        rest = &rest[1..];
        if rest.first().is_some_and(|t| word_is(t, "BY")) {
            rest = &rest[1..];
        }
    }
    let Some(first) = rest.first() else {
        return Ok(None);
    };
    let (amount, unit, unit_span) = if word_is(first, "INTERVAL") {
        match (rest.get(1).map(|t| &t.token), rest.get(2)) {
            (Some(Token::SingleQuotedString(s)), Some(unit)) => {
                (s.trim().to_owned(), token_text(unit), Some(unit.span))
            }
            (Some(Token::SingleQuotedString(s)), None) => {
                let mut parts = s.split_whitespace();
                let amount = parts.next().unwrap_or_default().to_owned();
                (amount, parts.next().unwrap_or_default().to_owned(), None)
            }
            (Some(Token::Number(n, _)), Some(unit)) => (n.clone(), token_text(unit), Some(unit.span)),
            _ => return Err(SqlError::at_span(first.span, "expected INTERVAL '<n>' <unit>")),
        }
    } else if let (Token::Number(n, _), Some(unit)) = (&first.token, rest.get(1)) {
        (n.clone(), token_text(unit), Some(unit.span))
    } else if label.is_some() {
        return Err(SqlError::at_span(first.span, "expected a duration such as 1 MINUTE"));
    } else {
        return Ok(None);
    };
    let span = unit_span.unwrap_or(first.span);
    let ms = duration_millis(&amount, &unit).map_err(|m| SqlError::at_span(span, m))?;
    Ok(Some((label, ms)))
}

fn token_text(t: &TokenWithSpan) -> String {
    match &t.token {
        Token::Word(w) => w.value.clone(),
        other => other.to_string(),
    }
}

/// Milliseconds in `amount` `unit`s (unit singular or plural, any case).
pub fn duration_millis(amount: &str, unit: &str) -> Result<i64, String> {
    let per: f64 = match unit.to_ascii_uppercase().trim_end_matches('S') {
        "MILLISECOND" => 1.0,
        "SECOND" => 1_000.0,
        "MINUTE" => 60_000.0,
        "HOUR" => 3_600_000.0,
        "DAY" => 86_400_000.0,
        "WEEK" => 604_800_000.0,
        "" => return Err("missing unit (use MILLISECOND, SECOND, MINUTE, HOUR, DAY or WEEK)".into()),
        other => {
            return Err(format!(
                "unsupported interval unit {other} (use MILLISECOND, SECOND, MINUTE, HOUR, DAY or WEEK)"
            ));
        }
    };
    let value: f64 = amount.parse().map_err(|_| format!("{amount:?} is not a number"))?;
    let ms = value * per;
    if !(1.0..=1e15).contains(&ms) {
        return Err(format!("interval must be at least 1 millisecond, got {amount} {unit}"));
    }
    #[allow(clippy::cast_possible_truncation)]
    Ok(ms.round() as i64)
}

/// Milliseconds of an `INTERVAL` expression from the AST.
pub fn interval_millis(expr: &Expr) -> Result<i64, SqlError> {
    let Expr::Interval(interval) = expr else {
        return Err(SqlError::at_node(expr, "expected an INTERVAL such as INTERVAL '1' MINUTE"));
    };
    let text = match interval.value.as_ref() {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::Number(s, _) => s.trim().to_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let (amount, unit) = match &interval.leading_field {
        Some(field) => (text, datetime_field_unit(field)),
        None => {
            let mut parts = text.split_whitespace();
            (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned())
        }
    };
    duration_millis(&amount, &unit).map_err(|m| SqlError::at_node(expr, m))
}

fn datetime_field_unit(field: &DateTimeField) -> String {
    match field {
        DateTimeField::Millisecond | DateTimeField::Milliseconds => "MILLISECOND".into(),
        DateTimeField::Second | DateTimeField::Seconds => "SECOND".into(),
        DateTimeField::Minute | DateTimeField::Minutes => "MINUTE".into(),
        DateTimeField::Hour | DateTimeField::Hours => "HOUR".into(),
        DateTimeField::Day | DateTimeField::Days => "DAY".into(),
        DateTimeField::Week(_) | DateTimeField::Weeks => "WEEK".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_window_and_emit_are_extracted() {
        let p = parse(
            "SELECT trader_id, COUNT(*) FROM market_data GROUP BY trader_id \
             WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES",
        )
        .unwrap();
        let w = p.window.unwrap();
        assert_eq!(w.kind, WindowClauseKind::Tumbling { size_ms: 60_000 });
        assert_eq!(w.time_column.unwrap().to_string(), "trade_time");
        assert_eq!(p.emit.unwrap().kind, EmitKind::Changes);
        assert!(p.query.to_string().ends_with("GROUP BY trader_id"));
    }

    #[test]
    fn ksql_style_windows_parse() {
        let p = parse("SELECT 1 FROM t WINDOW HOPPING (SIZE 1 MINUTE, ADVANCE BY 10 SECONDS) GROUP BY x").unwrap();
        assert_eq!(p.window.unwrap().kind, WindowClauseKind::Hopping { size_ms: 60_000, advance_ms: 10_000 });
        let p = parse("SELECT 1 FROM t GROUP BY x WINDOW SESSION (INTERVAL '5 minutes') EMIT FINAL").unwrap();
        let w = p.window.unwrap();
        assert_eq!(w.kind, WindowClauseKind::Session { gap_ms: 300_000 });
        assert!(w.time_column.is_none());
    }

    #[test]
    fn rows_window_buffer_becomes_a_standard_frame() {
        let p =
            parse("SELECT AVG(price) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY symbol ORDER BY timestamp) FROM m")
                .unwrap();
        let text = p.query.to_string();
        assert!(
            text.contains("OVER (PARTITION BY symbol ORDER BY timestamp ROWS BETWEEN 99 PRECEDING AND CURRENT ROW)"),
            "{text}"
        );
    }

    #[test]
    fn errors_point_into_the_original_text() {
        // The WINDOW clause is removed before parsing; the error after it must
        // still carry its original column.
        let e = parse("SELECT a FROM t WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY a,,").unwrap_err();
        assert_eq!(e.line, 1);
        assert_eq!(e.column, 60, "{e}"); // the second comma
        let e = parse("SELECT a\nFROM t WINDOW TUMBLING (SIZE 1 FORTNIGHT)").unwrap_err();
        assert_eq!((e.line, e.column), (2, 32), "{e}");
        assert!(e.message.contains("unsupported interval unit"), "{e}");
    }

    #[test]
    fn garbage_never_panics() {
        for input in
            ["", "(", ")", "WINDOW", "EMIT", "SELECT * FROM t WINDOW TUMBLING (", "OVER (ROWS WINDOW BUFFER", "'"]
        {
            assert!(parse(input).is_err(), "{input:?}");
        }
    }
}
