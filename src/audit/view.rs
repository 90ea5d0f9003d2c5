//! What a person reads of audit records (AUDIT.md §2, §3, §11): the one-line
//! summary `audit tail` prints per record, the local time of a `ts`, the
//! filters `--session` and `--op`, and the names of the operations a log can
//! hold.
//!
//! Records are untrusted text: every value taken from one is escaped and cut
//! to its column with [`clip`] before it is returned, so no control, bidi or
//! other non-printing character of a record reaches a terminal, and no field
//! can stretch a line at will. This module only formats: it never reads a
//! file, never verifies a record and never changes the log.

use serde_json::{Map, Value};

use super::canonical::repr_f64;
use crate::text::clip;
use crate::timefmt::LocalZone;

/// Every `op` a record of this shim or of the reference can carry
/// (AUDIT.md §3.1–§3.3 and `AUDIT_ROTATED` of §9.4): what `--op` accepts.
pub const OPS: [&str; 36] = [
    // Wire operations (§3.1).
    "EXECUTE_COMMAND",
    "FILE_READ",
    "FILE_WRITE",
    "FILE_STAT",
    "FILE_LIST",
    "FILE_DELETE",
    "FILE_MOVE",
    "SCREENSHOT_REQUEST",
    "INPUT_ACTION",
    "CURSOR_POSITION_REQUEST",
    "DISPLAY_INFO_REQUEST",
    "WINDOW_LIST_REQUEST",
    "WINDOW_FOCUS",
    "APP_LIST_REQUEST",
    "APP_LAUNCH",
    "CLIPBOARD_READ",
    "CLIPBOARD_WRITE",
    "PERMISSIONS_CHECK_REQUEST",
    "LOCAL_LLM_COMPLETION",
    // Control-plane operations (§3.2).
    "DIRECTORY_LIST",
    "SESSION_ALLOWED_ROOT_SET",
    "ATTACH_SESSION",
    "ACTIVATE_SESSION",
    "RESTORE_SESSION",
    "DETACH_SESSION",
    "IDLE_SESSION_DETACH",
    // Shim-internal events (§3.3, §9.4).
    "DAEMON_PREFLIGHT_FAILED",
    "SHIM_START",
    "SHIM_STOP",
    "WS_CONNECTED",
    "WS_DISCONNECTED",
    "CONFIG_RELOADED",
    "TOKEN_REFRESHED",
    "SESSION_REVOKED",
    "JAIL_VIOLATION",
    "AUDIT_ROTATED",
];

/// Widest shown session id: a UUID fits whole.
const SESSION_MAX: usize = 36;
/// Column width the session is padded to.
const SESSION_WIDTH: usize = 12;
/// Widest shown `op` (the longest known name has 25 characters).
const OP_MAX: usize = 32;
/// Column width the `op` is padded to.
const OP_WIDTH: usize = 22;
/// Widest shown error code.
const ERROR_CODE_MAX: usize = 40;
/// Column width the result is padded to (`ok exit=0`).
const RESULT_WIDTH: usize = 9;
/// Widest shown path, command or other target.
pub const TARGET_MAX: usize = 60;
/// Widest shown `seq` (an honest one has at most 20 digits).
const SEQ_MAX: usize = 20;
/// Widest shown part of a line that is not a record.
pub const UNPARSEABLE_MAX: usize = 160;

/// The name in [`OPS`] equal to `name` (exact, case included).
pub fn known_op(name: &str) -> Option<&'static str> {
    OPS.iter().copied().find(|op| *op == name)
}

/// Which records to show: all of them, or those of one session and/or one
/// operation (exact matches on `session_id` and `op`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// `--session ID`: `session_id` must equal this (`"-"` selects the
    /// records of no session).
    pub session: Option<String>,
    /// `--op OP`: `op` must equal this.
    pub op: Option<&'static str>,
}

impl Filter {
    /// Whether `record` passes. A record without the field (or with a
    /// value that is not a string) does not match a filter on it.
    pub fn matches(&self, record: &Map<String, Value>) -> bool {
        let is = |field: &str, want: &str| record.get(field).and_then(Value::as_str) == Some(want);
        self.session.as_deref().is_none_or(|s| is("session_id", s))
            && self.op.is_none_or(|op| is("op", op))
    }
}

