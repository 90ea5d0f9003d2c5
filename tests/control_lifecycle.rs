//! Persistent machine control end to end (CONTROL.md), through the platform
//! emulator and the real binary: browse, attach, activate, serve in the
//! child, detach, restore; every error code of the area; reconnect
//! invalidation; the child cap; the machine-wide command limit; isolation
//! between chats.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::path::Path;
use std::time::Duration;

use autogpt_shim_emulator::{Conn, ConnKind, Emulator, Ending, HelloAck};
use rustix::process::Signal;
use serde_json::{Value, json};
use start_support::*;

/// Accepts the control connection with the emulator's default ack (it
/// grants everything advertised, `session_id: null`, a connection id).
fn control(emulator: &Emulator) -> (Conn, Value) {
    let (conn, hello) = accept_with(emulator, &HelloAck::new());
    assert_eq!(conn.kind(), &ConnKind::Control, "{}", conn.path());
    (conn, hello)
}

/// Accepts a child's data connection for `session`, granting what it
/// advertised.
fn child(emulator: &Emulator, session: &str) -> (Conn, Value) {
    let (conn, hello) = accept_with(emulator, &HelloAck::new().session_id(session));
    assert_eq!(conn.path(), format!("/ws/local-executor/{session}"));
    (conn, hello)
}

fn call(conn: &Conn, kind: &str, payload: Value) -> Value {
    conn.call(kind, payload, WAIT).unwrap()
}

fn error_code(reply: &Value) -> &str {
    assert_eq!(reply["type"], "ERROR", "{reply}");
    reply["payload"]["code"].as_str().unwrap()
}

fn attach(conn: &Conn, session: &str, browse: &str, reference: &str) -> Value {
    call(
        conn,
        "ATTACH_SESSION",
        json!({"session_id": session, "browse_id": browse, "directory_ref": reference}),
    )
}

/// A home whose directory is the virtual root, with a `project` folder.
fn home_with_project() -> (Home, std::path::PathBuf) {
    let home = Home::new();
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let canonical = home.path().canonicalize().unwrap();
    (home, canonical)
}

fn stop(shim: &mut Shim, home: &Home) {
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let (code, text) = home.verify();
    assert_eq!(code, 0, "{text}");
    assert!(!home.all_text().contains(ACCESS));
    assert!(!shim.output().contains(ACCESS));
}

