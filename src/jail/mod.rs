//! The path jail (JAIL.md): every path a request names is decided and then
//! enforced beneath one pinned root directory.
//!
//! * `lexical` — Layer 1: normalisation, `~`, shape checks (no I/O).
//! * `resolve` — Layer 2: the Python-compatible decision by non-strict
//!   `realpath` and a byte-exact prefix comparison.
//! * `enforce` — Layer 3: opening the decided remainder beneath the root fd
//!   with `openat2` or the `O_NOFOLLOW` walker.
//! * `roots` — which directories may be a root at all: the legacy-mode
//!   preparation of `allowed_root` and the dangerous-root list (CLI.md §8).
//! * `protected` — the shim's own directories, which no root may be, hold
//!   or lie inside, and no request path may reach; and its own files, which
//!   no request path may name, by a hard link either.
//!
//! [`Jail`] ties them together and owns the root: opened once, identified by
//! `(st_dev, st_ino)`, re-checked before every decision. Callers get
//! descriptors, never a path string to re-open; a swap race between decision
//! and enforcement is retried once through [`Jail::run`] and then fails
//! closed. This module never writes an audit record: a [`Rejection`] is what
//! the caller turns into `JAIL_VIOLATION`.

mod enforce;
mod lexical;
mod protected;
mod resolve;
pub(crate) mod roots;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat};

/// Layer 3: which resolver enforcement uses, and why it could not open what
/// the decision accepted.
pub use enforce::{EnforceError, Resolver};
/// The home directories `~` expands to.
pub use lexical::Homes;
/// The shim's own directories and files, which no request may reach.
pub use protected::ProtectedLocations;
/// Layer 2: how the decision observes the file system, and the path it
/// resolves to.
pub use resolve::{Filesystem, LinkReader, Resolved};
/// Which directories may be a root: the dangerous-root list and the legacy
/// preparation of `allowed_root`.
pub use roots::{
    Inspected, PreparedRoot, RootProblem, check_dangerous, check_dangerous_for,
    inspect_legacy_root, prepare_legacy_root,
};

/// A request path refused by the jail: answered with an error and audited
/// as `JAIL_VIOLATION` instead of the operation's own record (JAIL.md §4.5).
/// The jail says why it refused; the handler layer chooses the wire code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Why the path was refused.
    pub kind: RejectionKind,
    /// Human-readable; contains the raw and resolved path where known.
    pub message: String,
}

/// Why the jail refused a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionKind {
    /// The path resolves outside the root, crosses a mount with
    /// `jail_no_xdev`, names the root itself where that is refused, or
    /// reaches one of the shim's own files or directories.
    OutsideRoot,
    /// The path's text cannot be accepted: empty, too long, a NUL byte, a
    /// name too long for the system.
    InvalidPath,
}

impl Rejection {
    pub(crate) fn invalid_chars(message: String) -> Self {
        Self {
            kind: RejectionKind::InvalidPath,
            message,
        }
    }

    pub(crate) fn outside(message: String) -> Self {
        Self {
            kind: RejectionKind::OutsideRoot,
            message,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How a jail is built.
#[derive(Debug, Clone, Default)]
pub struct JailOptions {
    /// Refuse mount crossings (`jail_no_xdev`, JAIL.md §6.11).
    pub no_xdev: bool,
    /// Home directories for `~` expansion.
    pub homes: Homes,
    /// Use the walker even where `openat2` exists (tests exercise both).
    pub force_walker: bool,
    /// The shim's own directories: never the root, never reached below it.
    pub protected: ProtectedLocations,
}

/// Why a jail could not be created.
#[derive(Debug)]
pub enum JailSetupError {
    /// The root cannot be resolved or opened.
    Io(PathBuf, std::io::Error),
    /// The root is not a directory.
    NotADirectory(PathBuf),
    /// The canonical root is not valid UTF-8, so it cannot be named on the wire.
    NotUnicode(PathBuf),
    /// The root is, holds or lies inside one of the shim's own directories.
    Protected(protected::Conflict),
}

impl fmt::Display for JailSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JailSetupError::Io(p, e) => write!(f, "allowed_root {}: {e}", p.display()),
            JailSetupError::NotADirectory(p) => {
                write!(f, "allowed_root {} is not a directory", p.display())
            }
            JailSetupError::NotUnicode(p) => {
                write!(f, "allowed_root {} is not valid UTF-8", p.display())
            }
            JailSetupError::Protected(conflict) => write!(f, "{conflict}"),
        }
    }
}

