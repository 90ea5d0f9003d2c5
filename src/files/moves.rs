//! `FILE_MOVE` (FILES.md §6): renames one directory entry — the entry
//! itself, like `mv`, never the target of a symlink — to a destination entry
//! given by its canonical parent and final name (JAIL.md §6.6).
//!
//! Both ends are decided by the jail; any refusal is one `JAIL_VIOLATION`
//! for `"<src> -> <dst>"`. `overwrite = false` relies on
//! `RENAME_NOREPLACE`, so an existing destination is never replaced by a
//! race. Across filesystems the entry is copied descriptor by descriptor into
//! a temporary sibling of the destination (at most 256 directory levels
//! deep), renamed into place, and only then is the source removed. With
//! `jail_no_xdev` a mount point at either end, or inside a copied tree, is
//! refused as a jail violation. This module must never rename, replace or
//! remove the root directory, never move or copy a mount point, never
//! follow a symlink at either end, never copy a FIFO, socket or device, and
//! never destroy an existing destination before it knows the move can
//! complete on the same filesystem.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::{Mutex, PoisonError};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags, Stat, Timestamps};
use rustix::io::Errno;
use serde_json::{Value, json};

use super::delete::{
    FsId, acted_on, boundary_error, delete_tree, open_subdir, protected_refusal, root_refusal,
};
use super::write::{open_parent, pwrite_all, with_temp_name};
use super::{FileContext, FileError, FileOutcome, JailedError, Step, jailed, os_error};
use crate::audit::Details;
use crate::jail::{EnforceError, Entry, Jail, identity};
use crate::protocol::{Ack, FileMove, Message, MessageType};

/// Serialises the check-then-rename fallback for filesystems that reject
/// `RENAME_NOREPLACE` (JAIL.md §6.7). It only orders this process's own
/// moves; a local process can still race it (documented residual risk).
static NOREPLACE_FALLBACK: Mutex<()> = Mutex::new(());

/// Bytes copied per `read` in the cross-device fallback.
const COPY_CHUNK: usize = 1 << 16;

/// The deepest directory tree the cross-device fallback copies. The copy
/// holds two descriptors per level (source listing, new directory); unlike
/// the recursive delete it cannot drop and re-enter levels, because a
/// re-opened source listing starts over and already copied entries could
/// only be skipped by name — unsafe where the destination folds case. 256
/// levels (512 descriptors) stays well within the usual 1024 limit; a
/// deeper tree is refused before anything is changed.
const MAX_COPY_DEPTH: usize = 256;

