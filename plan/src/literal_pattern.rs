//! A direct matcher for the regular expressions that extract a field next
//! to a fixed text, as `(&|^)channel_id=([^&]*)` takes a parameter from a
//! URL (Nexmark q21), `id=([0-9]+)` or `^user:(.*)`.
//!
//! The regex crate finds a match with a lazy DFA forwards, again backwards
//! for its start, and then runs a third engine over the match for the
//! groups: about 300 ns for a 90-byte URL that holds the parameter, most of
//! q21's time. Such a pattern is a sequence of fixed pieces around one
//! literal text, ending at most in one greedy run of a character class. A
//! SIMD substring search finds the literal (a few ns), each candidate start
//! is checked in the few positions the pieces before it allow, and the run
//! is one scan: no automaton at all. ClickHouse's `extractURLParameter` and
//! the "required substring" prefilters of RE2 users are the same idea.
//!
//! [`LiteralPattern::new`] takes only patterns it matches exactly as the
//! regex crate does (leftmost-first, greedy, Unicode classes over UTF-8) and
//! returns `None` for every other, which then runs on the regex crate. A
//! test compares both on generated patterns and haystacks.

use memchr::memmem;
use regex_syntax::hir::{Class, Hir, HirKind, Look};

/// One piece of a pattern, in order.
#[derive(Debug, Clone)]
enum Piece {
    /// These bytes.
    Text(Box<[u8]>),
    /// The start of the haystack (`^` without the multi-line flag).
    Start,
    /// The end of the haystack (`$` without the multi-line flag).
    End,
    /// One ASCII character of the set.
    Char(u128),
    /// One of these fixed sequences, tried in order (leftmost-first).
    Either(Vec<Vec<Piece>>),
    /// Group `n` starts or ends here.
    Open(usize),
    Close(usize),
    /// The longest run of characters of a set, at least `min` of them: the
    /// last piece but for closing groups, so the longest run is the one
    /// leftmost-first picks and nothing after it can ask for less.
    Run {
        ascii: u128,
        non_ascii: bool,
        min: usize,
    },
}

/// A compiled literal-anchored pattern.
#[derive(Debug, Clone)]
pub(crate) struct LiteralPattern {
    pieces: Vec<Piece>,
    /// The longest top-level text, and the fewest and most bytes the pieces
    /// before it span.
    finder: memmem::Finder<'static>,
    before_min: usize,
    before_max: usize,
    groups: usize,
}

impl LiteralPattern {
    /// The direct matcher of `pattern` (regex crate syntax, default flags),
    /// if it is literal-anchored; `None` for any other pattern.
    pub(crate) fn new(pattern: &str) -> Option<Self> {
        let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
        let mut pieces = Vec::new();
        let mut groups = 1;
        flatten(&hir, &mut pieces, &mut groups)?;
        // A run may only be followed by closing groups. (A `$` after it
        // would make each occurrence of the text rescan the same run when
        // it stops short of the end: quadratic, where the regex crate is
        // linear.)
        if let Some(at) = pieces.iter().position(|p| matches!(p, Piece::Run { .. }))
            && !pieces[at + 1..].iter().all(|p| matches!(p, Piece::Close(_)))
        {
            return None;
        }
        // The anchor: the longest top-level text before any run.
        let (at, text) = pieces
            .iter()
            .enumerate()
            .take_while(|(_, p)| !matches!(p, Piece::Run { .. }))
            .filter_map(|(i, p)| match p {
                Piece::Text(t) => Some((i, t)),
                _ => None,
            })
            .max_by_key(|(_, t)| t.len())?;
        if text.len() < 2 {
            return None;
        }
        let (mut before_min, mut before_max) = (0, 0);
        for p in &pieces[..at] {
            let (lo, hi) = width(p);
            before_min += lo;
            before_max += hi;
        }
        let finder = memmem::Finder::new(text).into_owned();
        Some(Self { pieces, finder, before_min, before_max, groups })
    }

