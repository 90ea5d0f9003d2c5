//! `autogpt-shim start --session-id` end to end through the platform
//! emulator: startup output and records, the handshake, reconnects, every
//! terminal close code, SESSION_REVOKED, authentication failures and
//! signals. Each test runs the real binary in an isolated home.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::Duration;

use autogpt_shim_emulator::{AttemptOutcome, Ending, HelloAck};
use rustix::process::Signal;
use serde_json::json;
use start_support::*;

#[test]
fn start_connects_says_hello_and_stops_cleanly_on_sigterm() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (conn, hello) = connect(&emulator, HelloAck::new().grant(["files"]));
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {ACCESS}").as_str())
    );
    assert_eq!(conn.path(), format!("/ws/local-executor/{SESSION}"));
    let payload = &hello["payload"];
    assert_eq!(payload["machine_id"], "machine-e2e");
    assert_eq!(payload["allowed_root"], home.root.to_str().unwrap());
    assert_eq!(payload["capabilities"], json!(["files"]));
    let stat = conn.call("FILE_STAT", json!({"path": "."}), WAIT).unwrap();
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert!(
        shim.stdout.text().contains("Shim stopped."),
        "{}",
        shim.output()
    );
    let out = shim.stdout.text();
    assert!(
        out.contains("Starting shim daemon (machine_id=machine-e2e)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("Legacy direct session: {SESSION}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("Allowed root: {}", home.root.display())),
        "{out}"
    );
    assert!(!out.contains("shell commands are enabled"), "{out}");
    assert_eq!(
        home.ops(),
        [
            "SHIM_START",
            "WS_CONNECTED",
            "CONFIG_RELOADED",
            "FILE_STAT",
            "WS_DISCONNECTED",
            "SHIM_STOP"
        ]
    );
    let records = home.records();
    assert_eq!(
        records[2]["details"],
        json!({"granted_capabilities": ["files"]})
    );
    assert_eq!(records[4]["details"], json!({"reason": "clean_exit"}));
    assert_eq!(records[5]["details"], json!({"reason": "graceful"}));
    assert_eq!(records[3]["session_id"], SESSION);
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByShim {
            code: Some(1000),
            ..
        })
    ));
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    assert!(!home.all_text().contains(ACCESS));
    assert!(!shim.output().contains(ACCESS));
}

/// The records whose `op` is `op`.
fn records_of(home: &Home, op: &str) -> Vec<serde_json::Value> {
    home.records()
        .into_iter()
        .filter(|r| r["op"] == op)
        .collect()
}

#[test]
fn start_reconnects_after_the_emulator_drops_the_connection() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (first, hello1) = connect(&emulator, HelloAck::new().grant(["files"]));
    first.drop_tcp().unwrap();
    let (second, hello2) = connect(&emulator, HelloAck::new().grant(["files"]));
    assert_ne!(
        hello1["id"], hello2["id"],
        "every reconnect sends a fresh HELLO id"
    );
    let stat = second
        .call("FILE_STAT", json!({"path": "."}), WAIT)
        .unwrap();
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    shim.signal(Signal::INT);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert_eq!(records_of(&home, "WS_CONNECTED").len(), 2);
    let disconnects = records_of(&home, "WS_DISCONNECTED");
    let first_reason = disconnects[0]["details"]["reason"].as_str().unwrap();
    assert!(first_reason.starts_with("loop_error: "), "{first_reason}");
    assert_eq!(disconnects[1]["details"]["reason"], "clean_exit");
    assert_eq!(home.verify().0, 0);
}

