//! `autogpt-shim doctor` through the real binary (CLI.md §10): every check
//! on its own line in order, green against the platform emulator over TLS
//! on 127.0.0.1 with the stored token, and red at the right line for a
//! wrong pin, a refused upgrade, missing tokens, a tampered audit log, a
//! closed port and a name that cannot resolve. Doctor changes nothing: no
//! file or folder appears, the audit log keeps its bytes, and neither the
//! token nor the passphrase is printed.
//!
//! Traffic goes to 127.0.0.1 only. The name-resolution test runs the binary
//! in a network namespace of its own (`unshare --net`), where no packet can
//! leave the machine, and uses a name under `.invalid` (RFC 2606); it is
//! skipped where no namespace can be made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use autogpt_shim::audit::{AuditLog, Details, Entry, WriterOptions};
use autogpt_shim::secrets::KeyCheck;
use autogpt_shim_emulator::{
    AttemptOutcome, Emulator, EmulatorOptions, Ending, OllamaEmulator, OllamaOptions, RawKind,
    TagsBehaviour, UpgradeBehaviour,
};
use serde_json::json;
use start_support::{
    ACCESS, BIN, Home, PASSPHRASE, REFRESH, SESSION, WAIT, emulator, platform_args,
};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The lines of a control-mode run on Linux, in order (no clipboard
/// requested).
const CONTROL_LABELS: &[&str] = &[
    "folder_browser",
    "identity",
    "keychain",
    "secret_store",
    "audit_log",
    "audit_chain",
    "display_server",
    "wmctrl",
    "display",
    "local_llm",
    "hardware",
    "command_sandbox",
    "containment",
    "autostart",
    "endpoint",
    "dns",
    "tcp",
    "tls",
    "upgrade",
];

/// One line of doctor's output.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    marker: String,
    label: String,
    detail: String,
}

/// What a run printed and how it ended.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The check lines, read with the labels expected in this order;
    /// panics unless stdout is exactly those lines in that order, each in
    /// the format of CLI.md §10.1.
    fn lines(&self, labels: &[&str]) -> Vec<Line> {
        // A desktop build adds what screenshots mask after the displays.
        let mut labels = labels.to_vec();
        if cfg!(feature = "desktop") {
            if let Some(at) = labels.iter().position(|l| *l == "display") {
                labels.insert(at + 1, "screenshot_mask");
            }
        }
        let labels = &labels[..];
        let width = labels.iter().map(|l| l.len()).max().unwrap();
        let printed: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(printed.len(), labels.len(), "{}", self.output());
        printed
            .iter()
            .zip(labels)
            .map(|(line, label)| {
                let marker = line
                    .strip_prefix('[')
                    .and_then(|rest| rest.get(..4))
                    .unwrap_or_else(|| panic!("no marker: {line}\n{}", self.output()));
                assert!(["OK  ", "WARN", "FAIL", "INFO"].contains(&marker), "{line}");
                let rest = &line[6..];
                let expected_head = format!(" {label:<width$}  ");
                assert!(
                    rest.starts_with(&expected_head),
                    "expected {label:?} padded to {width}: {line}\n{}",
                    self.output()
                );
                Line {
                    marker: marker.trim_end().to_owned(),
                    label: (*label).to_owned(),
                    detail: rest[expected_head.len()..].to_owned(),
                }
            })
            .collect()
    }

    fn output(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn line<'a>(lines: &'a [Line], label: &str) -> &'a Line {
    lines.iter().find(|l| l.label == label).unwrap()
}

/// `autogpt-shim [platform args] [extra globals] doctor` with `home`,
/// in control mode.
fn doctor_command(home: &Home, globals: &[String]) -> Command {
    let mut args: Vec<&str> = globals.iter().map(String::as_str).collect();
    args.push("doctor");
    let mut command = home.command(&args);
    command.env_remove("AUTOGPT_SHIM_ALLOWED_ROOT");
    command
}

fn doctor(home: &Home, globals: &[String]) -> Run {
    Run::from(doctor_command(home, globals).output().unwrap())
}