    /// Capture group `group` of the leftmost match in `hay`, as the regex
    /// crate's `captures` gives it; `None` without a match or such a group.
    pub(crate) fn extract<'h>(&self, hay: &'h str, group: usize) -> Option<&'h str> {
        if group >= self.groups {
            return None;
        }
        let bytes = hay.as_bytes();
        let mut slots = [usize::MAX; 2 * MAX_GROUPS];
        let slots = &mut slots[..2 * self.groups];
        // Every start before `from` has been ruled out. A match starting at
        // `s` has the anchor text at `s + before_min ..= s + before_max`;
        // the next occurrence of the text at or after `from + before_min`
        // bounds which starts remain.
        let mut from = 0;
        while from + self.before_min <= bytes.len() {
            let found = from + self.before_min + self.finder.find(&bytes[from + self.before_min..])?;
            let first = from.max(found.saturating_sub(self.before_max));
            for start in first..=found - self.before_min {
                if hay.is_char_boundary(start) && self.at(&self.pieces, bytes, start, slots).is_some() {
                    slots[0] = start;
                    let (a, b) = (slots[2 * group], slots[2 * group + 1]);
                    return hay.get(a..b);
                }
            }
            from = found - self.before_min + 1;
        }
        None
    }

    /// Matches `pieces`, a suffix of the pattern's, at `pos`; the end of
    /// the match, with the groups' bounds in `slots` (group 0's end
    /// included).
    fn at(&self, pieces: &[Piece], hay: &[u8], pos: usize, slots: &mut [usize]) -> Option<usize> {
        let Some((piece, rest)) = pieces.split_first() else {
            slots[1] = pos;
            return Some(pos);
        };
        match piece {
            Piece::Either(alternatives) => {
                // Leftmost-first: the first alternative with which the
                // rest matches.
                for alternative in alternatives {
                    if let Some(after) = fixed(alternative, hay, pos)
                        && let Some(end) = self.at(rest, hay, after, slots)
                    {
                        return Some(end);
                    }
                }
                None
            }
            Piece::Open(g) => {
                slots[2 * g] = pos;
                self.at(rest, hay, pos, slots)
            }
            Piece::Close(g) => {
                slots[2 * g + 1] = pos;
                self.at(rest, hay, pos, slots)
            }
            Piece::Run { ascii, non_ascii, min } => {
                let mut end = pos;
                let mut chars = 0;
                while let Some(&b) = hay.get(end) {
                    let take = if b < 0x80 { ascii >> b & 1 == 1 } else { *non_ascii };
                    if !take {
                        break;
                    }
                    // Continuation bytes belong to the character before.
                    chars += usize::from(b & 0xC0 != 0x80);
                    end += 1;
                }
                if chars < *min {
                    return None;
                }
                self.at(rest, hay, end, slots)
            }
            other => {
                let after = fixed(std::slice::from_ref(other), hay, pos)?;
                self.at(rest, hay, after, slots)
            }
        }
    }
}

/// Capture groups a literal-anchored pattern may have, group 0 included.
const MAX_GROUPS: usize = 8;

/// Matches fixed pieces (text, anchors, single characters) at `pos`.
fn fixed(pieces: &[Piece], hay: &[u8], mut pos: usize) -> Option<usize> {
    for piece in pieces {
        match piece {
            Piece::Text(t) => {
                if !hay.get(pos..)?.starts_with(t) {
                    return None;
                }
                pos += t.len();
            }
            Piece::Start if pos == 0 => {}
            Piece::End if pos == hay.len() => {}
            Piece::Char(set) => {
                let b = *hay.get(pos)?;
                if b >= 0x80 || set >> b & 1 == 0 {
                    return None;
                }
                pos += 1;
            }
            _ => return None,
        }
    }
    Some(pos)
}

/// The fewest and most bytes a piece before the anchor text spans.
fn width(piece: &Piece) -> (usize, usize) {
    match piece {
        Piece::Text(t) => (t.len(), t.len()),
        Piece::Char(_) => (1, 1),
        Piece::Either(alternatives) => {
            let widths = alternatives.iter().map(|a| a.iter().map(|p| width(p).0).sum::<usize>());
            (widths.clone().min().unwrap_or(0), widths.max().unwrap_or(0))
        }
        Piece::Start | Piece::End | Piece::Open(_) | Piece::Close(_) | Piece::Run { .. } => (0, 0),
    }
}

