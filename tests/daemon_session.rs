//! PROTOCOL.md §5, §9 and §11.4 on one served connection, with an
//! in-memory transport (the TLS transport has its own tests): PONG and
//! `SHIM_OVERLOADED` do not wait behind busy workers, responses follow
//! their durable audit record and carry `pending_capacity`, gates refuse
//! what was not granted or is switched off locally, invalid requests get
//! an `ERROR`, and a closed connection cancels its running commands.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use autogpt_shim::audit::{AuditKey, AuditLog, WriterOptions};
use autogpt_shim::daemon::{
    self, AuditSink, CommandGate, DataPlane, End, Ended, Inbound, Outbound, Serving, Setup,
    WORKERS, WorkerThreads,
};
use autogpt_shim::exec::Spawner;
use autogpt_shim::jail::{Jail, JailOptions};
use autogpt_shim::protocol::Encoded;
use autogpt_shim::transport::{CloseInfo, Payload};
use crossbeam_channel::{Receiver, Sender, unbounded};
use serde_json::{Value, json};

struct MemIn(Receiver<Result<Vec<u8>, Ended>>);

impl Inbound for MemIn {
    fn recv(&mut self, should_stop: &dyn Fn() -> bool) -> Result<Payload, Ended> {
        loop {
            if should_stop() {
                return Err(Ended::Closed(None));
            }
            match self.0.recv_timeout(Duration::from_millis(50)) {
                // UTF-8 arrives as a text frame, anything else as binary.
                Ok(item) => {
                    return item.map(|bytes| match String::from_utf8(bytes) {
                        Ok(text) => Payload::from(text),
                        Err(e) => Payload::from(e.into_bytes()),
                    });
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(Ended::Closed(None));
                }
            }
        }
    }

    // `MemOut` never waits for its reader: there is nothing to unblock.
    fn abort(&mut self) {}
}

#[derive(Debug)]
enum Sent {
    Frame(Value),
    Close(u16),
}

struct MemOut(Sender<Sent>);

impl Outbound for MemOut {
    fn send(&mut self, text: Encoded) -> Result<(), Ended> {
        let v: Value = serde_json::from_str(&text.into_string()).unwrap();
        self.0.send(Sent::Frame(v)).map_err(|_| Ended::Closed(None))
    }
    fn close(&mut self, code: u16, _reason: &str) {
        let _ = self.0.send(Sent::Close(code));
    }
}

/// No machine-wide limit: these tests are about the connection.
struct Unlimited;

impl CommandGate for Unlimited {
    fn enter(&self) -> Result<Box<dyn Send>, String> {
        Ok(Box::new(()))
    }

    fn screenshot(&self) -> Result<(), String> {
        Ok(())
    }
}

struct Fx {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    audit_path: PathBuf,
    to_shim: Sender<Result<Vec<u8>, Ended>>,
    from_shim: Receiver<Sent>,
    /// Replies read while waiting for another id.
    early: std::cell::RefCell<Vec<Value>>,
    served: std::thread::JoinHandle<End>,
    log: AuditLog,
}

/// A connection's setup over a fresh root and audit log in `base`.
fn setup(
    base: &std::path::Path,
    granted: &[&str],
    shell_enabled: bool,
    max_concurrent: u64,
) -> (Setup, AuditLog, PathBuf, PathBuf) {
    setup_limited(
        base,
        granted,
        shell_enabled,
        max_concurrent,
        Arc::new(Unlimited),
    )
}

fn setup_limited(
    base: &std::path::Path,
    granted: &[&str],
    shell_enabled: bool,
    max_concurrent: u64,
    commands: Arc<dyn CommandGate + Send>,
) -> (Setup, AuditLog, PathBuf, PathBuf) {
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let audit_path = base.join("audit.jsonl");
    let (log, _thread) = AuditLog::open(
        WriterOptions::new(audit_path.clone(), "0.1.0-test"),
        AuditKey::new(vec![3; 32]).unwrap(),
    )
    .unwrap();
    let setup = Setup {
        serving: Serving::Data(DataPlane {
            jail: Arc::new(Jail::pin(&root, JailOptions::default()).unwrap()),
            spawner: Arc::new(
                Spawner::start(std::path::Path::new(env!("CARGO_BIN_EXE_autogpt-shim"))).unwrap(),
            ),
            host_env: Arc::new(vec![("PATH".into(), "/usr/bin:/bin".into())]),
            commands,
            shell_enabled,
            refuse_multilink_reads: false,
            umask: rustix::fs::Mode::from_raw_mode(0o022),
            sandbox: autogpt_shim::exec::CommandSandbox::default(),
            rules: std::sync::Arc::new(autogpt_shim::daemon::CommandRules::default()),
            session_id: "session-1".into(),
        }),
        audit: AuditSink::Log(log.clone()),
        granted: granted.iter().map(|g| (*g).to_owned()).collect(),
        max_concurrent,
        command_timeout_seconds: 30,
        platform_wait_seconds: 30,
        max_file_size_bytes: 10 << 20,
        audit_path: audit_path.clone(),
        activity: None,
        machine_pool: None,
        machine_bytes: None,
        found: Default::default(),
    };
    (setup, log, root, audit_path)
}