#[test]
fn reads_lost_with_a_connection_are_answered_when_resent_after_the_reconnect() {
    let home = Home::new();
    std::fs::write(home.root.join("notes.txt"), "kept across reconnects").unwrap();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (first, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    settle(&first);
    // The platform reads nothing more: whatever the shim answers is lost
    // with the connection.
    first.read_slowly(0, Duration::from_secs(3600));
    let read = first
        .request("FILE_READ", json!({"path": "notes.txt"}))
        .unwrap();
    let stat = first
        .request("FILE_STAT", json!({"path": "notes.txt"}))
        .unwrap();
    let list = first.request("FILE_LIST", json!({"path": "."})).unwrap();
    first.drop_tcp().unwrap();
    first.wait_closed(WAIT).unwrap();

    let (second, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let resent = second.resend_unanswered_reads().unwrap();
    assert_eq!(resent, [read.clone(), stat.clone(), list.clone()]);
    let contents = response_within(&second, &read, WAIT);
    assert_eq!(contents["type"], "FILE_CONTENTS", "{contents}");
    assert_eq!(contents["payload"]["content"], "kept across reconnects");
    let stat = response_within(&second, &stat, WAIT);
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    assert_eq!(stat["payload"]["size_bytes"], 22);
    let list = response_within(&second, &list, WAIT);
    assert_eq!(list["type"], "FILE_LIST_RESPONSE", "{list}");
    assert_eq!(list["payload"]["entries"][0]["name"], "notes.txt", "{list}");
    // Nothing of the old connection came on the new one: every answer
    // correlates (the emulator would have failed the test otherwise).
    settle(&second);
    assert_eq!(second.violations(), []);
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert_eq!(home.verify().0, 0);
}

#[test]
fn start_reconnects_after_a_normal_close() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (first, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    first.close(1000, "maintenance").unwrap();
    let (_second, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let disconnects = records_of(&home, "WS_DISCONNECTED");
    assert_eq!(
        disconnects[0]["details"]["reason"], "ws_closed_1000_unknown",
        "{disconnects:?}"
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn each_terminal_close_code_stops_the_shim_without_reconnecting() {
    for (code, label) in [
        (4426, "PROTOCOL_VERSION_MISMATCH"),
        (4427, "SESSION_TAKEN_OVER"),
        (4428, "SESSION_REVOKED"),
        (4429, "PLATFORM_SHUTDOWN"),
    ] {
        let home = Home::new();
        let emulator = emulator();
        let mut shim = Shim::start(&home, &emulator, &[]);
        let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
        conn.close(code, "bye").unwrap();
        assert_eq!(shim.wait(WAIT), 0, "{code}: {}", shim.output());
        let revoked = records_of(&home, "SESSION_REVOKED");
        assert_eq!(
            revoked[0]["details"],
            json!({
                "reason": label.to_ascii_lowercase(),
                "source": "ws_close_code",
                "close_code": code
            }),
            "{code}"
        );
        let ops = home.ops();
        assert_eq!(
            &ops[ops.len() - 3..],
            ["SESSION_REVOKED", "WS_DISCONNECTED", "SHIM_STOP"],
            "{code}"
        );
        assert_eq!(
            records_of(&home, "WS_DISCONNECTED")[0]["details"]["reason"],
            format!("ws_closed_{code}_{label}")
        );
        assert_eq!(emulator.attempts().len(), 1, "{code}: no reconnect");
        assert!(!shim.stdout.text().contains("Shim stopped."));
        assert_eq!(home.verify().0, 0);
    }
}

#[test]
fn terminal_close_while_waiting_for_hello_ack_is_audited_and_final() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let conn = emulator.accept(WAIT).unwrap();
    conn.expect_hello(WAIT);
    conn.close(4427, "taken over").unwrap();
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let revoked = records_of(&home, "SESSION_REVOKED");
    assert_eq!(revoked[0]["details"]["source"], "ws_close_code");
    assert_eq!(revoked[0]["details"]["close_code"], 4427);
    assert!(!home.ops().contains(&"CONFIG_RELOADED".to_owned()));
    assert_eq!(emulator.attempts().len(), 1);
}

#[test]
fn session_revoked_frame_closes_with_4428_and_stops() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    conn.request(
        "SESSION_REVOKED",
        json!({"reason": "user_revoked", "new_shim_machine_id": "other-machine"}),
    )
    .unwrap();
    assert!(
        matches!(
            conn.wait_closed(WAIT),
            Some(Ending::ClosedByShim { code: Some(4428), ref reason }) if reason == "session_revoked"
        ),
        "{:?}",
        conn.ending()
    );
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let revoked = records_of(&home, "SESSION_REVOKED");
    assert_eq!(
        revoked[0]["details"],
        json!({"reason": "user_revoked", "source": "frame", "new_shim_machine_id": "other-machine"})
    );
    assert_eq!(home.ops().last().unwrap(), "SHIM_STOP");
    assert_eq!(emulator.attempts().len(), 1);
}

#[test]
fn hello_ack_for_another_session_is_an_authentication_failure() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let conn = emulator.accept(WAIT).unwrap();
    conn.expect_hello(WAIT);
    conn.send_hello_ack(&HelloAck::new().grant(["files"]).session_id("someone-else"))
        .unwrap();
    assert!(
        matches!(
            conn.wait_closed(WAIT),
            Some(Ending::ClosedByShim {
                code: Some(4403),
                ..
            })
        ),
        "{:?}",
        conn.ending()
    );
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    assert!(shim.stderr.text().contains("Authentication failed: "));
    assert_eq!(home.ops().last().unwrap(), "SHIM_STOP");
    assert_eq!(emulator.attempts().len(), 1);
}

#[test]
fn start_without_tokens_exits_77_and_records_start_and_stop() {
    let home = Home::without_tokens();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    assert!(
        shim.stderr
            .text()
            .contains("Authentication failed: not authenticated; run autogpt-shim auth"),
        "{}",
        shim.output()
    );
    assert_eq!(home.ops(), ["SHIM_START", "SHIM_STOP"]);
    assert!(emulator.attempts().is_empty());
}

#[test]
fn recording_preview_fails_closed_with_a_preflight_record() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &["--enable-recording"]);
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    let err = shim.stderr.text();
    assert!(err.contains("Preflight failed: "), "{err}");
    assert!(err.contains("design preview"), "{err}");
    assert!(
        err.contains("capture and interpretation are incomplete"),
        "{err}"
    );
    let records = home.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["op"], "DAEMON_PREFLIGHT_FAILED");
    assert!(record["request_id"].is_string());
    assert_eq!(
        record["details"]["missing_permissions"],
        json!(["recording_preview_disabled"])
    );
    assert_eq!(record["details"]["platform"], "linux");
    assert_eq!(
        record["result"],
        json!({"ok": false, "exit_code": 78, "duration_ms": 0, "error_code": "CAPABILITY_NOT_GRANTED"})
    );
    assert!(emulator.attempts().is_empty());
    let text = std::fs::read_to_string(&home.audit).unwrap();
    assert!(text.contains("\"op\": \"DAEMON_PREFLIGHT_FAILED\""));
}

