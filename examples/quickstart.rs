//! The shim's main job end to end on this machine, with no account: the real
//! `autogpt-shim` binary serving a throw-away platform (the emulator, over
//! TLS on 127.0.0.1) from a temporary home that is removed afterwards.
//!
//! In order: it creates the home (configuration, state, secret store and a
//! `workspace` folder) and stores a random access token in its
//! encrypted-file secret store, the way `auth` will; starts the emulator
//! requiring that token; runs `autogpt-shim start --enable-shell` against it
//! in persistent machine-control mode; then plays the platform's part of a
//! chat: browses the machine's folders through the control connection,
//! attaches the `workspace` folder to a chat session, activates it, and
//! runs the emulator's scripted chat on the child connection the shim opens
//! for that session (file operations in a scratch folder of the workspace,
//! then `echo hello`); detaches the session and restores it with its root
//! grant; stops the shim with SIGTERM; and checks the audit log with
//! `autogpt-shim audit verify`. It exits 0 when every step passed, 1
//! otherwise.
//!
//! The shim's environment is cleared and rebuilt, so neither the machine's
//! configuration nor its keychain is used: the shim finds its settings,
//! secrets, audit log and workspace in the temporary home. The token and the
//! secret-store passphrase are never printed.
//!
//! The binary is not built by `cargo run --example`; build it first:
//!
//! ```sh
//! cargo build --release --locked && cargo run --release --locked --example quickstart
//! ```

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use autogpt_shim::secrets::{Passphrase, SecretStore, SecretString, TokenFile};
use autogpt_shim_emulator::{Conn, Emulator, EmulatorOptions, Ending, HelloAck, script};
use rustix::process::{Pid, Signal, kill_process};
use serde_json::{Value, json};

