//! The audit log's files on disk as the reading commands see them (AUDIT.md
//! §1.2): the current file, the rotated siblings in their strict order, and
//! the last complete line of a file read from its end, and the lookups the
//! reading commands share: a record by `seq`, the newest record's `ts`, and
//! whether a rotated file ends with the anchored record.
//!
//! Only names of the form `NAME.` + 8 digits + `-` + 6 digits, optionally
//! followed by `-` and a counter without leading zeros, are rotated files;
//! everything else in the directory (the lock, the tail anchor, editor
//! backups, symbolic links) is ignored. This module only lists and reads: it
//! never creates, renames or deletes a file.

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::anchor::Anchor;
use super::verify::integer;

/// Length of the `YYYYMMDD-HHMMSS` stamp.
const STAMP_LEN: usize = 15;

/// Where a rotated file sorts: by stamp, then by counter as an integer, a
/// name without counter first (so `-10` sorts after `-2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotatedOrder {
    stamp: [u8; STAMP_LEN],
    /// The counter's digits (no leading zero), `None` without counter.
    counter: Option<Vec<u8>>,
}

impl Ord for RotatedOrder {
    fn cmp(&self, other: &Self) -> Ordering {
        // Counters have no leading zeros, so a longer one is larger; equal
        // lengths compare digit by digit. No integer can overflow this way.
        let counter = |c: &Option<Vec<u8>>| c.as_ref().map(|d| (d.len(), d.clone()));
        self.stamp
            .cmp(&other.stamp)
            .then_with(|| counter(&self.counter).cmp(&counter(&other.counter)))
    }
}

impl PartialOrd for RotatedOrder {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether `candidate` names a rotated file of the current file `current`
/// (both base names), and where it sorts.
pub fn rotated_order(current: &OsStr, candidate: &OsStr) -> Option<RotatedOrder> {
    let rest = candidate
        .as_bytes()
        .strip_prefix(current.as_bytes())?
        .strip_prefix(b".")?;
    if rest.len() < STAMP_LEN {
        return None;
    }
    let (stamp, tail) = rest.split_at(STAMP_LEN);
    let stamp_ok = stamp.iter().enumerate().all(|(i, &b)| {
        if i == 8 {
            b == b'-'
        } else {
            b.is_ascii_digit()
        }
    });
    if !stamp_ok {
        return None;
    }
    let counter = if tail.is_empty() {
        None
    } else {
        let digits = tail.strip_prefix(b"-")?;
        // Counters start at 1 and are written without leading zeros.
        if digits.is_empty() || digits[0] == b'0' || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(digits.to_vec())
    };
    let mut fixed = [0u8; STAMP_LEN];
    fixed.copy_from_slice(stamp);
    Some(RotatedOrder {
        stamp: fixed,
        counter,
    })
}

/// The rotated files of the current file `current`, oldest name first. A
/// missing directory has none. Only regular files count: a symbolic link or
/// directory with a matching name is ignored, so a bundle or a verification
/// never reaches outside the log directory.
pub fn rotated_files(current: &Path) -> io::Result<Vec<PathBuf>> {
    let Some(name) = current.file_name() else {
        return Ok(Vec::new());
    };
    let dir = match current.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(order) = rotated_order(name, &entry.file_name()) else {
            continue;
        };
        // `DirEntry::file_type` does not follow symbolic links.
        if entry.file_type()?.is_file() {
            found.push((order, entry.path()));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// Whether the current file exists (a dangling symbolic link does not).
pub fn current_exists(current: &Path) -> io::Result<bool> {
    current.try_exists()
}

/// The current file (if it exists) followed by the rotated files, the order
/// every multi-file command uses (AUDIT.md §10.3, §11.2, §11.4).
pub fn all_files(current: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if current_exists(current)? {
        files.push(current.to_owned());
    }
    files.extend(rotated_files(current)?);
    Ok(files)
}

/// The base name of a log file for output and archive entries (lossy for
/// names that are not UTF-8).
pub fn base_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The last non-blank LF-terminated line of `file` (without its LF),
/// scanning back from the end as far as needed. A torn fragment after the
/// last LF is not a complete line and is skipped; `None` when the file has
/// no complete non-blank line.
pub fn last_complete_line(file: &mut File) -> io::Result<Option<Vec<u8>>> {
    let size = file.metadata()?.len();
    let Some(mut end) = rfind_lf(file, size)? else {
        return Ok(None);
    };
    loop {
        let start = rfind_lf(file, end)?.map_or(0, |p| p + 1);
        let len = usize::try_from(end - start)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "line too long"))?;
        let mut line = vec![0u8; len];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut line)?;
        if !line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Some(line));
        }
        if start == 0 {
            return Ok(None);
        }
        end = start - 1;
    }
}

/// The first line of `log` holding a record with this integer `seq`
/// (`audit show`); blank lines and lines that are not a JSON object are
/// skipped.
pub fn find_record(log: &Path, seq: i128) -> io::Result<Option<String>> {
    let mut reader = BufReader::new(File::open(log)?);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        if reader.read_until(b'\n', &mut raw)? == 0 {
            return Ok(None);
        }
        let Ok(text) = std::str::from_utf8(&raw) else {
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let Ok(Value::Object(record)) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        if record.get("seq").and_then(integer) == Some(seq) {
            return Ok(Some(text.to_owned()));
        }
    }
}

