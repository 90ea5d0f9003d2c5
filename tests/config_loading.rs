//! Loading the configuration: sources and their precedence (CLI.md §5.3,
//! §5.4), the flat TOML file (§5.1), and the constraints of every key (§5.2).
//! Every test runs against an injected environment and a temporary home, so
//! nothing on the machine running the tests is read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use autogpt_shim::config::{
    Config, ConfigError, ConfigWarning, Context, Environment, Host, Loaded, Mode, Overrides,
    Platform, Source, load,
};

/// A temporary home with an optional config file at an explicit path.
struct Fixture {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn env(mut self, name: &str, value: &str) -> Fixture {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Writes `config.toml` in the home and returns overrides pointing to it.
    fn file(&self, toml: &str) -> Overrides {
        let path = self.dir.path().join("config.toml");
        std::fs::write(&path, toml).unwrap();
        Overrides {
            config_path: Some(path),
            ..Overrides::default()
        }
    }

    fn context(&self) -> Context {
        let home = self.home().display().to_string();
        let mut env = vec![
            ("HOME".to_owned(), home.clone()),
            ("USERPROFILE".to_owned(), home),
        ];
        env.extend(self.env.iter().cloned());
        Context {
            env: Environment::from_pairs(env),
            cwd: Some(self.home().join("cwd")),
            host: Host {
                platform: Some(Platform::Linux),
                os_name: "linux".into(),
                machine: "x86_64".into(),
                hostname: "alice-laptop".into(),
            },
        }
    }

    fn load(&self, overrides: &Overrides) -> Result<Loaded, ConfigError> {
        load(overrides, &self.context())
    }

    fn config(&self, overrides: &Overrides) -> Config {
        self.load(overrides).expect("config loads").config
    }

    fn error(&self, overrides: &Overrides) -> ConfigError {
        self.load(overrides).expect_err("config is refused")
    }
}

fn with_setting(key: &str, value: &str) -> Overrides {
    Overrides {
        settings: vec![(key.into(), value.into())],
        ..Overrides::default()
    }
}

fn invalid_key(error: &ConfigError) -> &'static str {
    match error {
        ConfigError::Invalid { key, .. } | ConfigError::WrongType { key, .. } => key,
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

// --- defaults --------------------------------------------------------------

#[cfg(target_os = "linux")]
#[test]
fn defaults_apply_without_any_source() {
    let fx = Fixture::new();
    let config = fx.config(&Overrides::default());
    assert_eq!(config.platform_url, "wss://platform.autogpt.net");
    assert_eq!(config.platform_ws_url, None);
    assert_eq!(config.platform_oauth_url, None);
    assert_eq!(config.oauth_client_id, "autogpt-local-executor");
    assert_eq!(config.oauth_redirect_port, 41899);
    assert_eq!(config.mode, Mode::Control);
    assert_eq!(config.configured_machine_id, None);
    assert_eq!(config.display_name, "alice-laptop");
    assert_eq!(config.allowed_root, fx.home().join("autogpt-workspace"));
    assert!(config.allowed_root_is_default());
    assert_eq!(
        config.audit_log_path,
        fx.home()
            .join(".local/state/autogpt-local-executor/audit.log")
    );
    assert!(!config.enable_shell);
    assert!(!config.enable_computer_use);
    assert!(!config.enable_local_llm);
    assert!(!config.enable_hardware);
    assert_eq!(config.max_concurrent, 4);
    assert_eq!(config.max_concurrent_commands, 10);
    assert_eq!(config.command_timeout_seconds, 30);
    assert_eq!(config.max_file_size_bytes, 10 * 1024 * 1024);
    assert_eq!(config.max_commands_per_minute, 60);
    assert_eq!(config.reconnect_base_delay, 1.0);
    assert_eq!(config.reconnect_max_delay, 60.0);
    assert_eq!(config.reconnect_jitter_seconds, 5.0);
    assert_eq!(config.ollama_url, "http://localhost:11434");
    assert_eq!(config.max_screenshots_per_minute, 10);
    assert!(!config.enable_clipboard);
    assert!(!config.enable_clipboard_read_foreign);
    assert!(!config.enable_recording);
    assert_eq!(
        config.recording_buffer_dir,
        fx.home()
            .join(".local/state/autogpt-local-executor/recordings")
    );
    assert_eq!(
        config.recording_default_interpretation_route,
        "extract_then_cloud"
    );
    assert_eq!(config.recording_channels, vec!["floor".to_owned()]);
    assert_eq!(config.recording_retention_limit, 10);
    assert!(!config.jail_no_xdev);
    assert!(!config.refuse_multilink_reads);
    assert_eq!(config.tls_ca_file, None);
    assert!(config.tls_pin_sha256.is_empty());
    assert_eq!(
        config.config_file,
        fx.home().join(".config/autogpt-local-executor/config.toml")
    );
}

#[test]
fn defaults_derive_the_default_endpoints() {
    let config = Fixture::new().config(&Overrides::default());
    let urls = &config.endpoints;
    assert_eq!(
        urls.authorize(),
        "https://platform.autogpt.net/auth/authorize"
    );
    assert_eq!(urls.token(), "https://platform.autogpt.net/api/oauth/token");
    assert_eq!(
        urls.revoke(),
        "https://platform.autogpt.net/api/oauth/revoke"
    );
    assert_eq!(
        urls.control_url(),
        "wss://platform.autogpt.net/ws/local-executor"
    );
}

#[test]
fn no_warnings_for_a_clean_configuration() {
    let loaded = Fixture::new().load(&Overrides::default()).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn missing_default_config_file_is_not_an_error() {
    let fx = Fixture::new();
    assert!(!fx.config(&Overrides::default()).config_file.exists());
}

#[test]
fn config_is_cheap_to_clone_and_shares_its_data() {
    let config = Fixture::new().config(&Overrides::default());
    let copy = config.clone();
    assert!(std::ptr::eq(&config.platform_url, &copy.platform_url));
}

// --- precedence (CLI.md §5.3, §5.4 acceptance vectors) ---------------------

#[test]
fn environment_sets_a_key_when_nothing_else_does() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", "42000");
    assert_eq!(fx.config(&Overrides::default()).oauth_redirect_port, 42000);
}

#[test]
fn file_value_beats_environment() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", "42000");
    let overrides = fx.file("oauth_redirect_port = 42010\n");
    assert_eq!(fx.config(&overrides).oauth_redirect_port, 42010);
}

#[test]
fn override_beats_file_value() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", "42000");
    let mut overrides = fx.file("oauth_redirect_port = 42010\n");
    overrides
        .settings
        .push(("oauth_redirect_port".into(), "42050".into()));
    assert_eq!(fx.config(&overrides).oauth_redirect_port, 42050);
}

