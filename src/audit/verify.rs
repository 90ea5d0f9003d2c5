//! The verifier (AUDIT.md §10.1): checks one file's bytes against the key
//! and lists every violation in order, reproducing the reference's results
//! on every log either implementation writes. Beyond the reference it checks
//! the tail anchor of the current file (§4) and the links between rotated
//! files (§9.4).
//!
//! It reads untrusted bytes: malformed input becomes a `parse_error`, never a
//! panic, and nothing in it is ever executed or trusted beyond comparison.
//! It reads the anchor and a linked previous file, but never writes, and it
//! never reports the key or the anchor's MAC.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::anchor::Anchor;
use super::canonical::canonical;
use super::files::{base_name, last_complete_line, rotated_file_ends_with};
use super::record::AuditKey;
use crate::protocol::json::parse_strict_for_audit;

/// What kind of problem a violation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// The file is missing or does not end with LF.
    Truncated,
    /// A line is not a JSON object (or has duplicate keys, bad strings, …).
    ParseError,
    /// `seq` or `hmac` is absent or of the wrong type.
    MissingField,
    /// `seq` is not the expected next number.
    SequenceGap,
    /// `prev_hmac` is not the previous record's `hmac`.
    ChainBreak,
    /// The record's HMAC does not verify.
    HmacMismatch,
    /// An `AUDIT_ROTATED` record names a previous file that does not end as
    /// it says (AUDIT.md §9.4).
    FileLinkBreak,
    /// The tail anchor vouches for a record the log no longer has: the
    /// newest records were cut off (AUDIT.md §4).
    TailTruncated,
    /// The tail anchor cannot be read or its MAC does not verify.
    AnchorInvalid,
    /// A log this shim wrote has no tail anchor.
    AnchorMissing,
}

impl ViolationKind {
    /// The name printed by `audit verify`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Truncated => "truncated",
            ViolationKind::ParseError => "parse_error",
            ViolationKind::MissingField => "missing_field",
            ViolationKind::SequenceGap => "sequence_gap",
            ViolationKind::ChainBreak => "chain_break",
            ViolationKind::HmacMismatch => "hmac_mismatch",
            ViolationKind::FileLinkBreak => "file_link_break",
            ViolationKind::TailTruncated => "tail_truncated",
            ViolationKind::AnchorInvalid => "anchor_invalid",
            ViolationKind::AnchorMissing => "anchor_missing",
        }
    }
}

/// One violation: kind, the record's `seq` when known, and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What is wrong.
    pub kind: ViolationKind,
    /// The offending record's `seq` (as it claims), if any.
    pub seq: Option<i128>,
    /// Human-readable detail.
    pub message: String,
}

impl fmt::Display for Violation {
    /// `[<kind>] seq=<seq or ?>: <message>` (AUDIT.md §10.2).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = self.seq.map_or_else(|| "?".to_owned(), |s| s.to_string());
        write!(f, "[{}] seq={seq}: {}", self.kind.as_str(), self.message)
    }
}

fn violation(kind: ViolationKind, seq: Option<i128>, message: impl Into<String>) -> Violation {
    Violation {
        kind,
        seq,
        message: message.into(),
    }
}

/// Verifies one file's bytes (the file exists; a missing file is the
/// caller's `truncated`).
pub fn verify_bytes(bytes: &[u8], key: &AuditKey) -> Vec<Violation> {
    verify_bytes_with_progress(bytes, key, &mut |_| {})
}

/// How many bytes pass between two progress reports.
const PROGRESS_STEP: usize = 256 * 1024;

