//! The `glob` filter of FILE_LIST (FILES.md §4.4): fnmatch-style matching of
//! one entry name against a pattern.
//!
//! This module owns the pattern syntax (`*`, `?`, `[...]`, `[!...]`), the
//! matcher and the length limit on request-supplied patterns. It only ever
//! sees a bare entry name, never a path, and it never touches the file
//! system.
//!
//! The pattern comes from the network and is matched against up to 100,000
//! names, so every step is bounded: compiling costs O(n log n) in the
//! pattern length (a linear scan plus sorting set members), one match costs O(len(pattern) × len(name) × log(set size)) and never
//! backtracks exponentially, and [`Pattern::parse`] refuses patterns longer
//! than [`MAX_GLOB_CHARS`] so the per-listing total stays small whatever the
//! frame size.

use std::fmt;

/// Longest `glob` a request may carry, in Unicode scalar values. Real
/// patterns are a few dozen characters; the limit keeps a listing's matching
/// work (pattern × name × up to 100,000 names) bounded.
pub const MAX_GLOB_CHARS: usize = 1024;

/// [`Pattern::parse`] refused a pattern longer than [`MAX_GLOB_CHARS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobTooLong;

impl fmt::Display for GlobTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "glob longer than {MAX_GLOB_CHARS} characters")
    }
}

impl std::error::Error for GlobTooLong {}

/// A compiled `glob` pattern.
///
/// Every string is a valid pattern: anything that does not form a special
/// construct stands for itself (a `[` without a closing `]`, a backslash,
/// `{`, `}`). Compile once per request with [`Pattern::parse`] (which
/// enforces the length limit; [`Pattern::new`] does not), then call
/// [`Pattern::matches`] for each entry name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    tokens: Vec<Token>,
}

/// One element of a compiled pattern. Every token except [`Token::Star`]
/// consumes exactly one character of the name, which is what makes the
/// single-backtrack-point matcher correct.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// `*`: any sequence, including the empty one and a leading `.`.
    /// Consecutive stars are folded into one at compile time.
    Star,
    /// `?`: exactly one Unicode scalar value.
    AnyChar,
    /// A character that matches only itself.
    Literal(char),
    /// `[...]` or `[!...]`.
    Set(CharSet),
}

/// The members of a `[...]` set as inclusive code-point ranges; a single
/// member `c` is the range `c..=c`. Reversed ranges (`[z-a]`) are dropped at
/// compile time because they match nothing.
///
/// `ranges` is sorted, and overlapping or adjacent ranges are merged, so the
/// ranges are disjoint with strictly increasing bounds. That lets
/// [`CharSet::contains`] binary-search: a set can hold as many members as the
/// pattern has characters, and it is tested once per name character.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CharSet {
    negated: bool,
    ranges: Vec<(char, char)>,
}

impl CharSet {
    /// Builds the normalised set from ranges in pattern order.
    fn new(negated: bool, mut ranges: Vec<(char, char)>) -> CharSet {
        ranges.sort_unstable();
        let mut merged: Vec<(char, char)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                // Sorted by `lo`, so `lo >= last.0`: the new range overlaps
                // or directly follows the last one exactly when it starts at
                // most one code point after the last one's end.
                Some(last) if u32::from(lo) <= u32::from(last.1).saturating_add(1) => {
                    last.1 = last.1.max(hi);
                }
                _ => merged.push((lo, hi)),
            }
        }
        CharSet {
            negated,
            ranges: merged,
        }
    }

    fn contains(&self, c: char) -> bool {
        // The first range that does not end before `c` is the only one that
        // can hold it, because the ranges are disjoint and sorted.
        let i = self.ranges.partition_point(|&(_, hi)| hi < c);
        let member = self.ranges.get(i).is_some_and(|&(lo, _)| lo <= c);
        member != self.negated
    }
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Star | Token::AnyChar => true,
            Token::Literal(expected) => *expected == c,
            Token::Set(set) => set.contains(c),
        }
    }
}

impl Pattern {
    /// Compiles a request-supplied `glob`, refusing one longer than
    /// [`MAX_GLOB_CHARS`] characters before doing any other work.
    pub fn parse(glob: &str) -> Result<Pattern, GlobTooLong> {
        // `nth` stops after MAX_GLOB_CHARS + 1 characters, so refusing a
        // 16 MiB pattern costs no more than accepting a short one.
        if glob.chars().nth(MAX_GLOB_CHARS).is_some() {
            return Err(GlobTooLong);
        }
        Ok(Pattern::new(glob))
    }

    /// Compiles `glob` of any length in O(n log n) time (sorting set members
    /// is the only super-linear step). Infallible: see the type
    /// documentation. Network input goes through [`Pattern::parse`] instead.
    pub fn new(glob: &str) -> Pattern {
        let chars: Vec<char> = glob.chars().collect();
        // A set can only close at or before the last `]`; knowing where that
        // is lets an unclosed `[` be recognised without scanning the rest of
        // the pattern, which would make a run of `[` quadratic.
        let last_close = chars.iter().rposition(|&c| c == ']');
        let mut tokens = Vec::with_capacity(chars.len());
        let mut i = 0;
        while let Some(&c) = chars.get(i) {
            i += 1;
            let token = match c {
                '*' => {
                    // `**` means nothing more than `*`; folding keeps the
                    // matcher's backtrack point unique per star run.
                    if tokens.last() == Some(&Token::Star) {
                        continue;
                    }
                    Token::Star
                }
                '?' => Token::AnyChar,
                '[' => match parse_set(&chars, i, last_close) {
                    Some((set, next)) => {
                        i = next;
                        Token::Set(set)
                    }
                    // No closing `]`: the `[` is literal and parsing resumes
                    // right after it, so later `*`/`?` keep their meaning.
                    None => Token::Literal('['),
                },
                other => Token::Literal(other),
            };
            tokens.push(token);
        }
        Pattern { tokens }
    }

