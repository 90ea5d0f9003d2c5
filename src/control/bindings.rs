//! Session bindings and their revisions (CONTROL.md §12, §7.5 hardening
//! note): which folder each chat session is bound to, the 64-entry store
//! kept in least-recently-remembered order, and the highest revision issued
//! or accepted per session, persisted so that an older grant cannot be
//! restored after a restart or a DETACH.
//!
//! The revision file lives in the state directory, owner-only, replaced
//! atomically. This module never forgets a binding whose session has a live
//! child, and never lowers a persisted revision.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Bindings kept at most.
pub const BINDING_CAP: usize = 64;

/// The file of persisted revisions, in the state directory.
pub const REVISIONS_FILE: &str = "grant-revisions.json";

/// Sessions whose revision is remembered at most. Beyond it the session
/// updated longest ago is forgotten, and with it the protection against
/// restoring its older grants (the platform could otherwise grow the file
/// without bound by inventing session ids).
pub const REVISION_CAP: usize = 10_000;

/// `(session_id, allowed_root, fingerprint, revision, root_grant)`, plus the
/// folder's `(st_dev, st_ino)` and identity at verification, to compare with
/// the pinned jail of the child.
#[derive(Clone, PartialEq, Eq)]
pub struct Binding {
    /// The chat session.
    pub session_id: String,
    /// The canonical folder.
    pub allowed_root: PathBuf,
    /// The same path as text.
    pub root_text: String,
    /// CONTROL.md §6.
    pub fingerprint: String,
    /// ≥ 1.
    pub revision: u64,
    /// The signed grant.
    pub root_grant: String,
    /// Device and inode of the folder when the binding was verified.
    pub dev_ino: (u64, u64),
    /// Birth time and generation of the folder then.
    pub identity: super::grant::DirIdentity,
}

/// The grant is left out: it must never reach a log line.
impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("session_id", &self.session_id)
            .field("allowed_root", &self.allowed_root)
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// The in-memory store, oldest first.
#[derive(Debug, Default)]
pub struct Bindings {
    entries: Vec<Binding>,
}

/// The store is full of sessions with live children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreFull;

impl Bindings {
    /// An empty store.
    pub fn new() -> Bindings {
        Bindings::default()
    }

    /// The binding of `session_id`.
    pub fn get(&self, session_id: &str) -> Option<&Binding> {
        self.entries.iter().find(|b| b.session_id == session_id)
    }

    /// Remembers `binding` as the newest, replacing the session's previous
    /// one; when that makes 65, forgets the oldest binding without a live
    /// child (`is_live`).
    pub fn remember(
        &mut self,
        binding: Binding,
        is_live: impl Fn(&str) -> bool,
    ) -> Result<(), StoreFull> {
        self.entries.retain(|b| b.session_id != binding.session_id);
        if self.entries.len() >= BINDING_CAP {
            let Some(oldest) = self.entries.iter().position(|b| !is_live(&b.session_id)) else {
                return Err(StoreFull);
            };
            self.entries.remove(oldest);
        }
        self.entries.push(binding);
        Ok(())
    }

    /// Puts back what [`Bindings::get`] returned before a failed operation
    /// (or forgets the session when it had none).
    pub fn restore(&mut self, session_id: &str, previous: Option<Binding>) {
        self.entries.retain(|b| b.session_id != session_id);
        if let Some(binding) = previous {
            self.entries.push(binding);
        }
    }

    /// Forgets the session's binding.
    pub fn forget(&mut self, session_id: &str) -> Option<Binding> {
        let index = self
            .entries
            .iter()
            .position(|b| b.session_id == session_id)?;
        Some(self.entries.remove(index))
    }

    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no binding is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Why the revision file cannot be used.
#[derive(Debug)]
pub enum RevisionError {
    /// It exists but cannot be read, or is not what this shim writes.
    Unreadable(PathBuf, String),
    /// It cannot be written.
    Write(PathBuf, std::io::Error),
}

impl std::fmt::Display for RevisionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RevisionError::Unreadable(path, why) => write!(
                f,
                "the grant revision file {} is unusable ({why}); remove it to reset the revisions",
                crate::text::one_line(&path.display().to_string())
            ),
            RevisionError::Write(path, e) => write!(
                f,
                "cannot write the grant revision file {}: {e}",
                crate::text::one_line(&path.display().to_string())
            ),
        }
    }
}

impl std::error::Error for RevisionError {}

/// One session's persisted revision and when it was last raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    revision: u64,
    updated: u64,
}

/// The highest revision per session, mirrored in the revision file.
#[derive(Debug)]
pub struct Revisions {
    path: PathBuf,
    highest: BTreeMap<String, Entry>,
}

impl Revisions {
    /// Loads `<state_dir>/grant-revisions.json`; a missing file is empty.
    pub fn load(state_dir: &Path) -> Result<Revisions, RevisionError> {
        let path = state_dir.join(REVISIONS_FILE);
        let highest = match std::fs::read(&path) {
            Ok(bytes) => {
                parse(&bytes).map_err(|why| RevisionError::Unreadable(path.clone(), why))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(RevisionError::Unreadable(path, e.to_string())),
        };
        Ok(Revisions { path, highest })
    }

    /// The highest revision issued or accepted for `session_id` (0: none).
    pub fn highest(&self, session_id: &str) -> u64 {
        self.highest.get(session_id).map_or(0, |e| e.revision)
    }

    /// Number of sessions remembered.
    pub fn len(&self) -> usize {
        self.highest.len()
    }

    /// True when no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.highest.is_empty()
    }

    /// Raises the session's revision to `revision` (never lowers it) and
    /// makes the file durable.
    pub fn record(&mut self, session_id: &str, revision: u64) -> Result<(), RevisionError> {
        if self.highest(session_id) >= revision {
            return Ok(());
        }
        let mut next = self.highest.clone();
        let updated = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if !next.contains_key(session_id) && next.len() >= REVISION_CAP {
            let oldest = next
                .iter()
                .min_by_key(|(_, e)| e.updated)
                .map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                next.remove(&oldest);
            }
        }
        next.insert(session_id.to_owned(), Entry { revision, updated });
        write_atomically(&self.path, &render(&next))
            .map_err(|e| RevisionError::Write(self.path.clone(), e))?;
        self.highest = next;
        Ok(())
    }
}

/// `{"<session>": {"revision": n, "updated": unix seconds}, …}`.
fn parse(bytes: &[u8]) -> Result<BTreeMap<String, Entry>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(map) = value else {
        return Err("not a JSON object".into());
    };
    let mut out = BTreeMap::new();
    for (session, entry) in map {
        let revision = entry
            .get("revision")
            .and_then(serde_json::Value::as_u64)
            .filter(|r| *r >= 1)
            .ok_or_else(|| "a revision is not a positive integer".to_owned())?;
        let updated = entry
            .get("updated")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| "an update time is not an integer".to_owned())?;
        out.insert(session, Entry { revision, updated });
    }
    Ok(out)
}

fn render(map: &BTreeMap<String, Entry>) -> Vec<u8> {
    let object: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .map(|(s, e)| {
            (
                s.clone(),
                serde_json::json!({"revision": e.revision, "updated": e.updated}),
            )
        })
        .collect();
    let mut text = serde_json::to_string(&object).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text.into_bytes()
}

/// Creates the state directory (0700) when missing, then replaces the
/// file atomically (0600).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the revision file has no directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    crate::config::replace_file(path, bytes, 0o600)
}
