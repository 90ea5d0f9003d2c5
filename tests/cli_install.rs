//! `install` and `uninstall` of the real binary on Linux (CLI.md §9): the
//! unit they write in a temporary home, checked by `systemd-analyze --user
//! verify`, hostile paths, the passphrase file, the messages when no
//! systemd user manager can act on the unit, and `status` afterwards.
//!
//! `systemd-analyze` and `systemctl` (Debian package `systemd`) are
//! required: a test fails, never skips, without them. No test needs a
//! running systemd; none starts or enables anything.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use autogpt_shim::config::Environment;
use autogpt_shim::config::autostart::manager;
use start_support::{BIN, Home, PASSPHRASE};

const PASSPHRASE_VARIABLE: &str = "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE";
const PASSPHRASE_FILE_VARIABLE: &str = "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a copy of the binary. Until every other test thread that forked
/// while the copy was open for writing has exec'd, the kernel refuses to
/// run it ("text file busy"); that window is short, so wait it out.
fn output_of_copy(command: &mut Command) -> Output {
    for _ in 0..200 {
        match command.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            result => return result.unwrap(),
        }
    }
    panic!("the copied binary stayed busy for 5 s");
}

fn run(mut command: Command) -> Output {
    command.output().expect("the binary runs")
}

/// `install` in `home`, with no passphrase given.
fn install(home: &Home, extra: &[&str]) -> Output {
    let mut args = vec!["install"];
    args.extend_from_slice(extra);
    let mut command = home.command(&args);
    command.env_remove(PASSPHRASE_VARIABLE);
    run(command)
}

fn unit_path(home: &Home) -> PathBuf {
    home.path().join("config/systemd/user/autogpt-shim.service")
}

/// `systemd-analyze --user verify` of `unit`: (success, stderr). It needs a
/// runtime directory but no running manager; it checks every directive and
/// that the program of `ExecStart=` exists and is executable.
fn verify(unit: &Path, home: &Path) -> (bool, String) {
    let runtime = tempfile::tempdir().unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(unit)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("systemd-analyze is required for this test (Debian package systemd)");
    (out.status.success(), text(&out.stderr))
}

/// The platform's name as `install` prints it.
fn platform_of(stdout: &str) -> &str {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Platform: "))
        .unwrap();
    assert!(line == "linux" || line == "wsl2", "{line}");
    line
}

#[test]
fn install_writes_a_unit_that_systemd_analyze_verifies() {
    let home = Home::without_tokens();
    let out = install(&home, &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let unit = unit_path(&home);
    let expected_head = format!(
        "Wrote autostart entry: {}\nPlatform: {}\n\nTo activate, run:\n  \
         systemctl --user enable --now autogpt-shim.service\n\n\
         To deactivate later, run:\n  systemctl --user disable --now autogpt-shim.service\n\n\
         Note: ",
        unit.display(),
        platform_of(&stdout)
    );
    assert!(stdout.starts_with(&expected_head), "{stdout}");
    assert!(stdout.contains("enable-linger"), "{stdout}");

    let content = std::fs::read_to_string(&unit).unwrap();
    let exe = std::fs::canonicalize(BIN).unwrap();
    let config = home
        .path()
        .join("config/autogpt-local-executor/config.toml");
    let state = home.path().join("state/autogpt-local-executor");
    for line in [
        format!(
            "ExecStart={} --config {} start",
            exe.display(),
            config.display()
        ),
        "Restart=on-failure".into(),
        "RestartPreventExitStatus=77 78".into(),
        format!("StandardOutput=append:{}/shim.out.log", state.display()),
        format!("StandardError=append:{}/shim.err.log", state.display()),
        "WantedBy=default.target".into(),
    ] {
        assert!(
            content.lines().any(|l| l == line),
            "missing {line}:\n{content}"
        );
    }
    assert!(!content.contains("Environment"), "{content}");

    // Readable by the service manager, writable by the user alone; the log
    // directory is private.
    let mode = std::fs::metadata(&unit).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode & 0o600, 0o600, "{mode:o}");
    assert_eq!(mode & 0o022, 0, "{mode:o}");
    let log_dir = std::fs::metadata(&state).unwrap().permissions().mode() & 0o7777;
    assert_eq!(log_dir, 0o700, "{log_dir:o}");
    // No temporary file is left beside the unit.
    let names: Vec<_> = std::fs::read_dir(unit.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("autogpt-shim.service")]
    );

    let (ok, stderr) = verify(&unit, home.path());
    assert!(
        ok && stderr.is_empty(),
        "systemd-analyze: {stderr}\n{content}"
    );
}

