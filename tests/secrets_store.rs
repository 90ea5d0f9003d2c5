//! The secret store over the encrypted file (AUTH.md §8, §10; AUDIT.md §7):
//! store selection without a keychain, tokens, the audit key's create /
//! never-replace rules, and the import of the reference's `audit-key.enc`
//! with the vector of AUDIT.md §12.7. Real files in temporary directories;
//! the keychain side is in `secrets_keychain.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::Cell;
use std::fs;
use std::path::PathBuf;

use autogpt_shim::audit::AuditKey;
use autogpt_shim::config::{Environment, OsPaths};
use autogpt_shim::secrets::{
    ErrorClass, KeyCheck, KeyLocation, KeyOrigin, KeyProblem, KeychainUnusable, Passphrase,
    SecretError, SecretStore, SecretString, StoreKind, TokenFile,
};
use autogpt_shim::secrets::{LegacyKeyFile, LegacyProblem};

const PASSPHRASE: &str = "correct horse battery staple";
const LEGACY_VECTOR: &str = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf:e67dc55a183f90deaee8df06642c225a0398d42a66a5800a44fce1cfcec36a8c";
const KEY_00_1F: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn passphrase(text: &str) -> Passphrase {
    Passphrase::new(text.as_bytes().to_vec()).unwrap()
}

fn secret(text: &str) -> SecretString {
    SecretString::from(text)
}

fn unusable() -> KeychainUnusable {
    KeychainUnusable {
        reason: "no Secret Service on the session bus".into(),
    }
}

/// Two keys are the same when they sign alike (`AuditKey` never shows its
/// bytes).
fn same_key(a: &AuditKey, b: &AuditKey) -> bool {
    a.hmac_hex(b"probe") == b.hmac_hex(b"probe")
}

fn key_00_1f() -> AuditKey {
    AuditKey::new((0u8..32).collect()).unwrap()
}

struct Fixture {
    tmp: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn dir(&self) -> PathBuf {
        self.tmp.path().join("store")
    }

    fn tokens_file(&self) -> PathBuf {
        self.dir().join("tokens.enc")
    }

    fn legacy_file(&self) -> PathBuf {
        self.tmp.path().join("legacy").join("audit-key.enc")
    }

    fn token_file(&self, pass: &str) -> TokenFile {
        TokenFile::new(self.dir(), passphrase(pass))
    }

    fn store(&self, pass: &str) -> SecretStore {
        SecretStore::with_file(self.token_file(pass), self.legacy_file())
    }

    fn write_legacy(&self, content: &str) {
        fs::create_dir_all(self.legacy_file().parent().unwrap()).unwrap();
        fs::write(self.legacy_file(), content).unwrap();
    }

    /// Puts this text into the `audit_key` member of `tokens.enc`.
    fn put_stored_key(&self, text: &str) {
        self.token_file(PASSPHRASE)
            .update(|contents| {
                contents.audit_key = Some(secret(text));
                Ok(((), true))
            })
            .unwrap();
    }

    fn stored_key_text(&self) -> Option<String> {
        self.token_file(PASSPHRASE)
            .read()
            .unwrap()
            .audit_key
            .map(|s| s.expose().to_owned())
    }
}

fn no_check() -> impl FnMut(&AuditKey) -> KeyCheck {
    |_: &AuditKey| panic!("the legacy check must not run here")
}

// --- selection (AUTH.md §8) --------------------------------------------------

fn paths_for(fx: &Fixture) -> OsPaths {
    let env = Environment::from_pairs([
        ("HOME", fx.tmp.path().as_os_str()),
        ("AUTOGPT_SHIM_FALLBACK_DIR", fx.dir().as_os_str()),
    ]);
    OsPaths::from_env(&env).unwrap()
}

