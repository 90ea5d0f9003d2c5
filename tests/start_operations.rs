//! `autogpt-shim start --session-id` serving operations end to end: the
//! real binary in an isolated home, driven through the platform emulator.
//! File operations round trip to disk and to the audit log; the jail refuses
//! escapes without touching anything outside the root; the shell switch is
//! honoured; admission refuses what exceeds `max_concurrent` while PING
//! still answers; the command limits refuse at once, count a command when
//! it is admitted and never hold up file operations; malformed frames and
//! ids over the length bound are answered or dropped as PROTOCOL.md §2.4
//! says; SIGTERM with commands in flight ends them and stops cleanly.
//! Every test also checks that the access token leaks nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use autogpt_shim_emulator::{Conn, Ending, HelloAck, RawKind, RawMessage};
use base64::Engine as _;
use rustix::process::Signal;
use serde_json::{Value, json};
use start_support::*;

/// The shell warning `start` prints when `--enable-shell` is given.
const SHELL_WARNING: &str =
    "WARNING: shell commands are enabled; they can access everything your user account can.";

// ---------------------------------------------------------------- helpers

/// A shim started with `extra` and connected with `ack`.
fn session(home: &Home, extra: &[&str], ack: HelloAck) -> (Shim, Conn, Value) {
    let emulator = emulator();
    let shim = Shim::start(home, &emulator, extra);
    let (conn, hello) = connect(&emulator, ack);
    (shim, conn, hello)
}

/// A shim serving `files` only (the default without `--enable-shell`).
fn files_session(home: &Home) -> (Shim, Conn) {
    let (shim, conn, _) = session(home, &[], HelloAck::new().grant(["files"]));
    (shim, conn)
}

/// The single audit record written for request `id`.
fn record_of(home: &Home, id: &str) -> Value {
    let found: Vec<Value> = home
        .records()
        .into_iter()
        .filter(|r| r["request_id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "records for {id}: {found:?}");
    found.into_iter().next().unwrap()
}

/// Checks the record of a successful operation `op` for request `id` and
/// returns its `details`.
fn ok_record(home: &Home, id: &str, op: &str) -> Value {
    let record = record_of(home, id);
    assert_eq!(record["op"], op, "{record}");
    assert_eq!(record["session_id"], SESSION, "{record}");
    assert_eq!(record["machine_id"], "machine-e2e", "{record}");
    assert_eq!(record["result"]["ok"], true, "{record}");
    assert_eq!(record["result"]["error_code"], Value::Null, "{record}");
    record["details"].clone()
}

/// An `ACK {ok: true}` with the full capacity of an idle connection.
fn assert_ack(response: &Value) {
    assert_eq!(response["type"], "ACK", "{response}");
    assert_eq!(response["payload"], json!({"ok": true}), "{response}");
    assert_eq!(response["pending_capacity"], 4, "{response}");
}

/// An `ERROR` with `code`; returns the payload.
fn assert_error(response: &Value, code: &str) -> Value {
    assert_eq!(response["type"], "ERROR", "{response}");
    assert_eq!(response["payload"]["code"], code, "{response}");
    assert_eq!(response["payload"]["fatal"], false, "{response}");
    response["payload"].clone()
}

/// Neither the shim's output nor any file of the home holds the token.
fn assert_no_token(home: &Home, shim: &Shim) {
    assert!(
        !shim.output().contains(ACCESS),
        "the access token is in the shim's output"
    );
    assert!(
        !home.all_text().contains(ACCESS),
        "the access token is in a file of the home"
    );
    assert!(!shim.output().contains(REFRESH));
    assert!(!home.all_text().contains(REFRESH));
}

/// SIGTERM, exit 0, a verifying audit log, no token anywhere.
fn stop(home: &Home, mut shim: Shim) {
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert!(
        shim.stdout.text().contains("Shim stopped."),
        "{}",
        shim.output()
    );
    let ops = home.ops();
    assert_eq!(
        ops[ops.len() - 2..],
        ["WS_DISCONNECTED", "SHIM_STOP"],
        "{ops:?}"
    );
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    assert_no_token(home, &shim);
}

/// Every JSON frame the shim sent on `conn` after its HELLO, except
/// `STATUS` frames.
fn frames_after_hello(conn: &Conn) -> Vec<Value> {
    conn.raw_frames()
        .iter()
        .filter(|f| matches!(f.kind, RawKind::Text | RawKind::Binary))
        .map(|f| serde_json::from_slice::<Value>(&f.data).unwrap())
        .filter(|v| v["type"] != "HELLO" && v["type"] != "STATUS")
        .collect()
}

/// The process state letter of `/proc/<pid>/stat`, `None` when the process
/// no longer exists.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S …`: the command name may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Live (not zombie, not dead) processes whose process group is `pgid`.
fn live_group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        // After the name: state, ppid, pgrp, …
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let state = fields[0].chars().next().unwrap_or('?');
        let group: i32 = fields[2].parse().unwrap_or(-1);
        if group == pgid && !matches!(state, 'Z' | 'X' | 'x') {
            live.push((pid, state));
        }
    }
    live
}

/// A workspace plus a sibling `outside` directory holding a canary file.
fn home_with_canary() -> (Home, std::path::PathBuf) {
    let home = Home::new();
    let outside = home.path().canonicalize().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("canary.txt"), b"canary: do not touch\n").unwrap();
    (home, outside)
}

/// The canary is intact and nothing else appeared outside the root.
fn assert_outside_untouched(outside: &Path) {
    assert_eq!(
        std::fs::read(outside.join("canary.txt")).unwrap(),
        b"canary: do not touch\n"
    );
    let names: Vec<String> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["canary.txt"], "something was created outside");
}

/// The `result` of a record of a request refused with `code` before it ran.
fn refused_result(code: &str) -> Value {
    json!({"ok": false, "exit_code": null, "duration_ms": 0, "error_code": code})
}

/// Sends each request, expects `PATH_OUTSIDE_ALLOWED_ROOT`, and checks
/// that exactly these refusals were recorded, as `JAIL_VIOLATION`s with a
/// null `request_id` and the path as sent.
fn assert_all_refused(home: &Home, conn: &Conn, requests: &[(&str, Value, &str)]) {
    for (message_type, payload, _) in requests {
        let (id, response) = call(conn, message_type, payload.clone());
        let error = assert_error(&response, "PATH_OUTSIDE_ALLOWED_ROOT");
        assert_eq!(response["id"], id.as_str());
        assert_eq!(response["pending_capacity"], 4, "{response}");
        assert!(error["message"].is_string(), "{response}");
    }
    let records = home.records();
    let ops: Vec<&str> = records.iter().map(|r| r["op"].as_str().unwrap()).collect();
    let mut expected = vec!["SHIM_START", "WS_CONNECTED", "CONFIG_RELOADED"];
    expected.extend(requests.iter().map(|_| "JAIL_VIOLATION"));
    assert_eq!(ops, expected, "no operation record may be written");
    for ((message_type, _, path), record) in requests.iter().zip(&records[3..]) {
        assert_eq!(record["request_id"], Value::Null, "{record}");
        assert_eq!(record["session_id"], SESSION, "{record}");
        assert_eq!(
            record["details"],
            json!({"code": "PATH_OUTSIDE_ALLOWED_ROOT", "path": path, "attempted_op": message_type}),
            "{record}"
        );
        assert_eq!(
            record["result"],
            refused_result("PATH_OUTSIDE_ALLOWED_ROOT"),
            "{record}"
        );
    }
}