#[test]
fn a_unit_whose_program_is_missing_fails_verification() {
    // The verification above is not vacuous: systemd-analyze rejects a unit
    // whose ExecStart program does not exist.
    let home = Home::without_tokens();
    assert_eq!(install(&home, &[]).status.code(), Some(0));
    let unit = unit_path(&home);
    let content = std::fs::read_to_string(&unit).unwrap();
    let exe = std::fs::canonicalize(BIN).unwrap();
    let broken = content.replace(
        &format!("ExecStart={}", exe.display()),
        "ExecStart=/nonexistent/autogpt-shim",
    );
    assert_ne!(broken, content);
    std::fs::write(&unit, broken).unwrap();
    let (ok, stderr) = verify(&unit, home.path());
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("/nonexistent/autogpt-shim"), "{stderr}");
}

#[test]
fn install_with_hostile_paths_writes_a_unit_systemd_reads_unchanged() {
    let base = tempfile::tempdir().unwrap();
    // The program may not hold quotes, backslashes or `$` (systemd refuses
    // them); every other path may hold all of them.
    let bin_dir = base.path().join("my bin %n 100% ;x é");
    let home = base.path().join("ho me %h $HOME ${USER} ;\"q\" it's \\x");
    let config = base.path().join("cfg dir %% $$/\"con fig\".toml");
    let secrets = home.join("sec rets %i");
    for dir in [&bin_dir, &home, &secrets] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let exe = bin_dir.join("autogpt-shim");
    std::fs::copy(BIN, &exe).unwrap();
    let passphrase_file = secrets.join("pass phrase");
    std::fs::write(&passphrase_file, format!("{PASSPHRASE}\n")).unwrap();
    std::fs::set_permissions(&passphrase_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let out = output_of_copy(
        Command::new(&exe)
            .arg("--config")
            .arg(&config)
            .arg("install")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home)
            .env(PASSPHRASE_FILE_VARIABLE, &passphrase_file),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));

    let unit = home.join(".config/systemd/user/autogpt-shim.service");
    let content = std::fs::read_to_string(&unit).unwrap();
    assert!(content.contains("Environment=\"AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE="));
    assert!(!content.contains(PASSPHRASE), "{content}");
    // Every key appears once, and no line is anything but a section, a
    // comment or a known key.
    let mut keys: Vec<&str> = content
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| l.split('=').next().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "After",
            "Description",
            "Documentation",
            "Environment",
            "ExecStart",
            "Restart",
            "RestartPreventExitStatus",
            "RestartSec",
            "StandardError",
            "StandardOutput",
            "Type",
            "WantedBy",
            "Wants",
        ]
    );
    // systemd resolves the quoted program to the copy (it checks that the
    // file exists) and accepts every other line without a warning.
    let (ok, stderr) = verify(&unit, &home);
    assert!(
        ok && stderr.is_empty(),
        "systemd-analyze: {stderr}\n{content}"
    );
}

#[test]
fn a_program_path_systemd_cannot_hold_is_refused_not_mangled() {
    let base = tempfile::tempdir().unwrap();
    let bin_dir = base.path().join("it's");
    std::fs::create_dir(&bin_dir).unwrap();
    let exe = bin_dir.join("autogpt-shim");
    std::fs::copy(BIN, &exe).unwrap();
    let out = output_of_copy(
        Command::new(&exe)
            .arg("install")
            .env_clear()
            .env("HOME", base.path()),
    );
    assert_eq!(out.status.code(), Some(73));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("cannot write the autostart entry: the executable path"),
        "{stderr}"
    );
    assert!(stderr.contains("systemd"), "{stderr}");
    assert!(!base.path().join(".config/systemd").exists());
}

#[test]
fn a_config_path_that_would_inject_a_directive_is_refused() {
    let home = Home::without_tokens();
    let injected = format!(
        "{}/x\nExecStartPre=/bin/touch {}/pwned",
        home.path().display(),
        home.path().display()
    );
    let mut command = home.command(&["--config", &injected, "install"]);
    command.env_remove(PASSPHRASE_VARIABLE);
    let out = run(command);
    assert_eq!(out.status.code(), Some(73));
    let stderr = text(&out.stderr);
    let last = stderr.lines().last().unwrap();
    assert!(last.contains("the config path"), "{stderr}");
    assert!(last.contains("control character"), "{stderr}");
    assert!(!unit_path(&home).exists());
}

#[test]
fn install_refuses_a_passphrase_file_others_can_read() {
    let home = Home::without_tokens();
    let file = home.path().join("passphrase");
    std::fs::write(&file, PASSPHRASE).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut command = home.command(&["install"]);
    command
        .env_remove(PASSPHRASE_VARIABLE)
        .env(PASSPHRASE_FILE_VARIABLE, &file);
    let out = run(command);
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("passphrase file"), "{stderr}");
    assert!(!stderr.contains(PASSPHRASE), "{stderr}");
    assert!(!unit_path(&home).exists());
}

