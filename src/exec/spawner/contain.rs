//! Containment of the commands that does not depend on the spawner staying
//! alive (EXEC.md §11 L3 and L5a): a cgroup v2 of their own when one can be
//! created below this process's cgroup, and this process as a child
//! subreaper, so whatever a dead spawner leaves behind is re-parented here.
//!
//! The spawner is moved into the cgroup before it starts anything, so every
//! command and every descendant (ones that called `setsid` included) is in
//! it, and `cgroup.kill` ends them all at once. Without a cgroup the
//! orphans of a dead spawner come to this process, which kills them and
//! reaps them, again and again until none is left.
//!
//! This module never signals or reaps a process it has not identified as
//! coming from a spawner: a child of this process in a session other than
//! this process's own (the spawner and every command start sessions of
//! their own, and no process can join an existing session) that is not a
//! registered, live spawner. It never reaps with a wildcard `wait`, so exit
//! statuses waited for elsewhere are never taken.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};

/// How long [`Containment::kill_all`] keeps looking for processes being
/// re-parented here while a tree collapses.
const KILL_WINDOW: Duration = Duration::from_secs(3);

/// How often it looks again.
const KILL_TICK: Duration = Duration::from_millis(10);

/// The prefix of the cgroups this module creates.
const CGROUP_PREFIX: &str = "autogpt-shim-";

/// Distinguishes the cgroups of several spawners in one process.
static NEXT_CGROUP: AtomicU64 = AtomicU64::new(1);

/// The pids of the live spawners of this process. Held while a spawner is
/// started and while orphans are signalled, so a spawner just started is
/// never mistaken for an orphan.
static SPAWNERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn spawners() -> MutexGuard<'static, BTreeSet<i32>> {
    SPAWNERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `start` (which starts a spawner and returns its pid) with the
/// registry held, and registers the pid.
pub fn register_spawner(start: impl FnOnce() -> io::Result<Pid>) -> io::Result<Pid> {
    let mut registry = spawners();
    let pid = start()?;
    registry.insert(pid.as_raw_nonzero().get());
    Ok(pid)
}

/// Forgets a spawner that has been reaped.
pub fn unregister_spawner(pid: Pid) {
    spawners().remove(&pid.as_raw_nonzero().get());
}

/// Which mechanism contains the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// A cgroup v2 of their own (and the subreaper as well).
    Cgroup,
    /// This process as their subreaper only.
    Subreaper,
    /// Neither: only the spawner itself holds them.
    Uncontained,
}

impl Mechanism {
    /// The name used in the audit record.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Cgroup => "cgroup",
            Mechanism::Subreaper => "subreaper",
            Mechanism::Uncontained => "none",
        }
    }
}

/// The containment of one spawner's commands.
#[derive(Debug)]
pub struct Containment {
    cgroup: Mutex<Result<Cgroup, String>>,
    subreaper: Result<(), String>,
}