// ------------------------------------------------------- file operations

#[test]
fn file_write_with_create_parents_creates_the_tree_and_is_audited() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    let (id, ack) = call(
        &conn,
        "FILE_WRITE",
        json!({"path": "docs/sub/notes.txt", "content": "hello\nwörld\n", "create_parents": true}),
    );
    assert_ack(&ack);
    let target = home.root.join("docs/sub/notes.txt");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello\nwörld\n");
    assert!(home.root.join("docs/sub").is_dir());
    let details = ok_record(&home, &id, "FILE_WRITE");
    assert_eq!(
        details,
        json!({"path": target.to_str().unwrap(), "encoding": "utf-8",
               "create_parents": true, "size_bytes_written": 13})
    );

    // A second write replaces the content (last write wins).
    let (id, ack) = call(
        &conn,
        "FILE_WRITE",
        json!({"path": "docs/sub/notes.txt", "content": "v2"}),
    );
    assert_ack(&ack);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "v2");
    assert_eq!(ok_record(&home, &id, "FILE_WRITE")["create_parents"], false);

    // Without create_parents a missing parent is PATH_NOT_FOUND.
    let (id, response) = call(
        &conn,
        "FILE_WRITE",
        json!({"path": "nowhere/x.txt", "content": "x"}),
    );
    assert_error(&response, "PATH_NOT_FOUND");
    assert!(!home.root.join("nowhere").exists());
    let record = record_of(&home, &id);
    assert_eq!(record["op"], "FILE_WRITE");
    assert_eq!(record["result"]["ok"], false);
    assert_eq!(record["result"]["error_code"], "PATH_NOT_FOUND");
    assert_eq!(record["details"]["size_bytes_written"], 0);
    stop(&home, shim);
}

#[test]
fn file_read_returns_utf8_and_base64_content_of_files_on_disk() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    std::fs::write(home.root.join("text.txt"), "a,b\n1,2\n").unwrap();
    let binary: Vec<u8> = vec![0x00, 0xff, 0x10, 0x80, b'\n', 0xc3];
    let encoded = base64::engine::general_purpose::STANDARD.encode(&binary);

    let (id, contents) = call(&conn, "FILE_READ", json!({"path": "text.txt"}));
    assert_eq!(contents["type"], "FILE_CONTENTS", "{contents}");
    assert_eq!(
        contents["payload"],
        json!({"content": "a,b\n1,2\n", "encoding": "utf-8", "size_bytes": 8, "truncated": false})
    );
    assert_eq!(contents["pending_capacity"], 4);
    let details = ok_record(&home, &id, "FILE_READ");
    assert_eq!(
        details,
        json!({"path": home.root.join("text.txt").to_str().unwrap(), "encoding": "utf-8",
               "offset": 0, "length": null, "size_bytes_returned": 8})
    );

    // Binary content written as base64 lands on disk byte for byte…
    let (_, ack) = call(
        &conn,
        "FILE_WRITE",
        json!({"path": "blob.bin", "content": encoded, "encoding": "base64"}),
    );
    assert_ack(&ack);
    assert_eq!(std::fs::read(home.root.join("blob.bin")).unwrap(), binary);
    // …and reads back as the same base64.
    let (id, contents) = call(
        &conn,
        "FILE_READ",
        json!({"path": "blob.bin", "encoding": "base64"}),
    );
    assert_eq!(contents["type"], "FILE_CONTENTS", "{contents}");
    assert_eq!(
        contents["payload"],
        json!({"content": encoded, "encoding": "base64", "size_bytes": 6, "truncated": false})
    );
    let details = ok_record(&home, &id, "FILE_READ");
    assert_eq!(details["encoding"], "base64");
    assert_eq!(details["size_bytes_returned"], 6);

    // A bounded range reports truncation.
    let (_, contents) = call(
        &conn,
        "FILE_READ",
        json!({"path": "text.txt", "offset": 4, "length": 2}),
    );
    assert_eq!(
        contents["payload"],
        json!({"content": "1,", "encoding": "utf-8", "size_bytes": 2, "truncated": true})
    );

    // Content is never logged.
    let log = std::fs::read_to_string(&home.audit).unwrap();
    assert!(!log.contains("a,b"), "{log}");
    assert!(!log.contains(&encoded), "{log}");
    stop(&home, shim);
}

#[test]
fn file_stat_reports_a_file_a_directory_and_a_missing_path() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    let file = home.root.join("data.csv");
    std::fs::write(&file, "a,b\n").unwrap();
    let meta = std::fs::metadata(&file).unwrap();

    let (id, stat) = call(&conn, "FILE_STAT", json!({"path": "data.csv"}));
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    let p = &stat["payload"];
    assert_eq!(p["exists"], true, "{stat}");
    assert_eq!(p["is_file"], true);
    assert_eq!(p["is_dir"], false);
    assert_eq!(p["is_symlink"], false);
    assert_eq!(p["size_bytes"], 4);
    assert_eq!(p["mode"], format!("{:04o}", meta.mode() & 0o7777));
    assert_eq!(p["owner_uid"], meta.uid());
    assert_eq!(p["owner_gid"], meta.gid());
    assert_eq!(p["mime_type"], "text/csv");
    assert_eq!(p["path"], file.to_str().unwrap());
    assert!(p["mtime"].is_f64() && p["ctime"].is_f64(), "{stat}");
    assert_eq!(
        ok_record(&home, &id, "FILE_STAT"),
        json!({"path": file.to_str().unwrap(), "follow_symlinks": true})
    );

    let (_, stat) = call(&conn, "FILE_STAT", json!({"path": "."}));
    assert_eq!(stat["payload"]["is_dir"], true, "{stat}");
    assert_eq!(stat["payload"]["path"], home.root.to_str().unwrap());

    let (id, stat) = call(&conn, "FILE_STAT", json!({"path": "missing.txt"}));
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    assert_eq!(
        stat["payload"],
        json!({"exists": false, "is_file": null, "is_dir": null, "is_symlink": null,
               "size_bytes": null, "mtime": null, "ctime": null, "mode": null,
               "owner_uid": null, "owner_gid": null, "mime_type": null, "path": null})
    );
    // Not existing is a successful stat.
    ok_record(&home, &id, "FILE_STAT");
    stop(&home, shim);
}

