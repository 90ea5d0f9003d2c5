//! The `FILE_*` operations (FILES.md), performed on descriptors obtained
//! beneath the jail's pinned root — never on a re-joined path string.
//!
//! Each operation takes its decoded request and a [`FileContext`] and returns
//! a [`FileOutcome`]: the wire reply plus what to audit (the operation's
//! `details`, or a `JAIL_VIOLATION` when the jail refused the path). This
//! module never writes audit records or frames itself, and it must never
//! open, create, rename or remove anything except relative to a directory
//! descriptor handed out by [`crate::jail`].
//!
//! A [`FileError`] says what went wrong, never which wire code to send: the
//! daemon's handler layer maps it to its `ERROR` (code, message, `details`)
//! in one place.

// Public as a module, not re-exported: `encode` and `decode_strict` read
// right only with `base64::` in front.
pub mod base64;
mod delete;
mod glob;
mod list;
// Public as a module, not re-exported: `guess` reads right only with
// `mime::` in front.
pub mod mime;
mod moves;
mod read;
mod stat;
mod write;

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// FILE_DELETE.
pub use delete::delete;
/// The glob filter of FILE_LIST and its length bound.
pub use glob::{GlobTooLong, MAX_GLOB_CHARS, Pattern};
/// FILE_LIST.
pub use list::list;
/// FILE_MOVE.
pub use moves::move_entry;
/// FILE_READ.
pub use read::read;
/// FILE_STAT.
pub use stat::stat;
/// FILE_WRITE.
pub use write::{Settle, write, write_settling};

use crate::audit::Details;
use crate::jail::{EnforceError, EnforcementFailure, Jail, Rejection, RejectionKind, RunError};
use crate::protocol::{Message, MessageType};

/// What every file operation needs besides its request.
#[derive(Debug, Clone, Copy)]
pub struct FileContext<'a> {
    /// The connection's jail.
    pub jail: &'a Jail,
    /// Effective `max_file_size_bytes` (min of config and `HELLO_ACK`).
    pub max_file_size_bytes: u64,
    /// `refuse_multilink_reads` (JAIL.md §6.11).
    pub refuse_multilink_reads: bool,
    /// The process umask, captured once at start before threads exist.
    pub umask: Mode,
}

/// Why a file operation failed. Says what happened; the handler layer
/// chooses the wire code, message and `details` for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileError {
    /// The path, or the parent it would be created in, does not exist.
    NotFound(String),
    /// The destination exists and the request did not ask to overwrite it.
    Exists(String),
    /// A directory to delete without `recursive` still has entries.
    NotEmpty(String),
    /// Reading or writing the file would exceed a size limit.
    TooLarge {
        /// Human-readable.
        message: String,
        /// The limit that refused it.
        excess: SizeExcess,
    },
    /// The path could not be accepted once the jail opened it (a name too
    /// long for the system, a tree that kept changing): answered as the jail
    /// answers a refusal, but audited as the operation's own record.
    Refused(Rejection),
    /// Anything else: an OS error, a request the reference also answers
    /// with an internal error.
    Internal(String),
}

/// What a `FILE_TOO_LARGE` ran into, for its wire `details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeExcess {
    /// The effective `max_file_size_bytes`.
    pub max_file_size_bytes: u64,
    /// The bytes the request would have read or written.
    pub attempted_bytes: u64,
    /// A text read refused only by the text cap, which base64 would serve.
    pub base64_would_fit: bool,
}

impl FileError {
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::Internal(message.into())
    }

    pub(crate) fn not_found(path: &str) -> Self {
        Self::NotFound(format!("{path} does not exist"))
    }

    /// Reading or writing would exceed what `excess` names.
    pub(crate) fn too_large(message: impl Into<String>, excess: SizeExcess) -> Self {
        Self::TooLarge {
            message: message.into(),
            excess,
        }
    }

    /// The one-line message; never contains file content.
    pub fn message(&self) -> &str {
        match self {
            Self::NotFound(m) | Self::Exists(m) | Self::NotEmpty(m) | Self::Internal(m) => m,
            Self::TooLarge { message, .. } => message,
            Self::Refused(r) => &r.message,
        }
    }

    /// The same failure told with `message` instead.
    pub(crate) fn with_message(self, message: String) -> Self {
        match self {
            Self::NotFound(_) => Self::NotFound(message),
            Self::Exists(_) => Self::Exists(message),
            Self::NotEmpty(_) => Self::NotEmpty(message),
            Self::Internal(_) => Self::Internal(message),
            Self::TooLarge { excess, .. } => Self::TooLarge { message, excess },
            Self::Refused(r) => Self::Refused(Rejection { message, ..r }),
        }
    }
}

/// Failures inside a jailed step: either enforcement (which may mean the tree
/// changed and the step should be retried) or a final operation error.
#[derive(Debug)]
pub(crate) enum Step {
    /// From opening beneath the root.
    Enforce(EnforceError),
    /// A final answer.
    Fail(FileError),
    /// A jail refusal found inside the step (e.g. the entry's parent lies
    /// outside the root): audited as `JAIL_VIOLATION`.
    Reject(Rejection),
}

impl EnforcementFailure for Step {
    fn tree_changed(&self) -> bool {
        matches!(self, Step::Enforce(EnforceError::Changed))
    }
}

impl From<EnforceError> for Step {
    fn from(e: EnforceError) -> Self {
        Step::Enforce(e)
    }
}

impl From<FileError> for Step {
    fn from(e: FileError) -> Self {
        Step::Fail(e)
    }
}

