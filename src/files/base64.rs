//! Base64 for file contents: the encoder of FILE_READ (FILES.md §1.2 step 12)
//! and the strict, Python-compatible decoder of FILE_WRITE (FILES.md §2.2
//! step 2).
//!
//! The `base64` crate does the coding; this module owns the acceptance
//! rules on top of its decoder and the reasons a text is refused. It must
//! never be lenient beyond those rules (no whitespace skipping, no URL-safe
//! alphabet, no missing padding) and never echo the offending content in an
//! error: file bytes are not logged.

use std::fmt;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// The decoder behind [`decode_strict`]: it only ever sees data characters
/// already checked here, so it needs no padding, and it keeps Python's
/// tolerance of non-zero unused bits in the last group.
const DECODER: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

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
    STANDARD.encode(bytes)
}

/// Appends the encoding of `bytes` to `text`, as [`encode`] spells it.
pub fn encode_into(bytes: &[u8], text: &mut String) {
    STANDARD.encode_string(bytes, text);
}

/// How many characters [`encode`] makes of `len` bytes.
pub fn encoded_len(len: usize) -> usize {
    len.div_ceil(3).saturating_mul(4)
}

/// Whether `b` is a data character of the standard alphabet (`=` is not).
fn is_data(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
}

/// Whether every byte of `bytes` is a data character. Written without an
/// early exit and with comparisons only, so that it runs over whole vector
/// registers: a 10 MiB text is checked in about a millisecond, where a
/// byte-at-a-time scan that stops at the first offender takes twenty.
fn all_data(bytes: &[u8]) -> bool {
    bytes.chunks(64).all(|chunk| {
        chunk.iter().fold(true, |ok, &b| {
            let letter = (b | 0x20).wrapping_sub(b'a') < 26;
            let digit = b.wrapping_sub(b'0') < 10;
            ok & (letter | digit | (b == b'+') | (b == b'/'))
        })
    })
}

/// Input characters decoded per step of [`decode_strict`]: a multiple of 4,
/// so that every step but the last is whole groups.
const STEP_CHARS: usize = 16 * 1024;

/// Decodes `text` under the strict rules of FILES.md §2.2 step 2:
///
/// * only `A–Z a–z 0–9 + / =`;
/// * `=` is never first, and after the first `=` only `=` may follow;
/// * with `d` data characters: `d mod 4 ≠ 1`; `d mod 4 == 2` needs exactly
///   two `=`, `d mod 4 == 3` exactly one, `d mod 4 == 0` tolerates any
///   number (including none);
/// * non-zero unused bits in the last group are ignored (`"QR=="` → `A`);
/// * the empty text decodes to no bytes.
///
/// The bytes are decoded into the text's own buffer, which is handed back:
/// a request's content is never alive twice (the decoded bytes are shorter
/// than the text and always written behind the point being read).
pub fn decode_strict(text: String) -> Result<Vec<u8>, Base64Error> {
    // Valid text is the common case and is checked in one fast pass; only a
    // refused one is walked again, in text order, for the exact reason.
    let bytes = text.as_bytes();
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    let data_len = bytes.len() - padding;
    let data = &bytes[..data_len];
    if !all_data(data) {
        return Err(refusal(bytes));
    }
    check_groups(data_len, padding)?;

    let mut buffer = text.into_bytes();
    let mut step = vec![0u8; STEP_CHARS / 4 * 3];
    let mut read = 0;
    let mut written = 0;
    while read < data_len {
        let end = (read + STEP_CHARS).min(data_len);
        let produced = DECODER
            .decode_slice(&buffer[read..end], &mut step)
            // The checks above leave the decoder nothing to refuse; should
            // it, the reason names where it stopped.
            .map_err(|e| match e {
                base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidByte(
                    offset,
                    _,
                )) => Base64Error::InvalidCharacter {
                    offset: read + offset,
                },
                _ => Base64Error::IncompleteGroup,
            })?;
        // `written` trails `read` by a quarter, so this never reaches a
        // character that is still to be decoded.
        buffer[written..written + produced].copy_from_slice(&step[..produced]);
        written += produced;
        read = end;
    }
    buffer.truncate(written);
    Ok(buffer)
}

/// The padding rules, once every data character is known to be valid.
fn check_groups(data_len: usize, padding: usize) -> Result<(), Base64Error> {
    if data_len == 0 && padding > 0 {
        return Err(Base64Error::LeadingPadding);
    }
    let expected = match data_len % 4 {
        1 => return Err(Base64Error::IncompleteGroup),
        2 => Some(2),
        3 => Some(1),
        _ => None,
    };
    match expected {
        Some(expected) if padding != expected => Err(Base64Error::WrongPadding {
            expected,
            found: padding,
        }),
        _ => Ok(()),
    }
}

/// Why `bytes`, which holds a character that is neither data nor trailing
/// padding, is refused: the first such character in text order.
fn refusal(bytes: &[u8]) -> Base64Error {
    // Everything before the first `=` is data, everything from it on padding.
    let data_len = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
    let (data, padding) = bytes.split_at(data_len);
    if let Some(offset) = data.iter().position(|&b| !is_data(b)) {
        return Base64Error::InvalidCharacter { offset };
    }
    if data.is_empty() && !padding.is_empty() {
        return Base64Error::LeadingPadding;
    }
    match padding.iter().position(|&b| b != b'=') {
        Some(i) if is_data(padding[i]) => Base64Error::DataAfterPadding {
            offset: data_len + i,
        },
        Some(i) => Base64Error::InvalidCharacter {
            offset: data_len + i,
        },
        // Unreachable for a text the fast pass refused; the groups decide.
        None => check_groups(data.len(), padding.len())
            .err()
            .unwrap_or(Base64Error::IncompleteGroup),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The character check and the crate's alphabet must agree, or a text
    /// could pass the rules and still be refused (or the reverse).
    /// The fast pass and the exact one must accept the same characters.
    #[test]
    fn the_fast_check_accepts_exactly_the_data_characters() {
        for b in 0..=u8::MAX {
            assert_eq!(all_data(&[b]), is_data(b), "byte {b:#04x}");
        }
    }

    #[test]
    fn data_characters_are_exactly_the_decoder_alphabet() {
        for b in 0..=u8::MAX {
            let accepted = DECODER.decode([b, b'A']).is_ok();
            assert_eq!(is_data(b), accepted, "byte {b:#04x}");
        }
    }
}
