//! Fixtures shared by the `exec_*` tests: a jail over a temporary root, a
//! controlled shim environment and request builders.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::num::NonZeroU64;
use std::path::PathBuf;

use autogpt_shim::audit::Outcome as AuditOutcome;
use autogpt_shim::daemon::command_audit_result;
use autogpt_shim::exec::{self, Cancel, CommandOutcome, ExecContext, ExecError, Spawner};
use autogpt_shim::files::Audit;
use autogpt_shim::jail::{Jail, JailOptions};
use autogpt_shim::protocol::{CommandResult, ExecuteCommand, Shell};
use serde_json::Value;

pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub struct Fx {
    _tmp: tempfile::TempDir,
    /// Canonical jail root.
    pub root: PathBuf,
    /// A directory beside the root, outside the jail.
    pub outside: PathBuf,
    pub jail: Jail,
    /// The shim's environment as the command module sees it.
    pub host_env: Vec<(OsString, OsString)>,
    pub command_timeout_seconds: u64,
    pub max_file_size_bytes: u64,
    /// This test's own spawner process.
    pub spawner: Spawner,
    pub cancel: Cancel,
}

/// The shim binary, which the spawner re-executes.
pub fn shim_exe() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_autogpt-shim"))
}

impl Fx {
    pub fn new() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let jail = Jail::pin(&root, JailOptions::default()).unwrap();
        Fx {
            _tmp: tmp,
            host_env: vec![
                ("PATH".into(), PATH.into()),
                ("HOME".into(), root.clone().into()),
            ],
            root,
            outside,
            jail,
            command_timeout_seconds: 20,
            max_file_size_bytes: 10 * 1024 * 1024,
            spawner: Spawner::start(shim_exe()).unwrap(),
            cancel: Cancel::new().unwrap(),
        }
    }

    pub fn root_str(&self) -> String {
        self.root.to_str().unwrap().to_owned()
    }

    pub fn run(&self, req: &ExecuteCommand) -> CommandOutcome {
        let ctx = ExecContext {
            jail: &self.jail,
            command_timeout_seconds: self.command_timeout_seconds,
            max_file_size_bytes: self.max_file_size_bytes,
            host_env: &self.host_env,
            spawner: &self.spawner,
            cancel: &self.cancel,
            platform_deadline: None,
            sandbox: autogpt_shim::exec::CommandSandbox::default(),
            rules: autogpt_shim::exec::Rules::none(),
        };
        exec::execute(&ctx, req)
    }
}

pub fn command(text: &str) -> ExecuteCommand {
    ExecuteCommand {
        command: Some(text.to_owned()),
        argv: None,
        shell: Shell::Auto,
        cwd: None,
        timeout_seconds: None,
        env: BTreeMap::new(),
    }
}

pub fn argv(args: &[&str]) -> ExecuteCommand {
    ExecuteCommand {
        command: None,
        argv: Some(args.iter().map(|a| (*a).to_owned()).collect()),
        ..command("")
    }
}

pub fn with_timeout(mut req: ExecuteCommand, seconds: u64) -> ExecuteCommand {
    req.timeout_seconds = NonZeroU64::new(seconds);
    req
}

/// The `COMMAND_RESULT` of a command that ran.
pub fn result(outcome: &CommandOutcome) -> &CommandResult {
    match &outcome.reply {
        Ok(r) => r,
        Err(e) => panic!("expected COMMAND_RESULT, got {e:?}"),
    }
}

/// The error of a command that was refused.
pub fn error(outcome: &CommandOutcome) -> &ExecError {
    match &outcome.reply {
        Ok(r) => panic!("expected an error, got {r:?}"),
        Err(e) => e,
    }
}

/// The `EXECUTE_COMMAND` audit record's details as a map and its result.
pub fn record(outcome: &CommandOutcome) -> (BTreeMap<String, Value>, AuditOutcome) {
    match (&outcome.audit, command_audit_result(outcome)) {
        (Audit::Command { details, .. }, Some(result)) => {
            (details.0.iter().cloned().collect(), result)
        }
        (other, _) => panic!("expected an EXECUTE_COMMAND record, got {other:?}"),
    }
}

/// The details' keys in on-disk order.
pub fn detail_keys(outcome: &CommandOutcome) -> Vec<String> {
    match &outcome.audit {
        Audit::Command { details, .. } => details.0.iter().map(|(k, _)| k.clone()).collect(),
        other => panic!("expected an EXECUTE_COMMAND record, got {other:?}"),
    }
}

pub fn env_keys(outcome: &CommandOutcome) -> Vec<String> {
    let (details, _) = record(outcome);
    details["env_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

/// Writes an executable script. A helper process writes it: a descriptor
/// open for writing in this process would be inherited by commands other
/// tests fork meanwhile (until their `exec`), and executing the script
/// would then fail with `ETXTBSY`.
pub fn script(path: &std::path::Path, body: &str) {
    let status = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
            "sh",
            body,
        ])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}