#[test]
fn file_list_returns_sorted_entries_flat_and_recursive() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    let base = home.root.join("proj");
    std::fs::create_dir_all(base.join("src")).unwrap();
    std::fs::write(base.join("b.txt"), "bb").unwrap();
    std::fs::write(base.join("a.csv"), "a").unwrap();
    std::fs::write(base.join(".hidden"), "h").unwrap();
    std::fs::write(base.join("src/main.rs"), "fn main() {}\n").unwrap();
    let base_str = base.to_str().unwrap();

    let (id, list) = call(&conn, "FILE_LIST", json!({"path": "proj"}));
    assert_eq!(list["type"], "FILE_LIST_RESPONSE", "{list}");
    let entries = list["payload"]["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.csv", "b.txt", "src"], "{list}");
    assert_eq!(list["payload"]["truncated"], false);
    let b = &entries[1];
    assert_eq!(b["path"], format!("{base_str}/b.txt"));
    assert_eq!(b["is_file"], true);
    assert_eq!(b["is_dir"], false);
    assert_eq!(b["is_symlink"], false);
    assert_eq!(b["size_bytes"], 2);
    assert!(b["mtime"].is_f64());
    assert_eq!(entries[2]["is_dir"], true);
    assert_eq!(
        ok_record(&home, &id, "FILE_LIST"),
        json!({"path": base_str, "glob": null, "recursive": false,
               "include_hidden": false, "max_entries": 1000, "entries_returned": 3})
    );

    let (id, list) = call(
        &conn,
        "FILE_LIST",
        json!({"path": "proj", "recursive": true, "include_hidden": true}),
    );
    let paths: Vec<&str> = list["payload"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = [".hidden", "a.csv", "b.txt", "src", "src/main.rs"]
        .iter()
        .map(|rel| format!("{base_str}/{rel}"))
        .collect();
    assert_eq!(paths, expected, "{list}");
    assert_eq!(ok_record(&home, &id, "FILE_LIST")["entries_returned"], 5);

    let (_, list) = call(&conn, "FILE_LIST", json!({"path": "proj", "glob": "*.txt"}));
    assert_eq!(list["payload"]["entries"].as_array().unwrap().len(), 1);
    assert_eq!(list["payload"]["entries"][0]["name"], "b.txt");

    let (_, list) = call(
        &conn,
        "FILE_LIST",
        json!({"path": "proj", "max_entries": 2}),
    );
    assert_eq!(list["payload"]["entries"].as_array().unwrap().len(), 2);
    assert_eq!(list["payload"]["truncated"], true);
    stop(&home, shim);
}

#[test]
fn file_move_renames_on_disk_and_refuses_an_existing_destination() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    std::fs::write(home.root.join("a.txt"), "A").unwrap();
    std::fs::write(home.root.join("taken.txt"), "T").unwrap();
    std::fs::create_dir(home.root.join("dir")).unwrap();

    let (id, ack) = call(
        &conn,
        "FILE_MOVE",
        json!({"src": "a.txt", "dst": "dir/b.txt"}),
    );
    assert_ack(&ack);
    assert!(!home.root.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(home.root.join("dir/b.txt")).unwrap(),
        "A"
    );
    assert_eq!(
        ok_record(&home, &id, "FILE_MOVE"),
        json!({"src": home.root.join("a.txt").to_str().unwrap(),
               "dst": home.root.join("dir/b.txt").to_str().unwrap(),
               "overwrite": false})
    );

    let (id, response) = call(
        &conn,
        "FILE_MOVE",
        json!({"src": "dir/b.txt", "dst": "taken.txt"}),
    );
    assert_error(&response, "PATH_EXISTS");
    assert_eq!(
        std::fs::read_to_string(home.root.join("taken.txt")).unwrap(),
        "T"
    );
    assert_eq!(record_of(&home, &id)["result"]["error_code"], "PATH_EXISTS");

    let (id, ack) = call(
        &conn,
        "FILE_MOVE",
        json!({"src": "dir/b.txt", "dst": "taken.txt", "overwrite": true}),
    );
    assert_ack(&ack);
    assert_eq!(
        std::fs::read_to_string(home.root.join("taken.txt")).unwrap(),
        "A"
    );
    assert!(!home.root.join("dir/b.txt").exists());
    assert_eq!(ok_record(&home, &id, "FILE_MOVE")["overwrite"], true);

    // Not idempotent: the source is gone now.
    let (_, response) = call(
        &conn,
        "FILE_MOVE",
        json!({"src": "dir/b.txt", "dst": "again.txt"}),
    );
    assert_error(&response, "PATH_NOT_FOUND");
    stop(&home, shim);
}

#[test]
fn file_delete_removes_files_and_trees_and_refuses_a_non_empty_directory() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    std::fs::write(home.root.join("old.txt"), "x").unwrap();
    std::fs::create_dir_all(home.root.join("tree/deep")).unwrap();
    std::fs::write(home.root.join("tree/deep/f.txt"), "f").unwrap();

    let (id, ack) = call(&conn, "FILE_DELETE", json!({"path": "old.txt"}));
    assert_ack(&ack);
    assert!(!home.root.join("old.txt").exists());
    assert_eq!(
        ok_record(&home, &id, "FILE_DELETE"),
        json!({"path": home.root.join("old.txt").to_str().unwrap(),
               "recursive": false, "missing_ok": false})
    );

    let (_, response) = call(&conn, "FILE_DELETE", json!({"path": "old.txt"}));
    assert_error(&response, "PATH_NOT_FOUND");
    let (id, ack) = call(
        &conn,
        "FILE_DELETE",
        json!({"path": "old.txt", "missing_ok": true}),
    );
    assert_ack(&ack);
    ok_record(&home, &id, "FILE_DELETE");

    let (id, response) = call(&conn, "FILE_DELETE", json!({"path": "tree"}));
    assert_error(&response, "PATH_NOT_EMPTY");
    assert!(home.root.join("tree/deep/f.txt").exists());
    assert_eq!(
        record_of(&home, &id)["result"]["error_code"],
        "PATH_NOT_EMPTY"
    );

    let (id, ack) = call(
        &conn,
        "FILE_DELETE",
        json!({"path": "tree", "recursive": true}),
    );
    assert_ack(&ack);
    assert!(!home.root.join("tree").exists());
    assert!(home.root.is_dir(), "the root itself must survive");
    assert_eq!(ok_record(&home, &id, "FILE_DELETE")["recursive"], true);
    stop(&home, shim);
}

// ------------------------------------------------------------------ jail

#[test]
fn jail_refuses_a_parent_directory_escape_and_touches_nothing_outside() {
    let (home, outside) = home_with_canary();
    let (shim, conn) = files_session(&home);
    assert_all_refused(
        &home,
        &conn,
        &[
            (
                "FILE_WRITE",
                json!({"path": "../outside/canary.txt", "content": "overwritten"}),
                "../outside/canary.txt",
            ),
            (
                "FILE_WRITE",
                json!({"path": "../outside/new/file.txt", "content": "x", "create_parents": true}),
                "../outside/new/file.txt",
            ),
            (
                "FILE_WRITE",
                json!({"path": "fresh/../../outside/new.txt", "content": "x", "create_parents": true}),
                "fresh/../../outside/new.txt",
            ),
            (
                "FILE_READ",
                json!({"path": "../outside/canary.txt"}),
                "../outside/canary.txt",
            ),
            (
                "FILE_DELETE",
                json!({"path": "../outside/canary.txt"}),
                "../outside/canary.txt",
            ),
            (
                "FILE_MOVE",
                json!({"src": "../outside/canary.txt", "dst": "stolen.txt"}),
                "../outside/canary.txt -> stolen.txt",
            ),
        ],
    );
    assert_outside_untouched(&outside);
    // The refused create_parents write materialized nothing inside either.
    assert!(!home.root.join("fresh").exists());
    assert!(!home.root.join("stolen.txt").exists());
    stop(&home, shim);
}

