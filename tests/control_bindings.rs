//! Session bindings (CONTROL.md §12.1) and the persisted grant revisions
//! (§7.5 hardening note) on real files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use autogpt_shim::control::{
    BINDING_CAP, Binding, Bindings, REVISION_CAP, REVISIONS_FILE, RevisionError, Revisions,
    StoreFull,
};

fn binding(session: &str, revision: u64) -> Binding {
    Binding {
        session_id: session.into(),
        allowed_root: PathBuf::from("/srv/x"),
        root_text: "/srv/x".into(),
        fingerprint: "f".repeat(64),
        revision,
        root_grant: "v1.x.y".into(),
        dev_ino: (1, 2),
        identity: Default::default(),
    }
}

#[test]
fn the_sixty_fifth_binding_evicts_the_oldest_without_a_live_child() {
    let mut store = Bindings::new();
    for n in 0..BINDING_CAP {
        store
            .remember(binding(&format!("s{n}"), 1), |_| false)
            .unwrap();
    }
    // s0 has a live child, so s1 is the one forgotten.
    store.remember(binding("s-new", 1), |s| s == "s0").unwrap();
    assert_eq!(store.len(), BINDING_CAP);
    assert!(store.get("s0").is_some());
    assert!(store.get("s1").is_none());
    // Remembering again moves a binding to the newest position.
    store.remember(binding("s2", 2), |_| false).unwrap();
    store.remember(binding("s-newer", 1), |_| false).unwrap();
    assert!(store.get("s2").is_some());
    assert!(store.get("s0").is_none());
    // Every session live: the store refuses.
    assert_eq!(
        store.remember(binding("s-last", 1), |_| true),
        Err(StoreFull)
    );
}

#[test]
fn restore_puts_back_or_forgets() {
    let mut store = Bindings::new();
    store.remember(binding("s", 1), |_| false).unwrap();
    store.remember(binding("s", 2), |_| false).unwrap();
    store.restore("s", Some(binding("s", 1)));
    assert_eq!(store.get("s").unwrap().revision, 1);
    store.restore("s", None);
    assert!(store.get("s").is_none());
}

#[test]
fn revisions_persist_owner_only_and_never_go_down() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let mut revisions = Revisions::load(&state).unwrap();
    assert_eq!(revisions.highest("chat"), 0);
    revisions.record("chat", 3).unwrap();
    revisions.record("chat", 2).unwrap();
    let file = state.join(REVISIONS_FILE);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    let again = Revisions::load(&state).unwrap();
    assert_eq!(again.highest("chat"), 3);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [REVISIONS_FILE]);
}

#[test]
fn a_corrupt_revision_file_is_refused_not_reset() {
    let tmp = tempfile::tempdir().unwrap();
    for content in [
        "not json",
        "[1]",
        r#"{"chat": 3}"#,
        r#"{"chat": {"revision": 0, "updated": 1}}"#,
        r#"{"chat": {"revision": "3", "updated": 1}}"#,
        r#"{"chat": {"revision": 3}}"#,
    ] {
        std::fs::write(tmp.path().join(REVISIONS_FILE), content).unwrap();
        let error = Revisions::load(tmp.path()).unwrap_err();
        assert!(matches!(error, RevisionError::Unreadable(..)), "{content}");
        assert!(error.to_string().contains("remove it"), "{error}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(REVISIONS_FILE)).unwrap(),
            content
        );
    }
}

#[test]
fn the_revision_file_is_capped_and_forgets_the_session_updated_longest_ago() {
    let tmp = tempfile::tempdir().unwrap();
    // Written directly: ten thousand sessions, "old" updated first.
    let mut entries = vec![r#""old": {"revision": 4, "updated": 1}"#.to_owned()];
    for n in 1..REVISION_CAP {
        entries.push(format!(
            r#""s{n}": {{"revision": 1, "updated": {}}}"#,
            100 + n
        ));
    }
    std::fs::write(
        tmp.path().join(REVISIONS_FILE),
        format!("{{{}}}", entries.join(", ")),
    )
    .unwrap();
    let mut revisions = Revisions::load(tmp.path()).unwrap();
    assert_eq!(revisions.len(), REVISION_CAP);
    revisions.record("new", 1).unwrap();
    assert_eq!(revisions.len(), REVISION_CAP);
    assert_eq!(
        revisions.highest("old"),
        0,
        "the oldest entry was forgotten"
    );
    assert_eq!(revisions.highest("new"), 1);
    assert_eq!(Revisions::load(tmp.path()).unwrap().highest("s9"), 1);
}
