//! Windows as X11 and EWMH describe them: the top-level stack (for masking
//! and for what a point or the keyboard focus is aimed at), the window
//! manager's client list (for `WINDOW_LIST_REQUEST`) and activation (for
//! `WINDOW_FOCUS`), CAPABILITIES.md §4.8.
//!
//! The stack comes from the X server's own tree, not from the window
//! manager's lists, so masking works without a window manager and cannot be
//! dodged by a window the manager does not list.

use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConnectionExt as _, EventMask, InputFocus, MapState, Window,
};
use x11rb::wrapper::ConnectionExt as _;

use super::{Display, text};
use crate::desktop::geometry::Rect;
use crate::desktop::mask::WindowFacts;

/// Longest property value read (titles, class names), in 32-bit units.
const MAX_PROPERTY_UNITS: u32 = 1024;

/// How deep below a top-level window its client window is looked for (a
/// reparenting manager's frame may hold a border window first).
const MAX_CLIENT_DEPTH: usize = 3;

/// A viewable child of the root window.
#[derive(Debug, Clone)]
pub struct TopLevel {
    /// The child of the root (the manager's frame, or the client itself).
    pub top: Window,
    /// The frame's rectangle in root coordinates, border included.
    pub frame: Rect,
    pub facts: WindowFacts,
}

/// One entry of the manager's client list.
#[derive(Debug, Clone)]
pub struct ClientWindow {
    pub window: Window,
    pub pid: i64,
    pub title: Option<String>,
    pub class: Option<String>,
    pub bounds: Rect,
    pub focused: bool,
    pub minimized: bool,
    pub fullscreen: bool,
}

impl Display {
    /// The viewable top-level windows, bottom of the stack first.
    pub fn stacked_toplevels(&self) -> Result<Vec<TopLevel>, String> {
        let tree = self
            .conn
            .query_tree(self.root)
            .map_err(text)?
            .reply()
            .map_err(text)?;
        let mut windows = Vec::with_capacity(tree.children.len());
        for top in tree.children {
            let Ok(Ok(attributes)) = self.conn.get_window_attributes(top).map(|c| c.reply()) else {
                continue;
            };
            if attributes.map_state != MapState::VIEWABLE {
                continue;
            }
            let Ok(Ok(geometry)) = self.conn.get_geometry(top).map(|c| c.reply()) else {
                continue;
            };
            let border = 2 * i64::from(geometry.border_width);
            let frame = Rect::new(
                i64::from(geometry.x),
                i64::from(geometry.y),
                i64::from(geometry.width) + border,
                i64::from(geometry.height) + border,
            );
            let client = self.client_below(top, MAX_CLIENT_DEPTH).unwrap_or(top);
            windows.push(TopLevel {
                top,
                frame,
                facts: self.facts(client),
            });
        }
        Ok(windows)
    }

    /// The window below (or at) `window` that carries `WM_STATE` (set by a
    /// window manager on its clients), else the first one with `WM_CLASS`.
    fn client_below(&self, window: Window, depth: usize) -> Option<Window> {
        if self.has_property(window, self.atoms.WM_STATE) {
            return Some(window);
        }
        if depth > 0 {
            let children = self.conn.query_tree(window).ok()?.reply().ok()?.children;
            for child in children {
                if let Some(found) = self.client_below(child, depth - 1) {
                    return Some(found);
                }
            }
        }
        self.has_property(window, AtomEnum::WM_CLASS.into())
            .then_some(window)
    }

    fn has_property(&self, window: Window, property: u32) -> bool {
        self.conn
            .get_property(false, window, property, AtomEnum::ANY, 0, 0)
            .ok()
            .and_then(|c| c.reply().ok())
            .is_some_and(|r| r.type_ != u32::from(AtomEnum::NONE))
    }

    fn property_bytes(&self, window: Window, property: u32, kind: u32) -> Option<Vec<u8>> {
        let reply = self
            .conn
            .get_property(false, window, property, kind, 0, MAX_PROPERTY_UNITS)
            .ok()?
            .reply()
            .ok()?;
        (reply.format == 8 && reply.type_ != u32::from(AtomEnum::NONE)).then_some(reply.value)
    }