#[test]
fn jail_refuses_absolute_paths_outside_the_root_and_touches_nothing_outside() {
    let (home, outside) = home_with_canary();
    // A sibling whose name starts with the root's name.
    let sibling = format!("{}2", home.root.display());
    std::fs::create_dir(&sibling).unwrap();
    let (shim, conn) = files_session(&home);
    let canary = outside.join("canary.txt");
    let canary = canary.to_str().unwrap();
    let fresh = outside.join("fresh.txt");
    let fresh = fresh.to_str().unwrap();
    let in_sibling = format!("{sibling}/x.txt");
    assert_all_refused(
        &home,
        &conn,
        &[
            (
                "FILE_WRITE",
                json!({"path": canary, "content": "overwritten"}),
                canary,
            ),
            ("FILE_WRITE", json!({"path": fresh, "content": "x"}), fresh),
            (
                "FILE_WRITE",
                json!({"path": in_sibling, "content": "x"}),
                &in_sibling,
            ),
            ("FILE_READ", json!({"path": "/etc/passwd"}), "/etc/passwd"),
            ("FILE_STAT", json!({"path": canary}), canary),
            (
                "FILE_LIST",
                json!({"path": outside.to_str().unwrap()}),
                outside.to_str().unwrap(),
            ),
            ("FILE_DELETE", json!({"path": canary}), canary),
        ],
    );
    assert_outside_untouched(&outside);
    assert_eq!(std::fs::read_dir(&sibling).unwrap().count(), 0);
    stop(&home, shim);
}

#[test]
fn jail_refuses_symlinks_inside_the_root_that_point_outside() {
    let (home, outside) = home_with_canary();
    std::os::unix::fs::symlink(&outside, home.root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("canary.txt"), home.root.join("canary-link")).unwrap();
    // A dangling link whose target would be created outside (JAIL.md D3).
    std::os::unix::fs::symlink(outside.join("planted.txt"), home.root.join("dangling")).unwrap();
    std::fs::write(home.root.join("notes.txt"), "inside").unwrap();
    let (shim, conn) = files_session(&home);
    assert_all_refused(
        &home,
        &conn,
        &[
            (
                "FILE_READ",
                json!({"path": "link/canary.txt"}),
                "link/canary.txt",
            ),
            ("FILE_READ", json!({"path": "canary-link"}), "canary-link"),
            (
                "FILE_WRITE",
                json!({"path": "canary-link", "content": "overwritten"}),
                "canary-link",
            ),
            (
                "FILE_WRITE",
                json!({"path": "link/new.txt", "content": "x"}),
                "link/new.txt",
            ),
            (
                "FILE_WRITE",
                json!({"path": "dangling", "content": "x"}),
                "dangling",
            ),
            ("FILE_LIST", json!({"path": "link"}), "link"),
            (
                "FILE_DELETE",
                json!({"path": "link/canary.txt"}),
                "link/canary.txt",
            ),
            (
                "FILE_MOVE",
                json!({"src": "notes.txt", "dst": "link/notes.txt"}),
                "notes.txt -> link/notes.txt",
            ),
        ],
    );
    assert_outside_untouched(&outside);
    // The links themselves are left as they were.
    assert!(home.root.join("link").is_symlink());
    assert!(home.root.join("canary-link").is_symlink());
    assert!(home.root.join("dangling").is_symlink());
    assert_eq!(
        std::fs::read_to_string(home.root.join("notes.txt")).unwrap(),
        "inside"
    );
    stop(&home, shim);
}

#[test]
fn hard_links_to_the_shims_own_files_are_refused() {
    let home = Home::new();
    std::fs::hard_link(
        home.secrets_dir().join("tokens.enc"),
        home.root.join("innocent.bin"),
    )
    .unwrap();
    let (shim, conn) = files_session(&home);
    // The audit log exists once the shim has started.
    std::fs::hard_link(&home.audit, home.root.join("notes.log")).unwrap();
    let before = std::fs::read(home.secrets_dir().join("tokens.enc")).unwrap();
    assert_all_refused(
        &home,
        &conn,
        &[
            ("FILE_READ", json!({"path": "innocent.bin"}), "innocent.bin"),
            (
                "FILE_WRITE",
                json!({"path": "innocent.bin", "content": "x"}),
                "innocent.bin",
            ),
            ("FILE_STAT", json!({"path": "notes.log"}), "notes.log"),
            ("FILE_READ", json!({"path": "notes.log"}), "notes.log"),
            ("FILE_DELETE", json!({"path": "notes.log"}), "notes.log"),
        ],
    );
    assert_eq!(
        std::fs::read(home.secrets_dir().join("tokens.enc")).unwrap(),
        before
    );
    assert!(home.root.join("notes.log").exists());
    stop(&home, shim);
}

// ----------------------------------------------------------------- shell

#[test]
fn shell_off_is_not_advertised_and_a_command_is_refused_without_running() {
    let home = Home::new();
    let (shim, conn, hello) = session(&home, &[], HelloAck::new().grant(["files"]));
    assert_eq!(hello["payload"]["capabilities"], json!(["files"]));
    let marker = home.root.join("marker");
    let (id, response) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"command": format!("touch '{}'", marker.display())}),
    );
    let error = assert_error(&response, "CAPABILITY_NOT_GRANTED");
    assert_eq!(
        error["details"],
        json!({"required_capability": "shell", "granted_capabilities": ["files"]})
    );
    assert_eq!(response["id"], id.as_str());
    assert_eq!(response["pending_capacity"], 4);
    // A later round trip: nothing is running behind the refusal.
    let (_, stat) = call(&conn, "FILE_STAT", json!({"path": "marker"}));
    assert_eq!(stat["payload"]["exists"], false, "{stat}");
    assert!(!marker.exists());
    assert!(
        home.records()
            .iter()
            .all(|r| r["request_id"] != id.as_str()),
        "a refused command leaves no record"
    );
    assert!(!home.ops().contains(&"EXECUTE_COMMAND".to_owned()));
    assert!(
        !shim.stdout.text().contains(SHELL_WARNING),
        "{}",
        shim.output()
    );
    stop(&home, shim);
}

#[test]
fn shell_on_but_not_granted_refuses_a_command_without_running() {
    let home = Home::new();
    let (shim, conn, hello) = session(&home, &["--enable-shell"], HelloAck::new().grant(["files"]));
    assert_eq!(hello["payload"]["capabilities"], json!(["shell", "files"]));
    let (_, response) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"argv": ["touch", "marker"]}),
    );
    let error = assert_error(&response, "CAPABILITY_NOT_GRANTED");
    assert_eq!(
        error["details"],
        json!({"required_capability": "shell", "granted_capabilities": ["files"]})
    );
    let (_, stat) = call(&conn, "FILE_STAT", json!({"path": "marker"}));
    assert_eq!(stat["payload"]["exists"], false, "{stat}");
    assert!(!home.ops().contains(&"EXECUTE_COMMAND".to_owned()));
    stop(&home, shim);
}

