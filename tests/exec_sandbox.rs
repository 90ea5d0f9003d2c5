//! `command_sandbox = "workspace"` end to end: the real binary and the
//! platform emulator, commands confined by Landlock. Writes land only in
//! the root and the private TMPDIR, a `~/.ssh`-like directory and the
//! shim's own state stay unreadable, the TMPDIR is private and removed,
//! and the audit record names the Landlock ABI. With the sandbox off the
//! record carries no `sandbox` key. These tests need a kernel with
//! Landlock; `start` refuses (exit 78) without it, which the first test
//! then checks instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::Duration;

use autogpt_shim_emulator::{Conn, HelloAck};
use rustix::process::Signal;
use serde_json::{Value, json};
use start_support::*;

/// A shim with the shell on and `settings` added to its environment.
fn shell(home: &Home, settings: &[(&str, &str)], extra: &[&str]) -> (Shim, Conn) {
    let emulator = emulator();
    let mut args = vec!["--enable-shell"];
    args.extend_from_slice(extra);
    let shim = Shim::start_with_env(home, &emulator, settings, &args);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));
    (shim, conn)
}

fn run(conn: &Conn, command: &str) -> (String, Value) {
    let (id, result) = call(conn, "EXECUTE_COMMAND", json!({"command": command}));
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    (id, result["payload"].clone())
}

fn details_of(home: &Home, id: &str) -> Value {
    home.records()
        .into_iter()
        .find(|r| r["request_id"] == id)
        .unwrap_or_else(|| panic!("no record for {id}"))["details"]
        .clone()
}

fn stop(mut shim: Shim) {
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

fn landlock_abi() -> Option<i64> {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // through the shim's own probe, reached as `start` would reach it.
    autogpt_shim::exec::sandbox::probe_landlock()
        .ok()
        .map(|abi| abi as i64)
}

#[test]
fn workspace_confines_writes_and_reads_and_records_the_abi() {
    let home = Home::new();
    let Some(abi) = landlock_abi() else {
        // No Landlock here: the only correct outcome is the refusal.
        let mut shim = Shim::start(&home, &emulator(), &["--command-sandbox", "workspace"]);
        assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
        assert!(shim.output().contains("Landlock"), "{}", shim.output());
        return;
    };
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let ssh = home.path().join(".ssh");
    std::fs::create_dir(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE KEY").unwrap();
    let (shim, conn) = shell(&home, &[], &["--command-sandbox", "workspace"]);

    // Inside the root: allowed.
    let (id, p) = run(&conn, "echo inside > inside.txt && cat inside.txt");
    assert_eq!(p["exit_code"], 0, "{p}");
    assert_eq!(p["stdout"], "inside\n");
    assert_eq!(
        std::fs::read_to_string(home.root.join("inside.txt")).unwrap(),
        "inside\n"
    );
    let details = details_of(&home, &id);
    assert_eq!(
        details["sandbox"],
        json!({"fs": format!("landlock-v{abi}"), "net": "allow"})
    );

    // Outside the root: refused by the kernel, nothing written.
    let target = outside.join("escaped.txt");
    let (_, p) = run(&conn, &format!("echo x > '{}'", target.display()));
    assert_ne!(p["exit_code"], 0, "{p}");
    assert!(!target.exists());

    // A key directory outside the root cannot be read.
    let (_, p) = run(
        &conn,
        &format!("cat '{}'", ssh.join("id_ed25519").display()),
    );
    assert_ne!(p["exit_code"], 0, "{p}");
    assert!(!p["stdout"].as_str().unwrap().contains("PRIVATE"), "{p}");

    // Nor can the shim's audit log and state directory.
    let (_, p) = run(&conn, &format!("cat '{}'", home.audit.display()));
    assert_ne!(p["exit_code"], 0, "{p}");
    assert_eq!(p["stdout"], "", "{p}");
    let state = home.audit.parent().unwrap();
    let (_, p) = run(&conn, &format!("ls '{}'", state.display()));
    assert_ne!(p["exit_code"], 0, "{p}");

    // System programs still run, and /dev/null takes output.
    let (_, p) = run(&conn, "ls /usr/bin > /dev/null && echo ok");
    assert_eq!(p["stdout"], "ok\n", "{p}");

    // TMPDIR is private, writable, and gone after the command.
    let (_, p) = run(
        &conn,
        "echo t > \"$TMPDIR/f\" && cat \"$TMPDIR/f\" && stat -c %a \"$TMPDIR\" && echo \"$TMPDIR\"",
    );
    assert_eq!(p["exit_code"], 0, "{p}");
    let out = p["stdout"].as_str().unwrap().to_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "t", "{out}");
    assert_eq!(lines[1], "700", "{out}");
    let tmpdir = std::path::Path::new(lines[2]);
    assert!(
        tmpdir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("autogpt-shim-cmd-")
    );
    assert!(
        eventually(Duration::from_secs(5), || !tmpdir.exists()),
        "{} was not removed",
        tmpdir.display()
    );
    // Another command's TMPDIR is a different directory.
    let (_, p) = run(&conn, "echo \"$TMPDIR\"");
    assert_ne!(p["stdout"].as_str().unwrap().trim(), lines[2]);
    stop(shim);
}

#[test]
fn off_leaves_commands_unconfined_and_the_record_without_a_sandbox_key() {
    let home = Home::new();
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let (shim, conn) = shell(&home, &[], &[]);
    let target = outside.join("written.txt");
    let (id, p) = run(&conn, &format!("echo x > '{}'", target.display()));
    assert_eq!(p["exit_code"], 0, "{p}");
    assert!(target.exists());
    let details = details_of(&home, &id);
    let keys: Vec<&String> = details.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "argv",
            "command",
            "cwd",
            "env_keys",
            "shell",
            "timeout_seconds"
        ],
        "{details}"
    );
    assert!(
        !details["env_keys"]
            .as_array()
            .unwrap()
            .contains(&json!("TMPDIR"))
    );
    stop(shim);
}

