//! The local command rules end to end: the real binary with a
//! `config.toml` of `[[command_rule]]` tables, requests through the
//! platform emulator, and `autogpt-shim approve`/`deny` answering over the
//! real approval socket. A refused command never spawns (the file it would
//! create never appears), the platform learns the reason and the rule, and
//! the audit record carries the decision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Conn, HelloAck};
use rustix::process::Signal;
use serde_json::{Value, json};
use start_support::*;

/// Writes `config.toml` into the home and returns its path.
fn config(home: &Home, text: &str) -> PathBuf {
    let path = home.path().join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A shim with the shell on, reading `config`, connected with `ack`.
fn shim_with(home: &Home, config: &Path, ack: HelloAck) -> (Shim, Conn) {
    let emulator = emulator();
    let mut args = platform_args(&emulator);
    args.extend(
        [
            "--config",
            config.to_str().unwrap(),
            "start",
            "--session-id",
            SESSION,
            "--enable-shell",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let shim = Shim::spawn(home.command(&args));
    let (conn, _) = connect(&emulator, ack.grant(["files", "shell"]));
    (shim, conn)
}

fn stop(mut shim: Shim) {
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

fn record_of(home: &Home, id: &str) -> Value {
    home.records()
        .into_iter()
        .find(|r| r["request_id"] == id)
        .unwrap_or_else(|| panic!("no record for {id}"))
}

/// Asserts `response` is the refusal `reason` by `rule`.
fn assert_refused(response: &Value, reason: &str, rule: &str) {
    assert_eq!(response["type"], "ERROR", "{response}");
    let payload = &response["payload"];
    assert_eq!(payload["code"], "CAPABILITY_NOT_GRANTED", "{response}");
    assert_eq!(payload["details"]["reason"], reason, "{response}");
    assert_eq!(payload["details"]["rule"], rule, "{response}");
}

fn argv(conn: &Conn, words: &[&str]) -> (String, Value) {
    call(conn, "EXECUTE_COMMAND", json!({"argv": words}))
}

fn line(conn: &Conn, command: &str) -> (String, Value) {
    call(conn, "EXECUTE_COMMAND", json!({"command": command}))
}

const RULES: &str = r#"
command_default_action = "allow"
command_shell_syntax_action = "deny"

[[command_rule]]
name = "no force push"
program = "git"
args = ["push", "**"]
any_arg = ["--force", "-f", "--force-with-lease*"]
action = "deny"

[[command_rule]]
name = "not this word"
program = "echo"
args = ["forbidden"]
action = "deny"

[[command_rule]]
name = "rm without recursion"
program = "rm"
no_arg = ["-*[rR]*", "--recursive"]
action = "allow"

[[command_rule]]
name = "other rm"
program = "rm"
action = "deny"

[[command_rule]]
name = "no touch"
program = "touch"
action = "deny"

[[command_rule]]
name = "not in locked"
cwd = "ROOT/locked/**"
action = "deny"
"#;

#[test]
fn every_rule_kind_decides_through_the_wire_and_a_refused_command_never_spawns() {
    let home = Home::new();
    let rules = RULES.replace("ROOT", home.root.to_str().unwrap());
    let config = config(&home, &rules);
    let (shim, conn) = shim_with(&home, &config, HelloAck::new());

    // An argument pattern among any argument: refused, recorded with the rule.
    let (id, r) = argv(&conn, &["git", "push", "origin", "--force"]);
    assert_refused(&r, "local_policy_denied", "no force push");
    let record = record_of(&home, &id);
    assert_eq!(
        record["details"]["policy"],
        json!({"rule": "no force push", "action": "deny"})
    );
    assert_eq!(record["result"]["error_code"], "CAPABILITY_NOT_GRANTED");
    assert_eq!(record["result"]["exit_code"], Value::Null);

    // An exact argument, reached through a shell string split into words.
    let (_, r) = line(&conn, "echo 'forbidden'");
    assert_refused(&r, "local_policy_denied", "not this word");
    // Another argument: no rule matches, the default allows it.
    let (id, r) = line(&conn, "echo allowed");
    assert_eq!(r["payload"]["stdout"], "allowed\n", "{r}");
    assert_eq!(
        record_of(&home, &id)["details"]["policy"],
        json!({"rule": "default", "action": "allow", "without_shell": true})
    );

    // "No argument matches": plain rm is allowed, recursive rm is not.
    std::fs::write(home.root.join("f.txt"), "x").unwrap();
    std::fs::create_dir(home.root.join("d")).unwrap();
    let (_, r) = argv(&conn, &["rm", "f.txt"]);
    assert_eq!(r["payload"]["exit_code"], 0, "{r}");
    assert!(!home.root.join("f.txt").exists());
    let (_, r) = argv(&conn, &["rm", "-fr", "d"]);
    assert_refused(&r, "local_policy_denied", "other rm");
    assert!(home.root.join("d").exists());

    // Never spawned.
    let (_, r) = argv(&conn, &["touch", "spawned"]);
    assert_refused(&r, "local_policy_denied", "no touch");
    assert!(!home.root.join("spawned").exists());

    // The working directory.
    std::fs::create_dir(home.root.join("locked")).unwrap();
    let (_, r) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"argv": ["echo", "hi"], "cwd": "locked"}),
    );
    assert_refused(&r, "local_policy_denied", "not in locked");

    // Shell syntax, and an environment that would change what runs, are
    // decided by command_shell_syntax_action.
    for command in [
        "echo a | tee b",
        "touch x; echo y",
        "echo $(touch z)",
        "X=1 echo",
    ] {
        let (_, r) = line(&conn, command);
        assert_refused(&r, "local_policy_denied", "shell_syntax");
    }
    let (_, r) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"argv": ["echo", "hi"], "env": {"PATH": "/tmp"}}),
    );
    assert_refused(&r, "local_policy_denied", "shell_syntax");
    assert!(!home.root.join("b").exists() && !home.root.join("z").exists());
    stop(shim);
}

