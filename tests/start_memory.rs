//! The daemon's memory stays bounded whatever the platform sends or how
//! slowly it reads: the real binary, driven through the platform emulator,
//! with its peak resident set (`VmHWM`) read from `/proc` before and after.
//! The bounds are generous multiples of what the daemon needs, far below
//! what an unbounded outbound queue or a generic JSON tree would cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use autogpt_shim_emulator::{Conn, HelloAck, RawMessage};

use start_support::*;

const MIB: u64 = 1024 * 1024;

/// The largest WebSocket message (PROTOCOL.md §1.4).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The daemon's peak resident set so far, in bytes.
fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// A round trip, so everything sent before it has been read.
fn settle(conn: &Conn) {
    let id = conn.ping().unwrap();
    assert!(conn.wait_response(&id, WAIT).is_some(), "no PONG");
}

#[test]
fn one_frame_of_many_small_values_costs_a_small_multiple_of_its_size() {
    let home = Home::new();
    let (shim, conn) = {
        let emulator = emulator();
        let shim = Shim::start(&home, &emulator, &[]);
        let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
        (shim, conn)
    };
    settle(&conn);
    let idle = peak_rss(shim.pid());

    let head = r#"{"type":"FILE_STAT","id":"zeros","ts":1.0,"payload":{"path":["#;
    let tail = "0]}}";
    let mut frame = String::with_capacity(MAX_MESSAGE);
    frame.push_str(head);
    while frame.len() + 2 + tail.len() <= MAX_MESSAGE {
        frame.push_str("0,");
    }
    frame.push_str(tail);
    assert!(frame.len() <= MAX_MESSAGE);
    conn.send_raw(RawMessage::Text(frame)).unwrap();
    settle(&conn);

    let grown = peak_rss(shim.pid()).saturating_sub(idle);
    assert!(
        grown < 4 * MAX_MESSAGE as u64,
        "one {} MiB frame grew the daemon by {} MiB\n{}",
        MAX_MESSAGE as u64 / MIB,
        grown / MIB,
        shim.output()
    );
}