#[test]
fn missing_allowed_root_is_refused_before_anything_is_written() {
    let home = Home::new();
    let emulator = emulator();
    let missing = home.path().join("no-such-dir");
    let root = [("AUTOGPT_SHIM_ALLOWED_ROOT", missing.to_str().unwrap())];
    let mut shim = Shim::start_with_env(&home, &emulator, &root, &[]);
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    assert!(
        shim.stderr.text().contains("does not exist"),
        "{}",
        shim.output()
    );
    assert!(!missing.exists());
    assert!(!home.audit.exists());
}

#[test]
fn home_directory_as_allowed_root_is_refused() {
    let home = Home::new();
    let emulator = emulator();
    let root = [("AUTOGPT_SHIM_ALLOWED_ROOT", home.path().to_str().unwrap())];
    let mut shim = Shim::start_with_env(&home, &emulator, &root, &[]);
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    assert!(
        shim.stderr.text().contains("Preflight failed: "),
        "{}",
        shim.output()
    );
    assert!(emulator.attempts().is_empty());
}

#[test]
fn second_daemon_on_the_same_audit_log_is_refused() {
    let home = Home::new();
    let emulator = emulator();
    let mut first = Shim::start(&home, &emulator, &[]);
    let (_conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let mut second = Shim::start(&home, &emulator, &[]);
    assert_eq!(second.wait(WAIT), 78, "{}", second.output());
    let err = second.stderr.text();
    assert!(err.contains("mandatory audit log"), "{err}");
    assert!(err.contains("in use by another shim process"), "{err}");
    first.signal(Signal::TERM);
    assert_eq!(first.wait(WAIT), 0, "{}", first.output());
    assert_eq!(records_of(&home, "SHIM_START").len(), 1);
    assert_eq!(home.verify().0, 0);
}

#[test]
fn second_signal_during_shutdown_exits_at_once() {
    let home = Home::new();
    let emulator = autogpt_shim_emulator::Emulator::start(
        autogpt_shim_emulator::EmulatorOptions::new().upgrades([
            autogpt_shim_emulator::UpgradeBehaviour::Hang(Duration::from_secs(60)),
        ]),
    )
    .unwrap();
    let mut shim = Shim::start(&home, &emulator, &[]);
    // The upgrade hangs: the first signal cannot end the connect at once.
    assert!(eventually(WAIT, || shim
        .stderr
        .text()
        .contains("connecting to")));
    std::thread::sleep(Duration::from_millis(300));
    shim.signal(Signal::TERM);
    std::thread::sleep(Duration::from_millis(300));
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(Duration::from_secs(5)), 1, "{}", shim.output());
    assert_eq!(home.ops(), ["SHIM_START"]);
}

