//! The scripted chat the command-line emulator runs against a shim after
//! the handshake: one request at a time, each answer checked against the
//! specification, one printed line per exchange.
//!
//! On a data connection it exercises the file operations inside a scratch
//! directory it creates under the session root (stat, write, read, list,
//! move, delete) and, when `shell` was granted, runs `echo hello`. On the
//! control connection it only browses the virtual roots, which changes
//! nothing on the machine.
//!
//! It must never touch anything outside its own scratch directory: the
//! shim under test may be serving a real folder of the person running it.
//! The scratch name is random, every file it writes is inside it, and it is
//! removed at the end whether the steps passed or not.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::conn::Conn;
use crate::hello::ConnKind;
use crate::wire;

/// The text the script writes and expects to read back.
const CONTENT: &str = "hello from the platform emulator\n";

/// Runs the default script on a connection whose handshake is done.
///
/// `hello` is the shim's HELLO and `ack` the HELLO_ACK the emulator sent;
/// `timeout` bounds each response. Returns whether every step passed; an
/// `Err` is only a failure to write to `out`.
pub fn run_default(
    conn: &Conn,
    hello: &Value,
    ack: &Value,
    timeout: Duration,
    out: &mut dyn Write,
) -> io::Result<bool> {
    let granted: Vec<String> = ack
        .pointer("/payload/granted_capabilities")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut runner = Runner {
        conn,
        timeout,
        out,
        failures: 0,
    };
    match conn.kind() {
        ConnKind::Data { .. } => {
            let root = hello
                .pointer("/payload/allowed_root")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if granted.iter().any(|name| name == "files") {
                runner.file_steps(&root)?;
            } else {
                runner.note("files was not granted: skipping the file operations")?;
            }
            if granted.iter().any(|name| name == "shell") {
                runner.shell_step()?;
            } else {
                runner.note("shell was not advertised or granted: skipping echo hello")?;
            }
        }
        ConnKind::Control => {
            runner.browse_step()?;
            runner
                .note("file operations need a data connection: start the shim with --session-id")?;
        }
        ConnKind::Other => {
            runner.note(&format!("unexpected path {}: only PING", conn.path()))?;
        }
    }
    runner.ping_step()?;
    Ok(runner.failures == 0)
}

struct Runner<'a> {
    conn: &'a Conn,
    timeout: Duration,
    out: &'a mut dyn Write,
    failures: usize,
}

/// A check of one response: `Ok(summary)` or `Err(what is wrong)`.
type Check<'c> = Box<dyn FnOnce(&Value) -> Result<String, String> + 'c>;

