//! Root grants and folder identities (CONTROL.md §6–§7): the specification's
//! vectors verbatim, every verification failure, and a folder replaced on
//! the machine's own filesystem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use autogpt_shim::audit::AuditKey;
use autogpt_shim::control::{
    Accepted, Claims, DirIdentity, FolderError, GrantError, GrantKey, canonical_accessible,
    claims_json, fingerprint, sign, verify, verify_folder,
};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const VECTOR_TOKEN: &str = "v1.eyJhbGxvd2VkX3Jvb3QiOiIvaG9tZS9hbGljZS9wcm9qZWN0IiwiZmluZ2VycHJpbnQiOiI1NjhhODE5OTQxN2I1ZDdjM2I4YWY2ZDVjYzljY2ZmYjI3MzdlNzg4NWYzMWQ1ODgzMWUwODRhZmYwZjYyZjU3IiwiaXNzdWVkX2F0IjoxMjMuMCwibWFjaGluZV9pZCI6Im1hY2hpbmUtMSIsInJldmlzaW9uIjoxLCJzZXNzaW9uX2lkIjoic2Vzc2lvbi0xIn0.-qBOIFAcQxCk4wivWwcfh92EpVayIXCvtacFEDofJco";
const FP1: &str = "568a8199417b5d7c3b8af6d5cc9ccffb2737e7885f31d58831e084aff0f62f57";

fn key() -> GrantKey {
    GrantKey::derive(&AuditKey::new(vec![0x61; 32]).unwrap())
}

