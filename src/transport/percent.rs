//! Percent-encoding (RFC 3986 §2.1), the one codec behind every URL
//! component the crate writes or reads: session ids in data connection
//! URLs, OAuth form fields and callback queries, proxy credentials, and
//! the escapes of a platform URL's path.
//!
//! Each caller keeps its own rules through the entry point it picks: a `%`
//! that does not start a `%XX` escape is an error ([`decode_into`],
//! [`check`]) or stands for itself ([`decode_form_into`], which also reads
//! `+` as a space). Decoding never lengthens text, so a caller decoding a
//! secret reserves `text.len()` bytes first and no copy is left behind by
//! a growing buffer. Nothing here logs or keeps what it decodes.

/// A `%` that does not start a `%XX` escape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadEscape;

/// `text` with every UTF-8 byte outside `A–Z a–z 0–9 _ . - ~` written as
/// `%XX` in upper-case hex (`:` → `%3A`, `/` → `%2F`).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(hex_digit(b >> 4));
            out.push(hex_digit(b & 0x0f));
        }
    }
    out
}

/// Appends the bytes `text` stands for to `out`; every `%` must start a
/// `%XX` escape, and `+` is itself.
pub fn decode_into(text: &str, out: &mut Vec<u8>) -> Result<(), BadEscape> {
    decode(text, Rules::STRICT, |b| out.push(b))
}

/// Whether every `%` in `text` starts a `%XX` escape.
pub fn check(text: &str) -> Result<(), BadEscape> {
    decode(text, Rules::STRICT, |_| {})
}

/// Appends the bytes of form-encoded `text` to `out`: `+` is a space, and
/// a `%` that does not start a `%XX` escape stands for itself.
pub fn decode_form_into(text: &str, out: &mut Vec<u8>) {
    // Lenient rules have no failure to report.
    let _ = decode(text, Rules::FORM, |b| out.push(b));
}

/// How one decoder reads `+` and malformed escapes.
#[derive(Clone, Copy)]
struct Rules {
    plus_is_space: bool,
    refuse_bad_escapes: bool,
}

impl Rules {
    const STRICT: Rules = Rules {
        plus_is_space: false,
        refuse_bad_escapes: true,
    };
    const FORM: Rules = Rules {
        plus_is_space: true,
        refuse_bad_escapes: false,
    };
}

fn decode(text: &str, rules: Rules, mut push: impl FnMut(u8)) -> Result<(), BadEscape> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => match escape_at(bytes, i) {
                Some(byte) => {
                    push(byte);
                    i += 3;
                    continue;
                }
                None if rules.refuse_bad_escapes => return Err(BadEscape),
                None => push(b'%'),
            },
            b'+' if rules.plus_is_space => push(b' '),
            b => push(b),
        }
        i += 1;
    }
    Ok(())
}

/// The byte of the `%XX` escape starting at `bytes[at]`, if it is one.
fn escape_at(bytes: &[u8], at: usize) -> Option<u8> {
    let high = hex_value(*bytes.get(at + 1)?)?;
    let low = hex_value(*bytes.get(at + 2)?)?;
    Some(high << 4 | low)
}

fn hex_value(b: u8) -> Option<u8> {
    // A hex digit's value is below 16: the narrowing never fails.
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789ABCDEF"[usize::from(nibble & 0x0f)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(text: &str) -> Result<Vec<u8>, BadEscape> {
        let mut out = Vec::new();
        decode_into(text, &mut out).map(|()| out)
    }

    fn form(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        decode_form_into(text, &mut out);
        out
    }

    #[test]
    fn strict_decoding_refuses_a_percent_without_two_hex_digits() {
        assert_eq!(strict("us%40er+%3a"), Ok(b"us@er+:".to_vec()));
        for bad in ["%", "%4", "%zz", "a%4g", "%%41"] {
            assert_eq!(strict(bad), Err(BadEscape), "{bad}");
            assert_eq!(check(bad), Err(BadEscape), "{bad}");
        }
        assert_eq!(check("/ws/a%2Fb?x=%41"), Ok(()));
    }

    #[test]
    fn form_decoding_keeps_malformed_escapes_and_reads_plus_as_space() {
        assert_eq!(form("a%2Bb+c"), b"a+b c");
        assert_eq!(form("%zz%4%"), b"%zz%4%");
        assert_eq!(form("%C3%9c"), "Ü".as_bytes());
    }

    #[test]
    fn what_is_encoded_decodes_to_itself() {
        let text = "a/b c:d%e?f#+é~";
        let mut out = Vec::new();
        assert_eq!(decode_into(&encode(text), &mut out), Ok(()));
        assert_eq!(out, text.as_bytes());
    }
}