/// The chat session the emulator binds to the workspace.
const SESSION: &str = "quickstart-demo";
/// How long any one step may take.
const WAIT: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    let started = Instant::now();
    match run() {
        Ok(true) => {
            println!(
                "quickstart: every step passed ({:.1} s)",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("quickstart: FAILED (see the lines marked FAIL above)");
            ExitCode::FAILURE
        }
        Err(message) => {
            eprintln!("quickstart: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Every step; `Ok(false)` when a step failed but the run could go on,
/// `Err` when it could not.
fn run() -> Result<bool, String> {
    let bin = shim_binary()?;
    let home = Home::create()?;
    let mut passed = true;
    println!("home (removed at the end): {}", home.dir.path().display());
    println!("workspace folder:          {}", home.root.display());

    let emulator = Emulator::start(EmulatorOptions::new().expect_token(home.token.clone()))
        .map_err(|e| format!("cannot start the platform emulator: {e}"))?;
    let ca_file = emulator
        .ca_file()
        .ok_or("the emulator started without TLS")?
        .to_str()
        .ok_or("the emulator's CA file path is not UTF-8")?
        .to_owned();
    println!("platform emulator:         {}", emulator.ws_url());
    println!("shim binary:               {}", bin.display());
    println!(
        "The shim runs with a cleared environment: it warns that the OS keychain is\n\
         unavailable and uses the encrypted token file in the temporary home.\n"
    );
    let platform_url = emulator.platform_url();
    let args = [
        "--platform-url",
        platform_url.as_str(),
        "--ca-file",
        ca_file.as_str(),
        "start",
        "--enable-shell",
    ];
    println!("$ autogpt-shim {}", args.join(" "));
    let mut shim = Shim::spawn(home.command(&bin, &args))?;

    // The control connection: the machine, not yet any chat.
    let control = accept(&emulator, &mut shim)?;
    println!(
        "ok   control connection: {} (the upgrade carried the stored token)",
        control.path()
    );
    let hello = control
        .try_expect_hello(WAIT)
        .map_err(|e| format!("no valid HELLO: {e}"))?;
    let payload = &hello["payload"];
    println!(
        "ok   HELLO shim {} on {}/{}, machine_id {}, capabilities {}",
        payload["shim_version"].as_str().unwrap_or("?"),
        payload["platform"].as_str().unwrap_or("?"),
        payload["arch"].as_str().unwrap_or("?"),
        payload["machine_id"],
        payload["capabilities"],
    );
    let ack = control
        .send_hello_ack(&HelloAck::new())
        .map_err(|e| format!("cannot send HELLO_ACK: {e}"))?;
    println!("ok   HELLO_ACK {}", ack["payload"]);

    // Browse to the workspace and bind the chat to it.
    let roots = request(
        &control,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": null, "directory_ref": null}),
        "DIRECTORY_LIST_RESPONSE",
    )?;
    let names = |listing: &Value| -> Vec<String> {
        listing["payload"]["entries"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|x| x["path"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    println!("ok   DIRECTORY_LIST roots: {:?}", names(&roots));
    let browse = roots["payload"]["browse_id"].clone();
    let listing = request(
        &control,
        "DIRECTORY_LIST_REQUEST",
        json!({"browse_id": browse, "directory_ref": roots["payload"]["entries"][0]["directory_ref"]}),
        "DIRECTORY_LIST_RESPONSE",
    )?;
    println!("ok   DIRECTORY_LIST home: {:?}", names(&listing));
    let workspace = listing["payload"]["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|x| x["name"] == "workspace"))
        .ok_or("the workspace folder is not listed")?
        .clone();
    let attached = request(
        &control,
        "ATTACH_SESSION",
        json!({"session_id": SESSION, "browse_id": browse, "directory_ref": workspace["directory_ref"]}),
        "SESSION_ATTACHED",
    )?;
    let grant = attached["payload"]["root_grant"].clone();
    println!(
        "ok   ATTACH_SESSION {SESSION} -> {} revision {} (root grant of {} characters, not shown)",
        attached["payload"]["allowed_root"],
        attached["payload"]["revision"],
        grant.as_str().map_or(0, str::len)
    );
    request(
        &control,
        "ACTIVATE_SESSION",
        json!({"session_id": SESSION, "revision": attached["payload"]["revision"]}),
        "SESSION_ACTIVATED",
    )?;
    println!("ok   ACTIVATE_SESSION: the shim opens a connection for the chat");

    // The chat's own connection, jailed to the workspace.
    let (conn, hello, ack) = accept_child(&emulator, &mut shim, &mut passed)?;
    let script_passed = script::run_default(&conn, &hello, &ack, WAIT, &mut io::stdout())
        .map_err(|e| format!("cannot write to standard output: {e}"))?;
    passed &= script_passed;

    // Detach, then restore from the grant alone.
    request(
        &control,
        "DETACH_SESSION",
        json!({"session_id": SESSION}),
        "ACK",
    )?;
    match conn.wait_closed(WAIT) {
        Some(Ending::ClosedByShim {
            code: Some(1000), ..
        }) => {
            println!("ok   DETACH_SESSION: the chat's connection closed with code 1000");
        }
        other => {
            println!("FAIL after DETACH_SESSION the chat's connection ended with {other:?}");
            passed = false;
        }
    }
    request(
        &control,
        "RESTORE_SESSION",
        json!({"session_id": SESSION, "root_grant": grant}),
        "SESSION_RESTORED",
    )?;
    println!("ok   RESTORE_SESSION with the root grant: the chat reconnects");
    let (conn, _, _) = accept_child(&emulator, &mut shim, &mut passed)?;
    let listed = request(
        &conn,
        "FILE_LIST",
        json!({"path": "."}),
        "FILE_LIST_RESPONSE",
    )?;
    println!(
        "ok   FILE_LIST . in the restored chat: {} entries",
        listed["payload"]["entries"].as_array().map_or(0, Vec::len)
    );

    passed &= stop(&mut shim, &[&control, &conn])?;
    passed &= verify(&bin, &home)?;
    passed &= summarise_audit(&home)?;

    let secrets_shown = [home.token.as_str(), home.passphrase.as_str()]
        .iter()
        .any(|secret| shim.output().contains(secret) || home.audit_text().contains(secret));
    if secrets_shown {
        println!("FAIL the token or the passphrase appears in the shim's output or audit log");
        passed = false;
    } else {
        println!(
            "ok   neither the token nor the passphrase appears in the shim's output or audit log"
        );
    }
    Ok(passed)
}

/// `target/<profile>/autogpt-shim`, next to this example's
/// `target/<profile>/examples/quickstart`.
fn shim_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this program: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("unexpected location {}", exe.display()))?;
    let bin = profile_dir.join(format!("autogpt-shim{}", std::env::consts::EXE_SUFFIX));
    if bin.is_file() {
        return Ok(bin);
    }
    let profile = match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") => String::new(),
        Some("release") => " --release".to_owned(),
        Some(other) => format!(" --profile {other}"),
        None => String::new(),
    };
    Err(format!(
        "{} not found: build it first with `cargo build{profile} --locked`",
        bin.display()
    ))
}

/// The temporary home: everything the shim reads and writes.
struct Home {
    dir: tempfile::TempDir,
    root: PathBuf,
    audit: PathBuf,
    token: String,
    passphrase: String,
}

impl Home {
    /// Creates the folders and stores a random token pair in the
    /// encrypted-file store, under a random passphrase.
    fn create() -> Result<Home, String> {
        let dir = tempfile::Builder::new()
            .prefix("autogpt-shim-quickstart-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary home: {e}"))?;
        let workspace = dir.path().join("workspace");
        std::fs::create_dir(&workspace)
            .and_then(|()| std::fs::canonicalize(&workspace))
            .map(|root| Home {
                root,
                audit: dir.path().join("state/audit.log"),
                token: random_hex(),
                passphrase: random_hex(),
                dir,
            })
            .map_err(|e| format!("cannot create the workspace: {e}"))
            .and_then(|home| home.store_tokens().map(|()| home))
    }

    fn store_tokens(&self) -> Result<(), String> {
        let passphrase = Passphrase::new(self.passphrase.as_bytes().to_vec())
            .ok_or("the generated passphrase was refused")?;
        let file = TokenFile::new(self.dir.path().join("secrets"), passphrase);
        let store = SecretStore::with_file(file, self.dir.path().join("legacy-audit-key.enc"));
        store
            .store_tokens(
                &SecretString::new(random_hex()),
                &SecretString::new(self.token.clone()),
            )
            .map_err(|e| format!("cannot store the token: {e}"))
    }

    /// The shim's whole environment.
    fn env(&self) -> Vec<(String, String)> {
        let path = |rel: &str| self.dir.path().join(rel).to_string_lossy().into_owned();
        vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), path("")),
            ("XDG_CONFIG_HOME".into(), path("config")),
            ("XDG_STATE_HOME".into(), path("state")),
            ("AUTOGPT_SHIM_FALLBACK_DIR".into(), path("secrets")),
            (
                "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE".into(),
                self.passphrase.clone(),
            ),
            (
                "AUTOGPT_SHIM_MACHINE_ID".into(),
                "quickstart-machine".into(),
            ),
            (
                "AUTOGPT_SHIM_AUDIT_LOG_PATH".into(),
                self.audit.to_string_lossy().into_owned(),
            ),
            ("AUTOGPT_SHIM_RECONNECT_BASE_DELAY".into(), "0.05".into()),
            ("AUTOGPT_SHIM_RECONNECT_MAX_DELAY".into(), "0.2".into()),
            ("AUTOGPT_SHIM_RECONNECT_JITTER_SECONDS".into(), "0".into()),
        ]
    }

    /// A command line of the shim binary with this home's environment.
    fn command(&self, bin: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(bin);
        command.env_clear().envs(self.env()).args(args);
        command
    }

    fn audit_text(&self) -> String {
        std::fs::read_to_string(&self.audit).unwrap_or_default()
    }
}

/// 32 random bytes as lowercase hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    if let Err(error) = getrandom::fill(&mut bytes) {
        panic!("the operating system's random source failed: {error}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The running shim: its output is shown as it comes, prefixed, and kept.
struct Shim {
    child: Child,
    output: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Shim {
    fn spawn(mut command: Command) -> Result<Shim, String> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start the shim: {e}"))?;
        let output = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        if let Some(pipe) = child.stdout.take() {
            readers.push(show(pipe, Arc::clone(&output)));
        }
        if let Some(pipe) = child.stderr.take() {
            readers.push(show(pipe, Arc::clone(&output)));
        }
        Ok(Shim {
            child,
            output,
            readers,
            status: None,
        })
    }

    /// The exit status, if the shim has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `timeout` for the exit status, then for the output.
    fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.exited().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        if self.status.is_some() {
            for reader in self.readers.drain(..) {
                let _ = reader.join();
            }
        }
        self.status
    }

    fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Prints each line from `pipe` as `  shim | <line>` and keeps it.
fn show(pipe: impl Read + Send + 'static, kept: Arc<Mutex<String>>) -> JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            println!("  shim | {line}");
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.push_str(&line);
            kept.push('\n');
        }
    })
}