#[test]
fn missing_hello_ack_fails_the_attempt_after_ten_seconds_and_reconnects() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let silent = emulator.accept(WAIT).unwrap();
    silent.expect_hello(WAIT);
    let started = std::time::Instant::now();
    let (_conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(9), "{waited:?}");
    assert!(matches!(
        silent.wait_closed(WAIT),
        Some(Ending::ClosedByShim {
            code: Some(1000),
            ..
        })
    ));
    assert_eq!(
        records_of(&home, "WS_DISCONNECTED")[0]["details"]["reason"],
        "loop_error: HelloAckTimeout"
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn pin_mismatch_is_audited_retried_and_never_sends_the_token() {
    let home = Home::new();
    let emulator = emulator();
    let wrong_pin = "00".repeat(32);
    let mut command = home.command(&[
        "--platform-url",
        &emulator.platform_url(),
        "--ca-file",
        emulator.ca_file().unwrap().to_str().unwrap(),
        "--tls-pin-sha256",
        &wrong_pin,
        "start",
        "--session-id",
        SESSION,
    ]);
    command.env("AUTOGPT_SHIM_RECONNECT_BASE_DELAY", "0.05");
    let mut shim = Shim::spawn(command);
    let attempts = emulator.wait_attempts(2, WAIT);
    assert!(attempts.len() >= 2, "retried with backoff: {attempts:?}");
    for attempt in &attempts {
        assert!(
            matches!(attempt.outcome, AttemptOutcome::TlsFailed(_)),
            "{attempt:?}"
        );
        assert_eq!(attempt.authorization, None);
    }
    pin_mismatch_is_audited_then_stop(&home, &mut shim);
}

/// A `tls_pin_mismatch` disconnect is recorded, no connection ever came
/// up, and the shim stops cleanly on SIGTERM.
fn pin_mismatch_is_audited_then_stop(home: &Home, shim: &mut Shim) {
    assert!(eventually(WAIT, || {
        records_of(home, "WS_DISCONNECTED")
            .iter()
            .any(|r| r["details"]["reason"] == "tls_pin_mismatch")
    }));
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert!(!home.ops().contains(&"WS_CONNECTED".to_owned()));
}

/// Unmounts on drop.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn an_audit_write_failure_answers_internal_error_and_stops_with_78_at_once() {
    let home = Home::new();
    let small = home.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = std::process::Command::new("mount")
        // A private mount point: a shared (1777) log directory is refused.
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"])
        .arg(&small)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        println!("skipped: this machine does not let the test mount a small tmpfs");
        return;
    }
    let _mount = Mount(small.clone());
    let audit = small.join("audit.log");
    let emulator = emulator();
    let mut command = home.command(&[]);
    let mut args = platform_args(&emulator);
    args.extend(["start", "--session-id", SESSION].map(String::from));
    command.args(&args);
    command.env("AUTOGPT_SHIM_AUDIT_LOG_PATH", &audit);
    let mut shim = Shim::spawn(command);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    // Fill the filesystem: the next record cannot be written.
    let filler = small.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 4096];
    while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
    let _ = file.sync_all();
    // Records still fit in the log's last page; once it is full the next
    // one fails.
    let mut failed = None;
    for _ in 0..100 {
        let reply = conn.call("FILE_STAT", json!({"path": "."}), WAIT).unwrap();
        if reply["type"] == "ERROR" {
            failed = Some(reply);
            break;
        }
    }
    let reply = failed.expect("the audit log never filled up");
    assert_eq!(reply["payload"]["code"], "INTERNAL_ERROR", "{reply}");
    // The request that ran and whose record failed, not a later refusal.
    assert!(
        reply["payload"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("could not be written")),
        "{reply}"
    );
    // Nothing more is sent: the shim closes and exits on its own.
    assert_eq!(shim.wait(Duration::from_secs(5)), 78, "{}", shim.output());
    assert!(
        shim.stderr.text().contains("mandatory audit log"),
        "{}",
        shim.output()
    );
    assert!(conn.wait_closed(WAIT).is_some());
    drop(file);
    std::fs::remove_file(&filler).unwrap();
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !text.contains("\"op\": \"SHIM_STOP\""),
        "no SHIM_STOP after a failure"
    );
}