/// [`verify_bytes`], reporting how many bytes have been checked to
/// `progress` every few hundred KiB (for a progress display).
pub fn verify_bytes_with_progress(
    bytes: &[u8],
    key: &AuditKey,
    progress: &mut dyn FnMut(usize),
) -> Vec<Violation> {
    let mut out = Vec::new();
    if bytes.is_empty() {
        return out;
    }
    if bytes.last() != Some(&b'\n') {
        out.push(violation(
            ViolationKind::Truncated,
            None,
            "audit log does not end with newline — last record truncated",
        ));
    }
    let mut prev: Option<String> = None;
    let mut expected: i128 = 1;
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut done = 0usize;
    let mut next_report = PROGRESS_STEP;
    for raw in body.split(|&b| b == b'\n') {
        done += raw.len() + 1;
        if done >= next_report {
            progress(done.min(bytes.len()));
            next_report = done + PROGRESS_STEP;
        }
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = match parse_line(line) {
            Ok(record) => record,
            Err(detail) => {
                out.push(violation(
                    ViolationKind::ParseError,
                    None,
                    format!("unparseable line: {detail}"),
                ));
                return out;
            }
        };
        let Some(seq) = record.get("seq").and_then(integer) else {
            out.push(violation(
                ViolationKind::MissingField,
                None,
                "record missing seq",
            ));
            return out;
        };
        if seq != expected {
            out.push(violation(
                ViolationKind::SequenceGap,
                Some(seq),
                format!("expected seq={expected}, got seq={seq}"),
            ));
        }
        let stored_prev = record.get("prev_hmac").cloned().unwrap_or(Value::Null);
        let chained = match (&prev, &stored_prev) {
            (None, Value::Null) => true,
            (Some(p), Value::String(s)) => p == s,
            _ => false,
        };
        if !chained {
            out.push(violation(
                ViolationKind::ChainBreak,
                Some(seq),
                format!("prev_hmac mismatch at seq={seq}"),
            ));
        }
        let Some(Value::String(stored)) = record.get("hmac").cloned() else {
            out.push(violation(
                ViolationKind::MissingField,
                Some(seq),
                "record missing hmac",
            ));
            return out;
        };
        let mut unsigned = record;
        unsigned.remove("hmac");
        let verified = match canonical(&Value::Object(unsigned)) {
            Ok(text) => key.verify_hex(text.as_bytes(), &stored),
            Err(_) => false,
        };
        if !verified {
            out.push(violation(
                ViolationKind::HmacMismatch,
                Some(seq),
                format!("hmac mismatch at seq={seq}"),
            ));
        }
        prev = Some(stored);
        expected = seq + 1;
    }
    out
}

fn parse_line(line: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    match parse_strict_for_audit(text)? {
        Value::Object(map) => Ok(map),
        _ => Err("not a JSON object".to_owned()),
    }
}

/// A JSON integer (a number token without `.`, `e` or `E`); booleans are not.
pub(crate) fn integer(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) if !n.is_f64() => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}

// ---- the tail anchor (AUDIT.md §4 hardening note) -----------------------------

/// The largest anchor file read; a real one is about 200 bytes.
const MAX_ANCHOR_BYTES: u64 = 64 * 1024;

/// The tail anchor of a log: `NAME.anchor` next to it.
pub fn anchor_path(log: &Path) -> PathBuf {
    let mut name = log.file_name().map(OsString::from).unwrap_or_default();
    name.push(".anchor");
    log.with_file_name(name)
}

/// What was found where a log's tail anchor belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnchorFile {
    /// No anchor file.
    Absent,
    /// It exists but cannot be read; one line saying why.
    Unreadable(String),
    /// Its content (not yet authenticated).
    Present(Vec<u8>),
}

impl AnchorFile {
    /// Reads the anchor of the log at `log`.
    pub fn read(log: &Path) -> AnchorFile {
        let path = anchor_path(log);
        let mut content = Vec::new();
        let read = File::open(&path)
            .and_then(|file| file.take(MAX_ANCHOR_BYTES).read_to_end(&mut content));
        match read {
            Ok(_) => AnchorFile::Present(content),
            Err(e) if e.kind() == io::ErrorKind::NotFound => AnchorFile::Absent,
            Err(e) => AnchorFile::Unreadable(e.to_string()),
        }
    }
}

/// The current log's bytes and what its tail-anchor check found, read so
/// that the two belong together.
#[derive(Debug)]
pub struct AnchoredRead {
    /// The bytes of the current file the anchor was checked against.
    pub bytes: Vec<u8>,
    /// The violations [`check_tail_anchor`] found for them.
    pub anchor_violations: Vec<Violation>,
}

/// Reads the current log at `path` and checks it against its tail anchor
/// (AUDIT.md §4), for `audit verify`, `verify-all` and `doctor` alike.
///
/// The anchor is read before the log: a daemon appending meanwhile only
/// moves the anchor to records the log read afterwards already holds. A
/// rotation in between can still leave the two out of step; then the anchor
/// has changed by the time the check fails, and the check is repeated on
/// fresh reads (a few times at most).
pub fn read_current_with_anchor(
    path: &Path,
    key: &AuditKey,
    shim_version: &str,
) -> io::Result<AnchoredRead> {
    const ATTEMPTS: usize = 3;
    let name = base_name(path);
    let mut elsewhere = |anchor: &Anchor| rotated_file_ends_with(path, anchor);
    let mut attempt = 1;
    loop {
        let anchor = AnchorFile::read(path);
        let bytes = std::fs::read(path)?;
        let anchor_violations =
            check_tail_anchor(&bytes, &name, &anchor, key, shim_version, &mut elsewhere);
        if !anchor_violations.is_empty() && attempt < ATTEMPTS && AnchorFile::read(path) != anchor {
            attempt += 1;
            continue;
        }
        return Ok(AnchoredRead {
            bytes,
            anchor_violations,
        });
    }
}

