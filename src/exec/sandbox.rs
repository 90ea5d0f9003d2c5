//! The sandboxes of commands, decided once at start: the filesystem
//! sandbox (`command_sandbox = "workspace"`: the Landlock probe, and per
//! command the ruleset, read and execute on the system directories and the
//! user's `PATH`, read and write on the session root and a private
//! temporary directory, and that directory itself) and the network one
//! (`command_network = "none"`: the probe of the namespaces and socket
//! filter that `sys` sets up in each command's child).
//!
//! This module builds rulesets in the shim, before any fork; the forked
//! child only installs the finished ruleset (`sys::prepare_command_child`).
//! It never lets a rule be dropped silently: rulesets are built with
//! `CompatLevel::HardRequirement` at the ABI the probe found, so a kernel
//! that cannot enforce one of them makes the command fail instead of run
//! less confined. It never grants a directory that is, holds or lies
//! inside one of the shim's protected locations.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus,
};
use serde_json::{Value, json};

use crate::jail::ProtectedLocations;
use crate::sys::{ConfinementFailure, ConfinementPart};

/// The newest ABI this shim asks for; the probe settles on the newest one
/// both it and the kernel know.
const REQUESTED_ABI: ABI = ABI::V7;

/// Read and execute is granted below these, when they exist.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// `command_sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Commands run with the user's full access (the default).
    #[default]
    Off,
    /// Commands run under Landlock, confined to the root and a private
    /// temporary directory for writes.
    Workspace,
}

impl SandboxMode {
    /// Every mode, in the order `--help` and the completions list them.
    pub const ALL: [SandboxMode; 2] = [SandboxMode::Off, SandboxMode::Workspace];

    /// The config spelling.
    pub fn parse(value: &str) -> Option<SandboxMode> {
        SandboxMode::ALL.into_iter().find(|m| m.as_str() == value)
    }

    /// The spelling `parse` accepts.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::Workspace => "workspace",
        }
    }
}

/// `command_sandbox_fallback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxFallback {
    /// A requested sandbox that is unavailable stops `start` (the default).
    #[default]
    Refuse,
    /// Runs commands unconfined when the sandbox is unavailable, saying so.
    Unconfined,
}

impl SandboxFallback {
    /// The config spelling.
    pub fn parse(value: &str) -> Option<SandboxFallback> {
        match value {
            "refuse" => Some(SandboxFallback::Refuse),
            "unconfined" => Some(SandboxFallback::Unconfined),
            _ => None,
        }
    }
}

/// `command_network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// Commands use the host's network (the default).
    #[default]
    Allow,
    /// Commands run in their own network namespace with only a loopback.
    None,
}

impl NetworkMode {
    /// Every mode, in the order `--help` and the completions list them.
    pub const ALL: [NetworkMode; 2] = [NetworkMode::Allow, NetworkMode::None];

    /// The config spelling.
    pub fn parse(value: &str) -> Option<NetworkMode> {
        NetworkMode::ALL.into_iter().find(|m| m.as_str() == value)
    }

    /// The spelling `parse` accepts.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Allow => "allow",
            NetworkMode::None => "none",
        }
    }
}

/// Both sandboxes of commands, as decided at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommandSandbox {
    /// The filesystem sandbox.
    pub fs: FsSandbox,
    /// The network sandbox.
    pub net: NetSandbox,
}

impl CommandSandbox {
    /// Decides both sandboxes with the real probes, as `start` and
    /// `doctor` do. `Err` names every requested part that is missing.
    pub fn decide(
        fs: SandboxMode,
        network: NetworkMode,
        fallback: SandboxFallback,
        shim: &Path,
    ) -> Result<CommandSandbox, String> {
        let fs = FsSandbox::decide(fs, fallback, probe_landlock);
        let net = NetSandbox::decide(network, fallback, || probe_network(shim));
        match (fs, net) {
            (Ok(fs), Ok(net)) => Ok(CommandSandbox { fs, net }),
            (Err(fs), Err(net)) => Err(format!("{fs}; and {net}")),
            (Err(why), _) | (_, Err(why)) => Err(why),
        }
    }

