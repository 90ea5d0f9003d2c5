#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The `autogpt-shim-emulator` binary end to end: banner, handshake, the
//! default script against the in-memory stand-in shim, exit status.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;

use serde_json::json;
use support::fake::{ROOT, fake_shim};
use support::{connect, hello, read_json, send, trusting};

const BIN: &str = env!("CARGO_BIN_EXE_autogpt-shim-emulator");

/// Starts the binary and reads its banner up to the waiting line; returns
/// the child, the banner's fields and the rest of stdout as a reader.
fn start(
    args: &[&str],
) -> (
    Child,
    Vec<(String, String)>,
    BufReader<std::process::ChildStdout>,
) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut fields = Vec::new();
    loop {
        let mut line = String::new();
        assert_ne!(
            stdout.read_line(&mut line).unwrap(),
            0,
            "the banner ended early"
        );
        if line.starts_with("waiting for a shim") {
            break;
        }
        if let Some((key, value)) = line.trim().split_once(": ") {
            fields.push((key.to_owned(), value.trim().to_owned()));
        }
    }
    (child, fields, stdout)
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> &'a str {
    &fields.iter().find(|(name, _)| name == key).unwrap().1
}

fn run_once(capabilities: &[&str], corrupt_reads: bool) -> (i32, String) {
    let (mut child, fields, mut stdout) =
        start(&["--once", "--session-id", "s1", "--token", "tok"]);
    let data_url = field(&fields, "data url");
    let ca_file = PathBuf::from(field(&fields, "ca file"));
    assert_eq!(field(&fields, "tls pin sha256").len(), 64);
    assert!(field(&fields, "start a shim").contains("--tls-pin-sha256"));

    let mut ws = connect(data_url, Some(trusting(&ca_file)), Some("tok")).unwrap();
    send(&mut ws, &hello(capabilities, Some(ROOT)));
    let ack = read_json(&mut ws);
    assert_eq!(ack["payload"]["session_id"], "s1");
    let shim = thread::spawn(move || fake_shim(ws, corrupt_reads));

    let status = child.wait().unwrap();
    shim.join().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    (status.code().unwrap(), rest)
}

#[test]
fn one_scripted_chat_passes_and_exits_zero() {
    let (code, output) = run_once(&["shell", "files"], false);
    assert_eq!(code, 0, "{output}");
    assert!(
        output.contains("ok   HELLO shim 0.1.0 on linux/x86_64"),
        "{output}"
    );
    assert!(
        output.contains("ok   EXECUTE_COMMAND echo hello -> COMMAND_RESULT"),
        "{output}"
    );
    assert!(output.contains("script passed"), "{output}");
    assert!(!output.contains("FAIL"), "{output}");
}

#[test]
fn a_failing_step_exits_one() {
    let (code, output) = run_once(&["files"], true);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("FAIL FILE_READ"), "{output}");
    assert!(output.contains("script FAILED"), "{output}");
}

#[test]
fn a_wrong_token_is_refused_before_any_script() {
    let (mut child, fields, _stdout) = start(&["--plain", "--once", "--token", "right"]);
    let url = field(&fields, "ws url");
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    assert!(fields.iter().all(|(key, _)| key != "ca file"));
    let error = connect(url, None, Some("wrong")).unwrap_err();
    assert!(
        matches!(error, tungstenite::Error::Http(ref response) if response.status() == 401),
        "{error:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn usage_errors_exit_two() {
    let output = Command::new(BIN)
        .arg("--port")
        .arg("many")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage:"));
    let output = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("--session-id"));
}

#[test]
fn a_shim_breaking_the_relay_rules_fails_the_run() {
    let (mut child, fields, mut stdout) = start(&["--once", "--session-id", "s1"]);
    let data_url = field(&fields, "data url");
    let ca_file = PathBuf::from(field(&fields, "ca file"));
    let mut ws = connect(data_url, Some(trusting(&ca_file)), None).unwrap();
    send(&mut ws, &hello(&["files"], Some(ROOT)));
    let ack = read_json(&mut ws);
    assert_eq!(ack["type"], "HELLO_ACK");
    let ping = support::frame("PING", "from-the-shim", serde_json::Value::Null, json!({}));
    send(&mut ws, &ping);
    // Read until the emulator ends the connection.
    while ws.read().is_ok() {}

    let status = child.wait().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains("FAIL the platform would end the connection: PING from the shim"),
        "{rest}"
    );
}
