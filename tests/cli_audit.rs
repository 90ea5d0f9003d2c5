//! `autogpt-shim audit …` through the real binary (CLI.md §4.5, AUDIT.md
//! §10–§11): every output line and exit code of `tail`, `show`, `verify`,
//! `verify-all`, `rotate`, `prune` and `export`, the tail anchor and file
//! link checks, `tail`'s columns, filters and `--json` lines, local times
//! under a fixed `TZ`, and exit 0 of `tail --follow` on SIGINT/SIGTERM.
//!
//! Each test runs the binary in an isolated environment: `HOME` and the XDG
//! directories in a temporary directory, the log path from
//! `AUTOGPT_SHIM_AUDIT_LOG_PATH`, and the encrypted-file secret store (no
//! D-Bus session, so the keychain probe fails fast) with a key the test
//! stores in `tokens.enc` itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use autogpt_shim::audit::{
    AuditError, AuditKey, AuditLog, Details, Entry, Outcome, RotateReason, WriterOptions,
};
use autogpt_shim::secrets::{Passphrase, SecretString, TokenFile};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_autogpt-shim");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const PASSPHRASE: &str = "test passphrase for the file store";
const KEY_00_1F: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const ZERO_KEY: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// The fixed rotation stamp of logs written here.
const STAMP: &str = "20240405-194120";

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("audit-vectors")
}

fn spec_log() -> Vec<u8> {
    fs::read(vectors().join("spec-12/audit.log")).unwrap()
}

fn key_00_1f() -> AuditKey {
    AuditKey::new((0u8..32).collect()).unwrap()
}

/// An isolated home for one test.
struct Fixture {
    tmp: tempfile::TempDir,
}

/// What a run of the binary produced.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Fixture {
    /// A fixture whose file store holds the key 00..1f.
    fn new() -> Fixture {
        let f = Fixture::without_key();
        f.store_key(KEY_00_1F);
        f
    }

    /// A fixture whose file store holds no key.
    fn without_key() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["home", "state", "config", "logs", "work"] {
            fs::create_dir(tmp.path().join(dir)).unwrap();
        }
        Fixture { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The current log.
    fn log(&self) -> PathBuf {
        self.path("logs/audit.log")
    }

    fn logs(&self) -> PathBuf {
        self.path("logs")
    }

    fn store_dir(&self) -> PathBuf {
        self.path("store")
    }

    fn tokens_file(&self) -> PathBuf {
        self.store_dir().join("tokens.enc")
    }

    fn store_key(&self, hex: &str) {
        let file = TokenFile::new(
            self.store_dir(),
            Passphrase::new(PASSPHRASE.as_bytes().to_vec()).unwrap(),
        );
        file.update(|contents| {
            contents.audit_key = Some(SecretString::from(hex));
            Ok(((), true))
        })
        .unwrap();
    }

    /// The binary with `args` after `audit`, in the isolated environment,
    /// for the log at `log`.
    fn command_for(&self, log: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("audit")
            .args(args)
            .env_clear()
            .env("HOME", self.path("home"))
            .env("XDG_STATE_HOME", self.path("state"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("AUTOGPT_SHIM_AUDIT_LOG_PATH", log)
            .env("AUTOGPT_SHIM_FALLBACK_DIR", self.store_dir())
            .env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", PASSPHRASE)
            .env("TZ", "UTC")
            .current_dir(self.path("work"));
        cmd
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_for(&self.log(), args)
    }

    fn run_for(&self, log: &Path, args: &[&str]) -> Run {
        finish(self.command_for(log, args))
    }

    fn run(&self, args: &[&str]) -> Run {
        finish(self.command(args))
    }

    fn write_log(&self, bytes: &[u8]) {
        fs::write(self.log(), bytes).unwrap();
    }

    /// Writes records with the real writer (this build's version, the
    /// fixed rotation stamp), `SHIM_START` first when the file is new.
    fn writer(&self) -> (AuditLog, autogpt_shim::audit::WriterThread) {
        let mut options = WriterOptions::new(self.log(), VERSION);
        options.machine_id = Some("machine-1".into());
        options.stamp = Arc::new(|_| STAMP.to_owned());
        // Another test forking a child at the moment this test's previous
        // writer still held the lock gives the child a copy of the lock's
        // descriptor until its exec closes it: wait that moment out.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match AuditLog::open(options.clone(), key_00_1f()) {
                Err(AuditError::Locked(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                result => return result.unwrap(),
            }
        }
    }

    /// A fresh log with `SHIM_START` and `n` more records.
    fn written_log(&self, n: u64) {
        let (log, thread) = self.writer();
        log.write(Entry::event(
            "SHIM_START",
            Details::new().with("shim_version", json!(VERSION)),
        ))
        .unwrap();
        for i in 0..n {
            log.write(Entry::event(
                "TOKEN_REFRESHED",
                Details::new().with("i", json!(i)),
            ))
            .unwrap();
        }
        drop(log);
        thread.join();
    }

    fn rotated(&self, suffix: &str) -> PathBuf {
        self.logs().join(format!("audit.log.{suffix}"))
    }
}

fn finish(mut cmd: Command) -> Run {
    let out = cmd.output().expect("binary runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

// ---- verify (§10.2) ------------------------------------------------------------

#[test]
fn verify_accepts_the_specification_example() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "audit.log: OK\n");
    // The keychain is unusable here: the file-store warning is on stderr.
    assert!(
        run.stderr.contains("encrypted file store"),
        "{}",
        run.stderr
    );
}

#[test]
fn verify_reports_every_tamper_vector_as_specified() {
    let f = Fixture::new();
    let zero = Fixture::new();
    zero.store_key(ZERO_KEY);
    let tamper = vectors().join("tamper");
    let mut cases: Vec<String> = fs::read_dir(&tamper)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".log").map(str::to_owned))
        .collect();
    cases.sort();
    assert!(cases.len() >= 18, "{cases:?}");
    for case in cases {
        let dir = f.path(&format!("tamper/{case}"));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("audit.log");
        fs::copy(tamper.join(format!("{case}.log")), &log).unwrap();
        let key_name = fs::read_to_string(tamper.join(format!("{case}.key"))).unwrap();
        let fixture = if key_name.trim() == "zero-key.hex" {
            &zero
        } else {
            &f
        };
        let run = fixture.run_for(&log, &["verify"]);
        let expected = fs::read_to_string(tamper.join(format!("{case}.expected"))).unwrap();
        let expected: Vec<&str> = expected.lines().collect();
        let got = lines(&run.stdout);
        if expected.is_empty() {
            assert_eq!(run.code, Some(0), "{case}: {run:?}");
            assert_eq!(got, ["audit.log: OK"], "{case}");
            continue;
        }
        assert_eq!(run.code, Some(1), "{case}: {run:?}");
        assert_eq!(
            got[0],
            format!("audit.log: {} violation(s)", expected.len()),
            "{case}"
        );
        assert_eq!(got.len(), expected.len() + 1, "{case}: {got:?}");
        for (line, want) in got[1..].iter().zip(&expected) {
            let line = line.strip_prefix("  ").expect("two leading spaces");
            match want.strip_suffix('*') {
                Some(prefix) => assert!(line.starts_with(prefix), "{case}: {line}"),
                None => assert_eq!(line, *want, "{case}"),
            }
        }
    }
}

#[test]
fn verify_of_a_missing_log_exits_1() {
    let f = Fixture::new();
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .contains(&format!("Audit log not found: {}", f.log().display())),
        "{run:?}"
    );
    assert!(!f.log().exists(), "verify never creates the log");
}

