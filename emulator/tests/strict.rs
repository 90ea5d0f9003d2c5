#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The platform's rules the emulator holds a shim to, driven by a
//! handcrafted client that breaks each one on purpose: the HELLO limits and
//! close codes, correlation of every shim frame, the 4401 token expiry and
//! the resending of unanswered reads.

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;
use std::time::{Duration, Instant};

use autogpt_shim_emulator::{
    Conn, Emulator, EmulatorOptions, Ending, HelloAck, HelloError, RawMessage, Violation,
};
use serde_json::{Value, json};
use support::{Client, WAIT, connect_to, frame, handshake, hello, read_json, send};
use tungstenite::Message;

fn connected() -> (Emulator, Client, Conn) {
    connected_with(HelloAck::new())
}

/// A data connection whose automatic handshake answered with `ack`.
fn connected_with(ack: HelloAck) -> (Emulator, Client, Conn) {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(ack)).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(&mut ws, &hello(&["shell", "files"], Some("/srv/root")));
    let conn = emulator.accept(WAIT).unwrap();
    (emulator, ws, conn)
}

/// The close frame the client reads next (skipping data messages), which
/// the client answers, as a shim does.
fn close_of(ws: &mut Client) -> (u16, String) {
    loop {
        match ws.read().unwrap() {
            Message::Close(Some(close)) => {
                // The answering close frame goes out with the next flush.
                let _ = ws.flush();
                return (u16::from(close.code), close.reason.as_str().to_owned());
            }
            Message::Close(None) => panic!("a close frame without a code"),
            _ => {}
        }
    }
}

/// Sends `hello` on a fresh data connection and returns the close frame the
/// emulator answers it with, and the HELLO error the test side sees.
fn refusal_of(hello: &Value) -> (u16, String, HelloError) {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    send(&mut ws, hello);
    let (code, reason) = close_of(&mut ws);
    let error = conn.try_expect_hello(WAIT).unwrap_err();
    (code, reason, error)
}

fn response(message_type: &str, id: &str) -> Value {
    frame(message_type, id, json!(4), json!({}))
}

#[test]
fn a_hello_breaking_a_platform_limit_is_closed_with_4400_naming_the_field() {
    let cases: [(&str, Value); 7] = [
        ("machine_id", json!("my machine")),
        ("machine_id", json!("m".repeat(129))),
        ("display_name", json!("<b>laptop</b>")),
        ("display_name", json!("tab\there")),
        ("shim_version", json!(format!("1.0.0-{}", "a".repeat(60)))),
        ("allowed_root", json!("/srv/root\n")),
        ("allowed_root", json!(format!("/{}", "r".repeat(4096)))),
    ];
    for (field, value) in cases {
        let mut bad = hello(&["files"], Some("/srv/root"));
        bad["payload"][field] = value.clone();
        let (code, reason, error) = refusal_of(&bad);
        assert_eq!(code, 4400, "{field} = {value}: {reason}");
        assert!(
            reason.starts_with(&format!("Invalid HELLO: {field} is ")),
            "{field}: {reason}"
        );
        assert!(reason.len() <= 123, "{reason}");
        assert!(
            matches!(error, HelloError::Invalid { .. }),
            "{field}: {error:?}"
        );
    }
}

#[test]
fn a_data_hello_with_an_empty_root_is_closed_with_4400() {
    let (code, reason, _) = refusal_of(&hello(&["files"], Some("")));
    assert_eq!(code, 4400);
    assert!(reason.contains("allowed_root"), "{reason}");
}

#[test]
fn a_hello_within_every_limit_is_accepted() {
    let mut edge = hello(&["files"], Some("/srv/root"));
    edge["payload"]["machine_id"] = json!(format!("A1._:-{}", "m".repeat(122)));
    edge["payload"]["display_name"] = json!("é".repeat(128));
    edge["payload"]["shim_version"] = json!(format!("1.2.3-rc.1+{}", "b".repeat(53)));
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    send(&mut ws, &edge);
    assert_eq!(conn.try_expect_hello(WAIT), Ok(edge));
    conn.send_hello_ack(&HelloAck::new()).unwrap();
    assert_eq!(read_json(&mut ws)["type"], "HELLO_ACK");
}

#[test]
fn a_hello_over_64_kib_is_closed_with_4400() {
    let mut big = hello(&["files"], Some("/srv/root"));
    big["payload"]["hardware_devices"] = json!([{"name": "d".repeat(64 * 1024)}]);
    let (code, reason, error) = refusal_of(&big);
    assert_eq!(code, 4400);
    assert!(reason.contains("over the limit of 65536"), "{reason}");
    assert!(matches!(error, HelloError::TooLarge(bytes) if bytes > 65536));
}

