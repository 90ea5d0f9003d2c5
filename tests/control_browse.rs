//! Directory browsing (CONTROL.md §4) on real directories: virtual roots,
//! paging and cursors, what is skipped, every cap, expiry and invalidation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use autogpt_shim::control::{
    BROWSE_LIFETIME, BrowseError, Browser, CURSOR_INVALID, NOT_ACCESSIBLE, REFERENCE_INVALID,
    RootSources,
};

const NOW: f64 = 1_000_000.0;

struct Tree {
    _tmp: tempfile::TempDir,
    home: PathBuf,
}

fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("alice")).unwrap();
    let home = tmp.path().join("alice").canonicalize().unwrap();
    Tree { _tmp: tmp, home }
}

fn sources(home: &Path) -> RootSources {
    RootSources {
        home: home.to_owned(),
        wsl: false,
    }
}

/// Starts a browse and returns (browser, browse id, home's reference).
fn open(home: &Path) -> (Browser, String, String) {
    let mut browser = Browser::new();
    let roots = browser.start(NOW, &sources(home)).unwrap();
    assert_eq!(roots.entries[0].path, home.to_str().unwrap());
    let home_ref = roots.entries[0].directory_ref.clone();
    (browser, roots.browse_id, home_ref)
}

fn is_token(t: &str) -> bool {
    t.len() == 32
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[test]
fn root_listing_starts_with_home_and_mints_opaque_tokens() {
    let t = tree();
    let mut browser = Browser::new();
    let roots = browser.start(NOW, &sources(&t.home)).unwrap();
    assert!(roots.current.is_none() && roots.parent_ref.is_none());
    assert!(!roots.truncated && roots.next_cursor.is_none());
    assert_eq!(roots.expires_at, NOW + BROWSE_LIFETIME);
    assert_eq!(roots.entries[0].name, "alice");
    assert!(is_token(&roots.browse_id));
    assert!(roots.entries.iter().all(|e| is_token(&e.directory_ref)));
    assert!(!roots.entries.iter().any(|e| e.path == "/"));
}

#[test]
fn listing_shows_only_real_accessible_subdirectories_sorted_by_folded_name() {
    let t = tree();
    for d in ["beta", "Alpha", "zeta", "straße"] {
        std::fs::create_dir(t.home.join(d)).unwrap();
    }
    std::fs::write(t.home.join("file.txt"), b"x").unwrap();
    std::os::unix::fs::symlink(t.home.join("beta"), t.home.join("link-to-beta")).unwrap();
    std::fs::create_dir(t.home.join("bad\u{200d}name")).unwrap();
    let (mut browser, browse, home_ref) = open(&t.home);
    let page = browser.list(NOW + 1.0, &browse, &home_ref, None).unwrap();
    let names: Vec<&str> = page.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["Alpha", "beta", "straße", "zeta"]);
    let current = page.current.unwrap();
    assert_eq!(current.directory_ref, home_ref);
    assert_eq!(current.path, t.home.to_str().unwrap());
    assert_eq!(page.parent_ref, None);
    assert_eq!(page.entries[0].path, t.home.join("Alpha").to_str().unwrap());
    // One level down: the parent is the listed directory's reference.
    let alpha_ref = page.entries[0].directory_ref.clone();
    let sub = browser.list(NOW + 2.0, &browse, &alpha_ref, None).unwrap();
    assert_eq!(sub.parent_ref.as_deref(), Some(home_ref.as_str()));
    assert!(sub.entries.is_empty());
}

#[test]
fn pages_of_two_hundred_follow_cursors_which_are_reused_and_bound_to_their_directory() {
    let t = tree();
    for i in 0..450 {
        std::fs::create_dir(t.home.join(format!("d{i:03}"))).unwrap();
    }
    let (mut browser, browse, home_ref) = open(&t.home);
    let first = browser.list(NOW, &browse, &home_ref, None).unwrap();
    assert_eq!(first.entries.len(), 200);
    let cursor = first.next_cursor.clone().unwrap();
    assert!(is_token(&cursor));
    let again = browser.list(NOW, &browse, &home_ref, None).unwrap();
    assert_eq!(
        again.next_cursor.as_deref(),
        Some(cursor.as_str()),
        "reused"
    );
    let second = browser
        .list(NOW, &browse, &home_ref, Some(&cursor))
        .unwrap();
    assert_eq!(second.entries[0].name, "d200");
    let third = browser
        .list(NOW, &browse, &home_ref, second.next_cursor.as_deref())
        .unwrap();
    assert_eq!(third.entries.len(), 50);
    assert_eq!(third.next_cursor, None);
    assert!(!third.truncated);
    // A cursor presented for another directory is refused.
    let other_ref = first.entries[0].directory_ref.clone();
    assert_eq!(
        browser.list(NOW, &browse, &other_ref, Some(&cursor)),
        Err(BrowseError::ReferenceInvalid(CURSOR_INVALID))
    );
}

