//! `FILE_LIST` (FILES.md §4): the entries of a directory, optionally of its
//! whole tree, in a deterministic order (bytewise by name, pre-order).
//!
//! Memory stays proportional to `max_entries` whatever the directory size:
//! each directory level keeps only the smallest `remaining + 1` candidate
//! names of one scan (a bounded heap) and rescans past the last name it
//! handled when it needs more. Descent uses `openat(O_NOFOLLOW|O_DIRECTORY)`
//! relative to the parent's descriptor, so a symlink is never entered and the
//! walk never leaves the tree it started in.

use std::collections::BinaryHeap;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use serde_json::{Value, json};

use super::glob::Pattern;
use super::stat::mtime;
use super::{FileContext, FileError, FileOutcome, JailedError, Step, jailed, os_error};
use crate::audit::Details;
use crate::jail::EnforceError;
use crate::protocol::{FileList, FileListEntry, FileListResponse, Message, MessageType};

/// Largest honoured `max_entries`; larger requests are clamped.
pub const MAX_ENTRIES_CAP: u64 = 100_000;
/// Deepest directory level a recursive listing descends to.
pub const MAX_DEPTH: usize = 64;
/// Directory entries examined (across all scans) before a listing stops.
pub const MAX_EXAMINED: u64 = 100_000;

/// Handles one `FILE_LIST`.
pub fn list(ctx: &FileContext<'_>, req: &FileList) -> FileOutcome {
    let mut shown = None;
    let mut returned = 0usize;
    let result = jailed(ctx.jail, &req.path, |d| {
        shown = Some(d.resolved.clone());
        if d.looped {
            return Err(Step::Fail(FileError::not_found(&d.resolved)));
        }
        let fd = match ctx.jail.open_dir(&d.remainder) {
            Ok(fd) => fd,
            Err(EnforceError::NotFound) => {
                // A non-directory at the path answers "not a directory".
                return Err(
                    match ctx.jail.open(&d.remainder, OFlags::PATH, Mode::empty()) {
                        Ok(_) => Step::Fail(FileError::internal(format!(
                            "{} is not a directory",
                            d.resolved
                        ))),
                        Err(e) => e.into(),
                    },
                );
            }
            Err(e) => return Err(e.into()),
        };
        if req.max_entries < 1 {
            return Err(Step::Fail(FileError::internal("max_entries must be >= 1")));
        }
        let max = u64::try_from(req.max_entries)
            .unwrap_or(MAX_ENTRIES_CAP)
            .min(MAX_ENTRIES_CAP) as usize;
        // The glob comes from the network and is matched against every
        // examined name: an over-long one is an argument error, refused
        // before any listing work.
        let pattern = req
            .glob
            .as_deref()
            .map(Pattern::parse)
            .transpose()
            .map_err(|e| Step::Fail(FileError::internal(e.to_string())))?;
        let walk = Walk {
            ctx,
            req,
            pattern,
            base: d.resolved.clone(),
            max,
        };
        walk.run(fd).map_err(Step::Fail)
    });
    let path = shown.unwrap_or_default();
    let reply = match result {
        Ok(response) => {
            returned = response.entries.len();
            Ok(Message::FileListResponse(response))
        }
        Err(JailedError::Rejected(r)) => {
            return FileOutcome::rejected(r, req.path.clone(), MessageType::FileList);
        }
        Err(JailedError::Failed(e)) => Err(e),
    };
    let mut details = Details::new();
    details.insert("path", Value::String(path));
    details.insert("glob", json!(req.glob));
    details.insert("recursive", json!(req.recursive));
    details.insert("include_hidden", json!(req.include_hidden));
    details.insert("max_entries", json!(req.max_entries));
    details.insert("entries_returned", json!(returned));
    FileOutcome {
        reply,
        audit: super::Audit::Operation(details),
    }
}

struct Walk<'a> {
    ctx: &'a FileContext<'a>,
    req: &'a FileList,
    pattern: Option<Pattern>,
    base: String,
    max: usize,
}

/// One directory being listed: its stream, where it sits, and the sorted
/// batch of candidate names still to handle.
struct Level {
    dir: Dir,
    /// Path of this directory relative to the base (`""` for the base).
    rel: String,
    depth: usize,
    /// Ascending names still to handle in this batch.
    batch: std::vec::IntoIter<String>,
    /// The last name handled; a rescan starts after it.
    after: Option<String>,
    /// The last scan dropped candidates beyond the batch.
    more: bool,
}

enum Stop {
    /// Everything was listed.
    Done,
    /// A limit was hit: `truncated = true`.
    Truncated,
}