/// Writes two records to the home's audit log with the audit key stored in
/// its `tokens.enc` (creating the key as `start` does).
fn write_audit_log(home: &Home) {
    let (key, _) = home
        .store()
        .audit_key_for_start(&mut |_| KeyCheck::NoRecords)
        .unwrap();
    let (log, thread) =
        AuditLog::open(WriterOptions::new(home.audit.clone(), VERSION), key).unwrap();
    log.write(Entry::event(
        "SHIM_START",
        Details::new().with("shim_version", json!(VERSION)),
    ))
    .unwrap();
    log.write(Entry::event(
        "SHIM_STOP",
        Details::new().with("reason", json!("graceful")),
    ))
    .unwrap();
    drop(log);
    thread.join();
}

/// Every path below `dir`, for "nothing was created".
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.insert(path);
        }
    }
    out
}

fn assert_no_secret(run: &Run) {
    for secret in [ACCESS, REFRESH, PASSPHRASE] {
        assert!(!run.stdout.contains(secret), "{}", run.output());
        assert!(!run.stderr.contains(secret), "{}", run.output());
    }
}

#[test]
fn doctor_against_the_emulator_is_green_with_every_check_in_order() {
    let home = Home::new();
    write_audit_log(&home);
    let emulator = emulator();
    let before = tree(home.path());
    let log_before = std::fs::read(&home.audit).unwrap();

    // Without a configured machine id, as on a real machine: detection
    // must not create the fallback file either.
    let mut command = doctor_command(&home, &platform_args(&emulator));
    command.env_remove("AUTOGPT_SHIM_MACHINE_ID");
    let run = Run::from(command.output().unwrap());
    assert_eq!(run.code, 0, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    for label in [
        "folder_browser",
        "identity",
        "secret_store",
        "audit_log",
        "audit_chain",
        "endpoint",
        "dns",
        "tcp",
        "tls",
        "upgrade",
    ] {
        assert_eq!(line(&lines, label).marker, "OK", "{}", run.output());
    }
    assert!(lines.iter().all(|l| l.marker != "FAIL"), "{}", run.output());
    assert!(
        line(&lines, "secret_store")
            .detail
            .contains("access token and refresh token present")
    );
    assert!(
        line(&lines, "audit_chain")
            .detail
            .starts_with("audit.log: 2 record(s); chain and tail anchor verified"),
        "{}",
        run.output()
    );
    let display = if cfg!(feature = "desktop") {
        "none found: DISPLAY is not set"
    } else {
        "computer use not built in"
    };
    assert_eq!(line(&lines, "display").detail, display);
    assert_eq!(line(&lines, "autostart").marker, "INFO");
    assert!(
        line(&lines, "dns")
            .detail
            .starts_with("127.0.0.1 is an IP address"),
        "{}",
        run.output()
    );
    assert_eq!(
        line(&lines, "tcp").detail,
        format!("connected to {}", emulator.local_addr())
    );
    let tls = &line(&lines, "tls").detail;
    assert!(tls.contains("certificate chain verified"), "{tls}");
    // The key's digest, which a pin would name, is shown.
    assert!(tls.contains(emulator.spki_sha256().unwrap()), "{tls}");
    let upgrade = &line(&lines, "upgrade").detail;
    assert!(
        upgrade.starts_with("HTTP 101 with the stored access token"),
        "{upgrade}"
    );
    assert!(upgrade.contains("no HELLO sent"), "{upgrade}");

    // The platform saw the stored token, then a close 1000 and no frame.
    let conn = emulator.accept(WAIT).expect("doctor did not upgrade");
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {ACCESS}").as_str())
    );
    assert_eq!(conn.path(), "/ws/local-executor");
    match conn.wait_closed(WAIT) {
        Some(Ending::ClosedByShim { code, .. }) => assert_eq!(code, Some(1000)),
        other => panic!("not closed by doctor with 1000: {other:?}"),
    }
    assert!(conn.hello().is_none());
    let frames = conn.raw_frames();
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].kind, RawKind::Close, "{frames:?}");
    println!("{}", run.stdout);

    // Read only: nothing created, no record written, no secret shown.
    assert_eq!(tree(home.path()), before);
    assert_eq!(std::fs::read(&home.audit).unwrap(), log_before);
    assert_no_secret(&run);
}