#[test]
fn flag_beats_file_and_environment() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_PLATFORM_URL", "https://env.example.com");
    let mut overrides = fx.file("platform_url = \"https://file.example.com\"\n");
    assert_eq!(
        fx.config(&overrides).platform_url,
        "https://file.example.com"
    );
    overrides.platform_url = Some("https://flag.example.com".into());
    assert_eq!(
        fx.config(&overrides).platform_url,
        "https://flag.example.com"
    );
}

#[test]
fn typed_flag_beats_a_generic_override_of_the_same_key() {
    let fx = Fixture::new();
    let mut overrides = with_setting("platform_url", "https://setting.example.com");
    overrides.platform_url = Some("https://flag.example.com".into());
    assert_eq!(
        fx.config(&overrides).platform_url,
        "https://flag.example.com"
    );
}

#[test]
fn env_var_names_match_case_insensitively() {
    let fx = Fixture::new()
        .env("autogpt_shim_enable_shell", "yes")
        .env("AutoGPT_Shim_Max_Concurrent", "7");
    let config = fx.config(&Overrides::default());
    assert!(config.enable_shell);
    assert_eq!(config.max_concurrent, 7);
}

#[test]
fn empty_env_value_counts_as_unset() {
    let fx = Fixture::new()
        .env("AUTOGPT_SHIM_MAX_CONCURRENT", "")
        .env("AUTOGPT_SHIM_PLATFORM_URL", "");
    let config = fx.config(&Overrides::default());
    assert_eq!(config.max_concurrent, 4);
    assert_eq!(config.platform_url, "wss://platform.autogpt.net");
}

#[test]
fn env_names_differing_in_case_with_different_values_are_refused() {
    let fx = Fixture::new()
        .env("AUTOGPT_SHIM_MAX_CONCURRENT", "3")
        .env("autogpt_shim_max_concurrent", "5");
    match fx.error(&Overrides::default()) {
        ConfigError::ConflictingEnv { key, names } => {
            assert_eq!(key, "max_concurrent");
            assert_eq!(names.len(), 2);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn env_names_differing_in_case_with_equal_values_are_accepted() {
    let fx = Fixture::new()
        .env("AUTOGPT_SHIM_MAX_CONCURRENT", "3")
        .env("autogpt_shim_max_concurrent", "3");
    assert_eq!(fx.config(&Overrides::default()).max_concurrent, 3);
}

#[test]
fn ca_file_env_var_sets_tls_ca_file() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_CA_FILE", "/etc/ssl/extra.pem");
    assert_eq!(
        fx.config(&Overrides::default()).tls_ca_file,
        Some(PathBuf::from("/etc/ssl/extra.pem"))
    );
}

#[test]
fn env_booleans_accept_every_documented_spelling() {
    for (text, expected) in [
        ("true", true),
        ("TRUE", true),
        ("1", true),
        ("yes", true),
        ("On", true),
        ("t", true),
        ("Y", true),
        ("false", false),
        ("0", false),
        ("no", false),
        ("OFF", false),
        ("f", false),
        ("n", false),
    ] {
        let fx = Fixture::new().env("AUTOGPT_SHIM_JAIL_NO_XDEV", text);
        assert_eq!(
            fx.config(&Overrides::default()).jail_no_xdev,
            expected,
            "{text}"
        );
    }
}

#[test]
fn env_boolean_with_another_spelling_is_a_type_error() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_ENABLE_SHELL", "sure");
    let error = fx.error(&Overrides::default());
    assert!(matches!(
        error,
        ConfigError::WrongType {
            key: "enable_shell",
            ..
        }
    ));
    let message = error.to_string();
    assert!(message.contains("enable_shell"), "{message}");
    assert!(message.contains("AUTOGPT_SHIM_ENABLE_SHELL"), "{message}");
}

#[test]
fn env_numbers_are_decimal() {
    let fx = Fixture::new()
        .env("AUTOGPT_SHIM_RECONNECT_JITTER_SECONDS", "2.5")
        .env("AUTOGPT_SHIM_MAX_FILE_SIZE_BYTES", "1048576");
    let config = fx.config(&Overrides::default());
    assert_eq!(config.reconnect_jitter_seconds, 2.5);
    assert_eq!(config.max_file_size_bytes, 1_048_576);
    let fx = Fixture::new().env("AUTOGPT_SHIM_MAX_CONCURRENT", "0x10");
    assert_eq!(
        invalid_key(&fx.error(&Overrides::default())),
        "max_concurrent"
    );
}

#[test]
fn env_arrays_are_json() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_RECORDING_CHANNELS", r#"["floor","browser"]"#);
    assert_eq!(
        fx.config(&Overrides::default()).recording_channels,
        vec!["floor".to_owned(), "browser".to_owned()]
    );
    let fx = Fixture::new().env("AUTOGPT_SHIM_RECORDING_CHANNELS", "floor");
    assert_eq!(
        invalid_key(&fx.error(&Overrides::default())),
        "recording_channels"
    );
}

