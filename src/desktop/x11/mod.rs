//! The X11 side of computer use (CAPABILITIES.md §2, §4): one connection to
//! `$DISPLAY` for what the operations read and change — RandR monitors,
//! the pointer, EWMH windows, the screen's pixels — plus the input injector
//! (`input`) and the clipboard owner (`clipboard`), each on a connection of
//! its own.
//!
//! Every reply from the X server is input: sizes and counts are checked
//! before they are used, and a failure is an error, never a panic.

pub mod capture;
pub mod clipboard;
pub mod input;
pub mod windows;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::randr::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{self, ConnectionExt as _, Window};
use x11rb::protocol::xtest;
use x11rb::rust_connection::RustConnection;

use super::geometry::Rect;

x11rb::atom_manager! {
    /// The atoms the operations use, interned once per connection.
    pub Atoms: AtomsCookie {
        _NET_SUPPORTED,
        _NET_CLIENT_LIST,
        _NET_CLIENT_LIST_STACKING,
        _NET_ACTIVE_WINDOW,
        _NET_WM_PID,
        _NET_WM_NAME,
        _NET_WM_STATE,
        _NET_WM_STATE_HIDDEN,
        _NET_WM_STATE_FULLSCREEN,
        _NET_FRAME_EXTENTS,
        WM_STATE,
        UTF8_STRING,
    }
}

/// A monitor in root coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorRect {
    pub rect: Rect,
    pub primary: bool,
}

/// An open connection to the display, with what the probe found.
pub struct Display {
    pub(super) conn: RustConnection,
    pub(super) root: Window,
    pub(super) atoms: Atoms,
    root_size: [i64; 2],
}

impl std::fmt::Debug for Display {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Display")
            .field("root", &self.root)
            .field("root_size", &self.root_size)
            .finish_non_exhaustive()
    }
}

/// Turns any X error into its text.
pub(super) fn text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

impl Display {
    /// Connects to `display` and checks the dependencies of CAPABILITIES.md
    /// §2: the connection, XTEST and RandR. `Err` says which is missing.
    pub fn open(display: &str) -> Result<Display, String> {
        let (conn, screen) = x11rb::connect(Some(display))
            .map_err(|e| format!("cannot connect to X display {display}: {e}"))?;
        let present = |name| {
            conn.extension_information(name)
                .map_err(text)
                .map(|info| info.is_some())
        };
        if !present(xtest::X11_EXTENSION_NAME)? {
            return Err("the X server has no XTEST extension".into());
        }
        if !present(randr::X11_EXTENSION_NAME)? {
            return Err("the X server has no RandR extension".into());
        }
        let setup = conn.setup();
        let root_screen = setup
            .roots
            .get(screen)
            .ok_or_else(|| format!("the X server has no screen {screen}"))?;
        let root = root_screen.root;
        let root_size = [
            i64::from(root_screen.width_in_pixels),
            i64::from(root_screen.height_in_pixels),
        ];
        let atoms = Atoms::new(&conn).map_err(text)?.reply().map_err(text)?;
        Ok(Display {
            conn,
            root,
            atoms,
            root_size,
        })
    }

    /// `[width, height]` of the root window.
    pub fn root_size(&self) -> [i64; 2] {
        self.root_size
    }

    /// Whether the connection still works (a round trip).
    pub fn is_alive(&self) -> bool {
        self.conn
            .get_input_focus()
            .ok()
            .and_then(|cookie| cookie.reply().ok())
            .is_some()
    }

    /// EWMH window management: the window manager lists `_NET_CLIENT_LIST`
    /// and `_NET_ACTIVE_WINDOW` in `_NET_SUPPORTED` (CAPABILITIES.md §4.1).
    pub fn window_management(&self) -> bool {
        let Ok(supported) = self.atom_list(self.root, self.atoms._NET_SUPPORTED) else {
            return false;
        };
        supported.contains(&self.atoms._NET_CLIENT_LIST)
            && supported.contains(&self.atoms._NET_ACTIVE_WINDOW)
    }

    /// A property of 32-bit items (`ATOM`, `WINDOW`, `CARDINAL`), at most
    /// 4096 of them.
    pub(super) fn atom_list(&self, window: Window, property: u32) -> Result<Vec<u32>, String> {
        let reply = self
            .conn
            .get_property(false, window, property, xproto::AtomEnum::ANY, 0, 4096)
            .map_err(text)?
            .reply()
            .map_err(text)?;
        Ok(reply.value32().map(Iterator::collect).unwrap_or_default())
    }

    /// The monitors (CAPABILITIES.md §4.4): RandR 1.5 monitors, else the
    /// active CRTCs, else the root window; the RandR primary first, then by
    /// `(y, x)`.
    pub fn monitors(&self) -> Result<Vec<MonitorRect>, String> {
        let mut monitors = self
            .randr_monitors()
            .filter(|m| !m.is_empty())
            .or_else(|| self.active_crtcs().filter(|m| !m.is_empty()))
            .unwrap_or_else(|| {
                vec![MonitorRect {
                    rect: Rect::new(0, 0, self.root_size[0], self.root_size[1]),
                    primary: true,
                }]
            });
        monitors.sort_by_key(|m| (!m.primary, m.rect.y, m.rect.x));
        Ok(monitors)
    }

    fn randr_monitors(&self) -> Option<Vec<MonitorRect>> {
        let version = self.conn.randr_query_version(1, 5).ok()?.reply().ok()?;
        if (version.major_version, version.minor_version) < (1, 5) {
            return None;
        }
        let reply = self
            .conn
            .randr_get_monitors(self.root, true)
            .ok()?
            .reply()
            .ok()?;
        Some(
            reply
                .monitors
                .iter()
                .filter(|m| m.width > 0 && m.height > 0)
                .map(|m| MonitorRect {
                    rect: Rect::new(
                        i64::from(m.x),
                        i64::from(m.y),
                        i64::from(m.width),
                        i64::from(m.height),
                    ),
                    primary: m.primary,
                })
                .collect(),
        )
    }

    fn active_crtcs(&self) -> Option<Vec<MonitorRect>> {
        let resources = self
            .conn
            .randr_get_screen_resources_current(self.root)
            .ok()?
            .reply()
            .ok()?;
        let primary = self
            .conn
            .randr_get_output_primary(self.root)
            .ok()
            .and_then(|c| c.reply().ok())
            .map(|r| r.output);
        let mut monitors = Vec::new();
        for crtc in &resources.crtcs {
            let Some(info) = self
                .conn
                .randr_get_crtc_info(*crtc, resources.config_timestamp)
                .ok()
                .and_then(|c| c.reply().ok())
            else {
                continue;
            };
            if info.mode == 0 || info.width == 0 || info.height == 0 {
                continue;
            }
            monitors.push(MonitorRect {
                rect: Rect::new(
                    i64::from(info.x),
                    i64::from(info.y),
                    i64::from(info.width),
                    i64::from(info.height),
                ),
                primary: primary.is_some_and(|p| p != 0 && info.outputs.contains(&p)),
            });
        }
        Some(monitors)
    }

    /// The pointer's root coordinates.
    pub fn pointer(&self) -> Result<[i64; 2], String> {
        let reply = self
            .conn
            .query_pointer(self.root)
            .map_err(text)?
            .reply()
            .map_err(text)?;
        Ok([i64::from(reply.root_x), i64::from(reply.root_y)])
    }
}