#[test]
fn doctor_in_legacy_mode_checks_the_root_and_upgrades_to_the_session() {
    let home = Home::new();
    let emulator = emulator();
    let mut args = platform_args(&emulator);
    args.extend([
        "--session-id".to_owned(),
        SESSION.to_owned(),
        "doctor".to_owned(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The home's environment names its workspace as allowed_root.
    let run = Run::from(home.command(&args).output().unwrap());
    assert_eq!(run.code, 0, "{}", run.output());
    let mut labels = CONTROL_LABELS.to_vec();
    labels[0] = "allowed_root";
    let lines = run.lines(&labels);
    let root = line(&lines, "allowed_root");
    assert_eq!(root.marker, "OK");
    assert_eq!(
        root.detail,
        format!("{} exists, writable", home.root.display())
    );
    // No audit log yet: nothing to verify, and nothing is created.
    assert_eq!(line(&lines, "audit_chain").marker, "INFO");
    assert!(!home.audit.exists());
    assert!(
        line(&lines, "endpoint")
            .detail
            .contains("legacy session connection")
    );
    let conn = emulator.accept(WAIT).expect("doctor did not upgrade");
    assert_eq!(conn.path(), format!("/ws/local-executor/{SESSION}"));
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByShim {
            code: Some(1000),
            ..
        })
    ));
}

