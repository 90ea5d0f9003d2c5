//! `start`: the daemon in the foreground (CLI.md §4.2), in persistent
//! machine-control mode or in legacy `--session-id` mode.
//!
//! This module owns the startup sequence and the exit status: configuration,
//! the session root (legacy mode), the secret store and audit key, the audit
//! writer, the preflight checks, `SHIM_START`, the token check, then the
//! connection runtime (with the control plane and its child runtimes in
//! control mode) until a stop signal or a terminal condition, and
//! `SHIM_STOP`.
//! Every failure before the first connection is one `Preflight failed:` line
//! and exit 78, and nothing is connected before `SHIM_START` is durable. It
//! never prints a token, the audit key or the passphrase, and it never
//! writes `SHIM_STOP` after an audit write has failed.

use std::ffi::OsString;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use super::{PROGRAM, VERSION, load_config};
use crate::audit::writer::{RotateReason, WriterOptions, WriterThread};
use crate::audit::{AuditLog, Details, Entry, Outcome};
use crate::auth::refresh::{StoredCredentials, TokenEndpoint};
use crate::config::{Config, Environment, Mode, Overrides, Platform};
use crate::control::bindings::Revisions;
use crate::control::children::{ChildTemplate, Children};
use crate::control::grant::GrantKey;
use crate::control::plane::{ControlPlane, ControlSettings, IDLE_AFTER, REAP_INTERVAL};
use crate::daemon::Optional;
use crate::daemon::approvals::{ApprovalSocket, Approvals};
use crate::daemon::capacity::{MachineLimitSettings, MachineLimits, MachineWorkPool};
use crate::daemon::handlers::CommandGate;
use crate::daemon::handshake::{ConnectionKind, Gates, Identity, Limits, advertised_capabilities};
use crate::daemon::pool::{WORKERS, WorkerThreads};
use crate::daemon::refusal::{REFUSAL_RETRIES, RefusalKind};
use crate::daemon::runtime::{self, DataSession, Plane, RuntimeEnd, Session};
use crate::daemon::runtime_file::{RunningSettings, RuntimeFile};
use crate::daemon::session::CommandRules;
use crate::daemon::session::{AuditSink, DataPlane, DataPlaneFactory, fresh_id};
use crate::desktop::{self, Desktop};
use crate::exec::CommandSandbox;
use crate::exec::spawner::{Death, DeathHook, Mechanism};
use crate::exec::{Launching, Spawner};
use crate::exit;
use crate::hardware::Roots;
use crate::jail::roots::{self, Inspected};
use crate::jail::{Jail, JailOptions, ProtectedLocations};
use crate::llm::LocalLlm;
use crate::log::Log;
use crate::protocol::{Backoff, HelloField, hello_rules};
use crate::secrets::{ErrorClass, KeyOrigin, SecretError, SecretStore, Tokens, passphrase};
use crate::sys;
use crate::transport::Connector;

/// Why `start` ends before serving: the message and the exit status.
struct Refusal {
    message: String,
    code: u8,
}

impl Refusal {
    /// A preflight failure: `Preflight failed: <reason>`, exit 78.
    fn preflight(reason: impl std::fmt::Display) -> Refusal {
        Refusal {
            message: format!("Preflight failed: {reason}"),
            code: exit::EX_CONFIG,
        }
    }

    /// A secret-store failure: 78 unless it is a bug (70).
    fn secrets(error: &SecretError) -> Refusal {
        let mut refusal = Refusal::preflight(error);
        if error.class() == ErrorClass::Internal {
            refusal.code = exit::EX_SOFTWARE;
        }
        refusal
    }
}

/// What `start` runs, decided before anything is written.
enum Daemon {
    /// One data connection for this session, jailed to this root.
    Legacy { session_id: String, jail: Arc<Jail> },
    /// The control connection and per-chat children.
    Control,
}

/// Legacy mode's root as step 2 leaves it: pinned, or the missing default
/// root, created only once the daemon knows it can run (after the secret
/// store, the audit log and the tokens).
enum LegacyRoot {
    Pinned(Arc<Jail>),
    Deferred,
}

