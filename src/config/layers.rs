//! The configuration keys and the precedence between their sources
//! (CLI.md §5.3): command-line flag > `config.toml` > environment > built-in
//! default.
//!
//! The precedence is written once, in [`Layers::lookup`]; the typed getters
//! only convert the winning raw value. Constraints of individual keys are not
//! checked here (that is the builder's job in `mod.rs`), and nothing here
//! reads files or the process environment.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use serde_json::Value;

use super::LogLevel;
use super::env::EnvSetting;
use super::error::{ConfigError, Source};
use super::file::FileLayer;

/// Every configuration key of CLI.md §5.2, in the spec's order.
pub(crate) const KEYS: &[&str] = &[
    "platform_url",
    "platform_ws_url",
    "platform_oauth_url",
    "oauth_client_id",
    "oauth_redirect_port",
    "session_id",
    "machine_id",
    "display_name",
    "allowed_root",
    "audit_log_path",
    "enable_shell",
    "enable_computer_use",
    "enable_local_llm",
    "enable_hardware",
    "max_concurrent",
    "max_concurrent_commands",
    "command_timeout_seconds",
    "max_file_size_bytes",
    "max_commands_per_minute",
    "reconnect_base_delay",
    "reconnect_max_delay",
    "reconnect_jitter_seconds",
    "ollama_url",
    "max_screenshots_per_minute",
    "enable_clipboard",
    "enable_clipboard_read_foreign",
    "screenshot_mask",
    "enable_recording",
    "recording_buffer_dir",
    "recording_default_interpretation_route",
    "recording_channels",
    "recording_retention_limit",
    "jail_no_xdev",
    "refuse_multilink_reads",
    "tls_ca_file",
    "tls_pin_sha256",
    "command_sandbox",
    "command_sandbox_fallback",
    "command_network",
    "command_rule",
    "command_default_action",
    "command_shell_syntax_action",
    "approval_timeout_seconds",
];

/// The key spelled exactly `name`, as a `'static` string.
pub(crate) fn key_named(name: &str) -> Option<&'static str> {
    KEYS.iter().copied().find(|k| *k == name)
}

/// What the command line (or an embedding program) sets, the highest
/// precedence layer. `None`/`false` means "not given": the lower layers decide.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--config`: the file to read instead of the per-OS default.
    pub config_path: Option<PathBuf>,
    /// `--allowed-root`.
    pub allowed_root: Option<PathBuf>,
    /// `--platform-url`.
    pub platform_url: Option<String>,
    /// `--session-id` (before the command or after `start`; the later one
    /// wins, which the parser achieves by overwriting).
    pub session_id: Option<String>,
    /// `--ca-file` (config `tls_ca_file`).
    pub ca_file: Option<PathBuf>,
    /// `--tls-pin-sha256`.
    pub tls_pin_sha256: Option<String>,
    /// `--log-level`; not a configuration key.
    pub log_level: Option<LogLevel>,
    /// `start --enable-shell`. Flags can only switch a setting on.
    pub enable_shell: bool,
    /// `start --enable-computer-use`.
    pub enable_computer_use: bool,
    /// `start --enable-clipboard`.
    pub enable_clipboard: bool,
    /// `start --enable-clipboard-read-foreign`.
    pub enable_clipboard_read_foreign: bool,
    /// `start --enable-recording`.
    pub enable_recording: bool,
    /// `start --command-sandbox MODE`. Only `workspace` is passed on: a
    /// flag can switch the sandbox on but never off.
    pub command_sandbox: Option<String>,
    /// `start --command-network NETWORK`. Only `none` is passed on: a flag
    /// can take the network away but never give it back.
    pub command_network: Option<String>,
    /// Any other key, as `(key, value)` in environment-variable syntax
    /// (CLI.md §5.4), with flag precedence. For embedding programs and tests;
    /// the typed fields above win over an entry for the same key.
    pub settings: Vec<(String, String)>,
}

/// An effective value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Setting<T> {
    pub value: T,
    pub source: Source,
}

