//! `tokens.enc` (AUTH.md §10): the byte format against the vector of §14.4,
//! tamper and truncation resistance, parameter bounds, and the file store on
//! real files in temporary directories — permissions, the lock, the atomic
//! rewrite and the rule that a file that fails to decrypt is never
//! overwritten.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use autogpt_shim::audit::hex;
use autogpt_shim::secrets::container::{
    self, Contents, FormatProblem, HEADER_LEN, Header, KdfParams, MIN_FILE_LEN, OpenError,
    PlaintextProblem,
};
use autogpt_shim::secrets::{ErrorClass, Node, Passphrase, SecretError, SecretString, TokenFile};
use sha2::{Digest, Sha256};

const PASSPHRASE: &str = "correct horse battery staple";
const PLAINTEXT: &str = r#"{"access_token":"at-example","audit_key":"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f","refresh_token":"rt-example","version":1}"#;
const DERIVED_KEY: &str = "a92b039f3c3064552743a1cd9011ad9736ddb235e3125d78301e0fb37ffe08a9";
const HEADER: &str = "414753544f4b454e0101000100000000000300000004b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacb";
const FILE: &str = "414753544f4b454e0101000100000000000300000004b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacb521b12375b60f3b18787f5d50957c47b95fea76691625c4b07413b82ca9f4f8ad8646701717be2a69a546a041e1089bf877d034232f7a38250004dd73f350b508781c2c17129b18fccc6ffa1adc19a77bfa4eb9fd9e7646401692e56427d6d2e21f8e9f7015f98e8079a41a9cdca205b564b5b938a746eec0a2d4ba897b6d2915d652ac8661139b6fad14271a481ac4c63dadf93cfed9d67159358de08eebaaea2563b80b0";
const FILE_SHA256: &str = "7bd51c2afd89b9de4f49ebb9bb856760fb9deffcf6001555cc4707adf2d48ff5";

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn passphrase(text: &str) -> Passphrase {
    Passphrase::new(text.as_bytes().to_vec()).unwrap()
}

fn vector_header() -> Header {
    let salt: [u8; 16] = std::array::from_fn(|i| 0xb0 + i as u8);
    let nonce: [u8; 12] = std::array::from_fn(|i| 0xc0 + i as u8);
    Header::for_writing(salt, nonce)
}

fn secret(text: &str) -> SecretString {
    SecretString::from(text)
}

// --- the vector of AUTH.md §14.4 ------------------------------------------

#[test]
fn vector_header_bytes() {
    assert_eq!(hex(&vector_header().encode()), HEADER);
    assert_eq!(Header::decode(&unhex(FILE)).unwrap(), vector_header());
}

#[test]
fn vector_derived_key_file_bytes_and_digest() {
    let header = vector_header();
    let key = header.derive_key(&passphrase(PASSPHRASE)).unwrap();
    assert_eq!(hex(key.bytes()), DERIVED_KEY);

    assert_eq!(PLAINTEXT.len(), 149);
    let file = container::seal(&header, &key, PLAINTEXT.as_bytes());
    assert_eq!(file.len(), 215);
    assert_eq!(hex(&file), FILE);
    assert_eq!(hex(&Sha256::digest(&file)), FILE_SHA256);

    // Decryption with the derived key gives the plaintext back.
    let plaintext = container::open_with_key(&file, &key).unwrap();
    assert_eq!(&plaintext[..], PLAINTEXT.as_bytes());
}

#[test]
fn vector_decrypts_with_its_passphrase() {
    let plaintext = container::open(&unhex(FILE), &passphrase(PASSPHRASE)).unwrap();
    assert_eq!(&plaintext[..], PLAINTEXT.as_bytes());
    let contents = Contents::from_json(&plaintext).unwrap();
    assert_eq!(contents.access_token, Some(secret("at-example")));
    assert_eq!(contents.refresh_token, Some(secret("rt-example")));
    assert_eq!(
        contents.audit_key,
        Some(secret(
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        ))
    );
}

#[test]
fn writer_json_is_the_vector_plaintext() {
    let contents = Contents::from_json(PLAINTEXT.as_bytes()).unwrap();
    assert_eq!(&contents.to_json()[..], PLAINTEXT.as_bytes());
    let empty = Contents::default().to_json();
    assert_eq!(
        &empty[..],
        br#"{"access_token":null,"audit_key":null,"refresh_token":null,"version":1}"#
    );
}