#[test]
fn unusable_keychain_without_passphrase_is_a_precise_error() {
    let fx = Fixture::new();
    let paths = paths_for(&fx);
    for env in [
        Environment::from_pairs(Vec::<(String, String)>::new()),
        Environment::from_pairs([("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "")]),
        // Only the exact name counts.
        Environment::from_pairs([("KEYCHAIN_PASSPHRASE", PASSPHRASE)]),
    ] {
        let error = SecretStore::select_with(Err(unusable()), &paths, &env).unwrap_err();
        assert!(
            matches!(error, SecretError::NoPassphrase { .. }),
            "{error:?}"
        );
        assert_eq!(error.class(), ErrorClass::Config);
        let message = error.to_string();
        assert!(
            message.contains("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE"),
            "{message}"
        );
        // The keychain is named plainly; the probe's own text (a D-Bus
        // message on Linux) is for the debug log, not the reason shown.
        assert!(message.contains(unusable().summary()), "{message}");
        assert!(
            !message.contains("no Secret Service on the session bus"),
            "{message}"
        );
        assert!(!message.contains('\n'));
    }
    assert!(!fx.dir().exists());
}

#[test]
fn unusable_keychain_with_passphrase_selects_the_file_with_a_warning() {
    let fx = Fixture::new();
    let paths = paths_for(&fx);
    let env = Environment::from_pairs([("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", PASSPHRASE)]);
    let selected = SecretStore::select_with(Err(unusable()), &paths, &env).unwrap();
    assert_eq!(selected.store.kind(), StoreKind::File);
    let warning = selected.warning.unwrap();
    assert!(!warning.contains('\n'), "{warning}");
    assert!(warning.contains("encrypted file"), "{warning}");
    assert!(
        warning.contains(&fx.tokens_file().display().to_string()),
        "{warning}"
    );
    assert!(!warning.contains(PASSPHRASE));
    assert!(
        selected
            .store
            .location()
            .contains(&fx.tokens_file().display().to_string())
    );
    // Selecting creates nothing.
    assert!(!fx.dir().exists());

    // The selected store is the one `tokens.enc` that the passphrase opens.
    selected
        .store
        .store_tokens(&secret("rt"), &secret("at"))
        .unwrap();
    assert_eq!(
        fx.token_file(PASSPHRASE).read().unwrap().access_token,
        Some(secret("at"))
    );
}

#[test]
fn passphrase_is_used_as_exact_bytes() {
    let fx = Fixture::new();
    let paths = paths_for(&fx);
    let spaced = " correct horse battery staple\n";
    let env = Environment::from_pairs([("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", spaced)]);
    let selected = SecretStore::select_with(Err(unusable()), &paths, &env).unwrap();
    selected
        .store
        .store_tokens(&secret("rt"), &secret("at"))
        .unwrap();
    // No trimming: the trimmed passphrase does not open it.
    assert!(matches!(
        fx.token_file(PASSPHRASE).read(),
        Err(SecretError::Undecryptable { .. })
    ));
    assert!(fx.token_file(spaced).read().is_ok());
}

// --- tokens ------------------------------------------------------------------

#[test]
fn tokens_store_read_and_clear() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    assert_eq!(store.access_token().unwrap(), None);
    assert_eq!(store.refresh_token().unwrap(), None);
    // Clearing an empty store succeeds and creates nothing.
    store.clear_tokens().unwrap();
    assert!(!fx.dir().exists());

    store
        .store_tokens(&secret("rt-1"), &secret("at-1"))
        .unwrap();
    assert_eq!(store.access_token().unwrap(), Some(secret("at-1")));
    assert_eq!(store.refresh_token().unwrap(), Some(secret("rt-1")));
    let tokens = store.tokens().unwrap();
    assert_eq!(
        (tokens.access, tokens.refresh),
        (Some(secret("at-1")), Some(secret("rt-1")))
    );

    // The audit key survives a clear, and so does the file.
    let (key, origin) = store.audit_key_for_start(&mut no_check()).unwrap();
    assert_eq!(origin, KeyOrigin::Created);
    store.clear_tokens().unwrap();
    assert!(fx.tokens_file().exists());
    assert_eq!(store.access_token().unwrap(), None);
    assert_eq!(store.refresh_token().unwrap(), None);
    let (again, origin) = store.audit_key_for_start(&mut no_check()).unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&key, &again));

    // Start-up reads the key and the tokens together.
    store
        .store_tokens(&secret("rt-2"), &secret("at-2"))
        .unwrap();
    let (third, origin, tokens) = store.secrets_for_start(&mut no_check()).unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&key, &third));
    assert_eq!(
        (tokens.access, tokens.refresh),
        (Some(secret("at-2")), Some(secret("rt-2")))
    );
}

