//! The systemd user unit of the Debian package
//! (`packaging/debian/autogpt-shim.service`) keeps the service settings of
//! the unit `install` writes, starts `/usr/bin/autogpt-shim start` with the
//! user's default configuration, and passes `systemd-analyze --user verify`
//! (Debian package systemd; the test fails, never skips, without it). The
//! package's own check (`.ci/deb-check`) verifies the installed file again.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use autogpt_shim::config::autostart::render::{Entry, systemd_unit};

fn packaged() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/debian/autogpt-shim.service");
    std::fs::read_to_string(path).unwrap()
}

/// The setting lines, without comments, blank lines and the lines that
/// name paths of one user (`ExecStart`, the log files, the passphrase).
fn settings(unit: &str) -> Vec<&str> {
    unit.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| {
            ![
                "ExecStart=",
                "StandardOutput=",
                "StandardError=",
                "Environment=",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect()
}

#[test]
fn packaged_unit_keeps_the_settings_of_the_installed_unit() {
    let rendered = systemd_unit(&Entry {
        exe: Path::new("/usr/bin/autogpt-shim"),
        config: Path::new("/home/user/.config/autogpt-local-executor/config.toml"),
        stdout_log: Path::new("/home/user/.local/state/autogpt-local-executor/shim.out.log"),
        stderr_log: Path::new("/home/user/.local/state/autogpt-local-executor/shim.err.log"),
        passphrase_file: None,
    })
    .unwrap();
    let packaged = packaged();
    let mut expected = settings(&rendered);
    // The package adds its manual page to the documentation.
    let mut found: Vec<&str> = settings(&packaged)
        .into_iter()
        .filter(|l| *l != "Documentation=man:autogpt-shim(1)")
        .collect();
    expected.sort_unstable();
    found.sort_unstable();
    assert_eq!(found, expected);
    assert!(packaged.contains("\nRestartPreventExitStatus=77 78\n"));
}

#[test]
fn packaged_unit_starts_the_installed_binary_with_the_default_configuration() {
    let packaged = packaged();
    let exec: Vec<&str> = packaged
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(exec, ["ExecStart=/usr/bin/autogpt-shim start"]);
    // The journal takes the output: no log file of one user is named.
    assert!(!packaged.contains("StandardOutput="));
    assert!(!packaged.contains("StandardError="));
}

#[test]
fn packaged_unit_passes_systemd_analyze_verify() {
    // systemd-analyze checks that the program exists: the test binary
    // stands in for /usr/bin/autogpt-shim. The manual page it names is
    // there only once the package is installed (.ci/deb-check verifies the
    // installed unit with it), hence --man=no.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("autogpt-shim.service");
    let text = packaged().replace(
        "ExecStart=/usr/bin/autogpt-shim ",
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_autogpt-shim")),
    );
    std::fs::write(&unit, text).unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify", "--man=no"])
        .arg(&unit)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir.path())
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("systemd-analyze is required for this test (Debian package systemd)");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("autogpt-shim.service"), "{stderr}");
}
