//! `autogpt-shim start --session-id` end to end through the platform
//! emulator: startup output and records, the handshake, reconnects, every
//! terminal close code, SESSION_REVOKED, authentication failures and
//! signals. Each test runs the real binary in an isolated home.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use autogpt_shim_emulator::{Ending, HelloAck};
use rustix::process::Signal;
use serde_json::json;
use start_support::*;

#[test]
fn start_connects_says_hello_and_stops_cleanly_on_sigterm() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (conn, hello) = connect(&emulator, HelloAck::new().grant(["files"]));
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {ACCESS}").as_str())
    );
    assert_eq!(conn.path(), format!("/ws/local-executor/{SESSION}"));
    let payload = &hello["payload"];
    assert_eq!(payload["machine_id"], "machine-e2e");
    assert_eq!(payload["allowed_root"], home.root.to_str().unwrap());
    assert_eq!(payload["capabilities"], json!(["files"]));
    let stat = conn.call("FILE_STAT", json!({"path": "."}), WAIT).unwrap();
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert!(
        shim.stdout.text().contains("Shim stopped."),
        "{}",
        shim.output()
    );
    let out = shim.stdout.text();
    assert!(
        out.contains("Starting shim daemon (machine_id=machine-e2e)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("Legacy direct session: {SESSION}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("Allowed root: {}", home.root.display())),
        "{out}"
    );
    assert!(!out.contains("shell commands are enabled"), "{out}");
    assert_eq!(
        home.ops(),
        [
            "SHIM_START",
            "WS_CONNECTED",
            "CONFIG_RELOADED",
            "FILE_STAT",
            "WS_DISCONNECTED",
            "SHIM_STOP"
        ]
    );
    let records = home.records();
    assert_eq!(
        records[2]["details"],
        json!({"granted_capabilities": ["files"]})
    );
    assert_eq!(records[4]["details"], json!({"reason": "clean_exit"}));
    assert_eq!(records[5]["details"], json!({"reason": "graceful"}));
    assert_eq!(records[3]["session_id"], SESSION);
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByShim {
            code: Some(1000),
            ..
        })
    ));
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    assert!(!home.all_text().contains(ACCESS));
    assert!(!shim.output().contains(ACCESS));
}
