//! The shim's own locations: the directories of its configuration file, its
//! state, its audit log, its secret store (`tokens.enc`), its data and its
//! passphrase file. They are resolved at start and held open, and are then
//! recognised by identity (device and inode), wherever they are renamed or
//! mounted later: no session root may be, contain or lie inside one, and no
//! request path may end in or pass through one. A location that does not
//! exist yet is guarded by its name in its nearest existing ancestor until
//! it is first found to exist, and is held by identity from then on. The
//! shim's own files are known by identity too, so a hard link to one below
//! a root is refused like the file itself.
//!
//! This module only opens directories with `O_PATH` and looks at them. It
//! never creates or changes anything and never compares path strings to
//! decide; below a root it only stats, never following a final link, and
//! leaves opening to enforcement.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, StatxFlags};

use super::identity;
use crate::text::one_line;

/// Most `..` steps from a protected directory up to `/`; deeper trees are
/// not real locations of this shim and stop the walk there.
const MAX_DEPTH: usize = 4096;

/// `(st_dev, st_ino)`.
type Id = (u64, u64);

/// One protected location as it was found at start.
#[derive(Debug)]
struct Place {
    /// What it is, for messages ("the state directory").
    what: &'static str,
    /// Where it was at start, for messages.
    path: PathBuf,
    /// The directory itself, or its nearest existing ancestor when it did
    /// not exist at start (held open so its live position can be walked).
    anchor: OwnedFd,
    anchor_id: Id,
    /// The components below `anchor` that did not exist at start; empty
    /// when the location existed.
    missing: Vec<OsString>,
    /// A location missing at start, held from the first time it is found
    /// to exist (the shim creates its directories while starting).
    created: OnceLock<(OwnedFd, Id)>,
    /// The location is the home directory or one of its ancestors (a
    /// configuration file kept directly in home): no root may be or hold
    /// it, but a root below it cannot reach the shim's files there, so
    /// lying inside it is no conflict.
    above_home: bool,
}

impl Place {
    /// The identity of the location itself, once it exists. A location
    /// missing at start is looked for below its anchor (following links,
    /// as the shim does when it uses it) and pinned when found, so a later
    /// rename cannot take it out of sight.
    fn current_id(&self) -> Option<Id> {
        if self.missing.is_empty() {
            return Some(self.anchor_id);
        }
        if let Some((_, id)) = self.created.get() {
            return Some(*id);
        }
        let below: PathBuf = self.missing.iter().collect();
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.anchor, &below, flags, Mode::empty()).ok()?;
        let id = identity(&rustix::fs::fstat(&fd).ok()?);
        Some(self.created.get_or_init(|| (fd, id)).1)
    }

    /// True when the location lies in the tree of `root_id`: where it is
    /// now, or (missing at start) where it would be created.
    fn lies_below(&self, root_id: Id) -> bool {
        lineage(self.anchor.as_fd()).contains(&root_id)
            || self
                .created
                .get()
                .is_some_and(|(fd, _)| lineage(fd.as_fd()).contains(&root_id))
    }
}

/// One of the shim's own files, recorded once it has been opened at start.
///
/// It is recognised by the identity its path has when a request is checked
/// (the shim replaces some of its files whole, the token store among them),
/// and by every identity it was seen with when recorded: a file the shim
/// replaced may survive under another name, with the secrets it held. A
/// replaced file's inode number is free for any new file, though, below a
/// root too, so an identity seen earlier only counts together with its
/// birth time where the filesystem keeps one.
#[derive(Debug)]
struct OwnFile {
    /// What it is, for messages ("the token store").
    what: &'static str,
    path: PathBuf,
    seen: Vec<(Id, Option<Birth>)>,
}

/// A file's birth time (`statx`), `(seconds, nanoseconds)`.
type Birth = (i64, u32);

/// The birth time of `path` below `dir`, not following a final link.
fn birth_at(dir: BorrowedFd<'_>, path: &[u8]) -> Option<Birth> {
    let stx = rustix::fs::statx(dir, path, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::BTIME).ok()?;
    StatxFlags::from_bits_retain(stx.stx_mask)
        .contains(StatxFlags::BTIME)
        .then_some((stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec))
}

/// The birth time of `path`, following links as the shim does.
fn birth_of(path: &Path) -> Option<Birth> {
    let stx = rustix::fs::statx(rustix::fs::CWD, path, AtFlags::empty(), StatxFlags::BTIME).ok()?;
    StatxFlags::from_bits_retain(stx.stx_mask)
        .contains(StatxFlags::BTIME)
        .then_some((stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec))
}

