//! `autogpt-shim start` keeps its secrets from everything it runs: a shell
//! command of the same user can read neither the daemon's nor the
//! spawner's memory or environment, the passphrase is gone from the
//! daemon's initial environment block, and the passphrase can be given in
//! a private file or as a systemd credential instead of the environment.
//!
//! Tests run as root, and root reads any process's memory whatever its
//! dumpability, so the daemon of the first test runs as an unprivileged
//! user (65534) in a home handed to that user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustix::process::Signal;
use serde_json::json;
use start_support::*;

/// Whether `haystack` contains `needle` anywhere.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `start --session-id` with `--enable-shell` as [`NOBODY`], over plain
/// WebSocket (loopback) so no file of the test's own needs to be readable.
#[test]
fn a_command_of_the_same_user_cannot_read_the_daemons_memory_or_environment() {
    if !runs_as_root("a_command_of_the_same_user_cannot_read_the_daemons_memory_or_environment") {
        return;
    }
    let home = Home::new();
    let emulator = plain_emulator();
    let (mut shim, conn) = shell_session(&home, &emulator, true);
    let daemon = shim.pid();

    // The command's parent is the spawner; both are tried, the way a
    // hostile platform would through the shell.
    let probe = format!(
        "for p in {daemon} $PPID; do \
           cat /proc/$p/environ >/dev/null 2>&1 && echo \"environ of $p readable\"; \
           (: < /proc/$p/mem) 2>/dev/null && echo \"mem of $p open\"; \
         done; echo probed"
    );
    let id = conn
        .request("EXECUTE_COMMAND", json!({"command": probe}))
        .unwrap();
    let result = conn.wait_response(&id, WAIT).expect("no command result");
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    assert_eq!(result["payload"]["stdout"], "probed\n", "{result}");

    // Root still sees the initial environment block: the passphrase's
    // bytes are no longer in it.
    let environ = std::fs::read(format!("/proc/{daemon}/environ")).unwrap();
    assert!(
        !contains(&environ, PASSPHRASE.as_bytes()),
        "the passphrase is still in /proc/{daemon}/environ"
    );
    assert!(contains(&environ, b"AUTOGPT_SHIM_MACHINE_ID=machine-e2e"));

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

/// Writes `text` to `path` with `mode`.
fn write_private(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Starts the shim with the environment changed by `adjust`, expects it to
/// connect with the stored token (so the passphrase decrypted
/// `tokens.enc`) and stops it.
fn starts_and_connects(home: &Home, adjust: impl FnOnce(&mut std::process::Command)) {
    let emulator = emulator();
    let mut args = platform_args(&emulator);
    args.extend(["start", "--session-id", SESSION].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = home.command(&args);
    adjust(&mut command);
    let mut shim = Shim::spawn(command);
    let conn = emulator.accept(WAIT);
    assert!(
        conn.is_some(),
        "the shim did not connect\n{}",
        shim.output()
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

/// Runs `start` with the environment changed by `adjust` and returns its
/// exit code and stderr.
fn start_refused(home: &Home, adjust: impl FnOnce(&mut std::process::Command)) -> (i32, String) {
    let mut command = home.command(&["start", "--session-id", SESSION]);
    adjust(&mut command);
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_passphrase_comes_from_a_private_file_and_a_readable_one_is_refused() {
    let home = Home::new();
    let file = home.path().join("passphrase");
    // One trailing line break is not part of the passphrase.
    write_private(&file, &format!("{PASSPHRASE}\n"), 0o600);
    starts_and_connects(&home, |c| {
        c.env_remove("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE")
            .env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE", &file);
    });
    // The file beats a (wrong) passphrase in the environment.
    starts_and_connects(&home, |c| {
        c.env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "wrong")
            .env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE", &file);
    });

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (code, stderr) = start_refused(&home, |c| {
        c.env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE", &file);
    });
    assert_eq!(code, 78, "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Preflight failed:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains(file.to_str().unwrap()), "{line}");
    assert!(line.contains("chmod 600"), "{line}");
    assert!(!stderr.contains(PASSPHRASE), "{stderr}");

    let (code, stderr) = start_refused(&home, |c| {
        c.env(
            "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE",
            home.path().join("missing"),
        );
    });
    assert_eq!(code, 78, "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
}

#[test]
fn the_passphrase_comes_from_the_systemd_credential_directory() {
    let home = Home::new();
    let credentials = home.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    write_private(
        &credentials.join("autogpt-shim-passphrase"),
        PASSPHRASE,
        0o400,
    );
    starts_and_connects(&home, |c| {
        c.env_remove("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE")
            .env("CREDENTIALS_DIRECTORY", &credentials);
    });
    // The credential beats a (wrong) passphrase in the environment; a
    // credential directory without this credential is simply not used.
    starts_and_connects(&home, |c| {
        c.env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "wrong")
            .env("CREDENTIALS_DIRECTORY", &credentials);
    });
    starts_and_connects(&home, |c| {
        c.env("CREDENTIALS_DIRECTORY", home.path().join("secrets"));
    });
}
