//! Payloads of the data plane: commands and file operations
//! (PROTOCOL.md §7.1–§7.7, EXEC.md §2, FILES.md).
//!
//! Only the schema is checked here. Rules that need the filesystem, the
//! configuration or the negotiated limits (the jail, `max_entries` < 1,
//! "exactly one of command/argv", …) belong to the handlers, which audit them.

use std::collections::BTreeMap;
use std::num::NonZeroU64;

use serde::Serialize;

use crate::protocol::fields::{FieldResult, Fields};
use crate::protocol::types::{Encoding, ReadFormat, Shell};

/// `EXECUTE_COMMAND` (PROTOCOL.md §7.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecuteCommand {
    pub command: Option<String>,
    pub argv: Option<Vec<String>>,
    pub shell: Shell,
    pub cwd: Option<String>,
    pub timeout_seconds: Option<NonZeroU64>,
    /// Variables merged into the safe baseline; entry validity (empty names,
    /// `=` or NUL) is judged by the handler so the refusal is audited.
    pub env: BTreeMap<String, String>,
}

impl ExecuteCommand {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            command: f.opt_string("command")?,
            argv: f.opt_strings("argv")?,
            shell: f.enum_or("shell", Shell::Auto)?,
            cwd: f.opt_string("cwd")?,
            timeout_seconds: f.opt_positive("timeout_seconds")?,
            env: f.string_map_or_empty("env")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `COMMAND_RESULT` (PROTOCOL.md §7.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandResult {
    pub stdout: String,
    pub stderr: String,
    /// Exit status; −N for death by signal N; −1 when unknown.
    pub exit_code: i64,
    pub timed_out: bool,
    pub duration_seconds: f64,
    pub output_truncated: bool,
}

impl CommandResult {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            stdout: f.string("stdout")?,
            stderr: f.string("stderr")?,
            exit_code: f.int("exit_code")?,
            timed_out: f.bool("timed_out")?,
            duration_seconds: f.number("duration_seconds")?,
            output_truncated: f.bool_or("output_truncated", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_READ` (PROTOCOL.md §7.2, FILES.md §1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileRead {
    pub path: String,
    pub encoding: Encoding,
    pub format: ReadFormat,
    pub offset: u64,
    /// `None` reads to the end of the file.
    pub length: Option<NonZeroU64>,
}

impl FileRead {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            path: f.string("path")?,
            encoding: f.enum_or("encoding", Encoding::Utf8)?,
            format: f.enum_or("format", ReadFormat::Text)?,
            offset: f.nonneg_or("offset", 0)?,
            length: f.opt_positive("length")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_CONTENTS` (PROTOCOL.md §7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileContents {
    pub content: String,
    pub encoding: Encoding,
    /// Bytes returned, not the file size.
    pub size_bytes: u64,
    pub truncated: bool,
}

impl FileContents {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            content: f.string("content")?,
            encoding: f.enumeration("encoding")?,
            size_bytes: f.nonneg("size_bytes")?,
            truncated: f.bool("truncated")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_WRITE` (PROTOCOL.md §7.3, FILES.md §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileWrite {
    pub path: String,
    pub content: String,
    pub encoding: Encoding,
    pub create_parents: bool,
}

impl FileWrite {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            path: f.string("path")?,
            content: f.string("content")?,
            encoding: f.enum_or("encoding", Encoding::Utf8)?,
            create_parents: f.bool_or("create_parents", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_STAT` (PROTOCOL.md §7.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileStat {
    pub path: String,
    pub follow_symlinks: bool,
}

impl FileStat {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            path: f.string("path")?,
            follow_symlinks: f.bool_or("follow_symlinks", true)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_STAT_RESPONSE` (PROTOCOL.md §7.4). Every field but `exists` is null
/// for a missing target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileStatResponse {
    pub exists: bool,
    pub is_file: Option<bool>,
    pub is_dir: Option<bool>,
    pub is_symlink: Option<bool>,
    pub size_bytes: Option<u64>,
    pub mtime: Option<f64>,
    pub ctime: Option<f64>,
    /// Octal permission bits, at least 4 digits (`"0644"`).
    pub mode: Option<String>,
    pub owner_uid: Option<u64>,
    pub owner_gid: Option<u64>,
    pub mime_type: Option<String>,
    pub path: Option<String>,
}

impl FileStatResponse {
    /// The answer for a target that does not exist.
    pub fn missing() -> Self {
        Self {
            exists: false,
            is_file: None,
            is_dir: None,
            is_symlink: None,
            size_bytes: None,
            mtime: None,
            ctime: None,
            mode: None,
            owner_uid: None,
            owner_gid: None,
            mime_type: None,
            path: None,
        }
    }

    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            exists: f.bool("exists")?,
            is_file: f.opt_bool("is_file")?,
            is_dir: f.opt_bool("is_dir")?,
            is_symlink: f.opt_bool("is_symlink")?,
            size_bytes: f.opt_nonneg("size_bytes")?,
            mtime: f.opt_number("mtime")?,
            ctime: f.opt_number("ctime")?,
            mode: f.opt_string("mode")?,
            owner_uid: f.opt_nonneg("owner_uid")?,
            owner_gid: f.opt_nonneg("owner_gid")?,
            mime_type: f.opt_string("mime_type")?,
            path: f.opt_string("path")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_LIST` (PROTOCOL.md §7.5, FILES.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileList {
    pub path: String,
    pub glob: Option<String>,
    pub recursive: bool,
    pub include_hidden: bool,
    /// Any integer on the wire; the handler refuses < 1 (FILES.md §4.2).
    pub max_entries: i64,
}

impl FileList {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            path: f.string("path")?,
            glob: f.opt_string("glob")?,
            recursive: f.bool_or("recursive", false)?,
            include_hidden: f.bool_or("include_hidden", false)?,
            max_entries: f.int_or("max_entries", 1000)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// One entry of `FILE_LIST_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileListEntry {
    pub name: String,
    pub path: String,
    pub is_file: bool,
    pub is_dir: bool,
    pub is_symlink: bool,
    pub size_bytes: u64,
    pub mtime: f64,
}

impl FileListEntry {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            name: f.string("name")?,
            path: f.string("path")?,
            is_file: f.bool("is_file")?,
            is_dir: f.bool("is_dir")?,
            is_symlink: f.bool("is_symlink")?,
            size_bytes: f.nonneg("size_bytes")?,
            mtime: f.number("mtime")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_LIST_RESPONSE` (PROTOCOL.md §7.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileListResponse {
    pub entries: Vec<FileListEntry>,
    pub truncated: bool,
}

impl FileListResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            entries: f.objects("entries", FileListEntry::decode)?,
            truncated: f.bool("truncated")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_DELETE` (PROTOCOL.md §7.6, FILES.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDelete {
    pub path: String,
    pub recursive: bool,
    pub missing_ok: bool,
}

impl FileDelete {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            path: f.string("path")?,
            recursive: f.bool_or("recursive", false)?,
            missing_ok: f.bool_or("missing_ok", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `FILE_MOVE` (PROTOCOL.md §7.7, FILES.md §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileMove {
    pub src: String,
    pub dst: String,
    pub overwrite: bool,
}

impl FileMove {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            src: f.string("src")?,
            dst: f.string("dst")?,
            overwrite: f.bool_or("overwrite", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}
