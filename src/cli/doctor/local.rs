//! The checks of `doctor` that stay on this machine (CLI.md §10.2 and this
//! shim's own): the session root or folder browsing, the `HELLO` values,
//! the keychain, the secret store and its tokens, the audit log and its
//! chain, the platform's display checks, the command containment and the
//! autostart entry.
//!
//! Each check asks the module that owns the matter, in its read-only form:
//! nothing here creates a file or folder (a missing default root, audit
//! directory or machine-id file is reported as what `start` will create),
//! stores a secret, or prompts. The access token found is handed back for
//! the upgrade check and never shown.

use zeroize::Zeroizing;

use super::Check;
use crate::audit::verify::read_current_with_anchor;
use crate::audit::writer::{Location, inspect_location};
use crate::cli::VERSION;
use crate::config::autostart::Autostart;
use crate::config::autostart::manager::{self, UserManager};
use crate::config::{Config, Environment, Mode, Platform};
use crate::control::browse::{RootSources, virtual_roots};
use crate::desktop;
use crate::exec::spawner::{Containment, Mechanism};
use crate::jail::roots::{self, Inspected};
use crate::protocol::hello_rules;
use crate::secrets::{
    Keychain, KeychainUnusable, SecretError, SecretStore, Tokens, file_store_present,
};
use crate::text::{one_line, shown};

/// What the local checks found.
pub struct Local {
    /// Their lines, in order.
    pub checks: Vec<Check>,
    /// The stored access token, for the upgrade check.
    pub access_token: Option<Zeroizing<String>>,
}

/// Runs the local checks in their order.
pub fn checks(config: &Config, env: &Environment) -> Local {
    let mut checks = Vec::new();
    let (root_check, root) = session_root(config, env);
    checks.push(root_check);
    checks.push(identity(config, root.as_deref()));

    let probe = Keychain::probe();
    let usable_keychain = probe.as_ref().ok().cloned();
    let unusable = probe.as_ref().err().cloned();
    let selected = SecretStore::select_with(probe, &config.paths, env);
    checks.push(keychain(
        config,
        usable_keychain.as_ref(),
        unusable.as_ref(),
        &selected,
    ));
    let (store, store_error) = match selected {
        Ok(selected) => (Some(selected.store), None),
        Err(e) => (None, Some(e)),
    };
    let (store_check, tokens) = secret_store(store.as_ref(), store_error.as_ref());
    checks.push(store_check);

    checks.push(audit_log(config));
    checks.push(audit_chain(config, store.as_ref()));
    checks.extend(platform_checks(
        config.host.platform,
        &config.host.os_name,
        &|name| {
            env.get_non_empty(name)
                .map(|v| v.to_string_lossy().into_owned())
        },
        Requested {
            computer_use: config.enable_computer_use,
            clipboard: config.enable_clipboard,
        },
    ));
    checks.extend(desktop_checks(config, &|name| {
        env.get_non_empty(name)
            .map(|v| v.to_string_lossy().into_owned())
    }));
    checks.push(local_llm(config));
    checks.push(hardware_devices(
        config.enable_hardware,
        &crate::hardware::Roots::system(),
    ));
    checks.push(command_sandbox(crate::exec::CommandSandbox::decide(
        config.command_sandbox,
        config.command_network,
        config.command_sandbox_fallback,
        &std::env::current_exe().unwrap_or_default(),
    )));
    checks.push(containment());
    checks.push(autostart(config, env));

    let access_token = tokens
        .and_then(|tokens| tokens.access)
        .map(|token| Zeroizing::new(token.expose().to_owned()));
    Local {
        checks,
        access_token,
    }
}

