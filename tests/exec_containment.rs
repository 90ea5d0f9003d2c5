//! EXEC.md §11 and §12: commands and everything they start die with the
//! process that owns them, however it dies; cancellation terminates a
//! running command and reports no result; the spawner's hidden mode is
//! not reachable by accident.
//!
//! The owner in the orphan tests is this test binary re-executed to run
//! the ignored `owner_process` test alone, so that it can be killed with
//! SIGKILL like a crashed shim.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use autogpt_shim::daemon::OperationError;
use autogpt_shim::exec::{CANCELLED, group_gone};
use autogpt_shim::protocol::ErrorCode;
use exec_support::*;

/// The environment variable that marks every process a test starts, so
/// survivors can be found through `/proc/<pid>/environ` whatever their
/// parent, group or session became.
const MARK: &str = "SHIM_ORPHAN_MARK";

/// Pids of live (non-zombie) processes whose environment holds `mark`.
fn marked(mark: &str) -> Vec<i32> {
    let needle = format!("{MARK}={mark}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
        if state != Some(Some('Z')) {
            found.push(pid);
        }
    }
    found
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// Runs in the re-executed owner: starts the command from
/// `SHIM_OWNER_COMMAND` under the mark and waits forever.
#[test]
#[ignore = "runs only as the owner process of the orphan tests"]
fn owner_process() {
    let Ok(text) = std::env::var("SHIM_OWNER_COMMAND") else {
        return;
    };
    let mark = std::env::var(MARK).unwrap();
    let fx = Fx::new();
    println!("spawner {}", fx.spawner.pid().as_raw_nonzero());
    let mut req = command(&text);
    req.env.insert(MARK.into(), mark);
    fx.run(&req);
    panic!("the command was expected to run until the owner is killed");
}

/// Starts the owner running `text`, waits until `expected` marked
/// processes run, kills the owner with SIGKILL and returns the survivors
/// after 3 s (EXEC.md §11's acceptance window), plus whether the spawner
/// itself is gone.
fn kill_owner_and_count_survivors(text: &str, expected: usize) -> (Vec<i32>, bool) {
    let mark = format!("{}-{}", std::process::id(), text.len());
    let mut owner = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "owner_process", "--ignored", "--nocapture"])
        .env("SHIM_OWNER_COMMAND", text)
        .env(MARK, &mark)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(owner.stdout.take().unwrap()).lines();
    let spawner: i32 = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(pid) = line.strip_prefix("spawner ") {
            break pid.parse().unwrap();
        }
    };
    // The owner itself carries the mark too; its commands are the rest.
    assert!(
        wait_until(Duration::from_secs(10), || marked(&mark).len() > expected),
        "the commands did not start: {:?}",
        marked(&mark)
    );
    owner.kill().unwrap();
    owner.wait().unwrap();
    let gone = wait_until(Duration::from_secs(3), || marked(&mark).is_empty());
    let survivors = if gone { Vec::new() } else { marked(&mark) };
    // Gone or a zombie: its new parent may be slow to reap, or (in some
    // containers) never reap at all.
    let spawner_gone = wait_until(Duration::from_secs(1), || {
        std::fs::read_to_string(format!("/proc/{spawner}/stat")).map_or(true, |stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        })
    });
    // Whatever the outcome, leave nothing running behind the test.
    for pid in &survivors {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(*pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    (survivors, spawner_gone)
}

#[test]
fn background_job_and_leader_die_with_the_killed_owner() {
    let (survivors, spawner_gone) =
        kill_owner_and_count_survivors("sleep 1000 & sleep 1000; wait", 3);
    assert_eq!(survivors, Vec::<i32>::new());
    assert!(spawner_gone);
}

#[test]
fn grandchild_in_its_own_session_dies_with_the_killed_owner() {
    // `setsid` in a background job leaves the command's group and session.
    let (survivors, spawner_gone) =
        kill_owner_and_count_survivors("setsid sleep 1000 & sleep 1000; wait", 3);
    assert_eq!(survivors, Vec::<i32>::new());
    assert!(spawner_gone);
}

#[test]
fn orphaned_daemon_in_its_own_session_dies_with_the_killed_owner() {
    // Double fork: the setsid'd sleeper's parent exits at once, so it is
    // re-parented while the owner still lives.
    let (survivors, spawner_gone) =
        kill_owner_and_count_survivors("(setsid sleep 1000 &); sleep 1000", 2);
    assert_eq!(survivors, Vec::<i32>::new());
    assert!(spawner_gone);
}

#[test]
fn cancelled_command_is_terminated_and_reports_no_result() {
    let fx = Fx::new();
    let root = fx.root.clone();
    let started = Instant::now();
    let out = std::thread::scope(|s| {
        let running = s.spawn(|| fx.run(&command("echo $$ > pid; exec sleep 1000")));
        assert!(wait_until(Duration::from_secs(5), || root
            .join("pid")
            .exists()));
        fx.cancel.cancel();
        running.join().unwrap()
    });
    // SIGTERM ends `sleep` at once; well inside the 2 s grace period.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.cancelled);
    let e = error(&out);
    assert_eq!(
        (e.code(), e.message()),
        (ErrorCode::InternalError, CANCELLED)
    );
    let (_, result) = record(&out);
    assert!(!result.ok);
    assert_eq!(result.error_code.as_deref(), Some("INTERNAL_ERROR"));
    assert_eq!(result.exit_code, Some(-15));
    let pid: i32 = std::fs::read_to_string(root.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(group_gone(rustix::process::Pid::from_raw(pid).unwrap()));
}

#[test]
fn command_after_cancellation_never_starts() {
    let fx = Fx::new();
    fx.cancel.cancel();
    let out = fx.run(&command("touch started"));
    assert!(out.cancelled);
    assert!(!fx.root.join("started").exists());
    let (_, result) = record(&out);
    assert_eq!(result.exit_code, None);
}

#[test]
fn command_dies_and_reports_when_the_spawner_is_killed() {
    let fx = Fx::new();
    let root = fx.root.clone();
    let spawner = fx.spawner.pid();
    let started = Instant::now();
    let out = std::thread::scope(|s| {
        let running = s.spawn(|| {
            fx.run(&command(
                "sleep 1000 & echo $! > bg; echo $$ > pid; sleep 1000; wait",
            ))
        });
        assert!(wait_until(Duration::from_secs(5), || {
            root.join("pid").exists() && root.join("bg").exists()
        }));
        rustix::process::kill_process(spawner, rustix::process::Signal::KILL).unwrap();
        running.join().unwrap()
    });
    assert!(started.elapsed() < Duration::from_secs(8));
    // The leader's status died with the spawner.
    assert_eq!(result(&out).exit_code, -1);
    let pid: i32 = std::fs::read_to_string(root.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The parent-death signal killed the leader, the shim its group (the
    // background job included).
    assert!(wait_until(Duration::from_secs(3), || group_gone(
        rustix::process::Pid::from_raw(pid).unwrap()
    )));
    let bg: i32 = std::fs::read_to_string(root.join("bg"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_until(Duration::from_secs(3), || {
        std::fs::read_to_string(format!("/proc/{bg}/stat")).map_or(true, |stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        })
    }));
    // Later commands run on a new spawner.
    let later = fx.run(&argv(&["true"]));
    assert_eq!(result(&later).exit_code, 0);
    assert!(fx.spawner.is_alive());
    assert_ne!(fx.spawner.pid(), spawner);
}

#[test]
fn spawner_mode_without_its_socket_is_an_unknown_command() {
    let out = Command::new(shim_exe())
        .arg("__autogpt-shim-spawner__")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("__autogpt-shim-spawner__"), "{stderr}");
}