/// Checks the current log `log` (base name `log_name`) against its tail
/// anchor: `tail_truncated` with the anchored seq when a record the anchor
/// vouches for is gone, `anchor_invalid` when the anchor cannot be trusted,
/// `anchor_missing` when a log this shim wrote has none (it starts with
/// `SHIM_START` of `shim_version`, or with `AUDIT_ROTATED`).
///
/// The anchored record may be followed by later ones (a crash between the
/// sync and the anchor update). Two other crash windows of a rotation are
/// accepted too: the new file starts with an `AUDIT_ROTATED` record that
/// names the anchored record as the previous file's last, or the new file
/// has no records yet and `anchored_elsewhere` confirms that the anchored
/// record ends a rotated file.
pub fn check_tail_anchor(
    log: &[u8],
    log_name: &str,
    anchor: &AnchorFile,
    key: &AuditKey,
    shim_version: &str,
    anchored_elsewhere: &mut dyn FnMut(&Anchor) -> bool,
) -> Vec<Violation> {
    let text = match anchor {
        AnchorFile::Absent => {
            if written_by_shim(log, shim_version) {
                return vec![violation(
                    ViolationKind::AnchorMissing,
                    None,
                    format!(
                        "no tail anchor {log_name}.anchor for a log this shim wrote; \
                         the newest records cannot be vouched for"
                    ),
                )];
            }
            return Vec::new();
        }
        AnchorFile::Unreadable(why) => {
            return vec![violation(
                ViolationKind::AnchorInvalid,
                None,
                format!("tail anchor cannot be read: {why}"),
            )];
        }
        AnchorFile::Present(bytes) => bytes,
    };
    let parsed = std::str::from_utf8(text)
        .ok()
        .and_then(|t| Anchor::parse(t, key).ok());
    let Some(anchor) = parsed else {
        return vec![violation(
            ViolationKind::AnchorInvalid,
            None,
            "tail anchor is malformed or its MAC does not verify with this key",
        )];
    };
    if anchor.file != log_name {
        return vec![violation(
            ViolationKind::AnchorInvalid,
            None,
            format!(
                "tail anchor belongs to {:?}, not to {log_name:?}",
                anchor.file
            ),
        )];
    }
    let vouched = holds_record(log, anchor.seq, &anchor.hmac)
        || first_record_links_to(log, &anchor)
        || (first_record(log).is_none() && anchored_elsewhere(&anchor));
    if vouched {
        return Vec::new();
    }
    vec![violation(
        ViolationKind::TailTruncated,
        Some(i128::from(anchor.seq)),
        format!(
            "the tail anchor vouches for seq={} but the log no longer contains it; \
             the newest records were cut off",
            anchor.seq
        ),
    )]
}

/// Whether the log has a record with exactly this `seq` and `hmac`. Only
/// lines containing the hmac text are parsed.
fn holds_record(log: &[u8], seq: u64, hmac: &str) -> bool {
    let needle = hmac.as_bytes();
    if needle.is_empty() {
        return false;
    }
    let mut from = 0;
    while from < log.len() {
        let Some(found) = log[from..].windows(needle.len()).position(|w| w == needle) else {
            return false;
        };
        let at = from + found;
        let start = log[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let end = log[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(log.len(), |p| at + p);
        if let Ok(record) = parse_line(&log[start..end]) {
            let same_seq = record.get("seq").and_then(Value::as_u64) == Some(seq);
            let same_hmac = record.get("hmac").and_then(Value::as_str) == Some(hmac);
            if same_seq && same_hmac {
                return true;
            }
        }
        from = end + 1;
    }
    false
}

/// The first non-blank line of a log, parsed; `None` when there is none or
/// it does not parse.
fn first_record(log: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let line = log
        .split(|&b| b == b'\n')
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))?;
    parse_line(line.strip_suffix(b"\r").unwrap_or(line)).ok()
}

