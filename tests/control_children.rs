//! Child runtimes and the idle reaper (CONTROL.md §10) in process: a real
//! control plane whose children open real connections to the platform
//! emulator, driven through the control requests. The ten-minute idle
//! period is passed in, so the reaper's rules are tested without waiting
//! ten minutes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use autogpt_shim::audit::{AuditKey, AuditLog, WriterOptions};
use autogpt_shim::config::{Endpoints, Platform};
use autogpt_shim::control::{
    ChildTemplate, Children, ControlPlane, ControlSettings, GrantKey, Revisions,
};
use autogpt_shim::daemon::{
    self, CommandGate, Credentials, DataPlane, Identity, Limits, MachineLimitSettings,
    MachineLimits, MachineWorkPool, Plane, Renewal, Serving, WORKERS, WorkerThreads,
};
use autogpt_shim::exec::Spawner;
use autogpt_shim::jail::JailOptions;
use autogpt_shim::log::Log;
use autogpt_shim::protocol::{
    ActivateSession, AttachSession, Backoff, DirectoryListRequest, Message, SessionId,
};
use autogpt_shim::transport::{Connector, ProxyConfig};
use autogpt_shim_emulator::{Conn, Emulator, EmulatorOptions, Ending, HelloAck};
use serde_json::{Value, json};
use zeroize::Zeroizing;

const WAIT: Duration = Duration::from_secs(20);

/// A token that never needs renewal (the emulator requires none).
struct NoToken;