#[test]
fn full_chat_lifecycle_browse_attach_activate_detach_restore() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &["--enable-shell"]);
    let (conn, hello) = control(&emulator);
    assert_eq!(hello["payload"]["allowed_root"], Value::Null);
    assert_eq!(
        hello["payload"]["capabilities"],
        json!(["shell", "files", "directory_browse"])
    );
    assert!(
        shim.stdout.text().contains("persistent machine control"),
        "{}",
        shim.output()
    );

    // Browse and attach.
    let (browse, project_ref) = reference_to(&conn, &home_path, "project");
    let attached = attach(&conn, "chat-1", &browse, &project_ref);
    assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
    let project = home_path.join("project");
    assert_eq!(
        attached["payload"]["allowed_root"],
        project.to_str().unwrap()
    );
    assert_eq!(attached["payload"]["revision"], 1);
    let grant = attached["payload"]["root_grant"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(grant.starts_with("v1."));
    // The browse is consumed.
    let replay = attach(&conn, "chat-1", &browse, &project_ref);
    assert_eq!(error_code(&replay), "DIRECTORY_REFERENCE_INVALID");

    // Activate: the child connects with the folder as its root.
    let activated = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-1", "revision": 1}),
    );
    assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
    let (data, child_hello) = child(&emulator, "chat-1");
    assert_eq!(
        child_hello["payload"]["allowed_root"],
        project.to_str().unwrap()
    );
    assert_eq!(
        child_hello["payload"]["capabilities"],
        json!(["shell", "files"])
    );
    let wrote = call(
        &data,
        "FILE_WRITE",
        json!({"path": "notes.txt", "content": "from the chat\n"}),
    );
    assert_eq!(wrote["type"], "ACK", "{wrote}");
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).unwrap(),
        "from the chat\n"
    );
    let ran = call(
        &data,
        "EXECUTE_COMMAND",
        json!({"command": "cat notes.txt"}),
    );
    assert_eq!(ran["payload"]["stdout"], "from the chat\n", "{ran}");
    let outside = call(&data, "FILE_READ", json!({"path": "../.bashrc"}));
    assert_eq!(error_code(&outside), "PATH_OUTSIDE_ALLOWED_ROOT");
    // Activating again keeps the running child.
    let again = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-1", "revision": 1}),
    );
    assert_eq!(again["type"], "SESSION_ACTIVATED");
    assert!(data.ending().is_none());

    // Detach stops the child and forgets the binding.
    let detached = call(&conn, "DETACH_SESSION", json!({"session_id": "chat-1"}));
    assert_eq!(detached["type"], "ACK", "{detached}");
    assert!(matches!(
        data.wait_closed(WAIT),
        Some(Ending::ClosedByShim {
            code: Some(1000),
            ..
        })
    ));
    let not_attached = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-1", "revision": 1}),
    );
    assert_eq!(error_code(&not_attached), "SESSION_NOT_ATTACHED");

    // Restore with the grant: the child comes back on the same folder.
    let restored = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-1", "root_grant": grant}),
    );
    assert_eq!(restored["type"], "SESSION_RESTORED", "{restored}");
    assert_eq!(restored["payload"]["root_grant"], grant);
    let (data, _) = child(&emulator, "chat-1");
    let read = call(&data, "FILE_READ", json!({"path": "notes.txt"}));
    assert_eq!(read["payload"]["content"], "from the chat\n", "{read}");

    stop(&mut shim, &home);
    let records = home.records();
    let ops: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r["op"].as_str().unwrap(), r["session_id"].as_str().unwrap()))
        .collect();
    for expected in [
        ("SHIM_START", "-"),
        ("DIRECTORY_LIST", "-"),
        ("SESSION_ALLOWED_ROOT_SET", "chat-1"),
        ("ACTIVATE_SESSION", "chat-1"),
        ("FILE_WRITE", "chat-1"),
        ("EXECUTE_COMMAND", "chat-1"),
        ("JAIL_VIOLATION", "chat-1"),
        ("DETACH_SESSION", "chat-1"),
        ("RESTORE_SESSION", "chat-1"),
        ("FILE_READ", "chat-1"),
        ("SHIM_STOP", "-"),
    ] {
        assert!(ops.contains(&expected), "{expected:?} missing from {ops:?}");
    }
    // No grant, reference or browse token is ever logged.
    let text = std::fs::read_to_string(&home.audit).unwrap();
    assert!(!text.contains(&grant));
    assert!(!text.contains(&project_ref));
}

#[test]
fn control_connection_refuses_data_plane_frames() {
    let (home, _) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &["--enable-shell"]);
    let (conn, _) = control(&emulator);
    for (kind, payload) in [
        ("FILE_STAT", json!({"path": "."})),
        ("EXECUTE_COMMAND", json!({"command": "touch ran"})),
        ("ACK", json!({"ok": true})),
    ] {
        let reply = call(&conn, kind, payload);
        assert_eq!(error_code(&reply), "FEATURE_NOT_SUPPORTED", "{kind}");
        assert_eq!(
            reply["payload"]["message"],
            "Execution operations require an activated per-session data connection."
        );
    }
    assert!(!home.path().join("ran").exists());
    stop(&mut shim, &home);
}

#[test]
fn legacy_data_connection_refuses_control_requests() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim = Shim::start(&home, &emulator, &[]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files"]));
    let reply = call(
        &conn,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": null, "directory_ref": null}),
    );
    assert_eq!(error_code(&reply), "CAPABILITY_NOT_GRANTED");
    assert_eq!(
        reply["payload"]["details"]["required_capability"],
        "directory_browse"
    );
    stop(&mut shim, &home);
}