/// Signs arbitrary claims text with the vector key, as a foreign issuer
/// could.
fn signed(claims_text: &str) -> String {
    let k = hex_bytes(&key().hex());
    let encoded = URL_SAFE_NO_PAD.encode(claims_text);
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&k).unwrap();
    mac.update(encoded.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("v1.{encoded}.{signature}")
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn fingerprint_vectors_match_the_specification() {
    assert_eq!(fingerprint("2049", 1234567, "/home/alice/project"), FP1);
    assert_eq!(
        fingerprint("16777220", 8746213, "/Users/alice/Projekte/Über"),
        "3f3b75008f600cea0469b49121beb7c2db802494acef39a8a612bda899f29733"
    );
    assert_eq!(
        fingerprint("2833512234", 281474976731215, "c:\\users\\alice\\proj"),
        "8b4f8ba5abaafa8d52c2c0ddcecb7ebf188a7d233b04bc68df257880a81ac349"
    );
}

#[test]
fn grant_key_and_token_vectors_match_the_specification() {
    assert_eq!(
        key().hex(),
        "b16f3e83f42d8ca001db248ef36a4614afb2dc2358c86dde6ff90089d27e431e"
    );
    let claims = Claims {
        allowed_root: "/home/alice/project".into(),
        fingerprint: FP1.into(),
        issued_at: 123.0,
        machine_id: "machine-1".into(),
        revision: 1,
        session_id: "session-1".into(),
        identity: None,
    };
    assert_eq!(
        claims_json(&claims),
        r#"{"allowed_root":"/home/alice/project","fingerprint":"568a8199417b5d7c3b8af6d5cc9ccffb2737e7885f31d58831e084aff0f62f57","issued_at":123.0,"machine_id":"machine-1","revision":1,"session_id":"session-1"}"#
    );
    assert_eq!(sign(&key(), &claims), VECTOR_TOKEN);
    assert_eq!(
        verify(&key(), VECTOR_TOKEN, "session-1", "machine-1"),
        Ok(Accepted {
            allowed_root: "/home/alice/project".into(),
            fingerprint: FP1.into(),
            revision: 1,
            identity: None,
        })
    );
}

#[test]
fn non_ascii_root_and_fractional_time_are_encoded_like_the_reference() {
    let claims = Claims {
        allowed_root: "/Users/alice/Projekte/Über".into(),
        fingerprint: FP1.into(),
        issued_at: 1712345678.123456,
        machine_id: "machine-1".into(),
        revision: 1,
        session_id: "session-1".into(),
        identity: None,
    };
    let text = claims_json(&claims);
    assert!(
        text.contains(r#""allowed_root":"/Users/alice/Projekte/\u00dcber""#),
        "{text}"
    );
    assert!(text.contains(r#""issued_at":1712345678.123456"#), "{text}");
}

#[test]
fn identity_claim_sorts_between_fingerprint_and_issued_at() {
    let claims = Claims {
        allowed_root: "/r".into(),
        fingerprint: FP1.into(),
        issued_at: 1.0,
        machine_id: "m".into(),
        revision: 3,
        session_id: "s".into(),
        identity: Some(DirIdentity {
            btime: Some("1712345678.123456789".into()),
            generation: Some("12345".into()),
        }),
    };
    let text = claims_json(&claims);
    assert!(
        text.contains(r#""fingerprint":"568a8199417b5d7c3b8af6d5cc9ccffb2737e7885f31d58831e084aff0f62f57","identity":{"btime":"1712345678.123456789","generation":"12345"},"issued_at":1.0"#),
        "{text}"
    );
    let accepted = verify(&key(), &sign(&key(), &claims), "s", "m").unwrap();
    assert_eq!(accepted.identity, claims.identity);
}

#[test]
fn every_verification_failure_has_its_text() {
    let v = |token: &str| verify(&key(), token, "session-1", "machine-1");
    let good = r#"{"allowed_root":"/x","fingerprint":"f","machine_id":"machine-1","revision":1,"session_id":"session-1"}"#;
    assert!(v(&signed(good)).is_ok());
    let cases: Vec<(String, GrantError)> = vec![
        ("v1.onlytwo".into(), GrantError::Malformed),
        ("garbage".into(), GrantError::Malformed),
        (
            VECTOR_TOKEN.replacen("v1.", "v2.", 1),
            GrantError::UnsupportedVersion,
        ),
        (
            format!("{}A", &VECTOR_TOKEN[..VECTOR_TOKEN.len() - 1]),
            GrantError::BadSignature,
        ),
        ("v1.Über.abc".into(), GrantError::Malformed),
        (signed("not json"), GrantError::Malformed),
        (signed("[1,2]"), GrantError::Malformed),
        (
            signed(
                r#"{"allowed_root":"/x","fingerprint":"f","machine_id":"machine-1","session_id":"session-1"}"#,
            ),
            GrantError::Malformed,
        ),
        (
            signed(&good.replace("session-1", "session-2")),
            GrantError::OtherSession,
        ),
        (
            signed(&good.replace("machine-1", "machine-2")),
            GrantError::OtherMachine,
        ),
        (
            signed(&good.replace("\"revision\":1", "\"revision\":0")),
            GrantError::BadRevision,
        ),
        (
            signed(&good.replace("\"revision\":1", "\"revision\":true")),
            GrantError::BadRevision,
        ),
        (
            signed(&good.replace("\"revision\":1", "\"revision\":1.5")),
            GrantError::BadRevision,
        ),
        (signed(&good.replace("\"/x\"", "7")), GrantError::BadClaims),
        (
            signed(&good.replace("\"f\"", "null")),
            GrantError::BadClaims,
        ),
    ];
    for (token, expected) in cases {
        assert_eq!(v(&token), Err(expected), "{token}");
    }
    assert_eq!(
        GrantError::BadSignature.message(),
        "Root grant signature is invalid"
    );
    // A grant signed under another audit key never verifies.
    let other = GrantKey::derive(&AuditKey::new(vec![0x62; 32]).unwrap());
    assert_eq!(
        verify(&other, VECTOR_TOKEN, "session-1", "machine-1"),
        Err(GrantError::BadSignature)
    );
}

#[test]
fn any_altered_field_of_a_grant_is_refused() {
    let claims_text = String::from_utf8(
        URL_SAFE_NO_PAD
            .decode(VECTOR_TOKEN.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    for (from, to) in [
        ("/home/alice/project", "/home/alice/other"),
        ("568a8199", "568a8198"),
        ("123.0", "124.0"),
        ("\"revision\":1", "\"revision\":2"),
    ] {
        let altered = claims_text.replace(from, to);
        let mut parts = VECTOR_TOKEN.splitn(3, '.');
        let (_, _, signature) = (parts.next(), parts.next(), parts.next().unwrap());
        let token = format!("v1.{}.{signature}", URL_SAFE_NO_PAD.encode(&altered));
        assert_eq!(
            verify(&key(), &token, "session-1", "machine-1"),
            Err(GrantError::BadSignature),
            "{from} -> {to}"
        );
    }
}

/// A scratch directory on the build's own filesystem (not necessarily
/// tmpfs), where inode numbers are reused the way users' disks reuse them.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn accepted_for(dir: &Path) -> Accepted {
    let live = canonical_accessible(dir).unwrap();
    Accepted {
        allowed_root: live.text.clone(),
        fingerprint: live.fingerprint(),
        revision: 1,
        identity: Some(live.identity.clone()),
    }
}

#[test]
fn canonical_accessible_refuses_links_files_and_missing_paths() {
    let tmp = scratch();
    let dir = tmp.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(canonical_accessible(&link), Err(FolderError::Symlink));
    assert_eq!(canonical_accessible(&file), Err(FolderError::Unavailable));
    assert_eq!(
        canonical_accessible(&tmp.path().join("missing")),
        Err(FolderError::Unavailable)
    );
    // A link in an ancestor is followed.
    std::fs::create_dir(dir.join("sub")).unwrap();
    let live = canonical_accessible(&link.join("sub")).unwrap();
    assert_eq!(live.path, dir.canonicalize().unwrap().join("sub"));
}

#[test]
fn fingerprint_of_a_live_folder_uses_its_device_inode_and_path() {
    use std::os::unix::fs::MetadataExt;
    let tmp = scratch();
    let live = canonical_accessible(tmp.path()).unwrap();
    let meta = std::fs::metadata(tmp.path()).unwrap();
    assert_eq!(
        live.fingerprint(),
        fingerprint(&meta.dev().to_string(), meta.ino(), &live.text)
    );
}

#[test]
fn folder_grant_verification_accepts_the_same_folder() {
    let tmp = scratch();
    let dir = tmp.path().join("project");
    std::fs::create_dir(&dir).unwrap();
    let accepted = accepted_for(&dir);
    let home = tmp.path().join("home-elsewhere");
    assert_eq!(
        verify_folder(&accepted, &home, false).unwrap().path,
        dir.canonicalize().unwrap()
    );
}

#[test]
fn folder_deleted_and_recreated_at_the_same_path_is_refused() {
    use std::os::unix::fs::MetadataExt;
    let tmp = scratch();
    let dir = tmp.path().join("project");
    std::fs::create_dir(&dir).unwrap();
    let accepted = accepted_for(&dir);
    let home = tmp.path().join("home-elsewhere");
    let before = std::fs::metadata(&dir).unwrap().ino();
    std::fs::remove_dir(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let after = std::fs::metadata(&dir).unwrap().ino();
    println!(
        "inode before {before}, after {after} (reused: {})",
        before == after
    );
    assert_eq!(
        verify_folder(&accepted, &home, false),
        Err(GrantError::Changed)
    );
    assert!(
        !accepted.identity.as_ref().unwrap().is_empty() || before != after,
        "this filesystem keeps neither birth time nor generation and reused the inode"
    );
}

#[test]
fn folder_replaced_by_a_symlink_or_renamed_is_refused() {
    let tmp = scratch();
    let dir = tmp.path().join("project");
    std::fs::create_dir(&dir).unwrap();
    let accepted = accepted_for(&dir);
    let home = tmp.path().join("home-elsewhere");
    std::fs::rename(&dir, tmp.path().join("moved")).unwrap();
    assert_eq!(
        verify_folder(&accepted, &home, false),
        Err(GrantError::Unavailable)
    );
    std::os::unix::fs::symlink(tmp.path().join("moved"), &dir).unwrap();
    assert_eq!(
        verify_folder(&accepted, &home, false),
        Err(GrantError::SymlinkRoot)
    );
}

#[test]
fn grant_for_a_dangerous_root_is_refused() {
    let tmp = scratch();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let accepted = accepted_for(&home);
    assert_eq!(
        verify_folder(&accepted, &home, false),
        Err(GrantError::Unavailable)
    );
}
