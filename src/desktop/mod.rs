//! Computer use and the clipboard (CAPABILITIES.md §2, §4): what HELLO may
//! advertise, and the eleven requests that drive the user's desktop.
//!
//! This module owns the machine-wide desktop state — one lock that every
//! operation of every session holds for its whole run, the X11 connections,
//! the clipboard writeback registry and the mask rules — and each
//! operation's order of checks. It says what happened ([`DesktopError`]);
//! the data-plane handlers choose the wire codes. It never logs or records
//! typed text or clipboard content, and it never shows a masked window.
//!
//! The X11 backend exists only in builds with the `desktop` feature; without
//! it nothing is ever advertised and every operation is refused.

mod apps;
#[cfg(all(feature = "desktop", target_os = "linux"))]
mod encode;
pub mod error;
pub mod geometry;
pub mod keys;
pub mod mask;
mod ops;
#[cfg(all(feature = "desktop", target_os = "linux"))]
mod writeback;
#[cfg(all(feature = "desktop", target_os = "linux"))]
mod x11;

#[cfg(all(feature = "desktop", target_os = "linux"))]
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

pub use error::{Concealment, DesktopError, Payload};
pub use mask::MaskRules;
pub use ops::{Limits, Outcome};

/// Whether this build can drive a desktop at all.
pub const BUILT: bool = cfg!(all(feature = "desktop", target_os = "linux"));

/// The user's switches and the facts of the machine the desktop depends on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `enable_computer_use`.
    pub enabled: bool,
    /// `enable_clipboard`.
    pub clipboard: bool,
    /// `enable_clipboard_read_foreign`.
    pub clipboard_read_foreign: bool,
    /// The built-in and configured mask rules.
    pub mask: MaskRules,
    /// WSL2 never gets a desktop backend.
    pub wsl: bool,
    /// `$DISPLAY`, when set and non-empty.
    pub display: Option<String>,
    /// `XDG_SESSION_TYPE` is `wayland` or `WAYLAND_DISPLAY` is non-empty.
    pub wayland: bool,
    /// Working directory of launched applications.
    pub home: PathBuf,
    /// Environment of launched applications: the shim's own.
    pub launch_env: Arc<Vec<(OsString, OsString)>>,
}

impl Settings {
    /// `display` and `wayland` from an environment.
    pub fn session_from_env(env: &[(OsString, OsString)]) -> (Option<String>, bool) {
        let get = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.to_str())
                .map(str::to_owned)
        };
        let display = get("DISPLAY").filter(|d| !d.is_empty());
        let wayland = get("XDG_SESSION_TYPE").is_some_and(|t| t.eq_ignore_ascii_case("wayland"))
            || get("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty());
        (display, wayland)
    }
}

/// What `doctor` learns of a display, read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspection {
    /// This build has no desktop support.
    NotBuilt,
    /// No connection (the reason says why: no `DISPLAY`, refused, no XTEST
    /// or RandR).
    Unreachable(String),
    /// Connected, with what the operations would find.
    Reachable {
        /// EWMH window management (CAPABILITIES.md §4.1).
        window_management: bool,
        /// The monitors' rectangles, primary first; `Err` when they cannot
        /// be enumerated.
        monitors: Result<Vec<geometry::Rect>, String>,
    },
}

/// Connects to `display` the way the operations would and reports what it
/// finds; changes nothing on the display.
pub fn inspect(display: Option<&str>) -> Inspection {
    if !BUILT {
        return Inspection::NotBuilt;
    }
    let Some(name) = display.filter(|d| !d.is_empty()) else {
        return Inspection::Unreachable("DISPLAY is not set".into());
    };
    inspect_display(name)
}

#[cfg(all(feature = "desktop", target_os = "linux"))]
fn inspect_display(name: &str) -> Inspection {
    match x11::Display::open(name) {
        Err(reason) => Inspection::Unreachable(reason),
        Ok(display) => Inspection::Reachable {
            window_management: display.window_management(),
            monitors: display
                .monitors()
                .map(|monitors| monitors.into_iter().map(|m| m.rect).collect()),
        },
    }
}

#[cfg(not(all(feature = "desktop", target_os = "linux")))]
fn inspect_display(_name: &str) -> Inspection {
    Inspection::NotBuilt
}

/// Captures of the whole root window on a connection of their own: the
/// bare work of a screenshot without the lock, the mask, the audit record
/// or the wire, which the benchmark measures a screenshot request against.
#[cfg(all(feature = "desktop", target_os = "linux"))]
#[derive(Debug)]
pub struct RootCapture(x11::Display);

#[cfg(all(feature = "desktop", target_os = "linux"))]
impl RootCapture {
    pub fn open(display: &str) -> Result<RootCapture, String> {
        x11::Display::open(display).map(RootCapture)
    }

    /// One capture, encoded as `format` at `quality`.
    pub fn capture(
        &self,
        format: crate::protocol::ImageFormat,
        quality: i64,
    ) -> Result<Vec<u8>, String> {
        let [w, h] = self.0.root_size();
        let image = self.0.capture(geometry::Rect::new(0, 0, w, h))?;
        match format {
            crate::protocol::ImageFormat::Jpeg => encode::jpeg(&image, quality),
            crate::protocol::ImageFormat::Png => encode::png(&image),
        }
    }
}

/// What the dependency check found at one HELLO (CAPABILITIES.md §2, §4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// The backend is usable: `computer_use` may be advertised.
    pub available: bool,
    /// Why not, when it is not.
    pub unavailable_because: Option<String>,
    /// `[w, h]` of the root window.
    pub screen_resolution: Option<[i64; 2]>,
    /// `computer_use_features`.
    pub features: Vec<String>,
    /// `computer_use_features_coarse`.
    pub coarse: Vec<String>,
}

