//! The byte format of `tokens.enc` (AUTH.md §10.3), without any I/O: the
//! 50-byte header, the Argon2id key derivation, AES-256-GCM with the header
//! as associated data, and the JSON plaintext.
//!
//! Owns every number of §10.3. It must never touch a file, draw randomness
//! implicitly (salt and nonce are parameters, so the test vector is
//! reproducible) or return plaintext in a buffer that is not zeroed on drop.
//! Derived keys live in [`FileKey`], which zeroes itself.

use std::fmt;
use std::ops::RangeInclusive;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce, Tag};
use argon2::{Algorithm, Argon2, Params, Version};
use serde::Deserialize;
use zeroize::Zeroizing;

use super::secret::{Passphrase, SecretString};

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"AGSTOKEN";
/// The only format version.
pub const FORMAT_VERSION: u8 = 1;
/// KDF id of Argon2id, version 0x13.
pub const KDF_ARGON2ID: u8 = 1;
/// Salt length in bytes.
pub const SALT_LEN: usize = 16;
/// AES-GCM nonce length in bytes.
pub const NONCE_LEN: usize = 12;
/// AES-GCM tag length in bytes.
pub const TAG_LEN: usize = 16;
/// Header length: magic, version, KDF id, three parameters, salt, nonce.
pub const HEADER_LEN: usize = 50;
/// The shortest valid file: a header and the tag of an empty plaintext.
pub const MIN_FILE_LEN: usize = HEADER_LEN + TAG_LEN;
/// The longest file a reader accepts. Three short secrets never come close;
/// the bound keeps a damaged or hostile file from making the reader
/// allocate without limit (this shim's own bound, not in the spec).
pub const MAX_FILE_LEN: usize = 1 << 20;

/// The Argon2id cost parameters carried by the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KdfParams {
    /// Memory in KiB.
    pub m_cost_kib: u32,
    /// Passes.
    pub t_cost: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl KdfParams {
    /// What writers always use: 64 MiB, 3 passes, 4 lanes.
    pub const WRITER: KdfParams = KdfParams {
        m_cost_kib: 65_536,
        t_cost: 3,
        parallelism: 4,
    };
    /// Accepted `m_cost` (KiB). The lower bound keeps a forged header from
    /// making the derivation cheap to brute-force; the upper bound (1 GiB)
    /// keeps it from exhausting memory.
    pub const M_COST_KIB: RangeInclusive<u32> = 19_456..=1_048_576;
    /// Accepted `t_cost`.
    pub const T_COST: RangeInclusive<u32> = 1..=10;
    /// Accepted parallelism.
    pub const PARALLELISM: RangeInclusive<u32> = 1..=16;

    /// Checks the bounds of AUTH.md §10.3.
    pub fn check(self) -> Result<KdfParams, FormatProblem> {
        if !Self::M_COST_KIB.contains(&self.m_cost_kib) {
            return Err(FormatProblem::MemoryCost(self.m_cost_kib));
        }
        if !Self::T_COST.contains(&self.t_cost) {
            return Err(FormatProblem::TimeCost(self.t_cost));
        }
        if !Self::PARALLELISM.contains(&self.parallelism) {
            return Err(FormatProblem::Parallelism(self.parallelism));
        }
        Ok(self)
    }
}

/// Why bytes are not a well-formed `tokens.enc` (before any decryption).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatProblem {
    /// Shorter than 66 bytes (this many).
    TooShort(usize),
    /// Longer than [`MAX_FILE_LEN`] (this many).
    TooLong(usize),
    /// The first eight bytes are not `AGSTOKEN`.
    Magic,
    /// A format version other than 1.
    Version(u8),
    /// A KDF id other than 1 (Argon2id).
    Kdf(u8),
    /// `m_cost` outside 19,456–1,048,576 KiB.
    MemoryCost(u32),
    /// `t_cost` outside 1–10.
    TimeCost(u32),
    /// Parallelism outside 1–16.
    Parallelism(u32),
}