#[test]
fn key_commands_without_a_stored_key_exit_2_and_create_none() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    for args in [
        &["verify"][..],
        &["verify-all"],
        &["export", "--output", "out.zip"],
        &["rotate"],
    ] {
        let run = f.run(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(
            run.stderr.contains("Could not load audit key: "),
            "{args:?}: {run:?}"
        );
        assert!(!f.tokens_file().exists(), "{args:?} created a key store");
    }
    assert_eq!(fs::read(f.log()).unwrap(), spec_log(), "log untouched");
    assert!(!f.path("work/out.zip").exists());
    assert!(
        fs::read_dir(f.logs()).unwrap().count() == 1,
        "nothing rotated"
    );
}

#[test]
fn key_commands_without_a_passphrase_exit_2() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let mut cmd = f.command(&["verify"]);
    cmd.env_remove("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE");
    let run = finish(cmd);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("Could not load audit key: "), "{run:?}");
    assert!(run.stderr.contains("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE"));
    assert!(!run.stderr.contains(KEY_00_1F));
}

#[test]
fn verify_never_prints_the_key() {
    let f = Fixture::new();
    f.written_log(3);
    for args in [&["verify"][..], &["verify-all"], &["rotate"]] {
        let run = f.run(args);
        assert!(!run.stdout.contains(KEY_00_1F) && !run.stderr.contains(KEY_00_1F));
    }
}

// ---- the tail anchor (§4) ------------------------------------------------------

#[test]
fn verify_accepts_a_log_written_by_this_shim_with_its_anchor() {
    let f = Fixture::new();
    f.written_log(3);
    assert!(f.logs().join("audit.log.anchor").exists());
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "audit.log: OK\n");
}

#[test]
fn verify_detects_records_cut_at_a_line_boundary_through_the_anchor() {
    let f = Fixture::new();
    f.written_log(3);
    let bytes = fs::read(f.log()).unwrap();
    // Drop the last record (seq 4) whole: the chain alone still verifies.
    let body = &bytes[..bytes.len() - 1];
    let cut = body.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    f.write_log(&bytes[..cut]);
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let got = lines(&run.stdout);
    assert_eq!(got[0], "audit.log: 1 violation(s)");
    assert!(got[1].starts_with("  [tail_truncated] seq=4: "), "{got:?}");
    assert_eq!(got.len(), 2);
}

#[test]
fn verify_accepts_records_written_after_the_anchored_one() {
    // A crash between the sync and the anchor update leaves the anchor one
    // step behind: that is not truncation.
    let f = Fixture::new();
    f.written_log(2);
    let anchor = fs::read(f.logs().join("audit.log.anchor")).unwrap();
    f.written_log(0); // appends one more SHIM_START
    fs::write(f.logs().join("audit.log.anchor"), anchor).unwrap();
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn verify_reports_a_forged_anchor_as_anchor_invalid() {
    let f = Fixture::new();
    f.written_log(3);
    let path = f.logs().join("audit.log.anchor");
    let mut anchor: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    anchor["seq"] = json!(2);
    fs::write(&path, format!("{anchor}\n")).unwrap();
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        lines(&run.stdout)[..2],
        [
            "audit.log: 1 violation(s)",
            "  [anchor_invalid] seq=?: tail anchor is malformed or its MAC does not verify with this key"
        ]
    );
}

#[test]
fn verify_reports_a_deleted_anchor_of_a_shim_log_as_anchor_missing() {
    let f = Fixture::new();
    f.written_log(3);
    fs::remove_file(f.logs().join("audit.log.anchor")).unwrap();
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let got = lines(&run.stdout);
    assert_eq!(got[0], "audit.log: 1 violation(s)");
    assert!(got[1].starts_with("  [anchor_missing] seq=?: "), "{got:?}");
}

#[test]
fn a_log_starting_with_audit_rotated_needs_an_anchor_too() {
    let f = Fixture::new();
    f.written_log(1);
    let (log, thread) = f.writer();
    log.rotate(RotateReason::Explicit).unwrap();
    drop(log);
    thread.join();
    fs::remove_file(f.logs().join("audit.log.anchor")).unwrap();
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.contains("[anchor_missing] seq=?"), "{run:?}");
}

#[test]
fn verify_accepts_the_crash_windows_of_a_rotation() {
    let f = Fixture::new();
    f.written_log(2);
    let anchor_path = f.logs().join("audit.log.anchor");
    let before = fs::read(&anchor_path).unwrap();
    let (log, thread) = f.writer();
    log.rotate(RotateReason::Explicit).unwrap();
    drop(log);
    thread.join();
    // Crash after AUDIT_ROTATED was synced, before the anchor moved on.
    fs::write(&anchor_path, &before).unwrap();
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    // Crash after the new file was created, before AUDIT_ROTATED.
    f.write_log(b"");
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn verify_detects_an_emptied_log_whose_anchor_vouches_for_it() {
    let f = Fixture::new();
    f.written_log(2);
    f.write_log(b"");
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stdout.contains("  [tail_truncated] seq=3: "),
        "{}",
        run.stdout
    );
}

// ---- verify-all (§10.3, §9.4) ---------------------------------------------------

/// A current file and two rotated files, linked by `AUDIT_ROTATED`.
fn three_linked_files(f: &Fixture) {
    f.written_log(2);
    let (log, thread) = f.writer();
    log.rotate(RotateReason::Explicit).unwrap();
    log.write(Entry::event("TOKEN_REFRESHED", Details::new()))
        .unwrap();
    log.rotate(RotateReason::Explicit).unwrap();
    log.write(Entry::event("TOKEN_REFRESHED", Details::new()))
        .unwrap();
    drop(log);
    thread.join();
}

#[test]
fn verify_all_checks_current_then_rotated_files_in_order() {
    let f = Fixture::new();
    three_linked_files(&f);
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        format!(
            "audit.log: OK\naudit.log.{STAMP}: OK\naudit.log.{STAMP}-1: OK\n\nAll 3 files verified clean.\n"
        )
    );
}

#[test]
fn verify_all_reports_a_deleted_rotated_file_as_file_link_break() {
    let f = Fixture::new();
    three_linked_files(&f);
    fs::remove_file(f.rotated(STAMP)).unwrap();
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        lines(&run.stdout),
        [
            "audit.log: OK".to_owned(),
            format!("audit.log.{STAMP}-1: 1 violation(s)"),
            format!("  [file_link_break] seq=1: previous file audit.log.{STAMP} is missing"),
            String::new(),
            "1 of 2 files have violations.".to_owned(),
        ]
    );
}

#[test]
fn verify_all_reports_a_replaced_rotated_file_as_file_link_break() {
    let f = Fixture::new();
    three_linked_files(&f);
    // Same name, other content: the link names another last record.
    fs::write(f.rotated(STAMP), spec_log()).unwrap();
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stdout.contains(&format!(
            "audit.log.{STAMP}-1: 1 violation(s)\n  [file_link_break] seq=1: previous file audit.log.{STAMP} does not end with seq=3"
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn verify_all_orders_counters_as_integers_and_ignores_other_names() {
    let f = Fixture::new();
    for suffix in [
        "20240405-194120-10",
        "20240405-194120-2",
        "20240405-194120",
        "20230101-000000",
    ] {
        fs::write(f.rotated(suffix), spec_log()).unwrap();
    }
    for other in [
        "audit.log.bak",
        "audit.log.20240405-194120-02",
        "audit.log.20240405-1941",
    ] {
        fs::write(f.logs().join(other), b"garbage\n").unwrap();
    }
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        "audit.log.20230101-000000: OK\naudit.log.20240405-194120: OK\n\
         audit.log.20240405-194120-2: OK\naudit.log.20240405-194120-10: OK\n\
         \nAll 4 files verified clean.\n"
    );
}

#[test]
fn verify_all_counts_files_with_violations() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let mut bad = spec_log();
    bad.pop();
    fs::write(f.rotated(STAMP), &bad).unwrap();
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        format!(
            "audit.log: OK\naudit.log.{STAMP}: 1 violation(s)\n  [truncated] seq=?: audit log does not end with newline — last record truncated\n\n1 of 2 files have violations.\n"
        )
    );
}