impl Containment {
    /// Makes this process a child subreaper and creates the commands'
    /// cgroup where possible. Each failure is kept as a reason.
    pub fn set_up() -> Containment {
        let subreaper = rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|e| format!("cannot become a child subreaper: {e}"));
        Containment {
            cgroup: Mutex::new(Cgroup::create()),
            subreaper,
        }
    }

    /// What [`set_up`](Self::set_up) would achieve here, found without
    /// creating anything (for `status` and `doctor`).
    pub fn probe() -> Available {
        let cgroup = own_cgroup_dir().and_then(|dir| {
            rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK)
                .map(|()| dir.clone())
                .map_err(|e| format!("{} is not writable: {e}", dir.display()))
        });
        match cgroup {
            Ok(dir) => Available {
                mechanism: Mechanism::Cgroup,
                description: format!(
                    "a cgroup v2 of their own below {} and the daemon as their subreaper",
                    dir.display()
                ),
            },
            Err(why) => Available {
                mechanism: Mechanism::Subreaper,
                description: format!("the daemon as their subreaper only (no cgroup: {why})"),
            },
        }
    }

    fn lock(&self) -> MutexGuard<'_, Result<Cgroup, String>> {
        self.cgroup.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The mechanism in force.
    pub fn mechanism(&self) -> Mechanism {
        match (self.lock().is_ok(), self.subreaper.is_ok()) {
            (true, _) => Mechanism::Cgroup,
            (false, true) => Mechanism::Subreaper,
            (false, false) => Mechanism::Uncontained,
        }
    }

    /// Moves a newly started spawner into the cgroup, before it starts
    /// anything. A cgroup that refuses it is given up for good (the reason
    /// is kept) and removed.
    pub fn adopt(&self, spawner: Pid) {
        let mut cgroup = self.lock();
        let Ok(group) = &*cgroup else {
            return;
        };
        if let Err(e) = group.write("cgroup.procs", &spawner.as_raw_nonzero().to_string()) {
            let why = format!("cannot move a process into {}: {e}", group.dir.display());
            *cgroup = Err(why);
        }
    }

    /// Kills everything a spawner that is gone was responsible for: the
    /// whole cgroup, and every orphan re-parented here, repeatedly until
    /// none is left or [`KILL_WINDOW`] has passed; reaps the orphans.
    /// Returns how many orphans were signalled here.
    pub fn kill_all(&self) -> usize {
        if let Ok(group) = &*self.lock() {
            let _ = group.write("cgroup.kill", "1");
            // A command may have frozen its own cgroup (which silences the
            // spawner); the replacement is moved into it and must run.
            let _ = group.write("cgroup.freeze", "0");
        }
        let mut signalled = BTreeSet::new();
        let deadline = Instant::now() + KILL_WINDOW;
        loop {
            let orphans = {
                // Held so a spawner started meanwhile is not taken for an
                // orphan.
                let registry = spawners();
                let orphans = orphans(&registry);
                for &(pid, zombie) in &orphans {
                    let Some(pid) = Pid::from_raw(pid) else {
                        continue;
                    };
                    if zombie {
                        let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
                    } else {
                        let _ = rustix::process::kill_process(pid, Signal::KILL);
                        signalled.insert(pid.as_raw_nonzero().get());
                    }
                }
                orphans
            };
            let populated = self.lock().as_ref().is_ok_and(Cgroup::populated);
            if (orphans.is_empty() && !populated) || Instant::now() >= deadline {
                return signalled.len();
            }
            std::thread::sleep(KILL_TICK);
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&*self.lock(), &self.subreaper) {
            (Ok(group), Ok(())) => write!(
                f,
                "the commands run in the cgroup {} and the daemon is their subreaper",
                group.dir.display()
            ),
            (Ok(group), Err(why)) => write!(
                f,
                "the commands run in the cgroup {} ({why})",
                group.dir.display()
            ),
            (Err(no_cgroup), Ok(())) => write!(
                f,
                "the daemon is the commands' subreaper; no cgroup of their own ({no_cgroup})"
            ),
            (Err(no_cgroup), Err(why)) => write!(
                f,
                "none: commands that leave their process group outlive a spawner that dies \
                 (no cgroup: {no_cgroup}; {why})"
            ),
        }
    }
}

/// The containment [`Containment::probe`] found available; `Display` is
/// one line saying what it is (or why there is no cgroup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    /// The strongest mechanism available.
    pub mechanism: Mechanism,
    description: String,
}

impl fmt::Display for Available {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

/// A cgroup v2 this process created for one spawner and its commands;
/// removed when dropped (once empty).
#[derive(Debug)]
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// Creates `autogpt-shim-<pid>-<n>` below this process's own cgroup,
    /// after removing empty ones left by processes that no longer exist.
    fn create() -> Result<Cgroup, String> {
        let parent = own_cgroup_dir()?;
        remove_stale(&parent);
        let me = rustix::process::getpid().as_raw_nonzero();
        let n = NEXT_CGROUP.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{CGROUP_PREFIX}{me}-{n}"));
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot create a cgroup below {}: {e}", parent.display()))?;
        let group = Cgroup { dir };
        if !group.dir.join("cgroup.kill").exists() {
            return Err("the kernel has no cgroup.kill (Linux 5.14 or newer)".into());
        }
        Ok(group)
    }

    fn write(&self, file: &str, text: &str) -> io::Result<()> {
        std::fs::write(self.dir.join(file), text)
    }

