//! Runs the real `autogpt-shim start` binary against the platform emulator:
//! an isolated home (config, state, encrypted token file, workspace), the
//! child process with its output captured, and readers for the audit log it
//! writes.
//!
//! The environment of the child is cleared and rebuilt, so no setting or
//! keychain of the machine running the tests can leak in: without a D-Bus
//! session the shim uses the encrypted-file store in the temporary home.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use autogpt_shim::secrets::{Passphrase, SecretStore, SecretString, TokenFile};
use autogpt_shim_emulator::oauth::{form_fields, visit};
use autogpt_shim_emulator::{Conn, Emulator, EmulatorOptions, HelloAck, OAuthEmulator};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_autogpt-shim");
pub const PASSPHRASE: &str = "correct horse battery staple";
pub const ACCESS: &str = "access-token-e2e-7f3a9c";
pub const REFRESH: &str = "refresh-token-e2e-51d0be";
pub const SESSION: &str = "session-e2e-1";
pub const WAIT: Duration = Duration::from_secs(20);
/// The largest WebSocket message either way.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// A temporary home for one shim.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub audit: PathBuf,
}

impl Home {
    /// A home with a workspace and the tokens stored.
    pub fn new() -> Home {
        let home = Home::without_tokens();
        home.store_tokens(ACCESS, REFRESH);
        home
    }

