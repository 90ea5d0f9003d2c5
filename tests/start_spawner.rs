//! `autogpt-shim start` survives the death of its command spawner: a
//! command that kills the spawner (`kill -KILL $PPID`) after starting a
//! background process in a session of its own leaves nothing running, the
//! death is audited, and the next command runs normally — with the commands
//! in a cgroup of their own (as root here) and with the daemon as their
//! subreaper only (as an unprivileged user, who cannot create one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use rustix::process::Signal;
use serde_json::{Value, json};
use start_support::*;

/// The state letter of `/proc/<pid>/stat`; `None` once the process is gone.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Kills a process the test started when the test ends, whatever the
/// outcome, so a failure leaves nothing running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
            if matches!(process_state(self.0), Some(s) if s != 'Z') {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
    }
}

/// Sends a request and returns its terminal response.
fn call(conn: &autogpt_shim_emulator::Conn, payload: Value) -> Value {
    let id = conn.request("EXECUTE_COMMAND", payload).unwrap();
    conn.wait_response(&id, WAIT)
        .unwrap_or_else(|| panic!("no response to {id}"))
}

/// Kills the spawner from a command (optionally as [`NOBODY`]) and checks
/// that it is contained, audited and replaced; returns the `SPAWNER_DIED`
/// record and the cgroup v2 path a later command runs in.
fn spawner_killed_by_a_command(as_nobody: bool) -> (Value, String) {
    let home = Home::new();
    let emulator = plain_emulator();
    let (mut shim, conn) = shell_session(&home, &emulator, as_nobody);

    let attack = "echo $PPID > spawner.pid; \
         setsid sh -c 'echo $$ > bg.tmp && mv bg.tmp bg.pid; exec sleep 1000' \
           </dev/null >/dev/null 2>&1 & \
         while [ ! -s bg.pid ]; do sleep 0.02; done; \
         kill -KILL $PPID; sleep 30";
    let first = call(&conn, json!({"command": attack, "timeout_seconds": 20}));
    // The command itself died with its spawner: answered, not hung.
    assert!(
        matches!(first["type"].as_str(), Some("COMMAND_RESULT" | "ERROR")),
        "{first}"
    );
    let read_pid = |name: &str| -> i32 {
        std::fs::read_to_string(home.root.join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let spawner = read_pid("spawner.pid");
    let background = read_pid("bg.pid");
    let _leftover = KillOnDrop(background);

    let next = call(&conn, json!({"command": "echo again"}));
    assert_eq!(next["type"], "COMMAND_RESULT", "{next}");
    assert_eq!(next["payload"]["stdout"], "again\n", "{next}");
    assert_eq!(next["payload"]["exit_code"], 0, "{next}");
    let cgroup = call(
        &conn,
        json!({"command": "sed -n 's/^0:://p' /proc/self/cgroup"}),
    );
    let cgroup = cgroup["payload"]["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();

    assert!(
        eventually(Duration::from_secs(5), || matches!(
            process_state(background),
            None | Some('Z' | 'X')
        )),
        "the background process {background} of the dead spawner survived: {:?}",
        process_state(background)
    );

    let record = home.wait_record("SPAWNER_DIED", WAIT);
    assert_eq!(record["details"]["pid"], spawner, "{record}");
    assert_eq!(record["result"]["ok"], false, "{record}");
    assert_eq!(record["result"]["exit_code"], -9, "{record}");
    assert!(record["details"]["new_pid"].is_i64(), "{record}");

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    (record, cgroup)
}

#[test]
fn killing_the_spawner_from_a_command_is_audited_contained_and_recovered() {
    if !runs_as_root("killing_the_spawner_from_a_command_is_audited_contained_and_recovered") {
        return;
    }
    let (record, cgroup) = spawner_killed_by_a_command(false);
    assert_eq!(record["details"]["containment"], "cgroup", "{record}");
    // The replacement and its commands are in the commands' own cgroup.
    let name = cgroup.rsplit('/').next().unwrap_or_default();
    assert!(name.starts_with("autogpt-shim-"), "{cgroup}");
}

#[test]
fn without_a_cgroup_the_daemon_reaps_and_kills_what_the_dead_spawner_left() {
    if !runs_as_root("without_a_cgroup_the_daemon_reaps_and_kills_what_the_dead_spawner_left") {
        return;
    }
    let (record, cgroup) = spawner_killed_by_a_command(true);
    assert_eq!(record["details"]["containment"], "subreaper", "{record}");
    assert!(!cgroup.contains("autogpt-shim-"), "{cgroup}");
}

#[test]
fn status_says_how_the_commands_would_be_contained() {
    if !runs_as_root("status_says_how_the_commands_would_be_contained") {
        return;
    }
    let home = Home::new();
    let status = |command: &mut std::process::Command| {
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("Command containment: "))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned()
    };
    let line = status(&mut home.command(&["status"]));
    assert!(
        line.starts_with("a cgroup v2 of their own below /")
            && line.ends_with(" and the daemon as their subreaper"),
        "{line}"
    );
    give_to_nobody(home.path());
    let mut command = home.command(&["status"]);
    command.uid(NOBODY).gid(NOBODY);
    let line = status(&mut command);
    assert!(
        line.starts_with("the daemon as their subreaper only (no cgroup: "),
        "{line}"
    );
}

/// Starts a shell session as root (commands in a cgroup of their own), runs
/// `attack` (which writes the spawner's pid to `spawner.pid` and then makes
/// it stop answering) and returns what the next `echo again` gets and how
/// long it took, the `SPAWNER_DIED` record and the spawner's pid.
fn spawner_silenced_by_a_command(attack: &str) -> (Value, Duration, Value, i32) {
    let home = Home::new();
    let emulator = plain_emulator();
    let (mut shim, conn) = shell_session(&home, &emulator, false);
    let first = conn
        .request(
            "EXECUTE_COMMAND",
            json!({"command": attack, "timeout_seconds": 20}),
        )
        .unwrap();
    let pid_file = home.root.join("spawner.pid");
    assert!(eventually(WAIT, || std::fs::read_to_string(&pid_file)
        .is_ok_and(|t| t.ends_with('\n'))));
    let spawner: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Never leave a stopped process behind, whatever the outcome.
    let _resume = KillOnDrop(spawner);
    std::thread::sleep(Duration::from_millis(300));

    let started = std::time::Instant::now();
    let mut next = call(&conn, json!({"command": "echo again"}));
    let mut took = started.elapsed();
    if next["type"] == "ERROR" {
        // The request that found the spawner silent may fail; the one
        // after it must run.
        let retried = std::time::Instant::now();
        next = call(&conn, json!({"command": "echo again"}));
        took = retried.elapsed();
    }
    // The command that silenced the spawner was answered, not left hanging.
    assert!(
        conn.wait_response(&first, WAIT).is_some(),
        "the silencing command got no answer"
    );
    let record = home.wait_record("SPAWNER_DIED", Duration::from_secs(2));
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    (next, took, record, spawner)
}

/// The command after the silenced spawner's ran promptly, and the old
/// spawner's `SPAWNER_DIED` record says it was killed.
fn the_next_command_ran_on_a_new_spawner(
    next: &Value,
    took: Duration,
    record: &Value,
    spawner: i32,
) {
    assert_eq!(next["type"], "COMMAND_RESULT", "{next}");
    assert_eq!(next["payload"]["stdout"], "again\n", "{next}");
    assert!(
        took < Duration::from_secs(3),
        "the next command took {took:?}"
    );
    assert_eq!(record["details"]["pid"], spawner, "{record}");
    assert_eq!(record["result"]["exit_code"], -9, "{record}");
}

#[test]
fn a_stopped_spawner_is_killed_audited_and_replaced_at_once() {
    let (next, took, record, spawner) =
        spawner_silenced_by_a_command("echo $PPID > spawner.pid; kill -STOP $PPID; sleep 30");
    the_next_command_ran_on_a_new_spawner(&next, took, &record, spawner);
    assert!(record["details"]["new_pid"].is_i64(), "{record}");
    assert!(matches!(process_state(spawner), None | Some('Z' | 'X')));
}

#[test]
fn a_spawner_frozen_in_its_cgroup_is_killed_after_the_reply_timeout_and_replaced() {
    if !runs_as_root(
        "a_spawner_frozen_in_its_cgroup_is_killed_after_the_reply_timeout_and_replaced",
    ) {
        return;
    }
    let (next, took, record, spawner) = spawner_silenced_by_a_command(
        "f=$(awk '$3 == \"cgroup2\" {print $2; exit}' /proc/mounts)\
$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.freeze; \
         test -w \"$f\" && echo $PPID > spawner.pid; echo 1 > \"$f\"; sleep 30",
    );
    the_next_command_ran_on_a_new_spawner(&next, took, &record, spawner);
    assert!(matches!(process_state(spawner), None | Some('Z' | 'X')));
}

/// The cgroup v2 directory this test process is in (the daemon it starts
/// creates the commands' cgroup below the same one).
fn own_cgroup_dir() -> std::path::PathBuf {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let point = mounts
        .lines()
        .find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let fields: Vec<&str> = mount.split(' ').collect();
            (fs.starts_with("cgroup2 ") && fields.get(3) == Some(&"/")).then(|| fields[4])
        })
        .expect("a cgroup v2 file system mounted at its root");
    std::path::Path::new(point).join(own.trim_start_matches('/'))
}

/// The spawner is launched as `start` begins, before the secret store is
/// opened. A start refused after that (here: no tokens) stops it, and the
/// commands' cgroup it was moved into goes with it.
#[test]
fn a_start_refused_before_it_runs_leaves_no_spawner_and_no_cgroup() {
    if !runs_as_root("a_start_refused_before_it_runs_leaves_no_spawner_and_no_cgroup") {
        return;
    }
    let home = Home::without_tokens();
    let emulator = plain_emulator();
    let mut shim = Shim::start(&home, &emulator, &["--enable-shell"]);
    let pid = shim.pid();
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());

    let group = format!("autogpt-shim-{pid}-");
    let cgroups = std::fs::read_dir(own_cgroup_dir()).unwrap();
    let left: Vec<String> = cgroups
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&group))
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    let in_group: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).ok()?;
            cgroup
                .contains(&group)
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect();
    assert!(
        in_group.is_empty(),
        "processes still in its cgroup: {in_group:?}"
    );
}