#[test]
fn shell_on_runs_a_command_returns_its_output_and_audits_it() {
    let home = Home::new();
    let (shim, conn, hello) = session(
        &home,
        &["--enable-shell"],
        HelloAck::new().grant(["files", "shell"]),
    );
    assert_eq!(hello["payload"]["capabilities"], json!(["shell", "files"]));
    assert!(
        shim.stdout.text().contains(SHELL_WARNING),
        "{}",
        shim.output()
    );
    let (id, result) = call(&conn, "EXECUTE_COMMAND", json!({"command": "echo hello"}));
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    let p = &result["payload"];
    assert_eq!(p["stdout"], "hello\n", "{result}");
    assert_eq!(p["stderr"], "", "{result}");
    assert_eq!(p["exit_code"], 0);
    assert_eq!(p["timed_out"], false);
    assert_eq!(p["output_truncated"], false);
    assert!(p["duration_seconds"].is_number(), "{result}");
    assert_eq!(result["pending_capacity"], 4);

    let details = ok_record(&home, &id, "EXECUTE_COMMAND");
    assert_eq!(details["command"], "echo hello");
    assert_eq!(details["argv"], Value::Null);
    assert_eq!(details["shell"], "auto");
    assert_eq!(details["cwd"], home.root.to_str().unwrap());
    assert_eq!(details["timeout_seconds"], 30);
    let keys: Vec<&str> = details["env_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "env_keys are sorted");
    assert!(keys.contains(&"PATH") && keys.contains(&"PYTHONIOENCODING"));
    let record = record_of(&home, &id);
    assert_eq!(record["result"]["exit_code"], 0);

    // A failing command is a result, not an error; its record is not ok.
    let (id, result) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"argv": ["sh", "-c", "echo oops >&2; exit 3"]}),
    );
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    assert_eq!(result["payload"]["stderr"], "oops\n");
    assert_eq!(result["payload"]["exit_code"], 3);
    let record = record_of(&home, &id);
    assert_eq!(record["op"], "EXECUTE_COMMAND");
    assert_eq!(record["result"]["exit_code"], 3);
    // Output is never logged.
    let log = std::fs::read_to_string(&home.audit).unwrap();
    assert!(!log.contains("oops\\n"), "{log}");
    stop(&home, shim);
}

// -------------------------------------------------------------- overload

/// A shim with the shell on and `max_concurrent` raised to `slots` both
/// locally and in the ack; `env` adds settings.
fn shell_session(home: &Home, slots: u32, env: &[(&str, &str)]) -> (Shim, Conn) {
    let emulator = emulator();
    let slots_text = slots.to_string();
    let mut env = env.to_vec();
    // The platform can only lower the local ceiling (default 4).
    env.push(("AUTOGPT_SHIM_MAX_CONCURRENT", &slots_text));
    let shim = Shim::start_with_env(home, &emulator, &env, &["--enable-shell"]);
    let (conn, _) = connect(
        &emulator,
        HelloAck::new()
            .grant(["files", "shell"])
            .max_concurrent(i64::from(slots)),
    );
    (shim, conn)
}

/// True while no blocked command has been released or has finished.
fn commands_still_blocked(home: &Home, conn: &Conn) -> bool {
    !home.root.join("release").exists()
        && frames_after_hello(conn)
            .iter()
            .all(|f| f["type"] != "COMMAND_RESULT")
}

/// Releases the blocked commands and checks each one's result and record.
fn release_blocked_commands(home: &Home, conn: &Conn, ids: &[String]) {
    std::fs::write(home.root.join("release"), b"").unwrap();
    for id in ids {
        let result = conn
            .wait_response(id, WAIT)
            .unwrap_or_else(|| panic!("no COMMAND_RESULT for {id}"));
        assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
        assert_eq!(result["payload"]["exit_code"], 0, "{result}");
        ok_record(home, id, "EXECUTE_COMMAND");
    }
}

/// Checks the refusal of a command by a machine-wide command limit: the
/// exact message, no details, and its record (EXECUTE_COMMAND, duration 0).
fn assert_command_limit_refusal(home: &Home, id: &str, response: &Value, message: &str) {
    let error = assert_error(response, "SHIM_OVERLOADED");
    assert_eq!(error["message"], message, "{response}");
    assert_eq!(error["details"], Value::Null, "{response}");
    let record = record_of(home, id);
    assert_eq!(record["op"], "EXECUTE_COMMAND", "{record}");
    assert_eq!(
        record["result"],
        refused_result("SHIM_OVERLOADED"),
        "{record}"
    );
}

#[test]
fn overload_refuses_the_eleventh_request_while_ping_still_answers() {
    let home = Home::new();
    let (shim, conn) = shell_session(&home, 10, &[]);
    let ids = start_blocked_commands(&conn, &home.root, 10);

    let (id, overloaded) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"command": "touch eleventh"}),
    );
    let error = assert_error(&overloaded, "SHIM_OVERLOADED");
    assert_eq!(
        error["details"],
        json!({"max_concurrent": 10}),
        "{overloaded}"
    );
    assert_eq!(overloaded["pending_capacity"], 0, "{overloaded}");
    let ping = conn.ping().unwrap();
    let pong = conn.wait_response(&ping, WAIT).expect("no PONG while busy");
    assert_eq!(pong["type"], "PONG", "{pong}");
    assert_eq!(pong["pending_capacity"], Value::Null);
    // Both answers came while all ten were still blocked.
    assert!(
        commands_still_blocked(&home, &conn),
        "a command finished before the release"
    );

    release_blocked_commands(&home, &conn, &ids);
    assert!(!home.root.join("eleventh").exists());
    assert!(
        home.records()
            .iter()
            .all(|r| r["request_id"] != id.as_str()),
        "the refused request leaves no record"
    );
    // The saturated connection announced its free capacity (§9.2).
    assert!(
        eventually(WAIT, || !conn.statuses().is_empty()),
        "no STATUS after a saturated connection drained"
    );
    assert_eq!(conn.statuses()[0]["payload"]["max_concurrent"], 10);
    stop(&home, shim);
}

#[test]
fn eleventh_concurrent_command_is_refused_at_once_with_a_large_request_pool() {
    let home = Home::new();
    let (shim, conn) = shell_session(&home, 16, &[]);
    let ids = start_blocked_commands(&conn, &home.root, 10);

    let id = conn
        .request("EXECUTE_COMMAND", json!({"command": "touch eleventh"}))
        .unwrap();
    let refused = response_within(&conn, &id, Duration::from_secs(5));
    assert!(
        commands_still_blocked(&home, &conn),
        "the refusal waited for a running command"
    );
    assert_command_limit_refusal(&home, &id, &refused, "Concurrent command limit exceeded.");
    assert!(!home.root.join("eleventh").exists());

    release_blocked_commands(&home, &conn, &ids);
    // A slot freed by a finished command is usable again.
    let (again, result) = call(&conn, "EXECUTE_COMMAND", json!({"command": "true"}));
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    ok_record(&home, &again, "EXECUTE_COMMAND");
    stop(&home, shim);
}

