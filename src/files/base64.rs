//! Base64 for file contents: the encoder of FILE_READ (FILES.md §1.2 step 12)
//! and the strict, Python-compatible decoder of FILE_WRITE (FILES.md §2.2
//! step 2).
//!
//! The `base64` crate's SIMD engine does the coding (AVX2 or NEON where the
//! processor has it, detected at run time, else its scalar engine); this
//! module owns the acceptance rules on top of its decoder and the reasons a
//! text is refused. It must never be lenient beyond those rules (no
//! whitespace skipping, no URL-safe alphabet, no missing padding) and never
//! echo the offending content in an error: file bytes are not logged.

use std::fmt;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurposeConfig};

/// The crate's SIMD engine, which picks its vector code at run time, where
/// it exists; its scalar engine, which codes the same, elsewhere.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
type Coder = base64::engine::Simd;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
type Coder = base64::engine::GeneralPurpose;

/// A [`Coder`] for the standard alphabet.
fn standard(config: GeneralPurposeConfig) -> Coder {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    return Coder::standard(config);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return Coder::new(&base64::alphabet::STANDARD, config);
}

/// The encoder: standard alphabet, `=` padding. Built once: building an
/// engine computes its decoding table and probes the processor.
static ENCODER: LazyLock<Coder> = LazyLock::new(|| standard(GeneralPurposeConfig::new()));

/// The decoder behind [`Checked`]: it only ever sees data characters
/// already checked here, so it needs no padding, and it keeps Python's
/// tolerance of non-zero unused bits in the last group.
static DECODER: LazyLock<Coder> = LazyLock::new(|| {
    standard(
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireNone),
    )
});

/// Why [`check_strict`] refused a text. The `Display` form is a short
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

/// For a sink of [`Checked::decode_pieces`] that does I/O; the message
/// carries the prefix callers put before a reason.
impl From<Base64Error> for std::io::Error {
    fn from(e: Base64Error) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("Bad base64: {e}"))
    }
}

/// Encodes `bytes` with the standard alphabet and `=` padding, without line
/// breaks. The output is exactly `4 × ceil(len / 3)` characters.
pub fn encode(bytes: &[u8]) -> String {
    ENCODER.encode(bytes)
}