/// §10.2 item 1: the legacy session root, or the roots folder browsing
/// offers. Returns the canonical legacy root when it is usable.
fn session_root(config: &Config, env: &Environment) -> (Check, Option<String>) {
    let wsl = config.host.platform == Some(Platform::Wsl2);
    match &config.mode {
        Mode::Control => {
            // The configured allowed_root plays no part here and is not
            // created (CLI.md §8).
            let roots = virtual_roots(&RootSources {
                home: config.paths.home.clone(),
                wsl,
            });
            let check = if roots.is_empty() {
                Check::fail(
                    "folder_browser",
                    format!(
                        "no accessible host root: the home folder {} cannot be listed; \
                         a chat could not pick any folder",
                        shown(&config.paths.home)
                    ),
                )
            } else {
                Check::ok(
                    "folder_browser",
                    format!("{} accessible host root(s)", roots.len()),
                )
            };
            (check, None)
        }
        Mode::Legacy { .. } => {
            let configured = &config.allowed_root;
            let inspected = roots::inspect_legacy_root(
                configured,
                config.allowed_root_is_default(),
                &config.paths.home,
                wsl,
            )
            .and_then(|inspected| {
                if let Inspected::Usable(path) = &inspected {
                    super::super::start::protected_locations(config, env)
                        .check_root(path)
                        .map_err(roots::RootProblem::Protected)?;
                }
                Ok(inspected)
            });
            match inspected {
                Ok(Inspected::Usable(path)) => (
                    Check::ok("allowed_root", format!("{} exists, writable", shown(&path))),
                    path.to_str().map(str::to_owned),
                ),
                Ok(Inspected::WouldCreate) => (
                    Check::ok(
                        "allowed_root",
                        format!(
                            "{} does not exist yet; start creates it (the default root, mode 0700)",
                            shown(configured)
                        ),
                    ),
                    None,
                ),
                Err(problem) => (
                    Check::fail(
                        "allowed_root",
                        format!(
                            "{problem}; set allowed_root (or --allowed-root) to a folder of your own"
                        ),
                    ),
                    None,
                ),
            }
        }
    }
}

/// The values `HELLO` carries from this machine and its configuration,
/// judged by the platform's rules as `start` judges them before it
/// connects; and the platform and architecture `start` needs.
fn identity(config: &Config, root: Option<&str>) -> Check {
    const LABEL: &str = "identity";
    let platform = match config.host.platform() {
        Ok(platform) => platform,
        Err(e) => return Check::fail(LABEL, e.to_string()),
    };
    let arch = match config.host.arch() {
        Ok(arch) => arch,
        Err(e) => return Check::fail(LABEL, e.to_string()),
    };
    let Some(machine_id) = config.existing_machine_id() else {
        // A generated id always satisfies the platform's rule.
        return Check::ok(
            LABEL,
            format!(
                "no machine id yet: start generates one and stores it in {}; {}; {}/{}",
                shown(&config.paths.machine_id_file()),
                display_name_text(config),
                platform.as_str(),
                arch.as_str()
            ),
        );
    };
    match hello_rules::first_refused(&machine_id, &config.display_name, root) {
        None => Check::ok(
            LABEL,
            format!(
                "machine_id {}, {}; {}/{}",
                one_line(&machine_id),
                display_name_text(config),
                platform.as_str(),
                arch.as_str()
            ),
        ),
        Some(field) => Check::fail(
            LABEL,
            format!(
                "{key} {rule}; the platform refuses the connection otherwise: set {key} in the \
                 configuration",
                key = field.key(),
                rule = field.rule()
            ),
        ),
    }
}

fn display_name_text(config: &Config) -> String {
    format!("display_name \"{}\"", one_line(&config.display_name))
}

/// §10.2 item 2: the keychain, probed by a real read.
fn keychain(
    config: &Config,
    usable: Option<&Keychain>,
    unusable: Option<&KeychainUnusable>,
    selected: &Result<crate::secrets::Selected, SecretError>,
) -> Check {
    const LABEL: &str = "keychain";
    if let Some(keychain) = usable {
        if file_store_present(&config.paths) {
            return Check::warn(
                LABEL,
                format!(
                    "{}; {} exists as well and is ignored while the keychain works",
                    keychain.backend_name(),
                    shown(&config.paths.tokens_file())
                ),
            );
        }
        return Check::ok(LABEL, keychain.backend_name());
    }
    let summary = unusable.map_or("no answer", KeychainUnusable::summary);
    let mut detail = format!("unavailable: {summary} (encrypted-file fallback will be used)");
    if matches!(selected, Err(SecretError::NoPassphrase { .. })) {
        detail.push_str(
            "; no passphrase is set: start asks for it on a terminal and otherwise refuses to \
             run unless AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE (or AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE) \
             is set",
        );
    }
    Check::warn(LABEL, detail)
}

