//! What the real `autogpt-shim start` writes to its audit log when the
//! platform sends hostile text, and how `audit show` and `audit tail`
//! display it: every free-text field of a record is capped at 4 KiB with
//! its full length and SHA-256 beside it, the log still verifies, and
//! terminal controls and bidi overrides taken from a request reach the log
//! unchanged but the terminal only escaped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use autogpt_shim_emulator::{Conn, HelloAck};
use rustix::process::Signal;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use start_support::*;

/// The documented cap of one free-text field, in bytes.
const CAP: usize = 4096;

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A shim started with `extra`, connected with `grants`.
fn session(home: &Home, extra: &[&str], grants: &[&str]) -> (Shim, Conn) {
    let emulator = emulator();
    let shim = Shim::start(home, &emulator, extra);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(grants.iter().copied()));
    (shim, conn)
}

/// The raw log lines whose record satisfies `pick`.
fn lines_where(home: &Home, pick: impl Fn(&Value) -> bool) -> Vec<String> {
    std::fs::read_to_string(&home.audit)
        .unwrap()
        .lines()
        .filter(|l| pick(&serde_json::from_str::<Value>(l).unwrap()))
        .map(str::to_owned)
        .collect()
}

/// The one record of request `id`, checked to be small on disk.
fn small_record_of(home: &Home, id: &str) -> Value {
    let lines = lines_where(home, |r| r["request_id"] == id);
    assert_eq!(lines.len(), 1);
    let size = lines[0].len();
    assert!(size < 2 * CAP, "a record of {size} bytes");
    serde_json::from_str(&lines[0]).unwrap()
}

/// Checks that `details[field]` is the start of `full`, cut on a character
/// boundary within the cap, with the full length and hash beside it.
fn assert_capped_text(details: &Value, field: &str, full: &str) {
    let kept = details[field].as_str().unwrap();
    assert!(kept.len() <= CAP && kept.len() > CAP - 4, "{}", kept.len());
    assert!(full.starts_with(kept));
    assert_eq!(details[format!("{field}_bytes")], json!(full.len()));
    assert_eq!(
        details[format!("{field}_sha256")],
        json!(sha256_hex(full.as_bytes()))
    );
}

/// SIGTERM, exit 0, and `audit verify` clean.
fn stop_and_verify(home: &Home, mut shim: Shim) {
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_huge_refused_path_is_logged_capped_with_its_length_and_hash() {
    let home = Home::new();
    let (shim, conn) = session(&home, &[], &["files"]);
    // 2 MiB of two-byte characters after an escape: the cut falls inside
    // a character unless it respects UTF-8 boundaries.
    let path = format!("../{}", "é".repeat(1 << 20));
    let before = std::fs::metadata(&home.audit).unwrap().len();
    for _ in 0..4 {
        let (_, response) = call(
            &conn,
            "FILE_STAT",
            json!({"path": path, "follow_symlinks": false}),
        );
        assert_eq!(response["type"], "ERROR", "{response}");
    }
    let lines = lines_where(&home, |r| r["op"] == "JAIL_VIOLATION");
    assert_eq!(lines.len(), 4);
    for line in &lines {
        assert!(line.len() < 2 * CAP, "a record of {} bytes", line.len());
        let record: Value = serde_json::from_str(line).unwrap();
        let details = &record["details"];
        assert_capped_text(details, "path", &path);
        assert_eq!(details["attempted_op"], "FILE_STAT");
        // The siblings follow the field they describe.
        assert!(line.contains("\"path_bytes\": 2097155, \"path_sha256\": \""));
    }
    let grown = std::fs::metadata(&home.audit).unwrap().len() - before;
    assert!(grown < 8 * 4 * CAP as u64, "the log grew by {grown} bytes");
    stop_and_verify(&home, shim);
}

#[test]
fn a_huge_command_and_argv_are_logged_capped_with_their_length_and_hash() {
    let home = Home::new();
    let (shim, conn) = session(&home, &["--enable-shell"], &["files", "shell"]);

    let command = format!("echo {}", "x".repeat(3 << 20));
    let (id, _) = call(&conn, "EXECUTE_COMMAND", json!({"command": command}));
    let record = small_record_of(&home, &id);
    assert_eq!(record["op"], "EXECUTE_COMMAND");
    assert_capped_text(&record["details"], "command", &command);
    // Fields within the cap carry no siblings.
    assert!(record["details"].get("cwd_bytes").is_none(), "{record}");

    // A list is capped as a whole: many small items, then one huge one.
    let mut argv: Vec<String> = vec!["true".into()];
    argv.extend((0..100_000).map(|i| format!("a{i}")));
    let (id, _) = call(&conn, "EXECUTE_COMMAND", json!({"argv": argv}));
    let record = small_record_of(&home, &id);
    let details = &record["details"];
    let kept: Vec<String> = serde_json::from_value(details["argv"].clone()).unwrap();
    assert!(kept.len() > 100 && kept.len() < argv.len(), "{kept:?}");
    // Leading items whole; the one that crosses the cap cut to fit.
    let last = kept.len() - 1;
    assert_eq!(kept[..last], argv[..last]);
    assert!(argv[last].starts_with(&kept[last]));
    let listed = serde_json::to_string(&argv).unwrap();
    assert!(serde_json::to_string(&kept).unwrap().len() <= CAP);
    assert_eq!(details["argv_bytes"], json!(listed.len()));
    assert_eq!(details["argv_sha256"], json!(sha256_hex(listed.as_bytes())));

    let argv = vec!["echo".to_owned(), "y".repeat(2 << 20)];
    let (id, _) = call(&conn, "EXECUTE_COMMAND", json!({"argv": argv}));
    let record = small_record_of(&home, &id);
    let kept: Vec<String> = serde_json::from_value(record["details"]["argv"].clone()).unwrap();
    // The item that crosses the cap is cut, not dropped.
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[0], "echo");
    assert!(argv[1].starts_with(&kept[1]) && kept[1].len() > CAP - 16);
    stop_and_verify(&home, shim);
}

