//! Which directories may become a jail root (CLI.md §8): the legacy-mode
//! preparation of the configured `allowed_root` at start, and the list of
//! dangerous roots that is also meant for per-chat roots (CONTROL.md §5,
//! hardening note): the filesystem root, home and its ancestors, system
//! directories, the user's credential folders (and what holds them) and
//! configuration folders. The shim's own directories are refused by
//! `protected`, by identity.
//!
//! This module only creates the per-OS default root when it is missing and
//! otherwise just looks. It must never create a root the user configured
//! explicitly, change permissions of an existing directory, or accept a path
//! before symlinks are resolved: every verdict is about the canonical path.

use std::fmt;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::Access;
use rustix::io::Errno;

use crate::text::one_line;

/// The suggestion every dangerous-root message ends with (the per-OS
/// default, CLI.md §7.3).
#[cfg(target_os = "macos")]
const HINT: &str = "choose a dedicated workspace such as ~/Documents/autogpt-workspace";
#[cfg(not(target_os = "macos"))]
const HINT: &str = "choose a dedicated workspace such as ~/autogpt-workspace";

/// System directories refused as roots themselves; their subdirectories are
/// not refused by this list (CLI.md §8 step 4). The crate builds for Unix
/// only, so the Windows list (`%SystemRoot%`, drive roots, …) is left out
/// until there is a Windows build.
#[cfg(not(target_os = "macos"))]
const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin", "/srv",
    "/sys", "/usr", "/var",
];
#[cfg(target_os = "macos")]
const SYSTEM_DIRS: &[&str] = &[
    "/System",
    "/Library",
    "/Applications",
    "/private",
    "/usr",
    "/bin",
    "/sbin",
    "/etc",
    "/var",
    "/Volumes",
];

/// Pseudo-filesystems refused with everything inside them: no directory
/// there is a workspace, and writing into one changes the kernel or devices.
#[cfg(not(target_os = "macos"))]
const SYSTEM_TREES: &[&str] = &["/proc", "/sys", "/dev"];
#[cfg(target_os = "macos")]
const SYSTEM_TREES: &[&str] = &[];

/// The user's credential folders, relative to home: refused as roots with
/// everything inside them and everything holding them (keys and tokens live
/// there).
const CREDENTIAL_FOLDERS: &[&str] = &[".ssh", ".gnupg", ".aws", ".kube", ".docker"];

/// The OS keychain folders, relative to home, refused like credential
/// folders.
#[cfg(not(target_os = "macos"))]
const KEYCHAIN_FOLDERS: &[&str] = &[".local/share/keyrings", ".local/share/kwalletd"];
#[cfg(target_os = "macos")]
const KEYCHAIN_FOLDERS: &[&str] = &["Library/Keychains"];

/// The user's configuration folders, relative to home: refused as roots
/// themselves (every program's settings are inside, this shim's included),
/// while a subfolder that holds none of the shim's own files may be picked.
const CONFIGURATION_FOLDERS: &[&str] = &[".config", ".local"];

/// Why a root is refused. `Display` is one line naming the path and why.
#[derive(Debug)]
pub enum RootProblem {
    /// The configured root does not exist and is not the per-OS default.
    Missing(PathBuf),
    /// The canonical root is not a directory.
    NotADirectory(PathBuf),
    /// The real user lacks these of read, write and search permission.
    NoAccess(PathBuf, Access),
    /// The canonical root is `/`.
    FilesystemRoot(PathBuf),
    /// The canonical root is the home directory or one of its ancestors.
    HomeOrAncestor(PathBuf),
    /// The canonical root is a system directory or inside `/proc`, `/sys`
    /// or `/dev`.
    SystemDirectory(PathBuf),
    /// The canonical root is, holds or lies inside the user's credential
    /// folder (the second path), or is a configuration folder.
    SensitiveFolder(PathBuf, PathBuf),
    /// The canonical root is, holds or lies inside one of the shim's own
    /// directories.
    Protected(super::protected::Conflict),
    /// Creating, resolving or inspecting the root failed.
    Io(PathBuf, std::io::Error),
    /// The canonical root is not valid UTF-8, so it cannot be named on the
    /// wire.
    NotUnicode(PathBuf),
}