/// Handles one `FILE_MOVE`.
pub fn move_entry(ctx: &FileContext<'_>, req: &FileMove) -> FileOutcome {
    let jail = ctx.jail;
    let both = format!("{} -> {}", req.src, req.dst);
    let mut src_shown = None;
    let mut dst_shown = None;
    let result = jailed(jail, &req.src, |sd| {
        src_shown = Some(sd.resolved.clone());
        // Decided inside the step so that a race on either end re-decides
        // both (Jail::run).
        let dd = jail.decide(&req.dst).map_err(Step::Reject)?;
        let src = acted_on(jail, &req.src, sd)?;
        let dst = acted_on(jail, &req.dst, &dd)?;
        let dst_text = dst
            .as_ref()
            .map_or_else(|| dd.resolved.clone(), |e| entry_path(jail, e));
        dst_shown = Some(dst_text.clone());
        // Root protection (FILES.md §6.2 step 2) by spelling first …
        let (Some(src), Some(dst)) = (src, dst) else {
            return Err(Step::Reject(root_refusal(&both)));
        };
        let src_dir = open_side(jail, &src.parent, sd.looped)?;
        let dst_dir = open_side(jail, &dst.parent, dd.looped)?;
        let src_st = lstat(src_dir.as_ref(), &src.name, &sd.resolved)?;
        let dst_st = lstat(dst_dir.as_ref(), &dst.name, &dst_text)?;
        // … then by identity (JAIL.md §6.9).
        if src_st.is_some_and(|st| jail.is_root(&st)) || dst_st.is_some_and(|st| jail.is_root(&st))
        {
            return Err(Step::Reject(root_refusal(&both)));
        }
        let (Some(src_dir), Some(src_st)) = (src_dir, src_st) else {
            return Err(Step::Fail(FileError::not_found(&sd.resolved)));
        };
        let Some(dst_dir) = dst_dir else {
            return Err(Step::Fail(FileError::not_found(
                &jail.display_path(&dst.parent),
            )));
        };
        // jail_no_xdev: enforcement checked the parents, not what may be
        // mounted at either name.
        super::entry_mount_ok(jail, src_dir.as_fd(), &src.name, &sd.resolved)?;
        super::entry_mount_ok(jail, dst_dir.as_fd(), &dst.name, &dst_text)?;
        if dst_st.is_some() && !req.overwrite {
            return Err(Step::Fail(exists(&dst_text)));
        }
        let mv = Move {
            jail,
            src: Side {
                dir: src_dir.as_fd(),
                name: &src.name,
                path: full_path(&src),
                shown: &sd.resolved,
            },
            dst: Side {
                dir: dst_dir.as_fd(),
                name: &dst.name,
                path: full_path(&dst),
                shown: &dst_text,
            },
            overwrite: req.overwrite,
        };
        if mv.same_entry()? {
            // FILES.md §6.2 step 5: nothing to do (Python would delete it).
            return Ok(());
        }
        mv.perform(&src_st, dst_st.as_ref())
    });
    let reply = match result {
        Ok(()) => Ok(Message::Ack(Ack::OK)),
        Err(JailedError::Rejected(r)) => {
            return FileOutcome::rejected(r, both, MessageType::FileMove);
        }
        Err(JailedError::Failed(e)) => Err(e),
    };
    let mut details = Details::new();
    details.insert("src", Value::String(src_shown.unwrap_or_default()));
    details.insert("dst", Value::String(dst_shown.unwrap_or_default()));
    details.insert("overwrite", json!(req.overwrite));
    FileOutcome {
        reply,
        audit: super::Audit::Operation(details),
    }
}

fn full_path(entry: &Entry) -> Vec<OsString> {
    let mut path = entry.parent.clone();
    path.push(entry.name.clone());
    path
}

fn entry_path(jail: &Jail, entry: &Entry) -> String {
    jail.display_path(&full_path(entry))
}

fn exists(shown: &str) -> FileError {
    FileError::Exists(format!("{shown} already exists"))
}

/// The parent directory of one end; `None` when it does not exist (a
/// looping link in it counts as missing: nothing can be beneath it).
fn open_side(jail: &Jail, parent: &[OsString], looped: bool) -> Result<Option<OwnedFd>, Step> {
    match open_parent(jail, parent) {
        Ok(fd) => Ok(Some(fd)),
        Err(EnforceError::NotFound) => Ok(None),
        Err(EnforceError::Changed) if looped => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when absent.
fn lstat(dir: Option<&OwnedFd>, name: &OsStr, shown: &str) -> Result<Option<Stat>, Step> {
    let Some(dir) = dir else { return Ok(None) };
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(Step::Fail(os_error(shown, e))),
    }
}

fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// One end of a move: its parent descriptor and final name.
struct Side<'a> {
    dir: BorrowedFd<'a>,
    name: &'a OsStr,
    /// Canonical parent remainder plus the final name.
    path: Vec<OsString>,
    shown: &'a str,
}

/// Why a rename did not happen.
enum Placement {
    /// `EXDEV`: the ends are on different filesystems.
    CrossDevice,
    /// A final answer.
    Fail(Step),
}

impl From<Step> for Placement {
    fn from(s: Step) -> Self {
        Placement::Fail(s)
    }
}

struct Move<'a> {
    jail: &'a Jail,
    src: Side<'a>,
    dst: Side<'a>,
    overwrite: bool,
}

