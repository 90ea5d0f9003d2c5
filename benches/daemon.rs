//! The daemon end to end: the real `autogpt-shim start --session-id` binary
//! (this build's release binary) serving a platform over TLS on loopback,
//! with baselines measured in the same run:
//!
//! 1. `FILE_STAT` round trip, one request at a time (every handled request
//!    also appends a durable audit record);
//! 2. `FILE_WRITE` and `FILE_READ` (base64) of 4 KiB, 1 MiB and 10 MiB;
//! 3. pipelined `FILE_STAT` throughput with `max_concurrent` (10) requests
//!    kept in flight for three seconds;
//! 4. time from spawning the process to the platform receiving HELLO,
//!    median of several starts: it includes reading the token from the
//!    encrypted-file store, whose key derivation is slow on purpose;
//! 5. resident memory: `VmRSS` once connected and quiet, `VmHWM` after the
//!    10 MiB round trips;
//! 6. `FILE_STAT` and `PING` round trips while ten commands run (the
//!    machine-wide command limit), against the same shim idle just before,
//!    on a second shim with the shell on and 16 request slots;
//! 7. how long before the platform's deadline a command that overruns it
//!    is answered: 20 commands that ignore SIGTERM under a `HELLO_ACK`
//!    `command_timeout_seconds` of 3, each result's arrival at the emulator
//!    against the instant its request was handed to it.
//!
//! The baseline for 1 and 2 is a bare tungstenite client over rustls on
//! loopback that answers each request with the shim's recorded response
//! for it: the same request bytes go out and as many bytes come back, over
//! the same TLS and WebSocket code, so the ratio is what the shim's own
//! work (parsing, the jail, file I/O, the audit record) adds. Samples of
//! the shim and of the baseline alternate.
//!
//! 1–3 and 5 talk to the shim from a platform endpoint written here (one
//! thread, blocking reads), not through the emulator's connections, whose
//! I/O thread polls the socket with a 5 ms read timeout and so would add up
//! to 5 ms to every request. 4 runs through the platform emulator, whose
//! receive timestamps are exact.
//!
//! Run with `cargo bench --bench daemon` (`BENCH_RUNS` sets the number of
//! `FILE_STAT` samples, default 200; the other counts scale with it;
//! `BENCH_ONLY=busy` runs 6 alone, `BENCH_ONLY=deadline` 7).

// A benchmark whose setup fails has nothing to measure: stopping is right.
#![allow(clippy::expect_used, clippy::unwrap_used)]
// tungstenite's upgrade callback returns its error response by value.
#![allow(clippy::result_large_err)]

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use autogpt_shim::secrets::{Passphrase, SecretStore, SecretString, TokenFile};
use autogpt_shim_emulator::{Emulator, EmulatorOptions, HelloAck, RawKind};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustix::process::{Pid, Signal, kill_process};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use rustls::{StreamOwned, crypto::ring::default_provider};
use serde_json::{Value, json};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http::StatusCode;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, Utf8Bytes, WebSocket};

const BIN: &str = env!("CARGO_BIN_EXE_autogpt-shim");
const SESSION: &str = "bench-session";
const MAX_CONCURRENT: usize = 10;
/// Request slots of the shim of section 6: room for ten commands and more.
const BUSY_SLOTS: usize = 16;
/// The machine-wide command limit (EXEC.md §8.3).
const COMMANDS: usize = 10;
const WAIT: Duration = Duration::from_secs(60);
/// Section 7's platform deadline (`HELLO_ACK` `command_timeout_seconds`).
const DEADLINE_SECONDS: u64 = 3;
/// Section 7's number of commands.
const DEADLINE_RUNS: usize = 20;
/// PROTOCOL.md §1.4: the largest WebSocket message either way.
const MAX_MESSAGE: usize = 16 << 20;

type ServerWs = WebSocket<StreamOwned<ServerConnection, TcpStream>>;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// p50 and p99 of samples in microseconds.
fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

