#![allow(clippy::unwrap_used, clippy::expect_used)]

//! HELLO → HELLO_ACK through the emulator, against a real TLS client.

mod support;

use autogpt_shim_emulator::{
    ConnKind, Emulator, EmulatorOptions, HelloAck, HelloError, RawMessage,
};
use serde_json::{Value, json};
use support::{WAIT, connect_to, handshake, hello, read_json, send};
use tungstenite::Message;

#[test]
fn auto_handshake_acks_a_data_hello_with_the_path_session_and_spec_defaults() {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("team:alpha"));
    let sent = hello(&["shell", "files"], Some("/home/alice/projects/site"));
    let ack = handshake(&mut ws, &sent);

    assert_eq!(ack["type"], "HELLO_ACK");
    assert_eq!(ack["id"], sent["id"]);
    assert_eq!(ack["version"], "1.1");
    assert!(ack["ts"].is_f64());
    assert_eq!(
        ack["payload"],
        json!({
            "session_id": "team:alpha",
            "connection_id": null,
            "protocol_version": "1.1",
            "granted_capabilities": ["shell", "files"],
            "max_file_size_bytes": 10485760,
            "command_timeout_seconds": 30,
            "max_concurrent": 4
        })
    );

    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(conn.path(), "/ws/local-executor/team%3Aalpha");
    assert_eq!(
        conn.kind(),
        &ConnKind::Data {
            session_id: "team:alpha".to_owned()
        }
    );
    assert_eq!(conn.authorization(), Some("Bearer test-token"));
    assert_eq!(conn.hello(), Some(sent));
    assert_eq!(conn.auto_handshake_error(), None);
}

#[test]
fn manual_handshake_on_the_control_path_sends_a_connection_id_and_null_session() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.ws_url());
    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(conn.kind(), &ConnKind::Control);

    let sent = hello(&["files", "directory_browse"], None);
    send(&mut ws, &sent);
    assert_eq!(conn.expect_hello(WAIT), sent);
    let frame = conn.send_hello_ack(&HelloAck::new()).unwrap();
    let ack = read_json(&mut ws);
    assert_eq!(ack, frame);
    assert_eq!(ack["payload"]["session_id"], Value::Null);
    assert_eq!(
        ack["payload"]["connection_id"],
        format!("conn-{}", conn.serial())
    );
    assert_eq!(
        ack["payload"]["granted_capabilities"],
        json!(["files", "directory_browse"])
    );
}

#[test]
fn an_invalid_hello_is_refused_with_every_problem_named() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();

    let mut bad = hello(&["files", "directory_browse"], Some("relative/root"));
    bad["ts"] = json!(1712345678);
    bad["payload"]["unexpected"] = json!(true);
    send(&mut ws, &bad);
    let Err(HelloError::Invalid { frame, problems }) = conn.try_expect_hello(WAIT) else {
        panic!("the HELLO was accepted");
    };
    assert_eq!(frame, bad);
    let all = problems.join("\n");
    assert_eq!(problems.len(), 4, "{all}");
    assert!(all.contains("ts is 1712345678"), "{all}");
    assert!(all.contains("\"unexpected\""), "{all}");
    assert!(all.contains("allowed_root"), "{all}");
    assert!(all.contains("directory_browse"), "{all}");
    assert_eq!(conn.hello(), None);
}

#[test]
fn a_first_frame_that_is_not_json_fails_the_hello_and_is_closed_with_4400() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    ws.send(Message::text("HELLO?")).unwrap();
    assert_eq!(
        conn.try_expect_hello(WAIT),
        Err(HelloError::NotJson("HELLO?".to_owned()))
    );
    let Message::Close(Some(close)) = ws.read().unwrap() else {
        panic!("no close frame after a first frame that is not JSON");
    };
    assert_eq!(u16::from(close.code), 4400);
    assert_eq!(
        close.reason.as_str(),
        "Invalid HELLO: the first message is not a JSON object"
    );
}

#[test]
fn a_hello_that_never_comes_times_out_and_a_closed_connection_is_reported() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(
        conn.try_expect_hello(std::time::Duration::from_millis(50)),
        Err(HelloError::Timeout)
    );
    ws.close(None).unwrap();
    assert_eq!(conn.try_expect_hello(WAIT), Err(HelloError::Disconnected));
}

#[test]
fn ack_knobs_put_invalid_acks_on_the_wire() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    let sent = hello(&["files"], Some("/srv/root"));
    send(&mut ws, &sent);
    conn.expect_hello(WAIT);

    let ack = HelloAck::new()
        .ack_id("not-the-hello-id")
        .session_id("someone-else")
        .protocol_version("2.0")
        .grant(["files", "shell"])
        .omit_payload_field("max_concurrent");
    conn.send_hello_ack(&ack).unwrap();
    let received = read_json(&mut ws);
    assert_eq!(received["id"], "not-the-hello-id");
    assert_eq!(received["payload"]["session_id"], "someone-else");
    assert_eq!(received["payload"]["protocol_version"], "2.0");
    assert_eq!(
        received["payload"]["granted_capabilities"],
        json!(["files", "shell"])
    );
    assert!(received["payload"].get("max_concurrent").is_none());

    // A second, structurally broken ack on the same connection.
    conn.send_hello_ack(&HelloAck::new().max_concurrent(0).omit_envelope_field("ts"))
        .unwrap();
    let received = read_json(&mut ws);
    assert_eq!(received["id"], sent["id"]);
    assert_eq!(received["payload"]["max_concurrent"], 0);
    assert!(received.get("ts").is_none());
}

#[test]
fn a_failed_auto_handshake_is_refused_with_4400_and_the_conn_still_handed_over() {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let mut bad = hello(&["files"], Some("/srv/root"));
    bad["payload"]["recording_routes"] = json!(["local_vlm"]);
    send(&mut ws, &bad);
    let conn = emulator.accept(WAIT).unwrap();
    let Some(HelloError::Invalid { problems, .. }) = conn.auto_handshake_error() else {
        panic!("the automatic handshake accepted a bad HELLO");
    };
    assert_eq!(
        problems,
        vec!["recording_routes is [\"local_vlm\"], expected []"]
    );
    // No ack was sent: the platform closes with 4400 and says why.
    let Message::Close(Some(close)) = ws.read().unwrap() else {
        panic!("no close frame after the invalid HELLO");
    };
    assert_eq!(u16::from(close.code), 4400);
    assert_eq!(
        close.reason.as_str(),
        "Invalid HELLO: recording_routes is [\"local_vlm\"], expected []"
    );
    assert!(conn.send_raw(RawMessage::Text("after".to_owned())).is_err());
}

#[test]
fn the_automatic_ack_can_be_changed_between_connections() {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    emulator.set_auto_handshake(Some(HelloAck::new().session_id("wrong")));
    let mut first = connect_to(&emulator, &emulator.data_url("s1"));
    let ack = handshake(&mut first, &hello(&["files"], Some("/r")));
    assert_eq!(ack["payload"]["session_id"], "wrong");

    emulator.set_auto_handshake(None);
    let mut second = connect_to(&emulator, &emulator.data_url("s1"));
    send(&mut second, &hello(&["files"], Some("/r")));
    let _first_conn = emulator.accept(WAIT).unwrap();
    let second_conn = emulator.accept(WAIT).unwrap();
    // Without the automatic handshake the HELLO waits for the test.
    assert_eq!(second_conn.recv(WAIT).unwrap()["type"], "HELLO");
}