#[test]
fn wrong_passphrase_fails_authentication() {
    for wrong in [
        "correct horse battery stapl",
        "correct horse battery staple ",
    ] {
        assert_eq!(
            container::open(&unhex(FILE), &passphrase(wrong)),
            Err(OpenError::Authentication)
        );
    }
}

/// Flips every bit of the file, one at a time. A flip in the magic, the
/// version, the KDF id or a parameter that leaves its range is refused by
/// the header check. Every other flip must fail authentication:
///
/// * with the key the vector's passphrase derives for the *original* header
///   — for flips in the nonce and the ciphertext that is exactly the key a
///   reader derives, and for the others it shows that the header is bound
///   as AAD even for someone who knows the key;
/// * and, for one flip in each KDF input (parameters, salt), with the key a
///   reader really derives from the changed header (each derivation costs
///   64 MiB of Argon2id, so not all 150 of them are run).
#[test]
fn flipping_any_single_bit_fails() {
    let file = unhex(FILE);
    let original = vector_header();
    let key = original.derive_key(&passphrase(PASSPHRASE)).unwrap();
    let (mut refused_by_header, mut refused_by_tag) = (0, 0);
    for byte in 0..file.len() {
        for bit in 0..8 {
            let mut flipped = file.clone();
            flipped[byte] ^= 1 << bit;
            match Header::decode(&flipped) {
                Err(_) => {
                    assert!(
                        byte < 22,
                        "byte {byte} bit {bit}: refused by the header check"
                    );
                    refused_by_header += 1;
                }
                Ok(header) => {
                    if byte >= 38 {
                        assert_eq!(
                            (header.params, header.salt),
                            (original.params, original.salt)
                        );
                    }
                    assert_eq!(
                        container::open_with_key(&flipped, &key),
                        Err(OpenError::Authentication),
                        "byte {byte} bit {bit}"
                    );
                    refused_by_tag += 1;
                }
            }
        }
    }
    assert_eq!(refused_by_header + refused_by_tag, 215 * 8);
    assert!(refused_by_header > 0 && refused_by_tag > 0);

    // The real path (derive from the changed header, then decrypt) for one
    // flip in m_cost, t_cost, parallelism and the salt.
    for (byte, bit) in [(13, 0), (17, 0), (21, 0), (22, 0)] {
        let mut flipped = file.clone();
        flipped[byte] ^= 1 << bit;
        assert!(Header::decode(&flipped).is_ok());
        assert_eq!(
            container::open(&flipped, &passphrase(PASSPHRASE)),
            Err(OpenError::Authentication),
            "byte {byte} bit {bit}"
        );
    }
}

#[test]
fn truncated_file_fails() {
    let file = unhex(FILE);
    let key = vector_header().derive_key(&passphrase(PASSPHRASE)).unwrap();
    for len in 0..file.len() {
        let truncated = &file[..len];
        let result = container::open_with_key(truncated, &key);
        if len < MIN_FILE_LEN {
            assert_eq!(result, Err(OpenError::Format(FormatProblem::TooShort(len))));
        } else {
            assert_eq!(result, Err(OpenError::Authentication), "length {len}");
        }
    }
    // The real path, with its own derivation.
    assert_eq!(
        container::open(&file[..214], &passphrase(PASSPHRASE)),
        Err(OpenError::Authentication)
    );
    assert_eq!(
        container::open(&file[..HEADER_LEN], &passphrase(PASSPHRASE)),
        Err(OpenError::Format(FormatProblem::TooShort(HEADER_LEN)))
    );
}