// --- the audit key (AUDIT.md §7) ---------------------------------------------

#[test]
fn audit_key_is_created_once_as_lowercase_hex() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    let (created, origin) = store.audit_key_for_start(&mut no_check()).unwrap();
    assert_eq!(origin, KeyOrigin::Created);
    let text = fx.stored_key_text().unwrap();
    assert_eq!(text.len(), 64);
    assert!(
        text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{text}"
    );

    let (stored, origin) = store.audit_key_for_start(&mut no_check()).unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&created, &stored));
    assert!(same_key(
        &created,
        &store.audit_key_read_only(&mut no_check()).unwrap()
    ));
    assert_eq!(fx.stored_key_text().unwrap(), text);

    // Two keys created in two stores differ (CSPRNG, not a constant).
    let other = Fixture::new();
    let (different, _) = other
        .store(PASSPHRASE)
        .audit_key_for_start(&mut no_check())
        .unwrap();
    assert!(!same_key(&created, &different));
}

#[test]
fn read_only_never_creates_a_key() {
    let fx = Fixture::new();
    let store = fx.store(PASSPHRASE);
    let error = store.audit_key_read_only(&mut no_check()).unwrap_err();
    assert!(matches!(error, SecretError::NoAuditKey { .. }), "{error:?}");
    assert_eq!(error.class(), ErrorClass::Config);
    assert!(!fx.dir().exists());

    // Tokens stored, still no key: still refused, file unchanged.
    store.store_tokens(&secret("rt"), &secret("at")).unwrap();
    let before = fs::read(fx.tokens_file()).unwrap();
    assert!(matches!(
        store.audit_key_read_only(&mut no_check()),
        Err(SecretError::NoAuditKey { .. })
    ));
    assert_eq!(fs::read(fx.tokens_file()).unwrap(), before);
}

