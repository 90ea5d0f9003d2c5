//! Remote directory browsing (CONTROL.md §4): the open browses of the
//! control connection, the opaque references and cursors they mint, the
//! virtual roots, and one listing page at a time.
//!
//! The platform can only name what this module minted: every token is 24
//! random bytes (never derived from a path), looked up by exact match, and
//! dies with its browse (five minutes, consumption by ATTACH, eviction, or a
//! control reconnect). A listing discloses directory names and canonical
//! paths only — never files, sizes, times, permissions or links — and never
//! more than one level. Nothing here writes to the filesystem.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustix::fs::{Access, AtFlags, FileType, Mode, OFlags};

use super::folder::{self, FolderError};
use super::names;
use crate::protocol::{DirectoryEntry, DirectoryListResponse};

/// Entries per page.
pub const PAGE_SIZE: usize = 200;
/// Entries examined per listing request.
pub const SCAN_CAP: usize = 1000;
/// References one browse may hold.
pub const REFERENCE_CAP: usize = 1200;
/// Cursors one browse keeps.
pub const CURSOR_CAP: usize = 32;
/// Browses open at once.
pub const BROWSE_CAP: usize = 8;
/// Virtual roots listed at most.
pub const ROOT_CAP: usize = 200;
/// Browse lifetime from creation, seconds.
pub const BROWSE_LIFETIME: f64 = 300.0;

/// The message of an unknown or expired browse or reference.
pub const REFERENCE_INVALID: &str = "The directory reference is invalid or expired";
/// The message of an unusable cursor.
pub const CURSOR_INVALID: &str = "The directory page cursor is invalid or expired";
/// A referenced folder that became a symbolic link.
pub const LINK_UNAVAILABLE: &str = "Symbolic links and reparse points cannot be browsed";
/// A referenced folder that is gone or unusable.
pub const NOT_ACCESSIBLE: &str = "The selected directory is not accessible";

/// Why a browse request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrowseError {
    /// The browse, its directory reference or its page cursor is unknown or
    /// expired; the message says which.
    ReferenceInvalid(&'static str),
    /// The picked directory is a link or cannot be read; the message says
    /// which.
    Unavailable(&'static str),
    /// No randomness is available to mint a token.
    Random,
}

/// What the virtual roots are discovered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootSources {
    /// The user's home directory.
    pub home: PathBuf,
    /// WSL2: also the drive mounts `/mnt/<letter>`.
    pub wsl: bool,
}

#[derive(Debug, Clone)]
struct Reference {
    path: PathBuf,
    name: String,
    text: String,
    parent: Option<String>,
    /// Device and inode when minted: a folder swapped since is not the one
    /// the user was shown.
    dev_ino: (u64, u64),
}

#[derive(Debug, Clone)]
struct Cursor {
    token: String,
    directory_ref: String,
    offset: usize,
}

#[derive(Debug)]
struct Browse {
    id: String,
    expires_at: f64,
    references: HashMap<String, Reference>,
    /// Least recently used first.
    cursors: Vec<Cursor>,
}

/// The browses of one control connection. Most recently used last.
#[derive(Debug, Default)]
pub struct Browser {
    browses: Vec<Browse>,
}

/// A resolved reference, for ATTACH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The re-checked folder.
    pub dir: folder::CanonicalDir,
}

impl Browser {
    /// No browses.
    pub fn new() -> Browser {
        Browser::default()
    }

    /// Forgets every browse (a control reconnect, §3.4).
    pub fn reset(&mut self) {
        self.browses.clear();
    }

    /// Number of open browses (after purging expired ones at `now`).
    pub fn open_browses(&mut self, now: f64) -> usize {
        self.purge(now);
        self.browses.len()
    }

    fn purge(&mut self, now: f64) {
        self.browses.retain(|b| now < b.expires_at);
    }

    /// §4.3: a new browse listing the virtual roots (discovered here; a
    /// caller holding a lock uses `virtual_roots` and
    /// [`Browser::start_with`]).
    pub fn start(
        &mut self,
        now: f64,
        sources: &RootSources,
    ) -> Result<DirectoryListResponse, BrowseError> {
        self.start_with(now, virtual_roots(sources))
    }