fn start(granted: &[&str], shell_enabled: bool, max_concurrent: u64) -> Fx {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (setup, log, root, audit_path) = setup(&base, granted, shell_enabled, max_concurrent);
    let (to_shim, rx) = unbounded();
    let (tx, from_shim) = unbounded();
    let served = std::thread::spawn(move || {
        let pool = WorkerThreads::new(WORKERS).unwrap();
        daemon::serve(setup, &pool, MemIn(rx), MemOut(tx), &AtomicBool::new(false))
    });
    Fx {
        _tmp: tmp,
        root,
        audit_path,
        to_shim,
        from_shim,
        early: Default::default(),
        served,
        log,
    }
}

impl Fx {
    fn send(&self, v: Value) {
        self.to_shim.send(Ok(v.to_string().into_bytes())).unwrap();
    }

    fn request(&self, id: &str, kind: &str, payload: Value) {
        self.send(json!({"type": kind, "id": id, "ts": 1.0, "payload": payload}));
    }

    /// The frame with `id` (responses come in any order), skipping STATUS
    /// frames.
    fn reply(&self, id: &str) -> Value {
        let found = self.early.borrow().iter().position(|v| v["id"] == id);
        if let Some(at) = found {
            return self.early.borrow_mut().remove(at);
        }
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.from_shim.recv_timeout(left).expect("no reply in time") {
                Sent::Frame(v) if v["id"] == id => return v,
                Sent::Frame(v) if v["type"] == "STATUS" => {}
                Sent::Frame(v) => self.early.borrow_mut().push(v),
                other => panic!("unexpected {other:?} while waiting for {id}"),
            }
        }
    }

    fn audit_ops(&self) -> Vec<(String, Value)> {
        std::fs::read_to_string(&self.audit_path)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["op"].as_str().unwrap().to_owned(), v)
            })
            .collect()
    }

    fn finish(self) -> End {
        self.finish_keeping_files().0
    }

    /// Ends the connection; the temporary files stay until the returned
    /// directory is dropped.
    fn finish_keeping_files(self) -> (End, tempfile::TempDir) {
        drop(self.to_shim);
        let end = self.served.join().unwrap();
        drop(self.log);
        (end, self._tmp)
    }
}

#[test]
fn pong_and_overload_do_not_wait_behind_ten_blocked_commands() {
    let fx = start(&["shell", "files"], true, 10);
    let gate = fx.root.join("release");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display());
    for n in 0..10 {
        fx.request(
            &format!("c{n}"),
            "EXECUTE_COMMAND",
            json!({"command": wait}),
        );
    }
    // Let all ten be admitted before the eleventh arrives.
    std::thread::sleep(Duration::from_millis(300));
    fx.request("c10", "EXECUTE_COMMAND", json!({"command": "true"}));
    let overloaded = fx.reply("c10");
    assert_eq!(overloaded["type"], "ERROR");
    assert_eq!(overloaded["payload"]["code"], "SHIM_OVERLOADED");
    assert_eq!(
        overloaded["payload"]["message"],
        "The local executor is at its concurrent request limit."
    );
    assert_eq!(
        overloaded["payload"]["details"],
        json!({"max_concurrent": 10})
    );
    assert_eq!(overloaded["pending_capacity"], 0);
    fx.request("p1", "PING", json!({}));
    let pong = fx.reply("p1");
    assert_eq!(pong["type"], "PONG");
    assert_eq!(pong["pending_capacity"], Value::Null);
    // Nothing finished before the release.
    assert!(!gate.exists());
    std::fs::write(&gate, b"").unwrap();
    for n in 0..10 {
        let r = fx.reply(&format!("c{n}"));
        assert_eq!(r["type"], "COMMAND_RESULT", "{r}");
        assert_eq!(r["payload"]["exit_code"], 0);
    }
    assert_eq!(fx.finish(), End::Closed(None));
}