#[test]
fn corrupt_stored_key_is_refused_and_never_replaced() {
    for (text, problem) in [
        ("not-hex!", KeyProblem::NotHex),
        ("0g", KeyProblem::NotHex),
        ("000102030405060708090a0b0c0d0e0f1", KeyProblem::OddLength),
        // 15 bytes: shorter than the 16 writers require.
        ("000102030405060708090a0b0c0d0e", KeyProblem::TooShort(15)),
        ("   ", KeyProblem::TooShort(0)),
        ("0001 0203", KeyProblem::NotHex),
    ] {
        let fx = Fixture::new();
        fx.put_stored_key(text);
        let before = fs::read(fx.tokens_file()).unwrap();
        let store = fx.store(PASSPHRASE);
        for error in [
            store.audit_key_for_start(&mut no_check()).unwrap_err(),
            store.audit_key_read_only(&mut no_check()).unwrap_err(),
        ] {
            match &error {
                SecretError::CorruptAuditKey {
                    location: KeyLocation::TokensFile(path),
                    problem: found,
                } => {
                    assert_eq!(path, &fx.tokens_file());
                    assert_eq!(*found, problem, "{text:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
            assert_eq!(error.class(), ErrorClass::Config);
            let message = error.to_string();
            // Where it is, that it was kept, and what removing it means.
            assert!(
                message.contains(&fx.tokens_file().display().to_string()),
                "{message}"
            );
            assert!(message.contains("left untouched"), "{message}");
            assert!(message.contains("drops the stored tokens"), "{message}");
            assert!(message.contains("no longer verify"), "{message}");
            assert!(
                !message.contains(text.trim()) || text.trim().is_empty(),
                "{message}"
            );
        }
        assert_eq!(fs::read(fx.tokens_file()).unwrap(), before, "{text:?}");
        assert_eq!(fx.stored_key_text().as_deref(), Some(text));
    }
}

#[test]
fn lenient_valid_key_text_is_accepted_and_not_rewritten() {
    // Either case, surrounding whitespace, 16 bytes: valid under AUDIT.md
    // §7.2; used as stored, never normalised.
    let text = "\t000102030405060708090A0B0C0D0E0F \n";
    let fx = Fixture::new();
    fx.put_stored_key(text);
    let before = fs::read(fx.tokens_file()).unwrap();
    let (key, origin) = fx
        .store(PASSPHRASE)
        .audit_key_for_start(&mut no_check())
        .unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&key, &AuditKey::new((0u8..16).collect()).unwrap()));
    assert_eq!(fs::read(fx.tokens_file()).unwrap(), before);
}

#[test]
fn undecryptable_file_blocks_the_audit_key_and_is_kept() {
    let fx = Fixture::new();
    fx.put_stored_key(KEY_00_1F);
    let before = fs::read(fx.tokens_file()).unwrap();
    let store = fx.store("wrong passphrase");
    for error in [
        store.audit_key_for_start(&mut no_check()).unwrap_err(),
        store.audit_key_read_only(&mut no_check()).unwrap_err(),
        store
            .store_tokens(&secret("rt"), &secret("at"))
            .unwrap_err(),
        store.clear_tokens().unwrap_err(),
        store.access_token().unwrap_err(),
    ] {
        assert!(
            matches!(error, SecretError::Undecryptable { .. }),
            "{error:?}"
        );
    }
    assert_eq!(fs::read(fx.tokens_file()).unwrap(), before);
}

// --- the legacy audit-key.enc (AUDIT.md §7.4, §12.7) -------------------------

#[test]
fn legacy_vector_decrypts_to_the_key() {
    let file = LegacyKeyFile::parse(LEGACY_VECTOR.as_bytes()).unwrap();
    assert_eq!(
        &file.decrypt(&passphrase(PASSPHRASE))[..],
        &(0u8..32).collect::<Vec<u8>>()[..]
    );
    // Any other passphrase yields some other 32 bytes, without error.
    let other = file.decrypt(&passphrase("Correct horse battery staple"));
    assert_eq!(other.len(), 32);
    assert_ne!(&other[..], &(0u8..32).collect::<Vec<u8>>()[..]);
    // Surrounding whitespace and upper-case digits are read the same.
    let padded = format!("  {}\n", LEGACY_VECTOR.to_uppercase());
    assert_eq!(LegacyKeyFile::parse(padded.as_bytes()).unwrap(), file);
}

#[test]
fn legacy_parse_errors() {
    for (content, problem) in [
        ("", LegacyProblem::Format),
        ("a0a1", LegacyProblem::Format),
        ("a0a1:b0b1:c0c1", LegacyProblem::Format),
        ("zz:00", LegacyProblem::Format),
        ("a0a:00", LegacyProblem::Format),
        (":00", LegacyProblem::Format),
        (
            "a0a1a2a3a4a5a6a7a8a9aaabacadae:00",
            LegacyProblem::SaltLength,
        ),
        (
            "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf:e67dc55a183f90deaee8df06642c225a0398d42a66a5800a44fce1cfcec36a",
            LegacyProblem::CiphertextLength,
        ),
    ] {
        assert_eq!(
            LegacyKeyFile::parse(content.as_bytes()),
            Err(problem),
            "{content:?}"
        );
    }
    assert_eq!(
        LegacyKeyFile::parse(&vec![b'0'; 5000]),
        Err(LegacyProblem::TooLong)
    );
}

#[test]
fn legacy_key_is_imported_when_the_log_has_no_records() {
    let fx = Fixture::new();
    fx.write_legacy(LEGACY_VECTOR);
    let calls = Cell::new(0);
    let mut check = |key: &AuditKey| {
        calls.set(calls.get() + 1);
        assert!(same_key(key, &key_00_1f()));
        KeyCheck::NoRecords
    };
    let (key, origin) = fx
        .store(PASSPHRASE)
        .audit_key_for_start(&mut check)
        .unwrap();
    assert_eq!(origin, KeyOrigin::ImportedLegacy);
    assert_eq!(calls.get(), 1);
    assert!(same_key(&key, &key_00_1f()));
    assert_eq!(fx.stored_key_text().as_deref(), Some(KEY_00_1F));
    // The legacy file is never modified.
    assert_eq!(fs::read_to_string(fx.legacy_file()).unwrap(), LEGACY_VECTOR);

    // From now on the key comes from tokens.enc; the legacy file is not
    // consulted again.
    let (again, origin) = fx
        .store(PASSPHRASE)
        .audit_key_for_start(&mut no_check())
        .unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&again, &key_00_1f()));
}

