//! The effective configuration (CLI.md §5): every key of §5.2 typed and
//! validated, plus what derives from it — mode, endpoints, per-OS paths,
//! platform facts, machine id.
//!
//! Sources, highest precedence first: command-line flags ([`Overrides`]),
//! `config.toml`, `AUTOGPT_SHIM_*` environment variables, built-in defaults.
//! The environment, working directory and host facts are injected through a
//! [`Context`], so loading is hermetic under test.
//!
//! This module must never hold a secret (tokens, keys and passphrases belong
//! to the secret store), never print (warnings are returned as data), never
//! create directories or files except the machine-id fallback file of
//! PROTOCOL.md §4.2.1, and never hand out a half-validated config: a built
//! [`Config`] is immutable and every value in it has passed its constraint.

/// The autostart entries (`install`): their text and the service manager.
pub mod autostart;
mod env;
mod error;
mod file;
mod layers;
mod machine_id;
mod paths;
mod platform;
mod urls;

use std::fmt;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The process environment, captured once, and the `AUTOGPT_SHIM_*`
/// variables read from it.
pub use env::{Environment, Variable, VariableRole, variables as environment_variables};
/// What can be wrong with a configuration, and where a value came from.
pub use error::{ConfigError, ConfigWarning, Source};
pub(crate) use file::{SmallFileError, read_small_file, replace_file};
/// The command-line flags, the highest layer.
pub use layers::Overrides;
/// The machine id and the OS outputs it is read from.
pub use machine_id::{
    MachineIdSources, detect as detect_machine_id, existing as existing_machine_id,
    format_linux_machine_id, linux_machine_id, new_uuid_v4, parse_ioreg_output,
    parse_reg_query_output,
};
/// The per-OS paths.
pub use paths::{APP_DIR, OsPaths};
/// The platform facts sent in `HELLO`.
pub use platform::{Arch, Host, Platform, linux_flavour, normalize_arch};
/// The endpoint URLs and their scheme and host rules.
pub use urls::{
    Endpoints, OAUTH_SCHEMES, PLATFORM_SCHEMES, UrlParts, UrlProblem, WS_SCHEMES,
    check_platform_url, http_ify, is_loopback_host, pct_encode, split_url, ws_ify,
};

use layers::{Layers, Setting};
use paths::PathProblem;

/// Default `platform_url`.
pub const DEFAULT_PLATFORM_URL: &str = "wss://platform.autogpt.net";
/// Default `oauth_client_id`.
pub const DEFAULT_OAUTH_CLIENT_ID: &str = "autogpt-local-executor";
/// The first callback port the platform registration accepts; the range is
/// this port and the eleven after it (AUTH.md §12).
pub const REGISTERED_REDIRECT_PORT: u16 = 41899;
/// How many consecutive callback ports are tried.
pub const REDIRECT_PORT_COUNT: u16 = 12;
/// Upper bound for the reconnect delays: anything longer than a day is a
/// typo, and bounded values convert to `Duration` without overflow.
pub const MAX_RECONNECT_SECONDS: f64 = 86_400.0;
use crate::protocol::HelloField;
/// The lower bound for the reconnect delays.
pub use crate::protocol::backpressure::MIN_RECONNECT_SECONDS;
/// The longest `display_name` `HELLO` may carry.
pub use crate::protocol::hello_rules::MAX_DISPLAY_NAME_CHARS;

/// The effective configuration. Cheap to clone (one reference count);
/// immutable once built. Fields are read through `Deref` to [`Settings`].
#[derive(Clone, Debug)]
pub struct Config(Arc<Settings>);

impl Deref for Config {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.0
    }
}

/// Every configuration key (CLI.md §5.2) in its typed, validated form, plus
/// the derived values. Paths are absolute (`~` expanded, relative paths
/// resolved once against the working directory) but not canonicalised.
#[derive(Debug)]
#[non_exhaustive]
pub struct Settings {
    /// The file that was consulted (it may not exist).
    pub config_file: PathBuf,
    /// `--log-level` (not a configuration key); `INFO` by default.
    pub log_level: LogLevel,

