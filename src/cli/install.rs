//! `install` and `uninstall` (CLI.md §9): write or remove the per-OS
//! autostart file and print the commands that activate or deactivate it.
//!
//! Neither loads the configuration: only `--config` (made absolute) or the
//! default config path goes into the file, whether or not it exists. Neither
//! ever runs `systemctl`, `launchctl` or `schtasks`; the user runs the
//! printed commands. Neither ever reads out, prints or writes a passphrase:
//! on Linux and WSL2 the unit names the passphrase file, when one is set,
//! by its path only.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::PROGRAM;
use crate::config::autostart::Autostart;
use crate::config::autostart::manager::UserManager;
use crate::config::autostart::render::{self, Entry};
use crate::config::{self, Context, Environment, OsPaths, Overrides, Platform};
use crate::exit;
use crate::secrets::{Passphrase, passphrase};
use crate::text::shown;

/// Runs `install` and returns its exit status.
pub fn install(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let ctx = Context::from_process();
    let (platform, paths) = match platform_and_paths(&ctx, "install", stderr) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let config_file = match config::config_file_path(overrides, &paths, ctx.cwd.as_deref()) {
        Ok(path) => path,
        Err(e) => return super::config_error(&e, stderr),
    };
    let exe = match own_executable() {
        Ok(exe) => exe,
        Err(e) => {
            say!(
                stderr,
                "{PROGRAM}: cannot write the autostart entry: the path of this program is unknown: {e}"
            );
            return exit::EX_CANTCREAT;
        }
    };
    let systemd = matches!(platform, Platform::Linux | Platform::Wsl2);
    let passphrase_file = if systemd {
        match passphrase_file(&ctx.env) {
            Ok(file) => file,
            Err(message) => {
                say!(stderr, "{PROGRAM}: {message}");
                return exit::EX_CONFIG;
            }
        }
    } else {
        None
    };
    let stdout_log = paths.daemon_stdout_log();
    let stderr_log = paths.daemon_stderr_log();
    let entry = Entry {
        exe: &exe,
        config: &config_file,
        stdout_log: &stdout_log,
        stderr_log: &stderr_log,
        passphrase_file: passphrase_file.as_deref(),
    };
    let bytes = match render::render(platform, &entry) {
        Ok(bytes) => bytes,
        Err(e) => {
            say!(stderr, "{PROGRAM}: cannot write the autostart entry: {e}");
            return exit::EX_CANTCREAT;
        }
    };
    let autostart = Autostart::of(platform, &paths);
    if let Err(e) = write_entry(&paths.daemon_log_dir, &autostart.target, &bytes) {
        say!(
            stderr,
            "{PROGRAM}: cannot write the autostart entry {}: {e}",
            shown(&autostart.target)
        );
        return exit::EX_CANTCREAT;
    }

    let mut notes = autostart.notes.clone();
    if let Some(file) = &passphrase_file {
        notes.push(format!(
            "the service reads the passphrase of the encrypted token file from {} \
             ({}); the unit holds only that path",
            shown(file),
            Passphrase::FILE_VARIABLE
        ));
    } else if passphrase::variable_present(&ctx.env) {
        notes.push(unpassed_passphrase_note(systemd, platform));
    } else if !systemd && ctx.env.get_non_empty(Passphrase::FILE_VARIABLE).is_some() {
        notes.push(unpassed_passphrase_note(false, platform));
    }
    if systemd {
        if let Some(problem) = UserManager::detect(&ctx.env).problem(platform) {
            notes.push(problem);
        }
    }

    say!(
        stdout,
        "Wrote autostart entry: {}",
        shown(&autostart.target)
    );
    say!(stdout, "Platform: {}", autostart.platform);
    say!(stdout);
    say!(stdout, "To activate, run:");
    say!(stdout, "  {}", autostart.enable);
    say!(stdout);
    say!(stdout, "To deactivate later, run:");
    say!(stdout, "  {}", autostart.disable);
    for note in &notes {
        say!(stdout);
        say!(stdout, "Note: {note}");
    }
    exit::SUCCESS
}

