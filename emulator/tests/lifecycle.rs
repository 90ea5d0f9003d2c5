#![allow(clippy::unwrap_used, clippy::expect_used)]

//! How connections end: close codes both ways, abrupt drops both ways.

mod support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Emulator, EmulatorOptions, Ending, HelloAck};
use support::{Client, WAIT, connect_to, handshake, hello};
use tungstenite::Message;
use tungstenite::protocol::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;

fn connected() -> (Emulator, Client, autogpt_shim_emulator::Conn) {
    let emulator = Emulator::start(EmulatorOptions::new().auto_handshake(HelloAck::new())).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    handshake(&mut ws, &hello(&["files"], Some("/srv/root")));
    let conn = emulator.accept(WAIT).unwrap();
    (emulator, ws, conn)
}

/// Reads until the connection ends; returns the close frame seen, if any,
/// and the error that ended reading.
fn read_to_end(ws: &mut Client) -> (Option<Option<CloseFrame>>, tungstenite::Error) {
    let mut close = None;
    loop {
        match ws.read() {
            Ok(Message::Close(frame)) => close = Some(frame),
            Ok(_) => {}
            Err(error) => return (close, error),
        }
    }
}

#[test]
fn drop_tcp_ends_the_connection_without_a_close_frame() {
    let (_emulator, mut ws, conn) = connected();
    conn.drop_tcp().unwrap();
    let (close, error) = read_to_end(&mut ws);
    assert_eq!(close, None, "a close frame arrived");
    assert!(
        !matches!(error, tungstenite::Error::ConnectionClosed),
        "the client saw an orderly close: {error:?}"
    );
    assert_eq!(conn.wait_closed(WAIT), Some(Ending::DroppedByEmulator));
    // Nothing can be sent any more.
    assert_eq!(
        conn.ping().unwrap_err().kind(),
        std::io::ErrorKind::NotConnected
    );
}

#[test]
fn the_emulators_close_code_and_reason_reach_the_client() {
    let (_emulator, mut ws, conn) = connected();
    conn.close(4428, "session_revoked").unwrap();
    let (close, error) = read_to_end(&mut ws);
    let frame = close.unwrap().unwrap();
    assert_eq!(u16::from(frame.code), 4428);
    assert_eq!(frame.reason.as_str(), "session_revoked");
    assert!(
        matches!(error, tungstenite::Error::ConnectionClosed),
        "{error:?}"
    );
    assert_eq!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByEmulator {
            code: 4428,
            reason: "session_revoked".to_owned(),
            reply_code: Some(4428),
            answered: true,
        })
    );
}

#[test]
fn every_terminal_close_code_is_delivered() {
    for code in [4426, 4427, 4429, 1000, 1001, 4401] {
        let (_emulator, mut ws, conn) = connected();
        conn.close(code, "").unwrap();
        let (close, _) = read_to_end(&mut ws);
        assert_eq!(
            close.unwrap().map(|frame| u16::from(frame.code)),
            Some(code)
        );
        assert!(conn.wait_closed(WAIT).is_some());
    }
}

#[test]
fn the_shims_close_code_and_reason_are_reported() {
    let (_emulator, mut ws, conn) = connected();
    let reason = r#"{"error":"PROTOCOL_VERSION_MISMATCH","shim_max":"1.1","platform_max":"2.0","hint":"upgrade the older side"}"#;
    ws.close(Some(CloseFrame {
        code: CloseCode::from(4426),
        reason: reason.into(),
    }))
    .unwrap();
    let (close, _) = read_to_end(&mut ws);
    // The emulator echoes the code, as RFC 6455 asks.
    assert_eq!(
        close.unwrap().map(|frame| u16::from(frame.code)),
        Some(4426)
    );
    let ending = conn.wait_closed(WAIT).unwrap();
    assert_eq!(
        ending,
        Ending::ClosedByShim {
            code: Some(4426),
            reason: reason.to_owned(),
        }
    );
    assert_eq!(ending.shim_close_code(), Some(4426));
}

#[test]
fn a_client_that_vanishes_is_reported_as_dropped() {
    let (_emulator, ws, conn) = connected();
    ws.get_ref()
        .tcp()
        .shutdown(std::net::Shutdown::Both)
        .unwrap();
    drop(ws);
    let ending = conn.wait_closed(WAIT).unwrap();
    assert!(matches!(ending, Ending::Dropped { .. }), "{ending:?}");
    assert_eq!(ending.shim_close_code(), None);
}

#[test]
fn recv_returns_early_once_the_connection_has_ended() {
    let (_emulator, mut ws, conn) = connected();
    support::send(
        &mut ws,
        &support::frame("STATUS", "x", serde_json::json!(1), serde_json::json!({})),
    );
    ws.close(None).unwrap();
    // The frame sent before the close is still delivered…
    assert_eq!(conn.recv(WAIT).unwrap()["id"], "x");
    // …and afterwards there is no waiting out the timeout.
    conn.wait_closed(WAIT).unwrap();
    let started = Instant::now();
    assert_eq!(conn.recv(Duration::from_secs(30)), None);
    assert_eq!(conn.wait_response("y", Duration::from_secs(30)), None);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn dropping_the_conn_drops_the_connection() {
    let (_emulator, mut ws, conn) = connected();
    drop(conn);
    let (close, _) = read_to_end(&mut ws);
    assert_eq!(close, None);
}

#[test]
fn dropping_the_emulator_stops_accepting() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let addr = emulator.local_addr();
    drop(emulator);
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}