    /// `platform_url`: `https`, `wss`, `http` or `ws`; plain text only to
    /// loopback.
    pub platform_url: String,
    /// `platform_ws_url`: WebSocket base override (`wss`/`ws`).
    pub platform_ws_url: Option<String>,
    /// `platform_oauth_url`: authorize base override (`https`/`http`).
    pub platform_oauth_url: Option<String>,
    /// `oauth_client_id`; non-empty.
    pub oauth_client_id: String,
    /// `oauth_redirect_port`: first of 12 callback ports, 1024–65524.
    pub oauth_redirect_port: u16,
    /// `session_id` as the mode it selects.
    pub mode: Mode,
    /// `machine_id` when configured (used verbatim); see [`Config::machine_id`].
    pub configured_machine_id: Option<String>,
    /// `display_name`: 1–128 chars; the host name by default.
    pub display_name: String,
    /// `allowed_root`: the legacy-mode jail root (CLI.md §8 checks it later).
    pub allowed_root: PathBuf,
    /// `audit_log_path`: the current audit log file.
    pub audit_log_path: PathBuf,
    /// `enable_shell`.
    pub enable_shell: bool,
    /// `enable_computer_use`; a build without desktop support refuses to
    /// switch it on ([`unavailable_feature`]).
    pub enable_computer_use: bool,
    /// `enable_local_llm`.
    pub enable_local_llm: bool,
    /// `enable_hardware`: discovery of serial, USB and GPIO devices.
    pub enable_hardware: bool,
    /// `max_concurrent` (> 0): local ceiling of concurrent requests.
    pub max_concurrent: u32,
    /// `max_concurrent_commands` (> 0).
    pub max_concurrent_commands: u32,
    /// `command_timeout_seconds` (> 0): local ceiling.
    pub command_timeout_seconds: u64,
    /// `max_file_size_bytes` (> 0): local ceiling.
    pub max_file_size_bytes: u64,
    /// `max_commands_per_minute` (> 0).
    pub max_commands_per_minute: u32,
    /// `reconnect_base_delay`, seconds (finite, 0.05–86400).
    pub reconnect_base_delay: f64,
    /// `reconnect_max_delay`, seconds (finite, 0.05–86400).
    pub reconnect_max_delay: f64,
    /// `reconnect_jitter_seconds` (finite, 0–86400).
    pub reconnect_jitter_seconds: f64,
    /// `ollama_url` (`http`/`https`), trailing `/` removed.
    pub ollama_url: String,
    /// `max_screenshots_per_minute` (> 0).
    pub max_screenshots_per_minute: u32,
    /// `enable_clipboard`; a build without desktop support refuses to
    /// switch it on ([`unavailable_feature`]).
    pub enable_clipboard: bool,
    /// `enable_clipboard_read_foreign`; a build without desktop support
    /// refuses to switch it on ([`unavailable_feature`]).
    pub enable_clipboard_read_foreign: bool,
    /// `screenshot_mask`: windows and areas kept out of screenshots and
    /// out of reach of input, added to the built-in ones.
    pub screenshot_mask: crate::desktop::MaskRules,
    /// `enable_recording`: design preview; `start` refuses to run with it.
    pub enable_recording: bool,
    /// `recording_buffer_dir`; `<audit log dir>/recordings` by default.
    pub recording_buffer_dir: PathBuf,
    /// `recording_default_interpretation_route`.
    pub recording_default_interpretation_route: String,
    /// `recording_channels`.
    pub recording_channels: Vec<String>,
    /// `recording_retention_limit` (≥ 1).
    pub recording_retention_limit: u32,
    /// `jail_no_xdev` (JAIL.md §6.11).
    pub jail_no_xdev: bool,
    /// `refuse_multilink_reads` (JAIL.md §6.11).
    pub refuse_multilink_reads: bool,
    /// `command_sandbox`: the filesystem sandbox of commands.
    pub command_sandbox: crate::exec::SandboxMode,
    /// `command_network`: whether commands have the host's network.
    pub command_network: crate::exec::NetworkMode,
    /// `command_rule`, `command_default_action` and
    /// `command_shell_syntax_action`: the local command rules.
    pub command_policy: crate::exec::policy::Policy,
    /// `approval_timeout_seconds`: how long an `ask` waits for the user.
    pub approval_timeout_seconds: u64,
    /// `command_sandbox_fallback`: what a requested but unavailable
    /// sandbox does to `start`.
    pub command_sandbox_fallback: crate::exec::SandboxFallback,
    /// `tls_ca_file`: extra PEM trust anchors (PROTOCOL.md §1.2a). Its
    /// content is checked by the TLS layer when it loads it.
    pub tls_ca_file: Option<PathBuf>,
    /// `tls_pin_sha256`: SPKI SHA-256 pins; empty when unset.
    pub tls_pin_sha256: Vec<[u8; 32]>,