impl Move<'_> {
    fn error(&self, e: Errno) -> Step {
        Step::Fail(FileError::internal(format!(
            "Could not move {} to {}: {}",
            self.src.shown,
            self.dst.shown,
            std::io::Error::from(e)
        )))
    }

    fn refuse(&self, why: &str) -> Step {
        Step::Fail(FileError::internal(format!(
            "Could not move {} to {}: {why}",
            self.src.shown, self.dst.shown
        )))
    }

    /// Same parent directory (by identity) and same name.
    fn same_entry(&self) -> Result<bool, Step> {
        if self.src.name != self.dst.name {
            return Ok(false);
        }
        let a = rustix::fs::fstat(self.src.dir).map_err(|e| self.error(e))?;
        let b = rustix::fs::fstat(self.dst.dir).map_err(|e| self.error(e))?;
        Ok(identity(&a) == identity(&b))
    }

    /// FILES.md §6.2 step 6.
    fn perform(&self, src_st: &Stat, dst_st: Option<&Stat>) -> Result<(), Step> {
        let src_is_dir = is_dir(src_st);
        // The remainders are canonical, so a prefix is a real ancestor.
        if src_is_dir
            && self.dst.path.len() > self.src.path.len()
            && self.dst.path.starts_with(&self.src.path)
        {
            return Err(self.error(Errno::INVAL));
        }
        if dst_st.is_some()
            && self.src.path.len() > self.dst.path.len()
            && self.src.path.starts_with(&self.dst.path)
        {
            // Replacing an ancestor of the source would delete the source
            // before moving it (Python loses both).
            return Err(self.refuse("the destination contains the source"));
        }
        // A mount point cannot be renamed (EBUSY) or removed after a copy,
        // and copying what is mounted there would bring its content in.
        let parent = FsId::of_fd(self.src.dir).map_err(|e| self.error(e))?;
        if FsId::of_entry(self.src.dir, self.src.name, src_st).entry_differs(&parent, src_st) {
            return Err(self.refuse("the source is a mount point"));
        }
        // Known to be on another filesystem: copy first, so an existing
        // destination is only replaced once the copy is complete.
        let dst_fs = FsId::of_fd(self.dst.dir).map_err(|e| self.error(e))?;
        let crossing = FsId::of_entry(self.src.dir, self.src.name, src_st).differs(&dst_fs);
        let placed = if crossing {
            Err(Placement::CrossDevice)
        } else {
            self.place(&self.src, src_st, dst_st)
        };
        match placed {
            Ok(()) => Ok(()),
            Err(Placement::Fail(step)) => Err(step),
            Err(Placement::CrossDevice) => self.cross_device(src_st),
        }
    }

    /// Renames `from` to the destination under the overwrite rules.
    fn place(
        &self,
        from: &Side<'_>,
        from_st: &Stat,
        dst_st: Option<&Stat>,
    ) -> Result<(), Placement> {
        let from_is_dir = is_dir(from_st);
        if !self.overwrite {
            return self.rename_noreplace(from, from_is_dir);
        }
        let Some(dst_st) = dst_st else {
            return self.rename_plain(from);
        };
        match (from_is_dir, is_dir(dst_st)) {
            (false, false) => {
                self.rename_plain(from)?;
                // rename(2) does nothing when both names are links to one
                // inode; finish the move by dropping the source name.
                if identity(from_st) == identity(dst_st) {
                    self.drop_same_inode(from, from_st)?;
                }
                Ok(())
            }
            (true, true) => {
                match rustix::fs::renameat(from.dir, from.name, self.dst.dir, self.dst.name) {
                    Ok(()) => Ok(()),
                    Err(Errno::NOTEMPTY | Errno::EXIST) => {
                        self.remove_dst(dst_st)?;
                        self.rename_noreplace(from, from_is_dir)
                    }
                    Err(Errno::XDEV) => Err(Placement::CrossDevice),
                    Err(e) => Err(self.error(e).into()),
                }
            }
            // Type mismatch (a symlink counts as a non-directory): the
            // destination goes first, then an exclusive rename.
            _ => {
                self.remove_dst(dst_st)?;
                self.rename_noreplace(from, from_is_dir)
            }
        }
    }

    fn drop_same_inode(&self, from: &Side<'_>, from_st: &Stat) -> Result<(), Step> {
        match rustix::fs::statat(from.dir, from.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) if identity(&now) == identity(from_st) => {
                rustix::fs::unlinkat(from.dir, from.name, AtFlags::empty())
                    .map_err(|e| self.error(e))
            }
            _ => Ok(()),
        }
    }

    /// Removes the existing destination with FILE_DELETE's rules.
    fn remove_dst(&self, dst_st: &Stat) -> Result<(), Step> {
        if is_dir(dst_st) {
            delete_tree(self.jail, self.dst.dir, self.dst.name, self.dst.shown)
        } else {
            match rustix::fs::unlinkat(self.dst.dir, self.dst.name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(Step::Fail(os_error(self.dst.shown, e))),
            }
        }
    }

    /// `renameat`: atomically replaces whatever is at the destination.
    fn rename_plain(&self, from: &Side<'_>) -> Result<(), Placement> {
        match rustix::fs::renameat(from.dir, from.name, self.dst.dir, self.dst.name) {
            Ok(()) => Ok(()),
            Err(Errno::XDEV) => Err(Placement::CrossDevice),
            Err(e) => Err(self.error(e).into()),
        }
    }

    /// `renameat2(RENAME_NOREPLACE)`; `EEXIST` is `PATH_EXISTS`.
    fn rename_noreplace(&self, from: &Side<'_>, from_is_dir: bool) -> Result<(), Placement> {
        match rustix::fs::renameat_with(
            from.dir,
            from.name,
            self.dst.dir,
            self.dst.name,
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => Err(Step::Fail(exists(self.dst.shown)).into()),
            Err(Errno::XDEV) => Err(Placement::CrossDevice),
            // The filesystem may not know the flag (JAIL.md §6.7); a real
            // EINVAL (a directory into itself) recurs in the fallback.
            Err(Errno::INVAL) => self.noreplace_fallback(from, from_is_dir),
            Err(e) => Err(self.error(e).into()),
        }
    }

    /// JAIL.md §6.7: a non-directory is hard-linked to the destination
    /// (atomic `EEXIST`) and then unlinked; a directory, or a filesystem
    /// without hard links, is checked absent and renamed under a lock.
    fn noreplace_fallback(&self, from: &Side<'_>, from_is_dir: bool) -> Result<(), Placement> {
        if !from_is_dir {
            match rustix::fs::linkat(
                from.dir,
                from.name,
                self.dst.dir,
                self.dst.name,
                AtFlags::empty(),
            ) {
                Ok(()) => {
                    return rustix::fs::unlinkat(from.dir, from.name, AtFlags::empty())
                        .map_err(|e| self.error(e).into());
                }
                Err(Errno::EXIST) => return Err(Step::Fail(exists(self.dst.shown)).into()),
                Err(Errno::XDEV) => return Err(Placement::CrossDevice),
                Err(_) => {}
            }
        }
        let _guard = NOREPLACE_FALLBACK
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match rustix::fs::statat(self.dst.dir, self.dst.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => return Err(Step::Fail(exists(self.dst.shown)).into()),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(self.error(e).into()),
        }
        self.rename_plain(from)
    }

    /// FILES.md §6.3: copy into a temporary sibling of the destination,
    /// rename it into place, then remove the source.
    fn cross_device(&self, src_st: &Stat) -> Result<(), Step> {
        let kind = FileType::from_raw_mode(src_st.st_mode);
        let link_target = match kind {
            FileType::RegularFile | FileType::Directory => None,
            FileType::Symlink => Some(
                rustix::fs::readlinkat(self.src.dir, self.src.name, Vec::new())
                    .map_err(|e| self.error(e))?,
            ),
            _ => return Err(self.refuse("not a regular file, directory or symbolic link")),
        };
        let dst_dir = self.dst.dir;
        let (tmp, file) = with_temp_name(|tmp| match (&link_target, kind) {
            (Some(target), _) => {
                rustix::fs::symlinkat(target.as_c_str(), dst_dir, tmp).map(|()| None)
            }
            (None, FileType::Directory) => {
                rustix::fs::mkdirat(dst_dir, tmp, Mode::from_raw_mode(0o700)).map(|()| None)
            }
            (None, _) => rustix::fs::openat(
                dst_dir,
                tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map(Some),
        })
        .map_err(|e| self.error(e))?;
        let copied = match (file, kind) {
            (Some(out), _) => copy_file(self.src.dir, self.src.name, src_st, &out, self.src.shown),
            (None, FileType::Directory) => self.copy_tree(src_st, &tmp),
            (None, _) => Ok(()),
        };
        if let Err(e) = copied {
            self.discard(&tmp);
            return Err(e);
        }
        let tmp_side = Side {
            dir: dst_dir,
            name: &tmp,
            path: Vec::new(),
            shown: self.dst.shown,
        };
        let placed = rustix::fs::statat(dst_dir, tmp.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.error(e).into())
            .and_then(|tmp_st| {
                // The destination may have changed while copying.
                let dst_now = lstat_dir(dst_dir, self.dst.name);
                self.place(&tmp_side, &tmp_st, dst_now.as_ref())
            });
        match placed {
            Ok(()) => {}
            Err(p) => {
                self.discard(&tmp);
                return Err(match p {
                    Placement::Fail(step) => step,
                    Placement::CrossDevice => self.error(Errno::XDEV),
                });
            }
        }
        let _ = rustix::fs::fsync(dst_dir);
        let removed = if kind == FileType::Directory {
            delete_tree(self.jail, self.src.dir, self.src.name, self.src.shown)
        } else {
            rustix::fs::unlinkat(self.src.dir, self.src.name, AtFlags::empty())
                .map_err(|e| Step::Fail(os_error(self.src.shown, e)))
        };
        removed.map_err(|step| match step {
            Step::Fail(f) => {
                let message = format!("{}; the copy at {} was kept", f.message(), self.dst.shown);
                Step::Fail(f.with_message(message))
            }
            other => other,
        })
    }

    /// Best-effort removal of the temporary copy after a failure.
    fn discard(&self, tmp: &OsStr) {
        let _ = delete_tree(self.jail, self.dst.dir, tmp, self.dst.shown);
    }

    /// Copies the source directory's contents into the (already created)
    /// temporary directory `tmp`, one open directory per level on each side,
    /// at most [`MAX_COPY_DEPTH`] levels deep. Permissions and times of a
    /// directory are applied after its contents. Never copies from another
    /// filesystem or mount: an entry that is a mount point (a bind-mounted
    /// file too) stops the copy, as a jail violation with `jail_no_xdev`.
    fn copy_tree(&self, src_st: &Stat, tmp: &OsStr) -> Result<(), Step> {
        let shown = self.src.shown;
        let fail = |e: Errno| Step::Fail(os_error(shown, e));
        let src_fs = FsId::of_entry(self.src.dir, self.src.name, src_st);
        let top_src = open_subdir(self.src.dir, self.src.name, src_st, shown)?;
        let top_dst = open_new_dir(self.dst.dir, tmp).map_err(fail)?;
        let mut stack = vec![CopyLevel {
            src: Dir::new(top_src).map_err(fail)?,
            dst: top_dst,
            st: *src_st,
        }];
        loop {
            let depth = stack.len();
            let Some(level) = stack.last_mut() else {
                break;
            };
            let next = match level.src.read() {
                Some(Ok(entry)) => Some(OsString::from_vec(entry.file_name().to_bytes().to_vec())),
                Some(Err(e)) => return Err(fail(e)),
                None => None,
            };
            let Some(name) = next else {
                if let Some(done) = stack.pop() {
                    apply_metadata(&done.dst, &done.st).map_err(fail)?;
                }
                continue;
            };
            if name.as_bytes() == b"." || name.as_bytes() == b".." {
                continue;
            }
            let from = level.src.fd().map_err(fail)?;
            let to = level.dst.as_fd();
            let st = rustix::fs::statat(from, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(fail)?;
            // No mount is copied, not even a bind-mounted file: its content
            // would be brought in and the source could not be removed after
            // the copy (EBUSY). What is opened below is checked to be this
            // `st`, so a mount appearing after the check is caught as a
            // changed entry.
            super::entry_mount_ok(self.jail, from, &name, shown)?;
            if FsId::of_entry(from, &name, &st).entry_differs(&src_fs, &st) {
                return Err(boundary_error(shown));
            }
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    if depth >= MAX_COPY_DEPTH {
                        return Err(Step::Fail(FileError::internal(format!(
                            "Could not move {shown} to {}: the directory tree is deeper \
                             than {MAX_COPY_DEPTH} levels, the most a move across \
                             filesystems copies",
                            self.dst.shown
                        ))));
                    }
                    if self.jail.is_protected(&st) {
                        return Err(Step::Reject(protected_refusal(shown)));
                    }
                    let child_src = open_subdir(from, &name, &st, shown)?;
                    rustix::fs::mkdirat(to, name.as_os_str(), Mode::from_raw_mode(0o700))
                        .map_err(fail)?;
                    let child_dst = open_new_dir(to, &name).map_err(fail)?;
                    stack.push(CopyLevel {
                        src: Dir::new(child_src).map_err(fail)?,
                        dst: child_dst,
                        st,
                    });
                }
                FileType::RegularFile => {
                    let out = rustix::fs::openat(
                        to,
                        name.as_os_str(),
                        OFlags::WRONLY
                            | OFlags::CREATE
                            | OFlags::EXCL
                            | OFlags::NOFOLLOW
                            | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o600),
                    )
                    .map_err(fail)?;
                    copy_file(from, &name, &st, &out, shown)?;
                }
                FileType::Symlink => {
                    // Recreated with the same text, never followed.
                    let target =
                        rustix::fs::readlinkat(from, name.as_os_str(), Vec::new()).map_err(fail)?;
                    rustix::fs::symlinkat(target.as_c_str(), to, name.as_os_str()).map_err(fail)?;
                }
                _ => {
                    return Err(Step::Fail(FileError::internal(format!(
                        "{shown}: cannot copy {}: not a regular file, directory or symbolic link",
                        String::from_utf8_lossy(name.as_bytes())
                    ))));
                }
            }
        }
        Ok(())
    }
}