/// Appends `hir`'s pieces; `None` if it is not literal-anchored.
fn flatten(hir: &Hir, out: &mut Vec<Piece>, groups: &mut usize) -> Option<()> {
    match hir.kind() {
        HirKind::Empty => {}
        HirKind::Literal(lit) => out.push(Piece::Text(lit.0.clone())),
        HirKind::Look(Look::Start) => out.push(Piece::Start),
        HirKind::Look(Look::End) => out.push(Piece::End),
        HirKind::Class(class) => {
            let (ascii, non_ascii) = class_set(class)?;
            if non_ascii {
                return None; // one character of several bytes: the regex crate's job
            }
            out.push(Piece::Char(ascii));
        }
        HirKind::Repetition(rep) => {
            if !rep.greedy || rep.max.is_some() {
                return None;
            }
            let (ascii, non_ascii) = match rep.sub.kind() {
                HirKind::Class(class) => class_set(class)?,
                HirKind::Literal(lit) if lit.0.len() == 1 && lit.0[0] < 0x80 => (1u128 << lit.0[0], false),
                _ => return None,
            };
            out.push(Piece::Run { ascii, non_ascii, min: usize::try_from(rep.min).ok()? });
        }
        HirKind::Capture(capture) => {
            let index = usize::try_from(capture.index).ok()?;
            // Groups are numbered in order of their opening parenthesis,
            // which is the order flattening meets them.
            if index != *groups || index >= MAX_GROUPS {
                return None;
            }
            *groups += 1;
            out.push(Piece::Open(index));
            flatten(&capture.sub, out, groups)?;
            out.push(Piece::Close(index));
        }
        HirKind::Concat(subs) => {
            for sub in subs {
                flatten(sub, out, groups)?;
            }
        }
        HirKind::Alternation(subs) => {
            let mut alternatives = Vec::with_capacity(subs.len());
            for sub in subs {
                let mut pieces = Vec::new();
                let mut none = *groups;
                flatten(sub, &mut pieces, &mut none)?;
                // Alternatives are fixed sequences without groups.
                if none != *groups
                    || !pieces.iter().all(|p| matches!(p, Piece::Text(_) | Piece::Start | Piece::End | Piece::Char(_)))
                {
                    return None;
                }
                alternatives.push(pieces);
            }
            out.push(Piece::Either(alternatives));
        }
        HirKind::Look(_) => return None,
    }
    Some(())
}