#[test]
fn every_control_error_code_fires() {
    let (home, home_path) = home_with_project();
    std::fs::create_dir(home.path().join("vanishing")).unwrap();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);

    // DIRECTORY_REFERENCE_INVALID: unknown browse, broken pair.
    let unknown = call(
        &conn,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": "x".repeat(32), "directory_ref": "y".repeat(32)}),
    );
    assert_eq!(error_code(&unknown), "DIRECTORY_REFERENCE_INVALID");
    let half = call(
        &conn,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": "x".repeat(32), "directory_ref": null}),
    );
    assert_eq!(error_code(&half), "DIRECTORY_REFERENCE_INVALID");

    // DIRECTORY_UNAVAILABLE: a listed folder that disappeared; the home
    // folder itself as a session root.
    let (browse, vanishing) = reference_to(&conn, &home_path, "vanishing");
    std::fs::remove_dir(home.path().join("vanishing")).unwrap();
    let gone = attach(&conn, "chat-2", &browse, &vanishing);
    assert_eq!(error_code(&gone), "DIRECTORY_UNAVAILABLE");
    let roots = call(
        &conn,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": null, "directory_ref": null}),
    );
    let home_ref = roots["payload"]["entries"][0]["directory_ref"].clone();
    let dangerous = attach(
        &conn,
        "chat-2",
        roots["payload"]["browse_id"].as_str().unwrap(),
        home_ref.as_str().unwrap(),
    );
    assert_eq!(error_code(&dangerous), "DIRECTORY_UNAVAILABLE");

    // SESSION_NOT_ATTACHED.
    let not_attached = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-9", "revision": 1}),
    );
    assert_eq!(error_code(&not_attached), "SESSION_NOT_ATTACHED");

    // Attach chat-2 twice: revisions 1 and 2.
    let (browse, project) = reference_to(&conn, &home_path, "project");
    let first = attach(&conn, "chat-2", &browse, &project);
    let old_grant = first["payload"]["root_grant"].as_str().unwrap().to_owned();
    let (browse, project) = reference_to(&conn, &home_path, "project");
    let second = attach(&conn, "chat-2", &browse, &project);
    assert_eq!(second["payload"]["revision"], 2);

    // SESSION_REVISION_MISMATCH: a stale ACTIVATE and an older grant.
    let stale = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-2", "revision": 1}),
    );
    assert_eq!(error_code(&stale), "SESSION_REVISION_MISMATCH");
    assert_eq!(stale["payload"]["details"]["current_revision"], 2);
    let older = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-2", "root_grant": old_grant}),
    );
    assert_eq!(error_code(&older), "SESSION_REVISION_MISMATCH");

    // ROOT_GRANT_INVALID: a grant altered, presented for another session.
    let grant = second["payload"]["root_grant"].as_str().unwrap().to_owned();
    let mut altered = grant.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let bad = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-2", "root_grant": altered}),
    );
    assert_eq!(error_code(&bad), "ROOT_GRANT_INVALID");
    assert_eq!(bad["payload"]["message"], "Root grant signature is invalid");
    let other = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-3", "root_grant": grant}),
    );
    assert_eq!(error_code(&other), "ROOT_GRANT_INVALID");

    // SESSION_ALREADY_ACTIVE.
    let activated = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-2", "revision": 2}),
    );
    assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
    let _child = child(&emulator, "chat-2");
    let (browse, project) = reference_to(&conn, &home_path, "project");
    let busy = attach(&conn, "chat-2", &browse, &project);
    assert_eq!(error_code(&busy), "SESSION_ALREADY_ACTIVE");

    // FEATURE_NOT_SUPPORTED and CAPABILITY_NOT_GRANTED are pinned by the
    // tests above; SHIM_OVERLOADED and INTERNAL_ERROR (the child cap) below.
    stop(&mut shim, &home);
}

#[test]
fn a_folder_replaced_between_attach_and_restore_is_refused() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let project = home.path().join("project");

    // Deleted and recreated at the same path (the inode number is often
    // reused on the disk the tests run on).
    let (browse, reference) = reference_to(&conn, &home_path, "project");
    let grant = attach(&conn, "chat-r", &browse, &reference)["payload"]["root_grant"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_dir(&project).unwrap();
    std::fs::create_dir(&project).unwrap();
    let recreated = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-r", "root_grant": grant}),
    );
    assert_eq!(error_code(&recreated), "ROOT_GRANT_INVALID", "{recreated}");
    assert_eq!(
        recreated["payload"]["message"],
        "The selected directory changed after the grant was issued"
    );
    // ACTIVATE re-verifies the remembered grant the same way.
    let activate = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-r", "revision": 1}),
    );
    assert_eq!(error_code(&activate), "ROOT_GRANT_INVALID");

    // Replaced by a symbolic link.
    let (browse, reference) = reference_to(&conn, &home_path, "project");
    let grant = attach(&conn, "chat-s", &browse, &reference)["payload"]["root_grant"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::rename(&project, home.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(home.path().join("elsewhere"), &project).unwrap();
    let linked = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-s", "root_grant": grant}),
    );
    assert_eq!(error_code(&linked), "ROOT_GRANT_INVALID");
    assert_eq!(
        linked["payload"]["message"],
        "Selected root cannot be a symbolic link"
    );
    stop(&mut shim, &home);
}