#[test]
fn parameter_bounds_are_enforced() {
    let with_params = |m: u32, t: u32, p: u32| {
        let mut file = unhex(FILE);
        file[10..14].copy_from_slice(&m.to_be_bytes());
        file[14..18].copy_from_slice(&t.to_be_bytes());
        file[18..22].copy_from_slice(&p.to_be_bytes());
        Header::decode(&file).map(|h| h.params)
    };
    assert_eq!(
        with_params(19_455, 3, 4),
        Err(FormatProblem::MemoryCost(19_455))
    );
    assert_eq!(
        with_params(1_048_577, 3, 4),
        Err(FormatProblem::MemoryCost(1_048_577))
    );
    assert_eq!(with_params(0, 3, 4), Err(FormatProblem::MemoryCost(0)));
    assert_eq!(
        with_params(u32::MAX, 3, 4),
        Err(FormatProblem::MemoryCost(u32::MAX))
    );
    assert_eq!(with_params(65_536, 0, 4), Err(FormatProblem::TimeCost(0)));
    assert_eq!(with_params(65_536, 11, 4), Err(FormatProblem::TimeCost(11)));
    assert_eq!(
        with_params(65_536, 3, 0),
        Err(FormatProblem::Parallelism(0))
    );
    assert_eq!(
        with_params(65_536, 3, 17),
        Err(FormatProblem::Parallelism(17))
    );
    // The bounds themselves are accepted (no derivation is run here).
    for (m, t, p) in [(19_456, 1, 1), (1_048_576, 10, 16)] {
        assert_eq!(
            with_params(m, t, p),
            Ok(KdfParams {
                m_cost_kib: m,
                t_cost: t,
                parallelism: p
            })
        );
    }
    // A key is never derived with out-of-range parameters, whatever built
    // the header.
    let mut header = vector_header();
    header.params.m_cost_kib = 8;
    assert!(header.derive_key(&passphrase(PASSPHRASE)).is_err());
}

#[test]
fn header_identity_fields_are_checked() {
    let mut file = unhex(FILE);
    file[0] = b'X';
    assert_eq!(Header::decode(&file), Err(FormatProblem::Magic));
    let mut file = unhex(FILE);
    file[8] = 2;
    assert_eq!(Header::decode(&file), Err(FormatProblem::Version(2)));
    let mut file = unhex(FILE);
    file[9] = 2;
    assert_eq!(Header::decode(&file), Err(FormatProblem::Kdf(2)));
    let oversized = vec![0u8; container::MAX_FILE_LEN + 1];
    assert_eq!(
        Header::decode(&oversized),
        Err(FormatProblem::TooLong(container::MAX_FILE_LEN + 1))
    );
}

#[test]
fn plaintext_rules() {
    // Unknown members are ignored; null, absent and empty mean "not stored".
    let contents = Contents::from_json(
        br#"{"version":1,"access_token":null,"refresh_token":"","extra":{"x":[1]}}"#,
    )
    .unwrap();
    assert!(contents.is_empty());
    // Another version is refused rather than rewritten.
    assert_eq!(
        Contents::from_json(br#"{"version":2,"access_token":"a"}"#),
        Err(PlaintextProblem::Version)
    );
    for bad in [
        &br#"{"access_token":"a"}"#[..],
        br#"{"version":1,"access_token":5}"#,
        br#"{"version":1,"audit_key":["x"]}"#,
        br#"{"version":1,"access_token":"a","access_token":"b"}"#,
        br#"[1]"#,
        b"\xff",
    ] {
        assert_eq!(
            Contents::from_json(bad),
            Err(PlaintextProblem::Json),
            "{bad:?}"
        );
    }
}

// --- the file store on disk ------------------------------------------------

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Fixture {
    /// A store directory that does not exist yet, two levels below a
    /// temporary directory (so that creating parents is exercised).
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state").join("autogpt-local-executor");
        Fixture { _tmp: tmp, dir }
    }

    fn store(&self, pass: &str) -> TokenFile {
        TokenFile::new(self.dir.clone(), passphrase(pass))
    }

    fn file(&self) -> PathBuf {
        self.dir.join("tokens.enc")
    }
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn put_tokens(store: &TokenFile, refresh: &str, access: &str) {
    store
        .update(|contents| {
            contents.refresh_token = Some(secret(refresh));
            contents.access_token = Some(secret(access));
            Ok(((), true))
        })
        .unwrap();
}

/// Every mutating entry point of the file store, against a file it must not
/// touch. Returns the errors.
fn try_every_write(store: &TokenFile) -> Vec<SecretError> {
    let mut errors = Vec::new();
    errors.push(
        store
            .update(|contents| {
                contents.access_token = Some(secret("new"));
                Ok(((), true))
            })
            .unwrap_err(),
    );
    errors.push(store.read().unwrap_err());
    errors
}

#[test]
fn round_trip_creates_private_directory_and_file() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    // Reading a store that does not exist yet is an empty store and
    // creates nothing.
    assert!(store.read().unwrap().is_empty());
    assert!(!fx.dir.exists());

    put_tokens(&store, "rt-1", "at-1");
    assert_eq!(mode(&fx.dir), 0o700);
    assert_eq!(mode(fx.dir.parent().unwrap()), 0o700);
    assert_eq!(mode(&fx.file()), 0o600);
    let contents = store.read().unwrap();
    assert_eq!(contents.access_token, Some(secret("at-1")));
    assert_eq!(contents.refresh_token, Some(secret("rt-1")));
    assert_eq!(contents.audit_key, None);

    // Writers use the fixed parameters; only the two files remain (no
    // temporary file is left behind).
    let bytes = fs::read(fx.file()).unwrap();
    let header = Header::decode(&bytes).unwrap();
    assert_eq!(header.params, KdfParams::WRITER);
    let mut names: Vec<String> = fs::read_dir(&fx.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["tokens.enc", "tokens.enc.lock"]);
}

