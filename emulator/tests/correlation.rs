#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Requests, responses in any order, STATUS bookkeeping and raw frames.

mod support;

use std::thread;
use std::time::Duration;

use autogpt_shim_emulator::wire::is_canonical_uuid_v4;
use autogpt_shim_emulator::{Emulator, EmulatorOptions, HelloAck, RawKind, RawMessage};
use serde_json::{Value, json};
use support::{Client, WAIT, connect_to, frame, handshake, hello, read_json, send};
use tungstenite::Message;

fn connected() -> (Emulator, Client, autogpt_shim_emulator::Conn) {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(&mut ws, &hello(&["shell", "files"], Some("/srv/root")));
    let conn = emulator.accept(WAIT).unwrap();
    (emulator, ws, conn)
}

fn status(in_flight: u64) -> Value {
    frame(
        "STATUS",
        &support::uuid(),
        json!(3),
        json!({"in_flight": in_flight, "max_concurrent": 4, "queue_depth": 0, "audit_log_bytes": 0, "uptime_seconds": 1.5}),
    )
}

#[test]
fn requests_carry_the_platform_envelope_with_a_fresh_uuid() {
    let (_emulator, mut ws, conn) = connected();
    let first = conn
        .request(
            "FILE_STAT",
            json!({"path": "/srv/root", "follow_symlinks": true}),
        )
        .unwrap();
    let second = conn.ping().unwrap();
    assert_ne!(first, second);

    let request = read_json(&mut ws);
    let keys: Vec<&str> = request
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 5, "{keys:?}");
    assert_eq!(request["type"], "FILE_STAT");
    assert_eq!(request["id"], first.as_str());
    assert!(is_canonical_uuid_v4(&first));
    assert!(request["ts"].is_f64());
    assert_eq!(request["version"], "1.1");
    assert_eq!(
        request["payload"],
        json!({"path": "/srv/root", "follow_symlinks": true})
    );

    let ping = read_json(&mut ws);
    assert_eq!(ping["type"], "PING");
    assert_eq!(ping["id"], second.as_str());
    assert_eq!(ping["payload"], json!({}));
}

#[test]
fn responses_are_matched_by_id_whatever_order_they_arrive_in() {
    let (_emulator, mut ws, conn) = connected();
    let ids: Vec<String> = (0..3)
        .map(|n| {
            conn.request("FILE_READ", json!({"path": format!("/srv/root/{n}")}))
                .unwrap()
        })
        .collect();
    for _ in 0..3 {
        read_json(&mut ws);
    }

    // Answer in reverse order with STATUS frames in between.
    send(&mut ws, &status(3));
    for (n, id) in ids.iter().enumerate().rev() {
        send(
            &mut ws,
            &frame(
                "FILE_CONTENTS",
                id,
                json!(4),
                json!({"content": n.to_string()}),
            ),
        );
        send(&mut ws, &status(n as u64));
    }

    for (n, id) in ids.iter().enumerate() {
        let response = conn.wait_response(id, WAIT).unwrap();
        assert_eq!(response["id"], id.as_str());
        assert_eq!(response["payload"]["content"], n.to_string());
    }
    // The frames skipped on the way stay queued, in arrival order.
    let rest: Vec<Value> = (0..4).map(|_| conn.recv(WAIT).unwrap()).collect();
    let in_flight: Vec<&Value> = rest
        .iter()
        .map(|frame| &frame["payload"]["in_flight"])
        .collect();
    assert_eq!(in_flight, [3, 2, 1, 0]);
    assert_eq!(conn.recv(Duration::from_millis(50)), None);
    assert_eq!(conn.statuses().len(), 4);
}

