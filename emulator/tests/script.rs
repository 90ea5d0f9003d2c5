#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The default script against a stand-in shim that keeps its files in
//! memory (`support::fake`): the script's requests are well-formed, its
//! checks accept correct answers and reject wrong ones, and it cleans up
//! after a failure.

mod support;

use std::thread;

use autogpt_shim_emulator::{Emulator, EmulatorOptions, script};
use serde_json::Value;
use support::fake::{ROOT, fake_shim};
use support::{WAIT, connect_to, hello, read_json, send};

fn run(capabilities: &[&str], corrupt_reads: bool) -> (bool, String, Vec<Value>) {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let mut ws = connect_to(&emulator, &emulator.data_url("s1"));
    let conn = emulator.accept(WAIT).unwrap();
    let sent_hello = hello(capabilities, Some(ROOT));
    send(&mut ws, &sent_hello);
    let hello = conn.expect_hello(WAIT);
    let ack = conn
        .send_hello_ack(&autogpt_shim_emulator::HelloAck::new())
        .unwrap();
    assert_eq!(read_json(&mut ws)["type"], "HELLO_ACK");

    let shim = thread::spawn(move || fake_shim(ws, corrupt_reads));
    let mut out = Vec::new();
    let passed = script::run_default(&conn, &hello, &ack, WAIT, &mut out).unwrap();
    conn.close(1000, "done").unwrap();
    let requests = shim.join().unwrap();
    (passed, String::from_utf8(out).unwrap(), requests)
}

#[test]
fn the_default_script_passes_against_a_correct_shim_and_prints_one_line_per_exchange() {
    let (passed, output, requests) = run(&["shell", "files"], false);
    assert!(passed, "{output}");
    let types: Vec<&str> = requests
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "FILE_STAT",
            "FILE_WRITE",
            "FILE_READ",
            "FILE_LIST",
            "FILE_MOVE",
            "FILE_STAT",
            "FILE_DELETE",
            "FILE_DELETE",
            "FILE_STAT",
            "EXECUTE_COMMAND",
            "PING"
        ]
    );
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), types.len(), "{output}");
    for (line, message_type) in lines.iter().zip(&types) {
        assert!(line.starts_with(&format!("ok   {message_type}")), "{line}");
    }
    // Every path the script touched is inside its scratch directory under
    // the root (the root itself is only stat'ed).
    let scratch = requests[1]["payload"]["path"]
        .as_str()
        .unwrap()
        .rsplit_once('/')
        .unwrap()
        .0
        .to_owned();
    assert!(
        scratch.starts_with(&format!("{ROOT}/emulator-")),
        "{scratch}"
    );
    for request in &requests[1..9] {
        for key in ["path", "src", "dst"] {
            if let Some(path) = request["payload"][key].as_str() {
                assert!(path.starts_with(&scratch), "{path}");
            }
        }
    }
}

#[test]
fn without_shell_the_command_is_skipped() {
    let (passed, output, requests) = run(&["files"], false);
    assert!(passed, "{output}");
    assert!(requests.iter().all(|r| r["type"] != "EXECUTE_COMMAND"));
    assert!(output.contains("skipping echo hello"), "{output}");
}

#[test]
fn a_wrong_answer_fails_the_script_and_the_scratch_directory_is_removed() {
    let (passed, output, requests) = run(&["files"], true);
    assert!(!passed);
    assert!(output.contains("FAIL FILE_READ"), "{output}");
    let cleanup = requests
        .iter()
        .find(|r| r["type"] == "FILE_DELETE")
        .unwrap();
    assert_eq!(cleanup["payload"]["recursive"], true);
    assert_eq!(cleanup["payload"]["missing_ok"], true);
    assert_eq!(requests.last().unwrap()["type"], "PING");
}
