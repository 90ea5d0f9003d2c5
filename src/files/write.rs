//! `FILE_WRITE` (FILES.md §2): decode the content, optionally create the
//! missing parent directories (JAIL.md §6.8), then write the file through
//! its parent directory descriptor.
//!
//! A new or replaced file is written to a temporary sibling and renamed over
//! the target, so readers never see a partial file and a hard link to an
//! outside inode is broken rather than rewritten (JAIL.md D4). A file owned
//! by someone else keeps its owner: running as root, the replacement is
//! given to that owner before the rename; otherwise it is the one in-place
//! write (FILES.md §2.4 step 3), which reserves the space before touching
//! the old content. A good file is never left half-written by a failure
//! this module can foresee. With `jail_no_xdev`, a mount point at the target
//! name or among created parents is refused like one met by enforcement.
//! This module must never open the target by a path string, never follow a
//! symlink at the target (the canonical target cannot be one; meeting one
//! means the tree changed) and never open a FIFO or device for writing.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FallocateFlags, FileType, Gid, Mode, OFlags, Stat, Uid};
use rustix::io::Errno;
use serde_json::{Value, json};

use super::{FileContext, FileError, FileOutcome, JailedError, SizeExcess, Step, jailed};
use crate::audit::Details;
use crate::jail::{Decision, EnforceError, Jail};
use crate::protocol::{Ack, Encoding, FileWrite, Message, MessageType};
use crate::sys;

/// How many temporary names are tried before giving up (FILES.md §2.4 4.1).
const TEMP_TRIES: usize = 10;

/// Handles one `FILE_WRITE`, its directory synced before it returns.
pub fn write(ctx: &FileContext<'_>, mut req: FileWrite) -> FileOutcome {
    let (outcome, settle) = write_settling(ctx, &mut req);
    if let Some(settle) = settle {
        settle.finish();
    }
    outcome
}

/// The last step of a write that replaced a directory entry: syncing the
/// directory, so that the new entry survives a crash (FILES.md §2.4 4.7).
///
/// It is handed out rather than done so that the caller can overlap it
/// with the sync of the operation's audit record: the two are independent,
/// and the acknowledgement waits for both. A failed directory sync does not
/// undo the rename and is not reported (an `O_PATH` descriptor, or a
/// filesystem without directory `fsync`).
#[derive(Debug)]
pub struct Settle(OwnedFd);

impl Settle {
    /// Syncs the directory.
    pub fn finish(self) {
        let _ = rustix::fs::fsync(&self.0);
    }
}

/// [`write`], leaving the directory's sync to the caller.
pub fn write_settling(ctx: &FileContext<'_>, req: &mut FileWrite) -> (FileOutcome, Option<Settle>) {
    // Checking the content does not depend on the path, so it is done once
    // even if the jail re-decides after a race; its error is reported only
    // after the jail accepted the path (FILES.md §2.2: the jail comes first).
    let content = content(req);
    let mut shown = None;
    let mut written = 0u64;
    let mut settle = None;
    let result = jailed(ctx.jail, &req.path, |d| {
        shown = Some(d.resolved.clone());
        let content = content.as_ref().map_err(|e| Step::Fail(e.clone()))?;
        let size = content.len();
        if size > ctx.max_file_size_bytes {
            return Err(Step::Fail(FileError::too_large(
                format!("{size} bytes exceeds limit {}", ctx.max_file_size_bytes),
                SizeExcess {
                    max_file_size_bytes: ctx.max_file_size_bytes,
                    attempted_bytes: size,
                    base64_would_fit: false,
                },
            )));
        }
        settle = write_decided(ctx, req.create_parents, d, content)?;
        written = size;
        Ok(())
    });
    let reply = match result {
        Ok(()) => Ok(Message::Ack(Ack::OK)),
        Err(JailedError::Rejected(r)) => {
            let outcome = FileOutcome::rejected(r, req.path.clone(), MessageType::FileWrite);
            return (outcome, None);
        }
        Err(JailedError::Failed(e)) => {
            written = 0;
            Err(e)
        }
    };
    let mut details = Details::new();
    details.insert("path", Value::String(shown.unwrap_or_default()));
    details.insert("encoding", json!(req.encoding.as_str()));
    details.insert("create_parents", json!(req.create_parents));
    details.insert("size_bytes_written", json!(written));
    let outcome = FileOutcome {
        reply,
        audit: super::Audit::Operation(details),
    };
    (outcome, settle)
}

