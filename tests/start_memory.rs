//! The daemon's memory stays bounded whatever the platform sends or how
//! slowly it reads: the real binary, driven through the platform emulator,
//! with its peak resident set (`VmHWM`) read from `/proc` before and after.
//! The bounds are generous multiples of what the daemon needs, far below
//! what an unbounded outbound queue or a generic JSON tree would cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Conn, Emulator, HelloAck, RawMessage};
use serde_json::{Value, json};
use start_support::*;

const MIB: u64 = 1024 * 1024;

/// A shim serving `files` with a 10 MiB file in its root, connected with
/// `ack` and quiet; also the request that reads the file as base64.
fn serving_a_big_file(home: &Home, emulator: &Emulator, ack: HelloAck) -> (Shim, Conn, Value) {
    let path = home.root.join("big.bin");
    std::fs::write(&path, vec![0x5a; 10 * 1024 * 1024]).unwrap();
    let shim = Shim::start(home, emulator, &[]);
    let (conn, _) = connect(emulator, ack.grant(["files"]));
    settle(&conn);
    let read = json!({"path": path.to_str().unwrap(), "encoding": "base64", "format": "bytes"});
    (shim, conn, read)
}

#[test]
fn a_platform_reading_slowly_cannot_make_the_daemon_buffer_its_responses() {
    let (home, emulator) = (Home::new(), emulator());
    let (shim, conn, read) = serving_a_big_file(&home, &emulator, HelloAck::new());
    let idle = peak_baseline(shim.pid());

    // 16 KiB every 2 s is well inside the write-stall timeout: the
    // connection stays up while every response waits for the platform.
    conn.read_slowly(16 * 1024, Duration::from_secs(2));
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        conn.request("FILE_READ", read.clone()).unwrap();
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
    let (home, emulator) = (Home::new(), emulator());
    // One request at a time: whatever runs answers, the rest is refused,
    // and only the backlog tells the two refusals apart.
    let ack = HelloAck::new().max_concurrent(1);
    let (_shim, conn, read) = serving_a_big_file(&home, &emulator, ack);

    conn.read_slowly(16 * 1024, Duration::from_secs(2));
    let mut ids = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        ids.push(conn.request("FILE_READ", read.clone()).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Only the requests that ran are audited. One response is being
    // written, one waits behind it: the backlog is full from then on.
    std::thread::sleep(Duration::from_millis(500));
    let read = home.ops().iter().filter(|op| *op == "FILE_READ").count();
    assert!(
        (1..=2).contains(&read),
        "{read} of {} files were read while nobody read the responses",
        ids.len()
    );

    conn.read_normally();

    let mut refused_for_backlog = 0;
    for id in &ids {
        let reply = conn
            .wait_response(id, WAIT)
            .unwrap_or_else(|| panic!("no answer to {id}"));
        match reply["type"].as_str().unwrap() {
            "FILE_CONTENTS" => {}
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

/// A platform that stops reading while it keeps sending requests: once the
/// daemon cannot queue even a refusal, it must end the connection (and
/// connect again) rather than stay up and leave requests unanswered.
#[test]
fn a_platform_that_stops_reading_gets_every_answer_or_loses_the_connection() {
    let (home, emulator) = (Home::new(), emulator());
    let (mut shim, conn, read) = serving_a_big_file(&home, &emulator, HelloAck::new());

    // Slow enough that the responses wait, fast enough that the write
    // never stalls: only the daemon can end this connection.
    conn.read_slowly(16 * 1024, Duration::from_secs(2));
    for _ in 0..2 {
        conn.request("FILE_READ", read.clone()).unwrap();
    }
    assert!(eventually(WAIT, || home
        .ops()
        .iter()
        .filter(|op| *op == "FILE_READ")
        .count()
        == 2));
    // Every request from here on is refused by the reader itself, far
    // more of them than its queue holds. A send that fails means the daemon
    // has already given the connection up, which is one of the two outcomes
    // allowed: the reconnect below shows it.
    let ids: Vec<String> = (0..1000)
        .map_while(|_| conn.request("FILE_STAT", json!({"path": "big.bin"})).ok())
        .collect();

    if let Some(next) = emulator.accept(Duration::from_secs(10)) {
        // The connection was given up and the daemon connected again.
        next.expect_hello(WAIT);
    } else {
        conn.read_normally();
        let deadline = Instant::now() + Duration::from_secs(10);
        let unanswered = ids
            .iter()
            .filter(|id| {
                let left = deadline.saturating_duration_since(Instant::now());
                conn.wait_response(id, left).is_none()
            })
            .count();
        assert_eq!(
            unanswered,
            0,
            "the connection stayed up with {unanswered} of {} requests unanswered",
            ids.len()
        );
    }
    shim.signal(rustix::process::Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
}
