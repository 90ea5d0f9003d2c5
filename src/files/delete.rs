//! `FILE_DELETE` (FILES.md §5): removes the directory entry a path names —
//! the entry itself, never what a symlink there points to — and, when asked,
//! a whole directory tree beneath it.
//!
//! The recursive delete (FILES.md §5.3) works on descriptors only: an
//! explicit stack with one entry per level, of which only the deepest few
//! dozen hold an open directory (ancestors are re-entered through a
//! verified `..`, so depth does not exhaust descriptors), entries examined
//! with `fstatat(AT_SYMLINK_NOFOLLOW)`. It must never follow a symlink,
//! never descend into another filesystem or mount (a mount inside the root
//! may be an outside directory, JAIL.md D12), never continue in a directory
//! it has not verified and never remove the root directory itself (JAIL.md
//! §6.9), however the request spells it. With `jail_no_xdev` a mount point
//! named by the request is refused as a jail violation.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat, StatxFlags};
use rustix::io::Errno;
use serde_json::{Value, json};

use super::write::open_parent;
use super::{FileContext, FileError, FileOutcome, JailedError, Step, jailed, os_error};
use crate::audit::Details;
use crate::jail::{Decision, EnforceError, Entry, Jail, Rejection, identity};
use crate::protocol::{Ack, FileDelete, Message, MessageType};

/// How often one directory is re-read when removing it finds it not empty
/// (entries created concurrently, or missed while the listing changed).
const MAX_RESCANS: u8 = 2;

/// Handles one `FILE_DELETE`.
pub fn delete(ctx: &FileContext<'_>, req: &FileDelete) -> FileOutcome {
    let jail = ctx.jail;
    let mut shown = None;
    let result = jailed(jail, &req.path, |d| {
        shown = Some(d.resolved.clone());
        let Some(entry) = acted_on(jail, &req.path, d)? else {
            return Err(Step::Reject(root_refusal(&req.path)));
        };
        let dir = match open_parent(jail, &entry.parent) {
            Ok(fd) => fd,
            Err(EnforceError::NotFound) => return missing(req, d),
            // A looping link in the parent: nothing can exist beneath it.
            Err(EnforceError::Changed) if d.looped => return missing(req, d),
            Err(e) => return Err(e.into()),
        };
        // Existence is that of the entry, not of what it points to: a
        // dangling or looping link exists and is removed (FILES.md §5.2).
        let st = match rustix::fs::statat(&dir, entry.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT | Errno::NOTDIR) => return missing(req, d),
            Err(e) => return Err(Step::Fail(os_error(&d.resolved, e))),
        };
        if jail.is_root(&st) {
            return Err(Step::Reject(root_refusal(&req.path)));
        }
        super::entry_mount_ok(jail, dir.as_fd(), &entry.name, &d.resolved)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            if req.recursive {
                return delete_tree(jail, dir.as_fd(), &entry.name, &d.resolved);
            }
            return match rustix::fs::unlinkat(&dir, entry.name.as_os_str(), AtFlags::REMOVEDIR) {
                Ok(()) => Ok(()),
                Err(Errno::NOENT) => missing(req, d),
                Err(e @ (Errno::NOTEMPTY | Errno::EXIST)) => Err(Step::Fail(FileError::NotEmpty(
                    format!("{}: {}", d.resolved, std::io::Error::from(e)),
                ))),
                Err(e) => Err(Step::Fail(os_error(&d.resolved, e))),
            };
        }
        match rustix::fs::unlinkat(&dir, entry.name.as_os_str(), AtFlags::empty()) {
            Ok(()) => Ok(()),
            Err(Errno::NOENT) => missing(req, d),
            Err(e) => Err(Step::Fail(os_error(&d.resolved, e))),
        }
    });
    let reply = match result {
        Ok(()) => Ok(Message::Ack(Ack::OK)),
        Err(JailedError::Rejected(r)) => {
            return FileOutcome::rejected(r, req.path.clone(), MessageType::FileDelete);
        }
        Err(JailedError::Failed(e)) => Err(e),
    };
    let mut details = Details::new();
    details.insert("path", Value::String(shown.unwrap_or_default()));
    details.insert("recursive", json!(req.recursive));
    details.insert("missing_ok", json!(req.missing_ok));
    FileOutcome {
        reply,
        audit: super::Audit::Operation(details),
    }
}

/// Nothing to delete: fine with `missing_ok`, else `PATH_NOT_FOUND`.
fn missing(req: &FileDelete, d: &Decision) -> Result<(), Step> {
    if req.missing_ok {
        Ok(())
    } else {
        Err(Step::Fail(FileError::not_found(&d.resolved)))
    }
}

/// The entry an operation acts on itself (JAIL.md §6.3 last paragraph,
/// §6.6): the canonical parent plus the unresolved final name. Where the
/// request has no separate name (`""`, `.`, a final `..`), the resolved
/// target's own parent and name. `None` means the root directory itself.
pub(super) fn acted_on(jail: &Jail, wire: &str, d: &Decision) -> Result<Option<Entry>, Step> {
    if let Some(entry) = jail.entry(wire, d).map_err(Step::Reject)? {
        return Ok(Some(entry));
    }
    Ok(d.remainder.split_last().map(|(name, parent)| Entry {
        parent: parent.to_vec(),
        name: name.clone(),
    }))
}