    /// The derived endpoint URLs.
    pub endpoints: Endpoints,
    /// The per-OS locations.
    pub paths: OsPaths,
    /// What the OS says about this machine.
    pub host: Host,

    detected_machine_id: OnceLock<String>,
}

impl Config {
    /// The session id in legacy mode; `None` in control mode.
    pub fn session_id(&self) -> Option<&str> {
        match &self.mode {
            Mode::Control => None,
            Mode::Legacy { session_id } => Some(session_id),
        }
    }

    /// Whether `allowed_root` is the per-OS default, the only root `start`
    /// may create (CLI.md §8 step 2).
    pub fn allowed_root_is_default(&self) -> bool {
        self.allowed_root == self.paths.default_allowed_root
    }

    /// Whether `audit_log_path` is the per-OS default, whose directory is
    /// the shim's own (AUDIT.md §1.3: only that one is tightened).
    pub fn audit_log_is_default(&self) -> bool {
        self.audit_log_path == self.paths.default_audit_log
    }

    /// The machine id (PROTOCOL.md §4.2.1): the configured value verbatim,
    /// else detected once (cached for every clone of this config). Detection
    /// may create `~/.autogpt-local-executor-machine-id`.
    pub fn machine_id(&self) -> Result<&str, ConfigError> {
        if let Some(id) = &self.configured_machine_id {
            return Ok(id);
        }
        if let Some(id) = self.detected_machine_id.get() {
            return Ok(id);
        }
        let sources = MachineIdSources::system(self.paths.machine_id_file(), &self.host.hostname);
        let id = machine_id::detect(&sources)?;
        Ok(self.detected_machine_id.get_or_init(|| id))
    }

    /// The machine id as [`machine_id`](Self::machine_id) finds it, without
    /// creating anything (`doctor`); `None` when one would be generated and
    /// stored first.
    pub fn existing_machine_id(&self) -> Option<String> {
        if let Some(id) = &self.configured_machine_id {
            return Some(id.clone());
        }
        if let Some(id) = self.detected_machine_id.get() {
            return Some(id.clone());
        }
        let sources = MachineIdSources::system(self.paths.machine_id_file(), &self.host.hostname);
        machine_id::existing(&sources)
    }
}

/// How the daemon runs (CLI.md §4.2, CONTROL.md §1/§16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Persistent control mode: no session id configured.
    Control,
    /// Legacy direct session: one data connection for this session.
    Legacy {
        /// Trimmed; matches `^[A-Za-z0-9][A-Za-z0-9._:-]{0,255}$`.
        session_id: String,
    },
}

/// The `--log-level` values (CLI.md §1.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `DEBUG`.
    Debug,
    /// `INFO`, the default.
    #[default]
    Info,
    /// `WARNING` (alias `WARN`).
    Warning,
    /// `ERROR`.
    Error,
    /// `CRITICAL`.
    Critical,
}

impl LogLevel {
    /// Every level, from the most verbose; their canonical names are what
    /// shell completion offers.
    pub const ALL: [LogLevel; 5] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
    ];

    /// Parses a level name, case-insensitively.
    pub fn parse(name: &str) -> Option<LogLevel> {
        match name.to_ascii_uppercase().as_str() {
            "DEBUG" => Some(LogLevel::Debug),
            "INFO" => Some(LogLevel::Info),
            "WARNING" | "WARN" => Some(LogLevel::Warning),
            "ERROR" => Some(LogLevel::Error),
            "CRITICAL" => Some(LogLevel::Critical),
            _ => None,
        }
    }

    /// The canonical upper-case name, as printed in log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warning => "WARNING",
            LogLevel::Error => "ERROR",
            LogLevel::Critical => "CRITICAL",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `id` matches the `SESSION_ID` format of PROTOCOL.md §2.2:
/// `^[A-Za-z0-9][A-Za-z0-9._:-]{0,255}$` against the whole value.
pub fn is_valid_session_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    match bytes.split_first() {
        Some((first, rest)) => {
            first.is_ascii_alphanumeric()
                && rest.len() <= 255
                && rest
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        }
        None => false,
    }
}

/// Parses `tls_pin_sha256`: comma-separated SHA-256 digests, each exactly 64
/// lower-case hex digits (surrounding spaces tolerated).
pub fn parse_pins(text: &str) -> Result<Vec<[u8; 32]>, &'static str> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            if item.len() != 64 || !item.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err("each pin must be exactly 64 lower-case hex digits (comma-separated)");
            }
            let mut pin = [0u8; 32];
            for (byte, pair) in pin.iter_mut().zip(item.as_bytes().chunks_exact(2)) {
                *byte = (hex_value(pair[0]) << 4) | hex_value(pair[1]);
            }
            Ok(pin)
        })
        .collect()
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => 0,
    }
}

/// What loading needs from the outside world.
#[derive(Clone, Debug)]
pub struct Context {
    /// The environment variables.
    pub env: Environment,
    /// The working directory, for relative paths; `None` if unknown.
    pub cwd: Option<PathBuf>,
    /// The host facts.
    pub host: Host,
}

impl Context {
    /// The real process environment, working directory and host.
    pub fn from_process() -> Context {
        Context {
            env: Environment::from_process(),
            cwd: std::env::current_dir().ok(),
            host: Host::detect(),
        }
    }
}

/// A loaded configuration and the warnings for the caller to print.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// One line each, meant for stderr.
    pub warnings: Vec<ConfigWarning>,
}

/// Loads the configuration from the real process environment.
pub fn load_from_process(overrides: &Overrides) -> Result<Loaded, ConfigError> {
    load(overrides, &Context::from_process())
}