/// The secret store in use and the tokens in it (presence only).
fn secret_store(
    store: Option<&SecretStore>,
    error: Option<&SecretError>,
) -> (Check, Option<Tokens>) {
    const LABEL: &str = "secret_store";
    let Some(store) = store else {
        let why = match error {
            Some(SecretError::NoPassphrase { .. }) => {
                "the keychain is unavailable and the encrypted file store has no passphrase: \
                 set AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE or AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE \
                 (doctor never asks for it)"
                    .to_owned()
            }
            Some(e) => e.to_string(),
            None => "no secret store can be used".to_owned(),
        };
        return (Check::fail(LABEL, why), None);
    };
    let location = store.location();
    let tokens = match store.tokens() {
        Ok(tokens) => tokens,
        Err(e) => {
            return (
                Check::fail(LABEL, format!("{location} cannot be read: {e}")),
                None,
            );
        }
    };
    let check = match (&tokens.access, &tokens.refresh) {
        (Some(_), Some(_)) => Check::ok(
            LABEL,
            format!("{location}: access token and refresh token present"),
        ),
        (None, None) => Check::fail(
            LABEL,
            format!("no tokens stored in {location}: run `autogpt-shim auth`"),
        ),
        (None, Some(_)) => Check::warn(
            LABEL,
            format!(
                "{location}: refresh token present, no access token: start obtains one with \
                 the refresh token (the upgrade cannot be checked without one)"
            ),
        ),
        (Some(_), None) => Check::warn(
            LABEL,
            format!(
                "{location}: access token present, no refresh token: once the access token \
                 expires, run `autogpt-shim auth` again"
            ),
        ),
    };
    (check, Some(tokens))
}

/// §10.2 item 3: where the audit log would be opened.
fn audit_log(config: &Config) -> Check {
    const LABEL: &str = "audit_log";
    let path = &config.audit_log_path;
    match inspect_location(path, config.audit_log_is_default()) {
        Ok(Location::Existing) => Check::ok(LABEL, format!("{} writable, owner-only", shown(path))),
        Ok(Location::NewFile) => Check::ok(
            LABEL,
            format!("{} does not exist yet; start creates it", shown(path)),
        ),
        Ok(Location::NewDirectory(ancestor)) => Check::ok(
            LABEL,
            format!(
                "{} does not exist yet; start creates its folder below {}",
                shown(path),
                shown(&ancestor)
            ),
        ),
        Err(why) => Check::fail(
            LABEL,
            format!("{why}; start refuses to run without its mandatory audit log"),
        ),
    }
}

/// `audit verify` of the current file: its chain and tail anchor, with the
/// stored audit key (never created here).
fn audit_chain(config: &Config, store: Option<&SecretStore>) -> Check {
    const LABEL: &str = "audit_chain";
    let path = &config.audit_log_path;
    match crate::audit::files::current_exists(path) {
        Ok(true) => {}
        Ok(false) => return Check::info(LABEL, "no audit log yet: nothing to verify"),
        Err(e) => {
            return Check::fail(
                LABEL,
                format!("cannot read {}: {}", shown(path), one_line(&e.to_string())),
            );
        }
    }
    let Some(store) = store else {
        return Check::info(
            LABEL,
            "skipped: the audit key is in the secret store (see secret_store)",
        );
    };
    let mut check = super::super::legacy_key_check(path);
    let key = match store.audit_key_read_only(&mut check) {
        Ok(key) => key,
        Err(e @ SecretError::NoAuditKey { .. }) => {
            return Check::warn(
                LABEL,
                format!(
                    "{e}, so {} cannot be verified: start creates a new key and closes this \
                     file off under its own name",
                    shown(path)
                ),
            );
        }
        Err(e) => return Check::fail(LABEL, format!("could not load the audit key: {e}")),
    };
    let read = match read_current_with_anchor(path, &key, VERSION) {
        Ok(read) => read,
        Err(e) => {
            return Check::fail(
                LABEL,
                format!("cannot read {}: {}", shown(path), one_line(&e.to_string())),
            );
        }
    };
    let mut violations = crate::audit::verify::verify_bytes(&read.bytes, &key);
    violations.extend(read.anchor_violations);
    let name = crate::audit::files::base_name(path);
    match violations.first() {
        None => {
            let records = read
                .bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count();
            Check::ok(
                LABEL,
                format!("{name}: {records} record(s); chain and tail anchor verified"),
            )
        }
        Some(first) => Check::fail(
            LABEL,
            format!(
                "{name}: {} violation(s), the first: {first}; run `autogpt-shim audit verify` \
                 for all of them",
                violations.len()
            ),
        ),
    }
}