#[test]
fn control_reconnect_invalidates_references_and_stops_children() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let (browse, reference) = reference_to(&conn, &home_path, "project");
    let (browse2, reference2) = reference_to(&conn, &home_path, "project");
    let attached = attach(&conn, "chat-c", &browse2, &reference2);
    assert_eq!(attached["type"], "SESSION_ATTACHED");
    call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-c", "revision": 1}),
    );
    let (data, _) = child(&emulator, "chat-c");

    conn.drop_tcp().unwrap();
    let (conn, _) = control(&emulator);
    assert!(data.wait_closed(WAIT).is_some(), "the child was stopped");
    let stale = attach(&conn, "chat-d", &browse, &reference);
    assert_eq!(error_code(&stale), "DIRECTORY_REFERENCE_INVALID");
    // The binding survived: the current revision activates again.
    let again = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-c", "revision": 1}),
    );
    assert_eq!(again["type"], "SESSION_ACTIVATED", "{again}");
    let _ = child(&emulator, "chat-c");
    stop(&mut shim, &home);
}

#[test]
fn ninth_child_is_refused_with_the_session_limit() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let mut children = Vec::new();
    for n in 0..9 {
        let session = format!("chat-{n}");
        let (browse, reference) = reference_to(&conn, &home_path, "project");
        let attached = attach(&conn, &session, &browse, &reference);
        assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
        let activated = call(
            &conn,
            "ACTIVATE_SESSION",
            json!({"session_id": session, "revision": 1}),
        );
        if n < 8 {
            assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
            children.push(child(&emulator, &session));
        } else {
            assert_eq!(error_code(&activated), "INTERNAL_ERROR");
            assert_eq!(
                activated["payload"]["message"],
                "Active local-executor session limit reached"
            );
            assert_eq!(
                activated["payload"]["details"],
                json!({"reason": "active_session_limit", "max_active_sessions": 8})
            );
        }
    }
    // Detaching one frees a slot.
    call(&conn, "DETACH_SESSION", json!({"session_id": "chat-0"}));
    let activated = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-8", "revision": 1}),
    );
    assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
    let _ = child(&emulator, "chat-8");
    stop(&mut shim, &home);
}

#[test]
fn two_chats_see_only_their_own_roots_and_audit_identities() {
    let (home, home_path) = home_with_project();
    std::fs::create_dir(home.path().join("other")).unwrap();
    std::fs::write(home.path().join("other/secret.txt"), "other chat\n").unwrap();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    for (session, folder) in [("chat-a", "project"), ("chat-b", "other")] {
        let (browse, reference) = reference_to(&conn, &home_path, folder);
        attach(&conn, session, &browse, &reference);
        call(
            &conn,
            "ACTIVATE_SESSION",
            json!({"session_id": session, "revision": 1}),
        );
    }
    let (first, first_hello) = accept_with(&emulator, &HelloAck::new().grant(["files"]));
    let (second, _) = accept_with(&emulator, &HelloAck::new().grant(["files"]));
    let (a, b) = if first_hello["payload"]["allowed_root"]
        .as_str()
        .unwrap()
        .ends_with("project")
    {
        (first, second)
    } else {
        (second, first)
    };
    let escape = call(&a, "FILE_READ", json!({"path": "../other/secret.txt"}));
    assert_eq!(error_code(&escape), "PATH_OUTSIDE_ALLOWED_ROOT");
    let own = call(&b, "FILE_READ", json!({"path": "secret.txt"}));
    assert_eq!(own["payload"]["content"], "other chat\n");
    call(&a, "FILE_WRITE", json!({"path": "a.txt", "content": "a"}));
    stop(&mut shim, &home);
    for record in home.records() {
        match record["op"].as_str().unwrap() {
            "FILE_WRITE" => assert_eq!(record["session_id"], "chat-a"),
            "FILE_READ" => assert_eq!(record["session_id"], "chat-b"),
            "JAIL_VIOLATION" => assert_eq!(record["session_id"], "chat-a"),
            _ => {}
        }
    }
}