/// FILES.md §2.2 step 2: the content to write, checked. It takes the
/// content's place in the request rather than sit beside it.
fn content(req: &mut FileWrite) -> Result<Content, FileError> {
    let content = std::mem::take(&mut req.content);
    match req.encoding {
        Encoding::Utf8 => Ok(Content::Bytes(content.into_bytes())),
        Encoding::Base64 => super::base64::check_strict(content)
            .map(Content::Base64)
            .map_err(|e| FileError::internal(format!("Bad base64: {e}"))),
    }
}

/// What a `FILE_WRITE` puts in the file: its bytes, or its base64 text,
/// checked already and decoded piece by piece as it is written, so that a
/// 10 MiB write holds its text and one piece rather than the text and
/// every decoded byte.
#[derive(Debug)]
enum Content {
    Bytes(Vec<u8>),
    Base64(super::base64::Checked),
}

/// Bytes written per piece of a [`Content`]: small enough that, with glibc,
/// the piece's buffer comes from the allocator's reused memory (below the
/// threshold that maps a large block afresh, see
/// `sys::tune_allocator`), large enough that the system calls per
/// piece do not count.
const PIECE_BYTES: usize = 384 * 1024;

impl Content {
    fn len(&self) -> u64 {
        match self {
            Content::Bytes(bytes) => bytes.len() as u64,
            Content::Base64(text) => text.decoded_len() as u64,
        }
    }

    /// Writes the content from the start of `fd`. Each piece that is not
    /// the last is handed to the disk at once ([`sys::start_writeback`]):
    /// the disk writes it while the next piece is decoded and copied, so the
    /// `fsync` that follows has less left to wait for.
    ///
    /// Decoding cannot fail here: [`super::base64::check_strict`] accepted
    /// the text, and it accepts only what the decoder does. That matters to
    /// the in-place write, which has started to overwrite the old content
    /// by the time a later piece is decoded.
    fn write_to(&self, fd: &OwnedFd) -> std::io::Result<()> {
        let total = self.len();
        let mut offset = 0u64;
        let piece = |bytes: &[u8]| -> std::io::Result<()> {
            let len = bytes.len() as u64;
            pwrite_all(fd, bytes, offset)?;
            if offset + len < total {
                sys::start_writeback(fd.as_fd(), offset, len);
            }
            offset += len;
            Ok(())
        };
        match self {
            Content::Bytes(bytes) => bytes.chunks(PIECE_BYTES).try_for_each(piece),
            Content::Base64(text) => text.decode_pieces(PIECE_BYTES / 3 * 4, piece),
        }
    }
}

/// "Could not write file: …" with the OS reason.
fn could_not(shown: &str, reason: impl std::fmt::Display) -> Step {
    Step::Fail(FileError::internal(format!(
        "Could not write file: {shown}: {reason}"
    )))
}