#[test]
fn every_write_draws_a_fresh_salt_and_nonce() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    put_tokens(&store, "rt", "at");
    let first = Header::decode(&fs::read(fx.file()).unwrap()).unwrap();
    put_tokens(&store, "rt", "at");
    let second = Header::decode(&fs::read(fx.file()).unwrap()).unwrap();
    assert_ne!(first.salt, second.salt);
    assert_ne!(first.nonce, second.nonce);
}

#[test]
fn wrong_passphrase_never_overwrites() {
    let fx = Fixture::new();
    put_tokens(&fx.store(PASSPHRASE), "rt", "at");
    let before = fs::read(fx.file()).unwrap();

    let wrong = fx.store("not the passphrase");
    for error in try_every_write(&wrong) {
        assert!(
            matches!(&error, SecretError::Undecryptable { path, .. } if *path == fx.file()),
            "{error:?}"
        );
        assert_eq!(error.class(), ErrorClass::Config);
        let message = error.to_string();
        assert!(message.contains("passphrase"), "{message}");
        assert!(message.contains("left untouched"), "{message}");
    }
    assert_eq!(fs::read(fx.file()).unwrap(), before);
    // The right passphrase still reads it.
    assert_eq!(
        fx.store(PASSPHRASE).read().unwrap().access_token,
        Some(secret("at"))
    );
}

#[test]
fn truncated_file_is_refused_and_kept() {
    let fx = Fixture::new();
    put_tokens(&fx.store(PASSPHRASE), "rt", "at");
    let bytes = fs::read(fx.file()).unwrap();
    for len in [bytes.len() - 1, 70, 65, 10, 0] {
        fs::write(fx.file(), &bytes[..len]).unwrap();
        for error in try_every_write(&fx.store(PASSPHRASE)) {
            if len >= MIN_FILE_LEN {
                assert!(
                    matches!(error, SecretError::Undecryptable { .. }),
                    "{error:?}"
                );
            } else {
                assert!(
                    matches!(
                        error,
                        SecretError::CorruptFile { problem: FormatProblem::TooShort(n), .. } if n == len
                    ),
                    "{error:?}"
                );
            }
        }
        assert_eq!(fs::read(fx.file()).unwrap(), &bytes[..len]);
    }
}

#[test]
fn flipped_byte_is_refused_and_kept() {
    let fx = Fixture::new();
    put_tokens(&fx.store(PASSPHRASE), "rt", "at");
    let mut bytes = fs::read(fx.file()).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    bytes[HEADER_LEN + 3] ^= 0x80;
    fs::write(fx.file(), &bytes).unwrap();
    for error in try_every_write(&fx.store(PASSPHRASE)) {
        assert!(
            matches!(error, SecretError::Undecryptable { .. }),
            "{error:?}"
        );
    }
    assert_eq!(fs::read(fx.file()).unwrap(), bytes);
}