/// `ts` (seconds since the epoch) as local ISO 8601 with the UTC offset in
/// `zone`: `2024-04-05T21:41:20.000123+02:00`, the fraction rounded to whole
/// microseconds (ties to even) and left out when it is zero, or always left
/// out with `fraction` false. `None` for a time too far from the epoch to
/// count in microseconds.
pub fn local_iso(ts: f64, zone: &LocalZone, fraction: bool) -> Option<String> {
    let micros = (ts * 1e6).round_ties_even();
    // Also refuses NaN and infinities, which no parsed JSON number is.
    if !micros.is_finite() || micros.abs() >= 9.0e18 {
        return None;
    }
    let micros = micros as i64;
    let seconds = micros.div_euclid(1_000_000);
    let sub = micros.rem_euclid(1_000_000);
    let c = zone.civil(seconds);
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    );
    if fraction && sub != 0 {
        text.push_str(&format!(".{sub:06}"));
    }
    let offset = zone.offset_at(seconds);
    let sign = if offset < 0 { '-' } else { '+' };
    let abs = offset.unsigned_abs();
    text.push_str(&format!("{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60));
    // Historic local mean times are offset by seconds too.
    if abs % 60 != 0 {
        text.push_str(&format!(":{:02}", abs % 60));
    }
    Some(text)
}

/// The one line `audit tail` prints for `record`, in columns separated by
/// two spaces: local time (ISO 8601 with offset, whole seconds), `seq`,
/// session, `op`, duration, result and what the operation acted on (see
/// [`target`]), e.g.
///
/// `2024-04-05T21:41:19+02:00      2  sess-7f3a     EXECUTE_COMMAND           124ms  ok exit=0  ls -l`
///
/// A field that is missing shows as `?` (`-` for a missing duration);
/// every shown value is escaped and cut to its column's maximum.
pub fn summary(record: &Map<String, Value>, zone: &LocalZone) -> String {
    let time = record
        .get("ts")
        .and_then(Value::as_f64)
        .and_then(|ts| local_iso(ts, zone, false))
        .unwrap_or_else(|| "?".to_owned());
    let seq = shown(record.get("seq"), SEQ_MAX);
    let session = shown(record.get("session_id"), SESSION_MAX);
    let op = shown(record.get("op"), OP_MAX);
    let result = record.get("result").and_then(Value::as_object);
    let duration = match result.and_then(|r| r.get("duration_ms")) {
        None => "-".to_owned(),
        Some(value) => value.as_u64().map_or_else(|| "?".to_owned(), duration),
    };
    let outcome = result.map_or_else(|| "?".to_owned(), outcome);
    let target = match (record.get("op"), record.get("details")) {
        (Some(Value::String(op)), Some(Value::Object(details))) => target(op, details)
            .map(|t| clip(&t, TARGET_MAX))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let line = format!(
        "{time:<25}  {seq:>5}  {session:<SESSION_WIDTH$}  {op:<OP_WIDTH$}  {duration:>7}  \
         {outcome:<RESULT_WIDTH$}  {target}"
    );
    line.trim_end().to_owned()
}

/// `[unparseable] <the line>` for a line that is not a JSON object, escaped
/// and cut to [`UNPARSEABLE_MAX`] characters.
pub fn unparseable(text: &str) -> String {
    format!("[unparseable] {}", clip(text, UNPARSEABLE_MAX))
}

/// A JSON value as text, escaped and cut to `max`; `?` when absent.
fn shown(value: Option<&Value>, max: usize) -> String {
    value.map_or_else(|| "?".to_owned(), |v| clip(&plain(v), max))
}

/// A JSON value as a person reads it: a string without quotes, a float as
/// the log writes it, anything else as compact JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => n
            .as_f64()
            .and_then(|f| repr_f64(f).ok())
            .unwrap_or_else(|| n.to_string()),
        other => other.to_string(),
    }
}

/// `124ms`, `1.2s`, `5m03s`, `2h07m`: milliseconds, truncated to the unit
/// shown.
fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", ms / 1_000, ms % 1_000 / 100),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// `ok` or `err:<error_code>` (`err` when the code is null), then
/// ` exit=<n>` when the record has an exit code; `?` when `ok` is not a
/// boolean.
fn outcome(result: &Map<String, Value>) -> String {
    let mut text = match result.get("ok") {
        Some(Value::Bool(true)) => "ok".to_owned(),
        Some(Value::Bool(false)) => match result.get("error_code") {
            None | Some(Value::Null) => "err".to_owned(),
            Some(code) => format!("err:{}", clip(&plain(code), ERROR_CODE_MAX)),
        },
        _ => "?".to_owned(),
    };
    if let Some(code) = result.get("exit_code").and_then(Value::as_i64) {
        text.push_str(&format!(" exit={code}"));
    }
    text
}

