//! `APP_LIST_REQUEST` and `APP_LAUNCH` on Linux (CAPABILITIES.md §4.9): the
//! processes of `/proc`, and programs started outside the jail as the user
//! would start them.
//!
//! A launched program gets the shim's environment (a GUI needs `DISPLAY`,
//! `XAUTHORITY` and the session bus), `$HOME` as its working directory,
//! `/dev/null` for its standard streams and a session of its own; it may
//! outlive the shim. Launched children are reaped by one thread, so no
//! zombie stays behind. Nothing here ever goes through a shell.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::protocol::AppInfo;

use super::error::DesktopError;

/// The longest `comm` kept (the kernel's own limit is 15 bytes).
const MAX_COMM_BYTES: u64 = 64;

/// Launched children not yet reaped; more are refused rather than left
/// unwatched.
const MAX_UNREAPED: usize = 256;

/// How often the reaper looks for exited children.
const REAP_EVERY: Duration = Duration::from_millis(500);

/// Every process whose `comm` is readable, by ascending pid.
pub fn list(proc_root: &Path) -> Result<Vec<AppInfo>, DesktopError> {
    let entries = std::fs::read_dir(proc_root)
        .map_err(|e| DesktopError::unsupported("app.list", format!("cannot read /proc: {e}")))?;
    let mut pids: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect();
    pids.sort_unstable();
    let apps = pids
        .into_iter()
        .filter_map(|pid| {
            let dir = proc_root.join(pid.to_string());
            let comm = crate::config::read_small_file(&dir.join("comm"), MAX_COMM_BYTES).ok()?;
            let name = String::from_utf8_lossy(&comm).trim().to_owned();
            let executable_path = std::fs::read_link(dir.join("exe"))
                .ok()
                .and_then(|p| p.into_os_string().into_string().ok());
            Some(AppInfo {
                pid: i64::from(pid),
                name,
                bundle_id: None,
                executable_path,
                is_frontmost: false,
                window_count: 0,
            })
        })
        .collect();
    Ok(apps)
}

/// How a launch request is carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// `[program, args…]`, directly.
    Program { program: PathBuf, args: Vec<String> },
    /// A `.desktop` entry through `gtk-launch NAME` or `dex PATH`.
    DesktopEntry { launcher: PathBuf, arg: OsString },
}

/// Decides how to launch `executable_path`; `path_var` is the `PATH` the
/// launchers are looked up in.
pub fn plan(
    executable_path: Option<&str>,
    args: &[String],
    path_var: Option<&std::ffi::OsStr>,
) -> Result<Launch, DesktopError> {
    let Some(executable) = executable_path.filter(|p| !p.is_empty()) else {
        return Err(DesktopError::unsupported(
            "app.launch",
            "executable_path is required on Linux",
        ));
    };
    if let Some(stem) = executable.strip_suffix(".desktop") {
        let name = Path::new(stem)
            .file_name()
            .map(OsString::from)
            .unwrap_or_default();
        if let Some(launcher) = find_on_path("gtk-launch", path_var) {
            return Ok(Launch::DesktopEntry {
                launcher,
                arg: name,
            });
        }
        if let Some(launcher) = find_on_path("dex", path_var) {
            return Ok(Launch::DesktopEntry {
                launcher,
                arg: OsString::from(executable),
            });
        }
        return Err(DesktopError::unsupported(
            "app.launch",
            ".desktop launch needs gtk-launch or dex",
        ));
    }
    Ok(Launch::Program {
        program: PathBuf::from(executable),
        args: args.to_vec(),
    })
}

/// An executable file named `name` in one of `path_var`'s directories.
fn find_on_path(name: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Starts launched programs and reaps them when they exit.
#[derive(Debug, Default)]
pub struct Launcher {
    children: Arc<Mutex<Vec<Child>>>,
    reaper_started: Mutex<bool>,
}

impl Launcher {
    /// Starts `launch` with `env` in `home`; returns its pid.
    pub fn start(
        &self,
        launch: &Launch,
        env: &[(OsString, OsString)],
        home: &Path,
    ) -> Result<u32, DesktopError> {
        let mut children = lock(&self.children);
        if children.len() >= MAX_UNREAPED {
            return Err(DesktopError::Internal(format!(
                "{MAX_UNREAPED} launched programs are still running"
            )));
        }
        let mut command = match launch {
            Launch::Program { program, args } => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            Launch::DesktopEntry { launcher, arg } => {
                let mut c = Command::new(launcher);
                c.arg(arg);
                c
            }
        };
        command
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        crate::sys::prepare_app_child(&mut command)
            .map_err(|e| DesktopError::Internal(e.to_string()))?;
        let child = command.spawn().map_err(|e| {
            let what = match launch {
                Launch::Program { program, .. } => program.display().to_string(),
                Launch::DesktopEntry { launcher, .. } => launcher.display().to_string(),
            };
            DesktopError::Internal(format!("cannot start {what}: {e}"))
        })?;
        let pid = child.id();
        children.push(child);
        drop(children);
        self.start_reaper();
        Ok(pid)
    }

    fn start_reaper(&self) {
        let mut started = lock(&self.reaper_started);
        if *started {
            return;
        }
        let children = Arc::clone(&self.children);
        let spawned = std::thread::Builder::new()
            .name("app-reaper".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(REAP_EVERY);
                    lock(&children).retain_mut(|child| matches!(child.try_wait(), Ok(None)));
                }
            });
        *started = spawned.is_ok();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_holds_this_process_with_its_name_and_executable() {
        let apps = list(Path::new("/proc")).unwrap();
        let me = apps
            .iter()
            .find(|a| a.pid == i64::from(std::process::id()))
            .unwrap();
        assert!(!me.name.is_empty());
        assert!(me.executable_path.is_some());
        assert!(apps.windows(2).all(|w| w[0].pid < w[1].pid));
    }

    #[test]
    fn a_launch_without_executable_path_is_refused() {
        assert_eq!(
            plan(None, &[], None),
            Err(DesktopError::unsupported(
                "app.launch",
                "executable_path is required on Linux"
            ))
        );
    }

    #[test]
    fn a_desktop_entry_without_launchers_is_refused() {
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            plan(
                Some("/usr/share/applications/x.desktop"),
                &[],
                Some(empty.path().as_os_str())
            ),
            Err(DesktopError::unsupported(
                "app.launch",
                ".desktop launch needs gtk-launch or dex"
            ))
        );
    }

    #[test]
    fn a_launched_program_runs_in_home_and_is_reaped() {
        let home = tempfile::tempdir().unwrap();
        let launcher = Launcher::default();
        let launch = plan(Some("/bin/sh"), &["-c".into(), "pwd > out".into()], None).unwrap();
        let pid = launcher
            .start(
                &launch,
                &[(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
                home.path(),
            )
            .unwrap();
        let out = home.path().join("out");
        for _ in 0..100 {
            if std::fs::read_to_string(&out).is_ok_and(|s| !s.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            std::fs::read_to_string(&out).unwrap().trim(),
            home.path().to_str().unwrap()
        );
        for _ in 0..100 {
            if lock(&launcher.children).is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(lock(&launcher.children).is_empty());
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists() || {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                !stat.contains(") Z ")
            }
        );
    }
}
