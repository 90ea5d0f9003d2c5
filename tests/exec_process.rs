//! EXEC.md §6: the command runs in a new session (its pid is the group
//! id), with stdin `/dev/null`, an empty signal mask, the default `SIGPIPE`
//! action and no descriptors besides its standard streams; and §10 exit
//! codes, including death by signal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::os::fd::AsFd;

use exec_support::*;

/// SIGPIPE's number on Linux.
const SIGPIPE: u32 = 13;

/// Fields of `/proc/self/status`-style output.
fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{name} missing in {text}"))
}

#[test]
fn child_leads_its_own_session_and_group() {
    let fx = Fx::new();
    let out = fx.run(&argv(&["cat", "/proc/self/stat"]));
    let stat = &result(&out).stdout;
    // pid (comm) state ppid pgrp session …
    let (pid, rest) = stat.split_once(" (").unwrap();
    let after_comm = rest.rsplit_once(") ").unwrap().1;
    let fields: Vec<&str> = after_comm.split(' ').collect();
    assert_eq!(fields[2], pid, "pgrp");
    assert_eq!(fields[3], pid, "session");
    // Our own session, read the same way: `getsid` reports 0 when the
    // session leader lives outside this pid namespace (as in containers).
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    let own_after_comm = own.rsplit_once(") ").unwrap().1;
    let own_session = own_after_comm.split(' ').nth(3).unwrap();
    assert_ne!(fields[3], own_session, "not our session");
}

#[test]
fn signal_mask_is_empty_and_sigpipe_not_ignored() {
    let fx = Fx::new();
    let out = fx.run(&argv(&["cat", "/proc/self/status"]));
    let status = &result(&out).stdout;
    assert_eq!(field(status, "SigBlk:"), "0000000000000000");
    let ignored = u64::from_str_radix(field(status, "SigIgn:"), 16).unwrap();
    assert_eq!(ignored & (1 << (SIGPIPE - 1)), 0);
}

#[test]
fn stdin_is_dev_null() {
    let fx = Fx::new();
    let out = fx.run(&command("cat; readlink /proc/self/fd/0"));
    assert_eq!(result(&out).stdout, "/dev/null\n");
}

#[test]
fn only_the_standard_streams_are_inherited() {
    let fx = Fx::new();
    // A descriptor this process holds without close-on-exec must not leak.
    // (`; true` keeps the shell from exec'ing `ls`, whose own directory
    // descriptor would show up.)
    let leaky = rustix::io::dup(std::io::stderr().as_fd()).unwrap();
    let out = fx.run(&command("ls /proc/$$/fd; true"));
    drop(leaky);
    assert_eq!(result(&out).stdout, "0\n1\n2\n");
}

#[test]
fn exit_status_is_reported_and_audited_ok() {
    let fx = Fx::new();
    let out = fx.run(&command("exit 3"));
    let r = result(&out);
    assert_eq!(r.exit_code, 3);
    assert!(!r.timed_out);
    let (_, audit) = record(&out);
    assert!(audit.ok);
    assert_eq!(audit.exit_code, Some(3));
    assert_eq!(audit.error_code, None);
}

#[test]
fn death_by_signal_is_negative() {
    let fx = Fx::new();
    for (signal, code) in [("SEGV", -11), ("KILL", -9), ("TERM", -15)] {
        let out = fx.run(&argv(&["sh", "-c", &format!("kill -{signal} $$")]));
        assert_eq!(result(&out).exit_code, code, "{signal}");
        assert_eq!(record(&out).1.exit_code, Some(code));
    }
}

#[test]
fn duration_has_whole_milliseconds() {
    let fx = Fx::new();
    let out = fx.run(&command("sleep 0.2"));
    let r = result(&out);
    let ms = r.duration_seconds * 1000.0;
    assert!((ms - ms.round()).abs() < 1e-6, "{}", r.duration_seconds);
    assert!(r.duration_seconds >= 0.2 && r.duration_seconds < 5.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = ms.round() as u64;
    assert_eq!(record(&out).1.duration_ms, whole);
}

#[test]
fn direct_child_gets_sigkill_as_parent_death_signal() {
    let fx = Fx::new();
    if shell_which("python3").is_none() {
        eprintln!("python3 not installed; skipping");
        return;
    }
    // PR_GET_PDEATHSIG = 2 stores the signal number at the pointer.
    let probe = "import ctypes; s = ctypes.c_int(); \
                 ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)";
    let out = fx.run(&argv(&["python3", "-c", probe]));
    assert_eq!(result(&out).stdout, "9\n");
}

fn shell_which(name: &str) -> Option<std::path::PathBuf> {
    PATH.split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.exists())
}