    /// The `sandbox` value of a command's audit record: both parts when
    /// either was configured, `None` (the record stays as it always was)
    /// when neither was.
    pub fn audit_value(&self) -> Option<Value> {
        if self.fs == FsSandbox::Off && self.net == NetSandbox::Off {
            return None;
        }
        let fs = match self.fs {
            FsSandbox::Off => "off".to_owned(),
            FsSandbox::Landlock(abi) => format!("landlock-v{}", abi as i32),
            FsSandbox::Unavailable => "unavailable".to_owned(),
        };
        let net = match self.net {
            NetSandbox::Off => "allow",
            NetSandbox::Namespace => "namespace",
            NetSandbox::Unavailable => "unavailable",
        };
        Some(json!({"fs": fs, "net": net}))
    }

    /// One line for `start`'s log and `status`: what confines commands,
    /// with a missing part in capitals.
    pub fn describe(&self) -> String {
        if self.fs == FsSandbox::Off && self.net == NetSandbox::Off {
            return "off (commands have your full access and the network)".to_owned();
        }
        let files = match self.fs {
            FsSandbox::Off => "unconfined".to_owned(),
            FsSandbox::Landlock(abi) => {
                format!("workspace (Landlock ABI {})", abi as i32)
            }
            FsSandbox::Unavailable => "UNAVAILABLE, commands run unconfined".to_owned(),
        };
        let network = match self.net {
            NetSandbox::Off => "allowed",
            NetSandbox::Namespace => "none (own namespace, loopback only)",
            NetSandbox::Unavailable => "UNAVAILABLE, commands have the network",
        };
        format!("files {files}; network {network}")
    }

    /// The parts that were asked for but are missing, for the warnings of
    /// `start` and the lines of `status` and `doctor`.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if self.fs == FsSandbox::Unavailable {
            missing.push("filesystem sandbox (Landlock)");
        }
        if self.net == NetSandbox::Unavailable {
            missing.push("network isolation (user and network namespaces)");
        }
        missing
    }
}

/// What the daemon does with commands' network, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetSandbox {
    /// Not asked for: commands use the host's network.
    #[default]
    Off,
    /// Every command runs in its own network namespace behind the socket
    /// filter.
    Namespace,
    /// Asked for, unavailable, and the user chose to run with the network
    /// anyway: every record says so.
    Unavailable,
}

impl NetSandbox {
    /// Decides from the settings and `probe` (the real one is
    /// [`probe_network`]). `Err` is the one-line reason `start` refuses
    /// with: what is missing, why, and what to do.
    pub fn decide(
        mode: NetworkMode,
        fallback: SandboxFallback,
        probe: impl FnOnce() -> Result<(), ConfinementFailure>,
    ) -> Result<NetSandbox, String> {
        if mode == NetworkMode::Allow {
            return Ok(NetSandbox::Off);
        }
        match probe() {
            Ok(()) => Ok(NetSandbox::Namespace),
            Err(_) if fallback == SandboxFallback::Unconfined => Ok(NetSandbox::Unavailable),
            Err(failure) => Err(format!(
                "command_network = \"none\" cannot isolate commands: {}; {}, or set \
                 command_sandbox_fallback = \"unconfined\" to run commands with the network, \
                 or command_network = \"allow\"",
                failure.message(),
                network_remedy(failure.part),
            )),
        }
    }
}

/// What the user can do about the failed step.
fn network_remedy(part: ConfinementPart) -> &'static str {
    match part {
        ConfinementPart::Namespaces => {
            "allow unprivileged user namespaces (sysctl user.max_user_namespaces above 0, and \
             kernel.unprivileged_userns_clone = 1 on kernels that have it)"
        }
        ConfinementPart::IdentityMap | ConfinementPart::Loopback => {
            "the new namespace has no rights, which is what an AppArmor restriction of \
             unprivileged user namespaces does (Ubuntu 23.10 and later): allow them with sysctl \
             kernel.apparmor_restrict_unprivileged_userns = 0 or an AppArmor profile with the \
             userns permission for this binary"
        }
        ConfinementPart::Seccomp => "use a kernel with seccomp filters (CONFIG_SECCOMP_FILTER)",
        ConfinementPart::Landlock => "use a kernel with Landlock enabled",
        ConfinementPart::Probe => "fix what the reason names",
    }
}