/// What the configuration asks of the desktop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requested {
    /// `enable_computer_use`.
    pub computer_use: bool,
    /// `enable_clipboard`.
    pub clipboard: bool,
}

/// §10.2 item 4, for `platform` (`None`: an OS the platform does not
/// support, named `os_name`); `var` reads a non-empty environment
/// variable. On Linux the display is probed the way computer use would
/// (read-only); a build without computer-use support reports what it
/// would probe as unavailable. Blocking exactly where §10.2 makes the
/// check block when computer use is requested.
pub fn platform_checks(
    platform: Option<Platform>,
    os_name: &str,
    var: &dyn Fn(&str) -> Option<String>,
    requested: Requested,
) -> Vec<Check> {
    const NOT_BUILT: &str = "computer use is not built in";
    match platform {
        Some(Platform::Linux) => {
            let mut checks = vec![display_server(var, requested.computer_use)];
            let inspection = desktop::inspect(var("DISPLAY").as_deref());
            checks.push(match &inspection {
                desktop::Inspection::NotBuilt => Check::warn(
                    "wmctrl",
                    "window management is not built in (window listing and focus unavailable)",
                ),
                desktop::Inspection::Reachable {
                    window_management: true,
                    ..
                } => Check::ok("wmctrl", "EWMH window manager found"),
                desktop::Inspection::Reachable { .. } => Check::warn(
                    "wmctrl",
                    "the window manager does not support EWMH (window listing and focus \
                     unavailable)",
                ),
                desktop::Inspection::Unreachable(why) => Check::warn(
                    "wmctrl",
                    format!(
                        "no display: {} (window listing and focus unavailable)",
                        one_line(why)
                    ),
                ),
            });
            if requested.clipboard {
                checks.push(match &inspection {
                    desktop::Inspection::NotBuilt => Check::warn(
                        "clipboard tools",
                        "clipboard support is not built in (clipboard operations unavailable)",
                    ),
                    desktop::Inspection::Reachable { .. } => {
                        Check::ok("clipboard tools", "native X11 CLIPBOARD selection")
                    }
                    desktop::Inspection::Unreachable(why) => Check::warn(
                        "clipboard tools",
                        format!(
                            "no display: {} (clipboard operations unavailable)",
                            one_line(why)
                        ),
                    ),
                });
            }
            checks
        }
        Some(Platform::Wsl2) => vec![
            Check::warn(
                "display_server",
                "WSL2: no display is reachable for computer use",
            )
            .blocking(requested.computer_use),
        ],
        Some(Platform::Darwin) => {
            let permission = |label| {
                Check::warn(label, format!("cannot be probed: {NOT_BUILT}"))
                    .blocking(requested.computer_use)
            };
            let computer_use = if requested.computer_use {
                Check::warn("computer_use", format!("degraded - missing: {NOT_BUILT}"))
            } else {
                Check::info("computer_use", "not requested in config")
            };
            vec![
                permission("Accessibility"),
                permission("Screen Recording"),
                computer_use,
            ]
        }
        Some(Platform::Windows) => vec![Check::info(
            "UAC",
            format!(
                "elevation not checked ({NOT_BUILT}); a non-elevated shim cannot inject input \
                 into elevated windows"
            ),
        )],
        None => vec![Check::warn(
            "platform",
            format!("{} is not a platform the shim supports", one_line(os_name)),
        )],
    }
}