impl Credentials for NoToken {
    fn access_token(&self) -> Result<Option<Zeroizing<String>>, String> {
        Ok(None)
    }
    fn renew(&self, _rejected: Option<&Zeroizing<String>>, _audit: &daemon::AuditSink) -> Renewal {
        Renewal::Definitive("no token in this test".into())
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    audit_path: PathBuf,
    emulator: Emulator,
    plane: Arc<ControlPlane>,
    requests: Arc<dyn daemon::ControlRequests>,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("alice");
    std::fs::create_dir_all(home.join("project")).unwrap();
    let home = home.canonicalize().unwrap();
    let audit_path = tmp.path().join("audit.log");
    let (audit, _thread) = AuditLog::open(
        WriterOptions::new(audit_path.clone(), "0.1.0-test"),
        AuditKey::new(vec![7; 32]).unwrap(),
    )
    .unwrap();
    let emulator = Emulator::start(EmulatorOptions::new().plain()).unwrap();
    let connector = Connector::new(None, &[], ProxyConfig::direct()).unwrap();
    let identity = Identity {
        machine_id: "machine-test".into(),
        display_name: "test".into(),
        platform: Platform::Linux,
        arch: autogpt_shim::config::Arch::X86_64,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let machine_pool = Arc::new(MachineWorkPool::new(NonZeroU64::new(4).unwrap()));
    let template = ChildTemplate {
        endpoints: Endpoints::derive(&emulator.platform_url(), None, None),
        connector: Arc::new(connector),
        credentials: Arc::new(NoToken),
        identity: identity.clone(),
        optional: daemon::Optional::default(),
        backoff: Backoff {
            base: 0.05,
            max_delay: 0.2,
            jitter: 0.0,
        },
        audit: audit.clone(),
        log: Log::stderr(autogpt_shim::config::LogLevel::Warning),
        audit_path: audit_path.clone(),
        data_plane: {
            let spawner = Arc::new(
                Spawner::start(std::path::Path::new(env!("CARGO_BIN_EXE_autogpt-shim"))).unwrap(),
            );
            let commands: Arc<dyn CommandGate + Send> =
                Arc::new(MachineLimits::new(MachineLimitSettings::default()));
            Arc::new(move |session_id: &str, jail| DataPlane {
                jail,
                spawner: Arc::clone(&spawner),
                host_env: Arc::new(Vec::new()),
                commands: Arc::clone(&commands),
                shell_enabled: false,
                refuse_multilink_reads: false,
                umask: rustix::fs::Mode::from_raw_mode(0o022),
                sandbox: autogpt_shim::exec::CommandSandbox::default(),
                rules: std::sync::Arc::new(autogpt_shim::daemon::CommandRules::default()),
                session_id: session_id.to_owned(),
            })
        },
        jail_options: JailOptions::default(),
    };
    let children = Children::new(
        template,
        Arc::new(WorkerThreads::new(WORKERS).unwrap()),
        Arc::clone(&machine_pool),
        stop,
    );
    let settings = ControlSettings {
        grant_key: GrantKey::derive(&AuditKey::new(vec![7; 32]).unwrap()),
        machine_id: identity.machine_id.clone(),
        home: home.clone(),
        wsl: false,
        audit,
        revisions: Revisions::load(&tmp.path().join("state")).unwrap(),
        log: Log::stderr(autogpt_shim::config::LogLevel::Warning),
        ceilings: Limits {
            max_concurrent: NonZeroU64::new(4).unwrap(),
            command_timeout_seconds: NonZeroU64::new(30).unwrap(),
            max_file_size_bytes: NonZeroU64::new(10 << 20).unwrap(),
        },
        protected: Default::default(),
    };
    let plane = Arc::new(ControlPlane::new(settings, children, machine_pool));
    let Serving::Control(requests) = plane.serving() else {
        panic!("the control plane serves the control connection");
    };
    Fixture {
        _tmp: tmp,
        home,
        audit_path,
        emulator,
        plane,
        requests,
    }
}

impl Fixture {
    fn handle(&self, message: Message) -> Message {
        self.requests.handle("req-1", &message)
    }

    /// Browses to `project`, attaches and activates `session`, and accepts
    /// the child's connection.
    fn activate(&self, session: &str) -> Conn {
        let Message::DirectoryListResponse(roots) =
            self.handle(Message::DirectoryListRequest(DirectoryListRequest {
                browse_id: None,
                directory_ref: None,
                cursor: None,
            }))
        else {
            panic!("no root listing");
        };
        let Message::DirectoryListResponse(listing) =
            self.handle(Message::DirectoryListRequest(DirectoryListRequest {
                browse_id: Some(roots.browse_id.clone()),
                directory_ref: Some(roots.entries[0].directory_ref.clone()),
                cursor: None,
            }))
        else {
            panic!("no home listing");
        };
        let project = listing
            .entries
            .iter()
            .find(|e| e.name == "project")
            .unwrap();
        let attached = self.handle(Message::AttachSession(AttachSession {
            session_id: SessionId::parse(session).unwrap(),
            browse_id: listing.browse_id.clone(),
            directory_ref: project.directory_ref.clone(),
            expected_connection_id: None,
        }));
        let Message::SessionAttached(attached) = attached else {
            panic!("{attached:?}");
        };
        self.activate_again(session, attached.revision.get())
    }

    fn activate_again(&self, session: &str, revision: u64) -> Conn {
        let activated = self.handle(Message::ActivateSession(ActivateSession {
            session_id: SessionId::parse(session).unwrap(),
            revision: NonZeroU64::new(revision).unwrap(),
        }));
        assert!(
            matches!(activated, Message::SessionActivated(_)),
            "{activated:?}"
        );
        let conn = self.emulator.accept(WAIT).unwrap();
        let hello = conn.expect_hello(WAIT);
        assert_eq!(
            hello["payload"]["allowed_root"],
            self.home.join("project").to_str().unwrap()
        );
        conn.send_hello_ack(&HelloAck::new().session_id(session))
            .unwrap();
        // The handshake is done once a request is answered.
        let stat = conn.call("FILE_STAT", json!({"path": "."}), WAIT).unwrap();
        assert_eq!(stat["type"], "FILE_STAT_RESPONSE");
        conn
    }

    /// The complete records: a last line without its LF is still being
    /// appended by the running daemon.
    fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit_path).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

#[test]
fn idle_child_is_stopped_with_a_record_and_restored_by_activate() {
    let fx = fixture();
    let conn = fx.activate("chat-idle");
    assert!(fx.plane.reap_idle(Duration::from_secs(3600)));
    assert!(fx.plane.children().is_live("chat-idle"), "not idle yet");

    std::thread::sleep(Duration::from_millis(300));
    assert!(fx.plane.reap_idle(Duration::from_millis(200)));
    assert!(!fx.plane.children().is_live("chat-idle"));
    assert!(matches!(
        conn.wait_closed(WAIT),
        Some(Ending::ClosedByShim {
            code: Some(1000),
            ..
        })
    ));
    let record = fx
        .records()
        .into_iter()
        .find(|r| r["op"] == "IDLE_SESSION_DETACH")
        .unwrap();
    assert_eq!(record["session_id"], "chat-idle");
    assert_eq!(record["request_id"], Value::Null);
    assert!(record["details"]["idle_seconds"].as_f64().unwrap() >= 0.2);

    // The binding was kept: the same revision activates a new child.
    let conn = fx.activate_again("chat-idle", 1);
    let read = conn.call("FILE_STAT", json!({"path": "."}), WAIT).unwrap();
    assert_eq!(read["type"], "FILE_STAT_RESPONSE");
    fx.plane.children().stop_all();
}

#[test]
fn ping_does_not_keep_a_child_alive_but_a_request_does() {
    let fx = fixture();
    let conn = fx.activate("chat-ping");
    // Requests keep it alive: one every 250 ms for 3 s, against a 2 s
    // idle period (the margin absorbs a loaded machine).
    let idle = Duration::from_secs(2);
    for _ in 0..12 {
        std::thread::sleep(Duration::from_millis(250));
        conn.call("FILE_STAT", json!({"path": "."}), WAIT).unwrap();
        assert!(fx.plane.reap_idle(idle));
        assert!(fx.plane.children().is_live("chat-ping"));
    }
    // PINGs do not: after 2.5 s of nothing but PINGs it is idle.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(250));
        let id = conn.ping().unwrap();
        assert_eq!(conn.wait_response(&id, WAIT).unwrap()["type"], "PONG");
    }
    assert!(fx.plane.reap_idle(idle));
    assert!(!fx.plane.children().is_live("chat-ping"));
}

#[test]
fn a_child_ending_on_its_own_frees_its_slot_and_keeps_the_binding() {
    let fx = fixture();
    let conn = fx.activate("chat-end");
    conn.close(4427, "taken over").unwrap();
    assert!(
        (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            !fx.plane.children().is_live("chat-end")
        }),
        "a terminal close ends the child"
    );
    assert_eq!(fx.plane.children().count(), 0);
    assert!(
        fx.plane.children().fatal().is_none(),
        "only the child ended"
    );
    let _conn = fx.activate_again("chat-end", 1);
    fx.plane.children().stop_all();
}