/// Runs `start` and returns its exit status.
pub fn run(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    // Blocked before any thread exists (the keychain's D-Bus client and the
    // audit writer start threads), so every thread inherits the mask and
    // only the signal thread ever takes SIGINT/SIGTERM.
    let signals = match sys::block_termination_signals() {
        Ok(signals) => signals,
        Err(e) => {
            say!(stderr, "{PROGRAM}: cannot block termination signals: {e}");
            return exit::EX_SOFTWARE;
        }
    };
    let umask = read_umask();
    // The command spawner's launch (a process moved into a cgroup, which
    // waits for the kernel) overlaps steps 1 to 7; from step 8 on it is
    // watched. Every early return below drops it, which stops it.
    let spawner = std::env::current_exe().map(|exe| Spawner::launch_early(&exe));

    // Step 1: configuration.
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let env = Environment::from_process();
    let host_env = super::env_pairs(&env);
    let connector = match super::connector(&config, &env, stderr) {
        Ok(connector) => Arc::new(connector),
        Err(code) => return code,
    };
    let identity = match Identity::from_config(&config) {
        Ok(identity) => identity,
        Err(e) => return super::config_error(&e, stderr),
    };
    let log = Log::stderr(config.log_level);

    // The command sandbox, probed once: a requested sandbox that cannot be
    // had stops the shim here, unless the user chose to run without it.
    let sandbox = match CommandSandbox::decide(
        config.command_sandbox,
        config.command_network,
        config.command_sandbox_fallback,
        &std::env::current_exe().unwrap_or_default(),
    ) {
        Ok(sandbox) => sandbox,
        Err(reason) => {
            say!(stderr, "Preflight failed: {reason}");
            return exit::EX_CONFIG;
        }
    };
    let missing = sandbox.missing();
    if !missing.is_empty() {
        log.warn(
            "exec",
            format!(
                "command sandbox: {} UNAVAILABLE: commands run without it, as command_sandbox_fallback = \"unconfined\" allows",
                missing.join(" and ")
            ),
        );
    } else if sandbox != CommandSandbox::default() {
        log.info("exec", format!("command sandbox: {}", sandbox.describe()));
    }

    // The shim's own directories, placed once: no root may hold them and
    // no request may reach them, wherever they are moved later. Those the
    // shim creates while starting are pinned once it has (step 3).
    let protected = protected_locations(&config, &env);
    let own_files = own_files(&config, &env);
    let record_own_files = || {
        protected.record_files(own_files.iter().map(|(what, path)| (*what, path.as_path())));
    };
    record_own_files();

    // Step 2: the session root (legacy mode only, CLI.md §8).
    let wsl = config.host.platform == Some(Platform::Wsl2);
    let legacy = match &config.mode {
        Mode::Legacy { .. } => match roots::inspect_legacy_root(
            &config.allowed_root,
            config.allowed_root_is_default(),
            &config.paths.home,
            wsl,
        ) {
            Ok(Inspected::WouldCreate) => {
                // Only what can be judged without creating it, for now.
                if let Err(problem) =
                    roots::check_dangerous_for(&config.allowed_root, &config.paths.home, wsl)
                {
                    say!(stderr, "Preflight failed: {problem}");
                    return exit::EX_CONFIG;
                }
                Some(LegacyRoot::Deferred)
            }
            // Pinned now, or refused with the reason `legacy_root` gives.
            Ok(Inspected::Usable(_)) | Err(_) => {
                match legacy_root(&config, &protected, stdout, stderr) {
                    Ok(jail) => Some(LegacyRoot::Pinned(jail)),
                    Err(code) => return code,
                }
            }
        },
        Mode::Control => None,
    };
    let root_sent = match &legacy {
        Some(LegacyRoot::Pinned(jail)) => Some(jail.root().to_owned()),
        Some(LegacyRoot::Deferred) => Some(config.allowed_root.display().to_string()),
        None => None,
    };
    if let Err(message) = hello_fields(&config, &identity, root_sent.as_deref()) {
        say!(stderr, "Preflight failed: {message}");
        return exit::EX_CONFIG;
    }

    // Step 3: secret store, audit key, writer (and the persisted grant
    // revisions in control mode).
    let default_session = match &config.mode {
        Mode::Legacy { session_id } => Some(session_id.as_str()),
        Mode::Control => None,
    };
    let opened = match open_audit(&config, default_session, &env, &log, stderr) {
        Ok(opened) => opened,
        Err(refusal) => {
            say!(stderr, "{}", refusal.message);
            return refusal.code;
        }
    };
    let Opened {
        store,
        tokens,
        audit,
        thread: writer_thread,
        grant_key,
    } = opened;
    let finish = |code: u8| {
        writer_thread.join();
        code
    };
    let revisions = match &config.mode {
        Mode::Control => match Revisions::load(&config.paths.state_dir) {
            Ok(revisions) => Some(revisions),
            Err(e) => {
                say!(stderr, "Preflight failed: {e}");
                drop(audit);
                return finish(exit::EX_CONFIG);
            }
        },
        Mode::Legacy { .. } => None,
    };
    // Opening the store and the log may have created or replaced them.
    protected.pin_created();
    record_own_files();

    // Step 4: preflight checks.
    if config.enable_recording {
        return finish(refuse_recording(&config, audit, stderr));
    }

    // Step 5: SHIM_START.
    if let Err(e) = audit.write(Entry::event(
        "SHIM_START",
        Details::new().with("shim_version", json!(VERSION)),
    )) {
        say!(
            stderr,
            "Preflight failed: the initial SHIM_START record could not be written; the shim refuses to run without its mandatory audit log: {e}"
        );
        drop(audit);
        return finish(exit::EX_CONFIG);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let stop_written = Arc::new(AtomicBool::new(false));

    // Step 7 (before step 6, so that nothing says the daemon runs when it
    // cannot): without any token there is nothing to connect with.
    if tokens.access.is_none() && tokens.refresh.is_none() {
        say!(
            stderr,
            "Authentication failed: not authenticated; run autogpt-shim auth"
        );
        let code = stop_record(&audit, &stop_written, exit::EX_NOPERM, stderr);
        drop(audit);
        return finish(code);
    }

    // The default legacy root is created now that everything else holds.
    let daemon = match (&config.mode, legacy) {
        (Mode::Legacy { session_id }, Some(root)) => {
            let jail = match root {
                LegacyRoot::Pinned(jail) => Ok(jail),
                LegacyRoot::Deferred => legacy_root(&config, &protected, stdout, stderr),
            };
            match jail {
                Ok(jail) => Daemon::Legacy {
                    session_id: session_id.clone(),
                    jail,
                },
                Err(code) => {
                    let code = stop_record(&audit, &stop_written, code, stderr);
                    drop(audit);
                    return finish(code);
                }
            }
        }
        _ => Daemon::Control,
    };
    let announcement = announcement(&config, &identity, &daemon);
    let settings = running_settings(&config, &identity, &daemon, &sandbox);

    // Step 8.
    let code = match Running::start(RunningParts {
        config: &config,
        daemon,
        connector: Arc::clone(&connector),
        credentials: Arc::new(StoredCredentials::new(
            store,
            tokens.access.as_ref(),
            TokenEndpoint {
                connector: Arc::clone(&connector),
                url: config.endpoints.token().to_owned(),
                client_id: config.oauth_client_id.clone(),
            },
        )),
        identity,
        host_env,
        umask,
        audit: audit.clone(),
        grant_key,
        revisions,
        protected,
        sandbox,
        spawner,
        log: &log,
        stop: &stop,
    }) {
        Ok(running) => {
            if let Err(e) =
                start_signal_thread(signals, Arc::clone(&stop), Arc::clone(&stop_written), &log)
            {
                say!(stderr, "{PROGRAM}: cannot start the signal thread: {e}");
                stop.store(true, Ordering::SeqCst);
            }
            // For `status`; the daemon runs without it if it cannot be written.
            let runtime_file = RuntimeFile::write(&config.paths.state_dir, &settings)
                .map_err(|e| log.warn("daemon", format!("status will not show the settings: {e}")))
                .ok();
            // Step 6: what runs, now that it does.
            let _ = stdout.write_all(announcement.as_bytes());
            let _ = stdout.flush();
            let outcome = running.run();
            drop(runtime_file);
            // Step 9.
            conclude(outcome, &audit, &stop_written, &log, stdout, stderr)
        }
        Err(message) => {
            say!(stderr, "Preflight failed: {message}");
            stop_record(&audit, &stop_written, exit::EX_CONFIG, stderr)
        }
    };
    drop(audit);
    finish(code)
}

/// The directories of the configuration file, the state, the audit log,
/// `tokens.enc`, the data (the legacy audit key, the daemon's logs) and the
/// passphrase file (or systemd credential) the passphrase is read from, as
/// configured or by per-OS default.
pub(super) fn protected_locations(config: &Config, env: &Environment) -> ProtectedLocations {
    let paths = &config.paths;
    let parent = |file: &std::path::Path| file.parent().map(std::path::Path::to_owned);
    let passphrase = passphrase::source_file(env);
    let locations = [
        ("configuration directory", parent(&config.config_file)),
        ("state directory", Some(paths.state_dir.clone())),
        ("audit log directory", parent(&config.audit_log_path)),
        (
            "secret store directory",
            Some(paths.secret_store_dir.clone()),
        ),
        ("data directory", parent(&paths.legacy_audit_key_file)),
        ("daemon log directory", Some(paths.daemon_log_dir.clone())),
        (
            "passphrase file directory",
            passphrase.as_deref().and_then(parent),
        ),
    ];
    ProtectedLocations::resolve(
        locations
            .iter()
            .filter_map(|(what, dir)| dir.as_deref().map(|dir| (*what, dir))),
        &paths.home,
    )
}

/// The shim's own files, whose identities are recorded at start so that a
/// hard link to one below a root is refused like the file itself.
fn own_files(config: &Config, env: &Environment) -> Vec<(&'static str, std::path::PathBuf)> {
    let paths = &config.paths;
    let mut files = vec![
        ("token store", paths.tokens_file()),
        ("configuration file", config.config_file.clone()),
        ("audit log", config.audit_log_path.clone()),
        (
            "audit log anchor",
            crate::audit::verify::anchor_path(&config.audit_log_path),
        ),
        (
            "grant revision file",
            paths
                .state_dir
                .join(crate::control::bindings::REVISIONS_FILE),
        ),
        ("legacy audit key file", paths.legacy_audit_key_file.clone()),
    ];
    if let Some(file) = passphrase::source_file(env) {
        files.push(("passphrase file", file));
    }
    files
}

/// The values this daemon's `HELLO` would carry, judged by the platform's
/// rules before anything connects: a value the platform refuses would only
/// ever be closed with 4400, so it is a configuration error.
fn hello_fields(config: &Config, identity: &Identity, root: Option<&str>) -> Result<(), String> {
    let Some(field) =
        hello_rules::first_refused(&identity.machine_id, &identity.display_name, root)
    else {
        return Ok(());
    };
    let origin = match field {
        HelloField::MachineId if config.configured_machine_id.is_none() => {
            " (it was detected on this machine; set machine_id in the configuration)"
        }
        HelloField::AllowedRoot => " (the session root as sent to the platform)",
        _ => "",
    };
    Err(format!(
        "invalid {key}{origin}: it {rule}; the platform refuses a connection otherwise",
        key = field.key(),
        rule = field.rule()
    ))
}

/// Step 6's lines: what runs and how to stop it (CLI.md §4.2), printed once
/// the daemon runs.
fn announcement(config: &Config, identity: &Identity, daemon: &Daemon) -> String {
    let mut text = format!(
        "Starting shim daemon (machine_id={})\n",
        identity.machine_id
    );
    match daemon {
        Daemon::Legacy { session_id, jail } => {
            text += &format!("Legacy direct session: {session_id}\n");
            text += &format!("Allowed root: {}\n", jail.root());
        }
        Daemon::Control => {
            text += "Mode: persistent machine control (folders are selected per chat)\n";
        }
    }
    if config.enable_shell {
        text += "WARNING: shell commands are enabled; they can access everything your user account can.\n";
    }
    text + "Press Ctrl+C to stop.\n"
}

/// What `status` shows of this daemon (the runtime file).
fn running_settings(
    config: &Config,
    identity: &Identity,
    daemon: &Daemon,
    sandbox: &CommandSandbox,
) -> RunningSettings {
    let (session_id, allowed_root, kind) = match daemon {
        Daemon::Legacy { session_id, jail } => (
            Some(session_id.clone()),
            Some(jail.root().to_owned()),
            ConnectionKind::Data {
                session_id: session_id.clone(),
            },
        ),
        Daemon::Control => (None, None, ConnectionKind::Control),
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    RunningSettings {
        pid: std::process::id(),
        version: VERSION.to_owned(),
        started_unix: started,
        session_id,
        allowed_root,
        platform_url: config.platform_url.clone(),
        machine_id: identity.machine_id.clone(),
        enable_shell: config.enable_shell,
        capabilities: advertised_capabilities(&Gates::from_config(config), &kind)
            .into_iter()
            .map(|c| c.as_str().to_owned())
            .collect(),
        config_file: config.config_file.display().to_string(),
        audit_log: config.audit_log_path.display().to_string(),
        command_sandbox: sandbox.describe(),
        command_rules: config.command_policy.describe(),
    }
}

/// CLI.md §8 for the configured root, then pinned.
fn legacy_root(
    config: &Config,
    protected: &ProtectedLocations,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<Arc<Jail>, u8> {
    let prepared = roots::prepare_legacy_root(
        &config.allowed_root,
        config.allowed_root_is_default(),
        &config.paths.home,
        config.host.platform == Some(Platform::Wsl2),
    )
    .and_then(|root| {
        protected
            .check_root(&root.path)
            .map_err(roots::RootProblem::Protected)?;
        Ok(root)
    });
    let root = match prepared {
        Ok(root) => root,
        Err(problem) => {
            say!(stderr, "Preflight failed: {problem}");
            return Err(exit::EX_CONFIG);
        }
    };
    if root.created {
        say!(stdout, "Created allowed_root {}", root.path.display());
    }
    match Jail::pin(&root.path, jail_options(config, protected)) {
        Ok(jail) => Ok(Arc::new(jail)),
        Err(e) => {
            say!(stderr, "Preflight failed: {e}");
            Err(exit::EX_CONFIG)
        }
    }
}

fn jail_options(config: &Config, protected: &ProtectedLocations) -> JailOptions {
    JailOptions {
        no_xdev: config.jail_no_xdev,
        protected: protected.clone(),
        ..JailOptions::default()
    }
}

/// What step 8 is built from.
struct RunningParts<'a> {
    config: &'a Config,
    daemon: Daemon,
    connector: Arc<Connector>,
    credentials: Arc<StoredCredentials>,
    identity: Identity,
    host_env: Vec<(OsString, OsString)>,
    umask: rustix::fs::Mode,
    audit: AuditLog,
    grant_key: GrantKey,
    revisions: Option<Revisions>,
    protected: ProtectedLocations,
    sandbox: CommandSandbox,
    /// The command spawner, launched early.
    spawner: std::io::Result<Launching>,
    log: &'a Log,
    stop: &'a Arc<AtomicBool>,
}

/// The running daemon: the runtime of its one connection, and in control
/// mode the control plane with its children and idle reaper.
struct Running {
    session: Session,
    /// The connection's own workers: in control mode the control requests
    /// never wait behind (or hold up) the children's work, which runs on
    /// the shared pool.
    pool: Arc<WorkerThreads>,
    control: Option<Arc<ControlPlane>>,
    reaper: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// The approval socket, when a rule can say `ask`; removed when the
    /// daemon ends.
    approvals: Option<ApprovalSocket>,
}

impl Running {
    fn start(parts: RunningParts<'_>) -> Result<Running, String> {
        let RunningParts {
            config,
            daemon,
            connector,
            credentials,
            identity,
            host_env,
            umask,
            audit,
            grant_key,
            revisions,
            protected,
            sandbox,
            spawner,
            log,
            stop,
        } = parts;
        let spawner = spawner
            .and_then(|launching| launching.watch(Some(spawner_death_hook(&audit, log))))
            .map(Arc::new)
            .map_err(|e| format!("cannot start the command spawner: {e}"))?;
        let (rules, approvals) = command_rules(config, &host_env, log)?;
        if approvals.is_some() && sandbox.net != crate::exec::NetSandbox::Namespace {
            log.warn(
                "exec",
                "command rules can ask for approval, but commands have the network \
                 (command_network = \"allow\"): a command could reach another service of \
                 this user and have it answer; set command_network = \"none\" to close that",
            );
        }
        let containment = format!("command containment: {}", spawner.containment());
        if spawner.containment().mechanism() == Mechanism::Uncontained {
            log.warn("exec", containment);
        } else {
            log.info("exec", containment);
        }
        // Rotated audit file names are in local time: say once where it
        // comes from, loudly when the zone could not be loaded.
        let zone = crate::timefmt::local_zone();
        if zone.is_utc_fallback() {
            log.warn("daemon", format!("local time: {}", zone.source()));
        } else {
            log.debug("daemon", format!("local time: {}", zone.source()));
        }
        // Workers build and free frames of up to 16 MiB on many threads.
        sys::tune_allocator();
        let pool = WorkerThreads::new(WORKERS)
            .map(Arc::new)
            .map_err(|e| format!("cannot start the worker pool: {e}"))?;
        // Control requests may wait for a child to stop, and a child's
        // teardown waits for its own requests: they must not share workers.
        let control_pool = match &daemon {
            Daemon::Control => WorkerThreads::new(WORKERS)
                .map(Arc::new)
                .map_err(|e| format!("cannot start the control workers: {e}"))?,
            Daemon::Legacy { .. } => Arc::clone(&pool),
        };
        let host_env = Arc::new(host_env);
        let commands: Arc<dyn CommandGate + Send> = Arc::new(MachineLimits::new(
            MachineLimitSettings::from_config(config),
        ));
        let gates = Gates::from_config(config);
        let optional = Optional {
            gates,
            desktop: config
                .enable_computer_use
                .then(|| Arc::new(Desktop::new(desktop_settings(config, &host_env)))),
            llm: config
                .enable_local_llm
                .then(|| Arc::new(LocalLlm::new(true, &config.ollama_url))),
            hardware: config.enable_hardware.then(Roots::system),
        };
        let ceilings = Limits::from_config(config);
        let backoff = Backoff {
            base: config.reconnect_base_delay,
            max_delay: config.reconnect_max_delay,
            jitter: config.reconnect_jitter_seconds,
        };
        let data_plane: DataPlaneFactory = {
            let shell_enabled = config.enable_shell;
            let refuse_multilink_reads = config.refuse_multilink_reads;
            let rules = Arc::clone(&rules);
            Arc::new(move |session_id, jail| DataPlane {
                jail,
                spawner: Arc::clone(&spawner),
                host_env: Arc::clone(&host_env),
                commands: Arc::clone(&commands),
                shell_enabled,
                refuse_multilink_reads,
                umask,
                sandbox,
                rules: Arc::clone(&rules),
                session_id: session_id.to_owned(),
            })
        };
        let (url, plane, control): (String, Arc<dyn Plane>, _) = match daemon {
            Daemon::Legacy { session_id, jail } => (
                config.endpoints.session_url(&session_id),
                Arc::new(DataSession {
                    data: data_plane(&session_id, jail),
                    session_id,
                    activity: None,
                    machine_pool: None,
                    machine_bytes: None,
                }),
                None,
            ),
            Daemon::Control => {
                let machine_pool = Arc::new(MachineWorkPool::new(ceilings.max_concurrent));
                let template = ChildTemplate {
                    endpoints: config.endpoints.clone(),
                    connector: Arc::clone(&connector),
                    credentials: credentials.clone(),
                    identity: identity.clone(),
                    optional: optional.clone(),
                    backoff,
                    audit: audit.clone(),
                    log: log.clone(),
                    audit_path: config.audit_log_path.clone(),
                    data_plane: Arc::clone(&data_plane),
                    jail_options: jail_options(config, &protected),
                };
                let children = Children::new(
                    template,
                    Arc::clone(&pool),
                    Arc::clone(&machine_pool),
                    Arc::clone(stop),
                );
                let settings = ControlSettings {
                    grant_key,
                    machine_id: identity.machine_id.clone(),
                    home: config.paths.home.clone(),
                    wsl: config.host.platform == Some(Platform::Wsl2),
                    audit: audit.clone(),
                    revisions: revisions.ok_or("the grant revisions were not loaded")?,
                    log: log.clone(),
                    ceilings,
                    protected: protected.clone(),
                };
                let control = Arc::new(ControlPlane::new(settings, children, machine_pool));
                (
                    config.endpoints.control_url().to_owned(),
                    Arc::clone(&control) as Arc<dyn Plane>,
                    Some(control),
                )
            }
        };
        let reaper = match &control {
            Some(control) => Some(
                control
                    .spawn_reaper(REAP_INTERVAL, IDLE_AFTER, Arc::clone(stop))
                    .map_err(|e| format!("cannot start the idle reaper: {e}"))?,
            ),
            None => None,
        };
        let session = Session {
            url,
            connector,
            credentials,
            identity,
            optional,
            ceilings,
            backoff,
            audit: AuditSink::Log(audit),
            log: log.clone(),
            stop: Arc::clone(stop),
            audit_path: config.audit_log_path.clone(),
            plane,
        };
        Ok(Running {
            session,
            pool: control_pool,
            control,
            reaper,
            stop: Arc::clone(stop),
            approvals,
        })
    }

    /// Runs until the end; every child is stopped before it returns.
    fn run(self) -> RuntimeEnd {
        let outcome = runtime::run(&self.session, &self.pool);
        drop(self.approvals);
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reaper) = self.reaper {
            let _ = reaper.join();
        }
        let mut outcome = outcome;
        if let Some(control) = &self.control {
            control.children().stop_all();
            // A child's daemon-wide failure decides the exit, whatever the
            // control runtime saw while it stopped.
            if let Some(fatal) = control.children().fatal() {
                outcome = fatal;
            }
        }
        outcome
    }
}

/// The local command rules, and when one can say `ask` the approval
/// registry with its socket in the state directory (a daemon that could
/// not be asked would refuse every such command, so it does not start).
fn command_rules(
    config: &Config,
    host_env: &[(OsString, OsString)],
    log: &Log,
) -> Result<(Arc<CommandRules>, Option<ApprovalSocket>), String> {
    let policy = config.command_policy.clone();
    let timeout = Duration::from_secs(config.approval_timeout_seconds);
    if !policy.can_ask() {
        if policy.is_active() {
            log.info("exec", "local command rules in force");
        }
        return Ok((
            Arc::new(CommandRules {
                policy,
                approver: None,
                approval_timeout: timeout,
            }),
            None,
        ));
    }
    let approvals = Arc::new(Approvals::new(notifier(host_env)));
    let socket = ApprovalSocket::start(Arc::clone(&approvals), &config.paths.state_dir)?;
    log.info(
        "exec",
        format!(
            "local command rules in force; commands they ask about wait up to {} s for `autogpt-shim approve`",
            timeout.as_secs()
        ),
    );
    let approver: Arc<dyn crate::exec::Approver> = approvals;
    Ok((
        Arc::new(CommandRules {
            policy,
            approver: Some(approver),
            approval_timeout: timeout,
        }),
        Some(socket),
    ))
}

/// `notify-send` on the shim's `PATH`, with the variables that reach the
/// desktop, when the shim runs in a desktop session.
fn notifier(
    host_env: &[(OsString, OsString)],
) -> Option<(std::path::PathBuf, Vec<(String, String)>)> {
    let var = |name: &str| {
        host_env
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.to_str())
            .map(str::to_owned)
    };
    let reach: Vec<(String, String)> = [
        "DBUS_SESSION_BUS_ADDRESS",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "XDG_RUNTIME_DIR",
    ]
    .into_iter()
    .filter_map(|name| var(name).map(|v| (name.to_owned(), v)))
    .collect();
    if !reach.iter().any(|(n, _)| n == "DBUS_SESSION_BUS_ADDRESS") {
        return None;
    }
    let path = host_env
        .iter()
        .find(|(n, _)| n == "PATH")
        .map(|(_, v)| v.as_os_str());
    let program = crate::exec::which("notify-send", path)?;
    Some((program, reach))
}