#[test]
fn a_wrong_pin_fails_at_the_tls_line_and_skips_the_upgrade() {
    let home = Home::new();
    let emulator = emulator();
    let mut args = platform_args(&emulator);
    args.extend(["--tls-pin-sha256".to_owned(), "00".repeat(32)]);
    let run = doctor(&home, &args);
    assert_eq!(run.code, 78, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    assert_eq!(line(&lines, "dns").marker, "OK");
    assert_eq!(line(&lines, "tcp").marker, "OK");
    let tls = line(&lines, "tls");
    assert_eq!(tls.marker, "FAIL", "{}", run.output());
    assert!(
        tls.detail.contains("matches none of the configured pins"),
        "{}",
        tls.detail
    );
    assert!(tls.detail.contains("tls_pin_sha256"), "{}", tls.detail);
    let upgrade = line(&lines, "upgrade");
    assert_eq!(upgrade.marker, "INFO");
    assert_eq!(upgrade.detail, "skipped: tls failed");
    // The request carrying the token was never sent.
    let attempts = emulator.wait_attempts(1, WAIT);
    assert!(
        matches!(attempts[0].outcome, AttemptOutcome::TlsFailed(_)),
        "{attempts:?}"
    );
    assert!(attempts.iter().all(|a| a.authorization.is_none()));
    assert_no_secret(&run);
}

#[test]
fn a_refused_upgrade_fails_at_the_upgrade_line() {
    let home = Home::new();
    let emulator = Emulator::start(EmulatorOptions::new().upgrades([UpgradeBehaviour::Refuse {
        status: 401,
        detail: "token expired\nforged line".into(),
    }]))
    .unwrap();
    let run = doctor(&home, &platform_args(&emulator));
    assert_eq!(run.code, 78, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    for label in ["dns", "tcp", "tls"] {
        assert_eq!(line(&lines, label).marker, "OK", "{}", run.output());
    }
    let upgrade = line(&lines, "upgrade");
    assert_eq!(upgrade.marker, "FAIL");
    assert!(upgrade.detail.contains("HTTP 401"), "{}", upgrade.detail);
    // The platform's explanation, escaped: it cannot add a line.
    assert!(
        upgrade.detail.contains(r#""token expired\nforged line""#),
        "{}",
        upgrade.detail
    );
    assert!(
        upgrade.detail.contains("autogpt-shim auth"),
        "{}",
        upgrade.detail
    );
    let attempts = emulator.wait_attempts(1, WAIT);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Rejected(401));
    assert_eq!(
        attempts[0].authorization.as_deref(),
        Some(format!("Bearer {ACCESS}").as_str())
    );
}

#[test]
fn missing_tokens_fail_at_the_secret_store_line_and_no_upgrade_is_asked_for() {
    let home = Home::without_tokens();
    let emulator = emulator();
    let before = tree(home.path());
    let run = doctor(&home, &platform_args(&emulator));
    assert_eq!(run.code, 78, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    let store = line(&lines, "secret_store");
    assert_eq!(store.marker, "FAIL");
    assert!(
        store
            .detail
            .starts_with("no tokens stored in the encrypted file"),
        "{}",
        store.detail
    );
    assert!(
        store.detail.contains("autogpt-shim auth"),
        "{}",
        store.detail
    );
    // The connection is still proven as far as it goes without a token.
    for label in ["dns", "tcp", "tls"] {
        assert_eq!(line(&lines, label).marker, "OK", "{}", run.output());
    }
    let upgrade = line(&lines, "upgrade");
    assert_eq!(upgrade.marker, "INFO");
    assert!(
        upgrade
            .detail
            .starts_with("skipped: no stored access token"),
        "{}",
        upgrade.detail
    );
    let attempts = emulator.wait_attempts(1, WAIT);
    assert!(attempts.iter().all(|a| a.path.is_none()), "{attempts:?}");
    // No tokens.enc, no audit key, no folder.
    assert_eq!(tree(home.path()), before);
}

#[test]
fn a_tampered_audit_log_fails_at_the_audit_chain_line() {
    let home = Home::new();
    write_audit_log(&home);
    let text = std::fs::read_to_string(&home.audit).unwrap();
    let tampered = text.replacen("\"graceful\"", "\"gracefuL\"", 1);
    assert_ne!(tampered, text);
    std::fs::write(&home.audit, tampered).unwrap();
    let emulator = emulator();
    let run = doctor(&home, &platform_args(&emulator));
    assert_eq!(run.code, 78, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    assert_eq!(line(&lines, "audit_log").marker, "OK");
    let chain = line(&lines, "audit_chain");
    assert_eq!(chain.marker, "FAIL", "{}", run.output());
    assert!(chain.detail.starts_with("audit.log: "), "{}", chain.detail);
    assert!(chain.detail.contains("violation"), "{}", chain.detail);
    assert!(
        chain.detail.contains("autogpt-shim audit verify"),
        "{}",
        chain.detail
    );
    // Everything else still ran.
    assert_eq!(line(&lines, "upgrade").marker, "OK", "{}", run.output());
}

#[test]
fn a_closed_port_fails_at_the_tcp_line() {
    let home = Home::new();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let run = doctor(
        &home,
        &[
            "--platform-url".to_owned(),
            format!("https://127.0.0.1:{port}"),
        ],
    );
    assert_eq!(run.code, 78, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    assert_eq!(line(&lines, "dns").marker, "OK");
    let tcp = line(&lines, "tcp");
    assert_eq!(tcp.marker, "FAIL");
    assert!(
        tcp.detail
            .starts_with(&format!("cannot connect to 127.0.0.1:{port}")),
        "{}",
        tcp.detail
    );
    for label in ["tls", "upgrade"] {
        let skipped = line(&lines, label);
        assert_eq!(skipped.marker, "INFO");
        assert_eq!(skipped.detail, "skipped: tcp failed");
    }
}

/// How to run a program without any network but its own: `unshare` with a
/// new network namespace (as root, or in a user namespace), if either works
/// here.
fn isolated_network() -> Option<Vec<&'static str>> {
    [vec!["--net"], vec!["--user", "--map-root-user", "--net"]]
        .into_iter()
        .find(|flags| {
            Command::new("unshare")
                .args(flags)
                .arg("true")
                .output()
                .is_ok_and(|out| out.status.success())
        })
}

#[test]
fn an_unresolvable_name_fails_at_the_dns_line() {
    let Some(flags) = isolated_network() else {
        println!("skipped: no network namespace can be made here (unshare)");
        return;
    };
    let home = Home::new();
    let mut command = Command::new("unshare");
    command
        .env_clear()
        .envs(home.env())
        .env_remove("AUTOGPT_SHIM_ALLOWED_ROOT")
        .args(flags)
        .args([
            "--",
            BIN,
            "--platform-url",
            "https://doctor-check.invalid",
            "doctor",
        ]);
    let run = Run::from(command.output().unwrap());
    assert_eq!(run.code, 78, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    assert_eq!(line(&lines, "endpoint").marker, "OK");
    let dns = line(&lines, "dns");
    assert_eq!(dns.marker, "FAIL", "{}", run.output());
    assert!(
        dns.detail
            .starts_with("cannot resolve doctor-check.invalid"),
        "{}",
        dns.detail
    );
    for label in ["tcp", "tls", "upgrade"] {
        let skipped = line(&lines, label);
        assert_eq!(skipped.marker, "INFO");
        assert_eq!(skipped.detail, "skipped: dns failed");
    }
}

/// Doctor against the emulator with `enable_local_llm` on and `ollama_url`
/// set to `url`: it exits 0 whatever the local LLM line says (the check
/// never blocks); returns the output and the `local_llm` line.
fn doctor_with_local_llm(url: &str) -> (Run, Line) {
    let home = Home::new();
    write_audit_log(&home);
    let emulator = emulator();
    let mut command = doctor_command(&home, &platform_args(&emulator));
    command
        .env("AUTOGPT_SHIM_ENABLE_LOCAL_LLM", "true")
        .env("AUTOGPT_SHIM_OLLAMA_URL", url);
    let run = Run::from(command.output().unwrap());
    assert_eq!(run.code, 0, "{}", run.output());
    let lines = run.lines(CONTROL_LABELS);
    assert!(lines.iter().all(|l| l.marker != "FAIL"), "{}", run.output());
    let llm = line(&lines, "local_llm").clone();
    (run, llm)
}

#[test]
fn doctor_lists_the_models_of_a_reachable_ollama() {
    let ollama =
        OllamaEmulator::start(OllamaOptions::new().models(&["llama3.2:3b", "qwen2.5:0.5b"]))
            .unwrap();
    // The configured URL's trailing slash is not shown.
    let (run, llm) = doctor_with_local_llm(&format!("{}/", ollama.url()));
    assert_eq!(llm.marker, "OK", "{}", run.output());
    assert_eq!(
        llm.detail,
        format!("{}: 2 model(s): llama3.2:3b, qwen2.5:0.5b", ollama.url())
    );
    // The label column is as wide as the longest label: `command_sandbox`
    // (as long as the desktop build's `screenshot_mask`).
    let width = "command_sandbox".len();
    let printed = format!(
        "[OK  ] {:<width$}  {}: 2 model(s): llama3.2:3b, qwen2.5:0.5b",
        "local_llm",
        ollama.url()
    );
    assert!(run.stdout.lines().any(|l| l == printed), "{}", run.output());
    assert_eq!(ollama.tags_requests(), 1);
    // Doctor only lists: no completion is asked for.
    assert!(ollama.requests().is_empty());
}

#[test]
fn doctor_warns_without_blocking_when_ollama_is_unreachable() {
    let url = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let (run, llm) = doctor_with_local_llm(&url);
    assert_eq!(llm.marker, "WARN", "{}", run.output());
    assert!(
        llm.detail
            .starts_with(&format!("{url} cannot be reached (")),
        "{}",
        llm.detail
    );
    assert!(
        llm.detail
            .ends_with("): the capability will not be offered"),
        "{}",
        llm.detail
    );
}

#[test]
fn doctor_warns_without_blocking_when_ollama_has_no_model_or_fails() {
    let ollama = OllamaEmulator::start(OllamaOptions::new().models::<&str>(&[])).unwrap();
    let (run, llm) = doctor_with_local_llm(&ollama.url());
    assert_eq!(llm.marker, "WARN", "{}", run.output());
    assert_eq!(
        llm.detail,
        format!(
            "{} answers but has no models: the capability will not be offered",
            ollama.url()
        )
    );
    ollama.set_default_tags(TagsBehaviour::Status(500, "boom".into()));
    let (run, llm) = doctor_with_local_llm(&ollama.url());
    assert_eq!(llm.marker, "WARN", "{}", run.output());
    assert!(llm.detail.contains("cannot be reached"), "{}", llm.detail);
}

#[test]
fn doctor_does_not_ask_ollama_unless_the_local_llm_is_requested() {
    let ollama = OllamaEmulator::start(OllamaOptions::new()).unwrap();
    let home = Home::new();
    let emulator = emulator();
    let mut command = doctor_command(&home, &platform_args(&emulator));
    command.env("AUTOGPT_SHIM_OLLAMA_URL", ollama.url());
    let run = Run::from(command.output().unwrap());
    let lines = run.lines(CONTROL_LABELS);
    let llm = line(&lines, "local_llm");
    assert_eq!(llm.marker, "INFO", "{}", run.output());
    assert_eq!(llm.detail, "not requested in config");
    assert_eq!(ollama.tags_requests(), 0);
}

#[test]
fn doctor_takes_no_arguments() {
    let home = Home::new();
    let out = home.command(&["doctor", "--fix"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option '--fix'"));
}
