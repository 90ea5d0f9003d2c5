//! Base64 for file contents: the encoder of FILE_READ (FILES.md §1.2 step 12)
//! and the strict, Python-compatible decoder of FILE_WRITE (FILES.md §2.2
//! step 2).
//!
//! This module owns the alphabet, the padding acceptance rules and the
//! reasons a text is refused. It must never be lenient beyond those rules
//! (no whitespace skipping, no URL-safe alphabet, no missing padding) and
//! never echo the offending content in an error: file bytes are not logged.

use std::fmt;

/// The standard alphabet (RFC 4648 §4).
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Marks bytes that are not in [`ALPHABET`] in [`DECODE`].
const INVALID: u8 = 0xFF;

/// Reverse table: byte → 6-bit value, [`INVALID`] for everything else
/// (including `=`, which the decoder handles before consulting the table).
const DECODE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Why [`decode_strict`] refused a text. The `Display` form is a short
/// reason; the caller prefixes it with "Bad base64: ".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Base64Error {
    /// A character outside `A–Z a–z 0–9 + / =` (whitespace, newline, URL-safe
    /// `-`/`_`, non-ASCII, ...).
    InvalidCharacter {
        /// Byte offset of the character in the text.
        offset: usize,
    },
    /// The text starts with `=`.
    LeadingPadding,
    /// A data character follows a `=`.
    DataAfterPadding {
        /// Byte offset of that data character.
        offset: usize,
    },
    /// The number of data characters leaves one character in the last group
    /// (`d mod 4 == 1`), which cannot encode a whole byte.
    IncompleteGroup,
    /// The number of `=` does not fit the last group: a group of two data
    /// characters needs exactly two, a group of three exactly one.
    WrongPadding {
        /// How many `=` the last group requires.
        expected: usize,
        /// How many were present.
        found: usize,
    },
}

impl fmt::Display for Base64Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Base64Error::InvalidCharacter { offset } => {
                write!(f, "invalid character at offset {offset}")
            }
            Base64Error::LeadingPadding => f.write_str("padding at the start"),
            Base64Error::DataAfterPadding { offset } => {
                write!(f, "data after padding at offset {offset}")
            }
            Base64Error::IncompleteGroup => {
                f.write_str("number of data characters is one more than a multiple of 4")
            }
            Base64Error::WrongPadding { expected, found } => {
                write!(
                    f,
                    "incorrect padding: expected {expected} '=', found {found}"
                )
            }
        }
    }
}

impl std::error::Error for Base64Error {}

/// Encodes `bytes` with the standard alphabet and `=` padding, without line
/// breaks. The output is exactly `4 × ceil(len / 3)` characters.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3).saturating_mul(4));
    let mut groups = bytes.chunks_exact(3);
    for group in &mut groups {
        if let [a, b, c] = *group {
            let n = (u32::from(a) << 16) | (u32::from(b) << 8) | u32::from(c);
            push_sextets(&mut out, n, 4);
        }
    }
    match *groups.remainder() {
        [a] => {
            push_sextets(&mut out, u32::from(a) << 16, 2);
            out.push_str("==");
        }
        [a, b] => {
            push_sextets(&mut out, (u32::from(a) << 16) | (u32::from(b) << 8), 3);
            out.push('=');
        }
        _ => {}
    }
    out
}

/// Appends the first `count` 6-bit groups of the 24-bit value `n`, most
/// significant first.
fn push_sextets(out: &mut String, n: u32, count: u32) {
    for i in 0..count {
        let sextet = (n >> (18 - 6 * i)) & 0x3F;
        // `sextet` < 64, so the lookup always succeeds.
        if let Some(&symbol) = ALPHABET.get(sextet as usize) {
            out.push(char::from(symbol));
        }
    }
}

/// Decodes `text` under the strict rules of FILES.md §2.2 step 2:
///
/// * only `A–Z a–z 0–9 + / =`;
/// * `=` is never first, and after the first `=` only `=` may follow;
/// * with `d` data characters: `d mod 4 ≠ 1`; `d mod 4 == 2` needs exactly
///   two `=`, `d mod 4 == 3` exactly one, `d mod 4 == 0` tolerates any
///   number (including none);
/// * non-zero unused bits in the last group are ignored (`"QR=="` → `A`);
/// * the empty text decodes to no bytes.
pub fn decode_strict(text: &str) -> Result<Vec<u8>, Base64Error> {
    let bytes = text.as_bytes();
    // Everything before the first `=` is data, everything from it on padding.
    let data_len = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
    let (data, padding) = bytes.split_at_checked(data_len).unwrap_or((bytes, &[]));

    // Character checks come first, in text order, so that the reported
    // offset is the first offending character.
    for (offset, &b) in data.iter().enumerate() {
        if DECODE.get(usize::from(b)) == Some(&INVALID) {
            return Err(Base64Error::InvalidCharacter { offset });
        }
    }
    if data.is_empty() && !padding.is_empty() {
        return Err(Base64Error::LeadingPadding);
    }
    for (i, &b) in padding.iter().enumerate() {
        if b != b'=' {
            let offset = data_len + i;
            return Err(if DECODE.get(usize::from(b)) == Some(&INVALID) {
                Base64Error::InvalidCharacter { offset }
            } else {
                Base64Error::DataAfterPadding { offset }
            });
        }
    }

    let expected = match data.len() % 4 {
        1 => return Err(Base64Error::IncompleteGroup),
        2 => Some(2),
        3 => Some(1),
        _ => None,
    };
    if let Some(expected) = expected {
        if padding.len() != expected {
            return Err(Base64Error::WrongPadding {
                expected,
                found: padding.len(),
            });
        }
    }

    let mut out = Vec::with_capacity(data.len() / 4 * 3 + 2);
    let mut groups = data.chunks_exact(4);
    for group in &mut groups {
        let n = sextets(group);
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    let tail = groups.remainder();
    // The tail's sextets are left-aligned in a 24-bit value; the bits below
    // the last whole byte are the "unused trailing bits", deliberately ignored.
    let n = sextets(tail) << (6 * (4 - tail.len()));
    match tail.len() {
        2 => out.push((n >> 16) as u8),
        3 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]),
        _ => {}
    }
    Ok(out)
}

/// Packs up to four already-validated alphabet characters into one integer,
/// six bits each, first character most significant.
fn sextets(chars: &[u8]) -> u32 {
    chars.iter().fold(0, |n, &b| {
        let value = DECODE.get(usize::from(b)).copied().unwrap_or(0);
        (n << 6) | u32::from(value & 0x3F)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_table_is_the_inverse_of_the_alphabet() {
        for (value, &symbol) in ALPHABET.iter().enumerate() {
            assert_eq!(usize::from(DECODE[usize::from(symbol)]), value);
        }
        let valid = DECODE.iter().filter(|&&v| v != INVALID).count();
        assert_eq!(valid, 64);
        assert_eq!(DECODE[usize::from(b'=')], INVALID);
    }
}