/// How a root relates to a protected location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The root is the location.
    Is,
    /// The location lies inside the root (or would, once created).
    Contains,
    /// The root lies inside the location.
    Inside,
}

/// Why a folder cannot be a root: it is, holds or lies inside one of the
/// shim's own locations. `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The refused root.
    pub root: PathBuf,
    /// How it relates to the location.
    pub relation: Relation,
    /// What the location is.
    pub what: &'static str,
    /// Where the location was at start.
    pub location: PathBuf,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let relation = match self.relation {
            Relation::Is => "is",
            Relation::Contains => "contains",
            Relation::Inside => "lies inside",
        };
        write!(
            f,
            "allowed_root {} {relation} the shim's {} {}; choose a folder that holds none of the shim's own files",
            one_line(&self.root.display().to_string()),
            self.what,
            one_line(&self.location.display().to_string()),
        )
    }
}

impl std::error::Error for Conflict {}

/// The shim's own locations and files; cheap to clone (clones share what
/// is pinned later), empty by default (tests and tools that serve no
/// platform).
#[derive(Debug, Clone, Default)]
pub struct ProtectedLocations {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    places: Vec<Place>,
    files: RwLock<Vec<OwnFile>>,
}

impl ProtectedLocations {
    /// Resolves each `(what, directory)` now: the directory is opened
    /// (following links, as the shim itself does when it uses it), or, when
    /// it does not exist yet, its nearest existing ancestor is. Relative
    /// paths are ignored (configuration makes every path absolute); a
    /// location met twice (the state and secret store directories are often
    /// one) is kept once.
    pub fn resolve<'a>(
        locations: impl IntoIterator<Item = (&'static str, &'a Path)>,
        home: &Path,
    ) -> ProtectedLocations {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let home_line = rustix::fs::open(home, flags, Mode::empty())
            .map(|fd| lineage(fd.as_fd()))
            .unwrap_or_default();
        let mut places: Vec<Place> = Vec::new();
        for (what, path) in locations {
            if !path.is_absolute() {
                continue;
            }
            let Some(mut place) = locate(what, path) else {
                continue;
            };
            let same = |p: &Place| p.anchor_id == place.anchor_id && p.missing == place.missing;
            if places.iter().any(same) {
                continue;
            }
            place.above_home = place.missing.is_empty() && home_line.contains(&place.anchor_id);
            places.push(place);
        }
        ProtectedLocations {
            shared: Arc::new(Shared {
                places,
                files: RwLock::default(),
            }),
        }
    }

    /// Pins every location missing at start that exists by now: from here
    /// on it is recognised by identity wherever it is moved. Called once the
    /// shim has created its own directories, and after it creates one later.
    pub fn pin_created(&self) {
        for place in self.places() {
            let _ = place.current_id();
        }
    }

    /// Adds the shim's own files, as they are now (a link is followed, as
    /// the shim follows it), to those recorded before: start records them
    /// before and after it opens them, since opening may replace a file. A
    /// request whose target is one of them, by any name, is refused.
    pub fn record_files<'a>(&self, files: impl IntoIterator<Item = (&'static str, &'a Path)>) {
        let mut known = self
            .shared
            .files
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (what, path) in files {
            let index = match known.iter().position(|f| f.path == path) {
                Some(index) => index,
                None => {
                    known.push(OwnFile {
                        what,
                        path: path.to_path_buf(),
                        seen: Vec::new(),
                    });
                    known.len() - 1
                }
            };
            let Ok(st) = rustix::fs::stat(path) else {
                continue;
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                continue;
            }
            let seen = (identity(&st), birth_of(path));
            if let Some(file) = known.get_mut(index) {
                if !file.seen.contains(&seen) {
                    file.seen.push(seen);
                }
            }
        }
    }

    fn places(&self) -> &[Place] {
        &self.shared.places
    }

    /// The recorded file that the regular file of identity `id` is, or
    /// was when recorded; `birth` tells its birth time when asked.
    fn own_file(&self, id: Id, birth: impl Fn() -> Option<Birth>) -> Option<&'static str> {
        let known = self
            .shared
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut asked: Option<Option<Birth>> = None;
        for file in known.iter() {
            let was = file.seen.iter().any(|(seen, born)| {
                *seen == id
                    && match (born, *asked.get_or_insert_with(&birth)) {
                        (Some(then), Some(now)) => *then == now,
                        // Without birth times the identity alone decides.
                        _ => true,
                    }
            });
            let is = || {
                rustix::fs::stat(&file.path).is_ok_and(|st| {
                    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                        && identity(&st) == id
                })
            };
            if was || is() {
                return Some(file.what);
            }
        }
        None
    }

    fn has_files(&self) -> bool {
        !self
            .shared
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// True when nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.places().is_empty() && !self.has_files()
    }

    /// Refuses `root` (a canonical directory) when it is, contains or lies
    /// inside a protected location, as they are placed now. A root that
    /// cannot be opened passes: its own checks report it.
    pub fn check_root(&self, root: &Path) -> Result<(), Conflict> {
        if self.places().is_empty() {
            return Ok(());
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let Ok(fd) = rustix::fs::open(root, flags, Mode::empty()) else {
            return Ok(());
        };
        let root_line = lineage(fd.as_fd());
        let Some(&root_id) = root_line.first() else {
            return Ok(());
        };
        let relation = |place: &Place| {
            if let Some(id) = place.current_id() {
                if id == root_id {
                    return Some(Relation::Is);
                }
                if root_line.contains(&id) && !place.above_home {
                    return Some(Relation::Inside);
                }
            }
            place.lies_below(root_id).then_some(Relation::Contains)
        };
        // The closest relation is the one named: a root that is the audit
        // directory and also holds the state directory "is" the former.
        let found = self
            .places()
            .iter()
            .filter_map(|place| relation(place).map(|r| (r, place)))
            .min_by_key(|(r, _)| *r != Relation::Is);
        match found {
            None => Ok(()),
            Some((relation, place)) => Err(Conflict {
                root: root.to_owned(),
                relation,
                what: place.what,
                location: place.path.clone(),
            }),
        }
    }

    /// True when `st` is a protected directory (for walks that open
    /// directories themselves).
    pub fn is_protected(&self, st: &Stat) -> bool {
        is_dir(st) && {
            let id = identity(st);
            self.places().iter().any(|p| p.current_id() == Some(id))
        }
    }

    /// The protected location `components` end in or pass through below
    /// `root` (whose identity is `root_id`), or the shim's own file they end
    /// in, if any. Each prefix is looked at without following a final link;
    /// the walk stops at the first component that does not exist or is no
    /// directory. The components are a decision's canonical remainder, free
    /// of links when decided; one swapped in since is refused by
    /// enforcement, which never follows one.
    pub fn reached(
        &self,
        root: BorrowedFd<'_>,
        root_id: (u64, u64),
        components: &[OsString],
    ) -> Option<&'static str> {
        if self.is_empty() {
            return None;
        }
        let ids: Vec<(Option<Id>, &Place)> =
            self.places().iter().map(|p| (p.current_id(), p)).collect();
        let mut dir_id = root_id;
        let mut prefix: Vec<u8> = Vec::new();
        for (n, name) in components.iter().enumerate() {
            // A location missing at start is also reached by its name in
            // its anchor, where the shim would create it.
            if let Some((_, place)) = ids.iter().find(|(_, p)| {
                p.anchor_id == dir_id && p.missing.first().map(OsString::as_os_str) == Some(name)
            }) {
                return Some(place.what);
            }
            if !prefix.is_empty() {
                prefix.push(b'/');
            }
            prefix.extend_from_slice(name.as_bytes());
            let st = rustix::fs::statat(root, prefix.as_slice(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
            if !is_dir(&st) {
                let last = n + 1 == components.len();
                let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
                let id = identity(&st);
                let birth = || birth_at(root, prefix.as_slice());
                return (last && regular)
                    .then(|| self.own_file(id, birth))
                    .flatten();
            }
            dir_id = identity(&st);
            if let Some((_, place)) = ids.iter().find(|(id, _)| *id == Some(dir_id)) {
                return Some(place.what);
            }
        }
        None
    }
}

fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// Opens `path` or its nearest existing ancestor.
fn locate(what: &'static str, path: &Path) -> Option<Place> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut missing: Vec<OsString> = Vec::new();
    for candidate in path.ancestors() {
        if let Ok(fd) = rustix::fs::open(candidate, flags, Mode::empty()) {
            let st = rustix::fs::fstat(&fd).ok()?;
            missing.reverse();
            return Some(Place {
                what,
                path: path.to_owned(),
                anchor: fd,
                anchor_id: identity(&st),
                missing,
                created: OnceLock::new(),
                above_home: false,
            });
        }
        if let Some(name) = candidate.file_name().filter(|m| !m.as_bytes().is_empty()) {
            missing.push(name.to_owned());
        }
    }
    None
}

/// The identities of `dir` and of each directory above it up to `/`,
/// nearest first, found by walking `..` from the descriptor (so a directory
/// renamed since it was opened is placed where it is now).
fn lineage(dir: BorrowedFd<'_>) -> Vec<Id> {
    let mut line = Vec::new();
    let Ok(st) = rustix::fs::fstat(dir) else {
        return line;
    };
    line.push(identity(&st));
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(mut cur) = rustix::fs::openat(dir, "..", flags, Mode::empty()) else {
        return line;
    };
    for _ in 0..MAX_DEPTH {
        let Ok(st) = rustix::fs::fstat(&cur) else {
            break;
        };
        let id = identity(&st);
        // `/..` is `/` itself.
        if line.last() == Some(&id) {
            break;
        }
        line.push(id);
        match rustix::fs::openat(&cur, "..", flags, Mode::empty()) {
            Ok(next) => cur = next,
            Err(_) => break,
        }
    }
    line
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fixture() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        (tmp, base)
    }

    #[test]
    fn a_root_that_is_holds_or_lies_inside_a_location_is_refused() {
        let (_tmp, base) = fixture();
        let state = base.join("a/state");
        std::fs::create_dir_all(state.join("inner")).unwrap();
        std::fs::create_dir_all(base.join("b")).unwrap();
        let protected = ProtectedLocations::resolve([("state directory", state.as_path())], &base);
        let relation = |p: &Path| protected.check_root(p).map_err(|c| c.relation);
        assert_eq!(relation(&state), Err(Relation::Is));
        assert_eq!(relation(&base.join("a")), Err(Relation::Contains));
        assert_eq!(relation(&state.join("inner")), Err(Relation::Inside));
        assert_eq!(relation(&base.join("b")), Ok(()));
    }

    #[test]
    fn a_missing_location_protects_where_it_would_be_created() {
        let (_tmp, base) = fixture();
        std::fs::create_dir_all(base.join("cfg/other")).unwrap();
        let config = base.join("cfg/app");
        let protected =
            ProtectedLocations::resolve([("configuration directory", config.as_path())], &base);
        let cfg = base.join("cfg");
        assert_eq!(
            protected.check_root(&cfg).map_err(|c| c.relation),
            Err(Relation::Contains)
        );
        assert_eq!(protected.check_root(&base.join("cfg/other")), Ok(()));
        let root = rustix::fs::open(&base, OFlags::PATH, Mode::empty()).unwrap();
        let id = identity(&rustix::fs::fstat(&root).unwrap());
        let path = [OsString::from("cfg"), OsString::from("app")];
        assert_eq!(
            protected.reached(root.as_fd(), id, &path),
            Some("configuration directory")
        );
        assert_eq!(protected.reached(root.as_fd(), id, &path[..1]), None);
    }

    #[test]
    fn a_location_that_is_home_refuses_only_home_and_above() {
        let (_tmp, base) = fixture();
        let home = base.join("home");
        std::fs::create_dir_all(home.join("project")).unwrap();
        let protected = ProtectedLocations::resolve(
            [
                ("configuration directory", home.as_path()),
                ("state directory", home.as_path()),
            ],
            &home,
        );
        assert_eq!(protected.places().len(), 1);
        assert_eq!(protected.check_root(&home.join("project")), Ok(()));
        assert_eq!(
            protected.check_root(&home).map_err(|c| c.relation),
            Err(Relation::Is)
        );
        assert_eq!(
            protected.check_root(&base).map_err(|c| c.relation),
            Err(Relation::Contains)
        );
    }

    #[test]
    fn a_location_created_after_start_is_held_by_identity_once_found() {
        let (_tmp, base) = fixture();
        std::fs::create_dir_all(base.join("root")).unwrap();
        let logs = base.join("logs");
        let state = logs.join("app");
        let protected = ProtectedLocations::resolve(
            [
                ("audit log directory", logs.as_path()),
                ("state directory", state.as_path()),
            ],
            &base,
        );
        assert_eq!(protected.places().len(), 2);
        std::fs::create_dir_all(&state).unwrap();
        protected.pin_created();
        // The inner location alone, moved away from where it was created.
        std::fs::rename(&state, base.join("root/moved")).unwrap();
        let root = base.join("root");
        assert_eq!(
            protected.check_root(&root).map_err(|c| c.relation),
            Err(Relation::Contains)
        );
        let fd = rustix::fs::open(&root, OFlags::PATH, Mode::empty()).unwrap();
        let id = identity(&rustix::fs::fstat(&fd).unwrap());
        assert_eq!(
            protected.reached(fd.as_fd(), id, &[OsString::from("moved")]),
            Some("state directory")
        );
    }

    #[test]
    fn a_hard_link_to_an_own_file_is_reached() {
        let (_tmp, base) = fixture();
        std::fs::create_dir_all(base.join("root")).unwrap();
        let tokens = base.join("tokens.enc");
        std::fs::write(&tokens, "secret").unwrap();
        std::fs::write(base.join("root/plain"), "plain").unwrap();
        std::fs::hard_link(&tokens, base.join("root/innocent")).unwrap();
        let protected = ProtectedLocations::default();
        protected.record_files([("token store", tokens.as_path())]);
        let fd = rustix::fs::open(base.join("root"), OFlags::PATH, Mode::empty()).unwrap();
        let id = identity(&rustix::fs::fstat(&fd).unwrap());
        let reached = |name: &str| protected.reached(fd.as_fd(), id, &[OsString::from(name)]);
        assert_eq!(reached("innocent"), Some("token store"));
        assert_eq!(reached("plain"), None);
    }

    #[test]
    fn an_own_file_is_known_as_it_is_now_and_as_it_was_recorded() {
        let (_tmp, base) = fixture();
        std::fs::create_dir_all(base.join("root")).unwrap();
        let tokens = base.join("tokens.enc");
        std::fs::write(&tokens, "old").unwrap();
        let protected = ProtectedLocations::default();
        protected.record_files([("token store", tokens.as_path())]);
        // The old file survives under another name; the store is replaced
        // whole, as the shim rewrites it.
        std::fs::hard_link(&tokens, base.join("root/old")).unwrap();
        std::fs::write(base.join("tokens.new"), "new").unwrap();
        std::fs::rename(base.join("tokens.new"), &tokens).unwrap();
        std::fs::hard_link(&tokens, base.join("root/new")).unwrap();
        std::fs::write(base.join("root/plain"), "plain").unwrap();
        let fd = rustix::fs::open(base.join("root"), OFlags::PATH, Mode::empty()).unwrap();
        let id = identity(&rustix::fs::fstat(&fd).unwrap());
        let reached = |name: &str| protected.reached(fd.as_fd(), id, &[OsString::from(name)]);
        assert_eq!(reached("new"), Some("token store"));
        assert_eq!(reached("old"), Some("token store"));
        assert_eq!(reached("plain"), None);
    }

    #[test]
    fn a_recorded_identity_with_another_birth_time_is_not_an_own_file() {
        let (_tmp, base) = fixture();
        let tokens = base.join("tokens.enc");
        std::fs::write(&tokens, "old").unwrap();
        let protected = ProtectedLocations::default();
        protected.record_files([("token store", tokens.as_path())]);
        let st = rustix::fs::stat(&tokens).unwrap();
        let id = identity(&st);
        let Some(born) = birth_of(&tokens) else {
            // Without birth times the identity alone decides.
            assert_eq!(protected.own_file(id, || None), Some("token store"));
            return;
        };
        // The store replaced, its old inode number reused by a new file
        // (simulated: the same number with a later birth time).
        std::fs::write(base.join("tokens.new"), "new").unwrap();
        std::fs::rename(base.join("tokens.new"), &tokens).unwrap();
        let later = (born.0 + 1, born.1);
        assert_eq!(protected.own_file(id, || Some(later)), None);
        assert_eq!(protected.own_file(id, || Some(born)), Some("token store"));
    }

    #[test]
    fn a_renamed_location_is_still_recognised() {
        let (_tmp, base) = fixture();
        let state = base.join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(base.join("root/sub")).unwrap();
        let protected = ProtectedLocations::resolve([("state directory", state.as_path())], &base);
        let root = base.join("root");
        assert_eq!(protected.check_root(&root), Ok(()));
        std::fs::rename(&state, root.join("sub/moved")).unwrap();
        assert_eq!(
            protected.check_root(&root).map_err(|c| c.relation),
            Err(Relation::Contains)
        );
        let fd = rustix::fs::open(&root, OFlags::PATH, Mode::empty()).unwrap();
        let id = identity(&rustix::fs::fstat(&fd).unwrap());
        let path = [OsString::from("sub"), OsString::from("moved")];
        assert_eq!(
            protected.reached(fd.as_fd(), id, &path),
            Some("state directory")
        );
    }
}