/// §10.2 item 5, `display`: the monitors computer use would see, and this
/// shim's own `screenshot_mask` line: what every screenshot leaves black.
fn desktop_checks(config: &Config, var: &dyn Fn(&str) -> Option<String>) -> Vec<Check> {
    let display = match desktop::inspect(var("DISPLAY").as_deref()) {
        desktop::Inspection::NotBuilt => Check::warn("display", "computer use not built in"),
        desktop::Inspection::Unreachable(why) => {
            Check::warn("display", format!("none found: {}", one_line(&why)))
        }
        desktop::Inspection::Reachable {
            monitors: Err(why), ..
        } => Check::warn(
            "display",
            format!("the displays cannot be enumerated: {}", one_line(&why)),
        ),
        desktop::Inspection::Reachable {
            monitors: Ok(monitors),
            ..
        } if monitors.is_empty() => Check::warn("display", "none found"),
        desktop::Inspection::Reachable {
            monitors: Ok(monitors),
            ..
        } => {
            let sizes: Vec<String> = monitors
                .iter()
                .map(|m| format!("{}x{}", m.w, m.h))
                .collect();
            Check::ok(
                "display",
                format!("{} display(s): {}", monitors.len(), sizes.join(" + ")),
            )
        }
    };
    let mut checks = vec![display];
    if desktop::BUILT {
        let (classes, titles) = desktop::MaskRules::built_in();
        let mut detail = format!(
            "{} password-manager and passphrase-prompt window classes and {} title patterns \
             always masked",
            classes.len(),
            titles.len()
        );
        let entries = config.screenshot_mask.entries();
        if !entries.is_empty() {
            let shown: Vec<String> = entries.iter().map(|e| one_line(e)).collect();
            detail.push_str(&format!("; also {}", shown.join(", ")));
        }
        checks.push(Check::info("screenshot_mask", detail));
    }
    checks
}

/// `local_llm` (this shim's own): the model list `start` would advertise,
/// asked of Ollama the same way (CAPABILITIES.md §5.1). Never blocking: a
/// local LLM that is down only leaves the capability out.
fn local_llm(config: &Config) -> Check {
    const LABEL: &str = "local_llm";
    if !config.enable_local_llm {
        return Check::info(LABEL, "not requested in config");
    }
    let llm = crate::llm::LocalLlm::new(true, &config.ollama_url);
    let url = one_line(llm.url());
    match llm.models() {
        Ok(models) if models.is_empty() => Check::warn(
            LABEL,
            format!("{url} answers but has no models: the capability will not be offered"),
        ),
        Ok(models) => {
            let names: Vec<String> = models.iter().map(|m| one_line(m)).collect();
            Check::ok(
                LABEL,
                format!("{url}: {} model(s): {}", models.len(), names.join(", ")),
            )
        }
        Err(why) => Check::warn(
            LABEL,
            format!(
                "{url} cannot be reached ({}): the capability will not be offered",
                one_line(&why)
            ),
        ),
    }
}

