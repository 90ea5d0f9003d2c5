//! Where the file store's passphrase comes from, and taking it out of the
//! process environment.
//!
//! Sources, first match wins:
//!
//! 1. the file named by `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE` (a regular
//!    file owned by the user, no group or other permissions);
//! 2. the systemd credential `$CREDENTIALS_DIRECTORY/autogpt-shim-passphrase`,
//!    when that file exists (owned by the user or by root, no permissions
//!    for others: the service manager may grant the user access by ACL);
//! 3. the environment variable `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE`.
//!
//! A file holds the passphrase's exact bytes, except that one trailing line
//! break (`\n` or `\r\n`) is dropped, as editors and `echo` add one.
//!
//! [`take_from_process`] runs first thing in every process: it removes the
//! variable from the environment and overwrites its bytes in the initial
//! environment block, so neither `/proc/<pid>/environ` nor any later
//! snapshot of the environment holds it. This module never prints a
//! passphrase and never keeps one outside a zeroizing buffer.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rustix::fs::{Mode, OFlags};
use zeroize::Zeroizing;

use super::error::{PassphraseFileProblem, SecretError};
use super::secret::{Passphrase, PassphraseOrigin};
use crate::config::Environment;

/// The largest passphrase file read; a passphrase is a line, not a document.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The variable systemd sets to the unit's credential directory.
const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// The passphrase taken out of this process's environment at start.
static TAKEN: Mutex<Option<Passphrase>> = Mutex::new(None);

/// Moves `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE` out of the process environment
/// into this module (see the module documentation). Must be called while
/// the process has only one thread, before anything reads the environment.
pub fn take_from_process() {
    let taken = crate::sys::take_env_var(Passphrase::VARIABLE)
        .and_then(|bytes| Passphrase::from_secret(bytes, PassphraseOrigin::Variable));
    if taken.is_some() {
        *TAKEN.lock().unwrap_or_else(PoisonError::into_inner) = taken;
    }
}

/// The passphrase by the precedence of the module documentation; `None`
/// when no source provides one. Variables are read from `env`; the
/// variable itself, once taken from the process, comes from
/// [`take_from_process`] (and is handed out once).
pub(crate) fn resolve(env: &Environment) -> Result<Option<Passphrase>, SecretError> {
    if let Some(path) = env.get_non_empty(Passphrase::FILE_VARIABLE) {
        let path = PathBuf::from(path);
        return load(&path, Owner::User, PassphraseOrigin::File(path.clone()))
            .map(Some)
            .map_err(|problem| SecretError::PassphraseFile { path, problem });
    }
    if let Some(dir) = env.get_non_empty(CREDENTIALS_DIRECTORY) {
        let path = Path::new(dir).join(Passphrase::CREDENTIAL);
        match load(
            &path,
            Owner::UserOrRoot,
            PassphraseOrigin::Credential(path.clone()),
        ) {
            // A unit without this credential still has the directory.
            Err(PassphraseFileProblem::Missing) => {}
            loaded => {
                return loaded
                    .map(Some)
                    .map_err(|problem| SecretError::PassphraseFile { path, problem });
            }
        }
    }
    if let Some(passphrase) = Passphrase::from_os_str(env.get(Passphrase::VARIABLE)) {
        return Ok(Some(passphrase));
    }
    Ok(TAKEN.lock().unwrap_or_else(PoisonError::into_inner).take())
}

/// Whether the passphrase is given by the variable itself: in `env`, or
/// taken from this process's environment at start and not handed out yet.
/// Says nothing about the value.
pub fn variable_present(env: &Environment) -> bool {
    env.get_non_empty(Passphrase::VARIABLE).is_some()
        || TAKEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
}

/// The file the passphrase is read from, by the precedence of [`resolve`]:
/// the file named by `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE` (made
/// absolute), else the systemd credential when it exists; `None` when the
/// passphrase comes from the environment or not at all. The shim protects
/// its folder from every session root.
pub fn source_file(env: &Environment) -> Option<PathBuf> {
    if let Some(path) = env.get_non_empty(Passphrase::FILE_VARIABLE) {
        return std::path::absolute(path).ok();
    }
    let dir = env.get_non_empty(CREDENTIALS_DIRECTORY)?;
    let path = std::path::absolute(Path::new(dir).join(Passphrase::CREDENTIAL)).ok()?;
    path.symlink_metadata().is_ok().then_some(path)
}

/// Checks the passphrase file at `path` as [`resolve`] will when a service
/// starts with `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE` naming it: a
/// regular, non-empty file of this user with no group or other
/// permissions. For `install`, which writes the file's path (never the
/// passphrase) into the autostart entry; the bytes read are zeroized at
/// once.
pub fn check_file(path: &Path) -> Result<(), SecretError> {
    load(
        path,
        Owner::User,
        PassphraseOrigin::File(path.to_path_buf()),
    )
    .map(drop)
    .map_err(|problem| SecretError::PassphraseFile {
        path: path.to_path_buf(),
        problem,
    })
}