#[test]
fn chunks_share_the_id_but_are_not_the_response() {
    let (_emulator, mut ws, conn) = connected();
    let id = conn
        .request(
            "LOCAL_LLM_COMPLETION",
            json!({"model": "m", "messages": []}),
        )
        .unwrap();
    read_json(&mut ws);
    send(
        &mut ws,
        &frame(
            "LOCAL_LLM_COMPLETION_CHUNK",
            &id,
            Value::Null,
            json!({"delta": "Hi", "finish_reason": null}),
        ),
    );
    send(
        &mut ws,
        &frame(
            "LOCAL_LLM_COMPLETION_RESPONSE",
            &id,
            json!(4),
            json!({"content": "Hi"}),
        ),
    );
    let response = conn.wait_response(&id, WAIT).unwrap();
    assert_eq!(response["type"], "LOCAL_LLM_COMPLETION_RESPONSE");
    assert_eq!(
        conn.recv_type("LOCAL_LLM_COMPLETION_CHUNK", WAIT).unwrap()["payload"]["delta"],
        "Hi"
    );
}

#[test]
fn a_waiting_reader_does_not_hold_up_sends_from_another_thread() {
    let (_emulator, mut ws, conn) = connected();
    thread::scope(|scope| {
        let waiter = scope.spawn(|| conn.recv_type("PONG", WAIT));
        // While the other thread waits, requests still go out.
        let id = conn.ping().unwrap();
        let ping = read_json(&mut ws);
        assert_eq!(ping["id"], id.as_str());
        send(&mut ws, &frame("PONG", &id, Value::Null, json!({})));
        let pong = waiter.join().unwrap().unwrap();
        assert_eq!(pong["id"], id.as_str());
    });
}

#[test]
fn raw_frames_are_recorded_as_received_and_binary_json_is_parsed() {
    let (_emulator, mut ws, conn) = connected();
    let hello_count = conn.raw_frames().len();
    ws.send(Message::text("not json")).unwrap();
    ws.send(Message::binary(br#"{"type":"STATUS","id":"b"}"#.to_vec()))
        .unwrap();
    ws.send(Message::Ping(b"keepalive".to_vec().into()))
        .unwrap();

    // recv skips the text that is not JSON and parses the binary frame.
    let parsed = conn.recv(WAIT).unwrap();
    assert_eq!(parsed["id"], "b");
    let deadline = std::time::Instant::now() + WAIT;
    while conn.raw_frames().len() < hello_count + 3 && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let raw = conn.raw_frames();
    let kinds: Vec<RawKind> = raw[hello_count..].iter().map(|frame| frame.kind).collect();
    assert_eq!(kinds, [RawKind::Text, RawKind::Binary, RawKind::Ping]);
    assert_eq!(raw[hello_count].text(), Some("not json"));
    assert_eq!(raw[hello_count + 2].data, b"keepalive");
    // The library answered the ping; the test client sees the pong.
    assert_eq!(
        ws.read().unwrap(),
        Message::Pong(b"keepalive".to_vec().into())
    );
}

#[test]
fn raw_messages_reach_the_client_byte_for_byte() {
    let (_emulator, mut ws, conn) = connected();
    conn.send_raw(RawMessage::Text("{\"type\":".to_owned()))
        .unwrap();
    conn.send_raw(RawMessage::Binary(vec![0xff, 0x00])).unwrap();
    assert_eq!(ws.read().unwrap(), Message::text("{\"type\":"));
    assert_eq!(ws.read().unwrap(), Message::binary(vec![0xff, 0x00]));

    // A text frame that is not UTF-8 is a protocol violation the client's
    // WebSocket library must catch.
    conn.send_raw(RawMessage::TextBytes(vec![b'{', 0xc3, 0x28, b'}']))
        .unwrap();
    let error = ws.read().unwrap_err();
    assert!(matches!(error, tungstenite::Error::Utf8(_)), "{error:?}");
}

#[test]
fn a_websocket_ping_from_the_emulator_is_answered_by_the_client_library() {
    let (_emulator, mut ws, conn) = connected();
    conn.ws_ping(b"p1").unwrap();
    assert_eq!(ws.read().unwrap(), Message::Ping(b"p1".to_vec().into()));
    // tungstenite queues the pong and flushes it on the next write or read.
    ws.flush().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while !conn
        .raw_frames()
        .iter()
        .any(|frame| frame.kind == RawKind::Pong)
        && std::time::Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(5));
    }
    let pong = conn
        .raw_frames()
        .into_iter()
        .find(|frame| frame.kind == RawKind::Pong)
        .unwrap();
    assert_eq!(pong.data, b"p1");
}
