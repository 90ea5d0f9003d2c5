//! The completion scripts of the real binary (`autogpt-shim completions
//! SHELL`): each passes its shell's syntax check, and bash and fish
//! complete partial command lines with the commands, options and values of
//! the command table; zsh registers the script for the binary under
//! `compinit`. bash, zsh and fish (Debian packages of the same names) are
//! required: a test fails, never skips, without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_autogpt-shim");

fn shim(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .output()
        .expect("the binary runs")
}

/// The script for `shell`, written to a file in `dir`.
fn script(shell: &str, dir: &Path) -> std::path::PathBuf {
    let out = shim(&["completions", shell]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let path = dir.join(format!("autogpt-shim.{shell}"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

/// Runs `shell` with `args`, a clean environment and a private home.
fn run_shell(shell: &str, args: &[&str], home: &Path) -> Output {
    Command::new(shell)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| {
            panic!("{shell} is required for this test (Debian package {shell}): {e}")
        })
}

fn syntax_check(shell: &str, flag: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = script(shell, dir.path());
    let out = run_shell(shell, &[flag, file.to_str().unwrap()], dir.path());
    assert!(out.status.success(), "{shell} {flag}: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn bash_script_passes_bash_n() {
    syntax_check("bash", "-n");
}

#[test]
fn zsh_script_passes_zsh_n() {
    syntax_check("zsh", "-n");
}

#[test]
fn fish_script_passes_fish_n() {
    syntax_check("fish", "--no-execute");
}

/// What bash's completion function offers for the words `line` (the last
/// one is being typed), one candidate per line.
fn bash_complete(file: &Path, line: &[&str], home: &Path) -> Vec<String> {
    let words: Vec<String> = line.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'\n\
         complete -p autogpt-shim >/dev/null || exit 3\n\
         COMP_WORDS=({})\n\
         COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n\
         _autogpt_shim\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file.display(),
        words.join(" ")
    );
    let out = run_shell("bash", &["--norc", "--noprofile", "-c", &program], home);
    assert!(out.status.success(), "{line:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_commands_options_and_values_from_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = script("bash", dir.path());
    let complete = |line: &[&str]| bash_complete(&file, line, dir.path());

    assert_eq!(complete(&["autogpt-shim", "au"]), ["auth", "audit"]);
    assert_eq!(
        complete(&["autogpt-shim", "--config", "/x", "audit", "verify"]),
        ["verify", "verify-all"]
    );
    assert_eq!(
        complete(&["autogpt-shim", "audit", "tail", "--"]),
        ["--follow", "--session", "--op", "--json", "--help"]
    );
    assert_eq!(
        complete(&["autogpt-shim", "audit", "tail", "--op", "FILE_W"]),
        ["FILE_WRITE"]
    );
    // bash splits --option=value at the '=' (COMP_WORDBREAKS).
    assert_eq!(
        complete(&["autogpt-shim", "--log-level", "=", "W"]),
        ["WARNING"]
    );
    assert_eq!(
        complete(&["autogpt-shim", "--log-level=C"]),
        ["--log-level=CRITICAL"]
    );
    assert_eq!(
        complete(&["autogpt-shim", "completions", ""]),
        ["bash", "zsh", "fish"]
    );
    assert_eq!(
        complete(&["autogpt-shim", "help", "audit", "ro"]),
        ["rotate"]
    );
    // Options of another command are not offered.
    assert_eq!(
        complete(&["autogpt-shim", "status", "--en"]),
        Vec::<String>::new()
    );
    // PATH values complete file names.
    std::fs::write(dir.path().join("config-one.toml"), "").unwrap();
    let prefix = format!("{}/config-o", dir.path().display());
    assert_eq!(
        complete(&["autogpt-shim", "--config", &prefix]),
        [format!("{}/config-one.toml", dir.path().display())]
    );
}

/// What fish offers for the command line `line` (cursor at its end), the
/// candidates without their descriptions.
fn fish_complete(file: &Path, line: &str, home: &Path) -> Vec<String> {
    let program = format!(
        "source '{}'; complete --do-complete='{line}'",
        file.display()
    );
    let out = run_shell("fish", &["--no-config", "-c", &program], home);
    assert!(out.status.success(), "{line:?}: {out:?}");
    let mut found: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    found.sort();
    found
}

#[test]
fn fish_completes_commands_options_and_values_from_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = script("fish", dir.path());
    let complete = |line: &str| fish_complete(&file, line, dir.path());

    assert_eq!(complete("autogpt-shim au"), ["audit", "auth"]);
    assert_eq!(
        complete("autogpt-shim audit tail --"),
        ["--follow", "--help", "--json", "--op", "--session"]
    );
    assert_eq!(
        complete("autogpt-shim audit tail --op FILE_W"),
        ["FILE_WRITE"]
    );
    assert_eq!(
        complete("autogpt-shim --log-level "),
        ["CRITICAL", "DEBUG", "ERROR", "INFO", "WARNING"]
    );
    assert_eq!(
        complete("autogpt-shim completions "),
        ["bash", "fish", "zsh"]
    );
    assert_eq!(complete("autogpt-shim help audit ro"), ["rotate"]);
    assert_eq!(complete("autogpt-shim status --en"), Vec::<String>::new());
}

#[test]
fn zsh_script_registers_itself_for_the_binary_under_compinit() {
    let dir = tempfile::tempdir().unwrap();
    let file = script("zsh", dir.path());
    let program = format!(
        "autoload -Uz compinit && compinit -u -d '{}/zcompdump' && source '{}' && \
         print -r -- $_comps[autogpt-shim] && \
         _autogpt_shim_value 'audit tail' --op && print -r -- ${{REPLY[1,21]}} && \
         _autogpt_shim_subcommands audit && print -r -- $reply[1]",
        dir.path().display(),
        file.display()
    );
    let out = run_shell("zsh", &["-f", "-c", &program], dir.path());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "_autogpt-shim\nwords EXECUTE_COMMAND\ntail:print the records, one line each\n"
    );
}

#[test]
fn completions_needs_one_known_shell() {
    for (args, message) in [
        (
            &["completions"][..],
            "autogpt-shim: missing <SHELL> for completions (bash, zsh or fish)\n",
        ),
        (
            &["completions", "tcsh"][..],
            "autogpt-shim: invalid <SHELL> (expected bash, zsh or fish): 'tcsh'\n",
        ),
        (
            &["completions", "bash", "zsh"][..],
            "autogpt-shim: unexpected argument 'zsh'\n",
        ),
    ] {
        let out = shim(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with(message), "{args:?}: {stderr}");
    }
}
