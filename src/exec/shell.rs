//! Which program a command runs (EXEC.md §4): the shell for `command`
//! mode, looked up on the shim's own `PATH`, and its arguments.
//!
//! `argv` mode needs nothing from here: its `argv[0]` is searched on the
//! child's `PATH` by `execvp` in the child. This module never executes
//! anything; it only inspects the filesystem like `which`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Access, FileType};

use crate::protocol::Shell;

/// The program and arguments for `command` run through `shell`, or `None`
/// when that shell is not available on this OS.
pub fn shell_argv(shell: Shell, command: &str, path: Option<&OsStr>) -> Option<Vec<OsString>> {
    let (binary, args): (PathBuf, &[&str]) = match shell {
        Shell::Auto => (which("bash", path).or_else(|| which("sh", path))?, &["-c"]),
        Shell::Bash => (which("bash", path)?, &["-c"]),
        Shell::Sh => (which("sh", path)?, &["-c"]),
        Shell::Zsh => (which("zsh", path)?, &["-c"]),
        Shell::Pwsh => (which("pwsh", path)?, &["-NoLogo", "-NoProfile", "-Command"]),
        // Windows-only shells.
        Shell::Powershell | Shell::Cmd => return None,
    };
    let mut argv = vec![binary.into_os_string()];
    argv.extend(args.iter().map(OsString::from));
    argv.push(command.into());
    Some(argv)
}

/// The first executable non-directory named `name` in the directories of
/// `path`. Empty and relative entries are skipped: they would name the
/// shim's own working directory, which is not where the command runs, and
/// the result must be absolute.
pub fn which(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    let path = path?;
    path.as_bytes()
        .split(|&b| b == b':')
        .map(|dir| Path::new(OsStr::from_bytes(dir)))
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(candidate: &Path) -> bool {
    let Ok(st) = rustix::fs::stat(candidate) else {
        return false;
    };
    FileType::from_raw_mode(st.st_mode) != FileType::Directory
        && rustix::fs::access(candidate, Access::EXEC_OK).is_ok()
}
