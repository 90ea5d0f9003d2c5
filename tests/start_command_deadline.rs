//! A command whose timeout is the platform's own deadline (the
//! `HELLO_ACK`'s `command_timeout_seconds`, which the platform waits for any
//! reply at most) is stopped early enough that its `COMMAND_RESULT`, with
//! `timed_out` and the output so far, reaches the platform at least a
//! second before that deadline; a shorter requested timeout keeps its exact
//! meaning. The real binary, driven through the platform emulator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Conn, HelloAck};
use serde_json::{Value, json};
use start_support::*;

/// The platform deadline the tests grant, in seconds.
const DEADLINE_SECONDS: i64 = 3;

/// Prints a line, ignores SIGTERM (the shell and its `sleep` both) and
/// would run far past any deadline.
const STUBBORN: &str = "trap '' TERM; echo partial; sleep 30";

/// A shim with the shell on, connected with the platform deadline.
fn deadline_session(home: &Home) -> (Shim, Conn) {
    let emulator = emulator();
    let shim = Shim::start(home, &emulator, &["--enable-shell"]);
    let (conn, _) = connect(
        &emulator,
        HelloAck::new()
            .grant(["files", "shell"])
            .command_timeout_seconds(DEADLINE_SECONDS),
    );
    (shim, conn)
}

/// Sends `payload` as an `EXECUTE_COMMAND` and returns its result and how
/// long after the request was handed to the emulator the result arrived.
fn timed_command(conn: &Conn, payload: Value) -> (Value, Duration) {
    let sent = Instant::now();
    let id = conn.request("EXECUTE_COMMAND", payload).unwrap();
    let result = response_within(conn, &id, WAIT);
    let arrived = conn.arrival_of(&id).unwrap();
    (result, arrived - sent)
}

fn assert_timed_out_with_partial_output(result: &Value) {
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    let p = &result["payload"];
    assert_eq!(p["timed_out"], true, "{result}");
    assert_eq!(p["stdout"], "partial\n", "{result}");
}

#[test]
fn a_command_overrunning_the_platform_deadline_is_answered_a_second_before_it() {
    let home = Home::new();
    let (_shim, conn) = deadline_session(&home);
    let deadline = Duration::from_secs(DEADLINE_SECONDS as u64);
    // No timeout asked for, then one longer than the platform's: both are
    // bounded by the platform's deadline.
    for payload in [
        json!({"command": STUBBORN}),
        json!({"command": STUBBORN, "timeout_seconds": 60}),
    ] {
        let (result, took) = timed_command(&conn, payload);
        assert_timed_out_with_partial_output(&result);
        assert!(
            took + Duration::from_secs(1) <= deadline,
            "the result arrived {took:?} after the request: {result}"
        );
    }
    let timeouts: Vec<Value> = home
        .records()
        .into_iter()
        .filter(|r| r["op"] == "EXECUTE_COMMAND")
        .map(|r| {
            assert_eq!(r["result"]["error_code"], "COMMAND_TIMEOUT", "{r}");
            r["details"]["timeout_seconds"].clone()
        })
        .collect();
    assert_eq!(timeouts, [json!(DEADLINE_SECONDS), json!(DEADLINE_SECONDS)]);
}

#[test]
fn a_requested_timeout_below_the_platform_deadline_keeps_its_instant_and_answers_in_time() {
    let home = Home::new();
    let (_shim, conn) = deadline_session(&home);
    // SIGTERM (ignored) at the requested second; the SIGKILL that would
    // come two seconds later, past the platform's deadline, comes early
    // enough for the result to arrive a second before it.
    let (result, took) = timed_command(&conn, json!({"command": STUBBORN, "timeout_seconds": 1}));
    assert_timed_out_with_partial_output(&result);
    assert_eq!(result["payload"]["exit_code"], -9, "{result}");
    assert!(took >= Duration::from_secs(1), "{took:?}: {result}");
    let deadline = Duration::from_secs(DEADLINE_SECONDS as u64);
    assert!(
        took + Duration::from_secs(1) <= deadline,
        "{took:?}: {result}"
    );
}

#[test]
fn a_command_under_the_platform_deadline_that_exits_keeps_its_background_output() {
    let home = Home::new();
    let (_shim, conn) = deadline_session(&home);
    // The leader exits at once; its background job writes half a second
    // later and then closes the pipe. The drain after a normal exit waits
    // for it, as without a deadline.
    let (result, _) = timed_command(&conn, json!({"command": "echo a; (sleep 0.5; echo b) &"}));
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    assert_eq!(result["payload"]["timed_out"], false, "{result}");
    assert_eq!(result["payload"]["stdout"], "a\nb\n", "{result}");
}

#[test]
fn a_command_result_overtakes_file_contents_still_waiting_for_a_slow_platform() {
    let home = Home::new();
    let emulator = emulator();
    let _shim = Shim::start(&home, &emulator, &["--enable-shell"]);
    // The platform's usual 30 s wait: every answer here comes within it.
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));
    // Three reads of about 4 MiB each as base64, which a platform taking
    // 1.25 MiB/s needs seconds to take, queue behind one another.
    for n in 0..3 {
        std::fs::write(
            home.root.join(format!("big{n}.bin")),
            vec![b'a' + n; 3 * 1024 * 1024],
        )
        .unwrap();
    }
    conn.read_slowly(128 * 1024, Duration::from_millis(100));
    // Its result is made a second later, while the reads' contents wait.
    let command = conn
        .request(
            "EXECUTE_COMMAND",
            json!({"command": "sleep 1; echo partial"}),
        )
        .unwrap();
    let reads: Vec<String> = (0..3)
        .map(|n| {
            conn.request(
                "FILE_READ",
                json!({"path": format!("big{n}.bin"), "encoding": "base64"}),
            )
            .unwrap()
        })
        .collect();
    let result = response_within(&conn, &command, Duration::from_secs(60));
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    assert_eq!(result["payload"]["exit_code"], 0, "{result}");
    assert_eq!(result["payload"]["stdout"], "partial\n", "{result}");
    for id in &reads {
        let contents = response_within(&conn, id, Duration::from_secs(60));
        assert_eq!(contents["type"], "FILE_CONTENTS", "{}", contents["type"]);
    }
    // The order the platform received them in: the result, made when the
    // reads' contents were all waiting, went ahead of those not yet being
    // written (the one being written when it came cannot be cut).
    let order: Vec<&str> = {
        let frames = conn.raw_frames();
        let ids: Vec<String> = frames
            .iter()
            .filter_map(|f| f.text())
            .filter_map(|t| {
                std::iter::once(&command)
                    .chain(&reads)
                    .find(|id| t.contains(id.as_str()))
                    .cloned()
            })
            .collect();
        ids.iter()
            .map(|id| if *id == command { "result" } else { "contents" })
            .collect()
    };
    assert_ne!(
        order.last(),
        Some(&"result"),
        "the command result waited behind every queued read: {order:?}"
    );
}