fn os_reason(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// Steps 4–5 of FILES.md §2.2 once the jail accepted `d`; returns the
/// directory to sync when an entry was replaced.
fn write_decided(
    ctx: &FileContext<'_>,
    create_parents: bool,
    d: &Decision,
    content: &Content,
) -> Result<Option<Settle>, Step> {
    let shown = d.resolved.as_str();
    let Some((name, parent)) = d.remainder.split_last() else {
        // The root itself (JAIL.md §6.9: a write is "is a directory").
        return Err(could_not(shown, os_reason(Errno::ISDIR)));
    };
    if d.looped {
        // Resolution stopped at a symlink loop: Python's open fails with
        // ELOOP and writes nothing; so does this, before creating anything.
        return Err(could_not(shown, os_reason(Errno::LOOP)));
    }
    let dir = if create_parents {
        make_parents(ctx.jail, parent, shown)?
    } else {
        open_parent(ctx.jail, parent).map_err(|e| match e {
            EnforceError::NotFound => Step::Fail(FileError::NotFound(format!(
                "Parent directory {} does not exist",
                ctx.jail.display_path(parent)
            ))),
            other => enforce_step(other, shown),
        })?
    };
    let replaced = write_entry(ctx, dir.as_fd(), name, shown, content)?;
    Ok(replaced.then_some(Settle(dir)))
}

/// An enforcement failure while preparing the write: a changed tree is
/// handed back to the jail (re-decision), an OS error is a write failure.
fn enforce_step(e: EnforceError, shown: &str) -> Step {
    match e {
        EnforceError::Os(errno) => could_not(shown, os_reason(errno)),
        other => Step::Enforce(other),
    }
}

/// Opens a directory of the tree for `*at` mutations and `fsync`. A
/// directory that may be searched and written but not read (`-wx`) is still
/// usable for every `*at` call, so `EACCES` on the readable open falls back
/// to `O_PATH` (only the final `fsync` is then skipped).
pub(super) fn open_parent(jail: &Jail, remainder: &[OsString]) -> Result<OwnedFd, EnforceError> {
    match jail.open_dir(remainder) {
        Err(EnforceError::Os(Errno::ACCESS)) => {
            jail.open(remainder, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
        }
        other => other,
    }
}

/// JAIL.md §6.8 step 4: walks the parent remainder from the root one
/// component at a time, each opened relative to the previous descriptor
/// with `O_NOFOLLOW` (linear in the depth), creating a missing directory
/// with `mkdirat(…, 0777)` (the process umask applies). A symlink met on
/// the way means the tree changed after the decision (the remainder is
/// canonical) and fails closed through a re-decision; a mount there is
/// refused under `jail_no_xdev`, as enforcement would. A directory in which
/// a subdirectory was created is `fsync`ed, so that an acknowledged file
/// cannot vanish after a crash with a parent entry that never reached the
/// disk.
fn make_parents(jail: &Jail, parent: &[OsString], shown: &str) -> Result<OwnedFd, Step> {
    // The common case: everything already exists.
    match open_parent(jail, parent) {
        Ok(fd) => return Ok(fd),
        Err(EnforceError::NotFound) => {}
        Err(e) => return Err(enforce_step(e, shown)),
    }
    let mut cur = open_parent(jail, &[]).map_err(|e| enforce_step(e, shown))?;
    for (i, component) in parent.iter().enumerate() {
        let here = jail.display_path(parent.get(..=i).unwrap_or(parent));
        let name = component.as_os_str();
        let b = name.as_encoded_bytes();
        if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
            // Never in a canonical remainder: refuse rather than trust it.
            return Err(Step::Enforce(EnforceError::Changed));
        }
        let next = match open_component(jail, cur.as_fd(), name, &here)? {
            Some(fd) => fd,
            None => {
                match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o777)) {
                    // The new entry must survive a crash; a directory opened
                    // as O_PATH (no read permission) cannot be synced, and a
                    // failed sync does not undo the creation.
                    Ok(()) => {
                        let _ = rustix::fs::fsync(&cur);
                    }
                    // Created concurrently, or something else appeared: the
                    // open below tells which.
                    Err(Errno::EXIST) => {}
                    Err(Errno::NOENT | Errno::NOTDIR) => {
                        // The directory it was to be created in has gone.
                        return Err(Step::Fail(FileError::not_found(
                            &jail.display_path(parent.get(..i).unwrap_or(&[])),
                        )));
                    }
                    Err(e) => return Err(could_not(&here, os_reason(e))),
                }
                match open_component(jail, cur.as_fd(), name, &here)? {
                    Some(fd) => fd,
                    None => return Err(Step::Fail(FileError::not_found(&here))),
                }
            }
        };
        cur = next;
    }
    Ok(cur)
}