#[test]
fn an_empty_pin_flag_keeps_the_pin_from_the_config_file() {
    let home = Home::new();
    let emulator = emulator();
    let config = home.path().join("pinned.toml");
    std::fs::write(
        &config,
        format!("tls_pin_sha256 = \"{}\"\n", "00".repeat(32)),
    )
    .unwrap();
    let mut command = home.command(&[
        "--config",
        config.to_str().unwrap(),
        "--platform-url",
        &emulator.platform_url(),
        "--ca-file",
        emulator.ca_file().unwrap().to_str().unwrap(),
        "--tls-pin-sha256",
        "",
        "start",
        "--session-id",
        SESSION,
    ]);
    command.env("AUTOGPT_SHIM_RECONNECT_BASE_DELAY", "0.05");
    let mut shim = Shim::spawn(command);
    let attempts = emulator.wait_attempts(1, WAIT);
    assert!(
        matches!(
            attempts.first().map(|a| &a.outcome),
            Some(AttemptOutcome::TlsFailed(_))
        ),
        "{attempts:?}"
    );
    assert_eq!(attempts[0].authorization, None);
    pin_mismatch_is_audited_then_stop(&home, &mut shim);
}

#[test]
fn reconnect_delays_below_the_floor_are_refused_with_78() {
    for (key, value) in [
        ("AUTOGPT_SHIM_RECONNECT_BASE_DELAY", "0"),
        ("AUTOGPT_SHIM_RECONNECT_MAX_DELAY", "0"),
        ("AUTOGPT_SHIM_RECONNECT_BASE_DELAY", "0.001"),
    ] {
        let home = Home::new();
        let emulator = emulator();
        let mut shim = Shim::start_with_env(&home, &emulator, &[(key, value)], &[]);
        assert_eq!(
            shim.wait(Duration::from_secs(10)),
            78,
            "{key}={value}: {}",
            shim.output()
        );
        let err = shim.stderr.text();
        let name = key.trim_start_matches("AUTOGPT_SHIM_").to_ascii_lowercase();
        assert!(
            err.lines()
                .any(|l| l.contains(&name) && l.contains("from 0.05 to 86400")),
            "{key}={value}: {err}"
        );
        assert!(emulator.attempts().is_empty(), "{key}={value}: connected");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_fifo_as_ca_file_is_refused_with_78_without_blocking() {
    let home = Home::new();
    let emulator = emulator();
    let fifo = home.path().join("ca.fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .unwrap();
    let mut command = home.command(&[
        "--platform-url",
        &emulator.platform_url(),
        "--ca-file",
        fifo.to_str().unwrap(),
        "start",
        "--session-id",
        SESSION,
    ]);
    command.env("AUTOGPT_SHIM_RECONNECT_BASE_DELAY", "0.05");
    let mut shim = Shim::spawn(command);
    assert_eq!(shim.wait(Duration::from_secs(10)), 78, "{}", shim.output());
    let err = shim.stderr.text();
    assert!(err.contains("not a regular file"), "{err}");
    assert!(emulator.attempts().is_empty());
}

/// A CONNECT proxy on 127.0.0.1 that answers the first request with `status`
/// and an HTML page, head and body in one write, as real proxies do.
fn html_refusing_proxy(status: u16) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut heads = Vec::new();
        listener.set_nonblocking(true).unwrap();
        let deadline = std::time::Instant::now() + WAIT;
        while std::time::Instant::now() < deadline && heads.is_empty() {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream.set_read_timeout(Some(WAIT)).unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            heads.push(String::from_utf8_lossy(&head).into_owned());
            let page = "<html><head><title>Access denied</title></head><body><h1>Proxy authentication required</h1></body></html>";
            let answer = format!(
                "HTTP/1.1 {status} Refused\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
        heads
    });
    (port, handle)
}

#[test]
fn a_proxy_refusal_with_an_html_page_is_reported_with_its_status() {
    for status in [407, 403] {
        let home = Home::new();
        let (port, proxy) = html_refusing_proxy(status);
        let out = home
            .command(&["--platform-url", "https://platform.example.test", "revoke"])
            .env("HTTPS_PROXY", format!("http://127.0.0.1:{port}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("the proxy refused CONNECT with HTTP {status}")),
            "{err}"
        );
        assert!(!err.contains("unexpected data"), "{err}");
        let heads = proxy.join().unwrap();
        assert!(
            heads[0].starts_with("CONNECT platform.example.test:443 HTTP/1.1\r\n"),
            "{heads:?}"
        );
    }
}

/// The one `Preflight failed:` line of a refused start, and it is the last
/// line (banner and store warnings come before it).
fn refusal(shim: &Shim) -> String {
    let stderr = shim.stderr.text();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("Preflight failed: "))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().last(), Some(lines[0]), "{stderr}");
    lines[0].to_owned()
}

#[test]
fn legacy_roots_holding_the_shims_files_or_credentials_are_refused() {
    let home = Home::new();
    let emulator = emulator();
    let state = home.path().join("state");
    let inside = home.path().join("secrets/inner");
    let ssh = home.path().join(".ssh/keys");
    for dir in [&state, &inside, &ssh] {
        std::fs::create_dir_all(dir).unwrap();
    }
    for (root, named) in [
        (&state, "audit log directory"),
        (&inside, "secret store directory"),
        (&ssh, ".ssh"),
    ] {
        let env = [("AUTOGPT_SHIM_ALLOWED_ROOT", root.to_str().unwrap())];
        let mut shim = Shim::start_with_env(&home, &emulator, &env, &[]);
        assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
        let reason = refusal(&shim);
        assert!(reason.contains(named), "{reason}");
    }
    assert!(emulator.attempts().is_empty());
    assert!(!home.audit.exists());
}

#[test]
fn a_shared_audit_directory_is_refused_and_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let emulator = emulator();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    // Sticky, world-writable, group-writable.
    for shared_mode in [0o1777, 0o777, 0o770] {
        let shared = home.path().join(format!("shared-{shared_mode:o}"));
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(shared_mode)).unwrap();
        let log = shared.join("audit.log");
        let env = [("AUTOGPT_SHIM_AUDIT_LOG_PATH", log.to_str().unwrap())];
        let mut shim = Shim::start_with_env(&home, &emulator, &env, &[]);
        assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
        let reason = refusal(&shim);
        assert!(reason.contains("shared"), "{reason}");
        assert_eq!(mode(&shared), shared_mode);
        assert!(std::fs::read_dir(&shared).unwrap().next().is_none());
    }
    assert!(emulator.attempts().is_empty());
}