#[test]
fn rate_window_counts_a_command_when_it_is_admitted() {
    let home = Home::new();
    // Eleven a minute: the ten running ones and the refused eleventh use
    // the whole window as soon as they are admitted.
    let (shim, conn) = shell_session(&home, 16, &[("AUTOGPT_SHIM_MAX_COMMANDS_PER_MINUTE", "11")]);
    let ids = start_blocked_commands(&conn, &home.root, 10);

    let eleventh = conn
        .request("EXECUTE_COMMAND", json!({"command": "true"}))
        .unwrap();
    let refused = response_within(&conn, &eleventh, Duration::from_secs(5));
    assert_command_limit_refusal(
        &home,
        &eleventh,
        &refused,
        "Concurrent command limit exceeded.",
    );
    let twelfth = conn
        .request("EXECUTE_COMMAND", json!({"command": "true"}))
        .unwrap();
    let limited = response_within(&conn, &twelfth, Duration::from_secs(5));
    assert_command_limit_refusal(
        &home,
        &twelfth,
        &limited,
        "Command rate limit exceeded (11/minute).",
    );
    assert!(
        commands_still_blocked(&home, &conn),
        "a refusal waited for a running command"
    );

    release_blocked_commands(&home, &conn, &ids);
    // Finished commands free their concurrency slot, not their rate slot.
    let (_, still) = call(&conn, "EXECUTE_COMMAND", json!({"command": "true"}));
    assert_eq!(
        still["payload"]["message"], "Command rate limit exceeded (11/minute).",
        "{still}"
    );
    stop(&home, shim);
}

#[test]
fn file_stat_and_ping_are_answered_while_ten_commands_run() {
    let home = Home::new();
    let (shim, conn) = shell_session(&home, 16, &[]);
    let ids = start_blocked_commands(&conn, &home.root, 10);

    let stats: Vec<String> = (0..6)
        .map(|_| {
            conn.request("FILE_STAT", json!({"path": "started-0"}))
                .unwrap()
        })
        .collect();
    let ping = conn.ping().unwrap();
    for id in &stats {
        let stat = response_within(&conn, id, Duration::from_secs(5));
        assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
        assert_eq!(stat["payload"]["is_file"], true, "{stat}");
    }
    let pong = response_within(&conn, &ping, Duration::from_secs(5));
    assert_eq!(pong["type"], "PONG", "{pong}");
    assert!(
        commands_still_blocked(&home, &conn),
        "the file operations waited for the commands"
    );
    for id in &stats {
        ok_record(&home, id, "FILE_STAT");
    }

    release_blocked_commands(&home, &conn, &ids);
    stop(&home, shim);
}

// ---------------------------------------------------------------- ids

/// A `PING` frame of exactly `len` bytes whose id fills what the envelope
/// leaves.
fn ping_of_length(len: usize) -> (String, String) {
    let overhead = r#"{"type":"PING","id":"","ts":1}"#.len();
    let id = "i".repeat(len - overhead);
    let frame = format!(r#"{{"type":"PING","id":"{id}","ts":1}}"#);
    assert_eq!(frame.len(), len);
    (id, frame)
}

#[test]
fn ping_with_an_id_over_the_bound_is_dropped_and_the_connection_keeps_answering() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    // The largest message the platform may send: its PONG would not fit.
    let (huge, frame) = ping_of_length(16 * 1024 * 1024);
    assert_eq!(huge.len(), 16_777_186);
    conn.send_raw(RawMessage::Text(frame)).unwrap();
    // Ids up to 1,024 bytes are usable; one byte more is not.
    let longest = "l".repeat(1024);
    conn.send(&json!({"type": "PING", "id": longest, "ts": 1.0}))
        .unwrap();
    let too_long = "t".repeat(1025);
    conn.send(&json!({"type": "PING", "id": too_long, "ts": 1.0}))
        .unwrap();
    let pong = response_within(&conn, &longest, WAIT);
    assert_eq!(pong["type"], "PONG", "{}", pong["type"]);

    // Later requests run and are answered on the same connection.
    let (id, ack) = call(
        &conn,
        "FILE_WRITE",
        json!({"path": "after.txt", "content": "answered"}),
    );
    assert_eq!(ack["type"], "ACK", "{ack}");
    ok_record(&home, &id, "FILE_WRITE");
    assert_eq!(
        std::fs::read(home.root.join("after.txt")).unwrap(),
        b"answered"
    );
    let answered: Vec<usize> = frames_after_hello(&conn)
        .iter()
        .map(|f| f["id"].as_str().unwrap().len())
        .collect();
    assert_eq!(answered, [1024, id.len()], "only usable ids are answered");
    assert!(conn.ending().is_none(), "the connection must stay open");
    stop(&home, shim);
}

// ------------------------------------------------------- malformed frames

#[test]
fn malformed_frames_are_answered_or_dropped_and_the_session_keeps_serving() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    // Dropped: not JSON.
    conn.send_raw(RawMessage::Text("this is {not json".into()))
        .unwrap();
    // Dropped: a binary frame that is not UTF-8.
    conn.send_raw(RawMessage::Binary(vec![0xff, 0xfe, b'{', b'}', 0x80]))
        .unwrap();
    // Dropped: an unknown type, even with a usable id.
    conn.send(
        &json!({"type": "FROBNICATE", "id": "unknown-type-1", "ts": 1.0,
                      "version": "1.1", "payload": {}}),
    )
    .unwrap();
    // Answered: a request type with a string id and an unknown payload key.
    conn.send(&json!({"type": "FILE_READ", "id": "bad-field-1", "ts": 1.0,
                      "version": "1.1", "payload": {"path": "x", "surprise": 1}}))
        .unwrap();
    let error = conn
        .wait_response("bad-field-1", WAIT)
        .expect("no ERROR for the invalid request");
    let payload = assert_error(&error, "INTERNAL_ERROR");
    assert!(
        payload["message"].as_str().unwrap().contains("surprise"),
        "the message names the field: {error}"
    );
    assert_eq!(error["pending_capacity"], 4, "{error}");

    // The same connection still serves.
    let (id, stat) = call(&conn, "FILE_STAT", json!({"path": "."}));
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    assert_eq!(stat["payload"]["is_dir"], true);
    ok_record(&home, &id, "FILE_STAT");

    // Nothing else was sent: the three dropped frames got no answer (an
    // answer would have been queued before the FILE_STAT's).
    let frames = frames_after_hello(&conn);
    let seen: Vec<(&str, &str)> = frames
        .iter()
        .map(|f| (f["type"].as_str().unwrap(), f["id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("ERROR", "bad-field-1"),
            ("FILE_STAT_RESPONSE", id.as_str())
        ]
    );
    // Only the FILE_STAT was audited.
    assert_eq!(
        home.ops(),
        ["SHIM_START", "WS_CONNECTED", "CONFIG_RELOADED", "FILE_STAT"]
    );
    assert!(conn.ending().is_none(), "the connection must stay open");
    stop(&home, shim);
}