/// What to audit for a handled data-plane request (a file operation or a
/// command).
#[derive(Debug, Clone, PartialEq)]
pub enum Audit {
    /// The operation's own record with these `details` (FILES.md, each
    /// operation's "Audit" section), in their on-disk order.
    Operation(Details),
    /// An `EXECUTE_COMMAND` record (EXEC.md §12, AUDIT.md §3.1); its `ok`
    /// and error code follow from the reply.
    Command {
        /// `command`, `argv`, `shell`, `cwd`, `env_keys`, `timeout_seconds`.
        details: Details,
        /// The exit code of a command that ran.
        exit_code: Option<i64>,
        /// From the request's arrival to the result (0 for a refusal by the
        /// command limits).
        duration_ms: u64,
    },
    /// A `JAIL_VIOLATION` record instead (JAIL.md §4.4–§4.5).
    JailViolation {
        /// Why the jail refused the path.
        rejection: RejectionKind,
        /// The raw wire path (`"<src> -> <dst>"` for a move; a command's
        /// raw `cwd`, or the root when it sent none).
        path: String,
        /// The refused operation.
        attempted_op: MessageType,
    },
}

/// The result of one file operation.
#[derive(Debug, Clone, PartialEq)]
pub struct FileOutcome {
    /// The typed response, or the error to answer with.
    pub reply: Result<Message, FileError>,
    /// What to audit.
    pub audit: Audit,
}

impl FileOutcome {
    /// The outcome of a jail refusal: the error reply and a `JAIL_VIOLATION`.
    pub(crate) fn rejected(rejection: Rejection, path: String, op: MessageType) -> Self {
        Self {
            audit: Audit::JailViolation {
                rejection: rejection.kind,
                path,
                attempted_op: op,
            },
            reply: Err(FileError::Refused(rejection)),
        }
    }
}

/// Maps an enforcement failure that reached the operation (i.e. not a
/// tree change, which [`Jail::run`] handles) to a wire error.
pub(crate) fn enforce_error(e: EnforceError, shown: &str) -> FileError {
    match e {
        EnforceError::NotFound => FileError::not_found(shown),
        EnforceError::NameTooLong => FileError::Refused(Rejection::invalid_chars(format!(
            "{shown}: file name too long"
        ))),
        // Only reached when a retry already happened; Jail::run turns a
        // second change into a rejection, so this is a defensive mapping.
        EnforceError::Changed => FileError::Refused(Rejection::outside(format!(
            "{shown} changed while it was being opened"
        ))),
        EnforceError::Os(errno) => os_error(shown, errno),
    }
}

/// An OS error met on `shown`, as an internal failure.
pub(crate) fn os_error(shown: &str, errno: Errno) -> FileError {
    FileError::internal(format!("{shown}: {}", std::io::Error::from(errno)))
}

/// Runs a jailed step for `wire`, turning the jail's verdicts into the
/// final result; the caller builds the [`FileOutcome`] (and its audit details).
pub(crate) fn jailed<T>(
    jail: &Jail,
    wire: &str,
    op: impl FnMut(&crate::jail::Decision) -> Result<T, Step>,
) -> Result<T, JailedError> {
    jail.run(wire, op).map_err(|e| match e {
        RunError::Rejected(r) => JailedError::Rejected(r),
        RunError::Failed(Step::Fail(f)) => JailedError::Failed(f),
        RunError::Failed(Step::Reject(r)) => JailedError::Rejected(r),
        // A name too long for the kernel, met through a symlink's target,
        // is a path the jail cannot accept (JAIL.md §6.13).
        RunError::Failed(Step::Enforce(EnforceError::NameTooLong)) => {
            JailedError::Rejected(Rejection::invalid_chars(format!(
                "Path '{wire}' resolves to a name too long for the system"
            )))
        }
        RunError::Failed(Step::Enforce(e)) => JailedError::Failed(enforce_error(e, wire)),
    })
}

/// A jailed step's failure: refused by the jail, or failed afterwards.
#[derive(Debug)]
pub(crate) enum JailedError {
    Rejected(Rejection),
    Failed(FileError),
}

/// `jail_no_xdev` at an entry an operation acts on without opening it
/// through the jail (enforcement only checks the components it walks, so a
/// bind mount — even of the same filesystem — at the final name would go
/// unnoticed): the entry `name` in `dir` must sit on the root's mount, or
/// the request is refused as a jail violation. The entry is opened with
/// `O_PATH|O_NOFOLLOW`, which reaches what is mounted there but never
/// follows a link and never reads or writes anything. A missing entry
/// passes (the caller reports absence itself); without `jail_no_xdev`
/// everything passes.
pub(crate) fn entry_mount_ok(
    jail: &Jail,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    shown: &str,
) -> Result<(), Step> {
    if !jail.no_xdev() {
        return Ok(());
    }
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(()),
        Err(e) => return Err(Step::Fail(os_error(shown, e))),
    };
    fd_mount_ok(jail, fd.as_fd(), shown)
}

/// [`entry_mount_ok`] for an object already opened as `fd` (checking the
/// descriptor leaves no window between the check and the open).
pub(crate) fn fd_mount_ok(jail: &Jail, fd: BorrowedFd<'_>, shown: &str) -> Result<(), Step> {
    if jail.no_xdev() && !jail.on_root_mount(fd) {
        return Err(Step::Reject(Rejection::outside(format!(
            "Path '{shown}' crosses a mount point (jail_no_xdev)"
        ))));
    }
    Ok(())
}