#[test]
fn unknown_env_var_with_the_prefix_is_a_warning() {
    let fx = Fixture::new()
        .env("AUTOGPT_SHIM_ENABLE_SHEL", "1")
        .env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "secret-passphrase")
        .env("AUTOGPT_SHIM_FALLBACK_DIR", "/tmp/x");
    let loaded = fx.load(&Overrides::default()).unwrap();
    assert_eq!(
        loaded.warnings,
        vec![ConfigWarning::UnknownEnvVar {
            name: "AUTOGPT_SHIM_ENABLE_SHEL".into()
        }]
    );
}

#[test]
fn passphrase_never_appears_in_debug_output() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE", "hunter2-secret");
    let debug = format!("{:?}", fx.context());
    assert!(debug.contains("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE"));
    assert!(!debug.contains("hunter2-secret"));
}

#[test]
fn start_flags_switch_settings_on() {
    let fx = Fixture::new();
    let overrides = Overrides {
        enable_shell: true,
        enable_recording: true,
        ..Overrides::default()
    };
    let config = fx.config(&overrides);
    assert!(config.enable_shell);
    assert!(config.enable_recording);
}

/// The switches of capabilities a build without the `desktop` feature does
/// not implement, with the flag that sets each and its feature's name.
#[cfg(not(feature = "desktop"))]
const UNBUILT: [(&str, Option<&str>, &str); 3] = [
    (
        "enable_computer_use",
        Some("--enable-computer-use"),
        "computer use",
    ),
    ("enable_clipboard", Some("--enable-clipboard"), "clipboard"),
    (
        "enable_clipboard_read_foreign",
        Some("--enable-clipboard-read-foreign"),
        "clipboard",
    ),
];