impl fmt::Display for FormatProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatProblem::TooShort(len) => {
                write!(
                    f,
                    "{len} bytes, shorter than the {MIN_FILE_LEN}-byte minimum"
                )
            }
            FormatProblem::TooLong(len) => {
                write!(f, "{len} bytes, longer than the {MAX_FILE_LEN}-byte limit")
            }
            FormatProblem::Magic => f.write_str("it does not start with AGSTOKEN"),
            FormatProblem::Version(v) => write!(f, "unsupported format version {v}"),
            FormatProblem::Kdf(id) => write!(f, "unsupported key derivation id {id}"),
            FormatProblem::MemoryCost(m) => write!(
                f,
                "Argon2 memory cost {m} KiB outside {}-{}",
                KdfParams::M_COST_KIB.start(),
                KdfParams::M_COST_KIB.end()
            ),
            FormatProblem::TimeCost(t) => write!(
                f,
                "Argon2 time cost {t} outside {}-{}",
                KdfParams::T_COST.start(),
                KdfParams::T_COST.end()
            ),
            FormatProblem::Parallelism(p) => write!(
                f,
                "Argon2 parallelism {p} outside {}-{}",
                KdfParams::PARALLELISM.start(),
                KdfParams::PARALLELISM.end()
            ),
        }
    }
}

/// The parsed 50-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Argon2id parameters.
    pub params: KdfParams,
    /// Argon2id salt.
    pub salt: [u8; SALT_LEN],
    /// AES-GCM nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl Header {
    /// A writer's header: the fixed parameters with this salt and nonce.
    pub fn for_writing(salt: [u8; SALT_LEN], nonce: [u8; NONCE_LEN]) -> Header {
        Header {
            params: KdfParams::WRITER,
            salt,
            nonce,
        }
    }

    /// The header bytes (also the AAD).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8] = FORMAT_VERSION;
        out[9] = KDF_ARGON2ID;
        out[10..14].copy_from_slice(&self.params.m_cost_kib.to_be_bytes());
        out[14..18].copy_from_slice(&self.params.t_cost.to_be_bytes());
        out[18..22].copy_from_slice(&self.params.parallelism.to_be_bytes());
        out[22..38].copy_from_slice(&self.salt);
        out[38..50].copy_from_slice(&self.nonce);
        out
    }

    /// Parses and checks the header of a whole file (its length included),
    /// in the order of AUTH.md §10.3, before any expensive work.
    pub fn decode(file: &[u8]) -> Result<Header, FormatProblem> {
        if file.len() < MIN_FILE_LEN {
            return Err(FormatProblem::TooShort(file.len()));
        }
        if file.len() > MAX_FILE_LEN {
            return Err(FormatProblem::TooLong(file.len()));
        }
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&file[..HEADER_LEN]);
        if header[..8] != MAGIC {
            return Err(FormatProblem::Magic);
        }
        if header[8] != FORMAT_VERSION {
            return Err(FormatProblem::Version(header[8]));
        }
        if header[9] != KDF_ARGON2ID {
            return Err(FormatProblem::Kdf(header[9]));
        }
        let be32 = |at: usize| {
            u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let params = KdfParams {
            m_cost_kib: be32(10),
            t_cost: be32(14),
            parallelism: be32(18),
        }
        .check()?;
        let mut salt = [0u8; SALT_LEN];
        salt.copy_from_slice(&header[22..38]);
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&header[38..50]);
        Ok(Header {
            params,
            salt,
            nonce,
        })
    }

    /// Derives the AES-256 key: Argon2id v0x13 over the passphrase bytes
    /// with this header's salt and (checked) parameters, 32 bytes, no secret,
    /// no associated data.
    pub fn derive_key(&self, passphrase: &Passphrase) -> Result<FileKey, KdfFailure> {
        let params = self.params.check().map_err(|_| KdfFailure)?;
        let params = Params::new(
            params.m_cost_kib,
            params.t_cost,
            params.parallelism,
            Some(32),
        )
        .map_err(|_| KdfFailure)?;
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
        let mut key = FileKey(Zeroizing::new([0u8; 32]));
        // With the `zeroize` feature, argon2 zeroes its working memory when
        // the derivation ends; the output goes straight into the zeroizing
        // key.
        argon2
            .hash_password_into(passphrase.bytes(), &self.salt, &mut key.0[..])
            .map_err(|_| KdfFailure)?;
        Ok(key)
    }
}

