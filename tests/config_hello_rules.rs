//! `start` with a `machine_id`, `display_name` or session root the platform
//! refuses in `HELLO`: a configuration error (exit 78, one line naming the
//! key and its rule) before anything connects, never a reconnect loop.
//! Each test runs the real binary against the platform emulator and checks
//! that the emulator saw no connection attempt; in control mode a folder
//! whose path the platform would refuse cannot become a chat's root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::Duration;

use autogpt_shim_emulator::HelloAck;
use rustix::process::Signal;
use serde_json::json;
use start_support::*;

/// How long after the shim's exit a connection attempt would still have
/// been seen.
const GRACE: Duration = Duration::from_millis(300);

/// Runs `start` (legacy mode, or control mode when `control`) with `env`
/// and checks that it exits 78 with one `Preflight failed:` line naming
/// `key` and its rule, without any connection attempt or audit record.
fn refused_before_connecting(env: &[(&str, &str)], control: bool, key: &str, rule: &str) {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = if control {
        Shim::start_control_with_env(&home, &emulator, env, &[])
    } else {
        Shim::start_with_env(&home, &emulator, env, &[])
    };
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    let stderr = shim.stderr.text();
    let line = stderr
        .lines()
        .find(|l| l.contains(key))
        .unwrap_or_else(|| panic!("no line names {key}:\n{}", shim.output()));
    assert!(line.contains(rule), "{line}");
    std::thread::sleep(GRACE);
    assert!(emulator.attempts().is_empty(), "{:?}", emulator.attempts());
    assert!(home.records().is_empty(), "{:?}", home.ops());
}

#[test]
fn display_name_with_angle_brackets_is_refused_before_connecting() {
    refused_before_connecting(
        &[("AUTOGPT_SHIM_DISPLAY_NAME", "<b>laptop</b>")],
        false,
        "display_name",
        "without <, > or control characters",
    );
}

#[test]
fn display_name_with_a_control_character_is_refused_in_control_mode_too() {
    refused_before_connecting(
        &[("AUTOGPT_SHIM_DISPLAY_NAME", "lap\u{1b}[31mtop")],
        true,
        "display_name",
        "without <, > or control characters",
    );
}

#[test]
fn machine_id_outside_the_platform_pattern_is_refused_before_connecting() {
    for id in ["-starts-with-dash", "has space", "ünicode"] {
        refused_before_connecting(
            &[("AUTOGPT_SHIM_MACHINE_ID", id)],
            false,
            "machine_id",
            "from A-Z a-z 0-9 . _ : - and start with a letter or digit",
        );
    }
}

#[test]
fn machine_id_longer_than_128_characters_is_refused_in_control_mode() {
    let long = "m".repeat(129);
    refused_before_connecting(
        &[("AUTOGPT_SHIM_MACHINE_ID", &long)],
        true,
        "machine_id",
        "must be 1 to 128 characters",
    );
}

#[test]
fn session_root_with_characters_the_platform_refuses_is_refused_before_connecting() {
    for name in ["work<space>", "tab\there"] {
        let home = Home::new();
        let root = home.path().join(name);
        std::fs::create_dir(&root).unwrap();
        let emulator = emulator();
        let env = [("AUTOGPT_SHIM_ALLOWED_ROOT", root.to_str().unwrap())];
        let mut shim = Shim::start_with_env(&home, &emulator, &env, &[]);
        assert_eq!(shim.wait(WAIT), 78, "{name:?}: {}", shim.output());
        let stderr = shim.stderr.text();
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("allowed_root")
                    && l.contains("without <, > or control characters")),
            "{stderr}"
        );
        std::thread::sleep(GRACE);
        assert!(emulator.attempts().is_empty(), "{:?}", emulator.attempts());
        assert!(home.records().is_empty(), "{:?}", home.ops());
    }
}

/// `reply` refuses a folder because the platform would refuse its path.
fn assert_refused_as_unsendable(reply: &serde_json::Value) {
    assert_eq!(reply["type"], "ERROR", "{reply}");
    assert_eq!(reply["payload"]["code"], "DIRECTORY_UNAVAILABLE", "{reply}");
    let message = reply["payload"]["message"].as_str().unwrap();
    assert!(message.contains("<, > or a control character"), "{message}");
}

#[test]
fn a_folder_whose_path_the_platform_refuses_cannot_be_attached_to_a_chat() {
    let home = Home::new();
    let home_path = home.path().canonicalize().unwrap();
    std::fs::create_dir(home_path.join("a<b>")).unwrap();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = accept_with(&emulator, &HelloAck::new());
    let (browse, reference) = reference_to(&conn, &home_path, "a<b>");
    let reply = conn
        .call(
            "ATTACH_SESSION",
            json!({"session_id": "chat-1", "browse_id": browse, "directory_ref": reference}),
            WAIT,
        )
        .unwrap();
    assert_refused_as_unsendable(&reply);
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert_eq!(emulator.attempts().len(), 1, "only the control connection");
}

#[test]
fn a_grant_for_a_folder_whose_path_the_platform_refuses_is_not_restored() {
    use autogpt_shim::control::{Claims, GrantKey, fingerprint, sign};
    use autogpt_shim::secrets::KeyCheck;
    use std::os::unix::fs::MetadataExt;

    let home = Home::new();
    let home_path = home.path().canonicalize().unwrap();
    let folder = home_path.join("a<b>");
    std::fs::create_dir(&folder).unwrap();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, hello) = accept_with(&emulator, &HelloAck::new());
    // A grant such as a shim that did not check the path yet issued: valid
    // in every other respect, signed with this machine's grant key.
    let audit_key = home
        .store()
        .audit_key_read_only(&mut |_| KeyCheck::NoRecords)
        .unwrap();
    let meta = std::fs::metadata(&folder).unwrap();
    let text = folder.to_str().unwrap().to_owned();
    let claims = Claims {
        fingerprint: fingerprint(&meta.dev().to_string(), meta.ino(), &text),
        allowed_root: text,
        issued_at: 1_700_000_000.0,
        machine_id: hello["payload"]["machine_id"].as_str().unwrap().to_owned(),
        revision: 1,
        session_id: "chat-1".into(),
        identity: None,
    };
    let grant = sign(&GrantKey::derive(&audit_key), &claims);
    let reply = conn
        .call(
            "RESTORE_SESSION",
            json!({"session_id": "chat-1", "root_grant": grant}),
            WAIT,
        )
        .unwrap();
    assert_refused_as_unsendable(&reply);
    std::thread::sleep(GRACE);
    assert_eq!(
        emulator.attempts().len(),
        1,
        "no chat connection was opened"
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}