#[test]
fn a_hello_of_another_protocol_major_is_closed_with_4426() {
    let mut future = hello(&["files"], Some("/srv/root"));
    future["payload"]["protocol_version"] = json!("2.0");
    let (code, reason, error) = refusal_of(&future);
    assert_eq!(code, 4426);
    assert_eq!(
        reason,
        "Unsupported protocol version 2.0: this platform speaks 1.1"
    );
    assert!(matches!(error, HelloError::VersionMismatch { version, .. } if version == "2.0"));
}

#[test]
fn no_hello_within_the_deadline_is_closed_with_4408() {
    let emulator =
        Emulator::start(EmulatorOptions::new().hello_deadline(Duration::from_millis(200))).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 4408);
    assert_eq!(reason, "No HELLO in time after the upgrade");
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByEmulator { code: 4408, .. })
    ));
}

#[test]
fn a_response_to_no_outstanding_request_closes_with_1008_and_is_recorded() {
    let (_emulator, mut ws, conn) = connected();
    send(&mut ws, &response("FILE_CONTENTS", "never-asked"));
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 1008);
    assert_eq!(
        reason,
        "Uncorrelated frame: FILE_CONTENTS never-asked answers no outstanding request"
    );
    assert_eq!(
        conn.wait_violation(WAIT),
        Some(Violation::Uncorrelated {
            message_type: "FILE_CONTENTS".to_owned(),
            id: Some("never-asked".to_owned())
        })
    );
}

#[test]
fn a_second_answer_to_one_request_is_uncorrelated() {
    let (_emulator, mut ws, conn) = connected();
    let id = conn
        .request("FILE_STAT", json!({"path": "/srv/root"}))
        .unwrap();
    read_json(&mut ws);
    send(&mut ws, &response("FILE_STAT_RESPONSE", &id));
    assert_eq!(conn.wait_response(&id, WAIT).unwrap()["id"], id.as_str());
    send(&mut ws, &response("FILE_STAT_RESPONSE", &id));
    assert_eq!(close_of(&mut ws).0, 1008);
    assert!(matches!(
        conn.wait_violation(WAIT),
        Some(Violation::Uncorrelated { .. })
    ));
}

#[test]
fn a_response_of_the_wrong_type_for_its_request_is_a_violation() {
    let (_emulator, mut ws, conn) = connected();
    let id = conn
        .request("FILE_READ", json!({"path": "/srv/root/a"}))
        .unwrap();
    read_json(&mut ws);
    send(&mut ws, &response("ACK", &id));
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 1008);
    assert!(
        reason.contains("ACK answers FILE_READ") && reason.contains("FILE_CONTENTS or ERROR"),
        "{reason}"
    );
    assert_eq!(
        conn.wait_violation(WAIT),
        Some(Violation::WrongType {
            id,
            request_type: "FILE_READ".to_owned(),
            message_type: "ACK".to_owned()
        })
    );
}

#[test]
fn error_answers_any_request_also_one_sent_raw() {
    let (_emulator, mut ws, conn) = connected();
    let raw = r#"{"type":"EXECUTE_COMMAND","id":"raw-1","ts":1.0,"payload":{"command":"true"}}"#;
    conn.send_raw(RawMessage::Text(raw.to_owned())).unwrap();
    // A frame of a type that is no request may still get an ERROR.
    conn.send(&json!({"type": "ACK", "id": "stray-1", "ts": 1.0, "payload": {}}))
        .unwrap();
    read_json(&mut ws);
    read_json(&mut ws);
    send(&mut ws, &response("ERROR", "raw-1"));
    send(&mut ws, &response("ERROR", "stray-1"));
    assert_eq!(conn.wait_response("raw-1", WAIT).unwrap()["type"], "ERROR");
    assert_eq!(
        conn.wait_response("stray-1", WAIT).unwrap()["type"],
        "ERROR"
    );
    assert_eq!(conn.violations(), []);
    assert_eq!(conn.ending(), None);
}

#[test]
fn a_ping_from_the_shim_is_a_violation() {
    let (_emulator, mut ws, conn) = connected();
    send(&mut ws, &frame("PING", "shim-ping", Value::Null, json!({})));
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 1008);
    assert!(reason.contains("PING from the shim"), "{reason}");
    assert_eq!(
        conn.wait_violation(WAIT),
        Some(Violation::ShimPing {
            id: Some("shim-ping".to_owned())
        })
    );
}