    /// `WM_CLASS` (instance and class) and the title of `window`.
    pub fn facts(&self, window: Window) -> WindowFacts {
        let class = self
            .property_bytes(window, AtomEnum::WM_CLASS.into(), AtomEnum::STRING.into())
            .map(|bytes| {
                bytes
                    .split(|b| *b == 0)
                    .filter(|part| !part.is_empty())
                    .map(|part| String::from_utf8_lossy(part).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        WindowFacts {
            class,
            title: self.title(window),
        }
    }

    /// `_NET_WM_NAME` (UTF-8), else `WM_NAME`; `None` when empty.
    fn title(&self, window: Window) -> Option<String> {
        let bytes = self
            .property_bytes(window, self.atoms._NET_WM_NAME, self.atoms.UTF8_STRING)
            .filter(|b| !b.is_empty())
            .or_else(|| {
                self.property_bytes(window, AtomEnum::WM_NAME.into(), AtomEnum::ANY.into())
            })?;
        let title = String::from_utf8_lossy(&bytes).into_owned();
        (!title.is_empty()).then_some(title)
    }

    /// `_NET_WM_PID`, 0 when absent.
    pub fn pid(&self, window: Window) -> i64 {
        self.atom_list(window, self.atoms._NET_WM_PID)
            .ok()
            .and_then(|v| v.first().copied())
            .map_or(0, i64::from)
    }

    /// Whether `window` still exists.
    pub fn exists(&self, window: Window) -> bool {
        self.conn
            .get_geometry(window)
            .ok()
            .and_then(|c| c.reply().ok())
            .is_some()
    }

    /// The manager's client list with what `WINDOW_LIST_RESPONSE` reports.
    pub fn client_windows(&self) -> Result<Vec<ClientWindow>, String> {
        let clients = self.atom_list(self.root, self.atoms._NET_CLIENT_LIST)?;
        let active = self.active_window();
        let mut windows = Vec::with_capacity(clients.len());
        for window in clients {
            let Ok(Ok(geometry)) = self.conn.get_geometry(window).map(|c| c.reply()) else {
                continue;
            };
            let Ok(Ok(origin)) = self
                .conn
                .translate_coordinates(window, self.root, 0, 0)
                .map(|c| c.reply())
            else {
                continue;
            };
            let state = self
                .atom_list(window, self.atoms._NET_WM_STATE)
                .unwrap_or_default();
            let facts = self.facts(window);
            windows.push(ClientWindow {
                window,
                pid: self.pid(window),
                title: facts.title,
                class: facts.class.get(1).or(facts.class.first()).cloned(),
                bounds: Rect::new(
                    i64::from(origin.dst_x),
                    i64::from(origin.dst_y),
                    i64::from(geometry.width),
                    i64::from(geometry.height),
                ),
                focused: active == Some(window),
                minimized: state.contains(&self.atoms._NET_WM_STATE_HIDDEN),
                fullscreen: state.contains(&self.atoms._NET_WM_STATE_FULLSCREEN),
            });
        }
        Ok(windows)
    }

    /// `_NET_ACTIVE_WINDOW`.
    pub fn active_window(&self) -> Option<Window> {
        self.atom_list(self.root, self.atoms._NET_ACTIVE_WINDOW)
            .ok()?
            .first()
            .copied()
            .filter(|w| *w != 0)
    }

    /// The window holding the keyboard focus, if it is a real window.
    pub fn input_focus(&self) -> Option<Window> {
        let focus = self.conn.get_input_focus().ok()?.reply().ok()?.focus;
        (focus > 1 && focus != self.root).then_some(focus)
    }

    /// The child of the root that holds `window`.
    pub fn top_of(&self, window: Window) -> Option<Window> {
        let mut current = window;
        // Trees are shallow; the bound only guards against a hostile reply.
        for _ in 0..64 {
            let tree = self.conn.query_tree(current).ok()?.reply().ok()?;
            if tree.parent == self.root || tree.root == current {
                return Some(current);
            }
            if tree.parent == 0 {
                return None;
            }
            current = tree.parent;
        }
        None
    }

    /// Activates `window` through the manager (`_NET_ACTIVE_WINDOW`, source
    /// indication 2), or with `raise == false` only gives it the focus.
    pub fn activate(&self, window: Window, raise: bool) -> Result<(), String> {
        if raise {
            let event = ClientMessageEvent::new(
                32,
                window,
                self.atoms._NET_ACTIVE_WINDOW,
                [2, x11rb::CURRENT_TIME, 0, 0, 0],
            );
            self.conn
                .send_event(
                    false,
                    self.root,
                    EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
                    event,
                )
                .map_err(text)?;
        } else {
            self.conn
                .set_input_focus(InputFocus::PARENT, window, x11rb::CURRENT_TIME)
                .map_err(text)?;
        }
        self.conn.sync().map_err(text)?;
        Ok(())
    }
}