impl Runner<'_> {
    fn file_steps(&mut self, root: &str) -> io::Result<()> {
        let separator = if root.contains('\\') && !root.contains('/') {
            '\\'
        } else {
            '/'
        };
        let join = |base: &str, name: &str| {
            if base.ends_with(separator) {
                format!("{base}{name}")
            } else {
                format!("{base}{separator}{name}")
            }
        };
        let scratch = join(
            root,
            &format!("emulator-{}", &wire::uuid_v4().replace('-', "")[..12]),
        );
        let file = join(&scratch, "hello.txt");
        let moved = join(&scratch, "moved.txt");
        let size = CONTENT.len() as u64;

        let passed = self.step(
            "FILE_STAT",
            root,
            json!({"path": root, "follow_symlinks": true}),
            Box::new(|reply| {
                expect_type(reply, "FILE_STAT_RESPONSE")?;
                let payload = &reply["payload"];
                if payload["exists"] != true || payload["is_dir"] != true {
                    return Err(format!("root is not an existing directory: {payload}"));
                }
                Ok(format!("exists=true is_dir=true mode={}", payload["mode"]))
            }),
        )? && self.step(
            "FILE_WRITE",
            &file,
            json!({"path": file, "content": CONTENT, "encoding": "utf-8", "create_parents": true}),
            Box::new(expect_ack),
        )? && self.step(
            "FILE_READ",
            &file,
            json!({"path": file, "encoding": "utf-8", "format": "text", "offset": 0, "length": null}),
            Box::new(|reply| {
                expect_type(reply, "FILE_CONTENTS")?;
                let payload = &reply["payload"];
                if payload["content"] != CONTENT {
                    return Err(format!("content {} is not what was written", payload["content"]));
                }
                if payload["size_bytes"] != size || payload["truncated"] != false {
                    return Err(format!("size/truncated wrong: {payload}"));
                }
                Ok(format!("{size} bytes, content matches"))
            }),
        )? && self.step(
            "FILE_LIST",
            &scratch,
            json!({"path": scratch, "glob": null, "recursive": false, "include_hidden": false, "max_entries": 1000}),
            Box::new(|reply| {
                expect_type(reply, "FILE_LIST_RESPONSE")?;
                let entries = reply["payload"]["entries"].as_array().cloned().unwrap_or_default();
                match entries.as_slice() {
                    [entry] if entry["name"] == "hello.txt" && entry["is_file"] == true && entry["size_bytes"] == size => {
                        Ok("1 entry: hello.txt".to_owned())
                    }
                    _ => Err(format!("expected only hello.txt, got {}", reply["payload"])),
                }
            }),
        )? && self.step(
            "FILE_MOVE",
            &format!("{file} -> {moved}"),
            json!({"src": file, "dst": moved, "overwrite": false}),
            Box::new(expect_ack),
        )? && self.step(
            "FILE_STAT",
            &moved,
            json!({"path": moved, "follow_symlinks": true}),
            Box::new(|reply| {
                expect_type(reply, "FILE_STAT_RESPONSE")?;
                let payload = &reply["payload"];
                if payload["exists"] != true || payload["is_file"] != true || payload["size_bytes"] != size {
                    return Err(format!("moved file not found as written: {payload}"));
                }
                Ok(format!("exists=true is_file=true size_bytes={size}"))
            }),
        )? && self.step(
            "FILE_DELETE",
            &moved,
            json!({"path": moved, "recursive": false, "missing_ok": false}),
            Box::new(expect_ack),
        )? && self.step(
            "FILE_DELETE",
            &scratch,
            json!({"path": scratch, "recursive": false, "missing_ok": false}),
            Box::new(expect_ack),
        )? && self.step(
            "FILE_STAT",
            &scratch,
            json!({"path": scratch, "follow_symlinks": true}),
            Box::new(|reply| {
                expect_type(reply, "FILE_STAT_RESPONSE")?;
                if reply["payload"]["exists"] != false {
                    return Err(format!("scratch directory still exists: {}", reply["payload"]));
                }
                Ok("exists=false".to_owned())
            }),
        )?;
        if !passed {
            // Leave nothing behind in the shim's root, whatever failed.
            self.step(
                "FILE_DELETE",
                &format!("{scratch} (cleanup)"),
                json!({"path": scratch, "recursive": true, "missing_ok": true}),
                Box::new(expect_ack),
            )?;
        }
        Ok(())
    }

    fn shell_step(&mut self) -> io::Result<()> {
        self.step(
            "EXECUTE_COMMAND",
            "echo hello",
            json!({"command": "echo hello", "argv": null, "shell": "auto", "cwd": null, "timeout_seconds": 10, "env": {}}),
            Box::new(|reply| {
                expect_type(reply, "COMMAND_RESULT")?;
                let payload = &reply["payload"];
                let stdout = payload["stdout"].as_str().unwrap_or_default();
                if payload["exit_code"] != 0 || stdout.trim_end() != "hello" || payload["timed_out"] != false {
                    return Err(format!("unexpected result: {payload}"));
                }
                Ok(format!("exit_code=0 stdout={stdout:?}"))
            }),
        )?;
        Ok(())
    }

    fn browse_step(&mut self) -> io::Result<()> {
        self.step(
            "DIRECTORY_LIST_REQUEST",
            "virtual roots",
            json!({"browse_id": null, "directory_ref": null, "cursor": null}),
            Box::new(|reply| {
                expect_type(reply, "DIRECTORY_LIST_RESPONSE")?;
                let payload = &reply["payload"];
                let entries = payload["entries"].as_array().cloned().unwrap_or_default();
                if !payload["browse_id"].is_string() || !payload["current"].is_null() {
                    return Err(format!("not a root listing: {payload}"));
                }
                let names: Vec<String> = entries
                    .iter()
                    .map(|entry| entry["path"].as_str().unwrap_or("?").to_owned())
                    .collect();
                Ok(format!("{} roots: {}", names.len(), names.join(", ")))
            }),
        )?;
        Ok(())
    }

    fn ping_step(&mut self) -> io::Result<()> {
        self.step(
            "PING",
            "",
            json!({}),
            Box::new(|reply| {
                expect_type(reply, "PONG")?;
                if !reply["pending_capacity"].is_null() {
                    return Err(format!(
                        "PONG carries pending_capacity {}",
                        reply["pending_capacity"]
                    ));
                }
                Ok(String::new())
            }),
        )?;
        Ok(())
    }

    /// Sends one request, waits for its response, checks it and prints one
    /// line. Returns whether the step passed.
    fn step(
        &mut self,
        message_type: &str,
        subject: &str,
        payload: Value,
        check: Check<'_>,
    ) -> io::Result<bool> {
        let started = Instant::now();
        let reply = self.conn.call(message_type, payload, self.timeout);
        let elapsed = started.elapsed().as_millis();
        let request = if subject.is_empty() {
            message_type.to_owned()
        } else {
            format!("{message_type} {subject}")
        };
        let (passed, outcome) = match reply {
            Err(error) => (false, format!("no response: {error}")),
            Ok(reply) => {
                let answer = describe(&reply);
                match check(&reply) {
                    Ok(summary) if summary.is_empty() => (true, answer),
                    Ok(summary) => (true, format!("{answer} {summary}")),
                    Err(problem) => (false, format!("{answer}: {problem}")),
                }
            }
        };
        let mark = if passed { "ok  " } else { "FAIL" };
        writeln!(self.out, "{mark} {request} -> {outcome} ({elapsed} ms)")?;
        if !passed {
            self.failures += 1;
        }
        Ok(passed)
    }

    fn note(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "--   {text}")
    }
}

/// `TYPE`, or `ERROR CODE "message"` for an error.
fn describe(reply: &Value) -> String {
    let message_type = wire::frame_type(reply).unwrap_or("(no type)");
    if message_type == "ERROR" {
        format!(
            "ERROR {} {}",
            reply["payload"]["code"].as_str().unwrap_or("?"),
            reply["payload"]["message"]
        )
    } else {
        message_type.to_owned()
    }
}

fn expect_type(reply: &Value, expected: &str) -> Result<(), String> {
    if wire::frame_type(reply) == Some(expected) {
        Ok(())
    } else {
        Err(format!("expected {expected}"))
    }
}

fn expect_ack(reply: &Value) -> Result<String, String> {
    expect_type(reply, "ACK")?;
    if reply["payload"]["ok"] == true {
        Ok(String::new())
    } else {
        Err(format!("ok is {}", reply["payload"]["ok"]))
    }
}