#[test]
fn a_status_without_an_id_is_a_violation() {
    for id in [json!(""), Value::Null] {
        let (_emulator, mut ws, conn) = connected();
        let mut status = frame(
            "STATUS",
            "",
            json!(4),
            json!({"in_flight": 0, "max_concurrent": 4}),
        );
        status["id"] = id.clone();
        send(&mut ws, &status);
        assert_eq!(close_of(&mut ws).0, 1008, "id {id}");
        assert_eq!(
            conn.wait_violation(WAIT),
            Some(Violation::StatusWithoutId),
            "id {id}"
        );
    }
}

#[test]
fn a_status_with_an_id_is_fine() {
    let (_emulator, mut ws, conn) = connected();
    let status = frame(
        "STATUS",
        &support::uuid(),
        json!(4),
        json!({"in_flight": 0}),
    );
    send(&mut ws, &status);
    assert_eq!(conn.recv(WAIT).unwrap()["type"], "STATUS");
    assert_eq!(conn.violations(), []);
    assert_eq!(conn.ending(), None);
}

#[test]
fn an_untaken_violation_fails_the_test_when_the_conn_is_dropped() {
    let (_emulator, mut ws, conn) = connected();
    send(&mut ws, &response("PONG", "no-such-ping"));
    close_of(&mut ws);
    conn.wait_closed(WAIT).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(move || drop(conn)));
    let message = outcome.unwrap_err();
    let text = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        text.contains("broke the platform's rules")
            && text.contains("PONG no-such-ping answers no outstanding request"),
        "{text}"
    );
}

#[test]
fn allowed_violations_do_not_fail_the_drop() {
    let (_emulator, mut ws, conn) = connected();
    conn.allow_violations();
    send(&mut ws, &response("PONG", "no-such-ping"));
    close_of(&mut ws);
    conn.wait_closed(WAIT).unwrap();
    assert_eq!(conn.violations().len(), 1);
    drop(conn);
}

/// The panic message of `action`, which must panic.
fn panic_text(action: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(action)).unwrap_err();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| {
            payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
        })
        .unwrap_or_default()
}

#[test]
fn an_answer_later_than_the_acks_command_timeout_is_a_violation() {
    let (_emulator, mut ws, conn) = connected_with(HelloAck::new().command_timeout_seconds(1));
    let id = conn
        .request("FILE_STAT", json!({"path": "/srv/root"}))
        .unwrap();
    read_json(&mut ws);
    thread::sleep(Duration::from_millis(1300));
    send(&mut ws, &response("FILE_STAT_RESPONSE", &id));
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 1008);
    assert!(reason.contains("past the platform's 1 s wait"), "{reason}");
    match conn.wait_violation(WAIT) {
        Some(Violation::Late {
            id: late,
            after,
            limit,
        }) => {
            assert_eq!(late, id);
            assert_eq!(limit, Duration::from_secs(1));
            assert!(after >= Duration::from_millis(1300), "{after:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_answer_within_the_acks_command_timeout_and_a_late_status_are_fine() {
    let (_emulator, mut ws, conn) = connected_with(HelloAck::new().command_timeout_seconds(1));
    let id = conn
        .request("FILE_STAT", json!({"path": "/srv/root"}))
        .unwrap();
    read_json(&mut ws);
    thread::sleep(Duration::from_millis(400));
    send(&mut ws, &response("FILE_STAT_RESPONSE", &id));
    assert!(conn.wait_response(&id, WAIT).is_some());
    // A STATUS answers nothing, so it is never late, however long after
    // the ack it comes.
    thread::sleep(Duration::from_millis(1000));
    send(
        &mut ws,
        &frame("STATUS", &support::uuid(), json!(4), json!({})),
    );
    assert_eq!(conn.recv(WAIT).unwrap()["type"], "STATUS");
    assert_eq!(conn.violations(), []);
    assert_eq!(conn.ending(), None);
}

#[test]
fn allowing_late_answers_excuses_only_late_answers() {
    let (_emulator, mut ws, conn) = connected_with(HelloAck::new().command_timeout_seconds(1));
    conn.allow_late_answers();
    let id = conn
        .request("FILE_STAT", json!({"path": "/srv/root"}))
        .unwrap();
    read_json(&mut ws);
    thread::sleep(Duration::from_millis(1100));
    send(&mut ws, &response("FILE_STAT_RESPONSE", &id));
    close_of(&mut ws);
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByEmulator { code: 1008, .. })
    ));
    assert_eq!(conn.violations().len(), 1);
    drop(conn);

    let (_emulator, mut ws, conn) = connected();
    conn.allow_late_answers();
    send(&mut ws, &response("PONG", "no-such-ping"));
    close_of(&mut ws);
    conn.wait_closed(WAIT).unwrap();
    let text = panic_text(move || drop(conn));
    assert!(text.contains("PONG no-such-ping"), "{text}");
}