/// Appends the encoding of `bytes` to `text`, as [`encode`] spells it.
pub fn encode_into(bytes: &[u8], text: &mut String) {
    ENCODER.encode_string(bytes, text);
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

/// Input characters decoded per step of [`Checked::into_bytes`]: a
/// multiple of 4, so that every step but the last is whole groups.
const STEP_CHARS: usize = 16 * 1024;

/// A text that [`check_strict`] accepted: its decoded length is known and
/// decoding it cannot be refused.
#[derive(Debug)]
pub struct Checked {
    text: String,
    /// Characters before the trailing `=`: all of them data.
    data_len: usize,
}

/// Checks `text` against the strict rules of FILES.md §2.2 step 2 without
/// decoding it:
///
/// * only `A–Z a–z 0–9 + / =`;
/// * `=` is never first, and after the first `=` only `=` may follow;
/// * with `d` data characters: `d mod 4 ≠ 1`; `d mod 4 == 2` needs exactly
///   two `=`, `d mod 4 == 3` exactly one, `d mod 4 == 0` tolerates any
///   number (including none);
/// * non-zero unused bits in the last group are ignored (`"QR=="` → `A`);
/// * the empty text decodes to no bytes.
pub fn check_strict(text: String) -> Result<Checked, Base64Error> {
    // Valid text is the common case and is checked in one fast pass; only a
    // refused one is walked again, in text order, for the exact reason.
    let bytes = text.as_bytes();
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    let data_len = bytes.len() - padding;
    if !all_data(&bytes[..data_len]) {
        return Err(refusal(bytes));
    }
    check_groups(data_len, padding)?;
    Ok(Checked { text, data_len })
}

/// [`check_strict`], then [`Checked::into_bytes`].
pub fn decode_strict(text: String) -> Result<Vec<u8>, Base64Error> {
    check_strict(text)?.into_bytes()
}

impl Checked {
    /// How many bytes the text decodes to.
    pub fn decoded_len(&self) -> usize {
        // A last group of two data characters holds one byte, of three two.
        self.data_len / 4 * 3 + (self.data_len % 4).saturating_sub(1)
    }

    /// Decodes the text in order, handing `sink` pieces of at most
    /// `piece_chars / 4 × 3` bytes (`piece_chars` is rounded down to whole
    /// groups, and at least one). Nothing is decoded ahead of the piece the
    /// sink is given, so a large text needs one piece of memory besides
    /// itself, and the sink's work on a piece (writing it out) happens
    /// before the next is decoded.
    pub fn decode_pieces<E: From<Base64Error>>(
        &self,
        piece_chars: usize,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let piece_chars = (piece_chars / 4).max(1) * 4;
        let data = &self.text.as_bytes()[..self.data_len];
        let mut piece = vec![0u8; piece_chars.min(self.data_len.next_multiple_of(4)) / 4 * 3];
        for (index, chars) in data.chunks(piece_chars).enumerate() {
            let produced = decode_run(chars, index * piece_chars, &mut piece)?;
            sink(&piece[..produced])?;
        }
        Ok(())
    }

    /// Decodes the whole text into its own buffer, which is handed back: a
    /// content is never alive twice (the decoded bytes are shorter than the
    /// text and always written behind the point being read).
    pub fn into_bytes(self) -> Result<Vec<u8>, Base64Error> {
        let data_len = self.data_len;
        let mut buffer = self.text.into_bytes();
        let mut step = vec![0u8; STEP_CHARS / 4 * 3];
        let mut read = 0;
        let mut written = 0;
        while read < data_len {
            let end = (read + STEP_CHARS).min(data_len);
            let produced = decode_run(&buffer[read..end], read, &mut step)?;
            // `written` trails `read` by a quarter, so this never reaches a
            // character that is still to be decoded.
            buffer[written..written + produced].copy_from_slice(&step[..produced]);
            written += produced;
            read = end;
        }
        buffer.truncate(written);
        Ok(buffer)
    }
}

/// Decodes `chars`, data characters that start at `offset` in the text,
/// into `out`, which has room for `⌈len / 4⌉ × 3` bytes; returns how many
/// bytes it made.
fn decode_run(chars: &[u8], offset: usize, out: &mut [u8]) -> Result<usize, Base64Error> {
    DECODER
        .decode_slice(chars, out)
        // The checks leave the decoder nothing to refuse; should it, the
        // reason names where it stopped.
        .map_err(|e| match e {
            base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidByte(at, _)) => {
                Base64Error::InvalidCharacter {
                    offset: offset + at,
                }
            }
            _ => Base64Error::IncompleteGroup,
        })
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

    /// The fast pass and the exact one must accept the same characters.
    #[test]
    fn the_fast_check_accepts_exactly_the_data_characters() {
        for b in 0..=u8::MAX {
            assert_eq!(all_data(&[b]), is_data(b), "byte {b:#04x}");
        }
    }

    #[test]
    fn pieces_join_to_the_whole_decoding_for_every_piece_size() {
        let raw: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for len in [0, 1, 2, 3, 4, 5, 299, 300, 301, 1000] {
            let text = encode(&raw[..len]);
            for piece_chars in [0, 1, 4, 5, 8, 12, 400, 4096] {
                let checked = check_strict(text.clone()).unwrap();
                assert_eq!(checked.decoded_len(), len);
                let mut joined = Vec::new();
                let mut largest = 0;
                checked
                    .decode_pieces(piece_chars, |piece| {
                        largest = largest.max(piece.len());
                        joined.extend_from_slice(piece);
                        Ok::<_, Base64Error>(())
                    })
                    .unwrap();
                assert_eq!(
                    joined,
                    &raw[..len],
                    "{len} bytes in pieces of {piece_chars}"
                );
                assert!(largest <= (piece_chars / 4).max(1) * 3);
            }
        }
    }

    #[test]
    fn decoded_len_counts_a_short_last_group_and_ignores_extra_padding() {
        for (text, len) in [
            ("", 0),
            ("QQ==", 1),
            ("QUI=", 2),
            ("QUJD", 3),
            ("QUJD====", 3),
        ] {
            assert_eq!(check_strict(text.to_owned()).unwrap().decoded_len(), len);
            assert_eq!(decode_strict(text.to_owned()).unwrap().len(), len);
        }
    }

    #[test]
    fn a_sink_error_stops_the_decoding_at_that_piece() {
        let checked = check_strict(encode(&[7; 30])).unwrap();
        let mut pieces = 0;
        let stopped = checked.decode_pieces(8, |_| {
            pieces += 1;
            if pieces == 2 {
                Err(Base64Error::IncompleteGroup)
            } else {
                Ok(())
            }
        });
        assert_eq!(stopped, Err(Base64Error::IncompleteGroup));
        assert_eq!(pieces, 2);
    }

    /// The character check and the decoder's alphabet must agree, or a
    /// text could pass the rules and still be refused (or the reverse): in
    /// a short last group, and in a run long enough for the vector path.
    #[test]
    fn data_characters_are_exactly_the_decoder_alphabet() {
        for b in 0..=u8::MAX {
            let short = DECODER.decode([b, b'A']).is_ok();
            assert_eq!(is_data(b), short, "byte {b:#04x} in a last group");
            let mut run = vec![b'A'; 256];
            run[200] = b;
            let long = DECODER.decode(&run).is_ok();
            assert_eq!(is_data(b), long, "byte {b:#04x} in a long run");
        }
    }

    #[test]
    fn every_short_last_group_decodes_to_the_bytes_it_encodes() {
        for first in 0..=u8::MAX {
            let text = encode(&[first]);
            assert_eq!(decode_strict(text).unwrap(), [first]);
            for second in 0..=u8::MAX {
                let text = encode(&[first, second]);
                assert_eq!(decode_strict(text).unwrap(), [first, second]);
            }
        }
    }

    #[test]
    fn unused_bits_of_a_short_last_group_are_ignored() {
        // "QQ" is the canonical spelling of 'A'; "QR" to "QV" differ only in
        // the 4 unused bits, "QUI" and "QUJ" only in the 2 unused bits.
        for text in ["QQ==", "QR==", "QV==", "QUJD", "QUJDQR=="] {
            let bytes = decode_strict(text.to_owned()).unwrap();
            assert_eq!(bytes.first(), Some(&b'A'), "{text}");
        }
        assert_eq!(decode_strict("QUJ=".to_owned()).unwrap(), b"AB");
        assert_eq!(decode_strict("QUI=".to_owned()).unwrap(), b"AB");
    }
}