/// Sends a request and waits for its response, which must be of `expected`
/// type.
fn request(conn: &Conn, kind: &str, payload: Value, expected: &str) -> Result<Value, String> {
    let reply = conn
        .call(kind, payload, WAIT)
        .map_err(|e| format!("{kind}: no response: {e}"))?;
    if reply["type"] != expected {
        return Err(format!("{kind}: expected {expected}, got {reply}"));
    }
    Ok(reply)
}

/// The chat's data connection: its HELLO must name the workspace as its
/// root; the handshake grants files and shell.
fn accept_child(
    emulator: &Emulator,
    shim: &mut Shim,
    passed: &mut bool,
) -> Result<(Conn, Value, Value), String> {
    let conn = accept(emulator, shim)?;
    let hello = conn
        .try_expect_hello(WAIT)
        .map_err(|e| format!("no valid HELLO on the chat connection: {e}"))?;
    println!(
        "ok   chat connection {}: HELLO allowed_root {}, capabilities {}",
        conn.path(),
        hello["payload"]["allowed_root"],
        hello["payload"]["capabilities"]
    );
    let advertised: Vec<&str> = hello["payload"]["capabilities"]
        .as_array()
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut grant = Vec::new();
    for wanted in ["files", "shell"] {
        if advertised.contains(&wanted) {
            grant.push(wanted);
        } else {
            println!("FAIL the chat's HELLO does not advertise {wanted}");
            *passed = false;
        }
    }
    let ack = conn
        .send_hello_ack(&HelloAck::new().session_id(SESSION).grant(grant))
        .map_err(|e| format!("cannot send HELLO_ACK: {e}"))?;
    Ok((conn, hello, ack))
}

