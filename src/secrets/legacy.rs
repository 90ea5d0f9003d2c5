//! The reference's fallback audit-key file `audit-key.enc` (AUDIT.md §7.4),
//! read for import only.
//!
//! Content: ASCII `<hex(salt)>:<hex(ct)>`, where `ct` is the 32-byte key
//! XORed with `HMAC-SHA256(passphrase, salt || be32(1))` (the first and only
//! block of the keystream). The format has no integrity check: a wrong
//! passphrase "decrypts" to some other key, which is why the caller checks
//! the result against the audit log before trusting it.
//!
//! This module must never write, rename or delete the file, and never
//! produce this format: new secrets go only into `tokens.enc`.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::secret::Passphrase;

/// The longest legacy file read: the real content is 97 bytes, plus
/// whitespace.
pub const MAX_LEN: usize = 4096;

/// Why a legacy file cannot be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegacyProblem {
    /// Longer than `MAX_LEN`.
    TooLong,
    /// Not two hex fields separated by `:`.
    Format,
    /// The salt does not decode to 16 bytes.
    SaltLength,
    /// The ciphertext does not decode to 32 bytes.
    CiphertextLength,
}

impl fmt::Display for LegacyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LegacyProblem::TooLong => "it is longer than any valid key file",
            LegacyProblem::Format => "it is not two hex fields separated by ':'",
            LegacyProblem::SaltLength => "its salt is not 16 bytes",
            LegacyProblem::CiphertextLength => "its ciphertext is not 32 bytes",
        })
    }
}

/// A parsed legacy file.
#[derive(Clone, PartialEq, Eq)]
pub struct LegacyKeyFile {
    salt: [u8; 16],
    ciphertext: [u8; 32],
}

impl fmt::Debug for LegacyKeyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LegacyKeyFile(..)")
    }
}

impl LegacyKeyFile {
    /// Parses the file content (surrounding ASCII whitespace is ignored; hex
    /// digits may be of either case).
    pub fn parse(content: &[u8]) -> Result<LegacyKeyFile, LegacyProblem> {
        if content.len() > MAX_LEN {
            return Err(LegacyProblem::TooLong);
        }
        let text = content.trim_ascii();
        let mut fields = text.split(|&b| b == b':');
        let (Some(salt), Some(ciphertext), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(LegacyProblem::Format);
        };
        let salt = unhex(salt).ok_or(LegacyProblem::Format)?;
        let ciphertext = unhex(ciphertext).ok_or(LegacyProblem::Format)?;
        Ok(LegacyKeyFile {
            salt: salt
                .as_slice()
                .try_into()
                .map_err(|_| LegacyProblem::SaltLength)?,
            ciphertext: ciphertext
                .as_slice()
                .try_into()
                .map_err(|_| LegacyProblem::CiphertextLength)?,
        })
    }

    /// XORs the ciphertext with the passphrase's keystream. Any passphrase
    /// gives 32 bytes; only the log can tell whether they are the key.
    pub fn decrypt(&self, passphrase: &Passphrase) -> Zeroizing<Vec<u8>> {
        // HMAC takes keys of any length, so this cannot fail; an empty
        // keystream would only make the result fail the log check.
        let stream = match <Hmac<Sha256> as Mac>::new_from_slice(passphrase.bytes()) {
            Ok(mut mac) => {
                mac.update(&self.salt);
                mac.update(&1u32.to_be_bytes());
                Zeroizing::new(mac.finalize().into_bytes().to_vec())
            }
            Err(_) => Zeroizing::new(vec![0u8; 32]),
        };
        Zeroizing::new(
            self.ciphertext
                .iter()
                .zip(stream.iter())
                .map(|(c, s)| c ^ s)
                .collect(),
        )
    }
}

/// Decodes hex of either case; `None` for an odd length, an empty field or
/// a non-hex character.
fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if text.is_empty() || text.len() % 2 != 0 {
        return None;
    }
    text.chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}