#[cfg(not(feature = "desktop"))]
fn assert_unavailable(error: &ConfigError, key: &str, source: &Source, feature: &str) {
    match error {
        ConfigError::Unavailable {
            key: k, source: s, ..
        } => {
            assert_eq!((*k, s), (key, source));
        }
        other => panic!("{key}: expected Unavailable, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("is not available in this build"),
        "{message}"
    );
    assert!(
        message.contains(feature) && message.contains(key),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
}

#[test]
#[cfg(not(feature = "desktop"))]
fn switches_of_unbuilt_capabilities_are_refused_from_every_source() {
    for (key, flag, feature) in UNBUILT {
        let fx = Fixture::new();
        let path = fx.home().join("config.toml");
        let error = fx.error(&fx.file(&format!("{key} = true\n")));
        assert_unavailable(&error, key, &Source::File(path), feature);

        let variable = format!("AUTOGPT_SHIM_{}", key.to_uppercase());
        let fx = Fixture::new().env(&variable, "yes");
        let error = fx.error(&Overrides::default());
        assert_unavailable(&error, key, &Source::Env(variable.clone()), feature);

        let error = Fixture::new().error(&with_setting(key, "true"));
        assert_unavailable(&error, key, &Source::Override, feature);

        if let Some(flag) = flag {
            let mut overrides = Overrides::default();
            match key {
                "enable_computer_use" => overrides.enable_computer_use = true,
                "enable_clipboard" => overrides.enable_clipboard = true,
                _ => overrides.enable_clipboard_read_foreign = true,
            }
            let error = Fixture::new().error(&overrides);
            assert_unavailable(&error, key, &Source::Flag(flag), feature);
        }

        // Off is what the build does anyway: accepted from any source.
        let fx = Fixture::new().env(&variable, "false");
        let config = fx.config(&fx.file(&format!("{key} = false\n")));
        assert!(!config.enable_computer_use && !config.enable_clipboard);
    }
}

#[test]
fn the_local_llm_and_hardware_switches_are_taken_from_every_source() {
    for key in ["enable_local_llm", "enable_hardware"] {
        let get = |config: &autogpt_shim::config::Config| match key {
            "enable_local_llm" => config.enable_local_llm,
            _ => config.enable_hardware,
        };
        let fx = Fixture::new();
        assert!(
            get(&fx.config(&fx.file(&format!("{key} = true\n")))),
            "{key} file"
        );
        let variable = format!("AUTOGPT_SHIM_{}", key.to_uppercase());
        let fx = Fixture::new().env(&variable, "yes");
        assert!(get(&fx.config(&Overrides::default())), "{key} env");
        assert!(
            !get(&Fixture::new().config(&Overrides::default())),
            "{key} default"
        );
    }
}

#[test]
#[cfg(feature = "desktop")]
fn a_desktop_build_takes_the_computer_use_switches_from_every_source() {
    let fx = Fixture::new();
    let config = fx.config(&fx.file(
        "enable_computer_use = true\nenable_clipboard = true\nenable_clipboard_read_foreign = true\n",
    ));
    assert!(config.enable_computer_use && config.enable_clipboard);
    assert!(config.enable_clipboard_read_foreign);
    let overrides = Overrides {
        enable_computer_use: true,
        ..Overrides::default()
    };
    assert!(Fixture::new().config(&overrides).enable_computer_use);
}

#[test]
fn screenshot_mask_entries_are_checked_when_the_configuration_loads() {
    let fx = Fixture::new();
    let config = fx.config(&fx.file("screenshot_mask = [\"class:Slack\", \"rect:0,0,10,10\"]\n"));
    assert_eq!(
        config.screenshot_mask.entries(),
        ["class:Slack", "rect:0,0,10,10"]
    );
    let fx = Fixture::new();
    let error = fx.error(&fx.file("screenshot_mask = [\"window:Slack\"]\n"));
    assert!(error.to_string().contains("screenshot_mask"), "{error}");
}

#[test]
fn absent_start_flag_cannot_switch_a_file_setting_off() {
    let fx = Fixture::new();
    let overrides = fx.file("enable_shell = true\n");
    assert!(!overrides.enable_shell);
    assert!(fx.config(&overrides).enable_shell);
}

#[test]
fn override_of_an_unknown_key_is_refused() {
    let fx = Fixture::new();
    assert!(matches!(
        fx.error(&with_setting("no_such_key", "1")),
        ConfigError::UnknownOverride { .. }
    ));
}

#[test]
fn log_level_comes_from_the_overrides() {
    use autogpt_shim::config::LogLevel;
    let fx = Fixture::new();
    assert_eq!(fx.config(&Overrides::default()).log_level, LogLevel::Info);
    let overrides = Overrides {
        log_level: Some(LogLevel::Debug),
        ..Overrides::default()
    };
    assert_eq!(fx.config(&overrides).log_level, LogLevel::Debug);
}

// --- the file (CLI.md §5.1) -----------------------------------------------

#[test]
fn explicit_missing_config_file_is_a_warning() {
    let fx = Fixture::new();
    let overrides = Overrides {
        config_path: Some(fx.home().join("nope.toml")),
        ..Overrides::default()
    };
    let loaded = fx.load(&overrides).unwrap();
    assert_eq!(
        loaded.warnings,
        vec![ConfigWarning::ConfigFileMissing {
            path: fx.home().join("nope.toml")
        }]
    );
}

#[cfg(target_os = "linux")]
#[test]
fn default_config_file_under_xdg_config_home_is_read() {
    let fx = Fixture::new();
    let xdg = fx.home().join("xdg");
    let dir = xdg.join("autogpt-local-executor");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), "max_concurrent = 2\n").unwrap();
    let fx = fx.env("XDG_CONFIG_HOME", xdg.to_str().unwrap());
    let config = fx.config(&Overrides::default());
    assert_eq!(config.max_concurrent, 2);
    assert_eq!(config.config_file, dir.join("config.toml"));
}

#[test]
fn relative_config_path_is_made_absolute_against_the_working_directory() {
    let fx = Fixture::new();
    let cwd = fx.home().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(cwd.join("my.toml"), "max_concurrent = 3\n").unwrap();
    let overrides = Overrides {
        config_path: Some("my.toml".into()),
        ..Overrides::default()
    };
    let config = fx.config(&overrides);
    assert_eq!(config.config_file, cwd.join("my.toml"));
    assert_eq!(config.max_concurrent, 3);
}

#[test]
fn unknown_file_keys_are_returned_as_warnings() {
    let fx = Fixture::new();
    let overrides = fx.file("enable_shel = true\nmax_concurrent = 2\n\"bad\\u001bkey\" = 1\n");
    let loaded = fx.load(&overrides).unwrap();
    assert_eq!(loaded.config.max_concurrent, 2);
    let keys: Vec<String> = loaded
        .warnings
        .iter()
        .map(|w| match w {
            ConfigWarning::UnknownFileKey { key, .. } => key.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        keys,
        vec!["bad\u{1b}key".to_owned(), "enable_shel".to_owned()]
    );
    for warning in &loaded.warnings {
        let text = warning.to_string();
        assert!(
            !text.contains('\u{1b}'),
            "control character printed: {text:?}"
        );
    }
}

#[test]
fn toml_syntax_error_is_a_config_error() {
    let fx = Fixture::new();
    let error = fx.error(&fx.file("max_concurrent = = 3\n"));
    assert!(matches!(error, ConfigError::Syntax { .. }), "{error:?}");
    assert!(!error.to_string().contains('\n'));
}

#[test]
fn duplicate_key_in_the_file_is_a_syntax_error() {
    let fx = Fixture::new();
    let error = fx.error(&fx.file("max_concurrent = 3\nmax_concurrent = 4\n"));
    assert!(matches!(error, ConfigError::Syntax { .. }), "{error:?}");
}

#[test]
fn wrong_type_in_the_file_is_a_config_error_naming_key_and_file() {
    let fx = Fixture::new();
    let overrides = fx.file("max_concurrent = \"4\"\n");
    let error = fx.error(&overrides);
    match &error {
        ConfigError::WrongType { key, source, .. } => {
            assert_eq!(*key, "max_concurrent");
            assert_eq!(
                *source,
                Source::File(overrides.config_path.clone().unwrap())
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("max_concurrent") && message.contains("config.toml"),
        "{message}"
    );
}

#[test]
fn file_booleans_must_be_toml_booleans() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&fx.file("enable_shell = \"yes\"\n"))),
        "enable_shell"
    );
}

