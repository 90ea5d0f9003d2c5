//! `FILE_STAT` (FILES.md §3): metadata of the resolved target, or with
//! `follow_symlinks: false` of the entry itself. A missing target is a
//! successful `exists: false`; a path outside the root is always an error,
//! and so (with `jail_no_xdev`) is an entry that is itself a mount point.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use serde_json::{Value, json};

use super::{FileContext, FileError, FileOutcome, JailedError, Step, jailed, os_error};
use crate::audit::Details;
use crate::jail::{EnforceError, Entry};
use crate::protocol::{FileStat, FileStatResponse, Message, MessageType};

/// Handles one `FILE_STAT`.
pub fn stat(ctx: &FileContext<'_>, req: &FileStat) -> FileOutcome {
    let jail = ctx.jail;
    let mut shown = None;
    let result = jailed(jail, &req.path, |d| {
        shown = Some(d.resolved.clone());
        // A parent outside the root only matters when acting on the entry
        // itself; following, it just means "no link to report".
        let entry = match jail.entry(&req.path, d) {
            Ok(entry) => entry,
            Err(_) if req.follow_symlinks => None,
            Err(rejection) => return Err(Step::Reject(rejection)),
        };
        if !req.follow_symlinks {
            if let Some(entry) = &entry {
                return stat_entry(ctx, entry, d.looped);
            }
        }
        if d.looped {
            return Err(Step::Fail(FileError::internal(format!(
                "{}: Too many levels of symbolic links",
                d.resolved
            ))));
        }
        let st = match jail.open(&d.remainder, OFlags::PATH, Mode::empty()) {
            Ok(fd) => rustix::fs::fstat(&fd).map_err(|e| Step::Fail(os_error(&d.resolved, e)))?,
            Err(EnforceError::NotFound) => return Ok(FileStatResponse::missing()),
            Err(e) => return Err(e.into()),
        };
        let is_symlink = entry
            .as_ref()
            .and_then(|e| lstat_entry(ctx, e).ok().flatten())
            .is_some_and(|(_, st)| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
        Ok(response(&st, is_symlink, d.resolved.clone()))
    });
    let path = shown.unwrap_or_default();
    let reply = match result {
        Ok(r) => Ok(Message::FileStatResponse(r)),
        Err(JailedError::Rejected(r)) => {
            return FileOutcome::rejected(r, req.path.clone(), MessageType::FileStat);
        }
        Err(JailedError::Failed(e)) => Err(e),
    };
    let mut details = Details::new();
    details.insert("path", Value::String(path));
    details.insert("follow_symlinks", json!(req.follow_symlinks));
    FileOutcome {
        reply,
        audit: super::Audit::Operation(details),
    }
}

/// `follow_symlinks: false`: the entry itself, `path` = canonical parent +
/// name. With `jail_no_xdev` the entry must sit on the root's mount (a bind
/// mount there is refused, not reported). `looped`: the decision stopped at
/// a symlink loop, so a link met while opening the parent is that loop, not
/// a changed tree: `ELOOP`, as following it would report (FILES.md §3.2
/// step 4), rather than a re-decision that fails closed as a violation.
fn stat_entry(
    ctx: &FileContext<'_>,
    entry: &Entry,
    looped: bool,
) -> Result<FileStatResponse, Step> {
    let mut path = entry.parent.clone();
    path.push(entry.name.clone());
    let shown = ctx.jail.display_path(&path);
    match lstat_entry(ctx, entry) {
        Ok(Some((dir, st))) => {
            super::entry_mount_ok(ctx.jail, dir.as_fd(), &entry.name, &shown)?;
            let is_link = FileType::from_raw_mode(st.st_mode) == FileType::Symlink;
            Ok(response(&st, is_link, shown))
        }
        Ok(None) | Err(Step::Enforce(EnforceError::NotFound)) => Ok(FileStatResponse::missing()),
        Err(Step::Enforce(EnforceError::Changed)) if looped => {
            Err(Step::Fail(os_error(&shown, rustix::io::Errno::LOOP)))
        }
        Err(e) => Err(e),
    }
}

/// `fstatat(parent, name, AT_SYMLINK_NOFOLLOW)` with the parent descriptor
/// it was taken in; `Ok(None)` when absent.
fn lstat_entry(ctx: &FileContext<'_>, entry: &Entry) -> Result<Option<(OwnedFd, Stat)>, Step> {
    let dir = ctx.jail.open(
        &entry.parent,
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    )?;
    match rustix::fs::statat(&dir, entry.name.as_bytes(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some((dir, st))),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => Ok(None),
        Err(e) => Err(Step::Fail(os_error(
            &ctx.jail.display_path(&entry.parent),
            e,
        ))),
    }
}

/// Seconds as Python computes `st_mtime`: `sec + nsec * 1e-9` in doubles.
// The stat field types differ between platforms; the casts are no-ops on some.
#[allow(clippy::unnecessary_cast)]
fn seconds(sec: i64, nsec: i64) -> f64 {
    sec as f64 + nsec as f64 * 1e-9
}

/// `st_mtime` as float seconds.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn mtime(st: &Stat) -> f64 {
    seconds(st.st_mtime as i64, st.st_mtime_nsec as i64)
}

/// `st_ctime` as float seconds.
#[allow(clippy::unnecessary_cast)]
fn ctime(st: &Stat) -> f64 {
    seconds(st.st_ctime as i64, st.st_ctime_nsec as i64)
}

fn response(st: &Stat, is_symlink: bool, path: String) -> FileStatResponse {
    let kind = FileType::from_raw_mode(st.st_mode);
    let name = path.rsplit('/').next().unwrap_or("");
    FileStatResponse {
        exists: true,
        is_file: Some(kind == FileType::RegularFile),
        is_dir: Some(kind == FileType::Directory),
        is_symlink: Some(is_symlink),
        size_bytes: Some(u64::try_from(st.st_size).unwrap_or(0)),
        mtime: Some(mtime(st)),
        ctime: Some(ctime(st)),
        mode: Some(format!("{:04o}", st.st_mode & 0o7777)),
        owner_uid: Some(u64::from(st.st_uid)),
        owner_gid: Some(u64::from(st.st_gid)),
        mime_type: super::mime::guess(name).map(str::to_owned),
        path: Some(path),
    }
}