/// Microseconds, in ms once large.
fn time(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn now_ts() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn frame(message_type: &str, id: &str, payload: Value) -> Utf8Bytes {
    json!({"type": message_type, "id": id, "ts": now_ts(), "version": "1.1", "payload": payload})
        .to_string()
        .into()
}

fn random_hex() -> String {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).unwrap();
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// A CA, and a server certificate for 127.0.0.1 signed by it.
struct Pki {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    server: Arc<ServerConfig>,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "autogpt-shim daemon bench CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        leaf_params.is_ca = IsCa::ExplicitNoCa;
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let server = ServerConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap();
        Pki {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            server: Arc::new(server),
        }
    }

    fn client(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        let config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }
}

/// Accepts one TLS WebSocket; with `token`, the upgrade must carry it.
fn accept(listener: &TcpListener, pki: &Pki, token: Option<&str>) -> ServerWs {
    let (tcp, _) = listener.accept().unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let tls = StreamOwned::new(ServerConnection::new(Arc::clone(&pki.server)).unwrap(), tcp);
    let check = |request: &Request, response: Response| {
        let authorization = request
            .headers()
            .get("authorization")
            .and_then(|value| value.to_str().ok());
        match token {
            Some(token) if authorization != Some(format!("Bearer {token}").as_str()) => {
                let mut refusal = ErrorResponse::new(None);
                *refusal.status_mut() = StatusCode::UNAUTHORIZED;
                Err(refusal)
            }
            _ => Ok(response),
        }
    };
    tungstenite::accept_hdr_with_config(tls, check, Some(ws_config())).unwrap()
}

fn tls_summary(ws: &ServerWs) -> String {
    let conn = &ws.get_ref().conn;
    format!(
        "{:?} {:?}",
        conn.protocol_version().unwrap(),
        conn.negotiated_cipher_suite().unwrap().suite()
    )
}

/// The next text message and when it arrived.
fn next_text(ws: &mut ServerWs) -> (Instant, Utf8Bytes) {
    loop {
        let message = ws.read().unwrap();
        let at = Instant::now();
        if let Message::Text(text) = message {
            return (at, text);
        }
    }
}