#[test]
fn the_command_limit_is_machine_wide_and_file_operations_never_wait_behind_commands() {
    let (home, home_path) = home_with_project();
    for folder in ["second", "third"] {
        std::fs::create_dir(home.path().join(folder)).unwrap();
    }
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &["--enable-shell"]);
    let (conn, _) = control(&emulator);
    let mut children = Vec::new();
    for (session, folder) in [
        ("chat-a", "project"),
        ("chat-b", "second"),
        ("chat-c", "third"),
    ] {
        let (browse, reference) = reference_to(&conn, &home_path, folder);
        assert_eq!(
            attach(&conn, session, &browse, &reference)["type"],
            "SESSION_ATTACHED"
        );
        let activated = call(
            &conn,
            "ACTIVATE_SESSION",
            json!({"session_id": session, "revision": 1}),
        );
        assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
        let (data, _) = child(&emulator, session);
        children.push((data, home_path.join(folder)));
    }
    // Ten commands across three chats, each chat with four request slots
    // and the machine's work pool at four: all ten run at once.
    let mut running = Vec::new();
    for ((data, root), count) in children.iter().zip([4, 4, 2]) {
        running.push(start_blocked_commands(data, root, count));
    }
    let (third, third_root) = &children[2];
    let id = third
        .request("EXECUTE_COMMAND", json!({"command": "touch eleventh"}))
        .unwrap();
    let refused = response_within(third, &id, Duration::from_secs(5));
    assert_eq!(error_code(&refused), "SHIM_OVERLOADED");
    assert_eq!(
        refused["payload"]["message"], "Concurrent command limit exceeded.",
        "{refused}"
    );
    let stat = third
        .request("FILE_STAT", json!({"path": "started-0"}))
        .unwrap();
    let stat = response_within(third, &stat, Duration::from_secs(5));
    assert_eq!(stat["type"], "FILE_STAT_RESPONSE", "{stat}");
    let ping = children[0].0.ping().unwrap();
    let pong = response_within(&children[0].0, &ping, Duration::from_secs(5));
    assert_eq!(pong["type"], "PONG", "{pong}");
    // All three answers came while the ten were still running.
    for (data, root) in &children {
        assert!(!root.join("release").exists());
        assert!(
            data.raw_frames()
                .iter()
                .all(|f| !f.text().unwrap_or_default().contains("COMMAND_RESULT")),
            "a command finished before the release"
        );
    }
    assert!(!third_root.join("eleventh").exists());

    for ((data, root), ids) in children.iter().zip(&running) {
        std::fs::write(root.join("release"), b"").unwrap();
        for id in ids {
            let result = response_within(data, id, WAIT);
            assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
        }
    }
    stop(&mut shim, &home);
}

#[test]
fn persisted_revision_refuses_an_old_grant_after_a_restart() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let (browse, reference) = reference_to(&conn, &home_path, "project");
    let old = attach(&conn, "chat-p", &browse, &reference)["payload"]["root_grant"]
        .as_str()
        .unwrap()
        .to_owned();
    let (browse, reference) = reference_to(&conn, &home_path, "project");
    let new = attach(&conn, "chat-p", &browse, &reference)["payload"]["root_grant"]
        .as_str()
        .unwrap()
        .to_owned();
    stop(&mut shim, &home);

    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let refused = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-p", "root_grant": old}),
    );
    assert_eq!(
        error_code(&refused),
        "SESSION_REVISION_MISMATCH",
        "{refused}"
    );
    assert_eq!(refused["payload"]["details"]["current_revision"], 2);
    let restored = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-p", "root_grant": new}),
    );
    assert_eq!(restored["type"], "SESSION_RESTORED", "{restored}");
    let _ = child(&emulator, "chat-p");
    stop(&mut shim, &home);
}

/// Unmounts on drop, so a failing test does not leave the mount behind.
struct BindMount(std::path::PathBuf);

impl BindMount {
    fn new(source: &Path, target: &Path) -> Option<BindMount> {
        let status = std::process::Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(target)
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| BindMount(target.to_owned()))
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_folder_covered_by_a_bind_mount_is_refused() {
    let (home, home_path) = home_with_project();
    std::fs::create_dir(home.path().join("cover")).unwrap();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let (browse, reference) = reference_to(&conn, &home_path, "project");
    let grant = attach(&conn, "chat-m", &browse, &reference)["payload"]["root_grant"]
        .as_str()
        .unwrap()
        .to_owned();
    let Some(mount) = BindMount::new(&home.path().join("cover"), &home.path().join("project"))
    else {
        println!("skipped: this machine does not let the test make a bind mount");
        stop(&mut shim, &home);
        return;
    };
    let covered = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-m", "root_grant": grant}),
    );
    assert_eq!(error_code(&covered), "ROOT_GRANT_INVALID", "{covered}");
    assert_eq!(
        covered["payload"]["message"],
        "The selected directory changed after the grant was issued"
    );
    drop(mount);
    let restored = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-m", "root_grant": grant}),
    );
    assert_eq!(restored["type"], "SESSION_RESTORED", "{restored}");
    let _ = child(&emulator, "chat-m");
    stop(&mut shim, &home);
}

