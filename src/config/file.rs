//! Reading `config.toml` (CLI.md §5.1): a flat TOML table whose top-level keys
//! are configuration keys.
//!
//! This module only reads and parses; it never writes the file, never prints
//! (unknown keys come back as warnings), and never interprets values (types
//! and constraints are checked when the key is looked up).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{ConfigError, ConfigWarning};
use super::layers::key_named;

/// Far larger than any sensible configuration; bounds memory on a mistaken
/// `--config /dev/zero`.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The parsed file: its path and the known keys it sets.
pub(crate) type FileLayer = (PathBuf, BTreeMap<String, Value>);

/// Reads and parses the configuration file at `path`.
///
/// A missing file is not an error: `Ok(None)`, plus a warning when the user
/// named the file explicitly. Unknown keys are dropped with a warning each.
pub(crate) fn read(
    path: &Path,
    explicit: bool,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<Option<FileLayer>, ConfigError> {
    let read_error = |reason: String| ConfigError::ReadFile {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = match read_small_file(path, MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(SmallFileError::Io(e)) if e.kind() == ErrorKind::NotFound => {
            if explicit {
                warnings.push(ConfigWarning::ConfigFileMissing {
                    path: path.to_path_buf(),
                });
            }
            return Ok(None);
        }
        Err(e) => return Err(read_error(e.to_string())),
    };
    let text = String::from_utf8(bytes).map_err(|_| read_error("not valid UTF-8".into()))?;
    let table = parse(&text).map_err(|message| ConfigError::Syntax {
        path: path.to_path_buf(),
        message,
    })?;

    let mut known = BTreeMap::new();
    for (key, value) in table {
        if key_named(&key).is_some() {
            known.insert(key, value);
        } else {
            warnings.push(ConfigWarning::UnknownFileKey {
                key,
                path: path.to_path_buf(),
            });
        }
    }
    Ok(Some((path.to_path_buf(), known)))
}

/// Opens `path` for reading only if it is a regular file (following
/// symlinks). Opening does not block on a FIFO, and a FIFO or device is
/// refused instead of read: a configuration, id, CA or zone file is never a
/// stream. The check is on the opened descriptor, so a file swapped after
/// it cannot slip through.
fn open_regular_file(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // The flag's bit pattern always fits the C int that open(2) takes.
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Why [`read_small_file`] read nothing.
#[derive(Debug)]
pub(crate) enum SmallFileError {
    /// Opening or reading failed, or the path is not a regular file.
    Io(std::io::Error),
    /// The file holds more than the bound, which is given.
    TooLarge(u64),
}

impl std::fmt::Display for SmallFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => e.fmt(f),
            Self::TooLarge(max) => write!(f, "larger than {max} bytes"),
        }
    }
}

/// The whole content of the regular file at `path`, at most `max` bytes
/// (see [`open_regular_file`]). One byte more than allowed is read, so a
/// file that grew since it was opened is noticed rather than cut short.
pub(crate) fn read_small_file(path: &Path, max: u64) -> Result<Vec<u8>, SmallFileError> {
    let file = open_regular_file(path).map_err(SmallFileError::Io)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(SmallFileError::Io)?;
    if bytes.len() as u64 > max {
        return Err(SmallFileError::TooLarge(max));
    }
    Ok(bytes)
}

/// Replaces the file at `path` (whose directory must exist) with `bytes`,
/// so that a reader sees the old content or the new one, never a part: a
/// temporary file beside it, created exclusively with `mode` (less the
/// umask), written and synced, renamed over `path`, then the directory
/// synced. The temporary file is removed again on failure.
pub(crate) fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!(
            "{} names no file in a directory",
            path.display()
        )));
    };
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| std::io::Error::other(e.to_string()))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        crate::audit::hex(&suffix)
    ));
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options.open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        #[cfg(unix)]
        File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Parses TOML text into its top-level table. The error is one line.
pub(crate) fn parse(text: &str) -> Result<BTreeMap<String, Value>, String> {
    basic_toml::from_str(text).map_err(|e| one_line(&e.to_string()))
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
