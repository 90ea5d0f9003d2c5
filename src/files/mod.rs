//! The `FILE_*` operations (FILES.md), performed on descriptors obtained
//! beneath the jail's pinned root — never on a re-joined path string.
//!
//! Each operation takes its decoded request and a [`FileContext`] and returns
//! an [`Outcome`]: the wire reply plus what to audit (the operation's
//! `details`, or a `JAIL_VIOLATION` when the jail refused the path). This
//! module never writes audit records or frames itself, and it must never
//! open, create, rename or remove anything except relative to a directory
//! descriptor handed out by [`crate::jail`].
//!
//! A failure becomes its wire `ERROR` in one place, [`FileError::into_payload`],
//! which also fills `details` — a deliberate addition to the reference, which
//! sends `details: null`: path errors carry the path as the request sent it,
//! `FILE_TOO_LARGE` the limit, the attempted size and the operation, and a text
//! read that only the text cap refused a hint to read it as base64.

pub mod base64;
mod delete;
pub mod glob;
mod list;
pub mod mime;
mod moves;
mod read;
mod stat;
mod write;

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

pub use delete::delete;
pub use list::list;
pub use moves::move_entry;
pub use read::read;
pub use stat::stat;
pub use write::write;

use crate::audit::Details;
use crate::jail::{EnforceError, EnforcementFailure, Jail, Outcome as JailOutcome, Rejection};
use crate::protocol::{ErrorCode, ErrorPayload, Message, MessageType};

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

/// A failed operation: the wire code and a one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// `PATH_NOT_FOUND`, `FILE_TOO_LARGE`, `INTERNAL_ERROR`, …
    pub code: ErrorCode,
    /// Human-readable; never contains file content.
    pub message: String,
    /// For `FILE_TOO_LARGE`: the limit that refused it.
    pub excess: Option<SizeExcess>,
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

/// The longest wire path quoted in `details`. A longer one is refused by the
/// jail anyway (`PATH_INVALID_CHARS`), and quoting it whole could push the
/// answer past the frame limit.
const MAX_DETAILS_PATH_BYTES: usize = 4096;

/// `details.hint` of a text read that base64 would serve.
const BASE64_HINT: &str = "The file is too large to return as text; read it with \
                           encoding: \"base64\" instead.";

impl FileError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            excess: None,
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, message)
    }

    pub(crate) fn not_found(path: &str) -> Self {
        Self::new(ErrorCode::PathNotFound, format!("{path} does not exist"))
    }

    /// `FILE_TOO_LARGE` with what it ran into.
    pub(crate) fn too_large(message: impl Into<String>, excess: SizeExcess) -> Self {
        Self {
            excess: Some(excess),
            ..Self::new(ErrorCode::FileTooLarge, message)
        }
    }

    /// The wire `ERROR` for this failure of `request`: the code and message
    /// unchanged, with the `details` the platform words its answer from.
    pub fn into_payload(self, request: &Message) -> ErrorPayload {
        let mut details = path_details(self.code, request);
        if let Some(excess) = self.excess {
            details.insert(
                "max_file_size_bytes".into(),
                excess.max_file_size_bytes.into(),
            );
            details.insert("attempted_bytes".into(), excess.attempted_bytes.into());
            details.insert("op".into(), request.message_type().as_str().into());
            if excess.base64_would_fit {
                details.insert("hint".into(), BASE64_HINT.into());
            }
        }
        with_details(ErrorPayload::new(self.code, self.message), details)
    }
}

/// `payload` with `details`, which stay `null` when there are none.
pub(crate) fn with_details(
    payload: ErrorPayload,
    details: serde_json::Map<String, serde_json::Value>,
) -> ErrorPayload {
    if details.is_empty() {
        payload
    } else {
        payload.with_details(details)
    }
}