impl std::error::Error for JailSetupError {}

/// A remainder below the canonical root: canonical components, no `.`/`..`.
pub type Remainder = Vec<OsString>;

/// The accepted verdict for one request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The lexically normalised, `~`-expanded, absolute form of the input.
    pub lexical: String,
    /// The full resolution below the root.
    pub remainder: Remainder,
    /// Resolution stopped at a symlink loop (JAIL.md §6.3 step 2).
    pub looped: bool,
    /// The canonical resolved path, for messages, responses and audit.
    pub resolved: String,
}

impl Decision {
    /// True when the path resolves to the root itself.
    pub fn is_root(&self) -> bool {
        self.remainder.is_empty()
    }
}

/// The directory entry a request acts on itself (DELETE, MOVE, STAT without
/// following, WRITE's target name): its canonical parent and its own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The parent directory below the root.
    pub parent: Remainder,
    /// The final name, unresolved.
    pub name: OsString,
}

/// What went wrong inside [`Jail::run`]: a jail verdict (audited as
/// `JAIL_VIOLATION`) or the operation's own failure.
#[derive(Debug)]
pub enum RunError<E> {
    /// Refused by the jail.
    Rejected(Rejection),
    /// The operation failed after the jail accepted.
    Failed(E),
}

/// Failures an operation run under [`Jail::run`] reports.
pub trait EnforcementFailure {
    /// True when the failure means "the tree changed after the decision"
    /// (a symlink, escape or mount met during enforcement).
    fn tree_changed(&self) -> bool;
}

impl EnforcementFailure for EnforceError {
    fn tree_changed(&self) -> bool {
        *self == EnforceError::Changed
    }
}

/// One pinned root and everything needed to decide and enforce beneath it.
#[derive(Debug)]
pub struct Jail {
    root: String,
    root_fd: OwnedFd,
    root_dev: u64,
    root_ino: u64,
    root_mount: enforce::MountKey,
    resolver: Resolver,
    options: JailOptions,
}

impl Jail {
    /// Pins `root`: strict canonicalisation, `O_PATH|O_DIRECTORY` open,
    /// identity recorded, resolver probed.
    pub fn pin(root: &Path, options: JailOptions) -> Result<Jail, JailSetupError> {
        let canonical =
            std::fs::canonicalize(root).map_err(|e| JailSetupError::Io(root.to_owned(), e))?;
        let Some(text) = canonical.to_str().map(str::to_owned) else {
            return Err(JailSetupError::NotUnicode(canonical));
        };
        let fd = rustix::fs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| JailSetupError::Io(canonical.clone(), e.into()))?;
        let st =
            rustix::fs::fstat(&fd).map_err(|e| JailSetupError::Io(canonical.clone(), e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(JailSetupError::NotADirectory(canonical));
        }
        // The callers refuse such a root with their own answer first; this
        // keeps every jail, however it is built, off the shim's own files.
        options
            .protected
            .check_root(&canonical)
            .map_err(JailSetupError::Protected)?;
        let root_mount = enforce::MountKey::of(fd.as_fd())
            .map_err(|e| JailSetupError::Io(canonical.clone(), e.into()))?;
        let resolver = if options.force_walker {
            Resolver::Walker
        } else {
            enforce::probe(fd.as_fd())
        };
        Ok(Jail {
            root: text,
            root_fd: fd,
            root_dev: identity(&st).0,
            root_ino: identity(&st).1,
            root_mount,
            resolver,
            options,
        })
    }

    /// The canonical root path.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The shim's protected locations this jail keeps requests out of.
    pub fn protected(&self) -> &ProtectedLocations {
        &self.options.protected
    }

    /// The pinned root descriptor (`O_PATH`).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// `(st_dev, st_ino)` of the pinned root.
    pub fn root_identity(&self) -> (u64, u64) {
        (self.root_dev, self.root_ino)
    }

    /// True when `fd` sits on the root's mount (by mount id where the kernel
    /// reports one, else by device). Used where a walk below the root opens
    /// directories itself and `jail_no_xdev` is on.
    pub fn on_root_mount(&self, fd: BorrowedFd<'_>) -> bool {
        enforce::MountKey::of(fd).is_ok_and(|key| key == self.root_mount)
    }