/// JAIL.md §6.9: the root directory is never removed, renamed or replaced.
pub(super) fn root_refusal(wire: &str) -> Rejection {
    Rejection::outside(format!(
        "Path '{wire}': refusing to modify allowed_root itself"
    ))
}

/// A walk below the root met one of the shim's own directories (moved or
/// mounted there): it is neither entered nor changed.
pub(super) fn protected_refusal(wire: &str) -> Rejection {
    Rejection::outside(format!(
        "Path '{wire}' holds one of the shim's own directories; refusing to enter it"
    ))
}

/// Which filesystem (and, where the kernel reports it, which mount) an
/// object lives on. Two bind mounts of one filesystem share `st_dev` but
/// not the mount id, so both are compared when available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FsId {
    dev: u64,
    mount: Option<u64>,
}

impl FsId {
    /// The filesystem of an open descriptor.
    pub(super) fn of_fd(fd: BorrowedFd<'_>) -> Result<FsId, Errno> {
        let st = rustix::fs::fstat(fd)?;
        Ok(FsId {
            dev: identity(&st).0,
            mount: mount_id(fd, OsStr::new(""), AtFlags::EMPTY_PATH),
        })
    }

    /// The filesystem of the entry `name` in `dir` (not followed), whose
    /// `fstatat` result is `st`.
    pub(super) fn of_entry(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> FsId {
        FsId {
            dev: identity(st).0,
            mount: mount_id(dir, name, AtFlags::SYMLINK_NOFOLLOW),
        }
    }

    /// True when `other` is on a different filesystem or mount.
    pub(super) fn differs(&self, other: &FsId) -> bool {
        self.dev != other.dev || self.mount_differs(other)
    }

    /// True when the kernel reported mount ids for both and they differ.
    /// For a non-directory this is the only reliable "mount point" test: an
    /// overlay whose layers span filesystems reports the layer's device for
    /// files but its own for directories, though nothing is mounted there.
    pub(super) fn mount_differs(&self, other: &FsId) -> bool {
        matches!((self.mount, other.mount), (Some(a), Some(b)) if a != b)
    }

    /// [`FsId::differs`] for a directory, [`FsId::mount_differs`] for
    /// anything else: is the entry examined as `st` a mount point (or on
    /// another filesystem) relative to `other`, its directory?
    pub(super) fn entry_differs(&self, other: &FsId, st: &Stat) -> bool {
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            self.differs(other)
        } else {
            self.mount_differs(other)
        }
    }
}

/// `statx(STATX_MNT_ID)` where the kernel supports it (Linux ≥ 5.8).
fn mount_id(dir: BorrowedFd<'_>, name: &OsStr, flags: AtFlags) -> Option<u64> {
    let stx = rustix::fs::statx(dir, name, flags, StatxFlags::MNT_ID).ok()?;
    if stx.stx_mask & StatxFlags::MNT_ID.bits() != 0 {
        Some(stx.stx_mnt_id)
    } else {
        None
    }
}

/// "refusing to cross a filesystem boundary" for `shown`.
pub(super) fn boundary_error(shown: &str) -> Step {
    Step::Fail(FileError::internal(format!(
        "{shown}: refusing to cross a filesystem boundary"
    )))
}

/// How many directories of a tree being removed are kept open at once.
/// Deeper levels close their ancestors' descriptors and re-enter them
/// through `..` on the way back up, so a tree of any depth needs a bounded
/// number of descriptors (a platform can build trees thousands of levels
/// deep, far beyond a 1024 descriptor limit).
const OPEN_LEVELS: usize = 64;

/// One directory of the tree being removed.
struct Level {
    /// `None` while closed to stay within [`OPEN_LEVELS`]; the top of the
    /// stack is always open.
    dir: Option<Dir>,
    name: OsString,
    /// `(st_dev, st_ino)` when opened: re-entering through `..` must find
    /// this very directory.
    id: (u64, u64),
    fs: FsId,
    rescans: u8,
}

/// Opens the directory `name` in `parent` (whose `fstatat` is `st`) for
/// removal of its contents, refusing the root and other filesystems or
/// mounts and checking that what was opened is what was examined.
fn open_level(
    jail: &Jail,
    parent: BorrowedFd<'_>,
    parent_fs: &FsId,
    name: &OsStr,
    st: &Stat,
    shown: &str,
) -> Result<Level, Step> {
    if jail.is_root(st) {
        // Only reachable through a mount of the root inside itself.
        return Err(Step::Reject(root_refusal(shown)));
    }
    if jail.is_protected(st) {
        return Err(Step::Reject(protected_refusal(shown)));
    }
    let fs = FsId::of_entry(parent, name, st);
    if fs.differs(parent_fs) {
        return Err(boundary_error(shown));
    }
    let fd = open_subdir(parent, name, st, shown)?;
    let dir = Dir::new(fd).map_err(|e| Step::Fail(os_error(shown, e)))?;
    Ok(Level {
        dir: Some(dir),
        name: name.to_owned(),
        id: identity(st),
        fs,
        rescans: 0,
    })
}