/// Audits and logs an unexpected death of the command spawner (EXEC.md
/// §11 as amended): `SPAWNER_DIED` with the dead spawner's pid, how many
/// commands were killed with it, what contained them and the pid of its
/// replacement (null when none could be started); its exit status is the
/// record's `exit_code`.
fn spawner_death_hook(audit: &AuditLog, log: &Log) -> DeathHook {
    let audit = audit.clone();
    let log = log.clone();
    Box::new(move |death: &Death| {
        let replaced = match &death.replacement {
            Ok(pid) => format!("a new spawner {pid} runs", pid = pid.as_raw_nonzero()),
            Err(why) => format!("no new spawner could be started ({why})"),
        };
        log.warn(
            "exec",
            format!(
                "the command spawner {} died (status {}); its {} running command(s) and everything they started were killed; {replaced}",
                death.pid.as_raw_nonzero(),
                death.exit_code,
                death.commands,
            ),
        );
        let new_pid = death
            .replacement
            .as_ref()
            .map_or(serde_json::Value::Null, |pid| {
                json!(pid.as_raw_nonzero().get())
            });
        let entry = Entry {
            op: "SPAWNER_DIED".into(),
            request_id: None,
            details: Details::new()
                .with("pid", json!(death.pid.as_raw_nonzero().get()))
                .with("commands_killed", json!(death.commands))
                .with("containment", json!(death.mechanism.as_str()))
                .with("new_pid", new_pid),
            result: Outcome {
                ok: false,
                exit_code: Some(death.exit_code),
                duration_ms: 0,
                error_code: None,
            },
            session_id: None,
        };
        // A failed write has already marked the log unhealthy: the
        // runtime stops on it (AUDIT.md §8.3).
        let _ = audit.write(entry);
    })
}