#[test]
fn file_floats_accept_integers() {
    let fx = Fixture::new();
    assert_eq!(
        fx.config(&fx.file("reconnect_max_delay = 30\n"))
            .reconnect_max_delay,
        30.0
    );
}

#[test]
fn tables_in_the_flat_file_are_refused_for_known_keys() {
    let fx = Fixture::new();
    let error = fx.error(&fx.file("[platform_url]\nx = 1\n"));
    assert_eq!(invalid_key(&error), "platform_url");
}

#[test]
fn unreadable_config_file_is_a_config_error() {
    let fx = Fixture::new();
    let overrides = Overrides {
        config_path: Some(fx.home()),
        ..Overrides::default()
    };
    assert!(matches!(fx.error(&overrides), ConfigError::ReadFile { .. }));
}

#[cfg(unix)]
#[cfg(target_os = "linux")]
#[test]
fn fifo_as_config_file_is_refused_without_blocking() {
    let fx = Fixture::new();
    let fifo = fx.home().join("fifo.toml");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .unwrap();
    let overrides = Overrides {
        config_path: Some(fifo),
        ..Overrides::default()
    };
    assert!(matches!(fx.error(&overrides), ConfigError::ReadFile { .. }));
}

#[cfg(unix)]
#[test]
fn every_key_can_be_set_in_the_file() {
    let fx = Fixture::new();
    let pin = "ab".repeat(32);
    let overrides = fx.file(&format!(
        r#"
platform_url = "https://platform.example.com"
platform_ws_url = "wss://ws.example.com/base/"
platform_oauth_url = "https://auth.example.com/oauth"
oauth_client_id = "client"
oauth_redirect_port = 41899
session_id = "  chat-1  "
machine_id = "my-machine"
display_name = "Desk"
allowed_root = "~/work"
audit_log_path = "/var/tmp/audit/log.jsonl"
enable_shell = true
enable_computer_use = false
enable_local_llm = false
enable_hardware = false
max_concurrent = 1
max_concurrent_commands = 2
command_timeout_seconds = 3
max_file_size_bytes = 4
max_commands_per_minute = 5
reconnect_base_delay = 0.5
reconnect_max_delay = 10.0
reconnect_jitter_seconds = 0
ollama_url = "http://127.0.0.1:11434/"
max_screenshots_per_minute = 6
enable_clipboard = false
enable_clipboard_read_foreign = false
enable_recording = true
recording_buffer_dir = "rec"
recording_default_interpretation_route = "local_vlm"
recording_channels = ["floor", "desktop_ax"]
recording_retention_limit = 1
jail_no_xdev = true
refuse_multilink_reads = true
tls_ca_file = "~/ca.pem"
tls_pin_sha256 = "{pin}"
"#
    ));
    let loaded = fx.load(&overrides).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = loaded.config;
    assert_eq!(c.platform_url, "https://platform.example.com");
    assert_eq!(
        c.platform_ws_url.as_deref(),
        Some("wss://ws.example.com/base/")
    );
    assert_eq!(
        c.platform_oauth_url.as_deref(),
        Some("https://auth.example.com/oauth")
    );
    assert_eq!(c.oauth_client_id, "client");
    assert_eq!(c.session_id(), Some("chat-1"));
    assert_eq!(c.machine_id().unwrap(), "my-machine");
    assert_eq!(c.display_name, "Desk");
    assert_eq!(c.allowed_root, fx.home().join("work"));
    assert!(!c.allowed_root_is_default());
    assert_eq!(c.audit_log_path, PathBuf::from("/var/tmp/audit/log.jsonl"));
    assert!(c.enable_shell);
    // This build refuses to switch these on (tested above).
    assert!(!c.enable_computer_use && !c.enable_local_llm && !c.enable_hardware);
    assert_eq!(
        (
            c.max_concurrent,
            c.max_concurrent_commands,
            c.command_timeout_seconds
        ),
        (1, 2, 3)
    );
    assert_eq!((c.max_file_size_bytes, c.max_commands_per_minute), (4, 5));
    assert_eq!(
        (
            c.reconnect_base_delay,
            c.reconnect_max_delay,
            c.reconnect_jitter_seconds
        ),
        (0.5, 10.0, 0.0)
    );
    assert_eq!(c.ollama_url, "http://127.0.0.1:11434");
    assert_eq!(c.max_screenshots_per_minute, 6);
    assert!(!c.enable_clipboard && !c.enable_clipboard_read_foreign && c.enable_recording);
    assert_eq!(c.recording_buffer_dir, fx.home().join("cwd/rec"));
    assert_eq!(c.recording_default_interpretation_route, "local_vlm");
    assert_eq!(
        c.recording_channels,
        vec!["floor".to_owned(), "desktop_ax".to_owned()]
    );
    assert_eq!(c.recording_retention_limit, 1);
    assert!(c.jail_no_xdev && c.refuse_multilink_reads);
    assert_eq!(c.tls_ca_file, Some(fx.home().join("ca.pem")));
    assert_eq!(c.tls_pin_sha256, vec![[0xab; 32]]);
    assert_eq!(
        c.endpoints.authorize(),
        "https://auth.example.com/oauth/authorize"
    );
    assert_eq!(
        c.endpoints.token(),
        "https://platform.example.com/api/oauth/token"
    );
    assert_eq!(
        c.endpoints.session_url("chat-1"),
        "wss://ws.example.com/base/chat-1"
    );
}