/// Loads and validates the configuration: flags > file > environment >
/// defaults (CLI.md §5.3).
pub fn load(overrides: &Overrides, ctx: &Context) -> Result<Loaded, ConfigError> {
    let mut warnings = Vec::new();
    let paths = OsPaths::from_env(&ctx.env)?;
    let resolve = |key: &'static str, setting: &Setting<PathBuf>| {
        absolute_path(key, setting, &paths.home, ctx.cwd.as_deref())
    };

    let config_file = config_file_path(overrides, &paths, ctx.cwd.as_deref())?;
    let file_layer = file::read(&config_file, overrides.config_path.is_some(), &mut warnings)?;
    let env_layer = env::config_variables(&ctx.env, &mut warnings)?;
    let layers = Layers::new(overrides, file_layer, env_layer)?;

    let platform_url = layers.string("platform_url", DEFAULT_PLATFORM_URL)?;
    check_platform_url(&platform_url.value, PLATFORM_SCHEMES)
        .map_err(|problem| invalid("platform_url", &platform_url, problem))?;
    let platform_ws_url = optional_url(&layers, "platform_ws_url", WS_SCHEMES)?;
    let platform_oauth_url = optional_url(&layers, "platform_oauth_url", OAUTH_SCHEMES)?;

    let oauth_client_id = layers.string("oauth_client_id", DEFAULT_OAUTH_CLIENT_ID)?;
    if oauth_client_id.value.is_empty() {
        return Err(invalid(
            "oauth_client_id",
            &oauth_client_id,
            "must not be empty",
        ));
    }
    let oauth_redirect_port = redirect_port(&layers, &mut warnings)?;
    let mode = mode(&layers)?;
    let configured_machine_id = layers.optional_string("machine_id")?.value;

    let display_name = layers.string("display_name", &default_display_name(&ctx.host.hostname))?;
    if !HelloField::DisplayName.accepts(&display_name.value) {
        return Err(invalid(
            "display_name",
            &display_name,
            HelloField::DisplayName.rule(),
        ));
    }

    let allowed_root = match layers.path("allowed_root")? {
        Some(setting) => resolve("allowed_root", &setting)?,
        None => paths.default_allowed_root.clone(),
    };
    let audit_log_path = match layers.path("audit_log_path")? {
        Some(setting) => {
            let path = resolve("audit_log_path", &setting)?;
            if path.file_name().is_none() {
                return Err(invalid("audit_log_path", &setting, "must name a file"));
            }
            path
        }
        None => paths.default_audit_log.clone(),
    };
    let recording_buffer_dir = match layers.path("recording_buffer_dir")? {
        Some(setting) => resolve("recording_buffer_dir", &setting)?,
        None => audit_log_path
            .parent()
            .unwrap_or(Path::new("/"))
            .join("recordings"),
    };
    let tls_ca_file = match layers.path("tls_ca_file")? {
        Some(setting) if setting.value.as_os_str().is_empty() => None,
        Some(setting) => Some(resolve("tls_ca_file", &setting)?),
        None => None,
    };
    // An empty value never means "no pin": it leaves the pin to the next
    // source (`--tls-pin-sha256 ""` keeps the one in config.toml).
    let pins = layers.nonempty_string("tls_pin_sha256")?;
    let tls_pin_sha256 = match &pins.value {
        Some(text) => {
            parse_pins(text).map_err(|reason| invalid("tls_pin_sha256", &pins, reason))?
        }
        None => Vec::new(),
    };

    let ollama_url = layers.string("ollama_url", "http://localhost:11434")?;
    split_url(&ollama_url.value, OAUTH_SCHEMES)
        .map_err(|problem| invalid("ollama_url", &ollama_url, problem))?;

    let endpoints = Endpoints::derive(
        &platform_url.value,
        platform_oauth_url.as_deref(),
        platform_ws_url.as_deref(),
    );

    let settings = Settings {
        config_file,
        log_level: overrides.log_level.unwrap_or_default(),
        platform_url: platform_url.value,
        platform_ws_url,
        platform_oauth_url,
        oauth_client_id: oauth_client_id.value,
        oauth_redirect_port,
        mode,
        configured_machine_id,
        display_name: display_name.value,
        allowed_root,
        audit_log_path,
        enable_shell: switch(&layers, "enable_shell")?,
        enable_computer_use: switch(&layers, "enable_computer_use")?,
        enable_local_llm: switch(&layers, "enable_local_llm")?,
        enable_hardware: switch(&layers, "enable_hardware")?,
        max_concurrent: positive(&layers, "max_concurrent", 4)?,
        max_concurrent_commands: positive(&layers, "max_concurrent_commands", 10)?,
        command_timeout_seconds: positive(&layers, "command_timeout_seconds", 30)?,
        max_file_size_bytes: positive(&layers, "max_file_size_bytes", 10 * 1024 * 1024)?,
        max_commands_per_minute: positive(&layers, "max_commands_per_minute", 60)?,
        // The floor keeps a platform that drops every connection from
        // causing a reconnect storm; the jitter only adds to it.
        reconnect_base_delay: seconds(&layers, "reconnect_base_delay", 1.0, MIN_RECONNECT_SECONDS)?,
        reconnect_max_delay: seconds(&layers, "reconnect_max_delay", 60.0, MIN_RECONNECT_SECONDS)?,
        reconnect_jitter_seconds: seconds(&layers, "reconnect_jitter_seconds", 5.0, 0.0)?,
        ollama_url: ollama_url.value.trim_end_matches('/').to_owned(),
        max_screenshots_per_minute: positive(&layers, "max_screenshots_per_minute", 10)?,
        enable_clipboard: switch(&layers, "enable_clipboard")?,
        enable_clipboard_read_foreign: switch(&layers, "enable_clipboard_read_foreign")?,
        screenshot_mask: {
            let setting = layers.list("screenshot_mask", &[])?;
            crate::desktop::MaskRules::new(&setting.value)
                .map_err(|reason| invalid("screenshot_mask", &setting, reason))?
        },
        enable_recording: switch(&layers, "enable_recording")?,
        recording_buffer_dir,
        recording_default_interpretation_route: layers
            .string(
                "recording_default_interpretation_route",
                "extract_then_cloud",
            )?
            .value,
        recording_channels: layers.list("recording_channels", &["floor"])?.value,
        recording_retention_limit: positive(&layers, "recording_retention_limit", 10)?,
        jail_no_xdev: layers.bool("jail_no_xdev", false)?.value,
        refuse_multilink_reads: layers.bool("refuse_multilink_reads", false)?.value,
        command_sandbox: {
            let setting = layers.string("command_sandbox", "off")?;
            crate::exec::SandboxMode::parse(&setting.value).ok_or_else(|| {
                invalid(
                    "command_sandbox",
                    &setting,
                    "must be \"off\" or \"workspace\"",
                )
            })?
        },
        command_network: {
            let setting = layers.string("command_network", "allow")?;
            crate::exec::NetworkMode::parse(&setting.value).ok_or_else(|| {
                invalid("command_network", &setting, "must be \"allow\" or \"none\"")
            })?
        },
        command_policy: {
            let rules = layers.structured("command_rule")?;
            let default = layers.optional_string("command_default_action")?;
            let syntax = layers.optional_string("command_shell_syntax_action")?;
            crate::exec::policy::Policy::from_settings(
                rules.value.as_ref(),
                default.value.as_deref(),
                syntax.value.as_deref(),
            )
            .map_err(|reason| {
                if reason.starts_with("command_default_action") {
                    invalid("command_default_action", &default, reason)
                } else if reason.starts_with("command_shell_syntax_action") {
                    invalid("command_shell_syntax_action", &syntax, reason)
                } else {
                    invalid("command_rule", &rules, reason)
                }
            })?
        },
        approval_timeout_seconds: positive(&layers, "approval_timeout_seconds", 20)?,
        command_sandbox_fallback: {
            let setting = layers.string("command_sandbox_fallback", "refuse")?;
            crate::exec::SandboxFallback::parse(&setting.value).ok_or_else(|| {
                invalid(
                    "command_sandbox_fallback",
                    &setting,
                    "must be \"refuse\" or \"unconfined\"",
                )
            })?
        },
        tls_ca_file,
        tls_pin_sha256,
        endpoints,
        paths,
        host: ctx.host.clone(),
        detected_machine_id: OnceLock::new(),
    };
    Ok(Loaded {
        config: Config(Arc::new(settings)),
        warnings,
    })
}