    /// True when mount crossings are refused (`jail_no_xdev`).
    pub fn no_xdev(&self) -> bool {
        self.options.no_xdev
    }

    /// Which resolver enforcement uses.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// True when `st` is the root directory itself (identity, not spelling).
    pub fn is_root(&self, st: &Stat) -> bool {
        FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && identity(st) == (self.root_dev, self.root_ino)
    }

    /// The canonical absolute path of a remainder, for responses and audit
    /// (non-UTF-8 names are shown with U+FFFD).
    pub fn display_path(&self, remainder: &[OsString]) -> String {
        let mut out = self.root.clone();
        for c in remainder {
            if !out.ends_with('/') {
                out.push('/');
            }
            out.push_str(&String::from_utf8_lossy(c.as_bytes()));
        }
        out
    }

    /// JAIL.md §6.10: the root path must still name the pinned directory.
    fn check_root(&self) -> Result<(), Rejection> {
        let replaced = || {
            Rejection::outside(format!(
                "allowed_root '{}' no longer exists or was replaced",
                self.root
            ))
        };
        let st = rustix::fs::stat(self.root.as_str()).map_err(|_| replaced())?;
        if !self.is_root(&st) {
            return Err(replaced());
        }
        let pinned = rustix::fs::fstat(&self.root_fd).map_err(|_| replaced())?;
        // A deleted directory keeps its inode while the fd is open; a new
        // directory at the same path may even reuse the number. A link count
        // of zero tells the pinned one is gone.
        if FileType::from_raw_mode(pinned.st_mode) != FileType::Directory || pinned.st_nlink == 0 {
            return Err(replaced());
        }
        Ok(())
    }

    /// Layers 1 and 2 with the default (real) filesystem view, then the
    /// shim's own directories: a path ending in or passing through one is
    /// refused however it got below the root (renamed or mounted there).
    pub fn decide(&self, wire: &str) -> Result<Decision, Rejection> {
        self.check_root()?;
        let lexical = self.lexical(wire)?;
        let resolved = self.resolve(wire, &lexical)?;
        let decision = self.contain(wire, lexical, resolved)?;
        if let Some(what) = self.options.protected.reached(
            self.root_fd.as_fd(),
            self.root_identity(),
            &decision.remainder,
        ) {
            return Err(Rejection::outside(format!(
                "Path '{wire}' reaches the shim's own {what}"
            )));
        }
        Ok(decision)
    }

    /// True when `st` is one of the shim's own directories (for walks below
    /// the root that open directories themselves).
    pub fn is_protected(&self, st: &Stat) -> bool {
        self.options.protected.is_protected(st)
    }