/// Opens the directory `name` in `dir` for the `create_parents` walk;
/// `None` when it does not exist. Read access is preferred (for `fsync`);
/// a `-wx` directory is opened `O_PATH`, which every `*at` call accepts.
fn open_component(
    jail: &Jail,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    here: &str,
) -> Result<Option<OwnedFd>, Step> {
    let base = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = match rustix::fs::openat(dir, name, base | OFlags::RDONLY, Mode::empty()) {
        Err(Errno::ACCESS) => rustix::fs::openat(dir, name, base | OFlags::PATH, Mode::empty()),
        other => other,
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        // O_NOFOLLOW|O_DIRECTORY reports a link as ELOOP or ENOTDIR; a
        // link is a changed tree, anything else is in the way.
        Err(e @ (Errno::LOOP | Errno::NOTDIR)) => {
            return match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    Err(Step::Enforce(EnforceError::Changed))
                }
                Ok(_) => Err(could_not(here, os_reason(Errno::NOTDIR))),
                Err(Errno::NOENT) => Ok(None),
                Err(_) => Err(could_not(here, os_reason(e))),
            };
        }
        Err(e) => return Err(could_not(here, os_reason(e))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| could_not(here, os_reason(e)))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(Step::Enforce(EnforceError::Changed));
    }
    super::fd_mount_ok(jail, fd.as_fd(), here)?;
    Ok(Some(fd))
}

/// FILES.md §2.4 on `(dir, name)`.
fn write_entry(
    ctx: &FileContext<'_>,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    shown: &str,
    content: &Content,
) -> Result<bool, Step> {
    let existing = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Some(st),
        Err(Errno::NOENT) => None,
        Err(e) => return Err(could_not(shown, os_reason(e))),
    };
    let Some(existing) = existing else {
        let mode = Mode::from_raw_mode(0o666 & !ctx.umask.as_raw_mode());
        return replace_atomically(dir, name, content, mode, None, false)
            .map(|()| true)
            .map_err(|e| could_not(shown, e));
    };
    // jail_no_xdev: enforcement checked the parent, not what is mounted at
    // the name itself (a bind-mounted outside file must not be written).
    super::entry_mount_ok(ctx.jail, dir, name, shown)?;
    match FileType::from_raw_mode(existing.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(could_not(shown, os_reason(Errno::ISDIR))),
        // The canonical target cannot be a link (loops were refused above):
        // the tree changed after the decision, so decide again.
        FileType::Symlink => return Err(Step::Enforce(EnforceError::Changed)),
        _ => return Err(could_not(shown, "not a regular file")),
    }
    // Step 2: prove writability without modifying anything, so that a
    // read-only or immutable file is refused as Python refuses it (a rename
    // over it would otherwise succeed).
    let probe = match rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(Step::Enforce(EnforceError::Changed)),
        Err(e) => return Err(could_not(shown, os_reason(e))),
    };
    let opened = rustix::fs::fstat(&probe).map_err(|e| could_not(shown, os_reason(e)))?;
    if FileType::from_raw_mode(opened.st_mode) != FileType::RegularFile {
        return Err(could_not(shown, "not a regular file"));
    }
    // Step 3: a file owned by someone else keeps its owner. A file with
    // several links is never written in place (that would modify the other
    // names' content, JAIL.md D4): it is replaced and the replacement
    // belongs to the writer.
    let foreign = opened.st_uid != rustix::process::geteuid().as_raw();
    let mode = Mode::from_raw_mode(opened.st_mode & 0o1777);
    if foreign && opened.st_nlink == 1 {
        if rustix::process::geteuid().is_root() {
            // Root can give the replacement to the old owner, so the file
            // keeps its owner without ever being half-written: the normal
            // atomic replace, with the owner set before the rename. This
            // departs from FILES.md §2.4 step 3 (in place) on purpose: the
            // in-place write cannot promise the old content survives a
            // failure.
            drop(probe);
            return replace_atomically(dir, name, content, mode, Some(&opened), true)
                .map(|()| true)
                .map_err(|e| could_not(shown, e));
        }
        return write_in_place(&probe, content)
            .map(|()| false)
            .map_err(|e| could_not(shown, e));
    }
    drop(probe);
    replace_atomically(dir, name, content, mode, Some(&opened), false)
        .map(|()| true)
        .map_err(|e| could_not(shown, e))
}

