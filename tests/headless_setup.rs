//! The README's headless setup, step by step, on a machine without a D-Bus
//! session (so without a keychain): a config file naming the platform (the
//! emulator over TLS on 127.0.0.1), a private passphrase file, `auth
//! --no-browser` with the final address pasted back, `install`, the
//! service's own command line run the way the systemd user manager runs it
//! (nothing inherited but what the unit says), then `status` and `doctor`
//! green while the daemon is connected.
//!
//! The one step not taken for real is systemd itself: no user manager can
//! run where the tests run. The unit's `ExecStart=` and `Environment=` lines
//! are read from the written unit and executed as they stand instead;
//! `tests/cli_install.rs` checks the same unit with `systemd-analyze`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use autogpt_shim_emulator::{Browser, Emulator, EmulatorOptions};
use rustix::process::Signal;
use start_support::*;

/// A user's home with nothing of the shim in it yet.
struct Machine {
    home: tempfile::TempDir,
    passphrase_file: PathBuf,
}

impl Machine {
    fn new() -> Machine {
        Machine {
            home: tempfile::tempdir().unwrap(),
            passphrase_file: PathBuf::new(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.path().join(rel)
    }

    /// The environment of a login shell on a headless server: no D-Bus,
    /// no desktop, no XDG variables; the passphrase file exported as the
    /// README says.
    fn shell(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .env_clear()
            .env("HOME", self.home.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("TZ", "UTC")
            .env(
                "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE",
                &self.passphrase_file,
            )
            .args(args);
        command
    }
}

/// The `KEY=value` lines of the unit's `[Service]` section named `key`.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
        .collect()
}

/// One `Environment=` value: `"NAME=value"` (quoted or not).
fn environment_pair(value: &str) -> (String, String) {
    let value = value.trim_matches('"');
    let (name, value) = value.split_once('=').unwrap();
    (name.to_owned(), value.to_owned())
}

#[test]
fn the_readme_headless_setup_ends_with_a_connected_service_and_doctor_green() {
    let emulator = Emulator::start(EmulatorOptions::new().require_issued_token()).unwrap();
    let ca_file = emulator.ca_file().unwrap().to_owned();
    let browser = Browser::trusting(emulator.ca_pem().unwrap()).unwrap();
    let mut machine = Machine::new();

    // The configuration file names the platform and its CA.
    let config_dir = machine.path(".config/autogpt-local-executor");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        format!(
            "platform_url = \"{}\"\ntls_ca_file = \"{}\"\n",
            emulator.platform_url(),
            ca_file.display()
        ),
    )
    .unwrap();

    // The passphrase in a private file, in a folder of its own.
    let secret_dir = machine.path(".autogpt-shim-secret");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::set_permissions(&secret_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    machine.passphrase_file = secret_dir.join("passphrase");
    std::fs::write(&machine.passphrase_file, "a long passphrase\n").unwrap();
    std::fs::set_permissions(
        &machine.passphrase_file,
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();

    // auth --no-browser: the URL is opened elsewhere, the final address
    // pasted back.
    let mut auth = machine.shell(&["auth", "--no-browser"]);
    auth.env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", port_block().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = auth.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = Captured::default();
    let stderr = Captured::default();
    stdout.clone().collect_from(child.stdout.take().unwrap());
    stderr.clone().collect_from(child.stderr.take().unwrap());
    let mut auth = Shim::from_parts(child, stdout, stderr);
    let printed = eventually(WAIT, || auth.stdout.text().contains("/auth/authorize?"));
    assert!(printed, "no authorize URL\n{}", auth.output());
    let text = auth.stdout.text();
    let url = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("https://") && l.contains("/auth/authorize?"))
        .unwrap()
        .to_owned();
    let answer = browser.get(&url, WAIT).unwrap();
    assert_eq!(answer.status, 302, "{}", answer.text());
    let address = answer.header("location").unwrap().to_owned();
    use std::io::Write as _;
    writeln!(stdin, "{address}").unwrap();
    assert_eq!(auth.wait(WAIT), 0, "{}", auth.output());
    assert!(auth.stdout.text().contains("Authentication succeeded"));
    assert!(
        machine
            .path(".local/state/autogpt-local-executor/tokens.enc")
            .exists()
    );

    // install writes the unit; its command line and environment are what
    // the user manager would run.
    let out = machine.shell(&["install"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let unit_path = machine.path(".config/systemd/user/autogpt-shim.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let exec = unit_values(&unit, "ExecStart");
    assert_eq!(exec.len(), 1, "{unit}");
    let argv: Vec<&str> = exec[0].split_whitespace().collect();
    assert!(Path::new(argv[0]).is_absolute(), "{unit}");
    let mut service = Command::new(argv[0]);
    service
        .args(&argv[1..])
        .env_clear()
        .env("HOME", machine.home.path())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    for value in unit_values(&unit, "Environment") {
        let (name, value) = environment_pair(&value);
        assert_ne!(name, "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "{unit}");
        service.env(name, value);
    }
    let mut daemon = Shim::spawn(service);
    let conn = emulator.accept(WAIT);
    assert!(
        conn.is_some(),
        "the service did not connect\n{}",
        daemon.output()
    );
    let conn = conn.unwrap();
    let hello = conn.expect_hello(WAIT);
    assert_eq!(hello["payload"]["allowed_root"], serde_json::Value::Null);
    conn.send_hello_ack(&autogpt_shim_emulator::HelloAck::new())
        .unwrap();
    assert!(
        eventually(WAIT, || daemon.stdout.text().contains("Press Ctrl+C")),
        "{}",
        daemon.output()
    );

    // status and doctor, as the user runs them.
    let out = machine.shell(&["status"]).output().unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("Daemon: running"), "{status}");
    assert!(
        status.contains("  mode: persistent machine control"),
        "{status}"
    );
    assert!(
        status.contains("Autostart entry (linux): installed")
            || status.contains("Autostart entry (wsl2): installed"),
        "{status}"
    );
    let out = machine.shell(&["doctor"]).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!report.contains("[FAIL]"), "{report}");
    for label in ["secret_store", "audit_chain", "tls", "upgrade"] {
        let line = report
            .lines()
            .find(|l| l.contains(label))
            .unwrap_or_else(|| panic!("no {label} line\n{report}"));
        assert!(line.starts_with("[OK"), "{line}");
    }

    daemon.signal(Signal::TERM);
    assert_eq!(daemon.wait(WAIT), 0, "{}", daemon.output());
    let passphrase = std::fs::read_to_string(&machine.passphrase_file).unwrap();
    for text in [unit.as_str(), &status, &report, &daemon.output()] {
        assert!(
            !text.contains(passphrase.trim()),
            "the passphrase was shown"
        );
    }
}