impl fmt::Display for RootProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Paths come from configuration or a chat's selection; a newline in
        // one must not forge a second line of output.
        let show = |p: &Path| one_line(&p.display().to_string());
        match self {
            RootProblem::Missing(p) => write!(f, "allowed_root {} does not exist", show(p)),
            RootProblem::NotADirectory(p) => {
                write!(f, "allowed_root {} is not a directory", show(p))
            }
            RootProblem::NoAccess(p, missing) => write!(
                f,
                "allowed_root {} lacks {} permission for this user",
                show(p),
                permission_names(*missing)
            ),
            RootProblem::FilesystemRoot(p) => {
                write!(f, "allowed_root {} is the filesystem root; {HINT}", show(p))
            }
            RootProblem::HomeOrAncestor(p) => write!(
                f,
                "allowed_root {} is the home directory or contains it; {HINT}",
                show(p)
            ),
            RootProblem::SystemDirectory(p) => {
                write!(f, "allowed_root {} is a system directory; {HINT}", show(p))
            }
            RootProblem::SensitiveFolder(p, folder) => write!(
                f,
                "allowed_root {} is or holds the credential or configuration folder {}; {HINT}",
                show(p),
                show(folder)
            ),
            RootProblem::Protected(conflict) => write!(f, "{conflict}"),
            RootProblem::Io(p, e) => {
                write!(f, "allowed_root {}: {}", show(p), one_line(&e.to_string()))
            }
            RootProblem::NotUnicode(p) => {
                write!(f, "allowed_root {} is not valid UTF-8", show(p))
            }
        }
    }
}

impl std::error::Error for RootProblem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RootProblem::Io(_, e) => Some(e),
            _ => None,
        }
    }
}

/// "read", "write and search", … for the bits of `missing`.
fn permission_names(missing: Access) -> String {
    let names: Vec<&str> = [
        (Access::READ_OK, "read"),
        (Access::WRITE_OK, "write"),
        (Access::EXEC_OK, "search"),
    ]
    .into_iter()
    .filter(|(bit, _)| missing.contains(*bit))
    .map(|(_, name)| name)
    .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "some".to_owned(),
    }
}

/// Refuses a dangerous root (CLI.md §8 step 4). `canonical` must already be
/// canonical: a symlink or `..` spelling is not seen through here. Looks at
/// the filesystem only to canonicalise `home`.
pub fn check_dangerous(canonical: &Path, home: &Path) -> Result<(), RootProblem> {
    check_dangerous_for(canonical, home, false)
}

/// [`check_dangerous`], and on WSL2 (`wsl`) also the Windows drive roots
/// the distribution mounts as `/mnt/<letter>` (CONTROL.md §5 hardening
/// note: whole drive roots are never session roots).
pub fn check_dangerous_for(canonical: &Path, home: &Path, wsl: bool) -> Result<(), RootProblem> {
    if wsl && is_wsl_drive_root(canonical) {
        return Err(RootProblem::FilesystemRoot(canonical.to_owned()));
    }
    check_listed(canonical, home)
}

/// `/mnt/c` and the like.
fn is_wsl_drive_root(path: &Path) -> bool {
    let mut components = path.components();
    matches!(
        (components.next(), components.next(), components.next(), components.next()),
        (
            Some(std::path::Component::RootDir),
            Some(std::path::Component::Normal(mnt)),
            Some(std::path::Component::Normal(letter)),
            None,
        ) if mnt == "mnt"
            && letter.len() == 1
            && letter.to_str().is_some_and(|l| l.as_bytes()[0].is_ascii_alphabetic())
    )
}

fn check_listed(canonical: &Path, home: &Path) -> Result<(), RootProblem> {
    let refuse = |problem: fn(PathBuf) -> RootProblem| Err(problem(canonical.to_owned()));
    if canonical == Path::new("/") {
        return refuse(RootProblem::FilesystemRoot);
    }
    // Both spellings of home count: the canonical one is what a canonical
    // root is compared with, the given one still matters when home cannot be
    // resolved (missing, or a link target the user cannot reach).
    // `Path::starts_with` compares whole components, so `/home/al` is not an
    // ancestor of `/home/alice`.
    let canonical_home = std::fs::canonicalize(home).ok();
    let contains_home = |h: &Path| h.is_absolute() && h.starts_with(canonical);
    if contains_home(home) || canonical_home.as_deref().is_some_and(contains_home) {
        return refuse(RootProblem::HomeOrAncestor);
    }
    let listed = SYSTEM_DIRS.iter().any(|d| canonical == Path::new(d));
    let inside = SYSTEM_TREES.iter().any(|d| canonical.starts_with(d));
    if listed || inside {
        return refuse(RootProblem::SystemDirectory);
    }
    check_sensitive(canonical, home, canonical_home.as_deref())
}

