//! The demo chat of `autogpt-shim-emulator --demo DIR`: the platform's part
//! of one chat in machine-control mode (`CONTROL.md` §17), one printed line
//! per step, so a person watching sees a real shim do its work.
//!
//! On the control connection it browses from the shim's virtual roots down
//! to the folder the person named, attaches a new chat session to it and
//! activates it; on the connection the shim then opens for that chat it runs
//! the default script ([`crate::script::run_default`]: file operations in a
//! scratch folder inside the chosen folder, `echo hello` when the shell is
//! on, `PING`); then it detaches the session, which closes that connection.
//!
//! Like the platform it never sends the shim a path: it only picks among
//! the references the shim minted, comparing the paths the listings show
//! with the folder it was given. It changes nothing on the machine outside
//! the script's scratch folder, which the script removes again.

use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::conn::{Conn, Ending};
use crate::hello::{ConnKind, HelloAck};
use crate::script;
use crate::server::Emulator;
use crate::wire;

/// How many pages of one folder the browse reads at most while looking for
/// the next step towards the chosen folder (200 entries each).
const MAX_PAGES: usize = 50;

/// A step that did not work: what the demo prints after `FAIL`.
struct Failed(String);

/// Runs the demo chat on `control`, a control connection whose handshake is
/// done, in `folder` (a canonical path). `timeout` bounds each answer and
/// the wait for the chat's connection. Returns whether every step passed;
/// an `Err` is only a failure to write to `out`.
pub fn run_chat(
    emulator: &Emulator,
    control: &Conn,
    folder: &Path,
    timeout: Duration,
    out: &mut dyn Write,
) -> io::Result<bool> {
    let session = format!("demo-{}", &wire::uuid_v4().replace('-', "")[..12]);
    match chat(emulator, control, folder, &session, timeout, out)? {
        Ok(passed) => Ok(passed),
        Err(Failed(why)) => {
            writeln!(out, "FAIL {why}")?;
            Ok(false)
        }
    }
}