// --- paths in keys (CLI.md §5.2 hardening note) ----------------------------

#[test]
fn tilde_in_path_keys_is_expanded() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_AUDIT_LOG_PATH", "~/logs/audit.log");
    let overrides = Overrides {
        allowed_root: Some("~".into()),
        ..Overrides::default()
    };
    let config = fx.config(&overrides);
    assert_eq!(config.allowed_root, fx.home());
    assert_eq!(config.audit_log_path, fx.home().join("logs/audit.log"));
    assert_eq!(
        config.recording_buffer_dir,
        fx.home().join("logs/recordings")
    );
}

#[test]
fn relative_path_keys_are_resolved_once_against_the_working_directory() {
    let fx = Fixture::new();
    let overrides = Overrides {
        allowed_root: Some("ws".into()),
        ..Overrides::default()
    };
    assert_eq!(fx.config(&overrides).allowed_root, fx.home().join("cwd/ws"));
}

#[test]
fn relative_path_without_a_working_directory_is_refused() {
    let fx = Fixture::new();
    let mut ctx = fx.context();
    ctx.cwd = None;
    let overrides = Overrides {
        allowed_root: Some("ws".into()),
        ..Overrides::default()
    };
    assert!(matches!(
        load(&overrides, &ctx),
        Err(ConfigError::NoWorkingDirectory {
            key: "allowed_root"
        })
    ));
}

#[test]
fn other_users_home_is_not_expanded() {
    let fx = Fixture::new();
    let overrides = Overrides {
        allowed_root: Some("~bob/ws".into()),
        ..Overrides::default()
    };
    let error = fx.error(&overrides);
    assert_eq!(invalid_key(&error), "allowed_root");
    assert!(error.to_string().contains("--allowed-root"), "{error}");
}

#[test]
fn empty_allowed_root_is_refused() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&fx.file("allowed_root = \"\"\n"))),
        "allowed_root"
    );
}

#[test]
fn audit_log_path_must_name_a_file() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&with_setting("audit_log_path", "/"))),
        "audit_log_path"
    );
}

#[test]
fn empty_optional_path_means_unset() {
    let fx = Fixture::new();
    assert_eq!(
        fx.config(&fx.file("tls_ca_file = \"\"\n")).tls_ca_file,
        None
    );
}

#[cfg(unix)]
#[test]
fn non_utf8_path_from_a_flag_is_kept() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let raw = std::ffi::OsStr::from_bytes(b"/srv/w\xff");
    let overrides = Overrides {
        allowed_root: Some(PathBuf::from(raw)),
        ..Overrides::default()
    };
    assert_eq!(
        fx.config(&overrides).allowed_root,
        std::path::Path::new(raw)
    );
}

#[cfg(unix)]
#[test]
fn non_utf8_text_value_from_the_environment_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let mut ctx = fx.context();
    let mut pairs: Vec<(std::ffi::OsString, std::ffi::OsString)> = ctx
        .env
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    pairs.push((
        "AUTOGPT_SHIM_DISPLAY_NAME".into(),
        std::ffi::OsStr::from_bytes(b"desk\xff").to_owned(),
    ));
    ctx.env = Environment::from_pairs(pairs);
    assert!(matches!(
        load(&Overrides::default(), &ctx),
        Err(ConfigError::NotUnicode { .. })
    ));
}

#[cfg(unix)]
#[test]
fn missing_home_is_a_config_error() {
    let fx = Fixture::new();
    let mut ctx = fx.context();
    ctx.env = Environment::from_pairs([("HOME", "relative/home")]);
    assert!(matches!(
        load(&Overrides::default(), &ctx),
        Err(ConfigError::NoHome)
    ));
    ctx.env = Environment::from_pairs(Vec::<(String, String)>::new());
    assert!(matches!(
        load(&Overrides::default(), &ctx),
        Err(ConfigError::NoHome)
    ));
}

// --- constraints (CLI.md §5.2) ----------------------------------------------

#[test]
fn counts_and_limits_must_be_positive() {
    let fx = Fixture::new();
    for key in [
        "max_concurrent",
        "max_concurrent_commands",
        "command_timeout_seconds",
        "max_file_size_bytes",
        "max_commands_per_minute",
        "max_screenshots_per_minute",
        "recording_retention_limit",
    ] {
        assert_eq!(invalid_key(&fx.error(&with_setting(key, "0"))), key);
        assert_eq!(invalid_key(&fx.error(&with_setting(key, "-1"))), key);
        assert!(fx.load(&with_setting(key, "1")).is_ok(), "{key}");
    }
}

