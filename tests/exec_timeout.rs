//! EXEC.md §9 and §10: at the timeout the group gets SIGTERM, then SIGKILL
//! at the 2 s mark if any member remains; the result is a
//! `COMMAND_RESULT` with `timed_out`, audited as `COMMAND_TIMEOUT`; after a
//! normal exit leftover holders of the pipes delay the reply by at most 2 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::time::{Duration, Instant};

use autogpt_shim::exec::{group_gone, terminate_group};
use exec_support::*;
use rustix::process::Pid;

/// True while `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(") ").unwrap().1.starts_with('Z'),
        Err(_) => false,
    }
}

fn wait_gone(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !alive(pid)
}

#[test]
fn sigterm_ends_a_cooperative_command() {
    let fx = Fx::new();
    let started = Instant::now();
    let out = fx.run(&with_timeout(argv(&["sleep", "30"]), 1));
    let elapsed = started.elapsed();
    let r = result(&out);
    assert!(r.timed_out);
    assert_eq!(r.exit_code, -15);
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    let (details, audit) = record(&out);
    assert!(!audit.ok);
    assert_eq!(audit.error_code.as_deref(), Some("COMMAND_TIMEOUT"));
    assert_eq!(audit.exit_code, Some(-15));
    assert_eq!(details["timeout_seconds"], 1);
}

#[test]
fn sigkill_follows_after_two_seconds_when_sigterm_is_ignored() {
    let fx = Fx::new();
    let started = Instant::now();
    let out = fx.run(&with_timeout(
        command("trap '' TERM; echo before; sleep 30; echo after"),
        1,
    ));
    let elapsed = started.elapsed();
    let r = result(&out);
    assert!(r.timed_out);
    assert_eq!(r.exit_code, -9);
    assert_eq!(r.stdout, "before\n");
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert!(r.duration_seconds >= 3.0 && r.duration_seconds < 5.0);
    assert_eq!(record(&out).1.exit_code, Some(-9));
}

#[test]
fn group_members_ignoring_sigterm_are_killed_even_after_the_leader_exits() {
    let fx = Fx::new();
    let pidfile = fx.root.join("bg.pid");
    // The leader dies of SIGTERM; the background member ignores it and
    // would survive the reference's leader-only check.
    let req = with_timeout(
        command(&format!(
            "sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' & echo $! > {}; wait",
            pidfile.display()
        )),
        1,
    );
    let started = Instant::now();
    let out = fx.run(&req);
    let r = result(&out);
    assert!(r.timed_out);
    let bg: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(bg), "background member {bg} survived");
    assert!(started.elapsed() < Duration::from_secs(6));
}

#[test]
fn command_finishing_in_time_is_not_timed_out() {
    let fx = Fx::new();
    let out = fx.run(&with_timeout(command("sleep 0.1; echo done"), 5));
    let r = result(&out);
    assert!(!r.timed_out);
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout, "done\n");
    assert_eq!(out.leftover_group, None);
}

#[test]
fn trapped_sigterm_reports_the_programs_own_code() {
    let fx = Fx::new();
    let out = fx.run(&with_timeout(
        command("trap 'exit 143' TERM; sleep 30 & wait"),
        1,
    ));
    let r = result(&out);
    assert!(r.timed_out);
    assert_eq!(r.exit_code, 143);
}

#[test]
fn leftover_pipe_holders_delay_the_reply_by_at_most_two_seconds() {
    let fx = Fx::new();
    let started = Instant::now();
    let out = fx.run(&command("sleep 30 & echo $$ $!"));
    let elapsed = started.elapsed();
    let r = result(&out);
    assert!(!r.timed_out);
    assert_eq!(r.exit_code, 0);
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    // The leftover is not killed on a normal exit; its group is handed to
    // the owner, which terminates it later.
    let (group, bg) = r.stdout.trim().split_once(' ').unwrap();
    let (group, bg): (i32, i32) = (group.parse().unwrap(), bg.parse().unwrap());
    assert!(alive(bg));
    let leftover = out.leftover_group.unwrap();
    assert_eq!(leftover, Pid::from_raw(group).unwrap());
    terminate_group(leftover);
    assert!(wait_gone(bg));
    assert!(group_gone(leftover));
}

#[test]
fn terminate_group_escalates_to_sigkill() {
    let fx = Fx::new();
    let out = fx.run(&command("sh -c 'trap \"\" TERM; sleep 30' & echo $!"));
    let bg: i32 = result(&out).stdout.trim().parse().unwrap();
    let leftover = out.leftover_group.unwrap();
    let started = Instant::now();
    terminate_group(leftover);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(wait_gone(bg));
}