/// The passphrase in the file at `path`.
fn load(
    path: &Path,
    owner: Owner,
    origin: PassphraseOrigin,
) -> Result<Passphrase, PassphraseFileProblem> {
    let bytes = read_file(path, owner)?;
    Passphrase::from_secret(bytes, origin).ok_or(PassphraseFileProblem::Empty)
}

/// Who may own a passphrase file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Only the user running the shim; no group or other permissions.
    User,
    /// The user or root (a service manager's credential); no permissions
    /// for others.
    UserOrRoot,
}

/// Reads a passphrase file after checking it is a regular file with safe
/// ownership and permissions. The checks apply to the opened file (no
/// race with a rename), and a FIFO cannot block the open.
fn read_file(path: &Path, owner: Owner) -> Result<Zeroizing<Vec<u8>>, PassphraseFileProblem> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let file = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(file) => file,
        Err(rustix::io::Errno::NOENT) => return Err(PassphraseFileProblem::Missing),
        Err(e) => return Err(PassphraseFileProblem::Io(e.into())),
    };
    let st = rustix::fs::fstat(&file).map_err(|e| PassphraseFileProblem::Io(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(PassphraseFileProblem::NotRegular);
    }
    let me = rustix::process::geteuid().as_raw();
    let owner_ok = st.st_uid == me || (owner == Owner::UserOrRoot && st.st_uid == 0);
    if !owner_ok {
        return Err(PassphraseFileProblem::NotOwned { uid: st.st_uid });
    }
    let forbidden = match owner {
        Owner::User => 0o077,
        Owner::UserOrRoot => 0o007,
    };
    let mode = st.st_mode & 0o7777;
    if mode & forbidden != 0 {
        return Err(PassphraseFileProblem::Accessible { mode });
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(PassphraseFileProblem::TooLarge);
    }
    let mut bytes = Zeroizing::new(vec![0u8; MAX_FILE_BYTES as usize + 1]);
    let mut filled = 0;
    loop {
        match rustix::io::read(&file, &mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if filled > MAX_FILE_BYTES as usize {
                    return Err(PassphraseFileProblem::TooLarge);
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(PassphraseFileProblem::Io(e.into())),
        }
    }
    let mut end = filled;
    if bytes[..end].ends_with(b"\n") {
        end -= 1;
        if bytes[..end].ends_with(b"\r") {
            end -= 1;
        }
    }
    // Truncating a zeroizing vector leaves the dropped tail in its spare
    // capacity, which is zeroed with the rest on drop.
    bytes.truncate(end);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn file_with(text: &[u8], mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn one_trailing_line_break_is_dropped_and_nothing_else() {
        for (text, expected) in [
            (&b"pw\n"[..], &b"pw"[..]),
            (b"pw\r\n", b"pw"),
            (b"pw\n\n", b"pw\n"),
            (b" pw ", b" pw "),
        ] {
            let (_dir, path) = file_with(text, 0o600);
            assert_eq!(&read_file(&path, Owner::User).unwrap()[..], expected);
        }
    }

    #[test]
    fn group_or_other_permissions_are_refused() {
        let (_dir, path) = file_with(b"pw", 0o640);
        assert!(matches!(
            read_file(&path, Owner::User),
            Err(PassphraseFileProblem::Accessible { mode: 0o640 })
        ));
        // A credential may be group-readable (an ACL mask), never other.
        assert!(read_file(&path, Owner::UserOrRoot).is_ok());
        let (_dir, path) = file_with(b"pw", 0o604);
        assert!(read_file(&path, Owner::UserOrRoot).is_err());
    }

    #[test]
    fn a_directory_is_not_a_passphrase_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_file(dir.path(), Owner::User),
            Err(PassphraseFileProblem::NotRegular)
        ));
    }

    #[test]
    fn the_file_beats_the_credential_and_the_variable() {
        let (_dir, path) = file_with(b"from-file\n", 0o600);
        let env = Environment::from_pairs([
            (Passphrase::FILE_VARIABLE, path.to_str().unwrap()),
            (Passphrase::VARIABLE, "from-variable"),
        ]);
        let got = resolve(&env).unwrap().unwrap();
        assert_eq!(got.bytes(), b"from-file");
        assert_eq!(got.origin(), &PassphraseOrigin::File(path));
        let env = Environment::from_pairs([(Passphrase::VARIABLE, "from-variable")]);
        assert_eq!(resolve(&env).unwrap().unwrap().bytes(), b"from-variable");
    }
}