#[test]
fn control_requests_beyond_max_concurrent_are_overloaded() {
    let (home, _) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = accept_with(&emulator, &HelloAck::new().max_concurrent(1));
    // Each DETACH makes a record durable (an fdatasync), so requests that
    // arrive together find the first still being handled: they are written
    // out at once, so that a busy machine cannot space them out.
    let requests: Vec<(&str, Value)> = (0..200)
        .map(|n| ("DETACH_SESSION", json!({"session_id": format!("gone-{n}")})))
        .collect();
    let ids = conn.request_all(&requests).unwrap();
    let replies: Vec<Value> = ids
        .iter()
        .map(|id| conn.wait_response(id, WAIT).unwrap())
        .collect();
    let overloaded: Vec<&Value> = replies.iter().filter(|r| r["type"] == "ERROR").collect();
    assert!(!overloaded.is_empty(), "{replies:?}");
    for reply in &overloaded {
        assert_eq!(reply["payload"]["code"], "SHIM_OVERLOADED", "{reply}");
        assert_eq!(reply["pending_capacity"], 0);
    }
    assert!(replies.iter().any(|r| r["type"] == "ACK"));
    stop(&mut shim, &home);
}

#[test]
fn a_corrupt_revision_file_stops_control_mode_before_it_starts() {
    let (home, _) = home_with_project();
    let state = home.path().join("state/autogpt-local-executor");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("grant-revisions.json"), "{oops").unwrap();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    assert!(
        shim.stderr.text().contains("Preflight failed: "),
        "{}",
        shim.output()
    );
    assert!(shim.stderr.text().contains("grant revision file"));
    assert!(!home.ops().contains(&"SHIM_START".to_owned()));
    assert!(emulator.attempts().is_empty());
}

/// Activates the first revision of `session` and accepts its child's data
/// connection.
fn activate_first(conn: &Conn, emulator: &Emulator, session: &str) -> Conn {
    let activated = call(
        conn,
        "ACTIVATE_SESSION",
        json!({"session_id": session, "revision": 1}),
    );
    assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
    child(emulator, session).0
}

/// Attaches the home's `project` folder to `chat-1` and activates it:
/// the root grant and the child's data connection.
fn project_chat(conn: &Conn, emulator: &Emulator, home: &Path) -> (Value, Conn) {
    let (browse, project_ref) = reference_to(conn, home, "project");
    let attached = attach(conn, "chat-1", &browse, &project_ref);
    assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
    let grant = attached["payload"]["root_grant"].clone();
    (grant, activate_first(conn, emulator, "chat-1"))
}

/// Each request is refused as outside the root.
fn assert_all_outside(data: &Conn, requests: &[(&str, Value)]) {
    for (kind, payload) in requests {
        let reply = call(data, kind, payload.clone());
        assert_eq!(
            error_code(&reply),
            "PATH_OUTSIDE_ALLOWED_ROOT",
            "{kind}: {reply}"
        );
    }
}

/// The refusal every folder that cannot be a session root gets.
fn assert_not_a_root(reply: &Value) {
    assert_eq!(error_code(reply), "DIRECTORY_UNAVAILABLE", "{reply}");
    assert_eq!(
        reply["payload"]["message"],
        "The selected directory cannot be used as a session root"
    );
}

