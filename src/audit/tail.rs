//! Following the current log for `audit tail` (AUDIT.md §11.1): hands out
//! the complete lines appended since the last look and follows rotation.
//!
//! Rotation (hardening note of §11.1): when the path names a different file
//! than the one being read, the old file is read to its end first (its torn
//! last fragment, if any, becomes a final line), then the new file is read
//! from its start. A file that shrank in place is read again from its start.
//! While the path names no file (between the rename and the creation of the
//! new file) the old file keeps being read. This module only reads; it never
//! sleeps or prints (the caller owns the polling interval and the output).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A reader that follows the current log across rotations.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: File,
    /// Device and inode of `file`.
    identity: (u64, u64),
    /// Bytes of `file` consumed so far.
    offset: u64,
    /// The bytes after the last LF, waiting for the rest of their line.
    partial: Vec<u8>,
}

impl Follower {
    /// Opens the current log at `path` (its absence is an error of kind
    /// `NotFound`), positioned at its start.
    pub fn open(path: &Path) -> io::Result<Follower> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Ok(Follower {
            path: path.to_owned(),
            file,
            identity: (meta.dev(), meta.ino()),
            offset: 0,
            partial: Vec::new(),
        })
    }

    /// The complete lines (without LF) that appeared since the last call,
    /// in order, across a rotation if one happened.
    pub fn poll(&mut self) -> io::Result<Vec<Vec<u8>>> {
        let mut lines = Vec::new();
        self.read_new(&mut lines)?;
        // Truncated in place (same file, now shorter than what was read):
        // start over from its beginning.
        if self.file.metadata()?.len() < self.offset {
            self.file.seek(SeekFrom::Start(0))?;
            self.offset = 0;
            self.partial.clear();
            self.read_new(&mut lines)?;
        }
        let replaced = match std::fs::metadata(&self.path) {
            Ok(meta) => (meta.dev(), meta.ino()) != self.identity,
            // Renamed away and not yet recreated, or unreadable for a
            // moment: keep reading the old file.
            Err(_) => false,
        };
        if replaced {
            // Whatever reached the old file before the switch belongs to it.
            self.read_new(&mut lines)?;
            if !self.partial.is_empty() {
                lines.push(std::mem::take(&mut self.partial));
            }
            match Follower::open(&self.path) {
                Ok(next) => {
                    *self = next;
                    self.read_new(&mut lines)?;
                }
                // Gone again already: try at the next poll.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(lines)
    }

    /// How many bytes after the last LF wait for the rest of their line
    /// (a record being written, or a file cut off mid-line).
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Reads `file` to its current end and splits off the complete lines.
    fn read_new(&mut self, lines: &mut Vec<Vec<u8>>) -> io::Result<()> {
        let mut chunk = Vec::new();
        let read = (&self.file).read_to_end(&mut chunk)?;
        self.offset += read as u64;
        if chunk.is_empty() {
            return Ok(());
        }
        let mut rest = chunk.as_slice();
        while let Some(lf) = rest.iter().position(|&b| b == b'\n') {
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&rest[..lf]);
            lines.push(line);
            rest = &rest[lf + 1..];
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }
}