#[test]
fn scan_stops_after_a_thousand_entries_and_says_truncated() {
    let t = tree();
    for i in 0..1100 {
        std::fs::write(t.home.join(format!("f{i:04}")), b"").unwrap();
    }
    std::fs::create_dir(t.home.join("only-dir")).unwrap();
    let (mut browser, browse, home_ref) = open(&t.home);
    let page = browser.list(NOW, &browse, &home_ref, None).unwrap();
    assert!(page.truncated);
    assert!(page.entries.len() <= 1);
}

#[test]
fn reference_cap_stops_minting_and_ends_paging() {
    let t = tree();
    for i in 0..200 {
        std::fs::create_dir(t.home.join(format!("d{i:03}"))).unwrap();
    }
    let (mut browser, browse, home_ref) = open(&t.home);
    let roots_minted = 1; // home (the tree has no other roots)
    let mut minted = roots_minted;
    while minted + 200 <= 1200 {
        let page = browser.list(NOW, &browse, &home_ref, None).unwrap();
        assert!(!page.truncated);
        minted += page.entries.len();
    }
    let capped = browser.list(NOW, &browse, &home_ref, None).unwrap();
    assert!(capped.truncated);
    assert_eq!(capped.next_cursor, None);
    assert_eq!(capped.entries.len(), 1200 - minted);
}

#[test]
fn browses_expire_after_five_minutes_and_unknown_tokens_are_refused() {
    let t = tree();
    let (mut browser, browse, home_ref) = open(&t.home);
    let invalid = Err(BrowseError::ReferenceInvalid(REFERENCE_INVALID));
    assert_eq!(
        browser.list(NOW, &browse, "A".repeat(32).as_str(), None),
        invalid
    );
    assert_eq!(browser.list(NOW, "nope", &home_ref, None), invalid);
    assert!(browser.list(NOW + 299.0, &browse, &home_ref, None).is_ok());
    assert_eq!(
        browser.list(NOW + BROWSE_LIFETIME, &browse, &home_ref, None),
        invalid
    );
}

#[test]
fn ninth_browse_evicts_the_least_recently_used_one() {
    let t = tree();
    let mut browser = Browser::new();
    let mut ids = Vec::new();
    for _ in 0..8 {
        let r = browser.start(NOW, &sources(&t.home)).unwrap();
        ids.push((r.browse_id, r.entries[0].directory_ref.clone()));
    }
    // Using the first makes the second the least recently used.
    browser.list(NOW, &ids[0].0, &ids[0].1, None).unwrap();
    browser.start(NOW, &sources(&t.home)).unwrap();
    assert_eq!(browser.open_browses(NOW), 8);
    assert!(browser.list(NOW, &ids[0].0, &ids[0].1, None).is_ok());
    assert_eq!(
        browser.list(NOW, &ids[1].0, &ids[1].1, None),
        Err(BrowseError::ReferenceInvalid(REFERENCE_INVALID))
    );
}

#[test]
fn consuming_or_resetting_invalidates_every_token_of_the_browse() {
    let t = tree();
    std::fs::create_dir(t.home.join("proj")).unwrap();
    let (mut browser, browse, home_ref) = open(&t.home);
    let page = browser.list(NOW, &browse, &home_ref, None).unwrap();
    let proj = page.entries[0].directory_ref.clone();
    let resolved = browser.resolve(NOW, &browse, &proj).unwrap();
    assert_eq!(resolved.dir.path, t.home.join("proj"));
    browser.consume(&browse);
    assert!(browser.resolve(NOW, &browse, &proj).is_err());
    assert!(browser.list(NOW, &browse, &home_ref, None).is_err());

    let (mut browser, browse, home_ref) = open(&t.home);
    browser.reset();
    assert!(browser.list(NOW, &browse, &home_ref, None).is_err());
}

#[test]
fn a_referenced_folder_that_vanished_or_became_a_link_is_unavailable() {
    let t = tree();
    std::fs::create_dir(t.home.join("proj")).unwrap();
    std::fs::create_dir(t.home.join("other")).unwrap();
    let (mut browser, browse, home_ref) = open(&t.home);
    let page = browser.list(NOW, &browse, &home_ref, None).unwrap();
    let proj = page
        .entries
        .iter()
        .find(|e| e.name == "proj")
        .unwrap()
        .directory_ref
        .clone();
    std::fs::remove_dir(t.home.join("proj")).unwrap();
    assert_eq!(
        browser.list(NOW, &browse, &proj, None),
        Err(BrowseError::Unavailable(NOT_ACCESSIBLE))
    );
    std::os::unix::fs::symlink(t.home.join("other"), t.home.join("proj")).unwrap();
    assert!(matches!(
        browser.resolve(NOW, &browse, &proj),
        Err(BrowseError::Unavailable(_))
    ));
}