/// Re-opens the closed directory `above` from its child `child` through
/// `..`, and only if it is still the directory recorded when it was first
/// opened: a directory moved elsewhere meanwhile must not be emptied.
fn reenter(child: BorrowedFd<'_>, above: &Level, shown: &str) -> Result<Dir, Step> {
    let fail = |e: Errno| Step::Fail(os_error(shown, e));
    let fd = rustix::fs::openat(
        child,
        "..",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    let st = rustix::fs::fstat(&fd).map_err(fail)?;
    if identity(&st) != above.id {
        return Err(Step::Fail(FileError::internal(format!(
            "{shown}: directory tree changed during delete"
        ))));
    }
    Dir::new(fd).map_err(fail)
}

/// `openat(parent, name, O_RDONLY|O_DIRECTORY|O_NOFOLLOW)`, verified to be
/// the object `st` describes (a swap between the two calls fails).
pub(super) fn open_subdir(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    shown: &str,
) -> Result<OwnedFd, Step> {
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Step::Fail(os_error(shown, e)))?;
    let opened = rustix::fs::fstat(&fd).map_err(|e| Step::Fail(os_error(shown, e)))?;
    if identity(&opened) != identity(st) {
        return Err(Step::Fail(FileError::internal(format!(
            "{shown}: changed while it was being processed"
        ))));
    }
    Ok(fd)
}

/// FILES.md §5.3: removes the directory `name` in `parent` and everything
/// beneath it, depth first, without following links or leaving the
/// filesystem (or mount). The first error stops the walk; what was removed
/// stays removed.
///
/// At most [`OPEN_LEVELS`] directories are open at a time. A directory
/// whose descriptor was closed is re-entered from its last child through
/// `..` (verified by identity) and listed again from the start: everything
/// already handled in it is gone, so the new listing holds exactly what is
/// left to do.
pub(super) fn delete_tree(
    jail: &Jail,
    parent: BorrowedFd<'_>,
    name: &OsStr,
    shown: &str,
) -> Result<(), Step> {
    let fail = |e: Errno| Step::Fail(os_error(shown, e));
    let parent_fs = FsId::of_fd(parent).map_err(fail)?;
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(fail);
    }
    let mut stack = vec![open_level(jail, parent, &parent_fs, name, &st, shown)?];
    while let Some(level) = stack.last_mut() {
        let Some(dir) = level.dir.as_mut() else {
            // The top is re-opened before it becomes the top again.
            return Err(Step::Fail(FileError::internal(format!(
                "{shown}: directory tree changed during delete"
            ))));
        };
        let next = match dir.read() {
            Some(Ok(entry)) => Some(OsString::from_vec(entry.file_name().to_bytes().to_vec())),
            Some(Err(e)) => return Err(fail(e)),
            None => None,
        };
        let Some(child) = next else {
            // This level is empty now: remove it from the level above.
            let Some(mut done) = stack.pop() else { break };
            let above = match stack.last_mut() {
                Some(l) => {
                    if l.dir.is_none() {
                        // Closed to stay within the window: re-enter it
                        // from `done`, which is still open.
                        let child = done.dir.as_ref().ok_or_else(|| fail(Errno::BADF))?;
                        l.dir = Some(reenter(child.fd().map_err(fail)?, l, shown)?);
                    }
                    let dir = l.dir.as_ref().ok_or_else(|| fail(Errno::BADF))?;
                    dir.fd().map_err(fail)?
                }
                None => parent,
            };
            match rustix::fs::unlinkat(above, done.name.as_os_str(), AtFlags::REMOVEDIR) {
                Ok(()) => {}
                Err(Errno::NOTEMPTY | Errno::EXIST) if done.rescans < MAX_RESCANS => {
                    done.rescans += 1;
                    if let Some(d) = done.dir.as_mut() {
                        d.rewind();
                    }
                    stack.push(done);
                }
                Err(e) => return Err(fail(e)),
            }
            continue;
        };
        if child.as_bytes() == b"." || child.as_bytes() == b".." {
            continue;
        }
        let dfd = dir.fd().map_err(fail)?;
        let st = match rustix::fs::statat(dfd, child.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(fail(e)),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let sub = open_level(jail, dfd, &level.fs, &child, &st, shown)?;
            stack.push(sub);
            // Keep only the deepest OPEN_LEVELS directories open.
            if let Some(old) = stack
                .len()
                .checked_sub(OPEN_LEVELS + 1)
                .and_then(|i| stack.get_mut(i))
            {
                old.dir = None;
            }
        } else {
            // Links, files, FIFOs, sockets, devices: the name goes, the
            // object it may point to is never touched.
            match rustix::fs::unlinkat(dfd, child.as_os_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(fail(e)),
            }
        }
    }
    Ok(())
}
