//! Untrusted text made safe to show on one line: every control character
//! (newlines, escapes that drive a terminal, …) is written as an escape.
//!
//! Used wherever a message quotes a file name, an OS error or a platform
//! message; it never shortens or otherwise changes printable text.

/// `text` with control characters escaped (`\n`, `\u{1b}`, …).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(super::one_line("a\nb\u{1b}[31mé"), "a\\nb\\u{1b}[31mé");
    }
}