    /// Whether a live process is still in it.
    fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map(|events| events.lines().any(|l| l == "populated 1"))
            .unwrap_or(false)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Fails while a process is inside; the next start removes it.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Removes the empty cgroups this module created for processes that no
/// longer exist (a daemon killed with SIGKILL cannot remove its own).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CGROUP_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        if rustix::process::test_kill_process(owner) == Err(Errno::SRCH) {
            // Only an empty cgroup can be removed.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// This process's cgroup v2 directory: its path from `/proc/self/cgroup`
/// under the `cgroup2` mount found in `/proc/self/mountinfo`.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let own = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    mounts
        .lines()
        .find_map(|line| cgroup2_dir(line, own))
        .ok_or_else(|| "no cgroup v2 file system is mounted".into())
}

/// The directory of the cgroup `own` under the mount described by one
/// `mountinfo` line, if that line is a `cgroup2` mount containing it.
fn cgroup2_dir(line: &str, own: &str) -> Option<PathBuf> {
    let (mount, fs) = line.split_once(" - ")?;
    if fs.split(' ').next() != Some("cgroup2") {
        return None;
    }
    let mut fields = mount.split(' ');
    let root = unescape(fields.nth(3)?);
    let point = unescape(fields.next()?);
    let below = if root == "/" {
        own
    } else {
        own.strip_prefix(root.as_str())
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))?
    };
    Some(Path::new(&point).join(below.trim_start_matches('/')))
}

/// Undoes `mountinfo`'s octal escapes (`\040` for a space, …).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The children of this process that came from a spawner and are not a
/// registered spawner: `(pid, is a zombie)`.
fn orphans(spawners: &BTreeSet<i32>) -> Vec<(i32, bool)> {
    // Read from `/proc` like the children's: when the session leader lives
    // outside this pid namespace the kernel reports the session as 0, which
    // `getsid` cannot represent.
    let Some((_, _, own_session)) = std::fs::read("/proc/self/stat")
        .ok()
        .and_then(|stat| stat_fields(&stat))
    else {
        return Vec::new();
    };
    children_of_self()
        .into_iter()
        .filter(|child| child.session != own_session && !spawners.contains(&child.pid))
        .map(|child| (child.pid, child.state == 'Z'))
        .collect()
}

/// One child of this process, from its `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildStat {
    /// Its pid.
    pub pid: i32,
    /// The state letter (`Z` for a zombie).
    pub state: char,
    /// Its session id.
    pub session: i32,
}

/// The processes whose parent is this process, read from `/proc` (every
/// process's `stat`, so it works without `CONFIG_PROC_CHILDREN`). Zombies
/// are included until reaped.
pub fn children_of_self() -> Vec<ChildStat> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read(entry.path().join("stat")) else {
            continue;
        };
        match stat_fields(&stat) {
            Some((state, ppid, session)) if ppid == me => out.push(ChildStat {
                pid,
                state,
                session,
            }),
            _ => {}
        }
    }
    out
}

/// The state, parent pid and session of a `/proc/<pid>/stat` line. The
/// command name may contain spaces and parentheses, so fields are counted
/// after the last `)`.
pub fn stat_fields(stat: &[u8]) -> Option<(char, i32, i32)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let _pgrp = fields.next()?;
    let session = fields.next()?.parse().ok()?;
    Some((state, ppid, session))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        assert_eq!(
            stat_fields(b"12 (a) b) c) S 34 12 56 0"),
            Some(('S', 34, 56))
        );
        assert_eq!(stat_fields(b"12 (sleep) Z 1 12 12 0"), Some(('Z', 1, 12)));
        assert_eq!(stat_fields(b"12 (sleep"), None);
    }

    #[test]
    fn the_cgroup_directory_is_found_under_the_cgroup2_mount() {
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_dir(hybrid, "/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(
            cgroup2_dir(unified, "/user.slice/app.slice/x.service"),
            Some(PathBuf::from(
                "/sys/fs/cgroup/user.slice/app.slice/x.service"
            ))
        );
        // A mount of a subtree only holds the cgroups below its root.
        let subtree = r"30 23 0:26 /user.slice /mnt/my\040cg rw - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_dir(subtree, "/user.slice/a"),
            Some(PathBuf::from("/mnt/my cg/a"))
        );
        assert_eq!(cgroup2_dir(subtree, "/user.slicer"), None);
        let v1 = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu";
        assert_eq!(cgroup2_dir(v1, "/"), None);
    }
}