    /// §4.3 with the roots already discovered.
    pub fn start_with(
        &mut self,
        now: f64,
        roots: Vec<folder::CanonicalDir>,
    ) -> Result<DirectoryListResponse, BrowseError> {
        self.purge(now);
        while self.browses.len() >= BROWSE_CAP {
            self.browses.remove(0);
        }
        let mut browse = Browse {
            id: token()?,
            expires_at: now + BROWSE_LIFETIME,
            references: HashMap::new(),
            cursors: Vec::new(),
        };
        let mut entries = Vec::new();
        for dir in roots {
            let reference = Reference {
                name: last_component(&dir.text),
                text: dir.text.clone(),
                path: dir.path,
                parent: None,
                dev_ino: dir.dev_ino,
            };
            let token = mint(&mut browse, reference.clone())?;
            entries.push(DirectoryEntry {
                directory_ref: token,
                name: reference.name,
                path: reference.text,
            });
        }
        let response = DirectoryListResponse {
            browse_id: browse.id.clone(),
            current: None,
            parent_ref: None,
            entries,
            next_cursor: None,
            truncated: false,
            expires_at: browse.expires_at,
        };
        self.browses.push(browse);
        Ok(response)
    }

    /// §4.5, all steps (a caller holding a lock uses [`Browser::plan`],
    /// [`Listing::scan`] and [`Browser::finish`] so that the scan runs
    /// without it).
    pub fn list(
        &mut self,
        now: f64,
        browse_id: &str,
        directory_ref: &str,
        cursor: Option<&str>,
    ) -> Result<DirectoryListResponse, BrowseError> {
        let plan = self.plan(now, browse_id, directory_ref, cursor)?;
        let listing = plan.scan()?;
        self.finish(now, listing)
    }

    /// §4.5 steps 1–4: the lookups, under the caller's lock.
    pub fn plan(
        &mut self,
        now: f64,
        browse_id: &str,
        directory_ref: &str,
        cursor: Option<&str>,
    ) -> Result<Plan, BrowseError> {
        self.purge(now);
        let index = self.find(browse_id)?;
        let browse = &mut self.browses[index];
        let current = browse
            .references
            .get(directory_ref)
            .cloned()
            .ok_or(BrowseError::ReferenceInvalid(REFERENCE_INVALID))?;
        let offset = match cursor {
            None => 0,
            Some(token) => {
                let position = browse
                    .cursors
                    .iter()
                    .position(|c| c.token == token && c.directory_ref == directory_ref)
                    .ok_or(BrowseError::ReferenceInvalid(CURSOR_INVALID))?;
                let used = browse.cursors.remove(position);
                let offset = used.offset;
                browse.cursors.push(used);
                offset
            }
        };
        Ok(Plan {
            browse_id: browse_id.to_owned(),
            directory_ref: directory_ref.to_owned(),
            current,
            offset,
        })
    }

    /// §4.5 steps 9–13 for a scanned listing; the browse must still exist.
    pub fn finish(
        &mut self,
        now: f64,
        listing: Listing,
    ) -> Result<DirectoryListResponse, BrowseError> {
        self.purge(now);
        let index = self.find(&listing.plan.browse_id)?;
        let browse = &mut self.browses[index];
        let Listing {
            plan,
            current,
            children,
            mut truncated,
        } = listing;
        let offset = plan.offset;
        let page_end = offset.saturating_add(PAGE_SIZE).min(children.len());
        let mut more = children.len() > offset.saturating_add(PAGE_SIZE);
        let mut entries = Vec::new();
        for child in children
            .iter()
            .skip(offset)
            .take(page_end.saturating_sub(offset))
        {
            if browse.references.len() >= REFERENCE_CAP {
                truncated = true;
                more = false;
                break;
            }
            let mut reference = child.clone();
            reference.parent = Some(plan.directory_ref.clone());
            let token = mint(browse, reference)?;
            entries.push(DirectoryEntry {
                directory_ref: token,
                name: child.name.clone(),
                path: child.text.clone(),
            });
        }
        let next_cursor = if more {
            Some(cursor_for(browse, &plan.directory_ref, offset + PAGE_SIZE)?)
        } else {
            None
        };
        let response = DirectoryListResponse {
            browse_id: browse.id.clone(),
            current: Some(DirectoryEntry {
                directory_ref: plan.directory_ref.clone(),
                name: last_component(&current.text),
                path: current.text.clone(),
            }),
            parent_ref: plan.current.parent.clone(),
            entries,
            next_cursor,
            truncated,
            expires_at: browse.expires_at,
        };
        self.touch(index);
        Ok(response)
    }

