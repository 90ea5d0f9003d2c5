//! Untrusted text made safe to show to a person: every character that
//! drives a terminal or hides, reorders or breaks text instead of showing
//! as itself (controls, bidi overrides, zero-width and other format
//! characters, line separators) is written as an escape.
//!
//! Used wherever a message quotes a file name, an OS error or a platform
//! message, and by `audit show`/`audit tail`. [`one_line`] never shortens
//! or otherwise changes printable text; [`excerpt`] also bounds text whose
//! size a peer chooses.

/// Largest [`excerpt`], in bytes (after escaping, before the `…` mark).
pub const EXCERPT_MAX_BYTES: usize = 512;

/// `text` with every non-printing character escaped (`\n`, `\u{1b}`,
/// `\u{202e}`, …).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_non_printing(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A path as the OS spells it, through [`one_line`], so that a hostile file
/// name can neither break a one-line message nor drive the terminal.
pub fn shown(path: &std::path::Path) -> String {
    one_line(&path.to_string_lossy())
}

/// `text` as [`one_line`] shows it, with `\` and `"` escaped as well so
/// that it can be quoted, cut before the first character whose escape
/// would not fit in [`EXCERPT_MAX_BYTES`] and then marked with `…`: for the
/// free text of an untrusted peer (a close reason, the `detail` of a
/// refusal), which is shown and recorded but must not grow a message or a
/// record at will, nor end a quotation early.
pub fn excerpt(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(EXCERPT_MAX_BYTES + 3));
    for c in text.chars() {
        let before = out.len();
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            c if is_non_printing(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
        if out.len() > EXCERPT_MAX_BYTES {
            out.truncate(before);
            out.push('…');
            break;
        }
    }
    out
}

/// `text` as [`one_line`] shows it, at most `max` characters long: text
/// whose shown form is longer keeps the characters that fit in `max - 1`
/// and ends with `…`. The cut falls between characters of `text`, never
/// inside an escape, so what is shown is always an exact prefix. Widths
/// count characters, not terminal columns. `max` 0 gives an empty string.
pub fn clip(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut shown = 0usize;
    // Length of `out` when it last held at most `max - 1` characters: where
    // to cut if the rest turns out not to fit.
    let mut cut_at = 0usize;
    for c in text.chars() {
        if is_non_printing(c) {
            for e in c.escape_default() {
                out.push(e);
                shown += 1;
            }
        } else {
            out.push(c);
            shown += 1;
        }
        if shown > max {
            out.truncate(cut_at);
            if max > 0 {
                out.push('…');
            }
            return out;
        }
        if shown < max {
            cut_at = out.len();
        }
    }
    out
}

/// Whether `c` must not reach a terminal raw: a C0 or C1 control or DEL
/// (general category Cc), a format character (Cf: the bidi embeddings,
/// overrides, isolates and marks, zero-width characters, the BOM, the
/// interlinear annotation and tag characters, …), a line or paragraph
/// separator (Zl, Zp), or a noncharacter (U+FDD0–U+FDEF, U+xxFFFE/F).
pub fn is_non_printing(c: char) -> bool {
    let u = u32::from(c);
    c.is_control()
        || u & 0xfffe == 0xfffe
        || matches!(
            u,
            0x00ad
                | 0x0600..=0x0605
                | 0x061c
                | 0x06dd
                | 0x070f
                | 0x0890..=0x0891
                | 0x08e2
                | 0xfdd0..=0xfdef
                | 0x180e
                | 0x200b..=0x200f
                | 0x2028..=0x202e
                | 0x2060..=0x2064
                | 0x2066..=0x206f
                | 0xfeff
                | 0xfff9..=0xfffb
                | 0x110bd
                | 0x110cd
                | 0x13430..=0x1343f
                | 0x1bca0..=0x1bca3
                | 0x1d173..=0x1d17a
                | 0xe0001
                | 0xe0020..=0xe007f
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(super::one_line("a\nb\u{1b}[31mé"), "a\\nb\\u{1b}[31mé");
    }

    #[test]
    fn an_excerpt_escapes_and_bounds_the_text() {
        assert_eq!(
            super::excerpt("bound to\nanother machine"),
            "bound to\\nanother machine"
        );
        let long = super::excerpt(&"é".repeat(10_000));
        assert!(long.ends_with('…'), "{long}");
        assert!(long.len() <= super::EXCERPT_MAX_BYTES + '…'.len_utf8());
        let escaped = super::excerpt(&"\u{1b}".repeat(1_000));
        assert!(escaped.starts_with("\\u{1b}") && escaped.ends_with('…'));
        assert!(escaped.len() <= super::EXCERPT_MAX_BYTES + '…'.len_utf8());
        let exact = "a".repeat(super::EXCERPT_MAX_BYTES);
        assert_eq!(super::excerpt(&exact), exact);
    }

    #[test]
    fn an_excerpt_can_be_quoted_and_is_never_cut_inside_an_escape() {
        assert_eq!(super::excerpt(r#"x"): run \u{1b}"#), r#"x\"): run \\u{1b}"#);
        // 511 bytes of text, then a control whose escape needs six more.
        let text = format!("{}\u{1b}", "a".repeat(super::EXCERPT_MAX_BYTES - 1));
        let cut = super::excerpt(&text);
        assert_eq!(
            cut,
            format!("{}…", "a".repeat(super::EXCERPT_MAX_BYTES - 1))
        );
    }

    #[test]
    fn clipped_text_fits_its_width_and_is_cut_between_escapes() {
        use super::clip;
        assert_eq!(clip("/home/alice", 11), "/home/alice");
        assert_eq!(clip("/home/alice", 10), "/home/ali…");
        assert_eq!(clip("a\nb", 10), "a\\nb");
        // A newline and ESC become escapes, counted as shown.
        assert_eq!(clip("a\nb\u{1b}c", 20), "a\\nb\\u{1b}c");
        assert_eq!(clip("ab\u{1b}cd", 7), "ab…");
        assert_eq!(clip("ab\u{1b}cd", 8), "ab…");
        assert_eq!(clip("ab\u{1b}cd", 9), "ab\\u{1b}…");
        // Characters, not bytes: no cut inside a multi-byte character.
        assert_eq!(clip("ééééé", 3), "éé…");
        assert_eq!(clip("😀😀", 2), "😀😀");
        assert_eq!(clip("x", 0), "");
        assert_eq!(clip("", 5), "");
        let long = clip(&"\u{202e}".repeat(1000), 60);
        assert!(long.chars().count() <= 60 && long.ends_with('…'), "{long}");
        assert!(!long.contains('\u{202e}'));
    }

    #[test]
    fn c1_controls_bidi_and_format_characters_are_escaped() {
        assert_eq!(
            super::one_line(
                "\u{9b}2J\u{7f}\u{202e}gpj.exe\u{2066}\u{2069}\u{200b}\u{feff}\u{e0041}\u{ffff}"
            ),
            "\\u{9b}2J\\u{7f}\\u{202e}gpj.exe\\u{2066}\\u{2069}\\u{200b}\\u{feff}\\u{e0041}\\u{ffff}"
        );
        // Printable text, including other scripts and emoji, is unchanged.
        assert_eq!(super::one_line("café ßπ日本 😀 a/b"), "café ßπ日本 😀 a/b");
    }
}