#[test]
fn a_configured_audit_directory_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let emulator = emulator();
    let logs = home.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o750)).unwrap();
    let log = logs.join("audit.log");
    let env = [("AUTOGPT_SHIM_AUDIT_LOG_PATH", log.to_str().unwrap())];
    let mut shim = Shim::start_with_env(&home, &emulator, &env, &[]);
    let _connected = connect(&emulator, HelloAck::new());
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&logs), 0o750);
    // The log itself is the shim's own file: private.
    assert_eq!(mode(&log), 0o600);
}

/// `start` in legacy mode on the per-OS default root (`~/autogpt-workspace`).
fn default_root_command(
    home: &Home,
    emulator: &autogpt_shim_emulator::Emulator,
) -> std::process::Command {
    let mut args = platform_args(emulator);
    args.extend(["start", "--session-id", SESSION].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = home.command(&args);
    command.env_remove("AUTOGPT_SHIM_ALLOWED_ROOT");
    command
}

#[test]
fn a_start_that_cannot_run_creates_no_default_root_and_never_says_how_to_stop() {
    let home = Home::without_tokens();
    let emulator = emulator();
    let default_root = home.path().join("autogpt-workspace");
    let out = default_root_command(&home, &emulator).output().unwrap();
    assert_eq!(out.status.code(), Some(77));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("Press Ctrl+C"), "{stdout}");
    assert!(!stdout.contains("Starting shim daemon"), "{stdout}");
    assert!(!default_root.exists(), "the default root was created");
    assert_eq!(home.ops(), ["SHIM_START", "SHIM_STOP"]);

    // With tokens it is created, and how to stop is said once it runs.
    home.store_tokens(ACCESS, REFRESH);
    let mut shim = Shim::spawn(default_root_command(&home, &emulator));
    let (conn, hello) = connect(&emulator, HelloAck::new().grant(["files"]));
    let canonical = default_root.canonicalize().unwrap();
    assert_eq!(
        hello["payload"]["allowed_root"],
        canonical.to_str().unwrap()
    );
    assert!(
        eventually(WAIT, || shim
            .stdout
            .text()
            .contains("Press Ctrl+C to stop.")),
        "{}",
        shim.output()
    );
    let stdout = shim.stdout.text();
    assert!(stdout.contains("Created allowed_root"), "{stdout}");
    drop(conn);
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn a_start_refused_by_its_preflight_never_says_how_to_stop() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &["--enable-recording"]);
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    assert!(
        !shim.stdout.text().contains("Press Ctrl+C"),
        "{}",
        shim.output()
    );
}