impl Probe {
    fn unavailable(reason: impl Into<String>) -> Probe {
        Probe {
            unavailable_because: Some(reason.into()),
            ..Probe::default()
        }
    }

    pub fn has(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

/// A minted window id's native window and fingerprint (CAPABILITIES.md
/// §4.8).
#[cfg(all(feature = "desktop", target_os = "linux"))]
#[derive(Debug, Clone, PartialEq, Eq)]
struct MintedWindow {
    native: u32,
    pid: i64,
    class: Option<String>,
}

/// One connection's view of the desktop: the features probed at its HELLO
/// (sticky for the connection) and its window ids, wiped at every HELLO
/// (a new connection gets a new view) and every list.
#[derive(Debug)]
pub struct ConnectionDesktop {
    desktop: Arc<Desktop>,
    probe: Probe,
    #[cfg(all(feature = "desktop", target_os = "linux"))]
    windows: Mutex<HashMap<String, MintedWindow>>,
}

impl ConnectionDesktop {
    /// Probes `desktop` for a HELLO about to be sent.
    pub fn probe_for_hello(desktop: &Arc<Desktop>) -> ConnectionDesktop {
        ConnectionDesktop {
            desktop: Arc::clone(desktop),
            probe: desktop.probe(),
            #[cfg(all(feature = "desktop", target_os = "linux"))]
            windows: Mutex::new(HashMap::new()),
        }
    }

    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// Runs one computer-use request.
    pub fn handle(&self, request: &crate::protocol::Message, limits: &Limits<'_>) -> Outcome {
        self.desktop.handle(self, request, limits)
    }
}

/// The machine-wide state every operation holds the lock of.
#[derive(Default)]
struct Machine {
    #[cfg(all(feature = "desktop", target_os = "linux"))]
    display: Option<x11::Display>,
    #[cfg(all(feature = "desktop", target_os = "linux"))]
    injector: Option<x11::input::Injector>,
    #[cfg(all(feature = "desktop", target_os = "linux"))]
    clipboard: Option<x11::clipboard::Clipboard>,
    #[cfg(all(feature = "desktop", target_os = "linux"))]
    writeback: writeback::Writeback,
}

/// The machine-wide desktop service, shared by every session.
pub struct Desktop {
    settings: Settings,
    machine: Mutex<Machine>,
    launcher: apps::Launcher,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop")
            .field("enabled", &self.settings.enabled)
            .field("display", &self.settings.display)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Desktop {
    pub fn new(settings: Settings) -> Desktop {
        Desktop {
            settings,
            machine: Mutex::new(Machine::default()),
            launcher: apps::Launcher::default(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The dependency check and feature lists for one HELLO. Run only when
    /// the local switch is on, so a switched-off desktop is never touched.
    pub fn probe(&self) -> Probe {
        if !self.settings.enabled {
            return Probe::unavailable("computer use is not enabled");
        }
        if !BUILT {
            return Probe::unavailable("this build has no desktop support");
        }
        if self.settings.wsl {
            return Probe::unavailable("WSL2 has no supported desktop");
        }
        if self.settings.wayland {
            return Probe::unavailable("Wayland sessions are not supported; switch to X11");
        }
        let mut machine = lock(&self.machine);
        self.probe_display(&mut machine)
    }

    #[cfg(all(feature = "desktop", target_os = "linux"))]
    fn probe_display(&self, machine: &mut Machine) -> Probe {
        let display = match self.display(machine) {
            Ok(display) => display,
            Err(reason) => return Probe::unavailable(reason),
        };
        let windows = display.window_management();
        let clipboard = self.settings.clipboard;
        let mut coarse: Vec<String> = ["screenshot", "input", "apps", "permissions"]
            .map(String::from)
            .to_vec();
        let mut features: Vec<String> = [
            "screenshot.region",
            "input.click.modifiers",
            "input.click.button",
            "input.drag.path",
            "input.key.hold",
            "input.mouse.down_up",
            "input.scroll.amount",
            "input.wait",
            "cursor.position",
            "display.info",
            "app.list",
            "app.launch",
            "permissions.check",
        ]
        .map(String::from)
        .to_vec();
        if windows {
            coarse.push("windows".into());
            features.extend(["window.list", "window.focus"].map(String::from));
        }
        if clipboard {
            coarse.push("clipboard".into());
            features.extend(["clipboard.read", "clipboard.write"].map(String::from));
        }
        Probe {
            available: true,
            unavailable_because: None,
            screen_resolution: Some(display.root_size()),
            features,
            coarse,
        }
    }

    #[cfg(not(all(feature = "desktop", target_os = "linux")))]
    fn probe_display(&self, _machine: &mut Machine) -> Probe {
        Probe::unavailable("this build has no desktop support")
    }

    /// The open display connection, reopened when it has gone away.
    #[cfg(all(feature = "desktop", target_os = "linux"))]
    fn display<'m>(&self, machine: &'m mut Machine) -> Result<&'m x11::Display, String> {
        if machine.display.as_ref().is_some_and(|d| !d.is_alive()) {
            machine.display = None;
            machine.injector = None;
        }
        if machine.display.is_none() {
            let name = self
                .settings
                .display
                .as_deref()
                .ok_or("DISPLAY is not set")?;
            machine.display = Some(x11::Display::open(name)?);
        }
        machine
            .display
            .as_ref()
            .ok_or_else(|| "no display".to_owned())
    }
}