/// Step 9: the last record and the exit status (CLI.md §4.2).
fn conclude(
    outcome: RuntimeEnd,
    audit: &AuditLog,
    stop_written: &AtomicBool,
    log: &Log,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    if !audit.is_healthy() {
        let why = audit
            .failure()
            .unwrap_or_else(|| "an audit record could not be written".into());
        say!(
            stderr,
            "{PROGRAM}: stopping: the audit log failed ({why}); the shim refuses to run without its mandatory audit log"
        );
        return exit::EX_CONFIG;
    }
    match outcome {
        RuntimeEnd::Stopped => {
            let code = stop_record(audit, stop_written, exit::SUCCESS, stderr);
            if code == exit::SUCCESS {
                say!(stdout, "Shim stopped.");
            }
            code
        }
        RuntimeEnd::Terminal(reason) => {
            log.warn("daemon", format!("not reconnecting: {reason}"));
            stop_record(audit, stop_written, exit::SUCCESS, stderr)
        }
        RuntimeEnd::AuthFailed(reason) | RuntimeEnd::CredentialsRefused(reason) => {
            say!(stderr, "Authentication failed: {reason}");
            stop_record(audit, stop_written, exit::EX_NOPERM, stderr)
        }
        RuntimeEnd::Config(reason) => {
            say!(stderr, "Preflight failed: {reason}");
            stop_record(audit, stop_written, exit::EX_CONFIG, stderr)
        }
        RuntimeEnd::Refused(refusal) => {
            say!(
                stderr,
                "{PROGRAM}: stopping after {} refused attempts: {refusal}",
                REFUSAL_RETRIES + 1
            );
            stop_record(audit, stop_written, refusal_exit(refusal.kind), stderr)
        }
        RuntimeEnd::AuditFailed => {
            say!(
                stderr,
                "{PROGRAM}: stopping: an audit record could not be written; the shim refuses to run without its mandatory audit log"
            );
            exit::EX_CONFIG
        }
    }
}

