//! Directory names as the control mode shows and sorts them (CONTROL.md
//! §4.5 step 8, §4.6): which names may be sent at all, and the Unicode full
//! case folding listings are ordered by.
//!
//! Pure functions over text; the data comes from [`super::unicode_tables`].

use super::unicode_tables::{CASEFOLD_EXCEPTIONS, OTHER_RANGES};

/// Longest `name` a listing entry may carry, in chars.
pub const MAX_NAME_CHARS: usize = 1024;

/// Longest `path` a listing entry may carry, in chars.
pub const MAX_PATH_CHARS: usize = 32_767;

/// Whether `c` has a General_Category starting with `C` (control, format,
/// surrogate, private use, unassigned).
pub fn is_other(c: char) -> bool {
    let u = u32::from(c);
    OTHER_RANGES
        .binary_search_by(|&(start, end)| {
            if end < u {
                std::cmp::Ordering::Less
            } else if start > u {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// A valid wire name (§4.6): non-empty, at most [`MAX_NAME_CHARS`], and no
/// character of a `C` category (U+0000 included).
pub fn is_wire_name(name: &str) -> bool {
    !name.is_empty() && name.chars().count() <= MAX_NAME_CHARS && !name.chars().any(is_other)
}

/// Unicode full case folding of `text` (Python's `str.casefold`).
pub fn casefold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match CASEFOLD_EXCEPTIONS.binary_search_by(|(k, _)| k.cmp(&c)) {
            Ok(i) => out.push_str(CASEFOLD_EXCEPTIONS[i].1),
            Err(_) => out.extend(c.to_lowercase()),
        }
    }
    out
}

/// Sorts names by their case folding in code-point order, keeping the
/// original order of ties (the sort is stable; each key is folded once).
pub fn sort_by_folded<T>(items: &mut [T], name: impl Fn(&T) -> &str) {
    items.sort_by_cached_key(|item| casefold(name(item)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_follows_the_full_mappings() {
        assert_eq!(casefold("Straße"), "strasse");
        assert_eq!(casefold("ΣΑΣ"), "σασ");
        assert_eq!(casefold("ς"), "σ");
        assert_eq!(casefold("ﬁ"), "fi");
        assert_eq!(casefold("Ꭰ"), "Ꭰ");
        assert_eq!(casefold("ꭰ"), "Ꭰ");
    }

    #[test]
    fn other_categories_are_not_wire_names() {
        assert!(is_wire_name("alpha beta"));
        assert!(is_wire_name("Über"));
        for bad in [
            "",
            "a\u{0}",
            "a\u{7}",
            "zw\u{200d}j",
            "\u{feff}x",
            "p\u{e000}",
            "x\u{378}",
        ] {
            assert!(!is_wire_name(bad), "{bad:?}");
        }
        assert!(!is_wire_name(&"a".repeat(1025)));
        assert!(is_wire_name(&"a".repeat(1024)));
    }

    #[test]
    fn sorting_is_by_folded_name_and_stable() {
        let mut names = vec![
            "beta", "Alpha", "alpha", "ALPHA", "Zeta", "straße", "strasse",
        ];
        sort_by_folded(&mut names, |n| n);
        assert_eq!(
            names,
            [
                "Alpha", "alpha", "ALPHA", "beta", "straße", "strasse", "Zeta"
            ]
        );
    }
}