/// The credential and configuration folders of home, each in both
/// spellings of home and as its link target where it is a link.
fn check_sensitive(
    canonical: &Path,
    home: &Path,
    canonical_home: Option<&Path>,
) -> Result<(), RootProblem> {
    let spellings = |rel: &str| {
        let mut found = vec![home.join(rel)];
        found.extend(canonical_home.map(|h| h.join(rel)));
        found.extend(std::fs::canonicalize(home.join(rel)).ok());
        found
    };
    let refuse = |folder: PathBuf| Err(RootProblem::SensitiveFolder(canonical.to_owned(), folder));
    for rel in CREDENTIAL_FOLDERS.iter().chain(KEYCHAIN_FOLDERS) {
        for folder in spellings(rel) {
            if canonical.starts_with(&folder) || folder.starts_with(canonical) {
                return refuse(folder);
            }
        }
    }
    for rel in CONFIGURATION_FOLDERS {
        for folder in spellings(rel) {
            if folder.starts_with(canonical) {
                return refuse(folder);
            }
        }
    }
    Ok(())
}

/// A legacy-mode root ready to be pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRoot {
    /// The canonical path (symlinks resolved, valid UTF-8).
    pub path: PathBuf,
    /// True when the default root was missing and has just been created;
    /// the caller prints a line saying so.
    pub created: bool,
}

/// The start-time preparation of the legacy-mode root (CLI.md §8).
/// `configured` is absolute with `~` already expanded (configuration does
/// that); `is_default` says it is the per-OS default (§7.3), the only root
/// that is created when missing. `wsl` adds the WSL2 drive roots to the
/// refused list.
pub fn prepare_legacy_root(
    configured: &Path,
    is_default: bool,
    home: &Path,
    wsl: bool,
) -> Result<PreparedRoot, RootProblem> {
    let created = match inspect_legacy_root(configured, is_default, home, wsl)? {
        Inspected::Usable(path) => {
            return Ok(PreparedRoot {
                path,
                created: false,
            });
        }
        Inspected::WouldCreate => {
            // 0700 for every directory created, parents included: the
            // workspace is private to the user (subject to the umask, which
            // can only narrow it).
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(configured)
                .map_err(io(configured))?;
            true
        }
    };
    Ok(PreparedRoot {
        path: usable_root(configured, home, wsl)?,
        created,
    })
}

/// What [`inspect_legacy_root`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspected {
    /// The root exists and passes every check: its canonical path.
    Usable(PathBuf),
    /// The default root is missing; `start` creates it.
    WouldCreate,
}

/// [`prepare_legacy_root`] without creating anything (for `doctor`): a
/// missing default root is [`Inspected::WouldCreate`].
pub fn inspect_legacy_root(
    configured: &Path,
    is_default: bool,
    home: &Path,
    wsl: bool,
) -> Result<Inspected, RootProblem> {
    // `metadata` follows links, so a dangling link counts as missing; creating
    // then fails on the link itself rather than writing through it.
    match std::fs::metadata(configured) {
        Ok(_) => usable_root(configured, home, wsl).map(Inspected::Usable),
        Err(e) if e.kind() == ErrorKind::NotFound && is_default => Ok(Inspected::WouldCreate),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            Err(RootProblem::Missing(configured.to_owned()))
        }
        Err(e) => Err(io(configured)(e)),
    }
}

/// The checks of an existing root: canonical, not dangerous, a directory
/// the user can use, named in UTF-8.
fn usable_root(configured: &Path, home: &Path, wsl: bool) -> Result<PathBuf, RootProblem> {
    let canonical = std::fs::canonicalize(configured).map_err(io(configured))?;
    // The danger check comes before the usability checks so that e.g. /proc
    // is reported as a system directory, not as lacking write permission.
    check_dangerous_for(&canonical, home, wsl)?;
    let meta = std::fs::metadata(&canonical).map_err(io(&canonical))?;
    if !meta.is_dir() {
        return Err(RootProblem::NotADirectory(canonical));
    }
    let missing = missing_access(&canonical)?;
    if !missing.is_empty() {
        return Err(RootProblem::NoAccess(canonical, missing));
    }
    if canonical.to_str().is_none() {
        return Err(RootProblem::NotUnicode(canonical));
    }
    Ok(canonical)
}

/// `map_err` adapter naming the path an I/O error is about.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RootProblem + '_ {
    move |e| RootProblem::Io(path.to_owned(), e)
}

/// Which of read, write and search the real user lacks on `dir`, asked one
/// at a time so the message can name them. `access(2)` answers for the real
/// user and also reports a read-only filesystem for write.
fn missing_access(dir: &Path) -> Result<Access, RootProblem> {
    let mut missing = Access::empty();
    for bit in [Access::READ_OK, Access::WRITE_OK, Access::EXEC_OK] {
        match rustix::fs::access(dir, bit) {
            Ok(()) => {}
            Err(Errno::ACCESS | Errno::ROFS | Errno::PERM) => missing |= bit,
            Err(e) => return Err(RootProblem::Io(dir.to_owned(), e.into())),
        }
    }
    Ok(missing)
}
