//! The real `autogpt-shim` binary: help (for every command), version and
//! usage errors, and the refusal of capabilities this build lacks, with
//! their streams and exit codes (CLI.md §1–§3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use autogpt_shim::cli::{COMMAND_TABLE, CommandSpec};

fn shim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_autogpt-shim"))
        .args(args)
        .env_clear()
        .output()
        .expect("binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn help_prints_usage_on_stdout_and_exits_0() {
    for flag in ["--help", "-h"] {
        let out = shim(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(text(&out.stdout).contains("Usage: autogpt-shim"));
        assert!(out.stderr.is_empty(), "no banner for {flag}");
    }
}

#[test]
fn version_prints_name_and_version_and_exits_0() {
    let out = shim(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("autogpt-shim {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn unknown_option_exits_2_with_a_message_on_stderr() {
    let out = shim(&["--no-such-option", "start"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(
        err.starts_with("autogpt-shim: unknown option '--no-such-option'\n"),
        "{err}"
    );
    assert!(err.contains("--help"));
}

#[test]
fn unknown_command_exits_2_with_a_message_on_stderr() {
    let out = shim(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).starts_with("autogpt-shim: unknown command 'frobnicate'\n"));
}

#[test]
fn missing_command_exits_2() {
    let out = shim(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing command"));
}

#[test]
fn missing_option_value_exits_2() {
    let out = shim(&["--config"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--config needs a value"));
}

#[test]
fn only_start_and_auth_print_the_warning_banner() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_autogpt-shim"))
            .args(args)
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", "/usr/bin:/bin")
            // Unreachable on purpose: nothing here may leave the machine.
            .env("AUTOGPT_SHIM_PLATFORM_URL", "https://platform.invalid")
            .output()
            .unwrap()
    };
    for args in [&["status"][..], &["audit", "verify"], &["revoke"]] {
        let out = run(args);
        let stderr = text(&out.stderr);
        assert!(
            !stderr.contains("WARNING: autogpt-shim"),
            "{args:?}: {stderr}"
        );
    }
    // `start` refuses at once (no passphrase, no keychain), after the banner.
    let out = run(&["start"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).starts_with("WARNING: autogpt-shim is experimental"));
}

// ---- per-command help (CLI.md §1.2, §4) -----------------------------------------------

/// What CLI.md §1.1, §1.2, §4.2 and §4.5 say each command accepts: its
/// options and, for `audit`, its subcommands. Written out here rather than
/// read from the command table, so the table cannot drop one unnoticed.
const SPEC: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "--allowed-root",
            "--config",
            "--platform-url",
            "--session-id",
            "--ca-file",
            "--tls-pin-sha256",
            "--log-level",
            "-h, --help",
            "-V, --version",
        ],
    ),
    ("auth", &[]),
    (
        "start",
        &[
            "--session-id",
            "--enable-shell",
            "--enable-computer-use",
            "--enable-clipboard",
            "--enable-clipboard-read-foreign",
            "--enable-recording",
        ],
    ),
    ("status", &[]),
    ("revoke", &[]),
    (
        "audit",
        &[
            "tail",
            "show",
            "verify",
            "verify-all",
            "export",
            "rotate",
            "prune",
        ],
    ),
    ("audit tail", &["--follow", "--session", "--op", "--json"]),
    ("audit show", &["<seq>"]),
    ("audit verify", &[]),
    ("audit verify-all", &[]),
    ("audit export", &["--output"]),
    ("audit rotate", &[]),
    ("audit prune", &["--older-than"]),
];

/// Every command of the table, depth first, with its full name.
fn table_commands() -> Vec<&'static CommandSpec> {
    fn walk(spec: &'static CommandSpec, out: &mut Vec<&'static CommandSpec>) {
        for sub in spec.subcommands {
            out.push(sub);
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&COMMAND_TABLE, &mut out);
    out
}

fn words(name: &str) -> Vec<&str> {
    name.split_whitespace().collect()
}

/// A value for an option's placeholder.
fn sample(placeholder: &str) -> &'static str {
    match placeholder {
        "PATH" => "/nonexistent/x",
        "URL" => "https://platform.example.com",
        "HEX,..." => "ab",
        "LEVEL" => "info",
        "ID" => "session-1",
        "DUR" => "1d",
        "OP" => "FILE_READ",
        "MODE" => "workspace",
        "NETWORK" => "none",
        other => panic!("no sample value for {other}"),
    }
}

/// The help of `name` (empty: the program's) asked for in `spelling`:
/// exit 0, the text on stdout, nothing on stderr (no banner).
fn help_of(args: &[&str]) -> String {
    let out = shim(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn every_command_and_subcommand_prints_its_help_with_every_option_and_exits_0() {
    let mut names: Vec<&str> = SPEC.iter().map(|(name, _)| *name).collect();
    names.extend(table_commands().iter().map(|c| c.name));
    for name in names {
        let mut spellings = Vec::new();
        for flag in ["--help", "-h"] {
            let mut args = words(name);
            args.push(flag);
            spellings.push(args);
        }
        let mut args = vec!["help"];
        args.extend(words(name));
        spellings.push(args);
        let texts: Vec<String> = spellings.iter().map(|args| help_of(args)).collect();
        assert!(texts.iter().all(|t| t == &texts[0]), "{name}: {texts:?}");
        let help = &texts[0];
        let usage = if name.is_empty() {
            "Usage: autogpt-shim [GLOBAL OPTIONS] <COMMAND>".to_owned()
        } else {
            format!("Usage: autogpt-shim [GLOBAL OPTIONS] {name}")
        };
        assert!(help.contains(&usage), "{name}: {help}");
        assert!(help.contains("-h, --help"), "{name}: {help}");
        let listed = SPEC
            .iter()
            .filter(|(n, _)| *n == name)
            .flat_map(|(_, items)| items.iter().copied());
        for item in listed {
            assert!(help.contains(item), "{name}: {item} missing from\n{help}");
        }
        let spec = if name.is_empty() {
            &COMMAND_TABLE
        } else {
            table_commands()
                .into_iter()
                .find(|c| c.name == name)
                .unwrap()
        };
        for option in spec.options {
            assert!(
                help.contains(option.long),
                "{name}: {}\n{help}",
                option.long
            );
            if let Some(short) = option.short {
                assert!(help.contains(&format!("-{short}, {}", option.long)));
            }
        }
        for sub in spec.subcommands {
            assert!(
                help.contains(&format!("  {}", sub.word())),
                "{name}: {help}"
            );
        }
        for arg in spec.args {
            assert!(help.contains(arg.name), "{name}: {help}");
        }
    }
}

#[test]
fn every_option_the_help_lists_is_accepted_before_help() {
    // An option the parser refuses ends in a usage error (exit 2) before
    // `--help` is reached; one it accepts lets `--help` print (exit 0).
    for spec in std::iter::once(&COMMAND_TABLE).chain(table_commands()) {
        for option in spec.options {
            if option.long == "--version" {
                continue;
            }
            let mut args = words(spec.name);
            if spec.name.is_empty() {
                args.clear();
            }
            args.push(option.long);
            args.extend(option.value.map(sample));
            args.push("--help");
            help_of(&args);
        }
    }
    let out = shim(&["start", "--enable-everything", "--help"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("autogpt-shim: unknown option '--enable-everything'\n"));
}

#[test]
fn top_level_help_shows_machine_control_first_and_session_id_as_legacy() {
    let help = help_of(&["--help"]);
    let control = help
        .find("autogpt-shim start [--enable-shell]")
        .expect("the usual start");
    let legacy = help
        .find("autogpt-shim start --session-id ID")
        .expect("the legacy start");
    assert!(control < legacy, "{help}");
    let legacy_line = help[legacy..].lines().next().unwrap();
    assert!(legacy_line.contains("legacy"), "{legacy_line}");
    let option_line = help
        .lines()
        .find(|l| l.trim_start().starts_with("--session-id"))
        .unwrap();
    assert!(option_line.contains("legacy"), "{option_line}");
}

#[test]
fn short_v_prints_exactly_what_version_prints() {
    let long = shim(&["--version"]);
    let short = shim(&["-V"]);
    assert_eq!(short.status.code(), Some(0));
    assert_eq!(short.stdout, long.stdout);
    assert!(short.stderr.is_empty());
    assert_eq!(
        text(&short.stdout),
        format!("autogpt-shim {}\n", env!("CARGO_PKG_VERSION"))
    );
}

// ---- capabilities this build does not have (CAPABILITIES.md §2) -------------------------

/// `autogpt-shim start` in an empty home with `env`: exit code, stdout,
/// stderr, and whether the home is still empty afterwards.
fn start_in_empty_home(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String, bool) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_autogpt-shim"))
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .envs(env.iter().copied())
        .output()
        .expect("binary runs");
    let empty = std::fs::read_dir(home.path()).unwrap().next().is_none();
    (
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr),
        empty,
    )
}

/// The one line after the banner.
fn refusal_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("WARNING:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    lines[0]
}

#[test]
#[cfg(feature = "desktop")]
fn a_desktop_build_takes_the_computer_use_flags_and_goes_on_to_the_secret_store() {
    for flag in [
        "--enable-computer-use",
        "--enable-clipboard",
        "--enable-clipboard-read-foreign",
    ] {
        let (code, stdout, stderr, _) = start_in_empty_home(&["start", flag], &[]);
        assert!(stdout.is_empty(), "{flag}: {stdout}");
        assert!(
            !stderr.contains("not available in this build"),
            "{flag}: {stderr}"
        );
        // The empty home has no passphrase and no keychain: the next check
        // refuses, which shows the configuration was accepted.
        assert_eq!(code, Some(78), "{flag}: {stderr}");
        assert!(
            refusal_line(&stderr).starts_with("Preflight failed: no usable secret store"),
            "{flag}: {stderr}"
        );
    }
}

#[test]
#[cfg(not(feature = "desktop"))]
fn each_unbuilt_capability_flag_is_refused_with_exit_78_and_creates_nothing() {
    for (flag, key, feature) in [
        (
            "--enable-computer-use",
            "enable_computer_use",
            "computer use",
        ),
        ("--enable-clipboard", "enable_clipboard", "clipboard access"),
        (
            "--enable-clipboard-read-foreign",
            "enable_clipboard_read_foreign",
            "reading clipboard content the shim did not write",
        ),
    ] {
        let (code, stdout, stderr, empty) = start_in_empty_home(&["start", flag], &[]);
        assert_eq!(code, Some(78), "{flag}: {stderr}");
        assert!(stdout.is_empty(), "{flag}: {stdout}");
        assert_eq!(
            refusal_line(&stderr),
            format!(
                "autogpt-shim: configuration error: {feature} is not available in this build: \
                 {key} (from flag {flag}) must not be switched on"
            )
        );
        assert!(empty, "{flag} created files");
    }
}

#[test]
#[cfg(not(feature = "desktop"))]
fn each_unbuilt_capability_switch_in_the_environment_is_refused_like_its_flag() {
    for (variable, feature) in [
        ("AUTOGPT_SHIM_ENABLE_COMPUTER_USE", "computer use"),
        ("AUTOGPT_SHIM_ENABLE_CLIPBOARD", "clipboard access"),
    ] {
        let (code, _, stderr, empty) = start_in_empty_home(&["start"], &[(variable, "true")]);
        assert_eq!(code, Some(78), "{variable}: {stderr}");
        let line = refusal_line(&stderr);
        assert!(
            line.contains(&format!("{feature} is not available in this build")),
            "{line}"
        );
        assert!(
            line.contains(&format!("environment variable \"{variable}\"")),
            "{line}"
        );
        assert!(empty, "{variable} created files");
    }
}