impl Walk<'_> {
    fn run(&self, base: OwnedFd) -> Result<FileListResponse, FileError> {
        let mut entries: Vec<FileListEntry> = Vec::new();
        let mut examined = 0u64;
        // Set when a directory was too deep to enter: the listing goes on
        // but is reported as truncated.
        let mut too_deep = false;
        let dir = Dir::new(base).map_err(|e| os_error(&self.base, e))?;
        let mut stack = vec![Level {
            dir,
            rel: String::new(),
            depth: 0,
            batch: Vec::new().into_iter(),
            after: None,
            more: true,
        }];
        let stop = loop {
            let Some(level) = stack.last_mut() else {
                break Stop::Done;
            };
            let Some(name) = level.batch.next() else {
                if !level.more {
                    stack.pop();
                    continue;
                }
                let budget = self.max - entries.len() + 1;
                match self.scan(level, budget, &mut examined) {
                    Ok(()) => continue,
                    Err(stop) => break stop,
                }
            };
            level.after = Some(name.clone());
            let (rel, depth) = (join(&level.rel, &name), level.depth);
            let Ok(fd) = level.dir.fd() else { continue };
            let Ok(st) = rustix::fs::statat(fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let kind = FileType::from_raw_mode(st.st_mode);
            if self.qualifies(&name) {
                if entries.len() == self.max {
                    break Stop::Truncated;
                }
                entries.push(self.entry(&name, &rel, &st, kind));
            }
            if self.req.recursive && kind == FileType::Directory && self.visible(&name) {
                if depth + 1 > MAX_DEPTH {
                    too_deep = true;
                    continue;
                }
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                // Unreadable or vanished subdirectories are skipped silently.
                let Ok(child) = rustix::fs::openat(fd, name.as_str(), flags, Mode::empty()) else {
                    continue;
                };
                // With jail_no_xdev a mount inside the tree (a same-filesystem
                // bind mount included) is listed but not entered; so is one
                // of the shim's own directories moved or mounted there.
                if self.ctx.jail.no_xdev() && !self.ctx.jail.on_root_mount(child.as_fd()) {
                    continue;
                }
                if self.ctx.jail.is_protected(&st) {
                    continue;
                }
                let Ok(dir) = Dir::new(child) else { continue };
                stack.push(Level {
                    dir,
                    rel,
                    depth: depth + 1,
                    batch: Vec::new().into_iter(),
                    after: None,
                    more: true,
                });
            }
        };
        Ok(FileListResponse {
            entries,
            truncated: too_deep || matches!(stop, Stop::Truncated),
        })
    }

    /// Reads `level`'s directory once and keeps the `budget` smallest
    /// candidate names after `level.after`.
    fn scan(&self, level: &mut Level, budget: usize, examined: &mut u64) -> Result<(), Stop> {
        let mut heap: BinaryHeap<String> = BinaryHeap::with_capacity(budget + 1);
        let mut dropped = false;
        level.dir.rewind();
        while let Some(item) = level.dir.read() {
            let Ok(entry) = item else {
                // An unreadable directory ends its own listing, not the walk.
                break;
            };
            let raw = entry.file_name().to_bytes();
            if raw == b"." || raw == b".." {
                continue;
            }
            *examined += 1;
            if *examined > MAX_EXAMINED {
                return Err(Stop::Truncated);
            }
            // Names that are not UTF-8 cannot be sent or addressed later.
            let Ok(name) = std::str::from_utf8(raw) else {
                continue;
            };
            if level.after.as_deref().is_some_and(|after| name <= after) {
                continue;
            }
            if !self.candidate(name, entry.file_type()) {
                continue;
            }
            if heap.len() == budget {
                match heap.peek() {
                    Some(largest) if name < largest.as_str() => {
                        heap.pop();
                        dropped = true;
                    }
                    _ => {
                        dropped = true;
                        continue;
                    }
                }
            }
            heap.push(name.to_owned());
        }
        level.batch = heap.into_sorted_vec().into_iter();
        level.more = dropped;
        Ok(())
    }

    fn visible(&self, name: &str) -> bool {
        self.req.include_hidden || !name.starts_with('.')
    }

    fn qualifies(&self, name: &str) -> bool {
        self.visible(name) && self.pattern.as_ref().is_none_or(|p| p.matches(name))
    }

    /// Worth keeping from a scan: it may be emitted, or it is a directory a
    /// recursive listing must enter.
    fn candidate(&self, name: &str, kind: FileType) -> bool {
        if !self.visible(name) {
            return false;
        }
        self.qualifies(name)
            || (self.req.recursive && matches!(kind, FileType::Directory | FileType::Unknown))
    }

    fn entry(&self, name: &str, rel: &str, st: &Stat, kind: FileType) -> FileListEntry {
        let path = format!("{}/{rel}", self.base.trim_end_matches('/'));
        let (is_file, is_dir) = if kind == FileType::Symlink {
            self.link_target_kind(&path)
        } else {
            (kind == FileType::RegularFile, kind == FileType::Directory)
        };
        FileListEntry {
            name: name.to_owned(),
            path,
            is_file,
            is_dir,
            is_symlink: kind == FileType::Symlink,
            size_bytes: u64::try_from(st.st_size).unwrap_or(0),
            mtime: mtime(st),
        }
    }

    /// A link is followed only when its full resolution stays inside the
    /// root (decision + enforcement); dangling or outside links are neither
    /// file nor directory.
    fn link_target_kind(&self, path: &str) -> (bool, bool) {
        let jail = self.ctx.jail;
        let Ok(decision) = jail.decide(path) else {
            return (false, false);
        };
        if decision.looped {
            return (false, false);
        }
        let Ok(fd) = jail.open(&decision.remainder, OFlags::PATH, Mode::empty()) else {
            return (false, false);
        };
        match rustix::fs::fstat(fd.as_fd()) {
            Ok(st) => {
                let kind = FileType::from_raw_mode(st.st_mode);
                (kind == FileType::RegularFile, kind == FileType::Directory)
            }
            Err(_) => (false, false),
        }
    }
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_owned()
    } else {
        format!("{rel}/{name}")
    }
}