#[test]
fn file_write_is_acknowledged_after_its_record_with_capacity() {
    let fx = start(&["files"], false, 4);
    fx.request(
        "w1",
        "FILE_WRITE",
        json!({"path": "a.txt", "content": "hello"}),
    );
    let ack = fx.reply("w1");
    assert_eq!(ack["type"], "ACK", "{ack}");
    assert_eq!(ack["pending_capacity"], 4);
    // The record was durable before the ACK was queued.
    let ops = fx.audit_ops();
    let (op, record) = ops.last().unwrap();
    assert_eq!(op, "FILE_WRITE");
    assert_eq!(record["request_id"], "w1");
    assert_eq!(record["details"]["size_bytes_written"], 5);
    assert_eq!(std::fs::read(fx.root.join("a.txt")).unwrap(), b"hello");
    fx.finish();
}

#[test]
fn reads_in_flight_are_each_answered_only_after_their_own_record() {
    let fx = start(&["files"], false, 16);
    std::fs::write(fx.root.join("a.txt"), b"hello").unwrap();
    for round in 0..3 {
        // As many as the connection admits at once.
        let ids: Vec<String> = (0..16).map(|n| format!("r{round}-{n}")).collect();
        for (n, id) in ids.iter().enumerate() {
            let (kind, payload) = if n % 2 == 0 {
                ("FILE_STAT", json!({"path": "a.txt"}))
            } else {
                ("FILE_READ", json!({"path": "a.txt"}))
            };
            fx.request(id, kind, payload);
        }
        for id in &ids {
            let reply = fx.reply(id);
            assert_ne!(reply["type"], "ERROR", "{reply}");
            // Read as the reply arrives: its record is already in the log.
            let ops = fx.audit_ops();
            assert!(
                ops.iter()
                    .any(|(_, record)| record["request_id"] == id.as_str()),
                "{id} answered before its record"
            );
        }
    }
    assert_eq!(fx.finish(), End::Closed(None));
}

#[test]
fn ungranted_capability_is_refused_without_a_record() {
    let fx = start(&["shell"], true, 4);
    fx.request("r1", "FILE_READ", json!({"path": "x"}));
    let e = fx.reply("r1");
    assert_eq!(e["payload"]["code"], "CAPABILITY_NOT_GRANTED");
    assert_eq!(
        e["payload"]["details"],
        json!({"required_capability": "files", "granted_capabilities": ["shell"]})
    );
    assert!(fx.audit_ops().is_empty());
    fx.finish();
}

#[test]
fn locally_disabled_shell_refuses_even_when_granted() {
    let fx = start(&["shell", "files"], false, 4);
    fx.request("c1", "EXECUTE_COMMAND", json!({"command": "touch ran"}));
    let e = fx.reply("c1");
    assert_eq!(e["payload"]["code"], "CAPABILITY_NOT_GRANTED");
    assert_eq!(
        e["payload"]["message"],
        "Shell execution is disabled. Restart the shim with --enable-shell to opt in."
    );
    assert!(!fx.root.join("ran").exists());
    assert!(fx.audit_ops().is_empty());
    fx.finish();
}

#[test]
fn jail_refusal_writes_only_a_jail_violation() {
    let fx = start(&["files"], false, 4);
    fx.request("r1", "FILE_READ", json!({"path": "../../etc/passwd"}));
    let e = fx.reply("r1");
    assert_eq!(e["type"], "ERROR");
    let ops = fx.audit_ops();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].0, "JAIL_VIOLATION");
    assert_eq!(ops[0].1["request_id"], Value::Null);
    assert_eq!(ops[0].1["details"]["attempted_op"], "FILE_READ");
    fx.finish();
}

#[test]
fn invalid_request_with_an_id_gets_an_error_and_garbage_is_dropped() {
    let fx = start(&["files"], false, 4);
    fx.to_shim.send(Ok(b"not json".to_vec())).unwrap();
    fx.request("bad", "FILE_READ", json!({"path": "x", "surprise": 1}));
    let e = fx.reply("bad");
    assert_eq!(e["payload"]["code"], "INTERNAL_ERROR");
    assert!(
        e["payload"]["message"]
            .as_str()
            .unwrap()
            .contains("surprise")
    );
    assert_eq!(e["pending_capacity"], 4);
    // The connection still serves.
    fx.request("p", "PING", json!({}));
    assert_eq!(fx.reply("p")["type"], "PONG");
    fx.finish();
}