/// Whether this shim wrote the log: it starts with `SHIM_START` written by
/// `shim_version`, or with `AUDIT_ROTATED` (which only this shim writes).
fn written_by_shim(log: &[u8], shim_version: &str) -> bool {
    let Some(first) = first_record(log) else {
        return false;
    };
    match first.get("op").and_then(Value::as_str) {
        Some("AUDIT_ROTATED") => true,
        Some("SHIM_START") => {
            first.get("shim_version").and_then(Value::as_str) == Some(shim_version)
        }
        _ => false,
    }
}

/// Whether the log starts with `AUDIT_ROTATED` naming the anchored record as
/// the previous file's last one.
fn first_record_links_to(log: &[u8], anchor: &Anchor) -> bool {
    let Some(first) = first_record(log) else {
        return false;
    };
    if first.get("op").and_then(Value::as_str) != Some("AUDIT_ROTATED") {
        return false;
    }
    let details = first.get("details");
    let field = |k: &str| details.and_then(|d| d.get(k));
    field("previous_last_seq").and_then(Value::as_u64) == Some(anchor.seq)
        && field("previous_last_hmac").and_then(Value::as_str) == Some(anchor.hmac.as_str())
}

// ---- links between rotated files (AUDIT.md §9.4) -----------------------------

/// For a log whose first record is `AUDIT_ROTATED`, checks that the file it
/// names exists in `dir` and ends with the recorded seq and hmac;
/// `file_link_break` (seq 1) otherwise. Other logs have no link to check.
pub fn check_file_link(log: &[u8], dir: &Path) -> Option<Violation> {
    let first = first_record(log)?;
    if first.get("op").and_then(Value::as_str) != Some("AUDIT_ROTATED") {
        return None;
    }
    let broken = |message: String| Some(violation(ViolationKind::FileLinkBreak, Some(1), message));
    let details = first.get("details");
    let field = |k: &str| {
        details
            .and_then(|d| d.get(k))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let Value::String(name) = field("previous_file") else {
        return broken("AUDIT_ROTATED record names no previous file".to_owned());
    };
    // A plain base name in the same directory, nothing else.
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return broken(format!(
            "AUDIT_ROTATED record names {name:?}, which is not a file in the log directory"
        ));
    }
    let expected_seq = field("previous_last_seq");
    let expected_hmac = field("previous_last_hmac");
    let path = dir.join(&name);
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return broken(format!("previous file {name} is missing"));
        }
        Err(e) => return broken(format!("previous file {name} cannot be read: {e}")),
    };
    // A rotated file that had no verifiable record is linked by name only.
    if expected_seq.is_null() && expected_hmac.is_null() {
        return None;
    }
    let last = match last_complete_line(&mut file) {
        Ok(line) => line,
        Err(e) => return broken(format!("previous file {name} cannot be read: {e}")),
    };
    let last = last.and_then(|line| parse_line(&line).ok());
    let last_seq = last.as_ref().and_then(|r| r.get("seq")).cloned();
    let last_hmac = last.as_ref().and_then(|r| r.get("hmac")).cloned();
    let matches = expected_seq.as_u64().is_some()
        && last_seq.as_ref().and_then(Value::as_u64) == expected_seq.as_u64()
        && expected_hmac.as_str().is_some()
        && last_hmac.as_ref().and_then(Value::as_str) == expected_hmac.as_str();
    if matches {
        return None;
    }
    let ends = match last_seq.as_ref().and_then(Value::as_u64) {
        Some(seq) => format!("it ends at seq={seq}"),
        None => "it has no readable last record".to_owned(),
    };
    broken(format!(
        "previous file {name} does not end with seq={} and the recorded hmac ({ends})",
        expected_seq
    ))
}

// ---- checking a key against a log ---------------------------------------------

/// Whether `key` verifies the HMAC of the last complete record of the log
/// at `path` (used to accept a key recovered from the reference's legacy
/// key file, AUDIT.md §7.4). `Ok(None)`: the log is missing or has no
/// complete record. `Err`: it cannot be read or its last record does not
/// parse (one line).
pub fn last_record_verifies(path: &Path, key: &AuditKey) -> Result<Option<bool>, String> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let Some(line) = last_complete_line(&mut file)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
    else {
        return Ok(None);
    };
    let mut record = parse_line(line.strip_suffix(b"\r").unwrap_or(&line)).map_err(|e| {
        format!(
            "the last record of {} cannot be parsed: {e}",
            path.display()
        )
    })?;
    let Some(Value::String(stored)) = record.remove("hmac") else {
        return Ok(Some(false));
    };
    Ok(Some(match canonical(&Value::Object(record)) {
        Ok(text) => key.verify_hex(text.as_bytes(), &stored),
        Err(_) => false,
    }))
}