/// Runs `uninstall` and returns its exit status.
pub fn uninstall(stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let ctx = Context::from_process();
    let (platform, paths) = match platform_and_paths(&ctx, "uninstall", stderr) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let autostart = Autostart::of(platform, &paths);
    let target = &autostart.target;
    let removed = match remove_entry(target) {
        Ok(removed) => removed,
        Err(e) => {
            say!(
                stderr,
                "{PROGRAM}: warning: the autostart entry {} is still present: {e}",
                shown(target)
            );
            return exit::EX_CANTCREAT;
        }
    };
    say!(
        stdout,
        "Removed autostart entry (or it was already absent): {}",
        shown(target)
    );
    if !removed {
        say!(stdout, "There was no autostart entry to remove.");
    }
    say!(stdout);
    say!(
        stdout,
        "If the service manager already registered it, also run:"
    );
    say!(stdout, "  {}", autostart.disable);
    exit::SUCCESS
}

/// The platform (exit 69 without autostart support) and its paths (exit
/// 78 when, for example, no home directory is known).
fn platform_and_paths(
    ctx: &Context,
    command: &str,
    stderr: &mut dyn Write,
) -> Result<(Platform, OsPaths), u8> {
    let Some(platform) = ctx.host.platform else {
        say!(
            stderr,
            "{PROGRAM}: {command}: this system ({}) has no autostart support",
            ctx.host.os_name
        );
        return Err(exit::EX_UNAVAILABLE);
    };
    match OsPaths::from_env(&ctx.env) {
        Ok(paths) => Ok((platform, paths)),
        Err(e) => Err(super::config_error(&e, stderr)),
    }
}

/// The absolute path of the running binary (CLI.md §9.1), which must still
/// exist: a binary replaced while it runs has no path to start again.
fn own_executable() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if !exe.is_absolute() || !exe.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not a file", shown(&exe)),
        ));
    }
    Ok(exe)
}

/// The passphrase file for the unit: `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE`
/// made absolute, checked as the service will check it, so that a file the
/// service would refuse is reported now and not at the next boot.
fn passphrase_file(env: &Environment) -> Result<Option<PathBuf>, String> {
    let Some(raw) = env.get_non_empty(Passphrase::FILE_VARIABLE) else {
        return Ok(None);
    };
    let path = std::path::absolute(raw).map_err(|e| {
        format!(
            "{}: cannot make the path absolute: {e}",
            Passphrase::FILE_VARIABLE
        )
    })?;
    passphrase::check_file(&path).map_err(|e| e.to_string())?;
    Ok(Some(path))
}

/// Why a passphrase given only here does not reach the service.
fn unpassed_passphrase_note(systemd: bool, platform: Platform) -> String {
    if systemd {
        format!(
            "{} is set here, but the service does not receive it, and install never writes \
             a passphrase into a file: if this machine uses the encrypted token file, put \
             the passphrase in a file only you can read (chmod 600), set {} to its path and \
             run install again",
            Passphrase::VARIABLE,
            Passphrase::FILE_VARIABLE
        )
    } else {
        format!(
            "the autostart entry passes no passphrase on {}: the service uses the OS keychain",
            platform.as_str()
        )
    }
}

/// Creates the daemon's log directory (mode 0700, its parents as usual)
/// and the target's directory, then writes the file atomically (CLI.md
/// §9.1).
fn write_entry(log_dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = log_dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut private = std::fs::DirBuilder::new();
    private.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut private, 0o700);
    private.create(log_dir)?;
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::other("the autostart file has no directory"))?;
    std::fs::create_dir_all(dir)?;
    // 0644 less the umask: the file holds paths, no secret, and the
    // service manager reads it.
    crate::config::replace_file(target, bytes, 0o644)
}

/// Removes the autostart file if it is a file or a link (CLI.md §9.5);
/// `Ok(false)` when there was none. A directory in its place, or a file
/// that stays, is an error.
fn remove_entry(target: &Path) -> io::Result<bool> {
    let removed = match target.symlink_metadata() {
        Ok(meta) if meta.is_dir() => {
            return Err(io::Error::other("it is a directory, not a file"));
        }
        Ok(_) => match std::fs::remove_file(target) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    if target.symlink_metadata().is_ok() {
        return Err(io::Error::other("it could not be removed"));
    }
    Ok(removed)
}