/// The foreign-owner exception for a writer that cannot give a file away:
/// rewrite the opened inode. The space is reserved first (`fallocate`), so
/// the common failure — a full disk or quota — happens before any byte of
/// the old content is touched; then the new content is written from offset
/// 0, the file cut to its length and synced.
///
/// Limits, accepted: where the filesystem cannot reserve space (`fallocate`
/// unsupported) the write proceeds without a reservation, so a failure
/// part-way can still leave a partly rewritten file, as an in-place write
/// always could; on copy-on-write filesystems a reservation does not cover
/// rewriting blocks that already hold data; an I/O error part-way is not
/// prevented by any reservation.
fn write_in_place(fd: &OwnedFd, content: &Content) -> std::io::Result<()> {
    let len = content.len();
    if len > 0 {
        match rustix::fs::fallocate(fd, FallocateFlags::empty(), 0, len) {
            Ok(()) | Err(Errno::OPNOTSUPP | Errno::NOSYS) => {}
            Err(e) => return Err(e.into()),
        }
    }
    content.write_to(fd)?;
    rustix::fs::ftruncate(fd, len)?;
    Ok(rustix::fs::fsync(fd)?)
}

/// Writes all of `bytes` at `offset`, looping on short writes and retrying
/// `EINTR`.
pub(super) fn pwrite_all(fd: &OwnedFd, mut bytes: &[u8], mut offset: u64) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match rustix::io::pwrite(fd, bytes, offset) {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => {
                bytes = bytes.get(n..).unwrap_or(&[]);
                offset += n as u64;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A fresh `.autogpt-shim-<16 lowercase hex>.tmp` name.
///
/// A crash between creating such a file and renaming or removing it leaves
/// it behind, visible in the directory under this name. Leftovers are not
/// cleaned up automatically: a name matching the pattern may just as well
/// be a user's own file, and removing files by pattern could delete it.
pub(super) fn temp_name() -> Result<OsString, Errno> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|_| Errno::IO)?;
    Ok(OsString::from(format!(
        ".autogpt-shim-{:016x}.tmp",
        u64::from_le_bytes(raw)
    )))
}

/// Calls `create` with fresh temporary names until one does not exist yet
/// (`EEXIST`), at most [`TEMP_TRIES`] times.
pub(super) fn with_temp_name<T>(
    mut create: impl FnMut(&OsStr) -> Result<T, Errno>,
) -> Result<(OsString, T), Errno> {
    let mut last = Errno::EXIST;
    for _ in 0..TEMP_TRIES {
        let name = temp_name()?;
        match create(&name) {
            Ok(v) => return Ok((name, v)),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// FILES.md §2.4 step 4: temp file, write, owner (`give_owner`: the old
/// owner, which only root may set) or group, mode, `fsync`, rename over
/// `name`; the directory's `fsync` is the caller's ([`Settle`]). The metadata is set before the `fsync`
/// so that it is made durable together with the content. On any failure
/// the temporary file is removed. `old` is the replaced file (`None` for a
/// new file).
fn replace_atomically(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &Content,
    mode: Mode,
    old: Option<&Stat>,
    give_owner: bool,
) -> Result<(), std::io::Error> {
    let (tmp, fd) = with_temp_name(|tmp| {
        rustix::fs::openat(
            dir,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
    })?;
    let filled = (|| -> std::io::Result<()> {
        content.write_to(&fd)?;
        // Ownership first: a change of owner or group may clear mode bits,
        // so the mode is set last to be exactly `mode`.
        if let Some(old) = old {
            if give_owner {
                rustix::fs::fchown(
                    &fd,
                    Some(Uid::from_raw(old.st_uid)),
                    Some(Gid::from_raw(old.st_gid)),
                )?;
            } else {
                let now = rustix::fs::fstat(&fd)?;
                if now.st_gid != old.st_gid {
                    // Keeping the group is best effort: only root or a
                    // member of that group may set it.
                    let _ = rustix::fs::fchown(&fd, None, Some(Gid::from_raw(old.st_gid)));
                }
            }
        }
        rustix::fs::fchmod(&fd, mode)?;
        rustix::fs::fsync(&fd)?;
        drop(fd);
        // A plain rename: last writer wins, as in Python.
        Ok(rustix::fs::renameat(dir, tmp.as_os_str(), dir, name)?)
    })();
    if let Err(e) = filled {
        let _ = rustix::fs::unlinkat(dir, tmp.as_os_str(), AtFlags::empty());
        return Err(e);
    }
    Ok(())
}
