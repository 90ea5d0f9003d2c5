//! `autogpt-shim-emulator`: a platform to point a shim at by hand.
//!
//! Parses the command line, starts an emulator, prints how to reach it,
//! and for each shim connection performs the handshake and runs the default
//! script (`autogpt_shim_emulator::script`), or with `--demo` the demo chat
//! of machine-control mode (`autogpt_shim_emulator::demo`). All protocol
//! work lives in the library; this file only wires arguments to it and
//! reports.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use autogpt_shim_emulator::{Conn, ConnKind, Emulator, EmulatorOptions, HelloAck, demo, script};

const USAGE: &str = "\
Usage: autogpt-shim-emulator [OPTIONS]

A local stand-in for the AutoGPT platform: waits for autogpt-shim to connect,
answers its HELLO, runs a short scripted chat (file operations in a scratch
directory under the session root, `echo hello` when shell is granted, PING)
and prints one line per exchange. It is as strict as the platform: an invalid
or late HELLO, or a frame the platform could not correlate to a request it
sent, ends the connection and fails the run. On the same port it serves the
platform's OAuth endpoints, so `autogpt-shim auth` can authorize against it;
the tokens it issues live as long as it runs.

Options:
  --demo DIR           on the control connection of `autogpt-shim start`,
                       play a whole chat: browse to DIR (a folder inside
                       your home or a mounted volume, not the home itself),
                       attach a chat session to it, activate it, run the
                       scripted chat on the connection the shim opens for it
                       (a scratch folder in DIR is created and removed), and
                       detach it. Upgrades then need an access token this
                       emulator issued: run `autogpt-shim auth` against it
                       first
  --port PORT          listen on 127.0.0.1:PORT (default: a free port)
  --plain              speak ws:// instead of wss:// (no TLS)
  --session-id ID      answer HELLO with this session_id (default: the
                       session named by the connection's URL path)
  --once               exit after one scripted chat (or demo chat)
  --token TOKEN        refuse upgrades (401) without `Authorization: Bearer TOKEN`
                       (with --demo, the tokens it issued are accepted too)
  --ca-file PATH       write the CA certificate here (default: a file in a new
                       temporary directory, removed on exit unless killed)
  --timeout SECONDS    how long to wait for each response (default: 30)
  -h, --help           print this help
  -V, --version        print the version

Exit status: 0 when every step passed, 1 when a step failed, 2 on a usage
error or when the emulator could not start.";

struct Args {
    demo: Option<PathBuf>,
    port: u16,
    plain: bool,
    session_id: Option<String>,
    once: bool,
    token: Option<String>,
    ca_file: Option<PathBuf>,
    timeout: Duration,
}

enum Parsed {
    Run(Args),
    Help,
    Version,
}

fn parse_args() -> Result<Parsed, lexopt::Error> {
    use lexopt::prelude::*;
    let mut args = Args {
        demo: None,
        port: 0,
        plain: false,
        session_id: None,
        once: false,
        token: None,
        ca_file: None,
        timeout: Duration::from_secs(30),
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("demo") => args.demo = Some(parser.value()?.into()),
            Long("port") => args.port = parser.value()?.parse()?,
            Long("plain") => args.plain = true,
            Long("session-id") => args.session_id = Some(parser.value()?.string()?),
            Long("once") => args.once = true,
            Long("token") => args.token = Some(parser.value()?.string()?),
            Long("ca-file") => args.ca_file = Some(parser.value()?.into()),
            Long("timeout") => {
                let seconds: u64 = parser.value()?.parse()?;
                if seconds == 0 {
                    return Err("--timeout must be at least 1 second".into());
                }
                args.timeout = Duration::from_secs(seconds);
            }
            Short('h') | Long("help") => return Ok(Parsed::Help),
            Short('V') | Long("version") => return Ok(Parsed::Version),
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(Parsed::Run(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Parsed::Run(args)) => args,
        // A closed stdout (e.g. `| head`) is not worth a panic here.
        Ok(Parsed::Help) => {
            let _ = writeln!(io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            let _ = writeln!(
                io::stdout(),
                "autogpt-shim-emulator {}",
                env!("CARGO_PKG_VERSION")
            );
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("autogpt-shim-emulator: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("autogpt-shim-emulator: {error}");
            ExitCode::from(2)
        }
    }
}

/// The `--demo` folder as the shim will report it (canonical), or why it
/// cannot be one.
fn demo_folder(dir: &Path) -> io::Result<PathBuf> {
    let folder = dir.canonicalize().map_err(|error| {
        io::Error::new(error.kind(), format!("--demo {}: {error}", dir.display()))
    })?;
    if !folder.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--demo {}: not a directory", dir.display()),
        ));
    }
    Ok(folder)
}

/// Serves shims until a step fails, or after one scripted chat with `--once`.
fn run(args: &Args) -> io::Result<bool> {
    let demo = args.demo.as_deref().map(demo_folder).transpose()?;
    let mut options = EmulatorOptions::new().port(args.port);
    if demo.is_some() {
        options = options.require_issued_token();
    }
    if args.plain {
        options = options.plain();
    }
    if let Some(path) = &args.ca_file {
        options = options.ca_file(path);
    }
    if let Some(token) = &args.token {
        options = options.expect_token(token);
    }
    let emulator = Emulator::start(options)?;
    print_banner(&emulator, args, demo.as_deref());

    let mut stdout = io::stdout();
    loop {
        let Some(conn) = emulator.accept(Duration::from_secs(3600)) else {
            continue;
        };
        let served = serve(&emulator, &conn, args, demo.as_deref(), &mut stdout)?;
        let passed = obeyed_the_rules(&conn, &mut stdout)? && served;
        if !passed {
            let _ = conn.close(1000, "emulator script failed");
            return Ok(false);
        }
        if args.once {
            let _ = conn.close(1000, "emulator script done");
            let _ = conn.wait_closed(Duration::from_secs(5));
            return Ok(true);
        }
        // Keep the connection open like a platform would, showing what the shim
        // sends unprompted (STATUS every 30 s), until it goes away.
        watch(&conn, &mut stdout)?;
        if !obeyed_the_rules(&conn, &mut stdout)? {
            return Ok(false);
        }
        writeln!(stdout, "waiting for the next connection")?;
    }
}

fn print_banner(emulator: &Emulator, args: &Args, demo: Option<&Path>) {
    println!("autogpt-shim-emulator listening");
    println!("  platform url:    {}", emulator.platform_url());
    println!("  ws url:          {}", emulator.ws_url());
    if let Some(session) = &args.session_id {
        println!("  data url:        {}", emulator.data_url(session));
    }
    if let Some(ca_file) = emulator.ca_file() {
        println!("  ca file:         {}", ca_file.display());
    }
    if let Some(pin) = emulator.spki_sha256() {
        println!("  tls pin sha256:  {pin}");
    }
    if let Some(folder) = demo {
        println!("  demo folder:     {}", folder.display());
    }
    let mut hint = format!("autogpt-shim --platform-url {}", emulator.platform_url());
    if let Some(session) = &args.session_id {
        hint.push_str(&format!(" --session-id {session}"));
    }
    if let (Some(ca_file), Some(pin)) = (emulator.ca_file(), emulator.spki_sha256()) {
        hint.push_str(&format!(
            " --ca-file {} --tls-pin-sha256 {pin}",
            ca_file.display()
        ));
    }
    println!("  authorize:       {hint} auth");
    if demo.is_some() {
        println!("  start a shim:    {hint} start --enable-shell");
    } else {
        println!("  start a shim:    {hint} start");
    }
    println!("waiting for a shim to connect");
}

/// Handshake and script (or, on a control connection with `--demo`, the
/// demo chat) on one connection; `Ok(false)` when a step failed.
fn serve(
    emulator: &Emulator,
    conn: &Conn,
    args: &Args,
    demo: Option<&Path>,
    out: &mut dyn Write,
) -> io::Result<bool> {
    writeln!(
        out,
        "connection {} from {}: {} (authorization: {})",
        conn.serial(),
        conn.peer_addr(),
        conn.path(),
        if conn.authorization().is_some() {
            "present"
        } else {
            "none"
        }
    )?;
    let hello = match conn.try_expect_hello(Duration::from_secs(10)) {
        Ok(hello) => hello,
        Err(error) => {
            writeln!(out, "FAIL HELLO: {error}")?;
            return Ok(false);
        }
    };
    let payload = &hello["payload"];
    writeln!(
        out,
        "ok   HELLO shim {} on {}/{}, capabilities {}, allowed_root {}",
        payload["shim_version"].as_str().unwrap_or("?"),
        payload["platform"].as_str().unwrap_or("?"),
        payload["arch"].as_str().unwrap_or("?"),
        payload["capabilities"],
        payload["allowed_root"]
    )?;
    let mut ack = HelloAck::new();
    if let Some(session) = &args.session_id {
        ack = ack.session_id(session);
    }
    let sent = conn.send_hello_ack(&ack)?;
    writeln!(out, "ok   HELLO_ACK {}", sent["payload"])?;
    if let (Some(folder), ConnKind::Control) = (demo, conn.kind()) {
        let passed = demo::run_chat(emulator, conn, folder, args.timeout, out)?;
        writeln!(
            out,
            "{}",
            if passed { "demo passed" } else { "demo FAILED" }
        )?;
        return Ok(passed);
    }
    let passed = script::run_default(conn, &hello, &sent, args.timeout, out)?;
    writeln!(
        out,
        "{}",
        if passed {
            "script passed"
        } else {
            "script FAILED"
        }
    )?;
    Ok(passed)
}

/// Reports the rules of the platform's relay the shim broke on `conn` (the
/// emulator closed the connection at the first); true when it broke none.
fn obeyed_the_rules(conn: &Conn, out: &mut dyn Write) -> io::Result<bool> {
    let violations = conn.take_violations();
    for violation in &violations {
        writeln!(
            out,
            "FAIL the platform would end the connection: {violation}"
        )?;
    }
    Ok(violations.is_empty())
}

/// Prints what the shim sends until the connection ends.
fn watch(conn: &Conn, out: &mut dyn Write) -> io::Result<()> {
    loop {
        if let Some(frame) = conn.recv(Duration::from_secs(1)) {
            writeln!(
                out,
                "--   {} {}",
                frame["type"].as_str().unwrap_or("?"),
                frame["payload"]
            )?;
        } else if let Some(ending) = conn.ending() {
            writeln!(out, "connection {} ended: {ending:?}", conn.serial())?;
            return Ok(());
        }
    }
}