/// Argon2 refused the (already range-checked) parameters or could not
/// allocate its memory. Not expected with checked parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfFailure;

/// A derived AES-256-GCM key; zeroed on drop, never printed.
pub struct FileKey(Zeroizing<[u8; 32]>);

impl FileKey {
    /// The raw key bytes (the test vector compares them).
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&self.0[..]))
    }
}

impl fmt::Debug for FileKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FileKey(<redacted>)")
    }
}

/// Encrypts `plaintext` into a whole file: header, ciphertext, tag.
pub fn seal(header: &Header, key: &FileKey, plaintext: &[u8]) -> Vec<u8> {
    let aad = header.encode();
    // Reserved up front so that appending the tag never reallocates; the
    // plaintext is copied into this buffer and encrypted in place, so no
    // unzeroed copy of it is left behind.
    let mut out = Vec::with_capacity(HEADER_LEN + plaintext.len() + TAG_LEN);
    out.extend_from_slice(&aad);
    out.extend_from_slice(plaintext);
    let tag = match key.cipher().encrypt_in_place_detached(
        Nonce::from_slice(&header.nonce),
        &aad,
        &mut out[HEADER_LEN..],
    ) {
        Ok(tag) => tag,
        // Only plaintexts longer than 64 GiB are refused by AES-GCM; this
        // crate never builds one. Never leave plaintext in the buffer.
        Err(_) => {
            out.clear();
            return out;
        }
    };
    out.extend_from_slice(&tag);
    out
}

/// Why a file could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The header or length is invalid.
    Format(FormatProblem),
    /// AES-GCM authentication failed: a wrong passphrase, or any change to
    /// the file (header included).
    Authentication,
}

/// Decrypts a whole file with an already derived key.
pub fn open_with_key(file: &[u8], key: &FileKey) -> Result<Zeroizing<Vec<u8>>, OpenError> {
    let header = Header::decode(file).map_err(OpenError::Format)?;
    let body = &file[HEADER_LEN..];
    let (ciphertext, tag) = body.split_at(body.len() - TAG_LEN);
    let mut buffer = Zeroizing::new(ciphertext.to_vec());
    // aes-gcm ≥ 0.10.3 applies the keystream only after the tag verified,
    // so a failed decryption leaves the ciphertext, never plaintext.
    key.cipher()
        .decrypt_in_place_detached(
            Nonce::from_slice(&header.nonce),
            &file[..HEADER_LEN],
            &mut buffer[..],
            Tag::from_slice(tag),
        )
        .map_err(|_| OpenError::Authentication)?;
    Ok(buffer)
}

/// Checks the header, derives the key and decrypts.
pub fn open(file: &[u8], passphrase: &Passphrase) -> Result<Zeroizing<Vec<u8>>, OpenError> {
    let header = Header::decode(file).map_err(OpenError::Format)?;
    // Parameters were range-checked by `decode`; a derivation failure cannot
    // be told apart from a wrong key by the caller and is reported the same.
    let key = header
        .derive_key(passphrase)
        .map_err(|_| OpenError::Authentication)?;
    open_with_key(file, &key)
}

/// The three secrets of the plaintext JSON. `None` is "not stored" (absent,
/// `null` and, as everywhere in this store, the empty string).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// `access_token`.
    pub access_token: Option<SecretString>,
    /// `audit_key`, as stored text (checked by the caller: AUDIT.md §7.2).
    pub audit_key: Option<SecretString>,
    /// `refresh_token`.
    pub refresh_token: Option<SecretString>,
}

/// Why decrypted bytes are not the expected JSON object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaintextProblem {
    /// Not a JSON object with string-or-null secrets and an integer
    /// `version` (also: not UTF-8, a duplicate member).
    Json,
    /// `version` is not 1.
    Version,
}

