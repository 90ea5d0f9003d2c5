//! Per-OS locations (CLI.md §6, AUDIT.md §1.1, AUTH.md §10.1). The Linux
//! layout is tested here; macOS and Windows compile their own layouts.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use autogpt_shim::config::{ConfigError, Environment, OsPaths};

fn paths(vars: &[(&str, &str)]) -> Result<OsPaths, ConfigError> {
    OsPaths::from_env(&Environment::from_pairs(vars.iter().copied()))
}

fn p(text: &str) -> PathBuf {
    PathBuf::from(text)
}

#[test]
fn linux_defaults_follow_the_xdg_fallbacks() {
    let paths = paths(&[("HOME", "/home/alice")]).unwrap();
    assert_eq!(paths.home, p("/home/alice"));
    assert_eq!(
        paths.default_config_file,
        p("/home/alice/.config/autogpt-local-executor/config.toml")
    );
    assert_eq!(
        paths.default_audit_log,
        p("/home/alice/.local/state/autogpt-local-executor/audit.log")
    );
    assert_eq!(
        paths.default_allowed_root,
        p("/home/alice/autogpt-workspace")
    );
    assert_eq!(
        paths.secret_store_dir,
        p("/home/alice/.local/state/autogpt-local-executor")
    );
    assert_eq!(
        paths.tokens_file(),
        p("/home/alice/.local/state/autogpt-local-executor/tokens.enc")
    );
    assert_eq!(
        paths.legacy_audit_key_file,
        p("/home/alice/.autogpt-local-executor/audit-key.enc")
    );
    assert_eq!(
        paths.state_dir,
        p("/home/alice/.local/state/autogpt-local-executor")
    );
    assert_eq!(
        paths.daemon_stdout_log(),
        p("/home/alice/.local/state/autogpt-local-executor/shim.out.log")
    );
    assert_eq!(
        paths.daemon_stderr_log(),
        p("/home/alice/.local/state/autogpt-local-executor/shim.err.log")
    );
    assert_eq!(
        paths.autostart_file,
        p("/home/alice/.config/systemd/user/autogpt-shim.service")
    );
    assert_eq!(
        paths.machine_id_file(),
        p("/home/alice/.autogpt-local-executor-machine-id")
    );
}

#[test]
fn absolute_xdg_directories_are_used() {
    let paths = paths(&[
        ("HOME", "/home/alice"),
        ("XDG_CONFIG_HOME", "/cfg"),
        ("XDG_STATE_HOME", "/state"),
    ])
    .unwrap();
    assert_eq!(
        paths.default_config_file,
        p("/cfg/autogpt-local-executor/config.toml")
    );
    assert_eq!(
        paths.default_audit_log,
        p("/state/autogpt-local-executor/audit.log")
    );
    assert_eq!(paths.secret_store_dir, p("/state/autogpt-local-executor"));
    assert_eq!(paths.state_dir, p("/state/autogpt-local-executor"));
    assert_eq!(
        paths.autostart_file,
        p("/cfg/systemd/user/autogpt-shim.service")
    );
}

#[test]
fn relative_or_empty_xdg_directories_are_ignored() {
    for value in ["", "relative/state", "./state"] {
        let paths = paths(&[
            ("HOME", "/home/alice"),
            ("XDG_CONFIG_HOME", value),
            ("XDG_STATE_HOME", value),
        ])
        .unwrap();
        assert_eq!(
            paths.default_audit_log,
            p("/home/alice/.local/state/autogpt-local-executor/audit.log"),
            "{value:?}"
        );
        assert_eq!(
            paths.default_config_file,
            p("/home/alice/.config/autogpt-local-executor/config.toml"),
            "{value:?}"
        );
    }
}

#[test]
fn fallback_dir_moves_tokens_and_the_legacy_key_but_not_the_state_dir() {
    let paths = paths(&[
        ("HOME", "/home/alice"),
        ("AUTOGPT_SHIM_FALLBACK_DIR", "/secure"),
    ])
    .unwrap();
    assert_eq!(paths.tokens_file(), p("/secure/tokens.enc"));
    assert_eq!(paths.legacy_audit_key_file, p("/secure/audit-key.enc"));
    assert_eq!(
        paths.state_dir,
        p("/home/alice/.local/state/autogpt-local-executor")
    );
}

#[test]
fn fallback_dir_expands_tilde() {
    let paths = paths(&[
        ("HOME", "/home/alice"),
        ("AUTOGPT_SHIM_FALLBACK_DIR", "~/vault"),
    ])
    .unwrap();
    assert_eq!(paths.secret_store_dir, p("/home/alice/vault"));
}

#[test]
fn empty_fallback_dir_counts_as_unset() {
    let paths = paths(&[("HOME", "/home/alice"), ("AUTOGPT_SHIM_FALLBACK_DIR", "")]).unwrap();
    assert_eq!(
        paths.secret_store_dir,
        p("/home/alice/.local/state/autogpt-local-executor")
    );
}

#[test]
fn relative_fallback_dir_is_refused() {
    let error = paths(&[
        ("HOME", "/home/alice"),
        ("AUTOGPT_SHIM_FALLBACK_DIR", "vault"),
    ])
    .unwrap_err();
    assert!(matches!(
        error,
        ConfigError::InvalidVariable {
            name: "AUTOGPT_SHIM_FALLBACK_DIR",
            ..
        }
    ));
}

#[test]
fn home_must_be_set_and_absolute() {
    assert!(matches!(paths(&[]), Err(ConfigError::NoHome)));
    assert!(matches!(paths(&[("HOME", "")]), Err(ConfigError::NoHome)));
    assert!(matches!(
        paths(&[("HOME", "alice")]),
        Err(ConfigError::NoHome)
    ));
}

#[test]
fn variable_names_are_matched_exactly_on_unix() {
    let paths = paths(&[("HOME", "/home/alice"), ("xdg_state_home", "/state")]).unwrap();
    assert_eq!(
        paths.default_audit_log,
        p("/home/alice/.local/state/autogpt-local-executor/audit.log")
    );
}