    /// A home with a workspace and no tokens.
    pub fn without_tokens() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        std::fs::create_dir(&root).unwrap();
        let audit = dir.path().join("state/audit.log");
        Home {
            root: root.canonicalize().unwrap(),
            audit,
            dir,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn secrets_dir(&self) -> PathBuf {
        self.path().join("secrets")
    }

    /// The home's encrypted-file secret store, as the shim opens it.
    pub fn store(&self) -> SecretStore {
        let passphrase = Passphrase::new(PASSPHRASE.as_bytes().to_vec()).unwrap();
        let file = TokenFile::new(self.secrets_dir(), passphrase);
        SecretStore::with_file(file, self.path().join("legacy-audit-key.enc"))
    }

    /// Stores the tokens the way `auth` does, in the home's `tokens.enc`.
    pub fn store_tokens(&self, access: &str, refresh: &str) {
        self.store()
            .store_tokens(
                &SecretString::new(refresh.into()),
                &SecretString::new(access.into()),
            )
            .unwrap();
    }

    /// The child's whole environment.
    pub fn env(&self) -> Vec<(String, String)> {
        let p = |rel: &str| self.path().join(rel).to_str().unwrap().to_owned();
        vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), p("")),
            ("XDG_CONFIG_HOME".into(), p("config")),
            ("XDG_STATE_HOME".into(), p("state")),
            ("AUTOGPT_SHIM_FALLBACK_DIR".into(), p("secrets")),
            ("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE".into(), PASSPHRASE.into()),
            ("AUTOGPT_SHIM_MACHINE_ID".into(), "machine-e2e".into()),
            (
                "AUTOGPT_SHIM_ALLOWED_ROOT".into(),
                self.root.to_str().unwrap().into(),
            ),
            (
                "AUTOGPT_SHIM_AUDIT_LOG_PATH".into(),
                self.audit.to_str().unwrap().into(),
            ),
            ("AUTOGPT_SHIM_RECONNECT_BASE_DELAY".into(), "0.05".into()),
            ("AUTOGPT_SHIM_RECONNECT_MAX_DELAY".into(), "0.2".into()),
            ("AUTOGPT_SHIM_RECONNECT_JITTER_SECONDS".into(), "0".into()),
            ("TZ".into(), "UTC".into()),
        ]
    }

    /// A command for the shim binary with this home's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command.env_clear().envs(self.env()).args(args);
        command
    }

    /// The audit log's records, in order. A running shim may be appending
    /// a record as the log is read: a last line without its LF is not
    /// written yet and is left out.
    pub fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The `op` of every record, in order.
    pub fn ops(&self) -> Vec<String> {
        self.records()
            .iter()
            .map(|r| r["op"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits until a record with `op` exists; returns it.
    pub fn wait_record(&self, op: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.records().into_iter().find(|r| r["op"] == op) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no {op} record; ops: {:?}",
                self.ops()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `autogpt-shim audit verify` with this home: exit status and output.
    pub fn verify(&self) -> (i32, String) {
        let out = self.command(&["audit", "verify"]).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }

    /// Every file the home holds, as one string (for secret scans).
    pub fn all_text(&self) -> String {
        fn walk(dir: &Path, out: &mut String) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if let Ok(bytes) = std::fs::read(&path) {
                    out.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
        }
        let mut out = String::new();
        walk(self.path(), &mut out);
        out
    }
}

/// `--platform-url` and, over TLS, `--ca-file` for `emulator`.
pub fn platform_args(emulator: &Emulator) -> Vec<String> {
    let mut args = vec!["--platform-url".to_owned(), emulator.platform_url()];
    if let Some(file) = emulator.ca_file() {
        args.push("--ca-file".into());
        args.push(file.to_str().unwrap().to_owned());
    }
    args
}

/// Output collected from a pipe by a background thread.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Appends bytes read elsewhere.
    pub fn push(&self, bytes: &[u8]) {
        self.0.lock().unwrap().extend_from_slice(bytes);
    }

    /// Collects `pipe` until it ends, on a background thread.
    pub fn collect_from(self, pipe: impl Read + Send + 'static) {
        self.collect(pipe);
    }

    fn collect(self, mut pipe: impl Read + Send + 'static) {
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                self.0.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A running `autogpt-shim start`.
pub struct Shim {
    pub child: Child,
    pub stdout: Captured,
    pub stderr: Captured,
    status: Option<ExitStatus>,
}

impl Shim {
    /// Starts `autogpt-shim [globals] start --session-id SESSION [extra]`
    /// against `emulator`.
    pub fn start(home: &Home, emulator: &Emulator, extra: &[&str]) -> Shim {
        Shim::start_with_env(home, emulator, &[], extra)
    }

    /// [`Shim::start`] with additional environment variables (e.g. a
    /// `AUTOGPT_SHIM_<KEY>` setting) on top of the home's environment.
    pub fn start_with_env(
        home: &Home,
        emulator: &Emulator,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Shim {
        let mut args = platform_args(emulator);
        args.extend(["start", "--session-id", SESSION].map(String::from));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut command = home.command(&args);
        command.envs(env.iter().copied());
        Shim::spawn(command)
    }

    /// Starts `autogpt-shim [globals] start [extra]` without a session id:
    /// persistent machine-control mode. The home's `AUTOGPT_SHIM_ALLOWED_ROOT`
    /// is irrelevant there and removed.
    pub fn start_control(home: &Home, emulator: &Emulator, extra: &[&str]) -> Shim {
        Shim::start_control_with_env(home, emulator, &[], extra)
    }

    /// [`Shim::start_control`] with additional environment variables on
    /// top of the home's environment.
    pub fn start_control_with_env(
        home: &Home,
        emulator: &Emulator,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Shim {
        let mut args = platform_args(emulator);
        args.push("start".into());
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut command = home.command(&args);
        command.env_remove("AUTOGPT_SHIM_ALLOWED_ROOT");
        command.envs(env.iter().copied());
        Shim::spawn(command)
    }

    /// Starts an arbitrary command line of the binary.
    pub fn spawn(mut command: Command) -> Shim {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stdout = Captured::default();
        let stderr = Captured::default();
        stdout.clone().collect(child.stdout.take().unwrap());
        stderr.clone().collect(child.stderr.take().unwrap());
        Shim {
            child,
            stdout,
            stderr,
            status: None,
        }
    }

    /// A running child whose output is already being collected.
    pub fn from_parts(child: Child, stdout: Captured, stderr: Captured) -> Shim {
        Shim {
            child,
            stdout,
            stderr,
            status: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` (e.g. `libc`-free: 2 SIGINT, 15 SIGTERM).
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid()).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Waits for the exit status; panics after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> i32 {
        if let Some(status) = self.status {
            return status.code().unwrap_or(-1);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.status = Some(status);
                // Let the capture threads drain the pipes.
                std::thread::sleep(Duration::from_millis(50));
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the shim did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                self.stdout.text(),
                self.stderr.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Both streams, for assertions and failure messages.
    pub fn output(&self) -> String {
        format!(
            "--- stdout\n{}--- stderr\n{}",
            self.stdout.text(),
            self.stderr.text()
        )
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `start --session-id SESSION` with the token endpoint on the OAuth
/// emulator and the WebSocket on the platform emulator.
pub fn start_split(home: &Home, oauth: &OAuthEmulator, platform: &Emulator) -> Shim {
    let ca = platform.ca_file().unwrap().to_str().unwrap().to_owned();
    let mut command = home.command(&[
        "--platform-url",
        &oauth.base_url(),
        "--ca-file",
        &ca,
        "start",
        "--session-id",
        SESSION,
    ]);
    command.env("AUTOGPT_SHIM_PLATFORM_WS_URL", platform.ws_url());
    Shim::spawn(command)
}

/// An emulator over TLS that requires the stored access token.
pub fn emulator() -> Emulator {
    Emulator::start(EmulatorOptions::new().expect_token(ACCESS)).unwrap()
}

/// Accepts the shim's next connection and completes the handshake with
/// `ack` (bound to [`SESSION`]); returns the connection and the HELLO.
pub fn connect(emulator: &Emulator, ack: HelloAck) -> (Conn, Value) {
    let conn = emulator
        .accept(WAIT)
        .expect("the shim did not connect to the emulator");
    let hello = conn.expect_hello(WAIT);
    conn.send_hello_ack(&ack.session_id(SESSION)).unwrap();
    (conn, hello)
}

/// Accepts the shim's next connection and completes the handshake with
/// `ack` exactly as given; returns the connection and the HELLO.
pub fn accept_with(emulator: &Emulator, ack: &HelloAck) -> (Conn, Value) {
    let conn = emulator
        .accept(WAIT)
        .expect("the shim did not connect to the emulator");
    let hello = conn.expect_hello(WAIT);
    conn.send_hello_ack(ack).unwrap();
    (conn, hello)
}

/// Sends a request and returns its id and terminal response.
pub fn call(conn: &Conn, message_type: &str, payload: Value) -> (String, Value) {
    let id = conn.request(message_type, payload).unwrap();
    let response = conn
        .wait_response(&id, WAIT)
        .unwrap_or_else(|| panic!("no response to {message_type} {id}"));
    (id, response)
}

/// Browses from the virtual roots into the home directory (the first
/// root) on the control connection `conn` and returns the browse id and the
/// reference of the home entry named `name`.
pub fn reference_to(conn: &Conn, home: &Path, name: &str) -> (String, String) {
    let roots = conn
        .call(
            "DIRECTORY_LIST_REQUEST",
            json!({"browse_id": null, "directory_ref": null}),
            WAIT,
        )
        .unwrap();
    assert_eq!(roots["type"], "DIRECTORY_LIST_RESPONSE", "{roots}");
    let payload = &roots["payload"];
    let browse = payload["browse_id"].as_str().unwrap().to_owned();
    let home_entry = &payload["entries"][0];
    assert_eq!(home_entry["path"], home.to_str().unwrap());
    let home_ref = home_entry["directory_ref"].as_str().unwrap();
    let reference = reference_below(conn, &browse, home_ref, name);
    (browse, reference)
}

/// Lists the folder `directory` of `browse` and returns the reference of
/// its entry named `name`.
pub fn reference_below(conn: &Conn, browse: &str, directory: &str, name: &str) -> String {
    let listing = conn
        .call(
            "DIRECTORY_LIST_REQUEST",
            json!({"browse_id": browse, "directory_ref": directory}),
            WAIT,
        )
        .unwrap();
    let entry = listing["payload"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {listing}"))
        .clone();
    entry["directory_ref"].as_str().unwrap().to_owned()
}

/// A `PING` round trip on `conn`, so everything sent before it has been
/// read and handled.
pub fn settle(conn: &Conn) {
    let id = conn.ping().unwrap();
    assert!(conn.wait_response(&id, WAIT).is_some(), "no PONG");
}

/// The largest WebSocket message (16 MiB) as a `FILE_STAT` whose `path` is
/// a list of zeros: the most JSON values a frame can hold.
pub fn frame_of_zeros() -> String {
    let head = r#"{"type":"FILE_STAT","id":"zeros","ts":1.0,"payload":{"path":["#;
    let tail = "0]}}";
    let mut frame = String::with_capacity(MAX_MESSAGE);
    frame.push_str(head);
    while frame.len() + 2 + tail.len() <= MAX_MESSAGE {
        frame.push_str("0,");
    }
    frame.push_str(tail);
    frame
}

/// A memory figure of process `pid` from `/proc/<pid>/status`, in bytes:
/// `field` is e.g. `VmHWM` (the peak resident set) or `VmRSS`.
pub fn memory_of(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().unwrap();
    kib * 1024
}

/// The peak resident set of process `pid` so far, in bytes.
pub fn peak_rss(pid: i32) -> u64 {
    memory_of(pid, "VmHWM")
}

/// Resets the peak resident set of `pid` to its current resident set by
/// writing `5` to `/proc/<pid>/clear_refs`, so a start-up peak (the token
/// file's key derivation takes 64 MiB) cannot hide what follows. False
/// where the system refuses.
pub fn reset_peak(pid: i32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Starts measuring the peak resident set of `pid` afresh (see
/// [`reset_peak`]) and returns the baseline a later [`peak_rss`] is
/// compared with; where the reset is refused, the baseline is the peak so
/// far, which only makes a bound easier to meet.
pub fn peak_baseline(pid: i32) -> u64 {
    reset_peak(pid);
    peak_rss(pid)
}

/// Polls `check` until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The unprivileged user (and group) tests run a daemon as when root's
/// privileges would hide what they check: `nobody`.
pub const NOBODY: u32 = 65534;

/// Whether the test can run here: it needs root (to run a daemon as
/// another user, or to create a cgroup for the commands). Elsewhere it says
/// so on a `skipped:` line and the test returns.
pub fn runs_as_root(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        println!("skipped: {test} needs root");
    }
    root
}

/// Gives `path` and everything below it to [`NOBODY`].
pub fn give_to_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            give_to_nobody(&entry.unwrap().path());
        }
    }
}

/// A plain-WebSocket emulator (loopback) requiring the stored access
/// token: a daemon running as [`NOBODY`] needs no file of the test's.
pub fn plain_emulator() -> Emulator {
    Emulator::start(EmulatorOptions::new().plain().expect_token(ACCESS)).unwrap()
}

/// `start --session-id SESSION --enable-shell` against `emulator`, as
/// [`NOBODY`] (in a home given to that user) when `as_nobody`, connected
/// with `files` and `shell` granted.
pub fn shell_session(home: &Home, emulator: &Emulator, as_nobody: bool) -> (Shim, Conn) {
    use std::os::unix::process::CommandExt;
    let url = emulator.platform_url();
    let mut command = home.command(&[
        "--platform-url",
        &url,
        "start",
        "--session-id",
        SESSION,
        "--enable-shell",
    ]);
    if as_nobody {
        give_to_nobody(home.path());
        command.uid(NOBODY).gid(NOBODY);
    }
    let shim = Shim::spawn(command);
    let (conn, _) = connect(emulator, HelloAck::new().grant(["files", "shell"]));
    (shim, conn)
}

/// Sends `count` shell commands on `conn` that each touch `started-N` in
/// `root` (the connection's root) and then wait for a `release` file there;
/// returns their ids once all of them run.
pub fn start_blocked_commands(conn: &Conn, root: &Path, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..count {
        let command = format!("touch started-{n}; while [ ! -e release ]; do sleep 0.05; done");
        ids.push(
            conn.request("EXECUTE_COMMAND", json!({"command": command}))
                .unwrap(),
        );
    }
    assert!(
        eventually(WAIT, || (0..count)
            .all(|n| root.join(format!("started-{n}")).exists())),
        "the blocked commands did not all start"
    );
    ids
}

/// Waits `within` for the response to `id`.
pub fn response_within(conn: &Conn, id: &str, within: Duration) -> Value {
    conn.wait_response(id, within)
        .unwrap_or_else(|| panic!("no response to {id} within {within:?}"))
}

/// A distinct block of twelve callback ports per test, so tests can run
/// in parallel (and away from the default range a real `auth` may use).
pub fn port_block() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 43000 + (std::process::id() % 200) as u16 * 100;
    base + NEXT.fetch_add(12, Ordering::SeqCst)
}

/// A running `autogpt-shim auth` with the authorize URL it printed.
pub struct AuthRun {
    pub shim: Shim,
    pub url: String,
    /// Its standard input, when it was started with one to paste into.
    pub stdin: Option<ChildStdin>,
}

impl AuthRun {
    /// `autogpt-shim --platform-url <oauth> auth` with callback ports from
    /// `first_port`, standard input closed.
    pub fn start(home: &Home, oauth: &OAuthEmulator, first_port: u16) -> AuthRun {
        AuthRun::spawn(
            home,
            &["--platform-url", &oauth.base_url(), "auth"],
            first_port,
            Stdio::null(),
        )
    }

    /// `autogpt-shim <args>` (an `auth` command line) with callback ports
    /// from `first_port` and the given standard input; returns once the
    /// authorize URL is printed.
    pub fn spawn(home: &Home, args: &[&str], first_port: u16, stdin: Stdio) -> AuthRun {
        let mut command = home.command(args);
        command.env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", first_port.to_string());
        command
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stderr = Captured::default();
        stderr.clone().collect_from(child.stderr.take().unwrap());
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut url = None;
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.starts_with("http://") || line.starts_with("https://") {
                url = Some(line);
                break;
            }
        }
        let url =
            url.unwrap_or_else(|| panic!("no authorize URL printed: {seen}{}", stderr.text()));
        // The rest of stdout is collected like any other run.
        let stdout = Captured::default();
        let rest = stdout.clone();
        std::thread::spawn(move || {
            rest.push(seen.as_bytes());
            for line in lines.map_while(Result::ok) {
                rest.push(format!("{line}\n").as_bytes());
            }
        });
        AuthRun {
            shim: Shim::from_parts(child, stdout, stderr),
            url,
            stdin,
        }
    }

    /// A parameter of the authorize URL.
    pub fn param(&self, name: &str) -> String {
        let query = self.url.split_once('?').unwrap().1;
        form_fields(query.as_bytes())
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .unwrap()
    }

    /// What the browser does after the user approves (or not).
    pub fn callback(&self, query: &str) -> (u16, String) {
        let redirect = self.param("redirect_uri");
        visit(&format!("{redirect}?{query}"), WAIT).unwrap()
    }

    /// Types `line` and Enter at the `--no-browser` prompt.
    pub fn paste(&mut self, line: &str) {
        let stdin = self
            .stdin
            .as_mut()
            .expect("started without a standard input");
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }
}