    /// §5 step 2: the folder a reference names, re-checked; the browse is
    /// not consumed. (Under a lock, use [`Browser::lookup`] and
    /// [`Reference::recheck`] separately.)
    pub fn resolve(
        &mut self,
        now: f64,
        browse_id: &str,
        directory_ref: &str,
    ) -> Result<Resolved, BrowseError> {
        let found = self.lookup(now, browse_id, directory_ref)?;
        Ok(Resolved {
            dir: found.recheck()?,
        })
    }

    /// The reference `directory_ref` of `browse_id`, without touching the
    /// filesystem.
    pub fn lookup(
        &mut self,
        now: f64,
        browse_id: &str,
        directory_ref: &str,
    ) -> Result<Found, BrowseError> {
        self.purge(now);
        let index = self.find(browse_id)?;
        self.browses[index]
            .references
            .get(directory_ref)
            .cloned()
            .map(Found)
            .ok_or(BrowseError::ReferenceInvalid(REFERENCE_INVALID))
    }

    /// §5 step 3: the whole browse ends.
    pub fn consume(&mut self, browse_id: &str) {
        self.browses.retain(|b| b.id != browse_id);
    }

    fn find(&self, browse_id: &str) -> Result<usize, BrowseError> {
        self.browses
            .iter()
            .position(|b| b.id == browse_id)
            .ok_or(BrowseError::ReferenceInvalid(REFERENCE_INVALID))
    }

    fn touch(&mut self, index: usize) {
        let browse = self.browses.remove(index);
        self.browses.push(browse);
    }
}

/// What [`Browser::plan`] looked up: enough to scan without the lock.
#[derive(Debug, Clone)]
pub struct Plan {
    browse_id: String,
    directory_ref: String,
    current: Reference,
    offset: usize,
}

/// A scanned directory, ready for [`Browser::finish`].
#[derive(Debug)]
pub struct Listing {
    plan: Plan,
    current: folder::CanonicalDir,
    children: Vec<Reference>,
    truncated: bool,
}

impl Plan {
    /// §4.5 steps 5–8: re-check the folder (it must still be the one that
    /// was minted), scan and sort. Touches the filesystem; holds no lock.
    pub fn scan(self) -> Result<Listing, BrowseError> {
        let current = recheck(&self.current)?;
        let (mut children, truncated) = scan(&current.path)?;
        names::sort_by_folded(&mut children, |c| c.name.as_str());
        Ok(Listing {
            plan: self,
            current,
            children,
            truncated,
        })
    }
}

/// A reference looked up for ATTACH.
#[derive(Debug, Clone)]
pub struct Found(Reference);

impl Found {
    /// §4.7 again, and the folder must still be the one that was minted.
    pub fn recheck(&self) -> Result<folder::CanonicalDir, BrowseError> {
        recheck(&self.0)
    }
}

/// 24 random bytes as 32 base64url characters (§4.9).
fn token() -> Result<String, BrowseError> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|_| BrowseError::Random)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn mint(browse: &mut Browse, reference: Reference) -> Result<String, BrowseError> {
    loop {
        let t = token()?;
        // A collision of 192-bit tokens will not happen; if it did, a fresh
        // token keeps every reference unambiguous.
        if !browse.references.contains_key(&t) && t != browse.id {
            browse.references.insert(t.clone(), reference);
            return Ok(t);
        }
    }
}

/// The cursor for `(directory_ref, offset)`, reused when it exists.
fn cursor_for(
    browse: &mut Browse,
    directory_ref: &str,
    offset: usize,
) -> Result<String, BrowseError> {
    if let Some(position) = browse
        .cursors
        .iter()
        .position(|c| c.directory_ref == directory_ref && c.offset == offset)
    {
        let cursor = browse.cursors.remove(position);
        let token = cursor.token.clone();
        browse.cursors.push(cursor);
        return Ok(token);
    }
    while browse.cursors.len() >= CURSOR_CAP {
        browse.cursors.remove(0);
    }
    let token = token()?;
    browse.cursors.push(Cursor {
        token: token.clone(),
        directory_ref: directory_ref.to_owned(),
        offset,
    });
    Ok(token)
}

/// §4.5 step 5, plus: the folder must still be the one that was minted
/// (same canonical path, same device and inode).
fn recheck(reference: &Reference) -> Result<folder::CanonicalDir, BrowseError> {
    let dir = folder::canonical_accessible(&reference.path).map_err(|e| match e {
        FolderError::Symlink => BrowseError::Unavailable(LINK_UNAVAILABLE),
        FolderError::Unavailable => BrowseError::Unavailable(NOT_ACCESSIBLE),
    })?;
    if dir.path != reference.path || dir.dev_ino != reference.dev_ino {
        return Err(BrowseError::Unavailable(NOT_ACCESSIBLE));
    }
    Ok(dir)
}