/// `hardware` (this shim's own): with `enable_hardware`, the devices `start`
/// would list in `HELLO.hardware_devices` and the capabilities it would
/// advertise (CAPABILITIES.md §6). Never blocking.
fn hardware_devices(enabled: bool, roots: &crate::hardware::Roots) -> Check {
    const LABEL: &str = "hardware";
    if !enabled {
        return Check::info(LABEL, "not requested in config");
    }
    let support = crate::hardware::support(roots);
    let capabilities: Vec<&str> = [
        ("hardware_serial", support.serial),
        ("hardware_usb", support.usb),
        ("hardware_gpio", support.gpio),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if capabilities.is_empty() {
        return Check::warn(
            LABEL,
            "no serial, USB or GPIO support found: nothing will be offered",
        );
    }
    let devices = crate::hardware::discover(roots);
    let named: Vec<String> = devices
        .iter()
        .map(|device| {
            let field = |key: &str| device.get(key).and_then(serde_json::Value::as_str);
            let place = field("port")
                .or_else(|| field("chip"))
                .map(str::to_owned)
                .or_else(|| Some(format!("{}:{}", field("vid")?, field("pid")?)))
                .unwrap_or_default();
            one_line(&format!("{} {place}", field("type").unwrap_or("device")))
        })
        .collect();
    let found = if named.is_empty() {
        "no devices found".to_owned()
    } else {
        format!("{} device(s): {}", named.len(), named.join(", "))
    };
    Check::ok(LABEL, format!("{}; {found}", capabilities.join(", ")))
}

/// `command_sandbox` (this shim's own): what `start` would decide for the
/// commands' filesystem and network sandboxes, with the same probes.
/// Blocking exactly when `start` would refuse to run.
fn command_sandbox(decided: Result<crate::exec::CommandSandbox, String>) -> Check {
    const LABEL: &str = "command_sandbox";
    match decided {
        Ok(sandbox) if sandbox == crate::exec::CommandSandbox::default() => {
            Check::info(LABEL, sandbox.describe())
        }
        Ok(sandbox) if !sandbox.missing().is_empty() => Check::warn(
            LABEL,
            format!(
                "{} requested but UNAVAILABLE: commands run without it \
                 (command_sandbox_fallback = \"unconfined\"); {}",
                sandbox.missing().join(" and "),
                sandbox.describe()
            ),
        ),
        Ok(sandbox) => Check::ok(LABEL, sandbox.describe()),
        Err(why) => Check::fail(LABEL, one_line(&why)).blocking(true),
    }
}

/// Linux `display_server`: the session type from `XDG_SESSION_TYPE`, else
/// Wayland when `WAYLAND_DISPLAY` is set, else X11 when `DISPLAY` is; a
/// set `WAYLAND_DISPLAY` makes an `x11` session Wayland too, as computer
/// use is never advertised then (CAPABILITIES.md §2).
fn display_server(var: &dyn Fn(&str) -> Option<String>, computer_use: bool) -> Check {
    const LABEL: &str = "display_server";
    let wayland_display = var("WAYLAND_DISPLAY").is_some();
    let session = match var("XDG_SESSION_TYPE").map(|t| t.to_lowercase()) {
        Some(t) if t == "x11" && wayland_display => "wayland".to_owned(),
        Some(t) => t,
        None if wayland_display => "wayland".to_owned(),
        None if var("DISPLAY").is_some() => "x11".to_owned(),
        None => String::new(),
    };
    match session.as_str() {
        "x11" => Check::ok(LABEL, "x11"),
        "wayland" => Check::warn(
            LABEL,
            "wayland: computer use cannot inject input here (it needs an X11 session)",
        )
        .blocking(computer_use),
        "" => Check::warn(
            LABEL,
            "none found (XDG_SESSION_TYPE, WAYLAND_DISPLAY and DISPLAY are unset): no desktop \
             for computer use",
        ),
        other => Check::warn(
            LABEL,
            format!(
                "unknown session type {}: no desktop for computer use",
                one_line(other)
            ),
        ),
    }
}

/// How the commands of `--enable-shell` would be contained (EXEC.md §11)
/// for a daemon started the way this process was: the cgroup found is
/// this process's own.
fn containment() -> Check {
    const LABEL: &str = "containment";
    let available = Containment::probe();
    match available.mechanism {
        Mechanism::Cgroup => Check::ok(LABEL, format!("{available} when started from here")),
        Mechanism::Subreaper | Mechanism::Uncontained => Check::warn(
            LABEL,
            format!(
                "{available} when started from here; a delegated cgroup v2 (the shim started \
                 inside `systemd-run --user --scope`, or by a service with one) also stops \
                 commands that leave their process group"
            ),
        ),
    }
}

/// The autostart entry of CLI.md §9 and, on Linux and WSL2, what the
/// systemd user manager says of it.
fn autostart(config: &Config, env: &Environment) -> Check {
    const LABEL: &str = "autostart";
    let Some(platform) = config.host.platform else {
        return Check::info(
            LABEL,
            format!("not available on {}", one_line(&config.host.os_name)),
        );
    };
    let entry = Autostart::of(platform, &config.paths);
    let target = shown(&entry.target);
    if !entry.is_installed() {
        return Check::info(
            LABEL,
            format!(
                "not installed (optional): `autogpt-shim install` writes {target} to start the \
                 shim at login"
            ),
        );
    }
    if !matches!(platform, Platform::Linux | Platform::Wsl2) {
        return Check::ok(
            LABEL,
            format!(
                "{target} installed; it is active once `{}` has run",
                entry.enable
            ),
        );
    }
    match UserManager::detect(env) {
        UserManager::Running { runtime_dir } => match manager::query(env, &runtime_dir) {
            Ok(state)
                if state.file == "enabled" && state.active == "active" && !state.needs_reload =>
            {
                Check::ok(LABEL, format!("{target}: {}", state.describe()))
            }
            Ok(state) => Check::warn(
                LABEL,
                format!(
                    "{target}: {}; to run it: {}",
                    state.describe(),
                    entry.enable
                ),
            ),
            Err(why) => Check::warn(
                LABEL,
                format!("{target} installed; the service manager's state is unknown: {why}"),
            ),
        },
        other => Check::warn(
            LABEL,
            format!(
                "{target} installed, but {}",
                other.problem(platform).unwrap_or_default()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::doctor::Marker;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn blocks(checks: &[Check]) -> bool {
        checks.iter().any(|c| c.blocking)
    }

    #[test]
    fn the_sandbox_line_blocks_exactly_where_start_would_refuse() {
        use crate::exec::{CommandSandbox, FsSandbox, NetSandbox, SandboxFallback, SandboxMode};
        let missing = || Err("no Landlock here".to_owned());
        let refused = command_sandbox(
            FsSandbox::decide(SandboxMode::Workspace, SandboxFallback::Refuse, missing).map(|fs| {
                CommandSandbox {
                    fs,
                    net: NetSandbox::Off,
                }
            }),
        );
        assert_eq!(refused.marker, Marker::Fail);
        assert!(refused.blocking);
        let unconfined = command_sandbox(
            FsSandbox::decide(SandboxMode::Workspace, SandboxFallback::Unconfined, missing).map(
                |fs| CommandSandbox {
                    fs,
                    net: NetSandbox::Off,
                },
            ),
        );
        assert_eq!(unconfined.marker, Marker::Warn);
        assert!(!unconfined.blocking);
        assert!(
            unconfined.detail.contains("Landlock"),
            "{}",
            unconfined.detail
        );
        let no_namespace = command_sandbox(Ok(CommandSandbox {
            fs: FsSandbox::Off,
            net: NetSandbox::Unavailable,
        }));
        assert_eq!(no_namespace.marker, Marker::Warn);
        assert!(no_namespace.detail.contains("network isolation"));
        let isolated = command_sandbox(Ok(CommandSandbox {
            fs: FsSandbox::Off,
            net: NetSandbox::Namespace,
        }));
        assert_eq!(isolated.marker, Marker::Ok);
        let off = command_sandbox(Ok(CommandSandbox::default()));
        assert_eq!(off.marker, Marker::Info);
    }

    #[test]
    fn the_hardware_line_names_what_would_be_advertised() {
        let tree = tempfile::tempdir().unwrap();
        let roots = crate::hardware::Roots {
            sys: tree.path().join("sys"),
            dev: tree.path().join("dev"),
        };
        std::fs::create_dir_all(&roots.dev).unwrap();
        assert_eq!(hardware_devices(false, &roots).marker, Marker::Info);
        let nothing = hardware_devices(true, &roots);
        assert_eq!(nothing.marker, Marker::Warn);
        assert!(!nothing.blocking);
        std::fs::create_dir_all(roots.sys.join("class/tty")).unwrap();
        let serial = hardware_devices(true, &roots);
        assert_eq!(serial.marker, Marker::Ok);
        assert_eq!(serial.detail, "hardware_serial; no devices found");
    }

    const COMPUTER_USE: Requested = Requested {
        computer_use: true,
        clipboard: false,
    };

    #[test]
    fn wayland_with_computer_use_blocks_and_x11_does_not() {
        let wayland = platform_checks(
            Some(Platform::Linux),
            "linux",
            &vars(&[("XDG_SESSION_TYPE", "Wayland")]),
            COMPUTER_USE,
        );
        assert_eq!(wayland[0].label, "display_server");
        assert!(blocks(&wayland), "{wayland:?}");

        let x11 = platform_checks(
            Some(Platform::Linux),
            "linux",
            &vars(&[("XDG_SESSION_TYPE", "x11"), ("DISPLAY", ":0")]),
            COMPUTER_USE,
        );
        assert_eq!(x11[0].marker, super::super::Marker::Ok);
        assert!(!blocks(&x11), "{x11:?}");

        let off = platform_checks(
            Some(Platform::Linux),
            "linux",
            &vars(&[("XDG_SESSION_TYPE", "wayland")]),
            Requested::default(),
        );
        assert!(!blocks(&off), "{off:?}");
    }

    #[test]
    fn a_wayland_display_overrides_an_x11_session_type() {
        let checks = platform_checks(
            Some(Platform::Linux),
            "linux",
            &vars(&[
                ("XDG_SESSION_TYPE", "x11"),
                ("WAYLAND_DISPLAY", "wayland-0"),
            ]),
            COMPUTER_USE,
        );
        assert!(checks[0].detail.starts_with("wayland"), "{checks:?}");
        assert!(blocks(&checks));
    }

    #[test]
    fn the_session_type_falls_back_to_the_display_variables() {
        let display = |pairs| {
            platform_checks(
                Some(Platform::Linux),
                "linux",
                &vars(pairs),
                Requested::default(),
            )
            .remove(0)
        };
        assert_eq!(display(&[("DISPLAY", ":1")]).detail, "x11");
        assert!(
            display(&[("WAYLAND_DISPLAY", "w")])
                .detail
                .starts_with("wayland")
        );
        let none = display(&[]);
        assert_eq!(none.marker, super::super::Marker::Warn);
        assert!(!none.blocking);
    }

    #[test]
    fn wsl2_with_computer_use_blocks() {
        let on = platform_checks(Some(Platform::Wsl2), "linux", &vars(&[]), COMPUTER_USE);
        assert_eq!(on.len(), 1);
        assert!(blocks(&on));
        let off = platform_checks(
            Some(Platform::Wsl2),
            "linux",
            &vars(&[]),
            Requested::default(),
        );
        assert!(!blocks(&off));
    }

    #[test]
    fn macos_permissions_block_only_with_computer_use() {
        let off = platform_checks(
            Some(Platform::Darwin),
            "macos",
            &vars(&[]),
            Requested::default(),
        );
        let labels: Vec<_> = off.iter().map(|c| c.label).collect();
        assert_eq!(
            labels,
            ["Accessibility", "Screen Recording", "computer_use"]
        );
        assert!(!blocks(&off));
        assert_eq!(off[2].detail, "not requested in config");
        let on = platform_checks(Some(Platform::Darwin), "macos", &vars(&[]), COMPUTER_USE);
        assert!(
            on[0].blocking && on[1].blocking && !on[2].blocking,
            "{on:?}"
        );
    }

    #[test]
    fn the_clipboard_is_checked_only_when_enabled() {
        let with = platform_checks(
            Some(Platform::Linux),
            "linux",
            &vars(&[]),
            Requested {
                computer_use: false,
                clipboard: true,
            },
        );
        assert!(with.iter().any(|c| c.label == "clipboard tools"));
        let without = platform_checks(
            Some(Platform::Linux),
            "linux",
            &vars(&[]),
            Requested::default(),
        );
        assert!(!without.iter().any(|c| c.label == "clipboard tools"));
    }

    #[test]
    fn other_systems_get_a_platform_warning_that_does_not_block() {
        let checks = platform_checks(None, "freebsd", &vars(&[]), COMPUTER_USE);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].label, "platform");
        assert!(!blocks(&checks));
    }
}