/// Starts `shim --version` exactly as a command without network would be
/// started (through a spawner of its own, so the daemon's memory is never
/// forked), and reports the step that fails. `shim` is this program.
pub fn probe_network(shim: &Path) -> Result<(), ConfinementFailure> {
    let failed = |e: std::io::Error| ConfinementFailure {
        part: ConfinementPart::Probe,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    };
    let spawner = super::Spawner::start(shim).map_err(failed)?;
    let null = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
    };
    let cwd = rustix::fs::open(
        "/",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| failed(e.into()))?;
    let argv = [shim.as_os_str().to_owned(), "--version".into()];
    let spawned = spawner.spawn(
        &argv,
        &std::collections::BTreeMap::new(),
        cwd.as_fd(),
        null().map_err(failed)?,
        null().map_err(failed)?,
        super::spawner::Confinement {
            landlock: None,
            isolate_network: true,
        },
    );
    match spawned {
        Ok(child) => {
            // Started means every step held; its exit says nothing more.
            let _ = child.exit.recv_timeout(std::time::Duration::from_secs(10));
            Ok(())
        }
        Err(e) => Err(e
            .raw_os_error()
            .and_then(ConfinementFailure::decode)
            .unwrap_or_else(|| failed(e))),
    }
}

/// What the daemon does with commands' files, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsSandbox {
    /// No sandbox was asked for: commands and their audit records are as
    /// they always were.
    #[default]
    Off,
    /// Every command runs under Landlock at this ABI.
    Landlock(ABI),
    /// A sandbox was asked for, Landlock is missing, and the user chose to
    /// run unconfined anyway: every record says so.
    Unavailable,
}

impl FsSandbox {
    /// Decides from the settings and `probe` (the real one is
    /// [`probe_landlock`]). `Err` is the one-line reason `start` refuses
    /// with: what is missing, why, and what to do.
    pub fn decide(
        mode: SandboxMode,
        fallback: SandboxFallback,
        probe: impl FnOnce() -> Result<ABI, String>,
    ) -> Result<FsSandbox, String> {
        if mode == SandboxMode::Off {
            return Ok(FsSandbox::Off);
        }
        match probe() {
            Ok(abi) => Ok(FsSandbox::Landlock(abi)),
            Err(_) if fallback == SandboxFallback::Unconfined => Ok(FsSandbox::Unavailable),
            Err(why) => Err(format!(
                "command_sandbox = \"workspace\" needs Landlock, which is unavailable: {why}; \
                 use a kernel with Landlock enabled (Linux 5.13 or later, \"landlock\" in the lsm= \
                 boot list), or set command_sandbox_fallback = \"unconfined\" to run commands \
                 without it, or command_sandbox = \"off\""
            )),
        }
    }
}

/// Creates a real ruleset and enforces it on a throwaway thread (Landlock
/// restricts only the calling thread, and the thread ends right after),
/// then reads back what the kernel enforced. Returns the ABI in use, or
/// why Landlock cannot be used.
pub fn probe_landlock() -> Result<ABI, String> {
    let probe = std::thread::Builder::new()
        .name("landlock-probe".into())
        .spawn(|| -> Result<ABI, String> {
            let status = Ruleset::default()
                .handle_access(AccessFs::from_all(REQUESTED_ABI))
                .and_then(|r| r.create())
                .and_then(|r| r.restrict_self())
                .map_err(|e| format!("the Landlock ruleset could not be applied ({e})"))?;
            match (status.ruleset, status.landlock) {
                (
                    RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced,
                    LandlockStatus::Available { effective_abi, .. },
                ) => Ok(effective_abi),
                (_, LandlockStatus::NotEnabled) => {
                    Err("the kernel has Landlock but it is not enabled".into())
                }
                (_, LandlockStatus::NotImplemented) => {
                    Err("the kernel does not implement Landlock".into())
                }
                _ => Err("the kernel did not enforce the Landlock ruleset".into()),
            }
        })
        .map_err(|e| format!("the Landlock probe could not start ({e})"))?;
    probe
        .join()
        .map_err(|_| "the Landlock probe failed".to_owned())?
}

/// One command's confinement: the ruleset to install in the child and its
/// private temporary directory, removed when this is dropped.
#[derive(Debug)]
pub struct Prepared {
    /// The Landlock ruleset descriptor (close-on-exec).
    pub ruleset: OwnedFd,
    /// The private temporary directory, the command's `TMPDIR`.
    pub tmpdir: PathBuf,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Whatever the command left there goes with it.
        let _ = std::fs::remove_dir_all(&self.tmpdir);
    }
}