#[test]
fn count_too_large_for_its_type_is_refused() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&with_setting("max_concurrent", "4294967296"))),
        "max_concurrent"
    );
}

#[test]
fn reconnect_delays_must_be_finite_and_not_negative() {
    let fx = Fixture::new();
    for key in [
        "reconnect_base_delay",
        "reconnect_max_delay",
        "reconnect_jitter_seconds",
    ] {
        for bad in ["-0.5", "inf", "NaN", "86400.5"] {
            assert_eq!(
                invalid_key(&fx.error(&with_setting(key, bad))),
                key,
                "{key}={bad}"
            );
        }
        assert!(fx.load(&with_setting(key, "0.05")).is_ok());
        assert!(fx.load(&with_setting(key, "86400")).is_ok());
    }
    assert!(
        fx.load(&with_setting("reconnect_jitter_seconds", "0"))
            .is_ok()
    );
}

#[test]
fn reconnect_delays_below_the_floor_are_refused() {
    let fx = Fixture::new();
    for key in ["reconnect_base_delay", "reconnect_max_delay"] {
        for bad in ["0", "0.049"] {
            let error = fx.error(&with_setting(key, bad));
            assert_eq!(invalid_key(&error), key, "{key}={bad}");
            assert!(error.to_string().contains("from 0.05 to 86400"), "{error}");
        }
    }
}

#[test]
fn display_name_must_have_1_to_128_characters() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&fx.file("display_name = \"\"\n"))),
        "display_name"
    );
    let long = "é".repeat(129);
    assert_eq!(
        invalid_key(&fx.error(&with_setting("display_name", &long))),
        "display_name"
    );
    let max = "é".repeat(128);
    assert_eq!(
        fx.config(&with_setting("display_name", &max)).display_name,
        max
    );
}

#[test]
fn display_name_defaults_to_the_host_name_within_the_limit() {
    let fx = Fixture::new();
    let mut ctx = fx.context();
    ctx.host.hostname = "h".repeat(200);
    let config = load(&Overrides::default(), &ctx).unwrap().config;
    assert_eq!(config.display_name, "h".repeat(128));
    ctx.host.hostname = String::new();
    let config = load(&Overrides::default(), &ctx).unwrap().config;
    assert!(!config.display_name.is_empty());
}

#[test]
fn oauth_redirect_port_must_leave_room_for_12_ports() {
    let fx = Fixture::new();
    for bad in ["1023", "65525", "70000", "-1"] {
        assert_eq!(
            invalid_key(&fx.error(&with_setting("oauth_redirect_port", bad))),
            "oauth_redirect_port"
        );
    }
    assert_eq!(
        fx.config(&with_setting("oauth_redirect_port", "1024"))
            .oauth_redirect_port,
        1024
    );
    assert_eq!(
        fx.config(&with_setting("oauth_redirect_port", "65524"))
            .oauth_redirect_port,
        65524
    );
}

#[test]
fn oauth_redirect_port_other_than_41899_is_a_warning() {
    let fx = Fixture::new();
    let loaded = fx
        .load(&with_setting("oauth_redirect_port", "41900"))
        .unwrap();
    assert_eq!(
        loaded.warnings,
        vec![ConfigWarning::RedirectPortUnregistered { port: 41900 }]
    );
}

#[test]
fn empty_oauth_client_id_is_refused() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&fx.file("oauth_client_id = \"\"\n"))),
        "oauth_client_id"
    );
}

#[test]
fn tls_pins_are_comma_separated_lowercase_hex_digests() {
    let fx = Fixture::new();
    let a = "0".repeat(64);
    let b = "f".repeat(64);
    let config = fx.config(&Overrides {
        tls_pin_sha256: Some(format!("{a}, {b}")),
        ..Overrides::default()
    });
    assert_eq!(config.tls_pin_sha256, vec![[0u8; 32], [0xff; 32]]);
    for bad in [
        "F".repeat(64),
        "0".repeat(63),
        "0".repeat(65),
        format!("{a},"),
        format!("{a},,{b}"),
        "g".repeat(64),
    ] {
        let error = fx.error(&Overrides {
            tls_pin_sha256: Some(bad.clone()),
            ..Overrides::default()
        });
        assert_eq!(invalid_key(&error), "tls_pin_sha256", "{bad}");
        assert!(error.to_string().contains("--tls-pin-sha256"));
    }
}

#[test]
fn an_empty_pin_in_any_source_leaves_the_pin_to_the_next_source() {
    let file_pin = "ab".repeat(32);
    let env_pin = "cd".repeat(32);
    let fx = Fixture::new().env("AUTOGPT_SHIM_TLS_PIN_SHA256", &env_pin);
    let empty_flag = Overrides {
        tls_pin_sha256: Some(String::new()),
        ..fx.file(&format!("tls_pin_sha256 = \"{file_pin}\"\n"))
    };
    assert_eq!(fx.config(&empty_flag).tls_pin_sha256, vec![[0xab; 32]]);
    let empty_file_and_flag = Overrides {
        tls_pin_sha256: Some(String::new()),
        ..fx.file("tls_pin_sha256 = \"\"\n")
    };
    assert_eq!(
        fx.config(&empty_file_and_flag).tls_pin_sha256,
        vec![[0xcd; 32]]
    );
    let nothing = Fixture::new();
    let only_empty = Overrides {
        tls_pin_sha256: Some(String::new()),
        ..Overrides::default()
    };
    assert!(nothing.config(&only_empty).tls_pin_sha256.is_empty());
}

