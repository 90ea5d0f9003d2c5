//! A connection that is dead is noticed: the real binary pings at the
//! WebSocket level 20 s after connecting, leaves a platform that answers
//! nothing (no pong, no frame) 10 s later with `WS_DISCONNECTED`
//! `keepalive_timeout` and connects again, but keeps a slow one that is
//! still taking a large response; a name resolution that never answers is
//! given up within the opening timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Conn, HelloAck, RawKind};
use serde_json::{Value, json};
use start_support::*;

/// `WS_DISCONNECTED` records' reasons, in order.
fn disconnect_reasons(home: &Home) -> Vec<Value> {
    home.records()
        .into_iter()
        .filter(|r| r["op"] == "WS_DISCONNECTED")
        .map(|r| r["details"]["reason"].clone())
        .collect()
}

/// Waits for a WebSocket ping from the shim to reach the platform.
fn assert_a_ws_ping_arrives(conn: &Conn) {
    assert!(
        eventually(WAIT, || conn
            .raw_frames()
            .iter()
            .any(|f| f.kind == RawKind::Ping)),
        "no WebSocket ping reached the platform"
    );
}

#[test]
fn a_platform_that_answers_no_ping_is_left_and_connected_to_again() {
    let home = Home::new();
    let emulator = emulator();
    let _shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    settle(&conn);
    // From now on the platform reads nothing, so it answers no ping and
    // the shim hears nothing at all.
    conn.read_slowly(0, Duration::from_secs(3600));
    let silent = Instant::now();

    let again = emulator
        .accept(Duration::from_secs(45))
        .expect("the shim did not connect again");
    let after = silent.elapsed();
    // The ping 20 s after connecting, its pong overdue 10 s later.
    assert!(
        after >= Duration::from_secs(29) && after < Duration::from_secs(33),
        "reconnected {after:?} after the platform fell silent"
    );
    assert_eq!(
        disconnect_reasons(&home),
        [json!("keepalive_timeout")],
        "{:?}",
        home.records()
    );

    // What the shim sent into the silence: one WebSocket ping, and never
    // an application-level PING.
    conn.read_normally();
    assert_a_ws_ping_arrives(&conn);
    assert!(
        conn.raw_frames()
            .iter()
            .filter_map(|f| f.text())
            .all(|t| !t.contains(r#""type":"PING""#)),
        "the shim sent a protocol PING"
    );

    // The new connection serves.
    again.expect_hello(WAIT);
    again
        .send_hello_ack(&HelloAck::new().session_id(SESSION).grant(["files"]))
        .unwrap();
    let (_, stat) = call(&again, "FILE_STAT", json!({"path": "."}));
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
}

#[test]
fn a_response_still_moving_past_the_pong_timeout_keeps_the_connection() {
    let home = Home::new();
    // Just under the 10 MiB file limit, as base64: a FILE_CONTENTS of
    // about 14 MiB.
    let contents = vec![0x5a_u8; 10 * 1024 * 1024 - 4096];
    std::fs::write(home.root.join("big.bin"), &contents).unwrap();
    let emulator = emulator();
    let _shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let connected = Instant::now();
    settle(&conn);
    // The platform takes the response slowly but steadily (about 22 s for
    // all of it), so it is still moving when the ping falls due 20 s after
    // connecting, and for more than the 10 s the pong may take after that:
    // the ping, and so its pong, can only follow it.
    std::thread::sleep(Duration::from_secs(12).saturating_sub(connected.elapsed()));
    conn.read_slowly(64 * 1024, Duration::from_millis(100));
    let id = conn
        .request(
            "FILE_READ",
            json!({"path": "big.bin", "encoding": "base64"}),
        )
        .unwrap();
    let response = conn
        .wait_response(&id, Duration::from_secs(60))
        .expect("the response never arrived");
    let took = connected.elapsed();
    assert_eq!(response["type"], "FILE_CONTENTS", "{}", response["type"]);
    assert_eq!(
        response["payload"]["content"].as_str().map(str::len),
        Some(contents.len().div_ceil(3) * 4)
    );
    assert!(
        took >= Duration::from_secs(32),
        "the response arrived {took:?} after connecting: too fast to span the pong timeout"
    );
    conn.read_normally();
    // The ping went out behind the response and was answered; the
    // connection is the same one, and it still serves.
    assert!(
        disconnect_reasons(&home).is_empty(),
        "{:?}",
        disconnect_reasons(&home)
    );
    assert_a_ws_ping_arrives(&conn);
    let (_, stat) = call(&conn, "FILE_STAT", json!({"path": "."}));
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    assert!(emulator.accept(Duration::from_millis(200)).is_none());
}

/// Runs `command` (the shim) in a private mount namespace whose
/// `/etc/resolv.conf` is `resolv_conf`.
fn with_resolv_conf(resolv_conf: &std::path::Path, command: &Command) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped
        .env_clear()
        .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
        .arg(resolv_conf)
        .arg(command.get_program())
        .args(command.get_args());
    wrapped
}

#[test]
fn a_name_resolution_that_never_answers_is_given_up_within_the_opening_timeout() {
    if !runs_as_root("a_name_resolution_that_never_answers_is_given_up_within_the_opening_timeout")
    {
        return;
    }
    // The name server the shim is pointed at: it takes the query and never
    // answers.
    let Ok(server) = UdpSocket::bind("127.0.0.1:53") else {
        println!("skipped: 127.0.0.1:53 is in use");
        return;
    };
    let home = Home::new();
    let resolv_conf = home.path().join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        "nameserver 127.0.0.1\noptions timeout:30 attempts:1\n",
    )
    .unwrap();
    let shim_command = home.command(&[
        "--platform-url",
        "https://platform.unanswered.test",
        "start",
        "--session-id",
        SESSION,
    ]);
    let started = Instant::now();
    let shim = Shim::spawn(with_resolv_conf(&resolv_conf, &shim_command));

    server
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut query = [0u8; 512];
    assert!(
        server.recv_from(&mut query).is_ok(),
        "the shim asked no name server: {}",
        shim.output()
    );
    let given_up = "cannot connect: timed out during name resolution";
    assert!(
        eventually(Duration::from_secs(15), || shim
            .stderr
            .text()
            .contains(given_up)),
        "{}",
        shim.output()
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(12), "gave up after {took:?}");
    assert!(
        eventually(WAIT, || disconnect_reasons(&home)
            .first()
            .is_some_and(|r| r == "loop_error: timeout_resolve")),
        "{:?}",
        home.records()
    );
}