/// The exit status after the platform refused every attempt. An invalid
/// HELLO (4400) is `EX_CONFIG`: everything HELLO carries comes from the
/// configuration and this machine, so only a change there (or a newer
/// shim) can help. A session not bound to this machine, or a feature off
/// for the account (403, 4403), is `EX_NOPERM`, like the other refusals of
/// the platform to let this machine in. Autostart units restart on
/// neither, so a refusal is never retried forever.
fn refusal_exit(kind: RefusalKind) -> u8 {
    match kind {
        RefusalKind::InvalidHello => exit::EX_CONFIG,
        RefusalKind::Forbidden | RefusalKind::BindingMismatch => exit::EX_NOPERM,
    }
}

/// Writes `SHIM_STOP` and returns `code`, or 78 when the record cannot be
/// written (AUDIT.md §8.3); nothing is attempted after an earlier failure.
fn stop_record(audit: &AuditLog, written: &AtomicBool, code: u8, stderr: &mut dyn Write) -> u8 {
    if !audit.is_healthy() {
        let why = audit.failure().unwrap_or_default();
        say!(
            stderr,
            "{PROGRAM}: the audit log failed ({why}); SHIM_STOP was not written"
        );
        return exit::EX_CONFIG;
    }
    match audit.write(Entry::event(
        "SHIM_STOP",
        Details::new().with("reason", json!("graceful")),
    )) {
        Ok(_) => {
            written.store(true, Ordering::SeqCst);
            code
        }
        Err(e) => {
            say!(
                stderr,
                "{PROGRAM}: the SHIM_STOP record could not be written: {e}"
            );
            exit::EX_CONFIG
        }
    }
}