#[test]
fn folders_holding_the_shims_own_files_cannot_be_attached() {
    let (home, home_path) = home_with_project();
    // The per-OS configuration directory below `~/.config`, as on a real
    // machine; its sibling holds nothing of the shim.
    let config_home = home_path.join(".config");
    std::fs::create_dir_all(config_home.join("autogpt-local-executor")).unwrap();
    std::fs::create_dir_all(config_home.join("editor")).unwrap();
    std::fs::create_dir_all(home_path.join("secrets/inner")).unwrap();
    let emulator = emulator();
    let env = [("XDG_CONFIG_HOME", config_home.to_str().unwrap())];
    let mut shim = Shim::start_control_with_env(&home, &emulator, &env, &[]);
    let (conn, _) = control(&emulator);

    // `~/.config` itself (which holds the configuration directory), the
    // configuration directory, the folder holding the state directory, and
    // a folder inside the secret store's directory.
    let (browse, config_ref) = reference_to(&conn, &home_path, ".config");
    assert_not_a_root(&attach(&conn, "chat-1", &browse, &config_ref));
    let own = reference_below(&conn, &browse, &config_ref, "autogpt-local-executor");
    assert_not_a_root(&attach(&conn, "chat-1", &browse, &own));
    let (browse, state_ref) = reference_to(&conn, &home_path, "state");
    assert_not_a_root(&attach(&conn, "chat-1", &browse, &state_ref));
    let (browse, secrets_ref) = reference_to(&conn, &home_path, "secrets");
    let inner = reference_below(&conn, &browse, &secrets_ref, "inner");
    assert_not_a_root(&attach(&conn, "chat-1", &browse, &inner));
    for name in [".ssh", ".gnupg", ".aws", ".kube", ".docker", ".local"] {
        std::fs::create_dir_all(home_path.join(name).join("sub")).unwrap();
        let (browse, reference) = reference_to(&conn, &home_path, name);
        assert_not_a_root(&attach(&conn, "chat-1", &browse, &reference));
        if name != ".local" {
            let sub = reference_below(&conn, &browse, &reference, "sub");
            assert_not_a_root(&attach(&conn, "chat-1", &browse, &sub));
        }
    }

    // A subfolder of ~/.config that holds nothing of the shim can be picked,
    // and its data connection cannot reach the configuration next to it.
    let (browse, config_ref) = reference_to(&conn, &home_path, ".config");
    let editor = reference_below(&conn, &browse, &config_ref, "editor");
    let attached = attach(&conn, "chat-1", &browse, &editor);
    assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
    let data = activate_first(&conn, &emulator, "chat-1");
    let wrote = call(
        &data,
        "FILE_WRITE",
        json!({"path": "../autogpt-local-executor/config.toml", "content": "enable_shell = true\n"}),
    );
    assert_eq!(error_code(&wrote), "PATH_OUTSIDE_ALLOWED_ROOT", "{wrote}");
    assert!(
        !config_home
            .join("autogpt-local-executor/config.toml")
            .exists()
    );
    stop(&mut shim, &home);
    let refused = home
        .records()
        .into_iter()
        .filter(|r| r["op"] == "ATTACH_SESSION")
        .filter(|r| r["result"]["error_code"] == "DIRECTORY_UNAVAILABLE")
        .count();
    assert_eq!(refused, 4 + 6 + 5);
}

#[test]
fn a_protected_directory_moved_into_a_root_stays_unreachable() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let (grant, data) = project_chat(&conn, &emulator, &home_path);

    // The directory of tokens.enc is moved into the live root.
    let secrets = home_path.join("secrets");
    let project = home_path.join("project");
    std::fs::create_dir(project.join("sub")).unwrap();
    let moved = project.join("sub/secrets");
    std::fs::rename(&secrets, &moved).unwrap();
    assert_all_outside(
        &data,
        &[
            ("FILE_READ", json!({"path": "sub/secrets/tokens.enc"})),
            ("FILE_STAT", json!({"path": "sub/secrets"})),
            ("FILE_LIST", json!({"path": "sub/secrets"})),
            (
                "FILE_WRITE",
                json!({"path": "sub/secrets/tokens.enc", "content": "x"}),
            ),
            ("FILE_DELETE", json!({"path": "sub", "recursive": true})),
            ("FILE_MOVE", json!({"src": "sub/secrets", "dst": "taken"})),
        ],
    );
    let listed = call(&data, "FILE_LIST", json!({"path": ".", "recursive": true}));
    assert_eq!(listed["type"], "FILE_LIST_RESPONSE", "{listed}");
    let names: Vec<&str> = listed["payload"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.contains("tokens.enc")), "{names:?}");
    assert!(moved.join("tokens.enc").exists());

    // The root now holds a protected location: it is no session root any
    // more, neither for ACTIVATE nor for RESTORE.
    let again = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-1", "revision": 1}),
    );
    assert_not_a_root(&again);
    let restored = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-1", "root_grant": grant}),
    );
    assert_not_a_root(&restored);

    std::fs::rename(&moved, &secrets).unwrap();
    stop(&mut shim, &home);
    let violations = home
        .records()
        .into_iter()
        .filter(|r| r["op"] == "JAIL_VIOLATION")
        .filter(|r| r["details"]["code"] == "PATH_OUTSIDE_ALLOWED_ROOT")
        .count();
    assert!(violations >= 6, "{:?}", home.ops());
}