/// A raw value as one source spells it.
#[derive(Clone, Copy)]
enum Raw<'a> {
    /// From a flag, an override or an environment variable.
    Text(&'a OsStr),
    /// From the TOML file.
    Toml(&'a Value),
}

/// The three non-default sources, ready for lookups.
pub(crate) struct Layers {
    flags: Vec<(&'static str, OsString, Source)>,
    file: Option<FileLayer>,
    env: BTreeMap<&'static str, EnvSetting>,
}

impl Layers {
    /// Builds the layers. Fails only for an override of an unknown key.
    pub fn new(
        overrides: &Overrides,
        file: Option<FileLayer>,
        env: BTreeMap<&'static str, EnvSetting>,
    ) -> Result<Layers, ConfigError> {
        let mut flags: Vec<(&'static str, OsString, Source)> = Vec::new();
        let mut flag = |key: &'static str, value: &OsStr, name: &'static str| {
            flags.push((key, value.to_os_string(), Source::Flag(name)));
        };
        if let Some(v) = &overrides.allowed_root {
            flag("allowed_root", v.as_os_str(), "--allowed-root");
        }
        if let Some(v) = &overrides.platform_url {
            flag("platform_url", OsStr::new(v), "--platform-url");
        }
        if let Some(v) = &overrides.session_id {
            flag("session_id", OsStr::new(v), "--session-id");
        }
        if let Some(v) = &overrides.ca_file {
            flag("tls_ca_file", v.as_os_str(), "--ca-file");
        }
        if let Some(v) = &overrides.tls_pin_sha256 {
            flag("tls_pin_sha256", OsStr::new(v), "--tls-pin-sha256");
        }
        if let Some(v) = overrides.command_sandbox.as_deref().filter(|v| *v != "off") {
            flag("command_sandbox", OsStr::new(v), "--command-sandbox");
        }
        if let Some(v) = overrides
            .command_network
            .as_deref()
            .filter(|v| *v != "allow")
        {
            flag("command_network", OsStr::new(v), "--command-network");
        }
        let switches = [
            (overrides.enable_shell, "enable_shell", "--enable-shell"),
            (
                overrides.enable_computer_use,
                "enable_computer_use",
                "--enable-computer-use",
            ),
            (
                overrides.enable_clipboard,
                "enable_clipboard",
                "--enable-clipboard",
            ),
            (
                overrides.enable_clipboard_read_foreign,
                "enable_clipboard_read_foreign",
                "--enable-clipboard-read-foreign",
            ),
            (
                overrides.enable_recording,
                "enable_recording",
                "--enable-recording",
            ),
        ];
        for (on, key, name) in switches {
            if on {
                flag(key, OsStr::new("true"), name);
            }
        }
        // Pushed after the typed flags: the first match wins in `lookup`.
        for (key, value) in &overrides.settings {
            let key =
                key_named(key).ok_or_else(|| ConfigError::UnknownOverride { key: key.clone() })?;
            flags.push((key, OsString::from(value), Source::Override));
        }
        Ok(Layers { flags, file, env })
    }

    /// The winning raw value of `key`, or `None` when only the default is
    /// left. This is the only place that knows the order of the sources.
    /// With `skip_empty`, an empty value counts as not set and the next
    /// source decides.
    fn lookup(&self, key: &'static str, skip_empty: bool) -> Option<(Raw<'_>, Source)> {
        let counts = |raw: &Raw<'_>| !skip_empty || !raw.is_empty();
        let flag = self
            .flags
            .iter()
            .filter(|(k, _, _)| *k == key)
            .map(|(_, value, source)| (Raw::Text(value), source.clone()))
            .find(|(raw, _)| counts(raw));
        let file = || {
            let (path, table) = self.file.as_ref()?;
            let raw = Raw::Toml(table.get(key)?);
            counts(&raw).then(|| (raw, Source::File(path.clone())))
        };
        let env = || {
            let (name, value) = self.env.get(key)?;
            let raw = Raw::Text(value);
            counts(&raw).then(|| (raw, Source::Env(name.clone())))
        };
        flag.or_else(file).or_else(env)
    }

    /// Looks `key` up and converts the winner; `default` when no source sets it.
    fn get<T>(
        &self,
        key: &'static str,
        default: T,
        expected: &'static str,
        convert: impl Fn(Raw<'_>) -> Result<T, Bad>,
    ) -> Result<Setting<T>, ConfigError> {
        self.convert(key, self.lookup(key, false), default, expected, convert)
    }

    /// Converts what [`Layers::lookup`] found for `key`.
    fn convert<T>(
        &self,
        key: &'static str,
        found: Option<(Raw<'_>, Source)>,
        default: T,
        expected: &'static str,
        convert: impl Fn(Raw<'_>) -> Result<T, Bad>,
    ) -> Result<Setting<T>, ConfigError> {
        let Some((raw, source)) = found else {
            return Ok(Setting {
                value: default,
                source: Source::Default,
            });
        };
        match convert(raw) {
            Ok(value) => Ok(Setting { value, source }),
            Err(Bad::Type) => Err(ConfigError::WrongType {
                key,
                source,
                expected,
            }),
            Err(Bad::NotUnicode) => Err(ConfigError::NotUnicode {
                key: key.to_owned(),
                source,
            }),
        }
    }

    /// A string key.
    pub fn string(&self, key: &'static str, default: &str) -> Result<Setting<String>, ConfigError> {
        self.get(key, default.to_owned(), "a string", |raw| match raw {
            Raw::Text(t) => text(t).map(str::to_owned),
            Raw::Toml(Value::String(s)) => Ok(s.clone()),
            Raw::Toml(_) => Err(Bad::Type),
        })
    }

    /// A "string or unset" key; an empty string means unset.
    pub fn optional_string(
        &self,
        key: &'static str,
    ) -> Result<Setting<Option<String>>, ConfigError> {
        self.some_string(key, self.lookup(key, false))
    }

    /// A "string or unset" key where an empty value in any source means
    /// "not set here", so the next source decides: an empty flag can never
    /// discard what a lower source sets (a pin, say).
    pub fn nonempty_string(
        &self,
        key: &'static str,
    ) -> Result<Setting<Option<String>>, ConfigError> {
        self.some_string(key, self.lookup(key, true))
    }

    fn some_string(
        &self,
        key: &'static str,
        found: Option<(Raw<'_>, Source)>,
    ) -> Result<Setting<Option<String>>, ConfigError> {
        let setting = self.convert(key, found, None, "a string", |raw| match raw {
            Raw::Text(t) => text(t).map(|s| Some(s.to_owned())),
            Raw::Toml(Value::String(s)) => Ok(Some(s.clone())),
            Raw::Toml(_) => Err(Bad::Type),
        })?;
        Ok(Setting {
            value: setting.value.filter(|s| !s.is_empty()),
            source: setting.source,
        })
    }

    /// A structured key (`command_rule`'s array of tables): the TOML
    /// value from the file, or JSON text from the environment or `--set`.
    pub fn structured(&self, key: &'static str) -> Result<Setting<Option<Value>>, ConfigError> {
        self.get(key, None, "TOML tables, or JSON text", |raw| match raw {
            Raw::Text(t) => serde_json::from_str(text(t)?)
                .map(Some)
                .map_err(|_| Bad::Type),
            Raw::Toml(v) => Ok(Some(v.clone())),
        })
    }

    /// A boolean key.
    pub fn bool(&self, key: &'static str, default: bool) -> Result<Setting<bool>, ConfigError> {
        let expected = "a boolean (true/false, 1/0, yes/no, on/off, t/f, y/n)";
        self.get(key, default, expected, |raw| match raw {
            Raw::Text(t) => parse_bool(text(t)?).ok_or(Bad::Type),
            Raw::Toml(Value::Bool(b)) => Ok(*b),
            Raw::Toml(_) => Err(Bad::Type),
        })
    }

    /// An integer key.
    pub fn int(&self, key: &'static str, default: i64) -> Result<Setting<i64>, ConfigError> {
        self.get(key, default, "an integer", |raw| match raw {
            Raw::Text(t) => parse_int(text(t)?).ok_or(Bad::Type),
            Raw::Toml(Value::Number(n)) => n.as_i64().ok_or(Bad::Type),
            Raw::Toml(_) => Err(Bad::Type),
        })
    }

    /// A float key; integers are accepted as well.
    pub fn float(&self, key: &'static str, default: f64) -> Result<Setting<f64>, ConfigError> {
        self.get(key, default, "a number", |raw| match raw {
            Raw::Text(t) => parse_float(text(t)?).ok_or(Bad::Type),
            Raw::Toml(Value::Number(n)) => n.as_f64().ok_or(Bad::Type),
            Raw::Toml(_) => Err(Bad::Type),
        })
    }

    /// A path key; `None` when no source sets it (the caller knows the
    /// per-OS default). The value is returned as given: expansion and
    /// validation are the caller's. Paths need not be UTF-8.
    pub fn path(&self, key: &'static str) -> Result<Option<Setting<PathBuf>>, ConfigError> {
        let setting = self.get(key, None, "a path string", |raw| match raw {
            Raw::Text(t) => Ok(Some(PathBuf::from(t))),
            Raw::Toml(Value::String(s)) => Ok(Some(PathBuf::from(s))),
            Raw::Toml(_) => Err(Bad::Type),
        })?;
        Ok(setting.value.map(|value| Setting {
            value,
            source: setting.source,
        }))
    }

    /// An array-of-strings key; text sources spell it as a JSON array.
    pub fn list(
        &self,
        key: &'static str,
        default: &[&str],
    ) -> Result<Setting<Vec<String>>, ConfigError> {
        let default = default.iter().map(|s| (*s).to_owned()).collect();
        self.get(key, default, "an array of strings", |raw| match raw {
            Raw::Text(t) => {
                let value: Value = serde_json::from_str(text(t)?).map_err(|_| Bad::Type)?;
                strings(&value)
            }
            Raw::Toml(v) => strings(v),
        })
    }
}

impl Raw<'_> {
    /// An empty text or an empty TOML string.
    fn is_empty(&self) -> bool {
        match self {
            Raw::Text(t) => t.is_empty(),
            Raw::Toml(Value::String(s)) => s.is_empty(),
            Raw::Toml(_) => false,
        }
    }
}

/// Why a raw value could not be converted.
enum Bad {
    /// Not the key's type.
    Type,
    /// Text that must be UTF-8 is not.
    NotUnicode,
}

fn text(value: &OsStr) -> Result<&str, Bad> {
    value.to_str().ok_or(Bad::NotUnicode)
}

fn strings(value: &Value) -> Result<Vec<String>, Bad> {
    value
        .as_array()
        .ok_or(Bad::Type)?
        .iter()
        .map(|item| item.as_str().map(str::to_owned).ok_or(Bad::Type))
        .collect()
}

/// Boolean spellings of CLI.md §5.4, case-insensitive.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// A decimal integer with an optional sign; surrounding whitespace is
/// tolerated as the reference's parser does.
pub(crate) fn parse_int(text: &str) -> Option<i64> {
    text.trim().parse().ok()
}

/// A decimal number. Non-finite spellings (`inf`, `nan`) parse here and are
/// refused by the key's constraint, which gives the better message.
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    text.trim().parse().ok()
}
