//! The OS keychain backend against a real Secret Service (AUTH.md §8, §9;
//! AUDIT.md §7): interoperability with items that carry only the
//! reference's attributes, the entry layout, the token operations, and the
//! audit key's create / never-replace rules.
//!
//! Every test is ignored by default, because it needs a D-Bus session with
//! an unlocked Secret Service. `.ci/run` starts one (`dbus-run-session` +
//! `gnome-keyring-daemon`) and runs them with `--ignored`; there a missing
//! or unreachable Secret Service fails the tests instead of skipping them.
//! Items are created and inspected with `secret-tool` (libsecret), an
//! implementation independent of the one under test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use autogpt_shim::audit::AuditKey;
use autogpt_shim::config::{Environment, OsPaths};
use autogpt_shim::secrets::{
    Account, KeyCheck, KeyLocation, KeyOrigin, Keychain, KeychainErrorKind, SecretError,
    SecretStore, SecretString, StoreKind,
};

const SERVICE: &str = "autogpt-local-executor";
const ACCOUNTS: [&str; 3] = ["access_token", "refresh_token", "audit_key"];

/// All tests share the one keychain, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the keychain for one test and leaves it without our entries.
struct Session {
    _serial: MutexGuard<'static, ()>,
    keychain: Keychain,
    tmp: tempfile::TempDir,
}