fn invalid<T>(key: &'static str, setting: &Setting<T>, reason: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key,
        source: setting.source.clone(),
        reason: reason.to_string(),
    }
}

/// The config file of a command: `--config` made absolute (a leading `~`
/// expanded), else the per-OS default (CLI.md §5.1). Whether it exists does
/// not matter here; `install` writes this path into the autostart entry.
pub fn config_file_path(
    overrides: &Overrides,
    paths: &OsPaths,
    cwd: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    match &overrides.config_path {
        Some(path) => absolute_path(
            "config file",
            &Setting {
                value: path.clone(),
                source: Source::Flag("--config"),
            },
            &paths.home,
            cwd,
        ),
        None => Ok(paths.default_config_file.clone()),
    }
}

fn absolute_path(
    key: &'static str,
    setting: &Setting<PathBuf>,
    home: &Path,
    cwd: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    paths::absolute(&setting.value, home, cwd).map_err(|problem| match problem {
        PathProblem::Empty => invalid(key, setting, "must not be empty"),
        PathProblem::OtherUsersHome => invalid(
            key,
            setting,
            "only a leading ~ or ~/ (your own home) can be expanded",
        ),
        PathProblem::NoWorkingDirectory => ConfigError::NoWorkingDirectory { key },
    })
}

fn optional_url(
    layers: &Layers,
    key: &'static str,
    schemes: &'static [&'static str],
) -> Result<Option<String>, ConfigError> {
    let setting = layers.optional_string(key)?;
    if let Some(url) = &setting.value {
        check_platform_url(url, schemes).map_err(|problem| invalid(key, &setting, problem))?;
    }
    Ok(setting.value)
}