/// §4.5 steps 6–7: the directory's qualifying subdirectories, in scan
/// order, and whether the scan cap cut the listing short.
fn scan(dir: &Path) -> Result<(Vec<Reference>, bool), BrowseError> {
    let unavailable = BrowseError::Unavailable(NOT_ACCESSIBLE);
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| unavailable.clone())?;
    let reader = rustix::fs::Dir::read_from(&fd).map_err(|_| unavailable.clone())?;
    let mut kept = Vec::new();
    let mut counted = 0usize;
    let mut truncated = false;
    for entry in reader {
        let entry = entry.map_err(|_| unavailable.clone())?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if counted == SCAN_CAP {
            truncated = true;
            break;
        }
        counted += 1;
        if let Some(reference) = qualifying_child(&fd, dir, name) {
            kept.push(reference);
        }
    }
    Ok((kept, truncated))
}

/// §4.6 for one entry; `None` skips it (any error skips it too).
fn qualifying_child(
    parent_fd: &std::os::fd::OwnedFd,
    parent: &Path,
    name: &[u8],
) -> Option<Reference> {
    let text_name = std::str::from_utf8(name).ok()?;
    if !names::is_wire_name(text_name) {
        return None;
    }
    let st = rustix::fs::statat(
        parent_fd,
        OsStr::from_bytes(name),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return None;
    }
    let dev_ino = crate::jail::identity(&st);
    rustix::fs::accessat(
        parent_fd,
        OsStr::from_bytes(name),
        Access::READ_OK | Access::WRITE_OK | Access::EXEC_OK,
        AtFlags::empty(),
    )
    .ok()?;
    let path = parent.join(OsStr::from_bytes(name));
    let text = path.to_str()?.to_owned();
    if text.chars().count() > names::MAX_PATH_CHARS {
        return None;
    }
    Some(Reference {
        path,
        name: text_name.to_owned(),
        text,
        parent: None,
        dev_ino,
    })
}

/// The last component of a canonical path (the whole path when it has
/// none).
fn last_component(text: &str) -> String {
    Path::new(text)
        .file_name()
        .and_then(|n| n.to_str())
        .map_or_else(|| text.to_owned(), str::to_owned)
}

/// §4.4 on Linux and WSL2: home, then the user's mounts; each candidate
/// checked, de-duplicated, special roots excluded, at most 200.
pub fn virtual_roots(sources: &RootSources) -> Vec<folder::CanonicalDir> {
    let mut candidates = vec![sources.home.clone()];
    if sources.wsl {
        candidates.extend(
            real_subdirectories(Path::new("/mnt"))
                .into_iter()
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_alphabetic())
                }),
        );
    }
    if let Some(user) = sources.home.file_name() {
        candidates.extend(real_subdirectories(&Path::new("/media").join(user)));
        candidates.extend(real_subdirectories(&Path::new("/run/media").join(user)));
    }
    let mut roots: Vec<folder::CanonicalDir> = Vec::new();
    for candidate in candidates {
        if roots.len() >= ROOT_CAP {
            break;
        }
        let Ok(dir) = folder::canonical_accessible(&candidate) else {
            continue;
        };
        if roots.iter().any(|r| r.text == dir.text) {
            continue;
        }
        if ["/dev", "/proc", "/sys", "/run"].contains(&dir.text.as_str()) {
            continue;
        }
        let name = last_component(&dir.text);
        if name.chars().count() > names::MAX_NAME_CHARS
            || dir.text.chars().count() > names::MAX_PATH_CHARS
        {
            continue;
        }
        roots.push(dir);
    }
    roots
}

/// "Immediate real subdirectories" of `dir` (§4.4): no links, directories
/// without following links, valid wire names; at most 1000 entries scanned
/// and 200 kept. An unreadable `dir` contributes nothing.
fn real_subdirectories(dir: &Path) -> Vec<PathBuf> {
    let Ok(fd) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Ok(reader) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut counted = 0usize;
    for entry in reader {
        let Ok(entry) = entry else {
            break;
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        counted += 1;
        if counted > SCAN_CAP || found.len() >= ROOT_CAP {
            break;
        }
        let Ok(text) = std::str::from_utf8(name) else {
            continue;
        };
        if !names::is_wire_name(text) {
            continue;
        }
        let is_dir = rustix::fs::statat(&fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        if is_dir {
            found.push(dir.join(text));
        }
    }
    found
}