impl Session {
    fn start() -> Session {
        let serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let keychain = Keychain::probe().unwrap_or_else(|unusable| {
            panic!("the Secret Service must be reachable for these tests: {unusable}")
        });
        clear_all();
        Session {
            _serial: serial,
            keychain,
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn paths(&self) -> OsPaths {
        let env = Environment::from_pairs([
            ("HOME", self.tmp.path().as_os_str()),
            (
                "AUTOGPT_SHIM_FALLBACK_DIR",
                self.tmp.path().join("store").as_os_str(),
            ),
        ]);
        OsPaths::from_env(&env).unwrap()
    }

    fn store(&self) -> SecretStore {
        SecretStore::with_keychain(self.keychain.clone(), &self.paths())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        clear_all();
    }
}

fn secret_tool(args: &[&str], input: Option<&str>) -> (bool, String) {
    let mut child = Command::new("secret-tool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("secret-tool (libsecret-tools) must be installed");
    {
        let mut stdin = child.stdin.take().unwrap();
        if let Some(input) = input {
            stdin.write_all(input.as_bytes()).unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    let mut text = String::from_utf8(output.stdout).unwrap();
    text.push_str(&String::from_utf8(output.stderr).unwrap());
    (output.status.success(), text)
}

/// Creates an item the way the reference does: attributes `service`,
/// `username` and `application`, its label, no `target`.
fn store_like_the_reference(account: &str, value: &str) {
    let label = format!("Password for '{account}' on '{SERVICE}'");
    let (ok, out) = secret_tool(
        &[
            "store",
            "--label",
            &label,
            "service",
            SERVICE,
            "username",
            account,
            "application",
            "Python keyring library",
        ],
        Some(value),
    );
    assert!(ok, "secret-tool store failed: {out}");
}

/// Creates an item with only `service` and `username` (and optional extra
/// attributes).
fn store_with_attributes(account: &str, value: &str, extra: &[&str]) {
    let mut args = vec![
        "store",
        "--label",
        "test item",
        "service",
        SERVICE,
        "username",
        account,
    ];
    args.extend_from_slice(extra);
    let (ok, out) = secret_tool(&args, Some(value));
    assert!(ok, "secret-tool store failed: {out}");
}

/// What a lookup by `service` + `username` only finds (as the reference
/// looks items up).
fn lookup(account: &str) -> Option<String> {
    let (ok, out) = secret_tool(&["lookup", "service", SERVICE, "username", account], None);
    ok.then_some(out)
}

/// How many items match `service` + `username`, and their attribute lines.
fn search(account: &str) -> (usize, String) {
    let (_, out) = secret_tool(
        &[
            "search", "--all", "--unlock", "service", SERVICE, "username", account,
        ],
        None,
    );
    let count = out.lines().filter(|line| line.starts_with('[')).count();
    (count, out)
}

fn clear_all() {
    for account in ACCOUNTS {
        // Exit status 1 when nothing matched; that is fine.
        let _ = secret_tool(&["clear", "service", SERVICE, "username", account], None);
        assert_eq!(search(account).0, 0, "could not clear {account}");
    }
}

fn secret(text: &str) -> SecretString {
    SecretString::from(text)
}

fn same_key(a: &AuditKey, b: &AuditKey) -> bool {
    a.hmac_hex(b"probe") == b.hmac_hex(b"probe")
}

fn never_called() -> impl FnMut(&AuditKey) -> KeyCheck {
    |_: &AuditKey| panic!("the keychain store never imports a legacy key")
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn probe_finds_the_secret_service_and_selection_uses_it() {
    let session = Session::start();
    assert_eq!(session.keychain.backend_name(), "Secret Service (D-Bus)");
    // With a usable keychain the passphrase and tokens.enc play no part.
    let env = Environment::from_pairs([("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "unused")]);
    let selected = SecretStore::select(&session.paths(), &env).unwrap();
    assert_eq!(selected.store.kind(), StoreKind::Keychain);
    assert_eq!(selected.warning, None);
    assert_eq!(selected.store.access_token().unwrap(), None);
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn reads_items_with_only_service_and_username() {
    let session = Session::start();
    store_with_attributes("access_token", "at-from-elsewhere", &[]);
    store_like_the_reference("refresh_token", "rt-from-python");
    let store = session.store();
    assert_eq!(
        store.access_token().unwrap(),
        Some(secret("at-from-elsewhere"))
    );
    assert_eq!(
        store.refresh_token().unwrap(),
        Some(secret("rt-from-python"))
    );
    // The probe reads access_token, which exists now: still usable.
    assert!(Keychain::probe().is_ok());
}

#[test]
fn account_names_and_labels_match_the_reference() {
    // Runs everywhere: no keychain needed.
    assert_eq!(Account::AccessToken.as_str(), "access_token");
    assert_eq!(Account::RefreshToken.as_str(), "refresh_token");
    assert_eq!(Account::AuditKey.as_str(), "audit_key");
    assert_eq!(
        Account::AuditKey.label(),
        "Password for 'audit_key' on 'autogpt-local-executor'"
    );
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn items_created_here_are_found_by_service_and_username() {
    let session = Session::start();
    session
        .store()
        .store_tokens(&secret("rt-1"), &secret("at-1"))
        .unwrap();
    assert_eq!(lookup("refresh_token").as_deref(), Some("rt-1"));
    assert_eq!(lookup("access_token").as_deref(), Some("at-1"));
    let (count, attributes) = search("access_token");
    assert_eq!(count, 1, "{attributes}");
    assert!(
        attributes.contains(&format!("attribute.service = {SERVICE}")),
        "{attributes}"
    );
    assert!(
        attributes.contains("attribute.username = access_token"),
        "{attributes}"
    );
    assert!(
        attributes.contains("label = Password for 'access_token' on 'autogpt-local-executor'"),
        "{attributes}"
    );
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn writing_updates_the_references_item_in_place() {
    let session = Session::start();
    store_like_the_reference("access_token", "at-old");
    store_like_the_reference("refresh_token", "rt-old");
    session
        .store()
        .store_tokens(&secret("rt-new"), &secret("at-new"))
        .unwrap();
    for (account, value) in [("access_token", "at-new"), ("refresh_token", "rt-new")] {
        let (count, out) = search(account);
        assert_eq!(count, 1, "no duplicate item: {out}");
        assert!(out.contains("Python keyring library"), "same item: {out}");
        assert_eq!(lookup(account).as_deref(), Some(value));
    }
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn clear_tokens_deletes_both_and_tolerates_missing_entries() {
    let session = Session::start();
    let store = session.store();
    store.clear_tokens().unwrap();
    store.store_tokens(&secret("rt"), &secret("at")).unwrap();
    let (key, _) = store.audit_key_for_start(&mut never_called()).unwrap();
    store.clear_tokens().unwrap();
    assert_eq!(lookup("access_token"), None);
    assert_eq!(lookup("refresh_token"), None);
    assert_eq!(store.tokens().unwrap().access, None);
    // The audit key is never deleted by clearing tokens.
    assert!(same_key(
        &key,
        &store.audit_key_read_only(&mut never_called()).unwrap()
    ));
    store.clear_tokens().unwrap();
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn empty_entry_counts_as_absent() {
    let session = Session::start();
    store_with_attributes("access_token", "", &[]);
    assert_eq!(session.store().access_token().unwrap(), None);
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn audit_key_is_created_once_and_then_read() {
    let session = Session::start();
    let store = session.store();
    let error = store.audit_key_read_only(&mut never_called()).unwrap_err();
    assert!(matches!(error, SecretError::NoAuditKey { .. }), "{error:?}");
    assert_eq!(lookup("audit_key"), None, "read-only must not create a key");

    let (created, origin) = store.audit_key_for_start(&mut never_called()).unwrap();
    assert_eq!(origin, KeyOrigin::Created);
    let text = lookup("audit_key").unwrap();
    assert_eq!(text.len(), 64);
    assert!(
        text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{text}"
    );

    let (stored, origin) = store.audit_key_for_start(&mut never_called()).unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&created, &stored));
    assert!(same_key(
        &created,
        &store.audit_key_read_only(&mut never_called()).unwrap()
    ));
    assert_eq!(lookup("audit_key").unwrap(), text);
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn a_key_stored_by_the_reference_is_used() {
    let session = Session::start();
    store_like_the_reference(
        "audit_key",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    );
    let (key, origin) = session
        .store()
        .audit_key_for_start(&mut never_called())
        .unwrap();
    assert_eq!(origin, KeyOrigin::Stored);
    assert!(same_key(&key, &AuditKey::new((0u8..32).collect()).unwrap()));
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn corrupt_key_in_the_keychain_is_refused_and_kept() {
    let session = Session::start();
    store_like_the_reference("audit_key", "not-hex!");
    let store = session.store();
    for error in [
        store.audit_key_for_start(&mut never_called()).unwrap_err(),
        store.audit_key_read_only(&mut never_called()).unwrap_err(),
    ] {
        assert!(
            matches!(
                error,
                SecretError::CorruptAuditKey {
                    location: KeyLocation::Keychain,
                    ..
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("service autogpt-local-executor, account audit_key"),
            "{message}"
        );
        assert!(
            message.contains("Deleting that keychain entry"),
            "{message}"
        );
        assert!(message.contains("no longer verify"), "{message}");
        assert!(!message.contains("not-hex!"), "{message}");
    }
    assert_eq!(lookup("audit_key").as_deref(), Some("not-hex!"));
    assert_eq!(search("audit_key").0, 1);
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn duplicates_with_different_values_are_refused_until_rewritten() {
    let session = Session::start();
    store_with_attributes("access_token", "value-a", &[]);
    store_with_attributes("access_token", "value-b", &["target", "default"]);
    assert_eq!(search("access_token").0, 2);
    let store = session.store();
    let error = store.access_token().unwrap_err();
    match &error {
        SecretError::Keychain { error, .. } => {
            assert_eq!(error.kind(), KeychainErrorKind::Ambiguous);
        }
        other => panic!("{other:?}"),
    }
    let message = error.to_string();
    assert!(
        !message.contains("value-a") && !message.contains("value-b"),
        "{message}"
    );
    // The keychain still answers: the probe counts it usable.
    assert!(Keychain::probe().is_ok());
    // A write replaces them with one item.
    store.store_tokens(&secret("rt"), &secret("at")).unwrap();
    assert_eq!(search("access_token").0, 1);
    assert_eq!(store.access_token().unwrap(), Some(secret("at")));
}

#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn duplicates_with_equal_values_are_read() {
    let session = Session::start();
    store_with_attributes("refresh_token", "same", &[]);
    store_with_attributes("refresh_token", "same", &["target", "default"]);
    assert_eq!(
        session.store().refresh_token().unwrap(),
        Some(secret("same"))
    );
}

/// The process keeps one connection to the Secret Service. When the Secret
/// Service is replaced (its sessions, ours included, are gone), the next
/// operation opens a new connection instead of failing.
#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn a_replaced_secret_service_is_reached_on_a_new_connection() {
    let session = Session::start();
    session
        .keychain
        .set(Account::AccessToken, &secret("kept"))
        .unwrap();
    assert_eq!(
        session.keychain.get(Account::AccessToken).unwrap(),
        Some(secret("kept"))
    );
    replace_secret_service();
    assert_eq!(
        session.keychain.get(Account::AccessToken).unwrap(),
        Some(secret("kept"))
    );
    session
        .keychain
        .set(Account::RefreshToken, &secret("written after"))
        .unwrap();
    assert_eq!(lookup("refresh_token").as_deref(), Some("written after"));
    assert_eq!(search("access_token").0, 1, "no duplicate item");
}

/// Secrets cross the session bus only encrypted: a monitor of the bus sees
/// our calls and their clear parts (the label of the item we create), never
/// the value written or read.
#[test]
#[ignore = "needs a Secret Service session (run by .ci/run)"]
fn secrets_cross_the_bus_only_encrypted() {
    const WRITTEN: &str = "written-token-5c2f0e7a9d41b3686ad0";
    const READ: &str = "read-token-e1b04c7d2a9f53186be7";
    let session = Session::start();
    store_like_the_reference("refresh_token", READ);
    let capture = tempfile::NamedTempFile::new().unwrap();
    let _monitor = Reaped(
        Command::new("dbus-monitor")
            .args(["--session", "--binary"])
            .stdout(capture.reopen().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-monitor must be installed"),
    );
    let seen = |what: &[u8]| {
        let bytes = std::fs::read(capture.path()).unwrap();
        bytes.windows(what.len()).any(|window| window == what)
    };
    let eventually = |what: &[u8]| {
        (0..100).any(|_| {
            let found = seen(what);
            if !found {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            found
        })
    };
    // The monitor is listening once it shows one of our calls.
    let listening = (0..100).any(|_| {
        let _ = session.keychain.get(Account::AuditKey);
        seen(b"SearchItems") || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            false
        }
    });
    assert!(listening, "dbus-monitor never showed our calls");

    session
        .keychain
        .set(Account::AccessToken, &secret(WRITTEN))
        .unwrap();
    assert_eq!(
        session.keychain.get(Account::AccessToken).unwrap(),
        Some(secret(WRITTEN))
    );
    assert_eq!(
        session.keychain.get(Account::RefreshToken).unwrap(),
        Some(secret(READ))
    );
    // The bus hands the monitor its messages in order: once it shows a
    // call made after ours, it has shown ours, replies included.
    let marker = format!("end-of-capture-{}", std::process::id());
    assert!(
        ask_the_bus("NameHasOwner", &marker).is_some(),
        "the marker call failed"
    );
    assert!(
        eventually(marker.as_bytes()),
        "the monitor never showed the marker"
    );
    let label = Account::AccessToken.label();
    assert!(
        seen(b"CreateItem") && seen(b"GetSecret") && seen(label.as_bytes()),
        "the capture lacks our calls or their clear parts"
    );
    assert!(
        !seen(WRITTEN.as_bytes()),
        "the written secret crossed the bus in clear"
    );
    assert!(
        !seen(READ.as_bytes()),
        "the read secret crossed the bus in clear"
    );
}

/// A child killed and reaped when the test ends, however it ends.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Calls `method` of the bus itself with one string argument, with
/// `dbus-send`; the printed reply, or `None` when the call failed.
fn ask_the_bus(method: &str, argument: &str) -> Option<String> {
    let output = Command::new("dbus-send")
        .args([
            "--session",
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            &format!("org.freedesktop.DBus.{method}"),
            &format!("string:{argument}"),
        ])
        .output()
        .expect("dbus-send must be installed");
    let reply = String::from_utf8(output.stdout).unwrap();
    output.status.success().then_some(reply)
}

/// The process that owns `org.freedesktop.secrets` on the session bus.
fn secret_service_owner() -> Option<String> {
    ask_the_bus("GetConnectionUnixProcessID", "org.freedesktop.secrets").map(|reply| {
        reply
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned()
    })
}

/// Starts a new gnome-keyring-daemon in place of the running one, unlocked
/// with the password `.ci/run` created the test keyring with, and waits until
/// it owns the Secret Service's bus name.
fn replace_secret_service() {
    let password = std::env::var("SECRET_SERVICE_TEST_PASSWORD")
        .expect("SECRET_SERVICE_TEST_PASSWORD: the test keyring's password, set by .ci/run");
    let before = secret_service_owner().expect("a Secret Service owns its bus name");
    let mut daemon = Command::new("gnome-keyring-daemon")
        .args(["--replace", "--unlock", "--components=secrets"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gnome-keyring-daemon must be installed");
    daemon
        .stdin
        .take()
        .unwrap()
        .write_all(password.as_bytes())
        .unwrap();
    let started = daemon.wait_with_output().unwrap();
    assert!(started.status.success(), "{started:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match secret_service_owner() {
            Some(owner) if owner != before => return,
            _ if std::time::Instant::now() > deadline => {
                panic!("no new Secret Service replaced process {before}")
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}