/// Characters that make a terminal do something other than show text.
fn is_terminal_control(c: char) -> bool {
    let u = c as u32;
    (u < 0x20 && c != '\n')
        || (0x7f..=0x9f).contains(&u)
        || (0x202a..=0x202e).contains(&u)
        || (0x2066..=0x2069).contains(&u)
        || matches!(u, 0x200b..=0x200f | 0x2028 | 0x2029 | 0x061c | 0xfeff)
}

#[test]
fn audit_show_escapes_terminal_controls_and_bidi_overrides_from_a_request() {
    let home = Home::new();
    let (shim, conn) = session(&home, &[], &["files"]);
    let hostile =
        "../\u{9b}2J\u{1b}]0;owned\u{7}\u{7f}\u{202e}txt.exe\u{2066}x\u{2069}\u{200b}\u{85}";
    let (_, response) = call(&conn, "FILE_STAT", json!({"path": hostile}));
    assert_eq!(response["type"], "ERROR", "{response}");
    let record = home.wait_record("JAIL_VIOLATION", WAIT);
    // The log holds exactly what was asked.
    assert_eq!(record["details"]["path"], hostile);
    let seq = record["seq"].to_string();
    let out = home.command(&["audit", "show", &seq]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let raw: Vec<char> = text.chars().filter(|&c| is_terminal_control(c)).collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in\n{text}");
    // Escaped as JSON, so the printed record still parses to the same path.
    assert!(
        text.contains(r#""path": "../\u009b2J\u001b]0;owned\u0007\u007f\u202etxt.exe\u2066x\u2069\u200b\u0085""#),
        "{text}"
    );
    // After the `# …` comment lines (file, local time) comes the record.
    let body: Vec<&str> = text.lines().skip_while(|l| l.starts_with('#')).collect();
    let shown: Value = serde_json::from_str(&body.join("\n")).unwrap();
    assert_eq!(shown, record);
    stop_and_verify(&home, shim);
}

#[test]
fn audit_tail_escapes_terminal_controls_and_bidi_overrides_from_a_request() {
    let home = Home::new();
    let (shim, conn) = session(&home, &[], &["files"]);
    // Short enough to be shown whole (60 characters once escaped).
    let hostile = "../\u{9b}\u{1b}\n\u{202e}x\u{2066}\u{2028}\u{85}";
    let (_, response) = call(&conn, "FILE_STAT", json!({"path": hostile}));
    assert_eq!(response["type"], "ERROR", "{response}");
    let record = home.wait_record("JAIL_VIOLATION", WAIT);
    assert_eq!(record["details"]["path"], hostile);

    // The summary: one line, everything escaped.
    let out = home
        .command(&[
            "audit",
            "tail",
            "--op",
            "JAIL_VIOLATION",
            "--session",
            SESSION,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let raw: Vec<char> = text.chars().filter(|&c| is_terminal_control(c)).collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in\n{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.ends_with("  FILE_STAT ../\\u{9b}\\u{1b}\\n\\u{202e}x\\u{2066}\\u{2028}\\u{85}\n"),
        "{text}"
    );

    // The record line: JSON escapes, the same record once parsed.
    let out = home
        .command(&["audit", "tail", "--json", "--op", "JAIL_VIOLATION"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let raw: Vec<char> = text.chars().filter(|&c| is_terminal_control(c)).collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in\n{text}");
    let shown: Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(shown, record);
    stop_and_verify(&home, shim);
}