#[test]
fn known_non_request_types_are_ignored_on_a_data_connection() {
    let fx = start(&["files"], false, 4);
    fx.request("s", "STATUS", json!({"in_flight": 0, "max_concurrent": 1}));
    fx.request("p", "PING", json!({}));
    // The PONG is the only answer.
    assert_eq!(fx.reply("p")["type"], "PONG");
    assert!(
        fx.from_shim
            .recv_timeout(Duration::from_millis(200))
            .is_err()
    );
    fx.finish();
}

#[test]
fn session_revoked_closes_4428_and_is_audited() {
    let fx = start(&["files"], false, 4);
    fx.request("x1", "SESSION_REVOKED", json!({"reason": "user_revoked"}));
    let until = Instant::now() + Duration::from_secs(5);
    let code = loop {
        match fx.from_shim.recv_deadline(until).unwrap() {
            Sent::Close(code) => break code,
            Sent::Frame(_) => {}
        }
    };
    assert_eq!(code, 4428);
    let ops = fx.audit_ops();
    assert_eq!(ops.last().unwrap().0, "SESSION_REVOKED");
    assert_eq!(
        ops.last().unwrap().1["details"],
        json!({"reason": "user_revoked", "source": "frame"})
    );
    let end = fx.served.join().unwrap();
    assert_eq!(
        end,
        End::Revoked {
            reason: "user_revoked".into()
        }
    );
}

#[test]
fn disconnect_cancels_running_commands_without_a_result() {
    let fx = start(&["shell"], true, 4);
    let pid_file = fx.root.join("pid");
    fx.request(
        "c1",
        "EXECUTE_COMMAND",
        json!({"command": format!("echo $$ > '{}'; exec sleep 1000", pid_file.display())}),
    );
    let until = Instant::now() + Duration::from_secs(5);
    while !pid_file.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let audit_path = fx.audit_path.clone();
    let from_shim = fx.from_shim.clone();
    let (end, _files) = fx.finish_keeping_files();
    assert_eq!(end, End::Closed(None));
    assert!(started.elapsed() < Duration::from_secs(5));
    // No COMMAND_RESULT was sent.
    while let Ok(sent) = from_shim.try_recv() {
        if let Sent::Frame(v) = sent {
            assert_ne!(v["type"], "COMMAND_RESULT");
        }
    }
    let text = std::fs::read_to_string(audit_path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["op"], "EXECUTE_COMMAND");
    assert_eq!(last["result"]["error_code"], "INTERNAL_ERROR");
}

#[test]
fn a_failed_write_ends_the_connection_without_waiting_for_the_platform() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (setup, _log, root, _) = setup(&base, &["files"], false, 4);
    let (to_shim, rx) = unbounded();
    let (tx, from_shim) = unbounded();
    // Nothing can be sent: every write fails.
    drop(from_shim);
    let served = std::thread::spawn(move || {
        let pool = WorkerThreads::new(WORKERS).unwrap();
        daemon::serve(setup, &pool, MemIn(rx), MemOut(tx), &AtomicBool::new(false))
    });
    let ping = json!({"type": "PING", "id": "p", "ts": 1.0});
    to_shim.send(Ok(ping.to_string().into_bytes())).unwrap();
    // The platform's side stays open; the connection must end on its own.
    let until = Instant::now() + Duration::from_secs(5);
    while !served.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        served.is_finished(),
        "a connection that cannot answer kept reading requests"
    );
    assert_eq!(served.join().unwrap(), End::Closed(None));
    // What arrives afterwards is never run.
    let write = json!({"type": "FILE_WRITE", "id": "w", "ts": 1.0,
                       "payload": {"path": "late.txt", "content": "x"}});
    let _ = to_shim.send(Ok(write.to_string().into_bytes()));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!root.join("late.txt").exists());
}