fn redirect_port(layers: &Layers, warnings: &mut Vec<ConfigWarning>) -> Result<u16, ConfigError> {
    const LAST_FIRST_PORT: u16 = u16::MAX - (REDIRECT_PORT_COUNT - 1);
    let setting = layers.int("oauth_redirect_port", i64::from(REGISTERED_REDIRECT_PORT))?;
    let port = u16::try_from(setting.value)
        .ok()
        .filter(|p| (1024..=LAST_FIRST_PORT).contains(p))
        .ok_or_else(|| {
            invalid(
                "oauth_redirect_port",
                &setting,
                "must be between 1024 and 65524",
            )
        })?;
    if port != REGISTERED_REDIRECT_PORT {
        warnings.push(ConfigWarning::RedirectPortUnregistered { port });
    }
    Ok(port)
}

fn mode(layers: &Layers) -> Result<Mode, ConfigError> {
    let setting = layers.optional_string("session_id")?;
    let Some(raw) = &setting.value else {
        return Ok(Mode::Control);
    };
    let session_id = machine_id::py_strip(raw);
    if session_id.is_empty() {
        return Ok(Mode::Control);
    }
    if !is_valid_session_id(session_id) {
        return Err(invalid(
            "session_id",
            &setting,
            "must be 1 to 256 characters from A-Z a-z 0-9 . _ : - and start with a letter or digit",
        ));
    }
    Ok(Mode::Legacy {
        session_id: session_id.to_owned(),
    })
}

/// The host name without the characters the platform refuses in a display
/// name, cut to its limit; a placeholder when nothing is left, so the
/// default always satisfies the rule.
fn default_display_name(hostname: &str) -> String {
    let name: String = hostname
        .chars()
        .filter(|&c| HelloField::DisplayName.accepts(c.encode_utf8(&mut [0; 4])))
        .take(MAX_DISPLAY_NAME_CHARS)
        .collect();
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

/// The switches of computer use, each with the feature it turns on. A
/// build without desktop support (the `desktop` feature, Linux only) cannot
/// serve them: accepting one would promise the user a capability that is
/// never served, so switched on in any source it is refused like an
/// invalid value.
const DESKTOP_SWITCHES: &[(&str, &str)] = &[
    ("enable_computer_use", "computer use"),
    ("enable_clipboard", "clipboard access"),
    (
        "enable_clipboard_read_foreign",
        "reading clipboard content the shim did not write",
    ),
];

/// The feature the switch `key` would turn on when this build does not
/// implement it; `None` for every other key.
pub fn unavailable_feature(key: &str) -> Option<&'static str> {
    if crate::desktop::BUILT {
        return None;
    }
    DESKTOP_SWITCHES
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, feature)| *feature)
}

/// A boolean switch; one of an unavailable feature must stay off.
fn switch(layers: &Layers, key: &'static str) -> Result<bool, ConfigError> {
    let setting = layers.bool(key, false)?;
    match unavailable_feature(key) {
        Some(feature) if setting.value => Err(ConfigError::Unavailable {
            key,
            source: setting.source,
            feature,
        }),
        _ => Ok(setting.value),
    }
}

/// An integer key that must be > 0 and fit `T`.
fn positive<T: TryFrom<i64>>(
    layers: &Layers,
    key: &'static str,
    default: i64,
) -> Result<T, ConfigError> {
    let setting = layers.int(key, default)?;
    if setting.value <= 0 {
        return Err(invalid(key, &setting, "must be greater than 0"));
    }
    T::try_from(setting.value).map_err(|_| invalid(key, &setting, "is too large"))
}

/// A number of seconds: finite, `min` to [`MAX_RECONNECT_SECONDS`]. A
/// smaller value is refused, not raised, so the operator learns that it
/// does not do what it says.
fn seconds(layers: &Layers, key: &'static str, default: f64, min: f64) -> Result<f64, ConfigError> {
    let setting = layers.float(key, default)?;
    if !setting.value.is_finite() || !(min..=MAX_RECONNECT_SECONDS).contains(&setting.value) {
        return Err(invalid(
            key,
            &setting,
            format!("must be a number of seconds from {min} to {MAX_RECONNECT_SECONDS}"),
        ));
    }
    Ok(setting.value)
}
