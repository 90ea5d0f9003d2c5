//! Command-line parsing at library level (CLI.md §1): global options, value
//! spellings, usage errors, and the path from arguments through overrides to
//! the effective configuration (CLI.md §1.3, §5.4 acceptance vectors).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::PathBuf;

use autogpt_shim::cli::{self, Command, Globals, Parsed, UsageError, parse, parse_globals};
use autogpt_shim::config::{self, Context, Environment, Host, LogLevel, Overrides, Platform};
use autogpt_shim::exit;

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// The global options of `list`, which must end at a command name.
fn globals(list: &[&str]) -> (Overrides, OsString) {
    let mut parser = lexopt::Parser::from_args(args(list));
    match parse_globals(&mut parser).expect("parses") {
        Globals::Command { overrides, name } => (*overrides, name),
        other => panic!("expected a command, got {other:?}"),
    }
}

fn usage_error(list: &[&str]) -> UsageError {
    parse(args(list)).expect_err("usage error")
}

/// Runs the frame in-process: (exit code, stdout, stderr).
fn run(list: &[&str]) -> (u8, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = cli::run(args(list), &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

// --- global options ----------------------------------------------------------

#[test]
fn every_global_option_fills_its_override() {
    let (o, name) = globals(&[
        "--allowed-root",
        "/w",
        "--config",
        "/c.toml",
        "--platform-url",
        "https://p.example.com",
        "--session-id",
        "s-1",
        "--ca-file",
        "/ca.pem",
        "--tls-pin-sha256",
        "ab",
        "--log-level",
        "debug",
        "somecommand",
    ]);
    assert_eq!(name, "somecommand");
    assert_eq!(o.allowed_root, Some(PathBuf::from("/w")));
    assert_eq!(o.config_path, Some(PathBuf::from("/c.toml")));
    assert_eq!(o.platform_url.as_deref(), Some("https://p.example.com"));
    assert_eq!(o.session_id.as_deref(), Some("s-1"));
    assert_eq!(o.ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(o.tls_pin_sha256.as_deref(), Some("ab"));
    assert_eq!(o.log_level, Some(LogLevel::Debug));
    assert!(!o.enable_shell);
}

#[test]
fn option_values_may_be_attached_with_equals() {
    let (o, _) = globals(&[
        "--allowed-root=/w",
        "--session-id=",
        "--platform-url=https://p.example.com/?a=b",
        "cmd",
    ]);
    assert_eq!(o.allowed_root, Some(PathBuf::from("/w")));
    assert_eq!(o.session_id.as_deref(), Some(""));
    assert_eq!(
        o.platform_url.as_deref(),
        Some("https://p.example.com/?a=b")
    );
}

#[test]
fn value_starting_with_a_dash_must_be_attached() {
    assert_eq!(
        usage_error(&["--allowed-root", "--config", "x", "cmd"]),
        UsageError::MissingValue("--allowed-root")
    );
    let (o, _) = globals(&["--allowed-root=-odd", "cmd"]);
    assert_eq!(o.allowed_root, Some(PathBuf::from("-odd")));
}

#[test]
fn repeated_option_keeps_the_last_value() {
    let (o, _) = globals(&["--session-id", "a", "--session-id", "b", "cmd"]);
    assert_eq!(o.session_id.as_deref(), Some("b"));
}

#[test]
fn log_levels_parse_case_insensitively() {
    for (text, level) in [
        ("DEBUG", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("Warning", LogLevel::Warning),
        ("warn", LogLevel::Warning),
        ("ERROR", LogLevel::Error),
        ("critical", LogLevel::Critical),
    ] {
        let (o, _) = globals(&["--log-level", text, "cmd"]);
        assert_eq!(o.log_level, Some(level), "{text}");
    }
    assert!(matches!(
        usage_error(&["--log-level", "verbose", "cmd"]),
        UsageError::InvalidValue {
            option: "--log-level",
            ..
        }
    ));
}

#[test]
fn log_level_names_are_canonical() {
    assert_eq!(LogLevel::Warning.as_str(), "WARNING");
    assert_eq!(LogLevel::default(), LogLevel::Info);
    assert!(LogLevel::Debug < LogLevel::Critical);
}

#[test]
fn help_and_version_are_recognised_before_the_command() {
    assert!(matches!(parse(args(&["--help"])), Ok(Parsed::Help)));
    assert!(matches!(parse(args(&["-h"])), Ok(Parsed::Help)));
    assert!(matches!(parse(args(&["--version"])), Ok(Parsed::Version)));
    assert!(matches!(
        parse(args(&["--log-level", "info", "--help"])),
        Ok(Parsed::Help)
    ));
}

// --- usage errors (exit 2) ----------------------------------------------------

#[test]
fn missing_command_is_a_usage_error() {
    assert_eq!(usage_error(&[]), UsageError::MissingCommand);
    assert_eq!(usage_error(&["--config", "x"]), UsageError::MissingCommand);
}

#[test]
fn every_command_name_is_unknown_until_its_feature_exists() {
    for name in ["frobnicate", "verify"] {
        assert_eq!(
            usage_error(&[name]),
            UsageError::UnknownCommand(name.into()),
            "{name}"
        );
    }
}

#[test]
fn doctor_takes_the_global_options_and_nothing_else() {
    let Parsed::Run(invocation) = parse(args(&["--tls-pin-sha256", "ab", "doctor"])).unwrap()
    else {
        panic!("expected a command");
    };
    assert!(matches!(invocation.command, Command::Doctor));
    assert_eq!(invocation.overrides.tls_pin_sha256.as_deref(), Some("ab"));
    assert_eq!(
        usage_error(&["doctor", "now"]),
        UsageError::UnexpectedArgument("now".into())
    );
    assert_eq!(
        usage_error(&["doctor", "--enable-shell"]),
        UsageError::UnknownOption("--enable-shell".into())
    );
}

#[test]
fn start_flags_only_switch_settings_on_and_refuse_values() {
    let Parsed::Run(invocation) = parse(args(&[
        "start",
        "--enable-shell",
        "--enable-computer-use",
        "--enable-clipboard",
        "--enable-clipboard-read-foreign",
    ]))
    .unwrap() else {
        panic!("expected a command");
    };
    let o = &invocation.overrides;
    assert!(o.enable_shell && o.enable_computer_use && o.enable_clipboard);
    assert!(o.enable_clipboard_read_foreign && !o.enable_recording);
    assert_eq!(
        usage_error(&["start", "--enable-shell=false"]),
        UsageError::UnexpectedValue("--enable-shell".into())
    );
    assert_eq!(
        usage_error(&["start", "--enable"]),
        UsageError::UnknownOption("--enable".into())
    );
    assert_eq!(
        usage_error(&["start", "now"]),
        UsageError::UnexpectedArgument("now".into())
    );
}

#[test]
fn unknown_option_is_a_usage_error() {
    assert_eq!(
        usage_error(&["--frobnicate", "cmd"]),
        UsageError::UnknownOption("--frobnicate".into())
    );
    assert_eq!(
        usage_error(&["-x", "cmd"]),
        UsageError::UnknownOption("-x".into())
    );
}

#[test]
fn abbreviated_options_are_not_accepted() {
    assert_eq!(
        usage_error(&["--allowed", "/w", "cmd"]),
        UsageError::UnknownOption("--allowed".into())
    );
    assert_eq!(
        usage_error(&["--conf=x", "cmd"]),
        UsageError::UnknownOption("--conf".into())
    );
}

#[test]
fn option_without_its_value_is_a_usage_error() {
    assert_eq!(
        usage_error(&["--config"]),
        UsageError::MissingValue("--config")
    );
    assert_eq!(
        usage_error(&["--session-id"]),
        UsageError::MissingValue("--session-id")
    );
}

#[test]
fn flag_given_a_value_is_a_usage_error() {
    assert_eq!(
        usage_error(&["--help=yes"]),
        UsageError::UnexpectedValue("--help".into())
    );
    assert_eq!(
        usage_error(&["--version=1"]),
        UsageError::UnexpectedValue("--version".into())
    );
}

#[cfg(unix)]
#[test]
fn non_utf8_text_value_is_a_usage_error() {
    use std::os::unix::ffi::OsStringExt;
    let list = vec![
        OsString::from("--platform-url"),
        OsString::from_vec(b"https://\xff".to_vec()),
        OsString::from("cmd"),
    ];
    assert!(matches!(
        parse(list),
        Err(UsageError::InvalidValue {
            option: "--platform-url",
            ..
        })
    ));
}

#[test]
fn usage_error_messages_are_one_line_and_escape_control_characters() {
    let error = usage_error(&["bad\u{1b}[31mname"]);
    let message = error.to_string();
    assert!(!message.contains('\u{1b}'), "{message:?}");
    assert!(!message.contains('\n'));
}

// --- the frame in-process ------------------------------------------------------

#[test]
fn help_goes_to_stdout_and_exits_0() {
    let (code, out, err) = run(&["--help"]);
    assert_eq!(code, exit::SUCCESS);
    assert!(out.contains("Usage: autogpt-shim"));
    for option in [
        "--allowed-root",
        "--config",
        "--platform-url",
        "--session-id",
        "--ca-file",
        "--tls-pin-sha256",
        "--log-level",
        "--version",
    ] {
        assert!(out.contains(option), "{option} missing from help");
    }
    assert!(err.is_empty(), "no banner for --help: {err}");
}

#[test]
fn version_prints_the_package_version() {
    let (code, out, err) = run(&["--version"]);
    assert_eq!(code, exit::SUCCESS);
    assert_eq!(out, format!("autogpt-shim {}\n", env!("CARGO_PKG_VERSION")));
    assert!(err.is_empty());
}

#[test]
fn usage_error_prints_message_and_hint_on_stderr_and_exits_2() {
    let (code, out, err) = run(&["--nope", "x"]);
    assert_eq!(code, exit::USAGE);
    assert!(out.is_empty());
    let mut lines = err.lines();
    assert_eq!(lines.next(), Some("autogpt-shim: unknown option '--nope'"));
    assert!(err.contains("Usage: autogpt-shim"));
    assert!(err.contains("--help"));
}

#[test]
fn banner_mentions_what_the_user_must_know() {
    let banner = cli::BANNER.to_lowercase();
    for phrase in [
        "experimental",
        "files",
        "shell",
        "user account",
        "security.md",
    ] {
        assert!(banner.contains(phrase), "{phrase}");
    }
}

#[test]
fn config_error_maps_to_exit_78_with_one_line() {
    let mut err = Vec::new();
    let error = config::ConfigError::NoHome;
    assert_eq!(cli::config_error(&error, &mut err), exit::EX_CONFIG);
    let text = String::from_utf8(err).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(text.contains("configuration error"));
}

// --- arguments → overrides → configuration --------------------------------------

fn context(home: &std::path::Path, env: &[(&str, &str)]) -> Context {
    let home_text = home.display().to_string();
    let mut vars = vec![
        ("HOME".to_owned(), home_text.clone()),
        ("USERPROFILE".to_owned(), home_text),
    ];
    vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    Context {
        env: Environment::from_pairs(vars),
        cwd: Some(home.to_path_buf()),
        host: Host {
            platform: Some(Platform::Linux),
            os_name: "linux".into(),
            machine: "x86_64".into(),
            hostname: "host".into(),
        },
    }
}

#[test]
fn session_id_before_or_after_start_gives_the_same_config() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root");
    let missing = home.path().join("missing.toml");
    let (root_s, missing_s) = (root.to_str().unwrap(), missing.to_str().unwrap());
    let spellings: [&[&str]; 3] = [
        &[
            "--config",
            missing_s,
            "--allowed-root",
            root_s,
            "--session-id",
            "session-123",
            "start",
            "--enable-shell",
            "--enable-recording",
        ],
        &[
            "--config",
            missing_s,
            "--allowed-root",
            root_s,
            "start",
            "--session-id",
            "session-123",
            "--enable-shell",
            "--enable-recording",
        ],
        &[
            "--config",
            missing_s,
            "--allowed-root",
            root_s,
            "--session-id",
            "other",
            "start",
            "--session-id",
            "session-123",
            "--enable-shell",
            "--enable-recording",
        ],
    ];
    for list in spellings {
        let Parsed::Run(invocation) = parse(args(list)).unwrap() else {
            panic!("expected a command");
        };
        assert!(matches!(invocation.command, Command::Start), "{list:?}");
        let config = config::load(&invocation.overrides, &context(home.path(), &[]))
            .unwrap()
            .config;
        assert_eq!(config.session_id(), Some("session-123"), "{list:?}");
        assert_eq!(config.allowed_root, root);
        assert!(config.enable_shell);
        assert!(config.enable_recording);
    }
}

#[test]
fn redirect_port_vectors_from_environment_file_and_override() {
    let home = tempfile::tempdir().unwrap();
    let env = [("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", "42000")];
    let (overrides, _) = globals(&["cmd"]);
    let config = config::load(&overrides, &context(home.path(), &env))
        .unwrap()
        .config;
    assert_eq!(config.oauth_redirect_port, 42000);

    let file = home.path().join("c.toml");
    std::fs::write(&file, "oauth_redirect_port = 42010\n").unwrap();
    let (mut overrides, _) = globals(&["--config", file.to_str().unwrap(), "cmd"]);
    let config = config::load(&overrides, &context(home.path(), &env))
        .unwrap()
        .config;
    assert_eq!(config.oauth_redirect_port, 42010);

    overrides
        .settings
        .push(("oauth_redirect_port".into(), "42050".into()));
    let config = config::load(&overrides, &context(home.path(), &env))
        .unwrap()
        .config;
    assert_eq!(config.oauth_redirect_port, 42050);
}

#[test]
fn platform_url_flag_beats_the_file() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("c.toml");
    std::fs::write(&file, "platform_url = \"https://file.example.com\"\n").unwrap();
    let (overrides, _) = globals(&[
        "--config",
        file.to_str().unwrap(),
        "--platform-url=https://flag.example.com",
        "cmd",
    ]);
    let config = config::load(&overrides, &context(home.path(), &[]))
        .unwrap()
        .config;
    assert_eq!(config.platform_url, "https://flag.example.com");
}