/// One directory being copied: the source listing, the new directory and
/// the source's metadata to apply once the contents are in place.
struct CopyLevel {
    src: Dir,
    dst: OwnedFd,
    st: Stat,
}

fn lstat_dir(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Stat> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()
}

/// Opens a directory this module just created (never a link).
fn open_new_dir(parent: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Copies the regular file `name` in `dir` (examined as `st`) into `out`:
/// content, permission bits and access/modification times.
fn copy_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    out: &OwnedFd,
    shown: &str,
) -> Result<(), Step> {
    let fail = |e: Errno| Step::Fail(os_error(shown, e));
    // O_NONBLOCK: a FIFO swapped in after the check must not block.
    let input = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    let opened = rustix::fs::fstat(&input).map_err(fail)?;
    if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile
        || identity(&opened) != identity(st)
    {
        return Err(Step::Fail(FileError::internal(format!(
            "{shown}: changed while it was being copied"
        ))));
    }
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut copied = 0u64;
    loop {
        let n = match rustix::io::read(&input, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(fail(e)),
        };
        pwrite_all(out, buf.get(..n).unwrap_or(&[]), copied).map_err(fail)?;
        copied += n as u64;
    }
    rustix::fs::fsync(out).map_err(fail)?;
    apply_metadata(out, &opened).map_err(fail)
}

/// Permission bits (`& 0o1777`) and access/modification times of `st`.
fn apply_metadata(fd: &OwnedFd, st: &Stat) -> Result<(), Errno> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(st.st_mode & 0o1777))?;
    rustix::fs::futimens(fd, &times(st))
}

// The field types differ between architectures; the casts are no-ops on some.
#[allow(clippy::unnecessary_cast)]
fn times(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: st.st_atime as i64,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: st.st_mtime as i64,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}