/// What step 3 opened.
struct Opened {
    store: SecretStore,
    tokens: Tokens,
    audit: AuditLog,
    thread: WriterThread,
    /// Derived before the key went to the writer.
    grant_key: GrantKey,
}

/// Step 3: the store, the key and the writer. Nothing is written here.
fn open_audit(
    config: &Config,
    default_session: Option<&str>,
    env: &Environment,
    log: &Log,
    stderr: &mut dyn Write,
) -> Result<Opened, Refusal> {
    let store =
        super::select_store_asking(config, env, log, stderr).map_err(|e| Refusal::secrets(&e))?;
    let mut check = super::legacy_key_check(&config.audit_log_path);
    let (key, origin, tokens) = store
        .secrets_for_start(&mut check)
        .map_err(|e| Refusal::secrets(&e))?;
    let machine_id = config.machine_id().map_err(Refusal::preflight)?.to_owned();
    let mut options = WriterOptions::new(config.audit_log_path.clone(), VERSION);
    options.machine_id = Some(machine_id);
    options.default_session = default_session.map(str::to_owned);
    options.own_directory = config.audit_log_is_default();
    if origin == KeyOrigin::Created {
        // A new key cannot verify an existing chain: that file is closed off
        // under its own name first (AUDIT.md §7.2).
        options.rotate_on_open = Some(RotateReason::KeyChange);
    }
    let warn_log = log.clone();
    options.warn = Arc::new(move |text: &str| warn_log.warn("audit", text));
    let grant_key = GrantKey::derive(&key);
    let (audit, thread) = AuditLog::open(options, key).map_err(|e| {
        Refusal::preflight(format!(
            "the shim refuses to run without its mandatory audit log: {e}"
        ))
    })?;
    if let Some(rotated) = audit.rotated_at_open() {
        log.warn(
            "audit",
            format!(
                "the previous audit log was closed off as {}",
                rotated.display()
            ),
        );
    }
    Ok(Opened {
        store,
        tokens,
        audit,
        thread,
        grant_key,
    })
}

