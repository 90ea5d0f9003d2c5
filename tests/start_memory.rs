//! The daemon's memory stays bounded whatever the platform sends or how
//! slowly it reads: the real binary, driven through the platform emulator,
//! with its peak resident set (`VmHWM`) read from `/proc` before and after.
//! The bounds are generous multiples of what the daemon needs, far below
//! what an unbounded outbound queue or a generic JSON tree would cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::{HelloAck, RawMessage};
use serde_json::json;
use start_support::*;

const MIB: u64 = 1024 * 1024;

#[test]
fn a_platform_reading_slowly_cannot_make_the_daemon_buffer_its_responses() {
    let home = Home::new();
    std::fs::write(home.root.join("big.bin"), vec![0x5a; 10 * 1024 * 1024]).unwrap();
    let emulator = emulator();
    let shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    settle(&conn);
    let idle = peak_baseline(shim.pid());

    // 16 KiB every 2 s is well inside the write-stall timeout: the
    // connection stays up while every response waits for the platform.
    conn.read_slowly(16 * 1024, Duration::from_secs(2));
    let path = home.root.join("big.bin");
    let path = path.to_str().unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        conn.request(
            "FILE_READ",
            json!({"path": path, "encoding": "base64", "format": "bytes"}),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let grown = peak_rss(shim.pid()).saturating_sub(idle);
    assert!(
        grown < 192 * MIB,
        "the daemon grew by {} MiB while the platform read slowly\n{}",
        grown / MIB,
        shim.output()
    );
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
    let idle = peak_baseline(shim.pid());

    let frame = frame_of_zeros();
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