/// Builds the confinement of one command under `root`: a fresh 0700
/// directory below `tmp_base` and a ruleset at `abi`. `path` is the shim's
/// own `PATH` (never the request's: a request must not choose what becomes
/// readable). Fails when the root conflicts with a protected location or
/// anything cannot be set up exactly.
pub fn prepare(
    abi: ABI,
    root: &Path,
    path: Option<&OsStr>,
    tmp_base: &Path,
    protected: &ProtectedLocations,
) -> Result<Prepared, String> {
    if let Err(conflict) = protected.check_root(root) {
        return Err(format!("the root cannot be granted: {conflict}"));
    }
    let tmpdir = make_private_dir(tmp_base)?;
    // From here on, dropping `prepared` removes the directory.
    let ruleset = build(abi, root, &tmpdir, path, protected);
    match ruleset {
        Ok(ruleset) => Ok(Prepared { ruleset, tmpdir }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmpdir);
            Err(e)
        }
    }
}

fn build(
    abi: ABI,
    root: &Path,
    tmpdir: &Path,
    path: Option<&OsStr>,
    protected: &ProtectedLocations,
) -> Result<OwnedFd, String> {
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    // `> /dev/null` opens with O_TRUNC, which needs the truncate right.
    let null = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate) & all;
    let fail = |e: landlock::RulesetError| format!("the Landlock ruleset could not be built ({e})");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .and_then(|r| r.create())
        .map_err(fail)?;
    let mut readable: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).collect();
    if let Some(path) = path {
        readable.extend(std::env::split_paths(path).filter(|p| p.is_absolute()));
    }
    readable.sort();
    readable.dedup();
    for dir in &readable {
        // Missing entries are common (no /lib32); a directory that would
        // expose the shim's own files is left out rather than granted.
        if !dir.is_dir() || protected.check_root(dir).is_err() {
            continue;
        }
        let Ok(fd) = PathFd::new(dir) else { continue };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, read)).map_err(fail)?;
    }
    // Character devices get file rights only.
    for (device, access) in [
        ("/dev/null", null),
        ("/dev/zero", AccessFs::ReadFile.into()),
        ("/dev/random", AccessFs::ReadFile.into()),
        ("/dev/urandom", AccessFs::ReadFile.into()),
    ] {
        let Ok(fd) = PathFd::new(device) else {
            continue;
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(fail)?;
    }
    for dir in [root, tmpdir] {
        let fd = PathFd::new(dir)
            .map_err(|e| format!("{} cannot be opened for the sandbox ({e})", dir.display()))?;
        ruleset = ruleset.add_rule(PathBeneath::new(fd, all)).map_err(fail)?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| "the kernel gave no Landlock ruleset".to_owned())
}