/// The last complete record of `log` as an object; `None` when the file
/// cannot be read, has no complete line, or that line is not a JSON object.
fn last_record(log: &Path) -> Option<Map<String, Value>> {
    let line = File::open(log)
        .and_then(|mut file| last_complete_line(&mut file))
        .ok()??;
    match serde_json::from_slice::<Value>(&line).ok()? {
        Value::Object(record) => Some(record),
        _ => None,
    }
}

/// `ts` of the last complete record of `log` (`audit prune`; a missing `ts`
/// counts as 0); `None` when it cannot be read or does not parse.
pub fn newest_ts(log: &Path) -> Option<f64> {
    let record = last_record(log)?;
    match record.get("ts") {
        None => Some(0.0),
        Some(Value::Number(n)) => n.as_f64(),
        Some(_) => None,
    }
}

/// Whether some rotated sibling of `current` ends with the anchored record
/// (the anchor was not yet moved on when a rotation was interrupted).
pub fn rotated_file_ends_with(current: &Path, anchor: &Anchor) -> bool {
    let Ok(rotated) = rotated_files(current) else {
        return false;
    };
    rotated.iter().any(|log| {
        last_record(log).is_some_and(|record| {
            record.get("seq").and_then(Value::as_u64) == Some(anchor.seq)
                && record.get("hmac").and_then(Value::as_str) == Some(anchor.hmac.as_str())
        })
    })
}

/// The position of the last LF strictly before `before`.
fn rfind_lf(file: &mut File, before: u64) -> io::Result<Option<u64>> {
    const CHUNK: u64 = 64 * 1024;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut end = before;
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let len = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..len])?;
        if let Some(i) = buf[..len].iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + i as u64));
        }
        end = start;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(name: &str) -> Option<RotatedOrder> {
        rotated_order(OsStr::new("audit.log"), OsStr::new(name))
    }

    #[test]
    fn only_stamped_names_are_rotated_files() {
        for good in [
            "audit.log.20240405-194120",
            "audit.log.20240405-194120-1",
            "audit.log.20240405-194120-10",
        ] {
            assert!(order(good).is_some(), "{good}");
        }
        for bad in [
            "audit.log",
            "audit.log.anchor",
            ".audit.log.lock",
            "audit.log.bak",
            "audit.log.2024040-1194120",
            "audit.log.20240405-19412",
            "audit.log.20240405-194120-",
            "audit.log.20240405-194120-0",
            "audit.log.20240405-194120-01",
            "audit.log.20240405-194120-1a",
            "audit.log.20240405-194120.gz",
            "audit.log.20240405_194120",
            "audit.logx20240405-194120",
            "other.log.20240405-194120",
        ] {
            assert!(order(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn counters_sort_as_integers_after_the_plain_name() {
        let mut names = vec![
            "audit.log.20240405-194120-10",
            "audit.log.20240405-194120-2",
            "audit.log.20240406-000000",
            "audit.log.20240405-194120",
            "audit.log.20240405-194120-1",
        ];
        names.sort_by_key(|n| order(n));
        assert_eq!(
            names,
            [
                "audit.log.20240405-194120",
                "audit.log.20240405-194120-1",
                "audit.log.20240405-194120-2",
                "audit.log.20240405-194120-10",
                "audit.log.20240406-000000",
            ]
        );
    }

    #[test]
    fn find_record_takes_the_first_integer_seq_and_skips_what_does_not_parse() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(
            &log,
            "\n{\"seq\": 2.0}\nnot json\n[2]\n  {\"seq\": 2, \"op\": \"A\"}  \n{\"seq\": 2, \"op\": \"B\"}\n",
        )
        .unwrap();
        assert_eq!(
            find_record(&log, 2).unwrap().as_deref(),
            Some(r#"{"seq": 2, "op": "A"}"#)
        );
        assert_eq!(find_record(&log, 3).unwrap(), None);
        assert!(find_record(&dir.path().join("missing"), 1).is_err());
    }

    #[test]
    fn newest_ts_is_the_last_complete_records_and_zero_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(&log, "{\"ts\": 1.5}\n{\"ts\": 7.25}\n\n{\"ts\": 9").unwrap();
        assert_eq!(newest_ts(&log), Some(7.25));
        std::fs::write(&log, "{\"seq\": 1}\n").unwrap();
        assert_eq!(newest_ts(&log), Some(0.0));
        std::fs::write(&log, "{\"ts\": \"late\"}\n").unwrap();
        assert_eq!(newest_ts(&log), None);
        assert_eq!(newest_ts(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_rotated_file_ends_with_the_anchor_only_by_its_last_seq_and_hmac() {
        let dir = tempfile::tempdir().unwrap();
        let current = dir.path().join("audit.log");
        std::fs::write(
            dir.path().join("audit.log.20240405-194120"),
            "{\"seq\": 4, \"hmac\": \"aa\"}\n{\"seq\": 5, \"hmac\": \"bb\"}\n",
        )
        .unwrap();
        let anchor = |seq, hmac: &str| Anchor {
            file: "audit.log".to_owned(),
            seq,
            hmac: hmac.to_owned(),
        };
        assert!(rotated_file_ends_with(&current, &anchor(5, "bb")));
        assert!(!rotated_file_ends_with(&current, &anchor(4, "aa")));
        assert!(!rotated_file_ends_with(&current, &anchor(5, "aa")));
    }
}