/// The recording preview always refuses to start (CLI.md §4.2 step 4).
fn refuse_recording(config: &Config, audit: AuditLog, stderr: &mut dyn Write) -> u8 {
    let platform = config
        .host
        .platform()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|_| config.host.os_name.clone());
    let hint = "Workflow recording is a design preview; remove enable_recording (or --enable-recording) to start the shim.";
    let entry = Entry {
        op: "DAEMON_PREFLIGHT_FAILED".into(),
        request_id: Some(fresh_id()),
        details: Details::new()
            .with("missing_permissions", json!(["recording_preview_disabled"]))
            .with("platform", json!(platform))
            .with("hint", json!(hint)),
        result: Outcome {
            ok: false,
            exit_code: Some(i64::from(exit::EX_CONFIG)),
            duration_ms: 0,
            error_code: Some("CAPABILITY_NOT_GRANTED".into()),
        },
        session_id: None,
    };
    let written = audit.write(entry);
    say!(
        stderr,
        "Preflight failed: workflow recording is a design preview; capture and interpretation are incomplete, so the shim does not start with enable_recording set."
    );
    if let Err(e) = written {
        say!(
            stderr,
            "{PROGRAM}: the DAEMON_PREFLIGHT_FAILED record could not be written either: {e}"
        );
    }
    exit::EX_CONFIG
}

