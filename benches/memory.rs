//! The daemon's memory under a hostile platform: this build's release
//! binary, driven through the platform emulator over TLS on loopback, with
//! the peak resident set (`VmHWM` from `/proc/<pid>/status`) of each
//! scenario beside the idle baseline of the same process, measured in the
//! same run:
//!
//! 1. slow reader, one connection: `start --session-id`; the platform reads
//!    16 KiB every 2 s (inside the write-stall timeout, so the connection
//!    stays up) while it sends a `FILE_READ` of a 10 MiB file every 50 ms;
//! 2. slow reader, eight child runtimes: machine-control mode with eight
//!    activated chats, each platform connection doing the same;
//! 3. one 16 MiB frame of `[0,0,0,…]` on an otherwise idle connection.
//!
//! The idle baseline is taken once connected (all eight children in 2) and
//! after a `PING` round trip on every connection: the peak is reset there
//! to the resident set (`/proc/<pid>/clear_refs`), so the start-up peak of
//! the token file's key derivation does not hide the scenario's; where the
//! system refuses the reset, the baseline is the peak so far (the line says
//! which). Each scenario runs in a fresh daemon.
//!
//! Run with `cargo bench --bench memory` (`BENCH_SECONDS` sets how long
//! each attack lasts, default 10).

// A benchmark whose setup fails has nothing to measure: stopping is right.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/start_support/mod.rs"]
mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Conn, Emulator, HelloAck, RawMessage};
use serde_json::{Value, json};
use start_support::*;

const MIB: f64 = 1024.0 * 1024.0;
/// The size of the file every `FILE_READ` asks for.
const BIG_FILE: usize = 10 << 20;
/// The slow platform's pace.
const READ_BYTES: usize = 16 << 10;
const READ_EVERY: Duration = Duration::from_secs(2);
/// How often the platform sends a `FILE_READ` on each connection.
const SEND_EVERY: Duration = Duration::from_millis(50);

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

/// Sends a `FILE_READ` of `path` on every connection every 50 ms for
/// `duration` while they read slowly; returns the requests sent.
fn slow_reader_attack(conns: &[Conn], path: &str, duration: Duration) -> usize {
    for conn in conns {
        conn.read_slowly(READ_BYTES, READ_EVERY);
    }
    let request = json!({"path": path, "encoding": "base64", "format": "bytes"});
    let until = Instant::now() + duration;
    let mut sent = 0;
    while Instant::now() < until {
        for conn in conns {
            // Past a few hundred refusals nobody read, the daemon gives the
            // connection up: it takes no more requests.
            if conn.request("FILE_READ", request.clone()).is_ok() {
                sent += 1;
            }
        }
        std::thread::sleep(SEND_EVERY);
    }
    sent
}

/// One scenario's figures.
fn report(name: &str, pid: i32, idle: u64, note: &str) {
    let peak = peak_rss(pid);
    println!(
        "{name}: idle {}, peak {}, peak above idle {} ({note})",
        mib(idle),
        mib(peak),
        mib(peak.saturating_sub(idle))
    );
}

/// The idle baseline of `pid`, and what it is: the resident set after a
/// peak reset, or the peak so far where the reset is refused.
fn baseline(pid: i32) -> (u64, &'static str) {
    let kind = if reset_peak(pid) {
        "resident set at the baseline, peak reset there"
    } else {
        "peak so far: the system refused the peak reset"
    };
    (peak_rss(pid), kind)
}

fn one_connection(duration: Duration) {
    let home = Home::new();
    std::fs::write(home.root.join("big.bin"), vec![0x5a; BIG_FILE]).unwrap();
    let emulator = emulator();
    let shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    settle(&conn);
    let (idle, kind) = baseline(shim.pid());
    println!("idle baseline: {kind}");
    let path = home.root.join("big.bin");
    let sent = slow_reader_attack(
        std::slice::from_ref(&conn),
        path.to_str().unwrap(),
        duration,
    );
    report(
        "slow reader, 1 connection",
        shim.pid(),
        idle,
        &format!("{sent} FILE_READs of 10 MiB in {duration:?}; target ≤ 128 MiB above idle"),
    );
}

fn call(conn: &Conn, kind: &str, payload: Value) -> Value {
    conn.call(kind, payload, WAIT).unwrap()
}

fn eight_children(duration: Duration) {
    let home = Home::new();
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("big.bin"), vec![0x5a; BIG_FILE]).unwrap();
    let home_path = home.path().canonicalize().unwrap();
    let emulator: Emulator = emulator();
    let shim = Shim::start_control(&home, &emulator, &[]);
    let (control, _) = accept_with(&emulator, &HelloAck::new());
    let mut children = Vec::new();
    for n in 0..8 {
        let session = format!("chat-{n}");
        let (browse, reference) = reference_to(&control, &home_path, "project");
        let attached = call(
            &control,
            "ATTACH_SESSION",
            json!({"session_id": session, "browse_id": browse, "directory_ref": reference}),
        );
        assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
        let activated = call(
            &control,
            "ACTIVATE_SESSION",
            json!({"session_id": session, "revision": 1}),
        );
        assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
        let (conn, _) = accept_with(
            &emulator,
            &HelloAck::new().session_id(&session).grant(["files"]),
        );
        children.push(conn);
    }
    for conn in &children {
        settle(conn);
    }
    let (idle, _) = baseline(shim.pid());
    let sent = slow_reader_attack(&children, "big.bin", duration);
    report(
        "slow reader, 8 child runtimes",
        shim.pid(),
        idle,
        &format!("{sent} FILE_READs of 10 MiB in {duration:?}; target ≤ 1 GiB"),
    );
}

fn zeros_frame() {
    let home = Home::new();
    let emulator = emulator();
    let shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    settle(&conn);
    let (idle, _) = baseline(shim.pid());
    let frame = frame_of_zeros();
    let len = frame.len();
    conn.send_raw(RawMessage::Text(frame)).unwrap();
    settle(&conn);
    report(
        "one 16 MiB frame of [0,0,0,…]",
        shim.pid(),
        idle,
        &format!(
            "{len} bytes; target ≤ 4× the frame, {}",
            mib(4 * len as u64)
        ),
    );
}

fn main() {
    let seconds = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let duration = Duration::from_secs(seconds);
    println!(
        "peak resident memory (VmHWM) of the release daemon, each beside its own idle baseline"
    );
    one_connection(duration);
    eight_children(duration);
    zeros_frame();
}