/// The shim's connection, or why none came.
fn accept(emulator: &Emulator, shim: &mut Shim) -> Result<Conn, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(conn) = emulator.accept(Duration::from_millis(100)) {
            return Ok(conn);
        }
        let refused = emulator
            .attempts()
            .last()
            .map(|attempt| format!("; last attempt: {:?}", attempt.outcome))
            .unwrap_or_default();
        if let Some(status) = shim.exited() {
            shim.wait(WAIT);
            return Err(format!(
                "the shim exited ({status}) before connecting{refused}"
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the shim did not connect within {} s{refused}",
                WAIT.as_secs()
            ));
        }
    }
}

/// SIGTERM, then the exit status (0) and the close code (1000) of every
/// connection.
fn stop(shim: &mut Shim, conns: &[&Conn]) -> Result<bool, String> {
    let pid = i32::try_from(shim.child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or("the shim's process id is out of range")?;
    kill_process(pid, Signal::TERM).map_err(|e| format!("cannot send SIGTERM: {e}"))?;
    let mut passed = true;
    match shim.wait(WAIT) {
        Some(status) if status.success() => println!("ok   SIGTERM: the shim exited with status 0"),
        Some(status) => {
            println!("FAIL SIGTERM: the shim exited with {status}");
            passed = false;
        }
        None => {
            println!(
                "FAIL SIGTERM: the shim did not exit within {} s",
                WAIT.as_secs()
            );
            return Ok(false);
        }
    }
    for conn in conns {
        match conn.wait_closed(WAIT) {
            Some(Ending::ClosedByShim {
                code: Some(1000), ..
            }) => println!("ok   the shim closed {} with code 1000", conn.path()),
            other => {
                println!(
                    "FAIL {} ended with {other:?}, not a 1000 close from the shim",
                    conn.path()
                );
                passed = false;
            }
        }
    }
    Ok(passed)
}

/// `autogpt-shim audit verify` with the same home.
fn verify(bin: &Path, home: &Home) -> Result<bool, String> {
    println!("$ autogpt-shim audit verify");
    let out = home
        .command(bin, &["audit", "verify"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run audit verify: {e}"))?;
    // The warnings on standard error come first when run by hand.
    for line in String::from_utf8_lossy(&out.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&out.stdout).lines())
    {
        println!("  verify | {line}");
    }
    if out.status.success() {
        println!("ok   audit verify exited with status 0");
        Ok(true)
    } else {
        println!("FAIL audit verify exited with {}", out.status);
        Ok(false)
    }
}

/// One line per record would be long; the `op` names in order say what
/// happened.
fn summarise_audit(home: &Home) -> Result<bool, String> {
    let text = home.audit_text();
    let mut ops = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        let record: Value =
            serde_json::from_str(line).map_err(|e| format!("an audit record is not JSON: {e}"))?;
        ops.push(record["op"].as_str().unwrap_or("?").to_owned());
    }
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "audit log {}: {} records",
        home.audit.display(),
        ops.len()
    );
    let mut line = String::from(" ");
    for op in &ops {
        if line.len() + op.len() > 78 {
            let _ = writeln!(out, "{line}");
            line = String::from(" ");
        }
        line.push(' ');
        line.push_str(op);
    }
    let _ = writeln!(out, "{line}");
    let expected_ends = ops.first().map(String::as_str) == Some("SHIM_START")
        && ops.last().map(String::as_str) == Some("SHIM_STOP");
    if !expected_ends {
        let _ = writeln!(
            out,
            "FAIL the log does not run from SHIM_START to SHIM_STOP"
        );
    }
    Ok(expected_ends)
}