impl fmt::Display for PlaintextProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaintextProblem::Json => f.write_str(
                "the decrypted content is not the expected JSON object (string or null secrets, version 1)",
            ),
            PlaintextProblem::Version => {
                f.write_str("the decrypted content has an unsupported version")
            }
        }
    }
}

// serde moves each decoded string into the struct without another copy;
// `Contents::from_json` then moves it into a zeroizing `SecretString`.
// (serde_json's scratch buffer for strings *with escapes* is not zeroed;
// tokens and hex keys contain none.)
#[derive(Deserialize)]
struct Raw {
    access_token: Option<String>,
    audit_key: Option<String>,
    refresh_token: Option<String>,
    version: u64,
}

impl Contents {
    /// Whether no secret is stored.
    pub fn is_empty(&self) -> bool {
        self.access_token.is_none() && self.audit_key.is_none() && self.refresh_token.is_none()
    }

    /// Parses the plaintext. Unknown members are ignored.
    pub fn from_json(plaintext: &[u8]) -> Result<Contents, PlaintextProblem> {
        let raw: Raw = serde_json::from_slice(plaintext).map_err(|_| PlaintextProblem::Json)?;
        let Raw {
            access_token,
            audit_key,
            refresh_token,
            version,
        } = raw;
        let keep = |value: Option<String>| {
            value
                .map(SecretString::new)
                .filter(|secret| !secret.is_empty())
        };
        let contents = Contents {
            access_token: keep(access_token),
            audit_key: keep(audit_key),
            refresh_token: keep(refresh_token),
        };
        if version != 1 {
            // Refused rather than rewritten: a newer writer's members would
            // be lost by a read-modify-write of this version.
            return Err(PlaintextProblem::Version);
        }
        Ok(contents)
    }

    /// The compact JSON with sorted keys of AUTH.md §10.3, in a zeroizing
    /// buffer.
    pub fn to_json(&self) -> Zeroizing<Vec<u8>> {
        let members = [
            ("access_token", &self.access_token),
            ("audit_key", &self.audit_key),
            ("refresh_token", &self.refresh_token),
        ];
        // JSON escaping at most sextuples a byte (`\u00XX`); with the exact
        // worst case reserved, the vector never reallocates, so no partial
        // copy of a secret is left in freed memory.
        let capacity = 64
            + members
                .iter()
                .map(|(name, value)| name.len() + 8 + value.as_ref().map_or(0, |v| 6 * v.len()))
                .sum::<usize>();
        let mut out = Zeroizing::new(Vec::with_capacity(capacity));
        let reserved = out.capacity();
        out.push(b'{');
        for (name, value) in members {
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            match value {
                Some(secret) => push_json_string(&mut out, secret.expose()),
                None => out.extend_from_slice(b"null"),
            }
            out.push(b',');
        }
        out.extend_from_slice(b"\"version\":1}");
        debug_assert_eq!(out.capacity(), reserved, "the JSON buffer reallocated");
        out
    }
}

/// Appends `text` as a JSON string literal (the escapes of `serde_json`'s
/// compact writer: `"`, `\`, and control characters).
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &byte in text.as_bytes() {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x00..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn json_escapes_match_serde_json() {
        let text = "a\"b\\c\nd\u{1}e\u{7f}é/\u{2028}";
        let mut ours = Vec::new();
        push_json_string(&mut ours, text);
        assert_eq!(ours, serde_json::to_vec(text).unwrap());
    }

    #[test]
    fn json_buffer_never_reallocates() {
        let worst = "\u{1}".repeat(100);
        let contents = Contents {
            access_token: Some(SecretString::from(worst.as_str())),
            audit_key: Some(SecretString::from(worst.as_str())),
            refresh_token: Some(SecretString::from(worst.as_str())),
        };
        // `to_json` debug-asserts that its capacity never changed.
        let json = contents.to_json();
        assert_eq!(Contents::from_json(&json).unwrap(), contents);
    }
}