/// A class as its ASCII members and whether it takes every non-ASCII
/// character (`true`) or none (`false`); `None` for a class that takes
/// some non-ASCII characters and not others.
fn class_set(class: &Class) -> Option<(u128, bool)> {
    let mut ascii = 0u128;
    let mut non_ascii_ranges: Vec<(u32, u32)> = Vec::new();
    let mut add = |lo: u32, hi: u32| {
        for c in lo..=hi.min(0x7F) {
            ascii |= 1 << c;
        }
        if hi >= 0x80 {
            non_ascii_ranges.push((lo.max(0x80), hi));
        }
    };
    match class {
        Class::Unicode(c) => c.ranges().iter().for_each(|r| add(u32::from(r.start()), u32::from(r.end()))),
        // Byte classes (with the `u` flag off) may match bytes that are not
        // whole characters: the regex crate's job.
        Class::Bytes(c) => {
            if c.ranges().iter().any(|r| r.end() >= 0x80) {
                return None;
            }
            c.ranges().iter().for_each(|r| add(u32::from(r.start()), u32::from(r.end())));
        }
    }
    match non_ascii_ranges.as_slice() {
        [] => Some((ascii, false)),
        // Every character from U+0080 up (the ranges are sorted and
        // merged; surrogates are not characters, so one range spans them).
        [(0x80, 0x10_FFFF)] => Some((ascii, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regex_extract<'h>(pattern: &str, hay: &'h str, group: usize) -> Option<&'h str> {
        let re = regex::Regex::new(pattern).unwrap();
        re.captures(hay).and_then(|c| c.get(group)).map(|m| m.as_str())
    }

    #[test]
    fn takes_a_url_parameter_as_the_regex_crate_does() {
        let p = LiteralPattern::new("(&|^)channel_id=([^&]*)").expect("literal-anchored");
        for hay in [
            "https://n.com/x?query=1&channel_id=42&y=1",
            "https://n.com/x?query=1&channel_id=42",
            "channel_id=7&x=1",
            "&channel_id=",
            "https://n.com/x?query=1",
            "xchannel_id=1&channel_id=2",
            "a&channel_id=é&ü",
        ] {
            for group in 0..4 {
                assert_eq!(
                    p.extract(hay, group),
                    regex_extract("(&|^)channel_id=([^&]*)", hay, group),
                    "{hay} {group}"
                );
            }
        }
    }

    #[test]
    fn other_patterns_go_to_the_regex_crate() {
        for pattern in [
            "a",                     // no literal of two bytes
            "(ab)+x",                // a repeated group
            "a[^&]*bc",              // a run before the anchor text
            "bc[^&]*x",              // a piece after a run
            "bc[^&]*$",              // the end after a run: quadratic on `bcbc…bc&`
            "bc.*?",                 // a lazy run
            "bc[a-z]{2,5}",          // a bounded run
            "(?m)^bc",               // a multi-line anchor
            "\\bword\\b",            // word boundaries
            "(?i)bc",                // case-insensitive
            "bc(x|(y))",             // a group inside an alternative
            "bc[é-ü]*",              // some non-ASCII characters, not all
            "(?-u:[\\x80-\\xFF])bc", // bytes, not characters
        ] {
            assert!(LiteralPattern::new(pattern).is_none(), "{pattern}");
        }
    }

    /// A fixed-seed generator of patterns in (and around) the accepted
    /// shape and of haystacks over the characters they name, each checked
    /// against the regex crate group by group. Deterministic, as CI must be.
    #[test]
    fn agrees_with_the_regex_crate_on_generated_patterns() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n as u64).unwrap_or(0)
        };
        const TEXTS: [&str; 6] = ["ab", "id=", "a&b", "aab", "é=", "=="];
        const FIXED: [&str; 7] = ["&", "^", "a", "[ab]", "[0-9]", "b&", "=="];
        const RUNS: [&str; 9] = ["[^&]*", "[a-z]+", "[^=]+", ".*", "[0-9]*", "a*", "[^é]*", "[^&]{2,}", ".{3,}"];
        const CHARS: [&str; 8] = ["a", "b", "&", "=", "é", "0", "9", "\n"];
        let mut accepted = 0;
        for _ in 0..3000 {
            let mut pattern = String::new();
            if next(3) == 0 {
                let (x, y) = (FIXED[next(FIXED.len())], FIXED[next(FIXED.len())]);
                pattern.push_str(&format!("({x}|{y})"));
            } else if next(2) == 0 {
                pattern.push_str(FIXED[next(FIXED.len())]);
            }
            let text = TEXTS[next(TEXTS.len())];
            pattern.push_str(&if next(4) == 0 { format!("({text})") } else { text.to_owned() });
            if next(3) == 0 {
                pattern.push_str(FIXED[next(FIXED.len())]);
            }
            if next(4) > 0 {
                let run = RUNS[next(RUNS.len())];
                pattern.push_str(&if next(2) == 0 { format!("({run})") } else { run.to_owned() });
            }
            if next(4) == 0 {
                pattern.push('$');
            }
            let Some(p) = LiteralPattern::new(&pattern) else { continue };
            accepted += 1;
            let re = regex::Regex::new(&pattern).unwrap();
            for _ in 0..20 {
                let hay: String = (0..next(14)).map(|_| CHARS[next(CHARS.len())]).collect::<String>()
                    + if next(2) == 0 { text } else { "" }
                    + &(0..next(6)).map(|_| CHARS[next(CHARS.len())]).collect::<String>();
                let caps = re.captures(&hay);
                for group in 0..=re.captures_len() {
                    let want = caps.as_ref().and_then(|c| c.get(group)).map(|m| m.as_str());
                    assert_eq!(p.extract(&hay, group), want, "pattern {pattern:?} on {hay:?}, group {group}");
                }
            }
        }
        assert!(accepted > 1000, "only {accepted} generated patterns were literal-anchored");
    }
}