#[test]
fn ollama_url_must_be_http_or_https() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&with_setting("ollama_url", "ftp://x"))),
        "ollama_url"
    );
    assert_eq!(
        fx.config(&with_setting("ollama_url", "http://gpu-box.lan:11434/"))
            .ollama_url,
        "http://gpu-box.lan:11434"
    );
}

// --- URLs in keys (AUTH.md §1 hardening note) ------------------------------

#[test]
fn plain_http_platform_url_to_loopback_is_accepted() {
    let fx = Fixture::new();
    let config = fx.config(&with_setting("platform_url", "http://localhost:8000"));
    assert_eq!(
        config.endpoints.ws_base(),
        "ws://localhost:8000/ws/local-executor"
    );
}

#[test]
fn plain_ws_to_non_loopback_host_is_refused() {
    let fx = Fixture::new();
    let error = fx.error(&with_setting(
        "platform_ws_url",
        "ws://platform.example.com/ws",
    ));
    assert_eq!(invalid_key(&error), "platform_ws_url");
    let error = fx.error(&with_setting("platform_url", "http://10.0.0.1:8000"));
    assert_eq!(invalid_key(&error), "platform_url");
}

#[test]
fn override_urls_are_restricted_to_their_schemes() {
    let fx = Fixture::new();
    assert_eq!(
        invalid_key(&fx.error(&with_setting("platform_ws_url", "https://x.example.com"))),
        "platform_ws_url"
    );
    assert_eq!(
        invalid_key(&fx.error(&with_setting("platform_oauth_url", "wss://x.example.com"))),
        "platform_oauth_url"
    );
    assert_eq!(
        invalid_key(&fx.error(&with_setting("platform_url", "ftp://x.example.com"))),
        "platform_url"
    );
}

#[test]
fn url_errors_do_not_echo_the_url() {
    let fx = Fixture::new();
    let error = fx.error(&with_setting(
        "platform_url",
        "https://user:s3cret@example.com",
    ));
    assert!(!error.to_string().contains("s3cret"), "{error}");
}

#[test]
fn empty_override_url_means_unset() {
    let fx = Fixture::new();
    let config = fx.config(&fx.file("platform_ws_url = \"\"\n"));
    assert_eq!(config.platform_ws_url, None);
}

// --- session id and mode (CLI.md §4.2, CONTROL.md §16) ---------------------

#[test]
fn blank_session_id_selects_control_mode() {
    let fx = Fixture::new();
    for blank in ["", "   ", "\t\n"] {
        let config = fx.config(&Overrides {
            session_id: Some(blank.into()),
            ..Overrides::default()
        });
        assert_eq!(config.mode, Mode::Control, "{blank:?}");
        assert_eq!(config.session_id(), None);
    }
}

#[test]
fn session_id_is_trimmed_and_selects_legacy_mode() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_SESSION_ID", "  session-123 ");
    let config = fx.config(&Overrides::default());
    assert_eq!(
        config.mode,
        Mode::Legacy {
            session_id: "session-123".into()
        }
    );
    assert_eq!(
        config.endpoints.session_url(config.session_id().unwrap()),
        "wss://platform.autogpt.net/ws/local-executor/session-123"
    );
}

#[test]
fn session_id_outside_the_pattern_is_refused() {
    let fx = Fixture::new();
    for bad in ["-start", "a/b", "a b", "a?b", "a%2F", "é", &"a".repeat(257)] {
        let error = fx.error(&Overrides {
            session_id: Some(bad.into()),
            ..Overrides::default()
        });
        assert_eq!(invalid_key(&error), "session_id", "{bad}");
    }
    let config = fx.config(&Overrides {
        session_id: Some(format!("A{}", "._:-z".repeat(51))),
        ..Overrides::default()
    });
    assert!(matches!(config.mode, Mode::Legacy { .. }));
}

// --- machine id and host facts ----------------------------------------------

#[test]
fn configured_machine_id_is_used_verbatim() {
    let fx = Fixture::new().env("AUTOGPT_SHIM_MACHINE_ID", " Mixed-Case ID ");
    let config = fx.config(&Overrides::default());
    assert_eq!(config.machine_id().unwrap(), " Mixed-Case ID ");
}

#[test]
fn unsupported_architecture_is_reported_when_asked() {
    let fx = Fixture::new();
    let mut ctx = fx.context();
    ctx.host.machine = "riscv64".into();
    ctx.host.platform = None;
    ctx.host.os_name = "freebsd".into();
    let config = load(&Overrides::default(), &ctx).unwrap().config;
    assert!(matches!(
        config.host.arch(),
        Err(ConfigError::UnsupportedArch { .. })
    ));
    assert!(matches!(
        config.host.platform(),
        Err(ConfigError::UnsupportedPlatform { .. })
    ));
}