#[test]
fn legacy_key_that_verifies_the_log_is_imported() {
    let fx = Fixture::new();
    fx.write_legacy(LEGACY_VECTOR);
    let (key, origin) = fx
        .store(PASSPHRASE)
        .audit_key_for_start(&mut |_: &AuditKey| KeyCheck::Verified)
        .unwrap();
    assert_eq!(origin, KeyOrigin::ImportedLegacy);
    assert!(same_key(&key, &key_00_1f()));
}

#[test]
fn legacy_key_that_does_not_match_the_log_fails_closed() {
    let fx = Fixture::new();
    fx.write_legacy(LEGACY_VECTOR);
    // A wrong passphrase decrypts to another key, which the log rejects.
    let store = fx.store("wrong passphrase");
    let mut check = |key: &AuditKey| {
        if same_key(key, &key_00_1f()) {
            KeyCheck::Verified
        } else {
            KeyCheck::Mismatch
        }
    };
    let error = store.audit_key_for_start(&mut check).unwrap_err();
    assert!(
        matches!(&error, SecretError::LegacyKeyMismatch { path } if *path == fx.legacy_file()),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Config);
    assert!(error.to_string().contains("does not match"), "{error}");
    let error = store.audit_key_read_only(&mut check).unwrap_err();
    assert!(
        matches!(error, SecretError::LegacyKeyMismatch { .. }),
        "{error:?}"
    );
    // Nothing was stored: tokens.enc has no key (the directory exists from
    // the locked attempt, the file does not).
    assert!(!fx.tokens_file().exists());
    assert_eq!(fs::read_to_string(fx.legacy_file()).unwrap(), LEGACY_VECTOR);
}

#[test]
fn legacy_check_failure_fails_closed() {
    let fx = Fixture::new();
    fx.write_legacy(LEGACY_VECTOR);
    let error = fx
        .store(PASSPHRASE)
        .audit_key_for_start(&mut |_: &AuditKey| KeyCheck::Failed("cannot read audit.log".into()))
        .unwrap_err();
    assert!(
        matches!(&error, SecretError::LegacyKeyCheckFailed { reason, .. } if reason == "cannot read audit.log"),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Unavailable);
    assert!(!fx.tokens_file().exists());
}

#[test]
fn corrupt_legacy_file_is_a_corrupt_key_never_regenerated() {
    let fx = Fixture::new();
    fx.write_legacy("a0a1a2a3:not-hex");
    let store = fx.store(PASSPHRASE);
    for error in [
        store.audit_key_for_start(&mut no_check()).unwrap_err(),
        store.audit_key_read_only(&mut no_check()).unwrap_err(),
    ] {
        assert!(
            matches!(&error, SecretError::CorruptLegacyKeyFile { path, problem: LegacyProblem::Format } if *path == fx.legacy_file()),
            "{error:?}"
        );
        assert_eq!(error.class(), ErrorClass::Config);
        assert!(error.to_string().contains("no longer verify"), "{error}");
    }
    assert!(!fx.tokens_file().exists());
    assert_eq!(
        fs::read_to_string(fx.legacy_file()).unwrap(),
        "a0a1a2a3:not-hex"
    );
}

#[test]
fn read_only_uses_the_legacy_key_without_importing_it() {
    let fx = Fixture::new();
    fx.write_legacy(LEGACY_VECTOR);
    let key = fx
        .store(PASSPHRASE)
        .audit_key_read_only(&mut |_: &AuditKey| KeyCheck::Verified)
        .unwrap();
    assert!(same_key(&key, &key_00_1f()));
    assert!(!fx.dir().exists());
}

#[test]
fn legacy_file_is_ignored_when_tokens_enc_has_a_key() {
    let fx = Fixture::new();
    fx.put_stored_key(KEY_00_1F);
    fx.write_legacy("garbage that would be corrupt");
    let (key, origin) = fx
        .store(PASSPHRASE)
        .audit_key_for_start(&mut no_check())
        .unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&key, &key_00_1f()));
}

#[test]
fn exit_classes_are_data() {
    assert_eq!(SecretError::Randomness.class(), ErrorClass::Unavailable);
    assert_eq!(SecretError::Internal("x").class(), ErrorClass::Internal);
    assert_eq!(
        SecretError::NoAuditKey { store: "x".into() }.class(),
        ErrorClass::Config
    );
}
