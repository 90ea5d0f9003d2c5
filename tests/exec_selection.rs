//! EXEC.md §3 steps 5, 9, 9a, 10 and §4: exactly one of `command`/`argv`,
//! shell selection on the shim's `PATH`, `argv[0]` on the child's `PATH`,
//! and the spawn failures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use autogpt_shim::daemon::OperationError;
use autogpt_shim::exec::EXACTLY_ONE;
use autogpt_shim::protocol::{ErrorCode, Shell};
use exec_support::*;

#[test]
fn both_command_and_argv_is_an_audited_internal_error() {
    let fx = Fx::new();
    let mut req = command("true");
    req.argv = Some(vec!["true".into()]);
    let out = fx.run(&req);
    let e = error(&out);
    assert_eq!(e.code(), ErrorCode::InternalError);
    assert_eq!(e.message(), EXACTLY_ONE);
    let (details, result) = record(&out);
    assert!(!result.ok);
    assert_eq!(result.error_code.as_deref(), Some("INTERNAL_ERROR"));
    assert_eq!(result.exit_code, None);
    // Before the jail: the root string stands for a missing cwd.
    assert_eq!(details["cwd"], fx.root_str());
    assert_eq!(
        detail_keys(&out),
        [
            "command",
            "argv",
            "shell",
            "cwd",
            "env_keys",
            "timeout_seconds"
        ]
    );
}

#[test]
fn neither_command_nor_argv_is_an_internal_error() {
    let fx = Fx::new();
    let mut req = command("");
    req.command = None;
    let out = fx.run(&req);
    assert_eq!(error(&out).message(), EXACTLY_ONE);
}

#[test]
fn empty_command_counts_as_set_and_runs() {
    let fx = Fx::new();
    let r = fx.run(&command(""));
    assert_eq!(result(&r).exit_code, 0);
}

#[test]
fn empty_argv_is_rejected_after_the_jail() {
    let fx = Fx::new();
    let mut req = argv(&[]);
    req.cwd = Some("sub".into());
    let out = fx.run(&req);
    let e = error(&out);
    assert_eq!(e.code(), ErrorCode::InternalError);
    assert_eq!(e.message(), "argv must not be empty");
    let (details, _) = record(&out);
    assert_eq!(details["cwd"], format!("{}/sub", fx.root_str()));
}

#[test]
fn auto_prefers_bash() {
    let fx = Fx::new();
    let out = fx.run(&command("echo ${BASH_VERSION:+bash}"));
    assert_eq!(result(&out).stdout, "bash\n");
}

#[test]
fn auto_falls_back_to_sh_without_bash_on_the_shims_path() {
    let mut fx = Fx::new();
    let bin = fx.outside.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let sh = which_real("sh");
    std::os::unix::fs::symlink(&sh, bin.join("sh")).unwrap();
    fx.host_env = vec![("PATH".into(), bin.clone().into())];
    let mut req = command("echo \"$0\"");
    // The child's PATH (from the wire) does not affect the shell lookup.
    req.env.insert("PATH".into(), PATH.into());
    let out = fx.run(&req);
    assert_eq!(
        result(&out).stdout,
        format!("{}\n", bin.join("sh").display())
    );
}

#[test]
fn named_shells_resolve_to_absolute_paths() {
    let fx = Fx::new();
    let mut req = command("echo \"$0\"");
    req.shell = Shell::Sh;
    let out = fx.run(&req);
    let shown = result(&out).stdout.trim_end().to_owned();
    assert!(shown.starts_with('/') && shown.ends_with("/sh"), "{shown}");
}

#[test]
fn missing_shell_is_shell_not_available() {
    let mut fx = Fx::new();
    fx.host_env = vec![("PATH".into(), fx.outside.clone().into())];
    for shell in [Shell::Auto, Shell::Bash, Shell::Zsh, Shell::Pwsh, Shell::Sh] {
        let mut req = command("true");
        req.shell = shell;
        let out = fx.run(&req);
        let e = error(&out);
        assert_eq!(e.code(), ErrorCode::ShellNotAvailable);
        assert_eq!(
            e.message(),
            format!("Shell '{shell}' is not available on this OS.")
        );
        let (_, result) = record(&out);
        assert_eq!(result.error_code.as_deref(), Some("SHELL_NOT_AVAILABLE"));
    }
}

#[test]
fn windows_shells_are_never_available() {
    let fx = Fx::new();
    for shell in [Shell::Powershell, Shell::Cmd] {
        let mut req = command("true");
        req.shell = shell;
        assert_eq!(error(&fx.run(&req)).code(), ErrorCode::ShellNotAvailable);
    }
}

#[test]
fn argv_mode_ignores_shell_but_logs_it() {
    let fx = Fx::new();
    let mut req = argv(&["echo", "a b", "$HOME"]);
    req.shell = Shell::Cmd;
    let out = fx.run(&req);
    assert_eq!(result(&out).stdout, "a b $HOME\n");
    let (details, _) = record(&out);
    assert_eq!(details["shell"], "cmd");
    assert_eq!(details["command"], serde_json::Value::Null);
}

#[test]
fn argv0_is_searched_on_the_childs_path() {
    let fx = Fx::new();
    let bin = fx.outside.join("childbin");
    std::fs::create_dir(&bin).unwrap();
    script(&bin.join("only-here"), "#!/bin/sh\necho found\n");
    let mut req = argv(&["only-here"]);
    req.env.insert("PATH".into(), bin.to_str().unwrap().into());
    assert_eq!(result(&fx.run(&req)).stdout, "found\n");
    // Without the wire PATH the shim's PATH is used, which lacks it.
    let out = fx.run(&argv(&["only-here"]));
    let e = error(&out);
    assert_eq!(e.code(), ErrorCode::ShellNotAvailable);
    assert_eq!(e.message(), "Executable not found: only-here");
}

#[test]
fn relative_argv0_with_a_slash_is_relative_to_the_cwd() {
    let fx = Fx::new();
    script(&fx.root.join("sub/tool"), "#!/bin/sh\necho tool\n");
    let mut req = argv(&["./tool"]);
    req.cwd = Some("sub".into());
    assert_eq!(result(&fx.run(&req)).stdout, "tool\n");
}

#[test]
fn non_executable_program_is_an_internal_error() {
    let fx = Fx::new();
    std::fs::write(fx.root.join("plain"), "data").unwrap();
    let out = fx.run(&argv(&["./plain"]));
    let e = error(&out);
    assert_eq!(e.code(), ErrorCode::InternalError);
    let (_, result) = record(&out);
    assert_eq!(result.error_code.as_deref(), Some("INTERNAL_ERROR"));
}

#[test]
fn nul_in_an_argument_is_an_internal_error() {
    let fx = Fx::new();
    let out = fx.run(&argv(&["echo", "a\0b"]));
    assert_eq!(error(&out).code(), ErrorCode::InternalError);
}

#[test]
fn command_string_is_passed_unmodified() {
    let fx = Fx::new();
    let out = fx.run(&command("printf '%s|' \"a  b\" 'c\\d'"));
    assert_eq!(result(&out).stdout, "a  b|c\\d|");
}

fn which_real(name: &str) -> std::path::PathBuf {
    PATH.split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap()
}