#[test]
fn verify_all_without_logs_says_so_and_exits_0() {
    let f = Fixture::new();
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "No audit logs found.\n");
}

// ---- show (§11.2) -----------------------------------------------------------------

#[test]
fn show_prints_the_record_indented_in_on_disk_order() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let run = f.run(&["show", "1"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        r#"# from audit.log
# ts 1712345678.123 is 2024-04-05T19:34:38.123000+00:00 local time
{
  "ts": 1712345678.123,
  "session_id": "-",
  "machine_id": "123e4567-e89b-12d3-a456-426614174000",
  "shim_version": "0.0.1-experimental",
  "request_id": null,
  "op": "SHIM_START",
  "details": {
    "shim_version": "0.0.1-experimental"
  },
  "result": {
    "ok": true,
    "exit_code": null,
    "duration_ms": 0,
    "error_code": null
  },
  "seq": 1,
  "prev_hmac": null,
  "hmac": "9539767e5fbec98a085f52be2df847f7d54c09915869817bebdf36464b0fa9bd"
}
"#
    );
}

#[test]
fn show_keeps_escapes_raw_non_ascii_arrays_and_float_text() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let run = f.run(&["show", "2"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let expected_details = "  \"details\": {\n    \"command\": \"echo \\\"café\\\"\\tdone\\nls C:\\\\tmp\\u0001 😀\",\n    \"argv\": null,\n    \"shell\": \"auto\",\n    \"cwd\": \"/home/alice/autogpt-workspace\",\n    \"env_keys\": [\n      \"HOME\",\n      \"LANG\",\n      \"PATH\",\n      \"PYTHONIOENCODING\",\n      \"SECRET_TOKEN\"\n    ],\n    \"timeout_seconds\": 30\n  },\n";
    assert!(run.stdout.contains(expected_details), "{}", run.stdout);
    let run = f.run(&["show", "3"]);
    assert!(run.stdout.contains("\n  \"ts\": 1712345680.0,\n"));
    let run = f.run(&["show", "4"]);
    assert!(run.stdout.contains("\n  \"ts\": 1739064314.9882812,\n  "));
    assert!(run.stdout.contains("\n  \"details\": {},\n"));
}

#[test]
fn show_searches_the_current_file_first_then_rotated_files() {
    let f = Fixture::without_key();
    // The current file has seq 1 only; the rotated files have 1–4.
    let spec = spec_log();
    let first_line = spec.iter().position(|&b| b == b'\n').unwrap() + 1;
    f.write_log(&spec[..first_line]);
    fs::write(f.rotated("20240101-000000"), &spec).unwrap();
    fs::write(f.rotated("20240101-000000-1"), &spec).unwrap();
    let run = f.run(&["show", "1"]);
    assert!(run.stdout.starts_with("# from audit.log\n"), "{run:?}");
    let run = f.run(&["show", "3"]);
    assert_eq!(run.code, Some(0));
    assert!(
        run.stdout.starts_with("# from audit.log.20240101-000000\n"),
        "{run:?}"
    );
}

#[test]
fn show_skips_blank_and_unparseable_lines() {
    let f = Fixture::without_key();
    let mut log = b"\n   \nnot json\n{\"seq\": 7, oops\n".to_vec();
    log.extend_from_slice(&spec_log());
    f.write_log(&log);
    let run = f.run(&["show", "2"]);
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn show_of_an_unknown_seq_exits_1() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let run = f.run(&["show", "99"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.stdout,
        format!(
            "No record with seq=99 in {} or rotated files.\n",
            f.log().display()
        )
    );
}

#[test]
fn show_needs_an_integer_seq() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    for args in [
        &["show"][..],
        &["show", "abc"],
        &["show", "1.5"],
        &["show", "1", "2"],
    ] {
        let run = f.run(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty());
        assert!(run.stderr.contains("Usage: autogpt-shim"), "{run:?}");
    }
}

// ---- usage --------------------------------------------------------------------------

#[test]
fn audit_usage_errors_exit_2() {
    let f = Fixture::without_key();
    for args in [
        &[][..],
        &["frobnicate"],
        &["verify", "extra"],
        &["verify", "--output", "x"],
        &["export", "--output"],
        &["export", "--older-than", "5d"],
        &["prune", "--output", "x"],
        &["tail", "-f"],
    ] {
        let run = f.run(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(run.stderr.contains("Usage: autogpt-shim"), "{run:?}");
    }
}

#[test]
fn audit_subcommands_parse_to_typed_values() {
    use autogpt_shim::audit::Filter;
    use autogpt_shim::cli::{AuditCommand, Command as Cmd, Parsed, TailOptions, parse};
    let parsed = |args: &[&str]| match parse(args.iter().map(|a| a.to_string())) {
        Ok(Parsed::Run(invocation)) => match invocation.command {
            Cmd::Audit(command) => command,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(
        parsed(&["audit", "tail"]),
        AuditCommand::Tail(TailOptions::default())
    );
    assert_eq!(
        parsed(&[
            "audit",
            "tail",
            "--follow",
            "--json",
            "--session",
            "s-1",
            "--op=FILE_MOVE"
        ]),
        AuditCommand::Tail(TailOptions {
            follow: true,
            json: true,
            filter: Filter {
                session: Some("s-1".into()),
                op: Some("FILE_MOVE"),
            },
        })
    );
    assert_eq!(
        parsed(&["audit", "show", "42"]),
        AuditCommand::Show { seq: 42 }
    );
    assert_eq!(parsed(&["audit", "verify"]), AuditCommand::Verify);
    assert_eq!(parsed(&["audit", "verify-all"]), AuditCommand::VerifyAll);
    assert_eq!(parsed(&["audit", "rotate"]), AuditCommand::Rotate);
    assert_eq!(
        parsed(&["audit", "export"]),
        AuditCommand::Export { output: None }
    );
    assert_eq!(
        parsed(&["audit", "export", "--output=/tmp/x.zip"]),
        AuditCommand::Export {
            output: Some(PathBuf::from("/tmp/x.zip"))
        }
    );
    assert_eq!(
        parsed(&["audit", "prune", "--older-than", "12h"]),
        AuditCommand::Prune {
            older_than: Some("12h".into())
        }
    );
    assert_eq!(
        parsed(&["--log-level", "debug", "audit", "prune"]),
        AuditCommand::Prune { older_than: None }
    );
}

#[test]
fn audit_commands_with_an_invalid_configuration_exit_78() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let dir = f.path("config/autogpt-local-executor");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("config.toml"), "max_concurrent = \"many\"\n").unwrap();
    for args in [&["verify"][..], &["tail"], &["prune"]] {
        let run = f.run(args);
        assert_eq!(run.code, Some(78), "{args:?}: {run:?}");
        assert!(run.stderr.contains("configuration error"), "{run:?}");
    }
}

#[test]
fn help_lists_the_audit_command() {
    let run = finish({
        let mut cmd = Command::new(BIN);
        cmd.arg("--help").env_clear();
        cmd
    });
    // The command column is as wide as the longest command name.
    let listed = run.stdout.lines().any(|line| {
        line.strip_prefix("  audit ")
            .is_some_and(|rest| rest.trim_start().starts_with("audit log tools"))
    });
    assert!(listed, "{run:?}");
}

// ---- rotate (§11.3) ------------------------------------------------------------------

#[test]
fn rotate_moves_the_log_aside_and_starts_a_linked_file() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let run = f.run(&["rotate"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let rotated: Vec<PathBuf> = fs::read_dir(f.logs())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with("audit.log.") && name != "audit.log.anchor"
        })
        .collect();
    assert_eq!(rotated.len(), 1, "{rotated:?}");
    assert_eq!(run.stdout, format!("Rotated to {}\n", rotated[0].display()));
    assert_eq!(fs::read(&rotated[0]).unwrap(), spec_log());
    let current = fs::read_to_string(f.log()).unwrap();
    let first: Value = serde_json::from_str(current.lines().next().unwrap()).unwrap();
    assert_eq!(first["op"], "AUDIT_ROTATED");
    assert_eq!(first["details"]["reason"], "explicit");
    assert_eq!(first["details"]["previous_last_seq"], 4);
    let run = f.run(&["verify-all"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.ends_with("All 2 files verified clean.\n"));
}

#[test]
fn rotate_of_a_torn_log_rotates_it_once_for_recovery() {
    let f = Fixture::new();
    let mut torn = spec_log();
    torn.truncate(torn.len() - 40);
    f.write_log(&torn);
    let run = f.run(&["rotate"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        format!("Rotated to {}\n", f.rotated(&rotated_stamp(&f)).display())
    );
    assert_eq!(fs::read(f.rotated(&rotated_stamp(&f))).unwrap(), torn);
    let current = fs::read_to_string(f.log()).unwrap();
    assert_eq!(current.lines().count(), 1, "only AUDIT_ROTATED: {current}");
    let first: Value = serde_json::from_str(current.lines().next().unwrap()).unwrap();
    assert_eq!(first["details"]["reason"], "recovery");
    assert_eq!(first["details"]["previous_last_seq"], 3);
}

/// The stamp of the only rotated file in the log directory.
fn rotated_stamp(f: &Fixture) -> String {
    let names: Vec<String> = fs::read_dir(f.logs())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_prefix("audit.log.").map(str::to_owned))
        .filter(|n| n != "anchor")
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

#[test]
fn rotate_of_an_empty_log_does_nothing() {
    let f = Fixture::new();
    f.write_log(b"");
    let run = f.run(&["rotate"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "Audit log was empty; nothing to rotate.\n");
    assert_eq!(fs::read(f.log()).unwrap(), b"");
    assert!(!f.rotated(STAMP).exists());
}

#[test]
fn rotate_of_a_missing_log_exits_1_and_creates_nothing() {
    let f = Fixture::new();
    let run = f.run(&["rotate"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("Audit log not found: "), "{run:?}");
    assert!(!f.log().exists());
}

#[test]
fn rotate_while_a_daemon_holds_the_lock_exits_75() {
    let f = Fixture::new();
    f.written_log(1);
    let (log, thread) = f.writer();
    let run = f.run(&["rotate"]);
    assert_eq!(run.code, Some(75), "{run:?}");
    assert!(
        run.stderr.contains("in use by another shim process"),
        "{run:?}"
    );
    drop(log);
    thread.join();
    let mut names: Vec<String> = fs::read_dir(f.logs())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // Nothing was rotated: the log, its anchor, the anchor's spare, the lock.
    assert_eq!(
        names,
        [
            ".audit.log.anchor.tmp",
            ".audit.log.lock",
            "audit.log",
            "audit.log.anchor"
        ]
    );
}

// ---- prune (§11.5) --------------------------------------------------------------------

#[test]
fn prune_deletes_rotated_files_whose_newest_record_is_older() {
    let f = Fixture::new();
    f.written_log(1); // recent records in the current file
    fs::write(f.rotated("20240101-000000"), spec_log()).unwrap();
    // A recent rotated file.
    let (log, thread) = f.writer();
    log.rotate(RotateReason::Explicit).unwrap();
    drop(log);
    thread.join();
    let run = f.run(&["prune"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        "Deleted audit.log.20240101-000000 (newest_ts=1739064315)\n\nPruned 1 of 2 rotated files.\n"
    );
    assert!(!f.rotated("20240101-000000").exists());
    assert!(f.rotated(STAMP).exists());
    assert!(f.log().exists(), "the current file is never deleted");
}

#[test]
fn prune_reads_back_past_a_torn_tail_and_long_records() {
    let f = Fixture::new();
    f.write_log(b"");
    // The last complete record is old and longer than 8 KiB, followed by a
    // torn fragment.
    let mut log = spec_log();
    let long = json!({"ts": 1000.0, "op": "X", "pad": "p".repeat(20_000)});
    log.extend_from_slice(format!("{long}\n").as_bytes());
    log.extend_from_slice(b"{\"ts\": 99999999999.0, \"op\"");
    fs::write(f.rotated("20240101-000000"), &log).unwrap();
    let run = f.run(&["prune", "--older-than", "1d"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        "Deleted audit.log.20240101-000000 (newest_ts=1000)\n\nPruned 1 of 1 rotated files.\n"
    );
}

#[test]
fn prune_skips_files_without_a_readable_newest_record() {
    let f = Fixture::new();
    fs::write(f.rotated("20240101-000000"), b"not json\n").unwrap();
    fs::write(f.rotated("20240101-000001"), b"no newline at all").unwrap();
    let run = f.run(&["prune", "--older-than=0s"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stderr
            .contains("Skipped audit.log.20240101-000000: cannot read newest record")
    );
    assert!(
        run.stderr
            .contains("Skipped audit.log.20240101-000001: cannot read newest record")
    );
    assert_eq!(run.stdout, "\nPruned 0 of 2 rotated files.\n");
    assert!(f.rotated("20240101-000000").exists());
}

#[test]
fn prune_counts_a_missing_ts_as_zero() {
    let f = Fixture::new();
    fs::write(f.rotated("20240101-000000"), b"{\"op\": \"X\"}\n").unwrap();
    let run = f.run(&["prune"]);
    assert_eq!(
        run.stdout,
        "Deleted audit.log.20240101-000000 (newest_ts=0)\n\nPruned 1 of 1 rotated files.\n"
    );
}

#[test]
fn prune_refuses_a_negative_or_malformed_duration_and_deletes_nothing() {
    let f = Fixture::new();
    fs::write(f.rotated("20240101-000000"), spec_log()).unwrap();
    for value in ["-5d", "5", "5w", "", "1_0d", " 5d", "+5d"] {
        let run = f.run(&["prune", &format!("--older-than={value}")]);
        assert_eq!(run.code, Some(2), "{value:?}: {run:?}");
        assert_eq!(
            run.stderr.lines().last().unwrap(),
            format!("Could not parse duration: '{value}'. Use e.g. 90d, 12h, 30m."),
        );
        assert!(f.rotated("20240101-000000").exists(), "{value:?}");
    }
    // As the next argument, a leading '-' reads as an option: still exit 2.
    let run = f.run(&["prune", "--older-than", "-5d"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(f.rotated("20240101-000000").exists());
}

#[test]
fn prune_without_rotated_files_says_so() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let run = f.run(&["prune"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "No rotated audit files to prune.\n");
}

// ---- export (§11.4) ------------------------------------------------------------------

/// The archive's entries as `(name, bytes)` through Python's `zipfile`,
/// after `python3 -m zipfile -t` accepted it.
fn python_zip_entries(archive: &Path) -> Vec<(String, Vec<u8>)> {
    let test = Command::new("python3")
        .args(["-m", "zipfile", "-t"])
        .arg(archive)
        .output()
        .expect("python3 runs");
    assert!(test.status.success(), "{test:?}");
    let script = "import sys, zipfile, json\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  print(json.dumps([[i.filename, z.read(i).hex()] for i in z.infolist()]))";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let list: Vec<(String, String)> = serde_json::from_slice(&out.stdout).unwrap();
    list.into_iter()
        .map(|(name, hex)| {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (name, bytes)
        })
        .collect()
}

#[test]
fn export_writes_logs_manifest_and_signature() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let rotated = spec_log()[..spec_log().iter().position(|&b| b == b'\n').unwrap() + 1].to_vec();
    fs::write(f.rotated(STAMP), &rotated).unwrap();
    let out = f.path("work/bundle.zip");
    let run = f.run(&["export", "--output", out.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let got = lines(&run.stdout);
    assert_eq!(got[0], format!("Wrote {}", out.display()));
    assert_eq!(got[1], "  files: 2");
    let sig = got[2]
        .strip_prefix("  signature (HMAC-SHA256): ")
        .unwrap()
        .to_owned();
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let entries = python_zip_entries(&out);
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    let rotated_name = format!("audit.log.{STAMP}");
    assert_eq!(
        names,
        [
            "audit.log",
            rotated_name.as_str(),
            "manifest.json",
            "manifest.sig"
        ]
    );
    assert_eq!(entries[0].1, spec_log());
    assert_eq!(entries[1].1, rotated);
    let manifest = &entries[2].1;
    assert_eq!(String::from_utf8(entries[3].1.clone()).unwrap(), sig);
    assert_eq!(key_00_1f().hmac_hex(manifest), sig);
    let parsed: Value = serde_json::from_slice(manifest).unwrap();
    assert_eq!(parsed["key_username"], "audit_key");
    assert_eq!(parsed["files"][0]["name"], "audit.log");
    assert_eq!(
        parsed["files"][0]["sha256"],
        "7fc43a2ee52029b051bcc0d5659cca40a331301bc83cf0d79e8f08756f68df2b"
    );
    assert_eq!(parsed["files"][0]["size"], 2105);
    assert_eq!(parsed["files"][1]["name"], rotated_name.as_str());
    let at = parsed["exported_at"].as_str().unwrap();
    assert!(at.ends_with("+00:00") && at.len() == 32, "{at}");
    // No temporary file is left next to it.
    assert_eq!(fs::read_dir(f.path("work")).unwrap().count(), 1);
}

#[test]
fn export_names_its_default_output_after_the_local_time() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let run = f.run(&["export"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let first = lines(&run.stdout)[0];
    let path = first.strip_prefix("Wrote ./").unwrap();
    let stamp = path
        .strip_prefix("audit-export-")
        .and_then(|p| p.strip_suffix(".zip"))
        .unwrap();
    assert_eq!(stamp.len(), 15);
    assert!(stamp.chars().enumerate().all(|(i, c)| if i == 8 {
        c == '-'
    } else {
        c.is_ascii_digit()
    }));
    assert!(f.path("work").join(path).exists());
}

#[test]
fn export_refuses_an_existing_output_with_exit_73() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let out = f.path("work/bundle.zip");
    fs::write(&out, b"precious").unwrap();
    let run = f.run(&["export", "--output", out.to_str().unwrap()]);
    assert_eq!(run.code, Some(73), "{run:?}");
    assert!(run.stderr.contains("already exists"), "{run:?}");
    assert_eq!(fs::read(&out).unwrap(), b"precious");
    assert_eq!(fs::read_dir(f.path("work")).unwrap().count(), 1);
}

#[test]
fn export_to_an_uncreatable_output_exits_73() {
    let f = Fixture::new();
    f.write_log(&spec_log());
    let out = f.path("no/such/dir/bundle.zip");
    let run = f.run(&["export", "--output", out.to_str().unwrap()]);
    assert_eq!(run.code, Some(73), "{run:?}");
}

#[test]
fn export_without_logs_exits_1() {
    let f = Fixture::new();
    let run = f.run(&["export", "--output", "x.zip"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "Nothing to export — no audit logs present.\n");
    assert!(!f.path("work/x.zip").exists());
}

// ---- tail (§11.1) and its signals ----------------------------------------------------

/// Reads the child's stdout lines on a thread.
fn line_reader(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn expect_lines(rx: &Receiver<String>, expected: &[&str]) {
    for want in expected {
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no line; expected {want:?}"));
        assert_eq!(got, *want);
    }
}

fn append(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn wait_for_exit(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(Instant::now() < deadline, "tail did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

/// `audit tail` of the worked example under `TZ=UTC`.
const SPEC_TAIL: [&str; 4] = [
    "2024-04-05T19:34:38+00:00      1  -             SHIM_START                  0ms  ok         version 0.0.1-experimental",
    "2024-04-05T19:34:39+00:00      2  sess-7f3a     EXECUTE_COMMAND           124ms  ok exit=0  echo \"café\"\\tdone\\nls C:\\tmp\\u{1} 😀",
    "2024-04-05T19:34:40+00:00      3  sess-7f3a     JAIL_VIOLATION              0ms  err:PATH_OUTSIDE_ALLOWED_ROOT  FILE_READ ../../etc/passwd",
    "2025-02-09T01:25:14+00:00      4  sess-7f3a     TOKEN_REFRESHED             0ms  ok",
];

#[test]
fn tail_follows_appends_and_rotation_and_exits_0_on_sigterm() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let mut child = f
        .command(&["tail", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut child);
    expect_lines(&rx, &SPEC_TAIL);

    // Appends, including a torn line completed later, blank and bad lines.
    append(
        &f.log(),
        b"\n  \nnot json\n{\"seq\": 5, \"op\": \"WS_CONNECTED\", ",
    );
    expect_lines(&rx, &["[unparseable] not json"]);
    append(
        &f.log(),
        b"\"result\": {\"ok\": false, \"error_code\": null}}\n",
    );
    expect_lines(
        &rx,
        &["?                              5  ?             WS_CONNECTED                  -  err"],
    );

    // Rotation: the old file's last line arrives, then the new file from
    // its start.
    append(
        &f.log(),
        b"{\"seq\": 6, \"op\": \"SHIM_STOP\", \"result\": {\"ok\": true}}\n",
    );
    fs::rename(f.log(), f.rotated(STAMP)).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    fs::write(
        f.log(),
        b"{\"seq\": 1, \"op\": \"AUDIT_ROTATED\", \"result\": {\"ok\": true}}\n",
    )
    .unwrap();
    expect_lines(
        &rx,
        &[
            "?                              6  ?             SHIM_STOP                     -  ok",
            "?                              1  ?             AUDIT_ROTATED                 -  ok",
        ],
    );
    append(
        &f.log(),
        b"{\"seq\": 2, \"op\": \"WS_CONNECTED\", \"result\": {\"ok\": true}}\n",
    );
    expect_lines(
        &rx,
        &["?                              2  ?             WS_CONNECTED                  -  ok"],
    );

    // A log truncated in place is read again from its start.
    fs::OpenOptions::new()
        .write(true)
        .open(f.log())
        .unwrap()
        .set_len(0)
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    append(
        &f.log(),
        b"{\"seq\": 1, \"op\": \"SHIM_START\", \"result\": {\"ok\": true}}\n",
    );
    expect_lines(
        &rx,
        &["?                              1  ?             SHIM_START                    -  ok"],
    );

    signal(&child, rustix::process::Signal::TERM);
    assert_eq!(wait_for_exit(&mut child), Some(0));
}

#[test]
fn tail_exits_0_on_sigint() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let mut child = f
        .command(&["tail", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut child);
    expect_lines(&rx, &SPEC_TAIL);
    signal(&child, rustix::process::Signal::INT);
    assert_eq!(wait_for_exit(&mut child), Some(0));
}

#[test]
fn tail_escapes_terminal_controls_and_bidi_overrides_in_records() {
    let f = Fixture::new();
    let (log, thread) = f.writer();
    let hostile = "X\u{9b}2J\u{1b}]0;t\u{7}\u{7f}\u{202e}\u{2066}\u{200b}";
    log.write(Entry {
        op: hostile.into(),
        request_id: None,
        details: Details::new().with("path", json!(hostile)),
        result: Outcome {
            ok: false,
            error_code: Some(hostile.into()),
            ..Outcome::default()
        },
        session_id: None,
    })
    .unwrap();
    drop(log);
    thread.join();
    let written = fs::read_to_string(f.log()).unwrap();
    append(&f.log(), format!("not json {hostile}\n").as_bytes());
    let mut child = f
        .command(&["tail", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut child);
    let shown = r"X\u{9b}2J\u{1b}]0;t\u{7}\u{7f}\u{202e}\u{2066}\u{200b}";
    // Escaped, then cut between escapes to the column's maximum: 32
    // characters for the op, 40 for the error code, `…` included.
    let op = r"X\u{9b}2J\u{1b}]0;t\u{7}\u{7f}…";
    let code = r"X\u{9b}2J\u{1b}]0;t\u{7}\u{7f}\u{202e}…";
    let record_line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let (time, rest) = record_line.split_at(25);
    assert!(time.ends_with("+00:00"), "{record_line}");
    assert_eq!(
        rest,
        format!("      1  -             {op}      0ms  err:{code}")
    );
    expect_lines(&rx, &[&format!("[unparseable] not json {shown}")]);
    signal(&child, rustix::process::Signal::TERM);
    assert_eq!(wait_for_exit(&mut child), Some(0));
    // The log itself is unchanged: the record holds the raw text.
    assert!(fs::read_to_string(f.log()).unwrap().starts_with(&written));
    let record: Value = serde_json::from_str(written.lines().next().unwrap()).unwrap();
    assert_eq!(record["op"], hostile);
    assert_eq!(record["details"]["path"], hostile);
}

#[test]
fn tail_of_a_missing_log_exits_1() {
    let f = Fixture::without_key();
    let run = f.run(&["tail"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("Audit log not found: "), "{run:?}");
}

// ---- the readable views: tail's columns and filters, --json, local times ---------------

/// Central European time as a POSIX TZ string: no zoneinfo file needed.
const BERLIN: &str = "CET-1CEST,M3.5.0,M10.5.0/3";

/// Whether `c` would do something on a terminal other than show itself.
fn is_terminal_control(c: char) -> bool {
    let u = c as u32;
    u < 0x20
        || (0x7f..=0x9f).contains(&u)
        || (0x202a..=0x202e).contains(&u)
        || (0x2066..=0x2069).contains(&u)
        || matches!(u, 0x200b..=0x200f | 0x2028 | 0x2029 | 0x061c | 0xfeff)
}

/// No raw terminal control anywhere in `text` but the line ends.
fn assert_no_raw_controls(text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| c != '\n' && is_terminal_control(c))
        .collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in\n{text}");
}

/// A record of `op` in `session` (`None`: the writer's default, `-`).
fn op_entry(op: &str, session: Option<&str>, details: Details, result: Outcome) -> Entry {
    Entry {
        op: op.into(),
        request_id: Some(format!("req-{op}")),
        details,
        result,
        session_id: session.map(str::to_owned),
    }
}

fn path_details(path: &str) -> Details {
    Details::new().with("path", json!(path))
}

/// The columns after the time: everything from the `seq` on.
fn after_time(line: &str) -> &str {
    line.get(25..)
        .unwrap_or_else(|| panic!("short line {line:?}"))
}

/// Records of two chats and of no session, written by the real writer.
fn two_chats_log(f: &Fixture) {
    let (log, thread) = f.writer();
    let ok = Outcome::default();
    log.write(Entry::event(
        "SHIM_START",
        Details::new().with("shim_version", json!(VERSION)),
    ))
    .unwrap();
    for (op, session, path) in [
        ("FILE_READ", "chat-a", "/w/a/one.txt"),
        ("FILE_READ", "chat-b", "/w/b/two.txt"),
        ("FILE_WRITE", "chat-a", "/w/a/three.txt"),
        ("FILE_READ", "chat-a", "/w/a/four.txt"),
    ] {
        log.write(op_entry(op, Some(session), path_details(path), ok.clone()))
            .unwrap();
    }
    drop(log);
    thread.join();
}

#[test]
fn tail_prints_the_existing_records_one_summary_line_each_and_exits() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let run = f.run(&["tail"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(lines(&run.stdout), SPEC_TAIL);
}

#[test]
fn tail_and_show_print_local_time_in_the_zone_of_tz() {
    let f = Fixture::without_key();
    f.write_log(&spec_log());
    let mut cmd = f.command(&["tail"]);
    cmd.env("TZ", BERLIN);
    let run = finish(cmd);
    assert_eq!(run.code, Some(0), "{run:?}");
    let times: Vec<&str> = lines(&run.stdout).iter().map(|l| &l[..25]).collect();
    // Summer time in April, winter time in February.
    assert_eq!(
        times,
        [
            "2024-04-05T21:34:38+02:00",
            "2024-04-05T21:34:39+02:00",
            "2024-04-05T21:34:40+02:00",
            "2025-02-09T02:25:14+01:00",
        ]
    );
    // The rest of each line does not depend on the zone.
    for (line, utc) in lines(&run.stdout).iter().zip(SPEC_TAIL) {
        assert_eq!(after_time(line), after_time(utc));
    }
    for (seq, note) in [
        (
            "1",
            "# ts 1712345678.123 is 2024-04-05T21:34:38.123000+02:00 local time",
        ),
        (
            "3",
            "# ts 1712345680.0 is 2024-04-05T21:34:40+02:00 local time",
        ),
        (
            "4",
            "# ts 1739064314.9882812 is 2025-02-09T02:25:14.988281+01:00 local time",
        ),
    ] {
        let mut cmd = f.command(&["show", seq]);
        cmd.env("TZ", BERLIN);
        let run = finish(cmd);
        assert_eq!(run.code, Some(0), "{run:?}");
        let shown = lines(&run.stdout);
        assert_eq!(shown[..2], ["# from audit.log", note], "{run:?}");
        // The record after the comment lines is still JSON, unchanged.
        let body: Value = serde_json::from_str(&shown[2..].join("\n")).unwrap();
        assert_eq!(body["seq"].to_string(), seq);
    }
}

#[test]
fn tail_local_time_of_a_fresh_record_agrees_with_date() {
    let f = Fixture::new();
    f.written_log(0);
    let record: Value =
        serde_json::from_str(fs::read_to_string(f.log()).unwrap().lines().next().unwrap()).unwrap();
    let seconds = record["ts"].as_f64().unwrap().floor() as i64;
    let Ok(out) = Command::new("date")
        .env("TZ", BERLIN)
        .arg("-d")
        .arg(format!("@{seconds}"))
        .arg("+%Y-%m-%dT%H:%M:%S%:z")
        .output()
    else {
        println!("skipped: no date command");
        return;
    };
    if !out.status.success() {
        println!("skipped: date -d failed (not GNU date?)");
        return;
    }
    let want = String::from_utf8(out.stdout).unwrap();
    let mut cmd = f.command(&["tail"]);
    cmd.env("TZ", BERLIN);
    let run = finish(cmd);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(&run.stdout[..25], want.trim(), "{run:?}");
}

#[test]
fn tail_session_filter_shows_only_that_sessions_records() {
    let f = Fixture::new();
    two_chats_log(&f);
    let run = f.run(&["tail", "--session", "chat-a"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let shown: Vec<&str> = lines(&run.stdout).into_iter().map(after_time).collect();
    assert_eq!(
        shown,
        [
            "      2  chat-a        FILE_READ                   0ms  ok         /w/a/one.txt",
            "      4  chat-a        FILE_WRITE                  0ms  ok         /w/a/three.txt",
            "      5  chat-a        FILE_READ                   0ms  ok         /w/a/four.txt",
        ]
    );
    // `-` selects the records of no session.
    let run = f.run(&["tail", "--session", "-"]);
    assert_eq!(lines(&run.stdout).len(), 1, "{run:?}");
    assert!(run.stdout.contains("  SHIM_START  "), "{run:?}");
    // Exact match only: no prefix, no other case; nothing matching is not
    // an error.
    for other in ["chat", "CHAT-A", "chat-c"] {
        let run = f.run(&["tail", "--session", other]);
        assert_eq!(run.code, Some(0), "{run:?}");
        assert_eq!(run.stdout, "", "{other}");
    }
}

#[test]
fn tail_op_filter_shows_only_that_operation_and_combines_with_session() {
    let f = Fixture::new();
    two_chats_log(&f);
    let run = f.run(&["tail", "--op", "FILE_READ"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let targets: Vec<&str> = lines(&run.stdout)
        .iter()
        .map(|l| l.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(targets, ["/w/a/one.txt", "/w/b/two.txt", "/w/a/four.txt"]);
    let run = f.run(&["tail", "--op=FILE_READ", "--session=chat-b"]);
    assert_eq!(lines(&run.stdout).len(), 1, "{run:?}");
    assert!(run.stdout.ends_with("  /w/b/two.txt\n"), "{run:?}");
    let run = f.run(&["tail", "--op", "FILE_DELETE"]);
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""));
}

#[test]
fn tail_refuses_an_unknown_op_and_malformed_flags_with_a_usage_error() {
    let f = Fixture::new();
    two_chats_log(&f);
    let run = f.run(&["tail", "--op", "file_read"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stdout.is_empty());
    let message: Vec<&str> = lines(&run.stderr)
        .into_iter()
        .filter(|l| l.contains("--op"))
        .collect();
    assert_eq!(
        message,
        [
            "autogpt-shim: invalid --op (expected an audit operation name such as FILE_READ, \
          EXECUTE_COMMAND or JAIL_VIOLATION): 'file_read'"
        ],
        "{run:?}"
    );
    assert!(run.stderr.contains("Usage: autogpt-shim"), "{run:?}");
    for args in [
        &["tail", "--op"][..],
        &["tail", "--op", "HELLO"],
        &["tail", "--session"],
        &["tail", "--session", ""],
        &["tail", "--follow=yes"],
        &["tail", "--json=1"],
        &["tail", "--lines", "5"],
        &["tail", "extra"],
    ] {
        let run = f.run(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        assert!(run.stderr.contains("Usage: autogpt-shim"), "{run:?}");
    }
}

#[test]
fn tail_shows_the_path_or_command_of_each_operation_cut_to_sixty_characters() {
    let f = Fixture::new();
    let (log, thread) = f.writer();
    let long = format!("/w/{}", "é".repeat(100));
    let failed = Outcome {
        ok: false,
        exit_code: Some(-9),
        duration_ms: 30_000,
        error_code: Some("COMMAND_TIMEOUT".into()),
    };
    let entries = [
        op_entry(
            "FILE_READ",
            Some("c"),
            path_details(&long),
            Outcome::default(),
        ),
        op_entry(
            "FILE_MOVE",
            Some("c"),
            Details::new()
                .with("src", json!("/w/old name"))
                .with("dst", json!("/w/new"))
                .with("overwrite", json!(false)),
            Outcome::default(),
        ),
        op_entry(
            "EXECUTE_COMMAND",
            Some("c"),
            Details::new()
                .with("command", Value::Null)
                .with("argv", json!(["grep", "-r", "two words", "/w"]))
                .with("shell", json!("auto")),
            Outcome {
                exit_code: Some(1),
                duration_ms: 1_234,
                ..Outcome::default()
            },
        ),
        op_entry(
            "EXECUTE_COMMAND",
            Some("c"),
            Details::new().with("command", json!("sleep 100")),
            failed,
        ),
    ];
    for entry in entries {
        log.write(entry).unwrap();
    }
    drop(log);
    thread.join();
    let run = f.run(&["tail"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let shown: Vec<&str> = lines(&run.stdout).into_iter().map(after_time).collect();
    let cut = format!("/w/{}…", "é".repeat(56));
    assert_eq!(cut.chars().count(), 60);
    assert_eq!(
        shown,
        [
            format!("      1  c             FILE_READ                   0ms  ok         {cut}")
                .as_str(),
            "      2  c             FILE_MOVE                   0ms  ok         /w/old name -> /w/new",
            "      3  c             EXECUTE_COMMAND            1.2s  ok exit=1  grep -r 'two words' /w",
            "      4  c             EXECUTE_COMMAND           30.0s  err:COMMAND_TIMEOUT exit=-9  sleep 100",
        ]
    );
}

#[test]
fn tail_shows_hostile_paths_escaped_on_one_line() {
    let f = Fixture::new();
    let (log, thread) = f.writer();
    let hostile = "/w/a\nb\u{2028}\u{85}\u{202e}\u{2066}txt\r\u{1b}[31mred\u{1b}]0;title\u{7}";
    log.write(op_entry(
        "FILE_WRITE",
        Some("chat\u{1b}[2J"),
        path_details(hostile),
        Outcome::default(),
    ))
    .unwrap();
    drop(log);
    thread.join();
    let run = f.run(&["tail"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_no_raw_controls(&run.stdout);
    assert_eq!(lines(&run.stdout).len(), 1, "{run:?}");
    assert!(
        run.stdout
            .ends_with("  /w/a\\nb\\u{2028}\\u{85}\\u{202e}\\u{2066}txt\\r\\u{1b}[31mred…\n"),
        "{run:?}"
    );
    assert!(run.stdout.contains("  chat\\u{1b}[2J  "), "{run:?}");
    // The filter compares with the record, not with what is shown.
    let run = f.run(&["tail", "--session", "chat\u{1b}[2J"]);
    assert_eq!(lines(&run.stdout).len(), 1, "{run:?}");
}

#[test]
fn tail_json_prints_the_record_lines_as_written() {
    let f = Fixture::new();
    two_chats_log(&f);
    let written = fs::read_to_string(f.log()).unwrap();
    let run = f.run(&["tail", "--json"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, written);
    let run = f.run(&["tail", "--json", "--session", "chat-a", "--op", "FILE_READ"]);
    let kept: Vec<&str> = written
        .lines()
        .filter(|l| l.contains("\"session_id\": \"chat-a\"") && l.contains("\"op\": \"FILE_READ\""))
        .collect();
    assert_eq!(kept.len(), 2);
    assert_eq!(lines(&run.stdout), kept);
}

#[test]
fn tail_json_escapes_bidi_and_line_separators_and_keeps_the_record() {
    let f = Fixture::new();
    let (log, thread) = f.writer();
    // JSON escapes C0 controls itself, but not DEL, C1 controls, bidi
    // controls or U+2028/U+2029.
    let hostile =
        "/w/\u{202e}cod.exe\u{2066}\u{2028}\u{2029}\u{85}\u{9b}2J\u{7f}\u{200b}\u{1b}[1m\n";
    log.write(op_entry(
        "FILE_READ",
        Some("c"),
        path_details(hostile),
        Outcome::default(),
    ))
    .unwrap();
    drop(log);
    thread.join();
    let written = fs::read_to_string(f.log()).unwrap();
    assert!(written.contains('\u{202e}') && written.contains('\u{2028}'));
    append(&f.log(), "not json \u{202e}\u{1b}[2J\n".as_bytes());
    let run = f.run(&["tail", "--json"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_no_raw_controls(&run.stdout);
    assert_no_raw_controls(&run.stderr.replace('\n', ""));
    let shown = lines(&run.stdout);
    assert_eq!(shown.len(), 1, "{run:?}");
    assert!(
        shown[0].contains(
            r#""path": "/w/\u202ecod.exe\u2066\u2028\u2029\u0085\u009b2J\u007f\u200b\u001b[1m\n""#
        ),
        "{}",
        shown[0]
    );
    // The same record, once parsed.
    let original: Value = serde_json::from_str(written.lines().next().unwrap()).unwrap();
    let printed: Value = serde_json::from_str(shown[0]).unwrap();
    assert_eq!(printed, original);
    // A line that is not a record goes to stderr, so stdout stays JSON Lines.
    assert!(
        run.stderr
            .contains("[unparseable] not json \\u{202e}\\u{1b}[2J\n"),
        "{run:?}"
    );
}

#[test]
fn tail_leaves_out_an_incomplete_last_line_and_says_so() {
    let f = Fixture::without_key();
    let mut log = spec_log();
    log.extend_from_slice(b"{\"ts\": 1712345690.0, \"seq\": 5, \"op\": \"FILE");
    f.write_log(&log);
    let run = f.run(&["tail"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(lines(&run.stdout), SPEC_TAIL);
    assert!(
        run.stderr.contains(
            "audit.log: the last line is incomplete (still being written, or cut off) and is not shown"
        ),
        "{run:?}"
    );
}

#[test]
fn tail_follow_picks_up_new_records_that_pass_the_filters() {
    let f = Fixture::new();
    two_chats_log(&f);
    let mut child = f
        .command(&[
            "tail",
            "--follow",
            "--session",
            "chat-a",
            "--op",
            "FILE_READ",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut child);
    for want in ["/w/a/one.txt", "/w/a/four.txt"] {
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(line.ends_with(&format!("  {want}")), "{line}");
    }
    // Records of another session or op are left out; the next line shown
    // is the next matching record.
    let (log, thread) = f.writer();
    for (op, session, path) in [
        ("FILE_READ", "chat-b", "/w/b/five.txt"),
        ("FILE_WRITE", "chat-a", "/w/a/six.txt"),
        ("FILE_READ", "chat-a", "/w/a/seven.txt"),
    ] {
        log.write(op_entry(
            op,
            Some(session),
            path_details(path),
            Outcome::default(),
        ))
        .unwrap();
    }
    drop(log);
    thread.join();
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        after_time(&line),
        "      8  chat-a        FILE_READ                   0ms  ok         /w/a/seven.txt"
    );
    assert!(rx.recv_timeout(Duration::from_millis(700)).is_err());
    signal(&child, rustix::process::Signal::TERM);
    assert_eq!(wait_for_exit(&mut child), Some(0));
}

#[test]
fn tail_follow_json_prints_new_record_lines() {
    let f = Fixture::new();
    f.written_log(0);
    let mut child = f
        .command(&["tail", "--follow", "--json", "--op", "TOKEN_REFRESHED"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut child);
    let (log, thread) = f.writer();
    log.write(Entry::event("TOKEN_REFRESHED", Details::new()))
        .unwrap();
    drop(log);
    thread.join();
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let written = fs::read_to_string(f.log()).unwrap();
    assert_eq!(Some(line.as_str()), written.lines().nth(1));
    signal(&child, rustix::process::Signal::INT);
    assert_eq!(wait_for_exit(&mut child), Some(0));
}

// ---- progress ----------------------------------------------------------------------------

/// A log of a few MiB written by the real writer.
fn large_log(f: &Fixture) {
    let (log, thread) = f.writer();
    let pad = "x".repeat(1000);
    let tickets: Vec<_> = (0..3000)
        .map(|i| {
            log.submit(Entry::event(
                "TOKEN_REFRESHED",
                Details::new().with("pad", json!(format!("{i}{pad}"))),
            ))
        })
        .collect();
    for ticket in tickets {
        ticket.wait().unwrap();
    }
    drop(log);
    thread.join();
}

#[test]
fn verify_shows_no_progress_when_stderr_is_not_a_terminal() {
    let f = Fixture::new();
    large_log(&f);
    let run = f.run(&["verify"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(!run.stderr.contains('%'), "{}", run.stderr);
    assert!(!run.stderr.contains('\r'));
}

/// Runs `inner` with a terminal as its stderr (Python's pty module gives
/// it one) and returns Python's repr of `(exit code, stdout, stderr)`.
fn run_with_terminal_stderr(f: &Fixture, inner: &Command) -> String {
    let script = "import os, pty, subprocess, sys\n\
                  m, s = pty.openpty()\n\
                  p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=s)\n\
                  os.close(s)\n\
                  out = p.stdout.read()\n\
                  err = b''\n\
                  while True:\n\
                  \x20   try:\n\
                  \x20       chunk = os.read(m, 65536)\n\
                  \x20   except OSError:\n\
                  \x20       break\n\
                  \x20   if not chunk:\n\
                  \x20       break\n\
                  \x20   err += chunk\n\
                  p.wait()\n\
                  sys.stdout.write(repr((p.returncode, out, err)))\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).arg(inner.get_program());
    cmd.args(inner.get_args());
    cmd.env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.current_dir(f.path("work"));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn verify_shows_progress_on_a_terminal_and_only_there() {
    let f = Fixture::new();
    large_log(&f);
    let text = run_with_terminal_stderr(&f, &f.command(&["verify"]));
    assert!(text.starts_with("(0, b'audit.log: OK\\n', b'"), "{text}");
    assert!(text.contains("\\rverifying audit.log:   "), "{text}");
    assert!(text.contains("%"), "{text}");
    // The progress line is erased at the end, so only results remain.
    assert!(text.ends_with("\\r\\x1b[2K')"), "{text}");
}

#[test]
fn export_shows_progress_on_a_terminal_and_only_there() {
    let f = Fixture::new();
    large_log(&f);
    let text = run_with_terminal_stderr(&f, &f.command(&["export", "--output", "big.zip"]));
    assert!(
        text.starts_with("(0, b'Wrote big.zip\\n  files: 1\\n"),
        "{text}"
    );
    assert!(text.contains("\\rexporting: "), "{text}");
    assert!(text.contains("\\rexporting: 100%"), "{text}");
    assert!(text.ends_with("\\r\\x1b[2K')"), "{text}");
    // Without a terminal: the same result, no progress.
    let run = f.run(&["export", "--output", "quiet.zip"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(!run.stderr.contains("exporting") && !run.stderr.contains('\r'));
}
