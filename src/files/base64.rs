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

/// Whether `b` is a data character of the standard alphabet (`=` is not).
fn is_data(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
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
        if !is_data(b) {
            return Err(Base64Error::InvalidCharacter { offset });
        }
    }
    if data.is_empty() && !padding.is_empty() {
        return Err(Base64Error::LeadingPadding);
    }
    for (i, &b) in padding.iter().enumerate() {
        if b != b'=' {
            let offset = data_len + i;
            return Err(if !is_data(b) {
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

    // Every rule above has been checked, so the decoder cannot refuse the
    // data; should it, its offset still names the character it stopped at.
    DECODER.decode(data).map_err(|e| match e {
        base64::DecodeError::InvalidByte(offset, _) => Base64Error::InvalidCharacter { offset },
        _ => Base64Error::IncompleteGroup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The character check and the crate's alphabet must agree, or a text
    /// could pass the rules and still be refused (or the reverse).
    #[test]
    fn data_characters_are_exactly_the_decoder_alphabet() {
        for b in 0..=u8::MAX {
            let accepted = DECODER.decode([b, b'A']).is_ok();
            assert_eq!(is_data(b), accepted, "byte {b:#04x}");
        }
    }
}