#[test]
fn rules_test_names_the_deciding_rule_without_a_daemon() {
    let home = Home::new();
    let rules = RULES.replace("ROOT", home.root.to_str().unwrap());
    let config = config(&home, &rules);
    let test = |words: &[&str]| {
        let mut args = vec!["--config", config.to_str().unwrap(), "rules", "test", "--"];
        args.extend_from_slice(words);
        let out = home.command(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let out = test(&["git", "push", "-f"]);
    assert!(
        out.contains("rule \"no force push\" decides: deny"),
        "{out}"
    );
    let out = test(&["ls", "-la"]);
    assert!(out.contains("no rule matches"), "{out}");
    assert!(out.contains(": allow"), "{out}");
    assert!(home.records().is_empty());
}

#[test]
fn a_bad_rule_stops_start_naming_the_rule() {
    let home = Home::new();
    let config = config(
        &home,
        "[[command_rule]]\nname = \"x\"\nprogram = \"rm\"\naction = \"maybe\"\n",
    );
    let out = home
        .command(&[
            "--config",
            config.to_str().unwrap(),
            "start",
            "--session-id",
            SESSION,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("command_rule"), "{stderr}");
    assert!(stderr.contains("rule 1: action"), "{stderr}");
}

const ASK: &str = r#"
approval_timeout_seconds = 2

[[command_rule]]
name = "ask before touching"
program = "touch"
action = "ask"
"#;

/// Runs `autogpt-shim [--config] verb [args]` with `stdin`.
fn decision(home: &Home, config: &Path, verb: &[&str], stdin: &str) -> Output {
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(verb);
    let mut child = home
        .command(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The waiting commands' numbers, as `approve` lists them.
fn waiting(home: &Home, config: &Path) -> (Vec<u64>, String) {
    let out = decision(home, config, &["approve"], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let ids = text
        .lines()
        .filter_map(|l| l.strip_prefix('['))
        .filter_map(|l| l.split(']').next())
        .filter_map(|n| n.parse().ok())
        .collect();
    (ids, text)
}

fn wait_for_one(home: &Home, config: &Path) -> (u64, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (ids, text) = waiting(home, config);
        if let [id] = ids.as_slice() {
            return (*id, text);
        }
        assert!(Instant::now() < deadline, "nothing waited: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ask_waits_for_approve_or_deny_through_the_real_socket_and_times_out() {
    let home = Home::new();
    let config = config(&home, ASK);
    let (shim, conn) = shim_with(&home, &config, HelloAck::new());
    let socket = home
        .path()
        .join("state/autogpt-local-executor/approvals.sock");

    // Approved by number.
    let id = conn
        .request(
            "EXECUTE_COMMAND",
            json!({"argv": ["touch", "approved file"]}),
        )
        .unwrap();
    let (number, listed) = wait_for_one(&home, &config);
    assert!(listed.contains("touch 'approved file'"), "{listed}");
    assert!(listed.contains(SESSION), "{listed}");
    assert!(listed.contains("ask before touching"), "{listed}");
    assert!(listed.contains(home.root.to_str().unwrap()), "{listed}");
    let out = decision(&home, &config, &["approve", &number.to_string()], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = response_within(&conn, &id, WAIT);
    assert_eq!(r["payload"]["exit_code"], 0, "{r}");
    assert!(home.root.join("approved file").exists());
    let policy = &record_of(&home, &id)["details"]["policy"];
    assert_eq!(policy["rule"], "ask before touching");
    assert_eq!(policy["action"], "ask");
    assert_eq!(policy["approval"], "approved");

    // Denied interactively: the number picked on standard input.
    let id = conn
        .request("EXECUTE_COMMAND", json!({"argv": ["touch", "denied"]}))
        .unwrap();
    let (number, _) = wait_for_one(&home, &config);
    let out = decision(&home, &config, &["deny"], &format!("{number}\n"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = response_within(&conn, &id, WAIT);
    assert_refused(&r, "local_confirmation_denied", "ask before touching");
    assert!(!home.root.join("denied").exists());
    assert_eq!(
        record_of(&home, &id)["details"]["policy"]["approval"],
        "denied"
    );
    // The same number again: no longer waiting.
    let out = decision(&home, &config, &["approve", &number.to_string()], "");
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // Nobody answers: refused after approval_timeout_seconds.
    let asked = Instant::now();
    let (id, r) = argv(&conn, &["touch", "late"]);
    let waited = asked.elapsed();
    assert_refused(&r, "local_confirmation_timeout", "ask before touching");
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    assert!(!home.root.join("late").exists());
    assert_eq!(
        record_of(&home, &id)["details"]["policy"]["approval"],
        "timeout"
    );

    // `status` names the rules in force.
    let status = decision(&home, &config, &["status"], "");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("command rules: 1 rule(s); no match: allow; shell syntax: ask"),
        "{text}"
    );

    // Commands have the network here, and start said what that means.
    assert!(
        shim.stderr.text().contains("could reach another service"),
        "{}",
        shim.output()
    );

    // The socket is the user's alone, and goes with the daemon.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    stop(shim);
    assert!(!socket.exists());
    let out = decision(&home, &config, &["approve"], "");
    assert_eq!(out.status.code(), Some(69), "{out:?}");
}

#[test]
fn an_ask_is_decided_before_the_platforms_deadline() {
    let home = Home::new();
    let config = config(&home, &ASK.replace("= 2", "= 60"));
    // The platform waits 3 s for any reply.
    let (shim, conn) = shim_with(&home, &config, HelloAck::new().command_timeout_seconds(3));
    let asked = Instant::now();
    let id = conn
        .request("EXECUTE_COMMAND", json!({"argv": ["touch", "late"]}))
        .unwrap();
    let r = response_within(&conn, &id, Duration::from_secs(10));
    let waited = asked.elapsed();
    assert_refused(&r, "local_confirmation_timeout", "ask before touching");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    stop(shim);
}

#[test]
fn a_command_cannot_answer_its_own_question() {
    let home = Home::new();
    let config = config(&home, &ASK.replace("= 2", "= 3"));
    let (shim, conn) = shim_with(&home, &config, HelloAck::new());
    let socket = home
        .path()
        .join("state/autogpt-local-executor/approvals.sock");

    let asking = conn
        .request(
            "EXECUTE_COMMAND",
            json!({"argv": ["touch", "self-approved"]}),
        )
        .unwrap();
    let (number, _) = wait_for_one(&home, &config);
    // Another command, allowed by the default, talks to the socket itself.
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_UNIX)\n\
         try:\n\
         \x20   s.connect({path:?})\n\
         \x20   s.sendall(b'{{\"decide\": {number}, \"approve\": true}}\\n')\n\
         \x20   print(s.recv(200) or 'closed')\n\
         except OSError:\n\
         \x20   print('closed')",
        path = socket.to_str().unwrap()
    );
    let (_, r) = argv(&conn, &["python3", "-c", &script]);
    assert_eq!(r["payload"]["stdout"], "closed\n", "{r}");
    let r = response_within(&conn, &asking, WAIT);
    assert_refused(&r, "local_confirmation_timeout", "ask before touching");
    assert!(!home.root.join("self-approved").exists());
    stop(shim);
}

#[test]
fn a_shell_string_of_words_runs_without_a_shell_so_builtins_cannot_smuggle_code() {
    let home = Home::new();
    let config = config(
        &home,
        "command_default_action = \"deny\"\n\
         [[command_rule]]\nname = \"printf\"\nprogram = \"printf\"\naction = \"allow\"\n",
    );
    let (shim, conn) = shim_with(&home, &config, HelloAck::new());
    // In bash, `printf -v` evaluates the subscript, and with it the
    // substitution; run as words, the printf program prints its format.
    let (_, r) = line(&conn, "printf -v 'a[$(touch pwned)]' x");
    assert_eq!(r["type"], "COMMAND_RESULT", "{r}");
    assert_eq!(r["payload"]["stdout"], "-v", "{r}");
    assert!(!home.root.join("pwned").exists());
    let (_, r) = line(&conn, "printf '%s-%s' a 'b c'");
    assert_eq!(r["payload"]["stdout"], "a-b c", "{r}");
    stop(shim);
}