/// The whole stack over TLS: the transport connects to the emulator with
/// its CA file, the session serves what the emulator asks.
#[test]
fn file_operations_round_trip_over_tls_through_the_emulator() {
    use autogpt_shim::daemon::{LinkIn, LinkOut};
    use autogpt_shim::transport::{Connector, Incoming, ProxyConfig};
    use autogpt_shim_emulator::{Emulator, EmulatorOptions, HelloAck};

    let emu = Emulator::start(EmulatorOptions::new()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (setup, _log, root, _audit) = setup(&base, &["files"], false, 4);
    let connector = Connector::new(emu.ca_file(), &[], ProxyConfig::direct()).unwrap();
    let url = emu.data_url("session-1");
    let hello = json!({
        "type": "HELLO", "id": "00000000-0000-4000-8000-000000000001", "ts": 1.5,
        "version": "1.1", "pending_capacity": null,
        "payload": {
            "shim_version": "0.1.0", "protocol_version": "1.1",
            "machine_id": "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f", "display_name": "test",
            "platform": "linux", "arch": "x86_64", "screen_resolution": null,
            "capabilities": ["files"], "allowed_root": root.to_str().unwrap(),
            "local_llm_models": [], "hardware_devices": [], "computer_use_features": [],
            "computer_use_features_coarse": [], "recording_channels": [], "recording_routes": []
        }
    });
    let shim = std::thread::spawn(move || {
        let conn = connector.connect(&url, None).unwrap();
        let (mut reader, writer) = conn.split().unwrap();
        writer.send_text(hello.to_string()).unwrap();
        let ack = loop {
            match reader.read().unwrap() {
                Incoming::Message(bytes) => break bytes,
                Incoming::Idle | Incoming::Pong(_) => {}
                Incoming::Closed(info) => panic!("closed during the handshake: {info:?}"),
            }
        };
        let ack: Value = serde_json::from_slice(&ack).unwrap();
        assert_eq!(ack["type"], "HELLO_ACK");
        let stop = Arc::new(AtomicBool::new(false));
        let pool = WorkerThreads::new(WORKERS).unwrap();
        daemon::serve(
            setup,
            &pool,
            LinkIn::new(reader, writer.clone()),
            LinkOut(writer),
            &stop,
        )
    });
    let conn = emu
        .accept(Duration::from_secs(10))
        .expect("the shim did not connect");
    conn.expect_hello(Duration::from_secs(10));
    conn.send_hello_ack(&HelloAck::new().grant(["files"]))
        .unwrap();
    let t = Duration::from_secs(10);
    let ack = conn
        .call(
            "FILE_WRITE",
            json!({"path": "tls.txt", "content": "over tls"}),
            t,
        )
        .unwrap();
    assert_eq!(ack["type"], "ACK", "{ack}");
    let read = conn
        .call("FILE_READ", json!({"path": "tls.txt"}), t)
        .unwrap();
    assert_eq!(read["type"], "FILE_CONTENTS", "{read}");
    assert_eq!(read["payload"]["content"], "over tls");
    let ping = conn.ping().unwrap();
    assert_eq!(conn.wait_response(&ping, t).unwrap()["type"], "PONG");
    conn.close(1000, "bye").unwrap();
    assert_eq!(
        shim.join().unwrap(),
        End::Closed(Some(CloseInfo {
            code: 1000,
            reason: "bye".into()
        }))
    );
    assert_eq!(std::fs::read(root.join("tls.txt")).unwrap(), b"over tls");
}

#[test]
fn command_over_the_rate_limit_is_refused_and_audited_with_duration_zero() {
    use autogpt_shim::daemon::{MachineLimitSettings, MachineLimits};
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let limits = MachineLimits::new(MachineLimitSettings {
        max_commands_per_minute: 2,
        ..MachineLimitSettings::default()
    });
    let (setup, _log, root, audit_path) =
        setup_limited(&base, &["shell"], true, 4, Arc::new(limits));
    let (to_shim, rx) = unbounded();
    let (tx, from_shim) = unbounded();
    let served = std::thread::spawn(move || {
        let pool = WorkerThreads::new(WORKERS).unwrap();
        daemon::serve(setup, &pool, MemIn(rx), MemOut(tx), &AtomicBool::new(false))
    });
    let fx = Fx {
        _tmp: tmp,
        root,
        audit_path,
        to_shim,
        from_shim,
        early: Default::default(),
        served,
        log: _log,
    };
    for n in 0..2 {
        fx.request(
            &format!("c{n}"),
            "EXECUTE_COMMAND",
            json!({"argv": ["true"]}),
        );
        assert_eq!(fx.reply(&format!("c{n}"))["type"], "COMMAND_RESULT");
    }
    fx.request(
        "c2",
        "EXECUTE_COMMAND",
        json!({"argv": ["touch", "ran"], "cwd": "sub"}),
    );
    let e = fx.reply("c2");
    assert_eq!(e["payload"]["code"], "SHIM_OVERLOADED");
    assert_eq!(
        e["payload"]["message"],
        "Command rate limit exceeded (2/minute)."
    );
    assert!(!fx.root.join("ran").exists());
    let ops = fx.audit_ops();
    let (op, record) = ops.last().unwrap();
    assert_eq!(op, "EXECUTE_COMMAND");
    assert_eq!(record["request_id"], "c2");
    assert_eq!(record["details"]["cwd"], "sub");
    assert_eq!(
        record["result"],
        json!({"ok": false, "exit_code": null, "duration_ms": 0, "error_code": "SHIM_OVERLOADED"})
    );
    fx.finish();
}