#[test]
fn a_violation_on_a_connection_never_accepted_fails_when_the_emulator_is_dropped() {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let mut watched_ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(&mut watched_ws, &hello(&["files"], Some("/srv/root")));
    let watched = emulator.accept(WAIT).unwrap();
    send(&mut watched_ws, &response("PONG", "watched-ping"));
    close_of(&mut watched_ws);
    // A reconnect the test does not watch.
    let mut unwatched_ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(&mut unwatched_ws, &hello(&["files"], Some("/srv/root")));
    send(&mut unwatched_ws, &response("PONG", "unwatched-ping"));
    close_of(&mut unwatched_ws);

    let text = panic_text(move || drop(emulator));
    assert!(
        text.contains("never accepted")
            && text.contains("connection 2 ")
            && text.contains("PONG unwatched-ping answers no outstanding request"),
        "{text}"
    );
    // The connection the test accepted is judged by its own drop, once.
    assert!(!text.contains("PONG watched-ping"), "{text}");
    let text = panic_text(move || drop(watched));
    assert!(text.contains("PONG watched-ping"), "{text}");
}

#[test]
fn dropping_the_emulator_does_not_wait_for_a_hello_that_never_comes() {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let _silent_ws = connect_to(&emulator, &emulator.data_url("s1"));
    emulator.wait_attempts(1, WAIT);
    let started = Instant::now();
    drop(emulator);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn expire_token_closes_with_4401_and_the_platform_reason() {
    let (_emulator, mut ws, conn) = connected();
    conn.expire_token().unwrap();
    assert_eq!(close_of(&mut ws), (4401, "Access token expired".to_owned()));
    // No SESSION_REVOKED came before the close.
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByEmulator { code: 4401, .. })
    ));
}

#[test]
fn unanswered_reads_are_resent_with_their_ids_on_the_next_connection_to_the_path() {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let mut first_ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(
        &mut first_ws,
        &hello(&["shell", "files"], Some("/srv/root")),
    );
    let first = emulator.accept(WAIT).unwrap();
    let read = first
        .request("FILE_READ", json!({"path": "/srv/root/a"}))
        .unwrap();
    let stat = first
        .request("FILE_STAT", json!({"path": "/srv/root"}))
        .unwrap();
    let command = first
        .request("EXECUTE_COMMAND", json!({"command": "true"}))
        .unwrap();
    let list = first
        .request("FILE_LIST", json!({"path": "/srv/root"}))
        .unwrap();
    let screenshot = first.request("SCREENSHOT_REQUEST", json!({})).unwrap();
    for _ in 0..5 {
        read_json(&mut first_ws);
    }
    send(&mut first_ws, &response("FILE_STAT_RESPONSE", &stat));
    assert!(first.wait_response(&stat, WAIT).is_some());
    first.drop_tcp().unwrap();
    first.wait_closed(WAIT).unwrap();

    // Another session's connection gets none of them.
    let mut other_ws = connect_to(&emulator, &emulator.data_url("s2"));
    handshake(&mut other_ws, &hello(&["files"], Some("/srv/other")));
    let other = emulator.accept(WAIT).unwrap();
    assert_eq!(
        other.resend_unanswered_reads().unwrap(),
        Vec::<String>::new()
    );

    let mut second_ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(
        &mut second_ws,
        &hello(&["shell", "files"], Some("/srv/root")),
    );
    let second = emulator.accept(WAIT).unwrap();
    let resent = second.resend_unanswered_reads().unwrap();
    assert_eq!(resent, [read.clone(), list.clone(), screenshot.clone()]);
    assert!(!resent.contains(&command), "a command is never resent");
    let types: Vec<Value> = (0..3)
        .map(|_| {
            let request = read_json(&mut second_ws);
            assert!(resent.iter().any(|id| request["id"] == id.as_str()));
            request["type"].clone()
        })
        .collect();
    assert_eq!(types, ["FILE_READ", "FILE_LIST", "SCREENSHOT_REQUEST"]);
    // The resent reads are outstanding on the new connection: their
    // answers correlate.
    send(&mut second_ws, &response("FILE_CONTENTS", &read));
    send(&mut second_ws, &response("FILE_LIST_RESPONSE", &list));
    send(&mut second_ws, &response("ERROR", &screenshot));
    for id in &resent {
        assert!(second.wait_response(id, WAIT).is_some(), "{id}");
    }
    assert_eq!(second.violations(), []);
    // Each is resent once.
    assert_eq!(
        second.resend_unanswered_reads().unwrap(),
        Vec::<String>::new()
    );
}