#[test]
fn a_binary_frame_carrying_a_valid_request_is_served_like_text() {
    let home = Home::new();
    let (shim, conn) = files_session(&home);
    std::fs::write(home.root.join("b.txt"), "via binary").unwrap();
    let frame = json!({"type": "FILE_READ", "id": "binary-1", "ts": 1.0,
                       "version": "1.1", "payload": {"path": "b.txt"}});
    conn.send_raw(RawMessage::Binary(frame.to_string().into_bytes()))
        .unwrap();
    let contents = conn.wait_response("binary-1", WAIT).expect("no response");
    assert_eq!(contents["type"], "FILE_CONTENTS", "{contents}");
    assert_eq!(contents["payload"]["content"], "via binary");
    ok_record(&home, "binary-1", "FILE_READ");
    // The shim answers with text frames only.
    assert!(
        conn.raw_frames().iter().all(|f| f.kind != RawKind::Binary),
        "the shim sent a binary frame"
    );
    stop(&home, shim);
}

// -------------------------------------------------------------- shutdown

#[test]
fn sigterm_with_commands_in_flight_ends_them_and_stops_cleanly() {
    let home = Home::new();
    let (mut shim, conn, _) = session(
        &home,
        &["--enable-shell"],
        HelloAck::new().grant(["files", "shell"]),
    );
    let mut ids = Vec::new();
    for n in 0..2 {
        // `exec` keeps the pid: the recorded pid is the process that sleeps,
        // and the leader of the command's process group.
        let command = format!("echo $$ > pid-{n}.tmp && mv pid-{n}.tmp pid-{n}; exec sleep 300");
        ids.push(
            conn.request("EXECUTE_COMMAND", json!({"command": command}))
                .unwrap(),
        );
    }
    let pid_file = |n: usize| home.root.join(format!("pid-{n}"));
    assert!(
        eventually(WAIT, || pid_file(0).exists() && pid_file(1).exists()),
        "the commands did not start"
    );
    let pids: Vec<i32> = (0..2)
        .map(|n| {
            std::fs::read_to_string(pid_file(n))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    for &pid in &pids {
        assert!(
            matches!(process_state(pid), Some(s) if s != 'Z'),
            "command {pid} is not running"
        );
    }
    assert!(
        eventually(WAIT, || pids.iter().all(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep"))
        })),
        "the commands did not reach their sleep"
    );

    let signalled = Instant::now();
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "stopping took {took:?} with commands in flight"
    );
    assert!(
        shim.stdout.text().contains("Shim stopped."),
        "{}",
        shim.output()
    );

    // The commands and their process groups are gone (a reaped-late zombie
    // counts as gone).
    for &pid in &pids {
        let state = process_state(pid);
        assert!(
            matches!(state, None | Some('Z' | 'X' | 'x')),
            "command {pid} survived the shim: state {state:?}"
        );
        assert_eq!(
            live_group_members(pid),
            [],
            "members of the group {pid} survived the shim"
        );
    }

    // No result was sent for the cancelled commands; the shim closed 1000.
    assert!(
        frames_after_hello(&conn)
            .iter()
            .all(|f| f["type"] != "COMMAND_RESULT"),
        "a COMMAND_RESULT was sent for a cancelled command"
    );
    assert!(
        matches!(
            conn.wait_closed(WAIT),
            Some(Ending::ClosedByShim {
                code: Some(1000),
                ..
            })
        ),
        "{:?}",
        conn.ending()
    );

    let records = home.records();
    let ops = home.ops();
    assert_eq!(
        ops[ops.len() - 2..],
        ["WS_DISCONNECTED", "SHIM_STOP"],
        "{ops:?}"
    );
    assert_eq!(
        records[records.len() - 2]["details"],
        json!({"reason": "clean_exit"})
    );
    assert_eq!(
        records[records.len() - 1]["details"],
        json!({"reason": "graceful"})
    );
    // The cancelled commands are recorded as failed (EXEC.md §12).
    for id in &ids {
        let record = record_of(&home, id);
        assert_eq!(record["op"], "EXECUTE_COMMAND");
        assert_eq!(record["session_id"], SESSION);
        assert_eq!(record["result"]["ok"], false, "{record}");
        assert_eq!(record["result"]["error_code"], "INTERNAL_ERROR", "{record}");
    }
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    assert_no_token(&home, &shim);
}

// ------------------------------------------------------- error details

#[test]
fn file_errors_carry_the_wire_path_the_size_limit_and_a_base64_hint() {
    let home = Home::new();
    let (shim, conn, _) = session(
        &home,
        &[],
        HelloAck::new()
            .grant(["files"])
            .max_file_size_bytes(4_000_000),
    );

    // A path error names the path exactly as it was sent.
    let (_, response) = call(&conn, "FILE_READ", json!({"path": "/etc/passwd"}));
    let error = assert_error(&response, "PATH_OUTSIDE_ALLOWED_ROOT");
    assert_eq!(
        error["details"],
        json!({"path": "/etc/passwd"}),
        "{response}"
    );
    let (_, response) = call(&conn, "FILE_READ", json!({"path": "./missing/../gone.txt"}));
    let error = assert_error(&response, "PATH_NOT_FOUND");
    assert_eq!(
        error["details"]["path"], "./missing/../gone.txt",
        "{response}"
    );

    // A move names both ends.
    std::fs::write(home.root.join("a.txt"), "a").unwrap();
    std::fs::write(home.root.join("b.txt"), "b").unwrap();
    let (_, response) = call(
        &conn,
        "FILE_MOVE",
        json!({"src": "a.txt", "dst": "./b.txt", "overwrite": false}),
    );
    let error = assert_error(&response, "PATH_EXISTS");
    assert_eq!(
        error["details"],
        json!({"src": "a.txt", "dst": "./b.txt", "path": "a.txt -> ./b.txt"}),
        "{response}"
    );

    // A path far over the path limit is quoted only up to 4 KiB, cut on a
    // character boundary, so the answer stays small.
    let long = format!("/{}", "é".repeat(50_000));
    let (_, response) = call(&conn, "FILE_READ", json!({"path": long}));
    let error = assert_error(&response, "PATH_INVALID_CHARS");
    let quoted = error["details"]["path"].as_str().unwrap();
    assert_eq!(quoted.len(), 4095, "{}", error["message"]);
    assert!(long.starts_with(quoted));

    // FILE_TOO_LARGE says which limit, how much and for what.
    let content = "x".repeat(4_000_001);
    let (_, response) = call(
        &conn,
        "FILE_WRITE",
        json!({"path": "big.txt", "content": content}),
    );
    let error = assert_error(&response, "FILE_TOO_LARGE");
    assert_eq!(
        error["details"],
        json!({"max_file_size_bytes": 4_000_000, "attempted_bytes": 4_000_001, "op": "FILE_WRITE"}),
        "{}",
        error["message"]
    );
    assert!(!home.root.join("big.txt").exists());

    // A text read over the text cap, of a file under the byte limit, is
    // told to read it as base64 — which then succeeds.
    std::fs::write(home.root.join("wide.txt"), "y".repeat(3_000_000)).unwrap();
    let (_, response) = call(&conn, "FILE_READ", json!({"path": "wide.txt"}));
    let error = assert_error(&response, "FILE_TOO_LARGE");
    let details = &error["details"];
    assert_eq!(details["max_file_size_bytes"], 4_000_000, "{details}");
    assert_eq!(details["attempted_bytes"], 3_000_000, "{details}");
    assert_eq!(details["op"], "FILE_READ", "{details}");
    assert!(
        details["hint"].as_str().unwrap().contains("\"base64\""),
        "{details}"
    );
    let (_, response) = call(
        &conn,
        "FILE_READ",
        json!({"path": "wide.txt", "encoding": "base64"}),
    );
    assert_eq!(response["type"], "FILE_CONTENTS", "{}", response["type"]);

    // Over the byte limit itself there is no hint: base64 would not help.
    std::fs::write(home.root.join("huge.txt"), "z".repeat(4_000_001)).unwrap();
    let (_, response) = call(&conn, "FILE_READ", json!({"path": "huge.txt"}));
    let error = assert_error(&response, "FILE_TOO_LARGE");
    assert_eq!(
        error["details"],
        json!({"max_file_size_bytes": 4_000_000, "attempted_bytes": 4_000_001, "op": "FILE_READ"}),
        "{}",
        error["message"]
    );
    stop(&home, shim);
}

