//! The platform refusing the shim, end to end with the real binary: an
//! upgrade answered 403 with a JSON `detail`, a handshake closed with 4400
//! or 4403 instead of a `HELLO_ACK`. Each is tried at most four times, then
//! `start` exits with one line quoting the platform's reason and saying what
//! to do, and every attempt's `WS_DISCONNECTED` records that reason. A 401
//! keeps its single refresh and retry; a 4403 after an accepted handshake
//! keeps reconnecting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::Duration;

use autogpt_shim_emulator::{
    AttemptOutcome, Emulator, EmulatorOptions, HelloAck, OAuthEmulator, UpgradeBehaviour,
};
use rustix::process::Signal;
use serde_json::Value;
use start_support::*;

/// How long to wait for a fifth attempt that must not come.
const NO_MORE: Duration = Duration::from_millis(800);

/// Every attempt a refused daemon may make: the first and three retries.
const ATTEMPTS: usize = 4;

fn disconnects(home: &Home) -> Vec<Value> {
    home.records()
        .into_iter()
        .filter(|r| r["op"] == "WS_DISCONNECTED")
        .map(|r| r["details"].clone())
        .collect()
}

/// `UpgradeBehaviour::Refuse` with `status` and `detail`, more times than
/// the shim may try.
fn refusing(status: u16, detail: &str) -> Emulator {
    let refusals = (0..ATTEMPTS + 2).map(|_| UpgradeBehaviour::Refuse {
        status,
        detail: detail.to_owned(),
    });
    Emulator::start(
        EmulatorOptions::new()
            .expect_token(ACCESS)
            .upgrades(refusals),
    )
    .unwrap()
}

/// The one stderr line that quotes `reason`.
fn line_quoting<'a>(stderr: &'a str, reason: &str) -> &'a str {
    let quoted = format!("\"{reason}\"");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(&quoted) && l.contains("stopping"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    lines[0]
}

#[test]
fn a_forbidden_upgrade_is_tried_four_times_then_exits_77_quoting_its_detail() {
    let detail = "Session is not bound to this machine";
    let home = Home::new();
    let emulator = refusing(403, detail);
    let mut shim = Shim::start(&home, &emulator, &[]);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    std::thread::sleep(NO_MORE);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), ATTEMPTS, "{attempts:?}");
    assert!(
        attempts
            .iter()
            .all(|a| a.outcome == AttemptOutcome::Rejected(403))
    );
    let stderr = shim.stderr.text();
    let line = line_quoting(&stderr, detail);
    assert!(
        line.contains("pick the folder in the platform, or start without --session-id"),
        "{line}"
    );
    assert!(!stderr.contains("autogpt-shim auth"), "{stderr}");
    let details = disconnects(&home);
    assert_eq!(details.len(), ATTEMPTS, "{:?}", home.ops());
    for d in details {
        assert_eq!(d["reason"], "loop_error: http_403");
        assert_eq!(d["platform_reason"], detail);
    }
    assert_eq!(home.ops().last().unwrap(), "SHIM_STOP");
}

#[test]
fn a_forbidden_control_connection_says_machine_control_is_not_available() {
    let detail = "Local executor is disabled for this user";
    let home = Home::new();
    let emulator = refusing(403, detail);
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    std::thread::sleep(NO_MORE);
    assert_eq!(emulator.attempts().len(), ATTEMPTS);
    let stderr = shim.stderr.text();
    let line = line_quoting(&stderr, detail);
    assert!(line.contains("machine control"), "{line}");
    assert!(!line.contains("--session-id"), "{line}");
}

/// Closes the handshake of every connection with `code` and `reason` after
/// reading HELLO, for as long as the shim reconnects; returns how many
/// connections there were.
fn close_every_handshake(emulator: &Emulator, code: u16, reason: &str) -> usize {
    let mut count = 0;
    while let Some(conn) = emulator.accept(if count < ATTEMPTS { WAIT } else { NO_MORE }) {
        conn.expect_hello(WAIT);
        conn.close(code, reason).unwrap();
        conn.wait_closed(WAIT);
        count += 1;
        if count > ATTEMPTS + 2 {
            break;
        }
    }
    count
}