/// A new directory only the user can enter, with an unguessable name.
fn make_private_dir(base: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let mut random = [0u8; 12];
    getrandom::fill(&mut random)
        .map_err(|e| format!("no randomness for a temporary name ({e})"))?;
    let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let dir = base.join(format!("autogpt-shim-cmd-{name}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            format!(
                "the command's private temporary directory could not be created in {} ({e})",
                base.display()
            )
        })?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn off_never_probes_and_adds_nothing_to_the_record() {
        let decided = FsSandbox::decide(SandboxMode::Off, SandboxFallback::Refuse, || {
            panic!("probed although the sandbox is off")
        });
        assert_eq!(decided, Ok(FsSandbox::Off));
        let net = NetSandbox::decide(NetworkMode::Allow, SandboxFallback::Refuse, || {
            panic!("probed although the network is allowed")
        });
        assert_eq!(net, Ok(NetSandbox::Off));
        assert_eq!(CommandSandbox::default().audit_value(), None);
    }

    #[test]
    fn workspace_without_landlock_refuses_naming_what_is_missing_and_what_to_do() {
        let decided = FsSandbox::decide(SandboxMode::Workspace, SandboxFallback::Refuse, || {
            Err("the kernel does not implement Landlock".into())
        });
        let message = decided.unwrap_err();
        assert!(message.contains("Landlock"), "{message}");
        assert!(message.contains("does not implement"), "{message}");
        assert!(message.contains("command_sandbox_fallback"), "{message}");
        assert!(!message.contains('\n'));
    }

    #[test]
    fn workspace_without_landlock_runs_unconfined_only_when_chosen_and_says_so() {
        let decided =
            FsSandbox::decide(SandboxMode::Workspace, SandboxFallback::Unconfined, || {
                Err("the kernel does not implement Landlock".into())
            });
        assert_eq!(decided, Ok(FsSandbox::Unavailable));
        let sandbox = CommandSandbox {
            fs: FsSandbox::Unavailable,
            net: NetSandbox::Off,
        };
        assert_eq!(
            sandbox.audit_value(),
            Some(json!({"fs": "unavailable", "net": "allow"}))
        );
        assert_eq!(sandbox.missing(), ["filesystem sandbox (Landlock)"]);
    }

    #[test]
    fn workspace_with_landlock_records_the_abi() {
        let decided = FsSandbox::decide(SandboxMode::Workspace, SandboxFallback::Refuse, || {
            Ok(ABI::V5)
        });
        assert_eq!(decided, Ok(FsSandbox::Landlock(ABI::V5)));
        let sandbox = CommandSandbox {
            fs: FsSandbox::Landlock(ABI::V5),
            net: NetSandbox::Off,
        };
        assert_eq!(
            sandbox.audit_value(),
            Some(json!({"fs": "landlock-v5", "net": "allow"}))
        );
        assert!(sandbox.missing().is_empty());
    }

    fn failed(part: ConfinementPart) -> ConfinementFailure {
        ConfinementFailure {
            part,
            errno: libc::EPERM,
        }
    }

    #[test]
    fn no_network_without_namespaces_refuses_naming_the_step_and_the_remedy() {
        let refused = NetSandbox::decide(NetworkMode::None, SandboxFallback::Refuse, || {
            Err(failed(ConfinementPart::Namespaces))
        })
        .unwrap_err();
        assert!(refused.contains("user and network namespace"), "{refused}");
        assert!(refused.contains("max_user_namespaces"), "{refused}");
        assert!(refused.contains("command_sandbox_fallback"), "{refused}");
        assert!(!refused.contains('\n'));
        let apparmor = NetSandbox::decide(NetworkMode::None, SandboxFallback::Refuse, || {
            Err(failed(ConfinementPart::IdentityMap))
        })
        .unwrap_err();
        assert!(
            apparmor.contains("apparmor_restrict_unprivileged_userns"),
            "{apparmor}"
        );
        let seccomp = NetSandbox::decide(NetworkMode::None, SandboxFallback::Refuse, || {
            Err(failed(ConfinementPart::Seccomp))
        })
        .unwrap_err();
        assert!(seccomp.contains("seccomp"), "{seccomp}");
    }

    #[test]
    fn no_network_without_namespaces_runs_with_it_only_when_chosen_and_says_so() {
        let decided = NetSandbox::decide(NetworkMode::None, SandboxFallback::Unconfined, || {
            Err(failed(ConfinementPart::Loopback))
        });
        assert_eq!(decided, Ok(NetSandbox::Unavailable));
        let sandbox = CommandSandbox {
            fs: FsSandbox::Off,
            net: NetSandbox::Unavailable,
        };
        assert_eq!(
            sandbox.audit_value(),
            Some(json!({"fs": "off", "net": "unavailable"}))
        );
        assert_eq!(
            sandbox.missing(),
            ["network isolation (user and network namespaces)"]
        );
    }

    #[test]
    fn no_network_with_namespaces_records_the_namespace() {
        let decided = NetSandbox::decide(NetworkMode::None, SandboxFallback::Refuse, || Ok(()));
        assert_eq!(decided, Ok(NetSandbox::Namespace));
        let sandbox = CommandSandbox {
            fs: FsSandbox::Off,
            net: NetSandbox::Namespace,
        };
        assert_eq!(
            sandbox.audit_value(),
            Some(json!({"fs": "off", "net": "namespace"}))
        );
    }

    #[test]
    fn a_temporary_base_that_cannot_hold_the_directory_fails_the_setup() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("no-such-dir");
        let protected = ProtectedLocations::default();
        let error = prepare(ABI::V1, root.path(), None, &missing, &protected).unwrap_err();
        assert!(error.contains("private temporary directory"), "{error}");
    }

    #[test]
    fn the_private_directory_is_0700_and_removed_with_the_preparation() {
        use std::os::unix::fs::PermissionsExt;
        if probe_landlock().is_err() {
            // Without Landlock no ruleset can be built; the refusal paths
            // are covered above.
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        let protected = ProtectedLocations::default();
        let abi = probe_landlock().unwrap();
        let prepared = prepare(abi, root.path(), None, base.path(), &protected).unwrap();
        let mode = std::fs::metadata(&prepared.tmpdir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let dir = prepared.tmpdir.clone();
        drop(prepared);
        assert!(!dir.exists());
    }
}