fn chat(
    emulator: &Emulator,
    control: &Conn,
    folder: &Path,
    session: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> io::Result<Result<bool, Failed>> {
    let (browse, reference) = match browse_to(control, folder, timeout, out)? {
        Ok(found) => found,
        Err(failed) => return Ok(Err(failed)),
    };
    let attached = match call(
        control,
        "ATTACH_SESSION",
        json!({"session_id": session, "browse_id": browse, "directory_ref": reference}),
        "SESSION_ATTACHED",
        timeout,
    ) {
        Ok(reply) => reply,
        Err(failed) => return Ok(Err(failed)),
    };
    let payload = &attached["payload"];
    writeln!(
        out,
        "ok   ATTACH_SESSION {session} -> SESSION_ATTACHED allowed_root {} revision {} \
         (root grant of {} characters, not shown)",
        payload["allowed_root"],
        payload["revision"],
        payload["root_grant"].as_str().map_or(0, str::len)
    )?;
    if let Err(failed) = call(
        control,
        "ACTIVATE_SESSION",
        json!({"session_id": session, "revision": payload["revision"]}),
        "SESSION_ACTIVATED",
        timeout,
    ) {
        return Ok(Err(failed));
    }
    writeln!(
        out,
        "ok   ACTIVATE_SESSION {session} -> SESSION_ACTIVATED: the shim opens a connection for the chat"
    )?;

    let chat = match accept_chat(emulator, session, timeout) {
        Ok(conn) => conn,
        Err(failed) => return Ok(Err(failed)),
    };
    let hello = match chat.try_expect_hello(timeout) {
        Ok(hello) => hello,
        Err(error) => {
            return Ok(Err(Failed(format!(
                "HELLO on the chat connection: {error}"
            ))));
        }
    };
    writeln!(
        out,
        "ok   chat connection {}: HELLO allowed_root {}, capabilities {}",
        chat.path(),
        hello["payload"]["allowed_root"],
        hello["payload"]["capabilities"]
    )?;
    // The session from the path, and every capability the chat advertised.
    let ack = chat.send_hello_ack(&HelloAck::new())?;
    writeln!(out, "ok   HELLO_ACK {}", ack["payload"])?;
    let mut passed = script::run_default(&chat, &hello, &ack, timeout, out)?;

    if let Err(failed) = call(
        control,
        "DETACH_SESSION",
        json!({"session_id": session}),
        "ACK",
        timeout,
    ) {
        return Ok(Err(failed));
    }
    match chat.wait_closed(timeout) {
        Some(Ending::ClosedByShim {
            code: Some(1000), ..
        }) => writeln!(
            out,
            "ok   DETACH_SESSION {session} -> ACK: the shim closed the chat connection (1000)"
        )?,
        other => {
            writeln!(
                out,
                "FAIL DETACH_SESSION {session} -> ACK, but the chat connection ended with {other:?}"
            )?;
            passed = false;
        }
    }
    for violation in chat.take_violations() {
        writeln!(
            out,
            "FAIL the platform would end the chat connection: {violation}"
        )?;
        passed = false;
    }
    Ok(Ok(passed))
}

/// Browses from the roots to `folder`; the browse id and the folder's
/// reference.
fn browse_to(
    control: &Conn,
    folder: &Path,
    timeout: Duration,
    out: &mut dyn Write,
) -> io::Result<Result<(String, String), Failed>> {
    let roots = match call(
        control,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": null, "directory_ref": null, "cursor": null}),
        "DIRECTORY_LIST_RESPONSE",
        timeout,
    ) {
        Ok(reply) => reply,
        Err(failed) => return Ok(Err(failed)),
    };
    let Some(browse) = roots["payload"]["browse_id"].as_str().map(str::to_owned) else {
        return Ok(Err(Failed(format!(
            "DIRECTORY_LIST_RESPONSE without a browse_id: {}",
            roots["payload"]
        ))));
    };
    let roots = entries(&roots);
    writeln!(
        out,
        "ok   DIRECTORY_LIST_REQUEST roots -> {} roots: {}",
        roots.len(),
        paths(&roots)
    )?;
    // The deepest root holding the folder.
    let Some(mut current) = roots
        .iter()
        .filter(|entry| folder.starts_with(&entry.path))
        .max_by_key(|entry| entry.path.len())
        .cloned()
    else {
        return Ok(Err(Failed(format!(
            "{} is not inside any folder the shim offers (its roots: {})",
            folder.display(),
            paths(&roots)
        ))));
    };
    while Path::new(&current.path) != folder {
        let mut cursor = Value::Null;
        let mut next = None;
        for _ in 0..MAX_PAGES {
            let listing = match call(
                control,
                "DIRECTORY_LIST_REQUEST",
                json!({"browse_id": browse, "directory_ref": current.reference, "cursor": cursor}),
                "DIRECTORY_LIST_RESPONSE",
                timeout,
            ) {
                Ok(reply) => reply,
                Err(failed) => return Ok(Err(failed)),
            };
            let page = entries(&listing);
            next = page
                .iter()
                .find(|entry| folder.starts_with(&entry.path))
                .cloned();
            writeln!(
                out,
                "ok   DIRECTORY_LIST_REQUEST {} -> {} folders{}",
                current.path,
                page.len(),
                next.as_ref()
                    .map(|entry| format!(", next: {}", entry.name))
                    .unwrap_or_default()
            )?;
            cursor = listing["payload"]["next_cursor"].clone();
            if next.is_some() || cursor.is_null() {
                break;
            }
        }
        let Some(found) = next else {
            return Ok(Err(Failed(format!(
                "the shim does not list the way to {} inside {} (it lists only folders it \
                 can read and write, and no symbolic links)",
                folder.display(),
                current.path
            ))));
        };
        current = found;
    }
    Ok(Ok((browse, current.reference)))
}

/// One listed folder.
#[derive(Clone)]
struct Entry {
    reference: String,
    name: String,
    path: String,
}

fn entries(listing: &Value) -> Vec<Entry> {
    listing["payload"]["entries"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|entry| {
                    Some(Entry {
                        reference: entry["directory_ref"].as_str()?.to_owned(),
                        name: entry["name"].as_str()?.to_owned(),
                        path: entry["path"].as_str()?.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn paths(entries: &[Entry]) -> String {
    let paths: Vec<&str> = entries.iter().map(|entry| entry.path.as_str()).collect();
    paths.join(", ")
}

/// Sends a request and waits for its answer, which must be `expected`.
fn call(
    conn: &Conn,
    message_type: &str,
    payload: Value,
    expected: &str,
    timeout: Duration,
) -> Result<Value, Failed> {
    let reply = conn
        .call(message_type, payload, timeout)
        .map_err(|error| Failed(format!("{message_type}: no answer: {error}")))?;
    if wire::frame_type(&reply) == Some(expected) {
        return Ok(reply);
    }
    let answer = match wire::frame_type(&reply) {
        Some("ERROR") => format!(
            "ERROR {} {}",
            reply["payload"]["code"].as_str().unwrap_or("?"),
            reply["payload"]["message"]
        ),
        Some(other) => other.to_owned(),
        None => reply.to_string(),
    };
    Err(Failed(format!(
        "{message_type} -> {answer} (expected {expected})"
    )))
}

/// The shim's connection for `session`, waiting at most `timeout`.
fn accept_chat(emulator: &Emulator, session: &str, timeout: Duration) -> Result<Conn, Failed> {
    let deadline = Instant::now() + timeout;
    let conn = emulator
        .accept(deadline.saturating_duration_since(Instant::now()))
        .ok_or_else(|| {
            Failed(format!(
                "the shim opened no connection for {session} within {} s",
                timeout.as_secs()
            ))
        })?;
    match conn.kind() {
        ConnKind::Data { session_id } if session_id == session => Ok(conn),
        _ => Err(Failed(format!(
            "expected the chat connection for {session}, the shim connected to {}",
            conn.path()
        ))),
    }
}