/// A legacy daemon whose every handshake is closed with `code` and
/// `reason`: it must connect four times and exit with `exit`, every
/// `WS_DISCONNECTED` naming the code and carrying `recorded`, the platform's
/// reason as recorded. Returns the home and the stderr line quoting it.
fn every_handshake_closed(code: u16, reason: &str, recorded: &str, exit: i32) -> (Home, String) {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    assert_eq!(close_every_handshake(&emulator, code, reason), ATTEMPTS);
    assert_eq!(shim.wait(WAIT), exit, "{}", shim.output());
    let stderr = shim.stderr.text();
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(!stderr.contains("autogpt-shim auth"), "{stderr}");
    let line = line_quoting(&stderr, recorded).to_owned();
    assert!(line.contains(&code.to_string()), "{line}");
    let details = disconnects(&home);
    assert_eq!(details.len(), ATTEMPTS, "{:?}", home.ops());
    for d in details {
        assert_eq!(d["reason"], format!("ws_closed_{code}_unknown"));
        assert_eq!(d["platform_reason"], recorded);
    }
    assert_eq!(home.ops().last().unwrap(), "SHIM_STOP");
    (home, line)
}

#[test]
fn a_4403_before_the_ack_is_tried_four_times_then_exits_77_quoting_the_reason() {
    let reason = "Machine does not match the session binding";
    let (_home, line) = every_handshake_closed(4403, reason, reason, 77);
    assert!(line.contains("pick the folder in the platform"), "{line}");
}

#[test]
fn a_4400_before_the_ack_is_tried_four_times_then_exits_78_quoting_the_reason() {
    let reason = "Invalid HELLO: display_name contains forbidden characters";
    let (_home, line) = every_handshake_closed(4400, reason, reason, 78);
    assert!(
        line.contains("check display_name, machine_id and allowed_root"),
        "{line}"
    );
}

#[test]
fn a_close_reason_with_control_characters_is_escaped_everywhere() {
    every_handshake_closed(
        4403,
        "bound\n\u{1b}[2Jelsewhere",
        "bound\\n\\u{1b}[2Jelsewhere",
        77,
    );
}