    /// Whether the whole of `name` matches the pattern (case-sensitive).
    ///
    /// Classic greedy matching with a single backtrack point: on a mismatch,
    /// the most recent `*` absorbs one more character and matching resumes
    /// after it. Earlier stars never need revisiting because every other token
    /// consumes exactly one character, so the worst case is
    /// O(len(pattern) × len(name)) token comparisons.
    pub fn matches(&self, name: &str) -> bool {
        let mut p = 0;
        let mut rest = name;
        // (token index just after the last `*`, name suffix that `*` stops at)
        let mut backtrack: Option<(usize, &str)> = None;

        loop {
            let mut chars = rest.chars();
            let Some(c) = chars.next() else { break };
            match self.tokens.get(p) {
                Some(Token::Star) => {
                    p += 1;
                    backtrack = Some((p, rest));
                }
                Some(token) if token.matches(c) => {
                    p += 1;
                    rest = chars.as_str();
                }
                _ => {
                    let Some((after_star, star_end)) = backtrack else {
                        return false;
                    };
                    // Let the star swallow one more character.
                    let mut swallowed = star_end.chars();
                    swallowed.next();
                    let star_end = swallowed.as_str();
                    backtrack = Some((after_star, star_end));
                    p = after_star;
                    rest = star_end;
                }
            }
        }
        // The name is used up; only stars (matching empty) may remain.
        self.tokens
            .get(p..)
            .is_some_and(|left| left.iter().all(|t| *t == Token::Star))
    }
}

/// Parses the set whose `[` ends just before `chars[start]`; `last_close` is
/// the index of the pattern's last `]`, if any.
///
/// Returns the set and the index just after its closing `]`, or `None` when
/// there is no closing `]` (the caller then treats `[` as literal). The
/// closing `]` is the first one after the optional `!` and the optional
/// literal leading `]`.
///
/// Linear overall: a `[` without a closing `]` is settled by comparing with
/// `last_close`, without a scan, and a successful scan only covers characters
/// the set then consumes.
fn parse_set(chars: &[char], start: usize, last_close: Option<usize>) -> Option<(CharSet, usize)> {
    let mut first = start;
    let negated = chars.get(first) == Some(&'!');
    if negated {
        first += 1;
    }
    // A `]` right after `[` or `[!` is a member, not the end of the set.
    let search_from = if chars.get(first) == Some(&']') {
        first + 1
    } else {
        first
    };
    if last_close? < search_from {
        return None;
    }
    let close = search_from + chars.get(search_from..)?.iter().position(|&c| c == ']')?;
    let members = chars.get(first..close)?;

    // Left to right: `x-y` (with `y` inside the set) is a range, anything
    // else is a literal member. Hence `-` first or last is literal, and
    // after a range a `-` starts a new item (`[a-c-e]` = a..=c, `-`, `e`).
    let mut ranges = Vec::with_capacity(members.len());
    let mut k = 0;
    while let Some(&lo) = members.get(k) {
        match (members.get(k + 1), members.get(k + 2)) {
            (Some('-'), Some(&hi)) => {
                // A reversed range matches nothing (FILES.md §4.4); its end
                // points are not members either.
                if lo <= hi {
                    ranges.push((lo, hi));
                }
                k += 3;
            }
            _ => {
                ranges.push((lo, lo));
                k += 1;
            }
        }
    }
    Some((CharSet::new(negated, ranges), close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_stars_compile_to_one_token() {
        assert_eq!(Pattern::new("a***b").tokens.len(), 3);
    }

    #[test]
    fn reversed_range_contributes_no_members() {
        let p = Pattern::new("[xz-ab]");
        assert_eq!(
            p.tokens,
            vec![Token::Set(CharSet {
                negated: false,
                ranges: vec![('b', 'b'), ('x', 'x')],
            })]
        );
    }

    #[test]
    fn set_members_are_sorted_and_merged() {
        // Overlapping (`a-f`, `c-h`), adjacent (`i`, `j-k`) and duplicate
        // (`z`, `z`) members collapse; the gap before `z` keeps two ranges.
        let p = Pattern::new("[zc-hj-kia-fz]");
        assert_eq!(
            p.tokens,
            vec![Token::Set(CharSet {
                negated: false,
                ranges: vec![('a', 'k'), ('z', 'z')],
            })]
        );
    }

    #[test]
    fn unclosed_bracket_is_a_literal_and_parsing_resumes_after_it() {
        assert_eq!(
            Pattern::new("[a*").tokens,
            vec![Token::Literal('['), Token::Literal('a'), Token::Star]
        );
    }
}
