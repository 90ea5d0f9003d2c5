//! Layer 3 of the jail: opening a canonical remainder beneath the pinned root
//! descriptor (JAIL.md §6.4–§6.5).
//!
//! Two resolvers give the same guarantee: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, or, where
//! the kernel or a seccomp filter refuses that syscall, a walk that opens one
//! component at a time with `O_NOFOLLOW`. Either way a symlink, a `..` above
//! the root or (optionally) a mount crossing met here fails; this module must
//! never follow anything, never accept a multi-component string in walker
//! mode and never re-open through `/proc/self/fd`.

use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Which resolver enforcement uses (probed once per root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_BENEATH | …)`, Linux ≥ 5.6.
    Openat2,
    /// Component-by-component `openat(O_NOFOLLOW)`.
    Walker,
}

/// Why enforcement could not open what the decision accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnforceError {
    /// `ENOENT`/`ENOTDIR` (or a followed loop): the object does not exist.
    NotFound,
    /// A symlink, an escape or a mount crossing was met: the tree changed
    /// after the decision (or `jail_no_xdev` forbids the mount).
    Changed,
    /// `ENAMETOOLONG`.
    NameTooLong,
    /// Any other failure (`EACCES`, `EIO`, …).
    Os(Errno),
}

impl From<Errno> for EnforceError {
    fn from(e: Errno) -> Self {
        match e {
            Errno::NOENT | Errno::NOTDIR => EnforceError::NotFound,
            Errno::LOOP | Errno::XDEV => EnforceError::Changed,
            Errno::NAMETOOLONG => EnforceError::NameTooLong,
            other => EnforceError::Os(other),
        }
    }
}

/// How many times `openat2` is retried on `EAGAIN` (a concurrent rename or
/// mount while resolving).
const EAGAIN_RETRIES: usize = 3;

/// Probes whether `openat2` is usable: `ENOSYS` (old kernel) or `EPERM`
/// (seccomp profile that predates it) selects the walker.
pub fn probe(root: BorrowedFd<'_>) -> Resolver {
    let how = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::openat2(root, ".", how, Mode::empty(), ResolveFlags::BENEATH) {
        Ok(_) => Resolver::Openat2,
        Err(Errno::NOSYS | Errno::PERM) => Resolver::Walker,
        // Any other failure is not about the syscall's existence.
        Err(_) => Resolver::Openat2,
    }
}

/// Where an object is mounted: the mount id from `statx` where the kernel
/// reports one (Linux ≥ 5.8; it tells bind mounts of the same filesystem
/// apart), else only the device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MountKey {
    Id(u64),
    Dev(u64),
}

impl MountKey {
    pub(crate) fn of(fd: BorrowedFd<'_>) -> Result<MountKey, Errno> {
        use rustix::fs::{StatxFlags, statx};
        match statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID) {
            Ok(st) if st.stx_mask & StatxFlags::MNT_ID.bits() != 0 => {
                Ok(MountKey::Id(st.stx_mnt_id))
            }
            _ => Ok(MountKey::Dev(super::identity(&rustix::fs::fstat(fd)?).0)),
        }
    }
}

/// The resolver's view of the pinned root.
#[derive(Debug)]
pub(crate) struct Beneath<'a> {
    pub root: BorrowedFd<'a>,
    pub root_mount: MountKey,
    pub resolver: Resolver,
    pub no_xdev: bool,
}

impl Beneath<'_> {
    /// Opens `components` (empty = the root itself) with `flags` beneath the
    /// root. Symlinks are never followed, not even as the last component.
    pub fn open(
        &self,
        components: &[OsString],
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, EnforceError> {
        match self.resolver {
            Resolver::Openat2 => self.open_openat2(components, flags, mode),
            Resolver::Walker => self.open_walker(components, flags, mode),
        }
    }

    fn open_openat2(
        &self,
        components: &[OsString],
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, EnforceError> {
        for name in components {
            check_component(name)?;
        }
        let path = relative_path(components);
        let mut resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        if self.no_xdev {
            resolve |= ResolveFlags::NO_XDEV;
        }
        // Without O_NOFOLLOW a trailing symlink fails with ELOOP under
        // RESOLVE_NO_SYMLINKS, even for O_PATH (with it, O_PATH would open
        // the link itself).
        let flags = (flags | OFlags::CLOEXEC) - OFlags::NOFOLLOW;
        let mut attempts = 0;
        loop {
            match rustix::fs::openat2(self.root, path.as_slice(), flags, mode, resolve) {
                Ok(fd) => return Ok(fd),
                Err(Errno::AGAIN) if attempts < EAGAIN_RETRIES => attempts += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn open_walker(
        &self,
        components: &[OsString],
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, EnforceError> {
        let Some((last, dirs)) = components.split_last() else {
            // The root itself.
            let fd = rustix::fs::openat(self.root, ".", flags | OFlags::CLOEXEC, mode)?;
            return Ok(fd);
        };
        let mut cur: Option<OwnedFd> = None;
        for name in dirs {
            let parent = cur.as_ref().map_or(self.root, |fd| fd.as_fd());
            let next = self.open_dir_component(parent, name)?;
            cur = Some(next);
        }
        let parent = cur.as_ref().map_or(self.root, |fd| fd.as_fd());
        check_component(last)?;
        let fd = match rustix::fs::openat(
            parent,
            last.as_bytes(),
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        ) {
            Ok(fd) => fd,
            Err(e) => return Err(self.explain(parent, last, e)),
        };
        let st = rustix::fs::fstat(&fd)?;
        // O_PATH|O_NOFOLLOW opens a trailing symlink itself: refuse it.
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(EnforceError::Changed);
        }
        self.check_mount(fd.as_fd())?;
        Ok(fd)
    }

    fn open_dir_component(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsString,
    ) -> Result<OwnedFd, EnforceError> {
        check_component(name)?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(parent, name.as_bytes(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return Err(self.explain(parent, name, e)),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(EnforceError::Changed);
        }
        self.check_mount(fd.as_fd())?;
        Ok(fd)
    }

    /// `jail_no_xdev` in walker mode: every component must sit on the
    /// root's mount.
    fn check_mount(&self, fd: BorrowedFd<'_>) -> Result<(), EnforceError> {
        if self.no_xdev && MountKey::of(fd)? != self.root_mount {
            return Err(EnforceError::Changed);
        }
        Ok(())
    }

    /// `O_NOFOLLOW` reports a symlink as `ELOOP` (or `ENOTDIR` with
    /// `O_DIRECTORY`); a symlink where the decision saw none means the tree
    /// changed, while `ENOTDIR` on a real file means "does not exist".
    fn explain(&self, parent: BorrowedFd<'_>, name: &OsString, e: Errno) -> EnforceError {
        if matches!(e, Errno::NOTDIR | Errno::LOOP) {
            if let Ok(st) = rustix::fs::statat(parent, name.as_bytes(), AtFlags::SYMLINK_NOFOLLOW) {
                if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                    return EnforceError::Changed;
                }
            }
        }
        e.into()
    }
}

/// A canonical remainder never holds these; meeting one is a bug upstream,
/// refused rather than trusted.
fn check_component(name: &OsString) -> Result<(), EnforceError> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(EnforceError::Changed);
    }
    Ok(())
}

/// `c1/c2/…/cn`, or `.` for the root itself.
fn relative_path(components: &[OsString]) -> Vec<u8> {
    if components.is_empty() {
        return b".".to_vec();
    }
    let mut out = Vec::new();
    for (i, c) in components.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(c.as_bytes());
    }
    out
}