/// The first SIGINT/SIGTERM asks the runtime to stop; a second one during
/// shutdown exits at once (0 if `SHIM_STOP` is already durable, else 1).
fn start_signal_thread(
    signals: sys::SignalSet,
    stop: Arc<AtomicBool>,
    stop_written: Arc<AtomicBool>,
    log: &Log,
) -> std::io::Result<()> {
    let log = log.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            // Its own record of signals: a stop raised by a failure elsewhere
            // must not turn the user's first Ctrl+C into the second.
            let mut signalled = false;
            loop {
                let Ok(signal) = sys::wait_for_termination_signal(&signals) else {
                    return;
                };
                if !signalled {
                    signalled = true;
                    stop.store(true, Ordering::SeqCst);
                    log.info(
                        "daemon",
                        format!("signal {signal} received: stopping (send it again to exit now)"),
                    );
                    continue;
                }
                let code = if stop_written.load(Ordering::SeqCst) {
                    exit::SUCCESS
                } else {
                    exit::NEGATIVE_RESULT
                };
                // Commands die with the spawner, which sees this process go.
                std::process::exit(i32::from(code));
            }
        })
        .map(|_| ())
}

/// The process umask, which new files are created under. Read by setting
/// and restoring it while this is the only thread.
fn read_umask() -> rustix::fs::Mode {
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    rustix::process::umask(old);
    old
}

/// The desktop's settings: the switches, the mask rules, and the session
/// facts (display, Wayland) of the environment the daemon started in.
fn desktop_settings(
    config: &Config,
    host_env: &Arc<Vec<(OsString, OsString)>>,
) -> desktop::Settings {
    let (display, wayland) = desktop::Settings::session_from_env(host_env);
    desktop::Settings {
        enabled: config.enable_computer_use,
        clipboard: config.enable_clipboard,
        clipboard_read_foreign: config.enable_clipboard_read_foreign,
        mask: config.screenshot_mask.clone(),
        wsl: config.host.platform == Some(Platform::Wsl2),
        display,
        wayland,
        home: config.paths.home.clone(),
        launch_env: Arc::clone(host_env),
    }
}
