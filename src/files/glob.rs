//! The `glob` filter of FILE_LIST (FILES.md §4.4): fnmatch-style matching of
//! one entry name against a pattern.
//!
//! This module owns the pattern syntax (`*`, `?`, `[...]`, `[!...]`) and the
//! matcher. It only ever sees a bare entry name, never a path, and it must
//! never backtrack exponentially: a request-supplied pattern is matched
//! against up to 100,000 names, so the cost of one match is bounded by
//! O(len(pattern) × len(name)).

/// A compiled `glob` pattern.
///
/// Every string is a valid pattern: anything that does not form a special
/// construct stands for itself (a `[` without a closing `]`, a backslash,
/// `{`, `}`). Compile once per request with [`Pattern::new`], then call
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
#[derive(Clone, Debug, PartialEq, Eq)]
struct CharSet {
    negated: bool,
    ranges: Vec<(char, char)>,
}

impl CharSet {
    fn contains(&self, c: char) -> bool {
        let member = self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
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
    /// Compiles `glob`. Infallible: see the type documentation.
    pub fn new(glob: &str) -> Pattern {
        let chars: Vec<char> = glob.chars().collect();
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
                '[' => match parse_set(&chars, i) {
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

/// Parses the set whose `[` ends just before `chars[start]`.
///
/// Returns the set and the index just after its closing `]`, or `None` when
/// there is no closing `]` (the caller then treats `[` as literal). The
/// closing `]` is the first one after the optional `!` and the optional
/// literal leading `]`.
fn parse_set(chars: &[char], start: usize) -> Option<(CharSet, usize)> {
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
    Some((CharSet { negated, ranges }, close + 1))
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
                ranges: vec![('x', 'x'), ('b', 'b')],
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