#[test]
fn a_4403_after_an_accepted_handshake_keeps_reconnecting_and_records_the_reason() {
    let reason = "Session taken over by another connection";
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    // More rounds than a refused handshake may take: each one was accepted.
    for _ in 0..ATTEMPTS + 1 {
        let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
        settle(&conn);
        conn.close(4403, reason).unwrap();
        conn.wait_closed(WAIT);
    }
    let (_conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let details = disconnects(&home);
    assert_eq!(details.len(), ATTEMPTS + 1, "{:?}", home.ops());
    for d in details {
        assert_eq!(d["reason"], "ws_closed_4403_unknown");
        assert_eq!(d["platform_reason"], reason);
    }
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn a_401_on_the_retry_still_exits_77_at_once_and_quotes_its_detail() {
    let detail = "Invalid or expired token";
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    let platform = refusing(401, detail);
    let mut shim = start_split(&home, &oauth, &platform);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    std::thread::sleep(NO_MORE);
    assert_eq!(platform.attempts().len(), 2);
    assert_eq!(oauth.requests().len(), 1);
    let stderr = shim.stderr.text();
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Authentication failed: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains(&format!("\"{detail}\"")), "{line}");
    assert!(line.contains("run autogpt-shim auth"), "{line}");
}

// ---- attempts that never became a connection ------------------------------------------

/// The `WS_DISCONNECTED` records, whole.
fn disconnect_records(home: &Home) -> Vec<Value> {
    home.records()
        .into_iter()
        .filter(|r| r["op"] == "WS_DISCONNECTED")
        .collect()
}

/// Every record is a failed attempt with `reason`: `ok: false`, no error
/// code, the attempt's duration; no `WS_CONNECTED` anywhere; the log ends
/// with `SHIM_STOP` and verifies.
fn only_failed_attempts(home: &Home, reason: &str) -> Vec<Value> {
    let ops = home.ops();
    assert!(!ops.iter().any(|op| op == "WS_CONNECTED"), "{ops:?}");
    let records = disconnect_records(home);
    assert!(!records.is_empty(), "{ops:?}");
    for record in &records {
        assert_eq!(record["details"]["reason"], reason, "{record}");
        assert_eq!(record["result"]["ok"], false, "{record}");
        assert_eq!(record["result"]["error_code"], Value::Null, "{record}");
        assert_eq!(record["result"]["exit_code"], Value::Null, "{record}");
        assert!(record["result"]["duration_ms"].is_u64(), "{record}");
    }
    let last = home.records().pop().unwrap();
    assert_eq!(last["op"], "SHIM_STOP", "{ops:?}");
    assert_eq!(last["result"]["ok"], true);
    assert_eq!(home.verify().0, 0);
    records
}

/// Lets `shim` fail at least twice, stops it and returns what it recorded.
fn fail_twice_then_stop(home: &Home, mut shim: Shim, reason: &str) -> Vec<Value> {
    assert!(
        eventually(WAIT, || disconnect_records(home).len() >= 2),
        "{}",
        shim.output()
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    only_failed_attempts(home, reason)
}

#[test]
fn a_refused_tcp_connection_is_audited_as_a_failed_attempt_not_a_disconnect() {
    let home = Home::new();
    // A port that was free a moment ago and has no listener now.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("ws://127.0.0.1:{port}");
    let shim =
        Shim::spawn(home.command(&["--platform-url", &url, "start", "--session-id", SESSION]));
    let records = fail_twice_then_stop(&home, shim, "loop_error: connect");

    // `audit show` prints the same verdict to a person reading the log.
    let seq = records[0]["seq"].as_u64().unwrap().to_string();
    let out = home.command(&["audit", "show", &seq]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("\"op\": \"WS_DISCONNECTED\""), "{shown}");
    assert!(shown.contains("\"ok\": false"), "{shown}");
    assert!(
        shown.contains("\"reason\": \"loop_error: connect\""),
        "{shown}"
    );
}

#[test]
fn a_failed_tls_handshake_is_audited_as_a_failed_attempt() {
    // The emulator's certificate is not trusted without its CA file.
    let home = Home::new();
    let emulator = emulator();
    let url = emulator.platform_url();
    let shim =
        Shim::spawn(home.command(&["--platform-url", &url, "start", "--session-id", SESSION]));
    fail_twice_then_stop(&home, shim, "loop_error: tls");
    let attempts = emulator.attempts();
    assert!(
        attempts
            .iter()
            .all(|a| matches!(a.outcome, AttemptOutcome::TlsFailed(_))),
        "{attempts:?}"
    );
}

#[test]
fn a_refused_upgrade_is_audited_as_a_failed_attempt() {
    let home = Home::new();
    let emulator = refusing(403, "Not for this machine");
    let mut shim = Shim::start(&home, &emulator, &[]);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    let records = only_failed_attempts(&home, "loop_error: http_403");
    assert_eq!(records.len(), ATTEMPTS);
}

#[test]
fn a_connection_that_opened_and_ended_keeps_the_default_result() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    settle(&conn);
    conn.close(1000, "maintenance").unwrap();
    let (_again, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let ops = home.ops();
    let connected = ops.iter().filter(|op| *op == "WS_CONNECTED").count();
    let records = disconnect_records(&home);
    assert_eq!((connected, records.len()), (2, 2), "{ops:?}");
    for record in records {
        assert_eq!(record["result"]["ok"], true, "{record}");
    }
}