/// What an operation acted on, from its `details` (AUDIT.md §3), unescaped
/// and uncut: the path of a file operation, `src -> dst` of a move, the
/// command (or the argv, quoted like a shell would need) of a command, the
/// attempted operation and path of a jail violation, the root of a session
/// operation, the URL or reason of a connection event, and so on. `None`
/// when the operation has nothing to show (`TOKEN_REFRESHED`, an unknown
/// `op`) or the field is missing.
pub fn target(op: &str, details: &Map<String, Value>) -> Option<String> {
    let text = |name: &str| details.get(name).and_then(Value::as_str).map(str::to_owned);
    match op {
        "EXECUTE_COMMAND" => text("command").or_else(|| {
            let argv = details.get("argv")?.as_array()?;
            let words: Vec<String> = argv.iter().map(|a| shell_word(&plain(a))).collect();
            Some(words.join(" "))
        }),
        "FILE_READ" | "FILE_WRITE" | "FILE_STAT" | "FILE_LIST" | "FILE_DELETE"
        | "DIRECTORY_LIST" => text("path"),
        "FILE_MOVE" => Some(format!(
            "{} -> {}",
            text("src").unwrap_or_else(|| "?".to_owned()),
            text("dst").unwrap_or_else(|| "?".to_owned())
        )),
        "JAIL_VIOLATION" => {
            let path = text("path")?;
            Some(match text("attempted_op") {
                Some(attempted) => format!("{attempted} {path}"),
                None => path,
            })
        }
        "SESSION_ALLOWED_ROOT_SET" | "ACTIVATE_SESSION" | "RESTORE_SESSION" | "DETACH_SESSION" => {
            text("allowed_root")
        }
        "IDLE_SESSION_DETACH" => details
            .get("idle_seconds")
            .map(|s| format!("idle {}s", plain(s))),
        "WS_CONNECTED" => text("url"),
        "WS_DISCONNECTED" | "SHIM_STOP" | "SESSION_REVOKED" => text("reason"),
        "SHIM_START" => text("shim_version").map(|v| format!("version {v}")),
        "CONFIG_RELOADED" => list(details.get("granted_capabilities")?),
        "DAEMON_PREFLIGHT_FAILED" => {
            list(details.get("missing_permissions")?).map(|missing| format!("missing {missing}"))
        }
        "AUDIT_ROTATED" => {
            let reason = text("reason").unwrap_or_else(|| "?".to_owned());
            Some(match text("previous_file") {
                Some(file) => format!("{reason}, after {file}"),
                None => reason,
            })
        }
        "APP_LAUNCH" => text("bundle_id").or_else(|| text("executable_path")),
        "INPUT_ACTION" => text("action"),
        "CLIPBOARD_READ" | "CLIPBOARD_WRITE" => text("format"),
        "LOCAL_LLM_COMPLETION" => text("model"),
        _ => None,
    }
}

/// The items of a JSON array joined with `, `.
fn list(value: &Value) -> Option<String> {
    let items: Vec<String> = value.as_array()?.iter().map(plain).collect();
    Some(items.join(", "))
}