#[test]
fn group_or_other_access_is_refused() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    put_tokens(&store, "rt", "at");
    let before = fs::read(fx.file()).unwrap();

    for file_mode in [0o640, 0o604, 0o660, 0o601] {
        fs::set_permissions(fx.file(), fs::Permissions::from_mode(file_mode)).unwrap();
        for error in try_every_write(&store) {
            match &error {
                SecretError::InsecurePermissions { node, path, mode } => {
                    assert_eq!((*node, path, *mode), (Node::File, &fx.file(), file_mode));
                }
                other => panic!("{other:?}"),
            }
            assert!(error.to_string().contains("chmod 600"), "{error}");
        }
    }
    fs::set_permissions(fx.file(), fs::Permissions::from_mode(0o600)).unwrap();

    for dir_mode in [0o750, 0o705, 0o777] {
        fs::set_permissions(&fx.dir, fs::Permissions::from_mode(dir_mode)).unwrap();
        for error in try_every_write(&store) {
            match &error {
                SecretError::InsecurePermissions { node, path, mode } => {
                    assert_eq!((*node, path, *mode), (Node::Directory, &fx.dir, dir_mode));
                }
                other => panic!("{other:?}"),
            }
            assert!(error.to_string().contains("chmod 700"), "{error}");
        }
    }
    fs::set_permissions(&fx.dir, fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(fs::read(fx.file()).unwrap(), before);
    assert_eq!(store.read().unwrap().access_token, Some(secret("at")));
}

#[test]
fn symbolic_link_at_the_file_name_is_refused() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    put_tokens(&store, "rt", "at");
    let elsewhere = fx.dir.parent().unwrap().join("real.enc");
    fs::rename(fx.file(), &elsewhere).unwrap();
    symlink(&elsewhere, fx.file()).unwrap();
    for error in try_every_write(&store) {
        assert!(
            matches!(
                error,
                SecretError::NotRegular {
                    node: Node::File,
                    ..
                }
            ),
            "{error:?}"
        );
    }
    assert!(
        fs::symlink_metadata(fx.file())
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn store_directory_that_is_a_file_is_refused() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.dir.parent().unwrap()).unwrap();
    fs::write(&fx.dir, b"not a directory").unwrap();
    let error = fx.store(PASSPHRASE).read().unwrap_err();
    assert!(
        matches!(
            error,
            SecretError::NotRegular {
                node: Node::Directory,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn update_waits_for_the_exclusive_lock() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    put_tokens(&store, "rt-old", "at-old");

    // Another holder of the lock (a daemon refreshing, a `revoke`): an
    // exclusive flock on a separate open of the lock file.
    let lock = fs::File::open(fx.dir.join("tokens.enc.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();

    let (done_tx, done_rx) = mpsc::channel();
    let writer_store = fx.store(PASSPHRASE);
    let writer = std::thread::spawn(move || {
        put_tokens(&writer_store, "rt-new", "at-new");
        done_tx.send(()).unwrap();
    });
    assert!(
        done_rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "the update finished while another process held the lock"
    );
    assert_eq!(store.read().unwrap().access_token, Some(secret("at-old")));

    drop(lock);
    done_rx.recv_timeout(Duration::from_secs(120)).unwrap();
    writer.join().unwrap();
    assert_eq!(store.read().unwrap().access_token, Some(secret("at-new")));
}

#[test]
fn failing_change_writes_nothing() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    put_tokens(&store, "rt", "at");
    let before = fs::read(fx.file()).unwrap();
    let error = store
        .update(|contents| -> Result<((), bool), SecretError> {
            contents.access_token = None;
            Err(SecretError::Randomness)
        })
        .unwrap_err();
    assert!(matches!(error, SecretError::Randomness));
    // An unchanged result does not rewrite either.
    store.update(|_| Ok(((), false))).unwrap();
    assert_eq!(fs::read(fx.file()).unwrap(), before);
}

#[test]
fn tokens_with_json_special_characters_round_trip() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    let odd = "a\"b\\c\u{1}\n\u{e9}\u{1f600}";
    put_tokens(&store, odd, "at");
    assert_eq!(store.read().unwrap().refresh_token, Some(secret(odd)));
}

#[test]
fn store_errors_never_contain_secrets() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    put_tokens(&store, "rt-secret-value", "at-secret-value");
    let mut messages = Vec::new();
    for error in try_every_write(&fx.store("hunter2-passphrase")) {
        messages.push(format!("{error} {error:?}"));
    }
    fs::set_permissions(fx.file(), fs::Permissions::from_mode(0o644)).unwrap();
    for error in try_every_write(&store) {
        messages.push(format!("{error} {error:?}"));
    }
    messages.push(format!("{store:?}"));
    for message in messages {
        for secret_text in ["secret-value", "hunter2", PASSPHRASE] {
            assert!(!message.contains(secret_text), "{message}");
        }
    }
}
