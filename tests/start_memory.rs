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
fn responses_nobody_reads_stop_new_work_until_the_platform_reads_again() {
    let home = Home::new();
    std::fs::write(home.root.join("big.bin"), vec![0x5a; 10 * 1024 * 1024]).unwrap();
    let emulator = emulator();
    let _shim = Shim::start(&home, &emulator, &[]);
    // One request at a time: whatever runs answers, the rest is refused,
    // and only the backlog tells the two refusals apart.
    let ack = HelloAck::new().grant(["files"]).max_concurrent(1);
    let (conn, _) = connect(&emulator, ack);
    settle(&conn);

    conn.read_slowly(16 * 1024, Duration::from_secs(2));
    let path = home.root.join("big.bin");
    let path = path.to_str().unwrap();
    let mut ids = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let request = json!({"path": path, "encoding": "base64", "format": "bytes"});
        ids.push(conn.request("FILE_READ", request).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every request has reached the daemon while nothing could be sent.
    std::thread::sleep(Duration::from_millis(500));
    conn.read_normally();

    let mut contents = 0;
    let mut refused_for_backlog = 0;
    for id in &ids {
        let reply = conn
            .wait_response(id, WAIT)
            .unwrap_or_else(|| panic!("no answer to {id}"));
        match reply["type"].as_str().unwrap() {
            "FILE_CONTENTS" => contents += 1,
            "ERROR" => {
                assert_eq!(reply["payload"]["code"], "SHIM_OVERLOADED", "{reply}");
                if reply["payload"]["message"]
                    == "The local executor has too many unread responses waiting to be sent."
                {
                    refused_for_backlog += 1;
                }
            }
            other => panic!("unexpected {other}: {reply}"),
        }
    }
    assert!(
        refused_for_backlog >= 1,
        "no request was refused for the backlog"
    );
    // One response is being written, one waits behind it: the backlog is
    // full from then on.
    assert!(
        contents <= 2,
        "{contents} of {} files were read while nobody read the responses",
        ids.len()
    );
    settle(&conn);
}

#[test]
fn one_frame_of_many_small_values_costs_a_small_multiple_of_its_size() {
    let home = Home::new();
    let emulator = emulator();
    let shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
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