/// The `details` of an error with `code` answering `request`: for a path
/// error, the path as the request sent it (a command's `cwd`, when it sent
/// one); nothing otherwise.
pub(crate) fn path_details(
    code: ErrorCode,
    request: &Message,
) -> serde_json::Map<String, serde_json::Value> {
    let mut details = serde_json::Map::new();
    if !is_path_error(code) {
        return details;
    }
    let quoted = |path: &str| {
        serde_json::Value::String(crate::audit::cap::cut(path, MAX_DETAILS_PATH_BYTES).to_owned())
    };
    match request {
        Message::FileRead(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileWrite(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileStat(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileList(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileDelete(r) => details.insert("path".into(), quoted(&r.path)),
        // Either end may be the one at fault; `path` names both as the
        // jail's audit record does.
        Message::FileMove(r) => {
            details.insert("src".into(), quoted(&r.src));
            details.insert("dst".into(), quoted(&r.dst));
            details.insert("path".into(), quoted(&format!("{} -> {}", r.src, r.dst)))
        }
        Message::ExecuteCommand(r) => match r.cwd.as_deref() {
            Some(cwd) if !cwd.is_empty() => details.insert("path".into(), quoted(cwd)),
            _ => None,
        },
        _ => None,
    };
    details
}

/// The codes that are about a path the request named.
fn is_path_error(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::PathOutsideAllowedRoot
            | ErrorCode::PathReservedName
            | ErrorCode::PathInvalidChars
            | ErrorCode::PathNotFound
            | ErrorCode::PathNotEmpty
            | ErrorCode::PathExists
    )
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

/// What to audit for a handled request.
#[derive(Debug, Clone, PartialEq)]
pub enum Audit {
    /// The operation's own record with these `details` (FILES.md, each
    /// operation's "Audit" section), in their on-disk order.
    Operation(Details),
    /// A `JAIL_VIOLATION` record instead (JAIL.md §4.5).
    JailViolation {
        /// The jail's error code.
        code: ErrorCode,
        /// The raw wire path (`"<src> -> <dst>"` for a move).
        path: String,
        /// The refused operation.
        attempted_op: MessageType,
    },
}

/// The result of one file operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The typed response, or the error to answer with.
    pub reply: Result<Message, FileError>,
    /// What to audit.
    pub audit: Audit,
}

impl Outcome {
    /// The outcome of a jail refusal: the error reply and a `JAIL_VIOLATION`.
    pub(crate) fn rejected(rejection: Rejection, path: String, op: MessageType) -> Self {
        Self {
            audit: Audit::JailViolation {
                code: rejection.code,
                path,
                attempted_op: op,
            },
            reply: Err(FileError::new(rejection.code, rejection.message)),
        }
    }
}

/// Maps an enforcement failure that reached the operation (i.e. not a
/// tree change, which [`Jail::run`] handles) to a wire error.
pub(crate) fn enforce_error(e: EnforceError, shown: &str) -> FileError {
    match e {
        EnforceError::NotFound => FileError::not_found(shown),
        EnforceError::NameTooLong => FileError::new(
            ErrorCode::PathInvalidChars,
            format!("{shown}: file name too long"),
        ),
        // Only reached when a retry already happened; Jail::run turns a
        // second change into a rejection, so this is a defensive mapping.
        EnforceError::Changed => FileError::new(
            ErrorCode::PathOutsideAllowedRoot,
            format!("{shown} changed while it was being opened"),
        ),
        EnforceError::Os(errno) => os_error(shown, errno),
    }
}

/// An OS error as an `INTERNAL_ERROR` message.
pub(crate) fn os_error(shown: &str, errno: Errno) -> FileError {
    FileError::internal(format!("{shown}: {}", std::io::Error::from(errno)))
}

/// Runs a jailed step for `wire`, turning the jail's verdicts into the
/// final result; the caller builds the [`Outcome`] (and its audit details).
pub(crate) fn jailed<T>(
    jail: &Jail,
    wire: &str,
    op: impl FnMut(&crate::jail::Decision) -> Result<T, Step>,
) -> Result<T, JailedError> {
    jail.run(wire, op).map_err(|e| match e {
        JailOutcome::Rejected(r) => JailedError::Rejected(r),
        JailOutcome::Failed(Step::Fail(f)) => JailedError::Failed(f),
        JailOutcome::Failed(Step::Reject(r)) => JailedError::Rejected(r),
        // A name too long for the kernel, met through a symlink's target,
        // is a path the jail cannot accept (JAIL.md §6.13).
        JailOutcome::Failed(Step::Enforce(EnforceError::NameTooLong)) => {
            JailedError::Rejected(Rejection::invalid_chars(format!(
                "Path '{wire}' resolves to a name too long for the system"
            )))
        }
        JailOutcome::Failed(Step::Enforce(e)) => JailedError::Failed(enforce_error(e, wire)),
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