    /// Layer 2's resolution. A path spelled below the canonical root starts
    /// from the root's components without re-examining them: they were
    /// symlink-free when pinned and `check_root` just confirmed the root path
    /// still names the pinned directory (this also keeps the decision stable
    /// if an ancestor of the root is later replaced by a link to it, as the
    /// reference, which re-resolves its root every time, would).
    fn resolve(&self, wire: &str, lexical: &str) -> Result<Resolved, Rejection> {
        let root = self.root.trim_end_matches('/');
        let resolved = match lexical.strip_prefix(root) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                resolve::resolve_from(self.root_components(), rest.as_bytes(), &Filesystem)
            }
            _ => resolve::resolve(lexical.as_bytes(), &Filesystem),
        };
        resolved.map_err(|resolve::TooComplex| {
            Rejection::invalid_chars(format!(
                "Cannot resolve path '{wire}': it needs more than {} steps",
                resolve::MAX_RESOLVE_STEPS
            ))
        })
    }

    fn root_components(&self) -> Vec<OsString> {
        self.root
            .split('/')
            .filter(|c| !c.is_empty())
            .map(OsString::from)
            .collect()
    }

    /// Layer 1: normalise, expand `~`, check the shape, anchor relative
    /// paths at the canonical root (difference D9).
    fn lexical(&self, wire: &str) -> Result<String, Rejection> {
        let normalized = lexical::normalize(wire);
        let expanded = lexical::expand_tilde(&normalized, &self.options.homes)?;
        lexical::check_shape(&expanded)?;
        if expanded.starts_with('/') {
            Ok(expanded)
        } else {
            Ok(format!("{}/{expanded}", self.root.trim_end_matches('/')))
        }
    }

    /// Layer 2's comparison: accept iff the resolution is the root or lies
    /// below it at a `/` boundary, byte for byte.
    fn contain(
        &self,
        wire: &str,
        lexical: String,
        resolved: Resolved,
    ) -> Result<Decision, Rejection> {
        let root_components: Vec<&[u8]> = self
            .root
            .as_bytes()
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let inside = resolved.components.len() >= root_components.len()
            && resolved
                .components
                .iter()
                .zip(&root_components)
                .all(|(a, b)| a.as_bytes() == *b);
        if !inside {
            // Where an outside path leads is not disclosed: the resolution of
            // e.g. /proc/<pid>/fd/N would otherwise act as a readlink oracle
            // for anything outside the root.
            return Err(Rejection::outside(format!(
                "Path '{wire}' is outside allowed_root '{}'",
                self.root
            )));
        }
        let remainder: Remainder = resolved.components[root_components.len()..].to_vec();
        Ok(Decision {
            lexical,
            resolved: self.display_path(&remainder),
            remainder,
            looped: resolved.looped,
        })
    }

    /// The entry a request acts on itself (JAIL.md §6.3, last paragraph):
    /// the lexical parent resolved, plus the unresolved final name. `None`
    /// when there is no separate entry name (input `""`, `.`, a final `..`,
    /// or the root itself named through a parent outside it).
    ///
    /// A parent resolving outside the root is refused even when the full
    /// path resolves inside (a link outside pointing in must not be acted
    /// on).
    pub fn entry(&self, wire: &str, decision: &Decision) -> Result<Option<Entry>, Rejection> {
        let lexical = decision.lexical.as_str();
        let Some((parent, name)) = lexical.rsplit_once('/') else {
            return Ok(None);
        };
        if name.is_empty() || name == "." || name == ".." {
            return Ok(None);
        }
        let parent = if parent.is_empty() { "/" } else { parent };
        let resolved = self.resolve(wire, parent)?;
        match self.contain(wire, parent.to_owned(), resolved) {
            Ok(parent_decision) => Ok(Some(Entry {
                parent: parent_decision.remainder,
                name: OsStr::new(name).to_owned(),
            })),
            Err(_) if decision.is_root() => Ok(None),
            Err(rejection) => Err(rejection),
        }
    }

    fn beneath(&self) -> enforce::Beneath<'_> {
        enforce::Beneath {
            root: self.root_fd.as_fd(),
            root_mount: self.root_mount,
            resolver: self.resolver,
            no_xdev: self.options.no_xdev,
        }
    }

    /// Layer 3: opens `remainder` beneath the root with `flags` (symlinks
    /// never followed, `O_CLOEXEC` always added).
    pub fn open(
        &self,
        remainder: &[OsString],
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, EnforceError> {
        self.beneath().open(remainder, flags, mode)
    }

    /// Opens a directory of the tree for `*at` calls, `fsync` and listing.
    pub fn open_dir(&self, remainder: &[OsString]) -> Result<OwnedFd, EnforceError> {
        self.open(remainder, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
    }

    /// Decides `wire` and runs `op` on the decision; when `op` reports that
    /// the tree changed after the decision, decides and runs once more, and
    /// if it changed again fails closed with `PATH_OUTSIDE_ALLOWED_ROOT`
    /// (JAIL.md §6.4).
    pub fn run<T, E: EnforcementFailure>(
        &self,
        wire: &str,
        mut op: impl FnMut(&Decision) -> Result<T, E>,
    ) -> Result<T, RunError<E>> {
        let mut attempt = 0;
        loop {
            let decision = self.decide(wire).map_err(RunError::Rejected)?;
            match op(&decision) {
                Ok(value) => return Ok(value),
                Err(e) if e.tree_changed() && attempt == 0 => attempt += 1,
                Err(e) if e.tree_changed() => {
                    return Err(RunError::Rejected(Rejection::outside(format!(
                        "Path '{wire}' changed while it was being opened; refusing to follow it"
                    ))));
                }
                Err(e) => return Err(RunError::Failed(e)),
            }
        }
    }
}

/// `(st_dev, st_ino)` of a stat result: the identity of a filesystem object.
// The field types differ between platforms (u64 on Linux, narrower on
// others); the cast is a no-op only on some of them.
#[allow(clippy::unnecessary_cast)]
pub fn identity(st: &Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}