#[test]
fn a_bad_sandbox_mode_is_a_usage_or_configuration_error() {
    let home = Home::new();
    let out = home
        .command(&["start", "--command-sandbox", "strict"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let mut command = home.command(&["start"]);
    command.env("AUTOGPT_SHIM_COMMAND_SANDBOX", "strict");
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("command_sandbox"));
}

#[test]
fn a_command_whose_sandbox_cannot_be_set_up_is_refused_and_never_runs_unconfined() {
    if landlock_abi().is_none() {
        return;
    }
    let home = Home::new();
    // The private temporary directories go below the shim's TMPDIR; one
    // that does not exist makes every command's setup fail, after the
    // probe at start succeeded.
    let missing = home.path().join("no-such-tmp");
    let (shim, conn) = shell(
        &home,
        &[("TMPDIR", missing.to_str().unwrap())],
        &["--command-sandbox", "workspace"],
    );
    let (id, refused) = call(&conn, "EXECUTE_COMMAND", json!({"command": "touch ran"}));
    assert_eq!(refused["type"], "ERROR", "{refused}");
    assert_eq!(
        refused["payload"]["code"], "CAPABILITY_NOT_GRANTED",
        "{refused}"
    );
    assert_eq!(
        refused["payload"]["details"]["reason"], "sandbox_unavailable",
        "{refused}"
    );
    assert!(!home.root.join("ran").exists());
    let record = home
        .records()
        .into_iter()
        .find(|r| r["request_id"] == id)
        .unwrap();
    assert_eq!(record["result"]["exit_code"], Value::Null, "{record}");
    assert!(
        record["details"]["sandbox"]["fs"]
            .as_str()
            .unwrap()
            .starts_with("landlock-v"),
        "{record}"
    );
    stop(shim);
}
