//! The README's walk-through, done by a test: the `autogpt-shim-emulator`
//! binary as a demo platform (`--demo DIR`), `autogpt-shim auth` against
//! it with the test as the browser, then `autogpt-shim start
//! --enable-shell`, whose control connection the emulator drives through a
//! whole chat: browse to DIR, attach, activate, file operations and
//! `echo hello` on the chat's own connection, detach.
//!
//! The emulator binary is a separate package's binary: `cargo test
//! --workspace` builds it next to `autogpt-shim`; a test run of this crate
//! alone needs `cargo build -p autogpt-shim-emulator` first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use autogpt_shim_emulator::Browser;
use rustix::process::Signal;
use start_support::*;

/// `autogpt-shim-emulator`, next to the `autogpt-shim` binary under test.
fn emulator_binary() -> PathBuf {
    let bin = Path::new(BIN).with_file_name(format!(
        "autogpt-shim-emulator{}",
        std::env::consts::EXE_SUFFIX
    ));
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p autogpt-shim-emulator` first \
         (`cargo test --workspace` builds it)",
        bin.display()
    );
    bin
}

/// The running emulator binary, its banner's fields and the rest of its
/// standard output.
struct DemoPlatform {
    child: Child,
    fields: Vec<(String, String)>,
    stdout: BufReader<ChildStdout>,
}

impl DemoPlatform {
    fn start(args: &[&str]) -> DemoPlatform {
        let mut child = Command::new(emulator_binary())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut fields = Vec::new();
        loop {
            let mut line = String::new();
            assert_ne!(
                stdout.read_line(&mut line).unwrap(),
                0,
                "the banner ended early"
            );
            if line.starts_with("waiting for a shim") {
                break;
            }
            if let Some((key, value)) = line.trim().split_once(": ") {
                fields.push((key.to_owned(), value.trim().to_owned()));
            }
        }
        DemoPlatform {
            child,
            fields,
            stdout,
        }
    }

    fn field(&self, key: &str) -> &str {
        &self
            .fields
            .iter()
            .find(|(name, _)| name == key)
            .unwrap_or_else(|| panic!("no {key} in the banner: {:?}", self.fields))
            .1
    }

    /// The exit status and the rest of the output, waiting at most
    /// `timeout`.
    fn finish(mut self, timeout: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status.code();
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        (status, rest)
    }
}

impl Drop for DemoPlatform {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The banner's `authorize` and `start a shim` lines, as argument lists
/// after the program name.
fn hinted(platform: &DemoPlatform, key: &str) -> Vec<String> {
    let line = platform.field(key);
    let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    assert_eq!(args[0], "autogpt-shim", "{line}");
    args[1..].to_vec()
}

#[test]
fn the_emulator_demo_drives_a_whole_chat_through_a_started_daemon() {
    let home = Home::without_tokens();
    let folder = home.root.to_str().unwrap().to_owned();
    let platform = DemoPlatform::start(&["--demo", &folder, "--once", "--timeout", "20"]);
    assert_eq!(platform.field("demo folder"), folder);

    // Authorize against it as its banner says, the test being the browser.
    let auth_args = hinted(&platform, "authorize");
    assert_eq!(auth_args.last().map(String::as_str), Some("auth"));
    let auth_args: Vec<&str> = auth_args.iter().map(String::as_str).collect();
    let mut run = AuthRun::spawn(&home, &auth_args, port_block(), Stdio::null());
    let ca_pem = std::fs::read_to_string(platform.field("ca file")).unwrap();
    let browser = Browser::trusting(&ca_pem).unwrap();
    let page = browser.follow(&run.url, WAIT).unwrap().response;
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());

    // Start the daemon as the banner says; the emulator plays the chat.
    let start_args = hinted(&platform, "start a shim");
    assert!(start_args.ends_with(&["start".to_owned(), "--enable-shell".to_owned()]));
    let start_args: Vec<&str> = start_args.iter().map(String::as_str).collect();
    let mut command = home.command(&start_args);
    command.env_remove("AUTOGPT_SHIM_ALLOWED_ROOT");
    let mut shim = Shim::spawn(command);

    let (status, output) = platform.finish(Duration::from_secs(90));
    assert_eq!(status, Some(0), "{output}\n{}", shim.output());
    for step in [
        "ok   HELLO shim ",
        "ok   DIRECTORY_LIST_REQUEST roots -> ",
        "next: workspace",
        "ok   ATTACH_SESSION demo-",
        "ok   ACTIVATE_SESSION demo-",
        "ok   chat connection /ws/local-executor/demo-",
        "ok   FILE_WRITE ",
        "ok   FILE_READ ",
        "ok   FILE_LIST ",
        "ok   FILE_MOVE ",
        "ok   FILE_DELETE ",
        "ok   EXECUTE_COMMAND echo hello -> COMMAND_RESULT exit_code=0",
        "ok   PING -> PONG",
        "ok   DETACH_SESSION demo-",
        "demo passed",
    ] {
        assert!(output.contains(step), "no {step:?} in:\n{output}");
    }
    assert!(!output.contains("FAIL"), "{output}");
    assert!(
        output.contains(&format!("allowed_root \"{folder}\"")),
        "{output}"
    );
    // The scratch folder is gone again.
    assert_eq!(std::fs::read_dir(&home.root).unwrap().count(), 0);

    // The emulator closed the control connection at the end; the daemon
    // reconnects with backoff until stopped.
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let ops = home.ops();
    for op in [
        "DIRECTORY_LIST",
        "SESSION_ALLOWED_ROOT_SET",
        "ACTIVATE_SESSION",
        "FILE_WRITE",
        "EXECUTE_COMMAND",
        "DETACH_SESSION",
    ] {
        assert!(ops.iter().any(|o| o == op), "no {op} in {ops:?}");
    }
    assert_eq!(home.verify().0, 0);
}

#[test]
fn the_emulator_demo_refuses_a_folder_that_does_not_exist() {
    let home = Home::without_tokens();
    let missing = home.path().join("no-such-folder");
    let out = Command::new(emulator_binary())
        .args(["--demo", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--demo"), "{err}");
    assert!(err.contains("no-such-folder"), "{err}");
}