#[test]
fn command_cwd_errors_carry_the_wire_path() {
    let home = Home::new();
    let (shim, conn, _) = session(
        &home,
        &["--enable-shell"],
        HelloAck::new().grant(["files", "shell"]),
    );
    for (cwd, code) in [
        ("./missing/../gone", "PATH_NOT_FOUND"),
        ("/etc", "PATH_OUTSIDE_ALLOWED_ROOT"),
    ] {
        let (_, response) = call(
            &conn,
            "EXECUTE_COMMAND",
            json!({"argv": ["true"], "cwd": cwd}),
        );
        let error = assert_error(&response, code);
        assert_eq!(error["details"], json!({"path": cwd}), "{response}");
    }
    // A file is no directory, but not a path error either: no details.
    std::fs::write(home.root.join("plain.txt"), "x").unwrap();
    let (_, response) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"argv": ["true"], "cwd": "plain.txt"}),
    );
    let error = assert_error(&response, "INTERNAL_ERROR");
    assert_eq!(error["details"], Value::Null, "{response}");
    stop(&home, shim);
}

// ------------------------------------------------------- error payloads

/// Each way an operation fails, as the real binary answers it: the whole
/// `ERROR` payload (code, message, `details`) and the code its audit
/// record carries.
#[test]
fn operation_failures_keep_their_code_message_details_and_recorded_code() {
    let home = Home::new();
    let (shim, conn, _) = session(
        &home,
        &["--enable-shell"],
        HelloAck::new()
            .grant(["files", "shell"])
            .max_file_size_bytes(16),
    );
    let root = home.root.to_str().unwrap().to_owned();
    std::fs::write(home.root.join("a.txt"), "A").unwrap();
    std::fs::write(home.root.join("taken.txt"), "T").unwrap();
    std::fs::write(home.root.join("big.txt"), "x".repeat(17)).unwrap();
    std::fs::create_dir_all(home.root.join("tree/deep")).unwrap();
    let cases = [
        (
            "FILE_READ",
            json!({"path": "missing.txt"}),
            json!({"code": "PATH_NOT_FOUND", "fatal": false,
                   "message": "missing.txt does not exist",
                   "details": {"path": "missing.txt"}}),
        ),
        (
            "FILE_MOVE",
            json!({"src": "a.txt", "dst": "taken.txt"}),
            json!({"code": "PATH_EXISTS", "fatal": false,
                   "message": format!("{root}/taken.txt already exists"),
                   "details": {"src": "a.txt", "dst": "taken.txt",
                               "path": "a.txt -> taken.txt"}}),
        ),
        (
            "FILE_DELETE",
            json!({"path": "tree"}),
            json!({"code": "PATH_NOT_EMPTY", "fatal": false,
                   "message": format!("{root}/tree: Directory not empty (os error 39)"),
                   "details": {"path": "tree"}}),
        ),
        (
            "FILE_WRITE",
            json!({"path": "new.txt", "content": "y".repeat(17)}),
            json!({"code": "FILE_TOO_LARGE", "fatal": false,
                   "message": "17 bytes exceeds limit 16",
                   "details": {"max_file_size_bytes": 16,
                               "attempted_bytes": 17, "op": "FILE_WRITE"}}),
        ),
        (
            "FILE_READ",
            json!({"path": "big.txt"}),
            json!({"code": "FILE_TOO_LARGE", "fatal": false,
                   "message": "Requested read of 17 bytes exceeds limit 16",
                   "details": {"max_file_size_bytes": 16,
                               "attempted_bytes": 17, "op": "FILE_READ"}}),
        ),
        (
            "EXECUTE_COMMAND",
            json!({"argv": ["true"], "cwd": "nowhere"}),
            json!({"code": "PATH_NOT_FOUND", "fatal": false,
                   "message": "nowhere does not exist",
                   "details": {"path": "nowhere"}}),
        ),
        (
            "EXECUTE_COMMAND",
            json!({"argv": []}),
            json!({"code": "INTERNAL_ERROR", "fatal": false,
                   "message": "argv must not be empty", "details": null}),
        ),
        (
            "EXECUTE_COMMAND",
            json!({"argv": ["no-such-program-here"]}),
            json!({"code": "SHELL_NOT_AVAILABLE", "fatal": false,
                   "message": "Executable not found: no-such-program-here",
                   "details": null}),
        ),
    ];
    let mut differing = Vec::new();
    for (message_type, payload, expected) in cases {
        let (id, response) = call(&conn, message_type, payload.clone());
        assert_eq!(
            response["type"], "ERROR",
            "{message_type} {payload}: {response}"
        );
        if response["payload"] != expected {
            differing.push(format!("{message_type} {payload}: {}", response["payload"]));
        }
        let record = record_of(&home, &id);
        assert_eq!(record["op"], message_type, "{record}");
        assert_eq!(record["result"]["ok"], false, "{record}");
        assert_eq!(record["result"]["error_code"], expected["code"], "{record}");
    }
    assert!(differing.is_empty(), "{differing:#?}");

    // A jail refusal: answered with the jail's code, recorded as a
    // JAIL_VIOLATION carrying the same code.
    let (_, response) = call(&conn, "FILE_READ", json!({"path": "../outside.txt"}));
    let error = assert_error(&response, "PATH_OUTSIDE_ALLOWED_ROOT");
    assert_eq!(
        error["details"],
        json!({"path": "../outside.txt"}),
        "{error}"
    );
    let violation = home
        .records()
        .into_iter()
        .rfind(|r| r["op"] == "JAIL_VIOLATION")
        .expect("a JAIL_VIOLATION record");
    assert_eq!(
        violation["details"],
        json!({"code": "PATH_OUTSIDE_ALLOWED_ROOT", "path": "../outside.txt",
               "attempted_op": "FILE_READ"})
    );
    assert_eq!(
        violation["result"]["error_code"],
        "PATH_OUTSIDE_ALLOWED_ROOT"
    );
    stop(&home, shim);
}