fn status_text(home: &Home) -> String {
    let out = home.command(&["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn status_shows_the_running_daemons_own_settings_and_where_its_files_are() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &["--enable-shell"]);
    let (_conn, _) = connect(&emulator, HelloAck::new().grant(["shell", "files"]));
    assert!(
        eventually(WAIT, || shim.stdout.text().contains("Press Ctrl+C")),
        "{}",
        shim.output()
    );
    let text = status_text(&home);
    assert!(text.contains("Daemon: running\n"), "{text}");
    assert!(
        text.contains(&format!("  pid {}, version ", shim.pid())),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  mode: legacy session {SESSION}, allowed_root {}",
            home.root.display()
        )),
        "{text}"
    );
    assert!(text.contains("  machine_id: machine-e2e"), "{text}");
    assert!(text.contains("  shell commands: enabled"), "{text}");
    assert!(text.contains("  capabilities: shell, files"), "{text}");
    assert!(
        text.contains(&format!("Audit log: {}", home.audit.display())),
        "{text}"
    );
    assert!(text.contains("State directory: "), "{text}");
    assert!(text.contains("Configuration file: "), "{text}");

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let text = status_text(&home);
    assert!(text.contains("Daemon: not running"), "{text}");
    assert!(!text.contains("  pid "), "{text}");
    let state = home.path().join("state/autogpt-local-executor/daemon.json");
    assert!(!state.exists(), "the runtime file outlived the daemon");
}
