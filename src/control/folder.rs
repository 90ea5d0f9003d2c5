//! The "canonical-accessible directory" of CONTROL.md §4.7 and the live
//! identity of a chosen folder: device, inode and canonical path for the
//! fingerprint (§6), birth time and inode generation for this shim's
//! stronger identity check, and grant verification steps 10–11a (§7.4).
//!
//! Everything about a folder is read from one descriptor opened with
//! `O_NOFOLLOW`, so the fingerprint, the birth time and the generation
//! describe the same directory. This module only looks; it never creates,
//! changes or follows a final symbolic link.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Access, AtFlags, FileType, Mode, OFlags, StatxFlags};

use super::grant::{self, Accepted, DirIdentity, GrantError};
use crate::jail::roots;

/// Why a folder is not a canonical-accessible directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FolderError {
    /// The path itself is a symbolic link.
    Symlink,
    /// Missing, not a directory, not readable+writable+searchable, not
    /// valid UTF-8, or unreadable metadata.
    Unavailable,
}

/// A directory that passed §4.7, with what identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalDir {
    /// The canonical path.
    pub path: PathBuf,
    /// The same path as text (it is valid UTF-8 by construction).
    pub text: String,
    /// `st_dev` in decimal, as the fingerprint prints it.
    pub device: String,
    /// `st_ino`.
    pub inode: u64,
    /// `(st_dev, st_ino)` for comparing with a pinned jail.
    pub dev_ino: (u64, u64),
    /// Birth time and generation where the filesystem has them.
    pub identity: DirIdentity,
}

impl CanonicalDir {
    /// The §6 fingerprint of this directory.
    pub fn fingerprint(&self) -> String {
        // POSIX normcase is the identity.
        grant::fingerprint(&self.device, self.inode, &self.text)
    }
}

/// §4.7 for `path`.
pub fn canonical_accessible(path: &Path) -> Result<CanonicalDir, FolderError> {
    let link = rustix::fs::lstat(path).map_err(|_| FolderError::Unavailable)?;
    if FileType::from_raw_mode(link.st_mode) == FileType::Symlink {
        return Err(FolderError::Symlink);
    }
    let canonical = std::fs::canonicalize(path).map_err(|_| FolderError::Unavailable)?;
    let text = canonical
        .to_str()
        .ok_or(FolderError::Unavailable)?
        .to_owned();
    // A directory that vanished or was swapped for a link since the
    // canonicalisation fails here rather than being described wrongly.
    let fd: OwnedFd = rustix::fs::open(
        &canonical,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| FolderError::Unavailable)?;
    let st = rustix::fs::fstat(&fd).map_err(|_| FolderError::Unavailable)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(FolderError::Unavailable);
    }
    rustix::fs::access(
        &canonical,
        Access::READ_OK | Access::WRITE_OK | Access::EXEC_OK,
    )
    .map_err(|_| FolderError::Unavailable)?;
    let identity = live_identity(&fd);
    let (dev, ino) = crate::jail::identity(&st);
    Ok(CanonicalDir {
        path: canonical,
        text,
        device: device_string(&st),
        inode: ino,
        dev_ino: (dev, ino),
        identity,
    })
}

/// `st_dev` as the reference prints it: unsigned on Linux, signed 32-bit on
/// macOS.
fn device_string(st: &rustix::fs::Stat) -> String {
    #[cfg(target_os = "macos")]
    {
        (st.st_dev as i32).to_string()
    }
    #[cfg(not(target_os = "macos"))]
    {
        crate::jail::identity(st).0.to_string()
    }
}

/// Birth time (statx) and inode generation of the open directory.
fn live_identity(fd: &OwnedFd) -> DirIdentity {
    let btime = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BTIME)
        .ok()
        .filter(|stx| StatxFlags::from_bits_retain(stx.stx_mask).contains(StatxFlags::BTIME))
        .map(|stx| format!("{}.{:09}", stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec));
    let generation = crate::sys::inode_generation(fd.as_fd()).map(|g| g.to_string());
    DirIdentity { btime, generation }
}

/// Steps 10–11a of §7.4: the claimed folder must still be the one the grant
/// was issued for, and not a dangerous root (§5 hardening note).
pub fn verify_folder(
    accepted: &Accepted,
    home: &Path,
    wsl: bool,
) -> Result<CanonicalDir, GrantError> {
    let dir = canonical_accessible(Path::new(OsStr::from_bytes(
        accepted.allowed_root.as_bytes(),
    )))
    .map_err(|e| match e {
        FolderError::Symlink => GrantError::SymlinkRoot,
        FolderError::Unavailable => GrantError::Unavailable,
    })?;
    if roots::check_dangerous_for(&dir.path, home, wsl).is_err() {
        return Err(GrantError::Unavailable);
    }
    if dir.fingerprint() != accepted.fingerprint {
        return Err(GrantError::Changed);
    }
    if let Some(claimed) = &accepted.identity {
        if !claimed.matches(&dir.identity) {
            return Err(GrantError::Changed);
        }
    }
    Ok(dir)
}