#[test]
fn install_names_the_passphrase_file_and_never_its_content() {
    let home = Home::without_tokens();
    let dir = home.path().join("secret dir");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("passphrase");
    std::fs::write(&file, format!("{PASSPHRASE}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut command = home.command(&["install"]);
    command
        .env_remove(PASSPHRASE_VARIABLE)
        .env(PASSPHRASE_FILE_VARIABLE, &file);
    let out = run(command);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let content = std::fs::read_to_string(unit_path(&home)).unwrap();
    let line = format!(
        "Environment=\"AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE={}\"",
        file.display()
    );
    assert!(content.lines().any(|l| l == line), "{content}");
    assert!(!content.contains(PASSPHRASE), "{content}");
    assert!(
        stdout.contains(&format!(
            "Note: the service reads the passphrase of the encrypted token file from {}",
            file.display()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains(PASSPHRASE) && !text(&out.stderr).contains(PASSPHRASE));
    let (ok, stderr) = verify(&unit_path(&home), home.path());
    assert!(
        ok && stderr.is_empty(),
        "systemd-analyze: {stderr}\n{content}"
    );
}

#[test]
fn a_passphrase_given_only_as_a_variable_is_not_written_anywhere() {
    let home = Home::without_tokens();
    // The home's environment carries AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE.
    let out = run(home.command(&["install"]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("Note: AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE is set here, but the service does not receive it"),
        "{stdout}"
    );
    assert!(stdout.contains(PASSPHRASE_FILE_VARIABLE), "{stdout}");
    let content = std::fs::read_to_string(unit_path(&home)).unwrap();
    assert!(!content.contains("Environment"), "{content}");
    assert!(!content.contains(PASSPHRASE), "{content}");
    assert!(!stdout.contains(PASSPHRASE));
}

#[test]
fn install_and_status_say_plainly_when_no_user_manager_can_act() {
    let home = Home::without_tokens();
    let runtime = tempfile::tempdir().unwrap();
    let mut command = home.command(&["install"]);
    command
        .env_remove(PASSPHRASE_VARIABLE)
        .env("XDG_RUNTIME_DIR", runtime.path());
    let out = run(command);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let platform = platform_of(&stdout).to_owned();
    let expected = if Path::new("/run/systemd/system").is_dir() {
        format!(
            "no systemd user manager runs for this user (no {}/systemd/private)",
            runtime.path().display()
        )
    } else if platform == "wsl2" {
        "this WSL2 system does not run systemd (no /run/systemd/system)".to_owned()
    } else {
        "this system does not run systemd (no /run/systemd/system)".to_owned()
    };
    assert!(stdout.contains(&format!("\nNote: {expected}")), "{stdout}");

    let mut command = home.command(&["status"]);
    command.env("XDG_RUNTIME_DIR", runtime.path());
    let out = run(command);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "Autostart entry ({platform}): installed\n  path: {}\n  service: unknown: {expected}",
            unit_path(&home).display()
        )),
        "{stdout}"
    );
}

#[test]
fn a_query_without_a_reachable_manager_says_why() {
    // The real systemctl, pointed at an empty runtime directory and no bus.
    let runtime = tempfile::tempdir().unwrap();
    let env = Environment::from_pairs([
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap()),
    ]);
    let why = manager::query(&env, runtime.path()).unwrap_err();
    assert!(why.starts_with("systemctl --user failed: "), "{why}");
    assert!(!why.contains('\n'), "{why}");
}

#[test]
fn uninstall_removes_the_entry_and_is_idempotent() {
    let home = Home::without_tokens();
    assert_eq!(install(&home, &[]).status.code(), Some(0));
    assert!(unit_path(&home).is_file());

    let expected = |absent: bool| {
        format!(
            "Removed autostart entry (or it was already absent): {}\n{}\n\
             If the service manager already registered it, also run:\n  \
             systemctl --user disable --now autogpt-shim.service\n",
            unit_path(&home).display(),
            if absent {
                "There was no autostart entry to remove.\n"
            } else {
                ""
            }
        )
    };
    let out = run(home.command(&["uninstall"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), expected(false));
    assert!(!unit_path(&home).exists());

    let out = run(home.command(&["uninstall"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), expected(true));

    let out = run(home.command(&["status"]));
    assert!(
        text(&out.stdout).contains("): not installed\n"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn uninstall_exits_73_when_the_entry_cannot_be_removed() {
    let home = Home::without_tokens();
    std::fs::create_dir_all(unit_path(&home)).unwrap();
    let out = run(home.command(&["uninstall"]));
    assert_eq!(out.status.code(), Some(73));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("is still present"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn install_and_uninstall_take_only_the_config_option() {
    let home = Home::without_tokens();
    for (args, message) in [
        (
            vec!["--platform-url", "https://example.com", "install"],
            "option --platform-url is not used by install",
        ),
        (
            vec!["--session-id", "s-1", "uninstall"],
            "option --session-id is not used by uninstall",
        ),
        (vec!["install", "now"], "unexpected argument 'now'"),
        (
            vec!["install", "--at-login=yes"],
            "option --at-login takes no value",
        ),
        (
            vec!["uninstall", "--at-login"],
            "unknown option '--at-login'",
        ),
    ] {
        let out = run(home.command(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(message),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!unit_path(&home).exists(), "{args:?}");
    }
    let out = install(&home, &["--at-login"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(unit_path(&home).is_file());
}