/// One argv item as a POSIX shell would need it written: as is when it is
/// made of ordinary characters, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain_char = |c: char| c.is_alphanumeric() || "-_./=:,+@%^".contains(c);
    if !word.is_empty() && word.chars().all(plain_char) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn berlin() -> LocalZone {
        LocalZone::from_posix_tz("CET-1CEST,M3.5.0,M10.5.0/3").unwrap()
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn every_known_op_is_listed_once() {
        for op in OPS {
            assert_eq!(OPS.iter().filter(|o| **o == op).count(), 1, "{op}");
            assert_eq!(known_op(op), Some(op));
        }
        assert_eq!(known_op("file_read"), None);
        assert_eq!(known_op("HELLO"), None);
        assert_eq!(known_op(""), None);
    }

    #[test]
    fn local_times_carry_the_offset_in_force_at_that_instant() {
        let zone = berlin();
        // Summer (CEST) and winter (CET).
        assert_eq!(
            local_iso(1712345680.000123, &zone, true).as_deref(),
            Some("2024-04-05T21:34:40.000123+02:00")
        );
        assert_eq!(
            // Exactly 1739064314.98828125 (AUDIT.md §12.4).
            local_iso(f64::from_bits(0x41d9_ea00_febf_4000), &zone, true).as_deref(),
            Some("2025-02-09T02:25:14.988281+01:00")
        );
        // No fraction when it is zero, or when not asked for.
        assert_eq!(
            local_iso(1712345680.0, &zone, true).as_deref(),
            Some("2024-04-05T21:34:40+02:00")
        );
        assert_eq!(
            local_iso(1712345678.999, &zone, false).as_deref(),
            Some("2024-04-05T21:34:38+02:00")
        );
        // Before the epoch, and out of range.
        assert!(local_iso(-0.5, &zone, true).is_some());
        assert_eq!(local_iso(1e300, &zone, true), None);
        let west = LocalZone::from_posix_tz("XST3:30").unwrap();
        assert_eq!(
            local_iso(0.0, &west, false).as_deref(),
            Some("1969-12-31T20:30:00-03:30")
        );
    }

    #[test]
    fn summaries_have_time_seq_session_op_duration_result_and_target() {
        let zone = berlin();
        let record = object(json!({
            "ts": 1712345679.5, "session_id": "sess-7f3a", "op": "EXECUTE_COMMAND",
            "details": {"command": "echo \"café\"\tdone\nls C:\\tmp\u{1} 😀", "argv": null},
            "result": {"ok": true, "exit_code": 0, "duration_ms": 124, "error_code": null},
            "seq": 2,
        }));
        assert_eq!(
            summary(&record, &zone),
            "2024-04-05T21:34:39+02:00      2  sess-7f3a     EXECUTE_COMMAND           124ms  ok exit=0  echo \"café\"\\tdone\\nls C:\\tmp\\u{1} 😀"
        );
        let record = object(json!({
            "ts": 1712345680.0, "session_id": "-", "op": "JAIL_VIOLATION",
            "details": {"code": "PATH_OUTSIDE_ALLOWED_ROOT", "path": "../../etc/passwd", "attempted_op": "FILE_READ"},
            "result": {"ok": false, "exit_code": null, "duration_ms": 0, "error_code": "PATH_OUTSIDE_ALLOWED_ROOT"},
            "seq": 3,
        }));
        assert_eq!(
            summary(&record, &zone),
            "2024-04-05T21:34:40+02:00      3  -             JAIL_VIOLATION              0ms  err:PATH_OUTSIDE_ALLOWED_ROOT  FILE_READ ../../etc/passwd"
        );
        // Nothing to show after the result: no trailing spaces.
        let record = object(json!({
            "ts": 1712345680.0, "session_id": "-", "op": "TOKEN_REFRESHED", "details": {},
            "result": {"ok": true, "exit_code": null, "duration_ms": 0, "error_code": null},
            "seq": 4,
        }));
        assert_eq!(
            summary(&record, &zone),
            "2024-04-05T21:34:40+02:00      4  -             TOKEN_REFRESHED             0ms  ok"
        );
    }

    #[test]
    fn missing_fields_show_as_question_marks_and_a_missing_duration_as_a_dash() {
        let zone = berlin();
        assert_eq!(
            summary(&object(json!({})), &zone),
            format!(
                "{:<25}  {:>5}  {:<12}  {:<22}  {:>7}  ?",
                "?", "?", "?", "?", "-"
            )
        );
        let record = object(json!({"ts": "noon", "result": {"ok": false, "duration_ms": -5}}));
        assert!(summary(&record, &zone).starts_with("?  "));
        assert!(
            summary(&record, &zone).contains("  ?  err"),
            "{}",
            summary(&record, &zone)
        );
    }

    #[test]
    fn durations_are_shown_in_a_readable_unit() {
        assert_eq!(duration(0), "0ms");
        assert_eq!(duration(999), "999ms");
        assert_eq!(duration(1_234), "1.2s");
        assert_eq!(duration(59_999), "59.9s");
        assert_eq!(duration(63_500), "1m03s");
        assert_eq!(duration(7_620_000), "2h07m");
        assert!(duration(u64::MAX).chars().count() < 20);
    }

    #[test]
    fn each_operation_shows_what_it_acted_on() {
        let t = |op: &str, details: Value| target(op, &object(details));
        assert_eq!(
            t("FILE_READ", json!({"path": "/w/a.txt"})).as_deref(),
            Some("/w/a.txt")
        );
        assert_eq!(
            t(
                "FILE_MOVE",
                json!({"src": "/w/a", "dst": "/w/b", "overwrite": false})
            )
            .as_deref(),
            Some("/w/a -> /w/b")
        );
        assert_eq!(
            t(
                "EXECUTE_COMMAND",
                json!({"command": null, "argv": ["ls", "-l", "my file", "it's", ""]})
            )
            .as_deref(),
            Some(r"ls -l 'my file' 'it'\''s' ''")
        );
        assert_eq!(
            t("WS_CONNECTED", json!({"url": "wss://h/ws"})).as_deref(),
            Some("wss://h/ws")
        );
        assert_eq!(
            t("WS_DISCONNECTED", json!({"reason": "clean_exit"})).as_deref(),
            Some("clean_exit")
        );
        assert_eq!(
            t(
                "CONFIG_RELOADED",
                json!({"granted_capabilities": ["files", "shell"]})
            )
            .as_deref(),
            Some("files, shell")
        );
        assert_eq!(
            t(
                "SESSION_ALLOWED_ROOT_SET",
                json!({"previous_allowed_root": null, "allowed_root": "/w"})
            )
            .as_deref(),
            Some("/w")
        );
        assert_eq!(
            t("IDLE_SESSION_DETACH", json!({"idle_seconds": 1800.0})).as_deref(),
            Some("idle 1800.0s")
        );
        assert_eq!(
            t(
                "AUDIT_ROTATED",
                json!({"reason": "size", "previous_file": "audit.log.20240405-194120"})
            )
            .as_deref(),
            Some("size, after audit.log.20240405-194120")
        );
        assert_eq!(
            t(
                "DAEMON_PREFLIGHT_FAILED",
                json!({"missing_permissions": ["accessibility"]})
            )
            .as_deref(),
            Some("missing accessibility")
        );
        assert_eq!(t("TOKEN_REFRESHED", json!({})), None);
        assert_eq!(t("SOMETHING_ELSE", json!({"path": "/x"})), None);
        assert_eq!(t("FILE_READ", json!({"path": null})), None);
    }

    #[test]
    fn hostile_fields_are_escaped_and_cut_to_their_columns() {
        let zone = berlin();
        let hostile = "\u{1b}]0;owned\u{7}\u{9b}2J\u{202e}\u{2066}\u{200b}\n";
        let long_path = format!("/w/{}{hostile}", "d/".repeat(100));
        let record = object(json!({
            "ts": 1712345680.0, "session_id": format!("s{hostile}{}", "x".repeat(100)),
            "op": format!("FILE_READ{hostile}"),
            "details": {"path": long_path},
            "result": {"ok": false, "duration_ms": 1, "error_code": format!("E{hostile}{}", "Y".repeat(100))},
            "seq": hostile,
        }));
        let line = summary(&record, &zone);
        assert!(!line.chars().any(crate::text::is_non_printing), "{line}");
        assert!(line.contains(r"\u{1b}]0;owned\u{7}\u{9b}2J"), "{line}");
        // Only a known op shows its target, and an op with a control
        // character in it is not FILE_READ.
        assert!(!line.contains("/w/d/"), "{line}");
        assert!(
            line.chars().count() < 25 + 20 + 36 + 32 + 7 + 44 + 60 + 14,
            "{line}"
        );
        let record = object(json!({"op": "FILE_READ", "details": {"path": long_path}}));
        let line = summary(&record, &zone);
        let shown = line.rsplit("  ").next().unwrap();
        assert_eq!(shown.chars().count(), TARGET_MAX, "{shown}");
        assert!(
            shown.starts_with("/w/d/d/") && shown.ends_with('…'),
            "{shown}"
        );
        let record =
            object(json!({"op": "FILE_READ", "details": {"path": format!("/w/{hostile}")}}));
        assert!(
            summary(&record, &zone)
                .ends_with(r"/w/\u{1b}]0;owned\u{7}\u{9b}2J\u{202e}\u{2066}\u{200b}\n"),
            "{}",
            summary(&record, &zone)
        );
    }

    #[test]
    fn filters_match_session_and_op_exactly_and_together() {
        let record = object(json!({"session_id": "sess-1", "op": "FILE_READ"}));
        let filter = |session: Option<&str>, op: Option<&'static str>| Filter {
            session: session.map(str::to_owned),
            op,
        };
        assert!(filter(None, None).matches(&record));
        assert!(filter(Some("sess-1"), None).matches(&record));
        assert!(!filter(Some("sess-10"), None).matches(&record));
        assert!(!filter(Some("SESS-1"), None).matches(&record));
        assert!(filter(None, Some("FILE_READ")).matches(&record));
        assert!(filter(Some("sess-1"), Some("FILE_READ")).matches(&record));
        assert!(!filter(Some("sess-1"), Some("FILE_WRITE")).matches(&record));
        assert!(!filter(Some("-"), None).matches(&object(json!({"op": "SHIM_START"}))));
        assert!(!filter(Some("1"), None).matches(&object(json!({"session_id": 1}))));
    }
}