/// `(type, id)` of a frame.
fn head(text: &str) -> (String, String) {
    let value: Value = serde_json::from_str(text).unwrap();
    (
        value["type"].as_str().unwrap_or_default().to_owned(),
        value["id"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Sends `request` and waits for the response with `id`, skipping STATUS
/// frames. Returns the round trip in µs and the response.
fn exchange(ws: &mut ServerWs, request: &Utf8Bytes, id: &str) -> (f64, Utf8Bytes) {
    let started = Instant::now();
    ws.send(Message::Text(request.clone())).unwrap();
    loop {
        let (at, text) = next_text(ws);
        // Only a file's contents make a large frame; parsing it would cost
        // more than the check is worth.
        let matches = if text.len() > 65_536 {
            text.contains(id)
        } else {
            let (message_type, frame_id) = head(&text);
            message_type != "STATUS" && frame_id == id
        };
        if matches {
            return ((at - started).as_secs_f64() * 1e6, text);
        }
        let (message_type, _) = head(&text);
        assert_eq!(message_type, "STATUS", "unexpected frame: {text}");
    }
}

/// The bare baseline peer: a tungstenite client over rustls that answers
/// every text message with `response`.
struct Peer {
    ws: ServerWs,
    thread: Option<JoinHandle<()>>,
}

impl Peer {
    fn start(listener: &TcpListener, pki: &Pki, response: Utf8Bytes) -> Peer {
        let addr: SocketAddr = listener.local_addr().unwrap();
        let client = pki.client();
        let thread = thread::spawn(move || {
            let tcp = TcpStream::connect(addr).unwrap();
            tcp.set_nodelay(true).unwrap();
            let name = ServerName::try_from("127.0.0.1").unwrap();
            let tls = StreamOwned::new(ClientConnection::new(client, name).unwrap(), tcp);
            let url = format!("wss://{addr}/baseline");
            let (mut ws, _) = tungstenite::client::client_with_config(url, tls, Some(ws_config()))
                .map_err(|e| e.to_string())
                .unwrap();
            loop {
                match ws.read() {
                    Ok(Message::Text(_)) => ws.send(Message::Text(response.clone())).unwrap(),
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        });
        let ws = accept(listener, pki, None);
        Peer {
            ws,
            thread: Some(thread),
        }
    }

    fn exchange(&mut self, request: &Utf8Bytes) -> f64 {
        let started = Instant::now();
        self.ws.send(Message::Text(request.clone())).unwrap();
        let (at, _) = next_text(&mut self.ws);
        (at - started).as_secs_f64() * 1e6
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.ws.close(None);
        while self.ws.read().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The temporary home of the shim under test.
struct Home {
    dir: tempfile::TempDir,
    root: PathBuf,
    token: String,
    passphrase: String,
}

impl Home {
    fn new(ca_pem: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
        let home = Home {
            root: root.canonicalize().unwrap(),
            token: random_hex(),
            passphrase: random_hex(),
            dir,
        };
        let passphrase = Passphrase::new(home.passphrase.as_bytes().to_vec()).unwrap();
        let file = TokenFile::new(home.path("secrets"), passphrase);
        SecretStore::with_file(file, home.path("legacy-audit-key.enc"))
            .store_tokens(
                &SecretString::new(random_hex()),
                &SecretString::new(home.token.clone()),
            )
            .unwrap();
        home
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Starts `autogpt-shim start` against `platform_url`; output goes to
    /// `shim.log` in the home.
    fn spawn(&self, platform_url: &str, ca_file: &Path) -> Child {
        self.spawn_with(platform_url, ca_file, MAX_CONCURRENT, &[])
    }

    /// [`Home::spawn`] with `max_concurrent` slots and `extra` arguments
    /// after `start`.
    fn spawn_with(
        &self,
        platform_url: &str,
        ca_file: &Path,
        max_concurrent: usize,
        extra: &[&str],
    ) -> Child {
        let path = |rel: &str| self.path(rel).to_str().unwrap().to_owned();
        let log = File::create(self.path("shim.log")).unwrap();
        Command::new(BIN)
            .env_clear()
            .envs([
                ("PATH", "/usr/local/bin:/usr/bin:/bin".to_owned()),
                ("HOME", path("")),
                ("XDG_CONFIG_HOME", path("config")),
                ("XDG_STATE_HOME", path("state")),
                ("AUTOGPT_SHIM_FALLBACK_DIR", path("secrets")),
                ("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", self.passphrase.clone()),
                ("AUTOGPT_SHIM_MACHINE_ID", "bench-machine".to_owned()),
                (
                    "AUTOGPT_SHIM_ALLOWED_ROOT",
                    self.root.to_str().unwrap().into(),
                ),
                ("AUTOGPT_SHIM_AUDIT_LOG_PATH", path("state/audit.log")),
                ("AUTOGPT_SHIM_MAX_CONCURRENT", max_concurrent.to_string()),
                ("AUTOGPT_SHIM_RECONNECT_BASE_DELAY", "0.05".to_owned()),
                ("AUTOGPT_SHIM_RECONNECT_MAX_DELAY", "0.2".to_owned()),
                ("AUTOGPT_SHIM_RECONNECT_JITTER_SECONDS", "0".to_owned()),
            ])
            .args(["--platform-url", platform_url, "--ca-file"])
            .arg(ca_file)
            .args(["start", "--session-id", SESSION])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("shim.log")).unwrap_or_default()
    }
}

fn sigterm(child: &Child) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
}

/// Waits for exit status 0.
fn expect_clean_exit(child: &mut Child, home: &Home) {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "shim exited {status}:\n{}", home.log());
            return;
        }
        assert!(
            Instant::now() < deadline,
            "shim did not stop:\n{}",
            home.log()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// A `/proc/<pid>/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// Accepts the shim's connection and completes the handshake granting
/// `files` with `max_concurrent` 10.
fn handshake(listener: &TcpListener, pki: &Pki, home: &Home) -> ServerWs {
    handshake_granting(listener, pki, home, &["files"], MAX_CONCURRENT)
}

/// [`handshake`] granting `granted` with `max_concurrent`.
fn handshake_granting(
    listener: &TcpListener,
    pki: &Pki,
    home: &Home,
    granted: &[&str],
    max_concurrent: usize,
) -> ServerWs {
    let mut ws = accept(listener, pki, Some(&home.token));
    let (_, text) = next_text(&mut ws);
    let hello: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(hello["type"], "HELLO", "{hello}");
    let ack = json!({
        "session_id": SESSION,
        "connection_id": null,
        "protocol_version": "1.1",
        "granted_capabilities": granted,
        "max_file_size_bytes": 10_485_760,
        "command_timeout_seconds": 30,
        "max_concurrent": max_concurrent,
    });
    ws.send(Message::Text(frame(
        "HELLO_ACK",
        hello["id"].as_str().unwrap(),
        ack,
    )))
    .unwrap();
    ws
}

/// Alternating samples of the shim and the baseline for one request.
/// `build` makes the request frame for an id; `check` validates a response
/// of the shim (once, outside the timing). Prints one line; returns the
/// shim's mean round trip in µs.
fn compare(
    label: &str,
    runs: usize,
    ws: &mut ServerWs,
    listener: &TcpListener,
    pki: &Pki,
    build: &dyn Fn(&str) -> Utf8Bytes,
    check: &dyn Fn(&Value),
) -> f64 {
    let warmup = (runs / 10).max(1);
    let first = build("warmup-0");
    let (_, response) = exchange(ws, &first, "warmup-0");
    check(&serde_json::from_str(&response).unwrap());
    let mut peer = Peer::start(listener, pki, response.clone());
    for i in 1..warmup {
        let id = format!("warmup-{i}");
        exchange(ws, &build(&id), &id);
        peer.exchange(&first);
    }
    let mut shim = Vec::with_capacity(runs);
    let mut bare = Vec::with_capacity(runs);
    let mut shim_total = 0.0;
    for i in 0..runs {
        // Fresh ids keep every request distinct; they all have the same
        // length, so the baseline sends exactly as many bytes.
        let id = format!("req-{i:08}");
        let request = build(&id);
        let (us, _) = exchange(ws, &request, &id);
        shim_total += us;
        shim.push(us);
        bare.push(peer.exchange(&request));
    }
    let (s50, s99) = percentiles(shim);
    let (b50, b99) = percentiles(bare);
    let sent = build("req-00000000").len();
    println!(
        "{label:<22} {:>9} out {:>9} back | shim p50 {:>9} p99 {:>9} | bare p50 {:>9} p99 {:>9} | p50 ratio {:>5.1}x",
        bytes(sent),
        bytes(response.len()),
        time(s50),
        time(s99),
        time(b50),
        time(b99),
        s50 / b50
    );
    shim_total / runs as f64
}

/// Pipelined FILE_STATs with `MAX_CONCURRENT` in flight for `duration`.
fn pipelined(ws: &mut ServerWs, root: &str, duration: Duration) -> (f64, usize) {
    let stat = |n: usize| {
        frame(
            "FILE_STAT",
            &format!("p-{n}"),
            json!({"path": root, "follow_symlinks": true}),
        )
    };
    let mut sent = 0;
    let mut done = 0;
    let mut statuses = 0;
    let started = Instant::now();
    for _ in 0..MAX_CONCURRENT {
        ws.send(Message::Text(stat(sent))).unwrap();
        sent += 1;
    }
    while done < sent {
        let (_, text) = next_text(ws);
        let value: Value = serde_json::from_str(&text).unwrap();
        match value["type"].as_str() {
            Some("STATUS") => {
                statuses += 1;
                continue;
            }
            Some("FILE_STAT_RESPONSE") => done += 1,
            _ => panic!("unexpected frame while pipelining: {text}"),
        }
        if started.elapsed() < duration {
            ws.send(Message::Text(stat(sent))).unwrap();
            sent += 1;
        }
    }
    (done as f64 / started.elapsed().as_secs_f64(), statuses)
}

/// `runs` sequential round trips each of `FILE_STAT` on `root` and `PING`,
/// alternating, in µs. Any frame but the answers and `STATUS` stops the
/// benchmark (see [`exchange`]).
fn stat_and_ping(ws: &mut ServerWs, root: &str, runs: usize, tag: &str) -> (Vec<f64>, Vec<f64>) {
    let mut stats = Vec::with_capacity(runs);
    let mut pings = Vec::with_capacity(runs);
    for i in 0..runs {
        let id = format!("{tag}-stat-{i}");
        let stat = frame(
            "FILE_STAT",
            &id,
            json!({"path": root, "follow_symlinks": true}),
        );
        let (us, reply) = exchange(ws, &stat, &id);
        assert_eq!(head(&reply).0, "FILE_STAT_RESPONSE", "{reply}");
        stats.push(us);
        let id = format!("{tag}-ping-{i}");
        pings.push(exchange(ws, &frame("PING", &id, json!({})), &id).0);
    }
    (stats, pings)
}

/// Section 6: latency idle, then with [`COMMANDS`] commands running.
fn busy(runs: usize, pki: &Pki, listener: &TcpListener) {
    let home = Home::new(&pki.ca_pem);
    let root = home.root.to_str().unwrap().to_owned();
    let platform_url = format!("https://{}", listener.local_addr().unwrap());
    let ca_file = home.path("ca.pem");
    let mut child = home.spawn_with(&platform_url, &ca_file, BUSY_SLOTS, &["--enable-shell"]);
    let mut ws = handshake_granting(listener, pki, &home, &["files", "shell"], BUSY_SLOTS);
    exchange(&mut ws, &frame("PING", "ping-0", json!({})), "ping-0");
    stat_and_ping(&mut ws, &root, (runs / 10).max(1), "warmup");
    let (idle_stats, idle_pings) = stat_and_ping(&mut ws, &root, runs, "idle");

    for n in 0..COMMANDS {
        let command = format!("touch started-{n}; while [ ! -e release ]; do sleep 0.2; done");
        let request = frame(
            "EXECUTE_COMMAND",
            &format!("command-{n}"),
            json!({"command": command}),
        );
        ws.send(Message::Text(request)).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    while !(0..COMMANDS).all(|n| home.root.join(format!("started-{n}")).exists()) {
        assert!(Instant::now() < deadline, "the commands did not start");
        thread::sleep(Duration::from_millis(10));
    }
    // A COMMAND_RESULT here would stop the run: the commands are still
    // running when the last sample is taken.
    let (busy_stats, busy_pings) = stat_and_ping(&mut ws, &root, runs, "busy");
    std::fs::write(home.root.join("release"), b"").unwrap();
    let mut finished = 0;
    while finished < COMMANDS {
        let (_, text) = next_text(&mut ws);
        match head(&text).0.as_str() {
            "COMMAND_RESULT" => finished += 1,
            "STATUS" => {}
            _ => panic!("unexpected frame: {text}"),
        }
    }

    println!(
        "round trips with {COMMANDS} commands running, against idle just before, {runs} each:"
    );
    for (label, idle, busy) in [
        ("FILE_STAT", idle_stats, busy_stats),
        ("PING", idle_pings, busy_pings),
    ] {
        let (i50, i99) = percentiles(idle);
        let (b50, b99) = percentiles(busy);
        println!(
            "{label:<10} busy p50 {:>9} p99 {:>9} | idle p50 {:>9} p99 {:>9}",
            time(b50),
            time(b99),
            time(i50),
            time(i99)
        );
    }
    sigterm(&child);
    while ws.read().is_ok() {}
    expect_clean_exit(&mut child, &home);
}

/// Spawn → HELLO received by the emulator, in ms, for `runs` starts.
fn startup(runs: usize, home: &Home) -> Vec<f64> {
    let emulator =
        Emulator::start(EmulatorOptions::new().expect_token(home.token.clone())).unwrap();
    let ca_file = emulator.ca_file().unwrap().to_path_buf();
    let mut samples = Vec::new();
    for _ in 0..runs {
        let spawned = Instant::now();
        let mut child = home.spawn(&emulator.platform_url(), &ca_file);
        let conn = emulator
            .accept(WAIT)
            .unwrap_or_else(|| panic!("no connection:\n{}", home.log()));
        conn.try_expect_hello(WAIT).unwrap();
        let hello_at = conn
            .raw_frames()
            .into_iter()
            .find(|frame| frame.kind == RawKind::Text)
            .unwrap()
            .at;
        samples.push((hello_at - spawned).as_secs_f64() * 1e3);
        conn.send_hello_ack(&HelloAck::new().session_id(SESSION))
            .unwrap();
        conn.call("PING", json!({}), WAIT).unwrap();
        sigterm(&child);
        expect_clean_exit(&mut child, home);
    }
    samples
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
        .max(10);
    let pki = Pki::new();
    let home = Home::new(&pki.ca_pem);
    let root = home.root.to_str().unwrap().to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let platform_url = format!("https://{}", listener.local_addr().unwrap());
    println!("daemon: {BIN}");
    match std::env::var("BENCH_ONLY").as_deref() {
        Ok("busy") => return busy(runs, &pki, &listener),
        Ok("deadline") => return deadline(&home),
        _ => {}
    }

    let mut child = home.spawn(&platform_url, &home.path("ca.pem"));
    let pid = child.id();
    let mut ws = handshake(&listener, &pki, &home);
    // Answered only once the handshake is done: the connection is up.
    let ping = frame("PING", "ping-0", json!({}));
    exchange(&mut ws, &ping, "ping-0");
    thread::sleep(Duration::from_secs(1));
    let idle_rss = status_kib(pid, "VmRSS:");

    println!(
        "round trips, shim and bare peer alternating; TLS shim {}",
        tls_summary(&ws)
    );
    let stat_build = |id: &str| {
        frame(
            "FILE_STAT",
            id,
            json!({"path": root, "follow_symlinks": true}),
        )
    };
    let stat_mean = compare(
        &format!("FILE_STAT x{runs}"),
        runs,
        &mut ws,
        &listener,
        &pki,
        &stat_build,
        &|reply| assert_eq!(reply["type"], "FILE_STAT_RESPONSE", "{reply}"),
    );

    for (label, size, count) in [
        ("4 KiB", 4096, runs / 2),
        ("1 MiB", 1 << 20, runs / 10),
        ("10 MiB", 10 << 20, runs / 30),
    ] {
        let count = count.max(3);
        let data: Vec<u8> = (0..size)
            .map(|i: usize| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let content = BASE64.encode(&data);
        let path = home.root.join(format!("bench-{size}.bin"));
        let path = path.to_str().unwrap().to_owned();
        let write = |id: &str| {
            frame(
                "FILE_WRITE",
                id,
                json!({"path": path, "content": content, "encoding": "base64", "create_parents": false}),
            )
        };
        compare(
            &format!("FILE_WRITE {label} x{count}"),
            count,
            &mut ws,
            &listener,
            &pki,
            &write,
            &|reply| assert_eq!(reply["type"], "ACK", "{reply}"),
        );
        let read = |id: &str| {
            frame(
                "FILE_READ",
                id,
                json!({"path": path, "encoding": "base64", "format": "bytes", "offset": 0, "length": null}),
            )
        };
        compare(
            &format!("FILE_READ {label} x{count}"),
            count,
            &mut ws,
            &listener,
            &pki,
            &read,
            &|reply| {
                assert_eq!(
                    reply["type"], "FILE_CONTENTS",
                    "{}",
                    &reply["payload"]["message"]
                );
                let got = BASE64
                    .decode(reply["payload"]["content"].as_str().unwrap())
                    .unwrap();
                assert!(got == data, "FILE_READ returned other bytes");
            },
        );
    }
    let peak_rss = status_kib(pid, "VmHWM:");

    let seconds = 3;
    let (rate, statuses) = pipelined(&mut ws, &root, Duration::from_secs(seconds));
    println!(
        "pipelined FILE_STAT, {MAX_CONCURRENT} in flight for {seconds} s: {rate:.0} ops/s ({:.1}x the sequential rate; {statuses} STATUS frames)",
        rate * stat_mean / 1e6
    );
    println!(
        "resident memory: idle after connect {:.1} MiB (VmRSS), peak after the 10 MiB round trips {:.1} MiB (VmHWM)",
        idle_rss as f64 / 1024.0,
        peak_rss as f64 / 1024.0
    );

    sigterm(&child);
    // Answer the shim's close frame, then let it finish.
    while ws.read().is_ok() {}
    expect_clean_exit(&mut child, &home);

    let starts = (runs / 40).max(3);
    let mut samples = startup(starts, &home);
    samples.sort_by(f64::total_cmp);
    println!(
        "spawn to HELLO at the emulator, {starts} starts: median {:.1} ms (min {:.1}, max {:.1})",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1]
    );

    busy(runs, &pki, &listener);
    deadline(&home);
}

/// Section 7: [`DEADLINE_RUNS`] commands overrunning a platform deadline
/// of [`DEADLINE_SECONDS`]; prints the margin of each result before the
/// deadline, the worst first.
fn deadline(home: &Home) {
    let emulator =
        Emulator::start(EmulatorOptions::new().expect_token(home.token.clone())).unwrap();
    let ca_file = emulator.ca_file().unwrap().to_path_buf();
    let mut child = home.spawn_with(
        &emulator.platform_url(),
        &ca_file,
        MAX_CONCURRENT,
        &["--enable-shell"],
    );
    let conn = emulator
        .accept(WAIT)
        .unwrap_or_else(|| panic!("no connection:\n{}", home.log()));
    conn.try_expect_hello(WAIT).unwrap();
    conn.send_hello_ack(
        &HelloAck::new()
            .session_id(SESSION)
            .grant(["files", "shell"])
            .command_timeout_seconds(DEADLINE_SECONDS as i64),
    )
    .unwrap();
    let deadline = Duration::from_secs(DEADLINE_SECONDS);
    let mut margins = Vec::new();
    for _ in 0..DEADLINE_RUNS {
        let sent = Instant::now();
        let id = conn
            .request(
                "EXECUTE_COMMAND",
                json!({"command": "trap '' TERM; echo partial; sleep 30"}),
            )
            .unwrap();
        let result = conn.wait_response(&id, WAIT).unwrap();
        assert_eq!(result["payload"]["timed_out"], true, "{result}");
        assert_eq!(result["payload"]["stdout"], "partial\n", "{result}");
        let arrived = conn.arrival_of(&id).unwrap();
        margins.push((deadline.as_secs_f64() - (arrived - sent).as_secs_f64()) * 1e3);
    }
    margins.sort_by(f64::total_cmp);
    let late = margins.iter().filter(|m| **m < 1000.0).count();
    println!(
        "commands overrunning a {DEADLINE_SECONDS} s platform deadline, {DEADLINE_RUNS} runs: result before the deadline by worst {:.0} ms, median {:.0} ms, best {:.0} ms; {late} with less than 1 s to spare",
        margins[0],
        margins[margins.len() / 2],
        margins[margins.len() - 1]
    );
    sigterm(&child);
    expect_clean_exit(&mut child, home);
}
