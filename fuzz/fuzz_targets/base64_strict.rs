//! Fuzzes the base64 of file contents (`files::base64`, which codes with the
//! `base64` crate's SIMD engine) against that crate's scalar engine. Any
//! text: the strict check accepts it exactly when the rules of a
//! `FILE_WRITE` content allow it, and then decodes it, whole or in pieces of
//! 1 to 256 characters, to what the scalar engine makes of its data
//! characters (unused bits of the last group ignored). Any bytes: the
//! encoding is the scalar engine's, also when appended a piece at a time as
//! `FILE_READ` does (pieces of 3 × the piece size), and it decodes back to
//! the bytes.
#![no_main]

use autogpt_shim::files::base64::{self as shim, Base64Error};
use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use libfuzzer_sys::fuzz_target;

/// Data characters only, unused bits tolerated: what the rules leave to the
/// decoder once the padding has been judged.
const ORACLE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

fn is_data(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
}

/// The rules, spelled out the slow way.
fn allowed(text: &[u8]) -> bool {
    let padding = text.iter().rev().take_while(|&&b| b == b'=').count();
    let data = &text[..text.len() - padding];
    if !data.iter().all(|&b| is_data(b)) || (data.is_empty() && padding > 0) {
        return false;
    }
    match data.len() % 4 {
        1 => false,
        2 => padding == 2,
        3 => padding == 1,
        _ => true,
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks a piece size; the rest is the text and the bytes.
    let (&pick, input) = data.split_first().unwrap_or((&0, &[]));
    let piece_chars = usize::from(pick) + 1;

    let encoded = shim::encode(input);
    assert_eq!(encoded, STANDARD.encode(input));
    let mut appended = String::from("prefix");
    for piece in input.chunks(piece_chars * 3) {
        shim::encode_into(piece, &mut appended);
    }
    assert_eq!(appended.strip_prefix("prefix"), Some(encoded.as_str()));
    assert_eq!(shim::decode_strict(encoded).as_deref(), Ok(input));

    let Ok(text) = String::from_utf8(input.to_vec()) else {
        return;
    };
    match shim::check_strict(text) {
        Ok(checked) => {
            assert!(allowed(input), "accepted {input:?}");
            let data_len = input.iter().position(|&b| b == b'=').unwrap_or(input.len());
            let expected = ORACLE
                .decode(&input[..data_len])
                .expect("the other coder refused an accepted text");
            assert_eq!(checked.decoded_len(), expected.len());
            let mut joined = Vec::new();
            checked
                .decode_pieces(piece_chars, |piece| {
                    joined.extend_from_slice(piece);
                    Ok::<_, Base64Error>(())
                })
                .expect("a checked text failed to decode in pieces");
            assert_eq!(joined, expected);
            let whole = checked
                .into_bytes()
                .expect("a checked text failed to decode");
            assert_eq!(whole, expected);
        }
        Err(refusal) => {
            assert!(!allowed(input), "refused {input:?}: {refusal}");
            if let Base64Error::InvalidCharacter { offset } = refusal {
                let b = input[offset];
                assert!(!is_data(b) && b != b'=', "offset {offset} of {input:?}");
            }
        }
    }
});
