//! The real `autogpt-shim` binary: help, version and usage errors, with their
//! streams and exit codes (CLI.md §1–§3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn shim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_autogpt-shim"))
        .args(args)
        .env_clear()
        .output()
        .expect("binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn help_prints_usage_on_stdout_and_exits_0() {
    for flag in ["--help", "-h"] {
        let out = shim(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(text(&out.stdout).contains("Usage: autogpt-shim"));
        assert!(out.stderr.is_empty(), "no banner for {flag}");
    }
}

#[test]
fn version_prints_name_and_version_and_exits_0() {
    let out = shim(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("autogpt-shim {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn unknown_option_exits_2_with_a_message_on_stderr() {
    let out = shim(&["--no-such-option", "start"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(
        err.starts_with("autogpt-shim: unknown option '--no-such-option'\n"),
        "{err}"
    );
    assert!(err.contains("--help"));
}

#[test]
fn unknown_command_exits_2_with_a_message_on_stderr() {
    let out = shim(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).starts_with("autogpt-shim: unknown command 'frobnicate'\n"));
}

#[test]
fn missing_command_exits_2() {
    let out = shim(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing command"));
}

#[test]
fn missing_option_value_exits_2() {
    let out = shim(&["--config"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--config needs a value"));
}

#[test]
fn only_start_and_auth_print_the_warning_banner() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_autogpt-shim"))
            .args(args)
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", "/usr/bin:/bin")
            // Unreachable on purpose: nothing here may leave the machine.
            .env("AUTOGPT_SHIM_PLATFORM_URL", "https://platform.invalid")
            .output()
            .unwrap()
    };
    for args in [&["status"][..], &["audit", "verify"], &["revoke"]] {
        let out = run(args);
        let stderr = text(&out.stderr);
        assert!(
            !stderr.contains("WARNING: autogpt-shim"),
            "{args:?}: {stderr}"
        );
    }
    // `start` refuses at once (no passphrase, no keychain), after the banner.
    let out = run(&["start"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).starts_with("WARNING: autogpt-shim is experimental"));
}