#[test]
fn a_protected_directory_mounted_into_a_root_stays_unreachable() {
    let (home, home_path) = home_with_project();
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let (_, data) = project_chat(&conn, &emulator, &home_path);
    let target = home_path.join("project/logs");
    std::fs::create_dir(&target).unwrap();
    // The audit log's directory, mounted into the live root.
    let Some(mount) = BindMount::new(&home_path.join("state"), &target) else {
        println!("skipped: this machine does not let the test make a bind mount");
        stop(&mut shim, &home);
        return;
    };
    assert_all_outside(
        &data,
        &[
            ("FILE_READ", json!({"path": "logs/audit.log"})),
            ("FILE_DELETE", json!({"path": "logs/audit.log"})),
            ("FILE_DELETE", json!({"path": "logs", "recursive": true})),
            ("FILE_LIST", json!({"path": "logs"})),
        ],
    );
    let listed = call(&data, "FILE_LIST", json!({"path": ".", "recursive": true}));
    let entries = listed["payload"]["entries"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .all(|e| !e["path"].as_str().unwrap().contains("audit.log")),
        "{listed}"
    );
    drop(mount);
    assert!(home.audit.exists());
    stop(&mut shim, &home);
}

#[test]
fn a_protected_directory_created_at_start_stays_unreachable_when_moved_into_a_root() {
    let (home, home_path) = home_with_project();
    // A first start: the audit log's directory (and the state directory
    // inside it) do not exist yet; the shim creates them.
    let logs = home_path.join("state");
    assert!(!logs.exists());
    let emulator = emulator();
    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let (conn, _) = control(&emulator);
    let (grant, data) = project_chat(&conn, &emulator, &home_path);
    let state = logs.join("autogpt-local-executor");
    assert!(state.join("grant-revisions.json").exists());

    // The state directory alone, then the audit log's directory holding
    // it, moved into the live root.
    let project = home_path.join("project");
    let moved_state = project.join("kept");
    std::fs::rename(&state, &moved_state).unwrap();
    assert_all_outside(
        &data,
        &[
            ("FILE_READ", json!({"path": "kept/grant-revisions.json"})),
            ("FILE_DELETE", json!({"path": "kept", "recursive": true})),
        ],
    );
    std::fs::rename(&moved_state, &state).unwrap();
    let moved = project.join("moved");
    std::fs::rename(&logs, &moved).unwrap();
    assert_all_outside(
        &data,
        &[
            ("FILE_READ", json!({"path": "moved/audit.log"})),
            ("FILE_STAT", json!({"path": "moved"})),
            ("FILE_LIST", json!({"path": "moved"})),
            ("FILE_DELETE", json!({"path": "moved/audit.log"})),
            ("FILE_MOVE", json!({"src": "moved", "dst": "taken"})),
        ],
    );
    let again = call(
        &conn,
        "ACTIVATE_SESSION",
        json!({"session_id": "chat-1", "revision": 1}),
    );
    let restored = call(
        &conn,
        "RESTORE_SESSION",
        json!({"session_id": "chat-1", "root_grant": grant}),
    );
    std::fs::rename(&moved, &logs).unwrap();
    assert_not_a_root(&again);
    assert_not_a_root(&restored);
    stop(&mut shim, &home);
}

#[test]
fn folders_holding_the_passphrase_file_or_credential_cannot_be_roots() {
    use std::os::unix::fs::PermissionsExt;
    for (variable, name) in [
        ("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE", "shim.pass"),
        ("CREDENTIALS_DIRECTORY", "autogpt-shim-passphrase"),
    ] {
        let (home, home_path) = home_with_project();
        let other = home_path.join("other");
        std::fs::create_dir(&other).unwrap();
        let secret = home_path.join("project").join(name);
        std::fs::write(&secret, format!("{PASSPHRASE}\n")).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let value = if variable == "CREDENTIALS_DIRECTORY" {
            home_path.join("project")
        } else {
            secret.clone()
        };
        let env = [(variable, value.to_str().unwrap())];
        let emulator = emulator();
        let mut shim = Shim::start_control_with_env(&home, &emulator, &env, &[]);
        let (conn, _) = control(&emulator);
        let (browse, project_ref) = reference_to(&conn, &home_path, "project");
        assert_not_a_root(&attach(&conn, "chat-1", &browse, &project_ref));

        // Moved into a live root, the folder stays unreachable.
        let (browse, other_ref) = reference_to(&conn, &home_path, "other");
        let attached = attach(&conn, "chat-1", &browse, &other_ref);
        assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
        let data = activate_first(&conn, &emulator, "chat-1");
        std::fs::rename(home_path.join("project"), other.join("p")).unwrap();
        let read = call(&data, "FILE_READ", json!({"path": format!("p/{name}")}));
        std::fs::rename(other.join("p"), home_path.join("project")).unwrap();
        assert_eq!(error_code(&read), "PATH_OUTSIDE_ALLOWED_ROOT", "{read}");
        assert!(!read.to_string().contains(PASSPHRASE));
        stop(&mut shim, &home);
    }
}
