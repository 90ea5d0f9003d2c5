//! The operations on a real X11 display.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    ClipboardRead, ClipboardWrite, ConnectionDesktop, Desktop, DesktopError, Details, InputAction,
    Limits, Machine, Message, ScreenshotRequest, WindowFocus, WindowListRequest, ack,
    clipboard_gate,
};
use crate::desktop::error::{Concealment, Payload};
use crate::desktop::geometry::{Rect, inside_any};
use crate::desktop::keys::{self, Key};
use crate::desktop::mask::{Stacked, masked_areas};
use crate::desktop::x11::capture::RgbImage;
use crate::desktop::x11::clipboard::{Clipboard, ReadOutcome};
use crate::desktop::x11::input::{Injector, Pointer, Press};
use crate::desktop::x11::{Display, MonitorRect};
use crate::desktop::{MintedWindow, encode, lock};
use crate::protocol::{
    CursorPositionResponse, DisplayInfoResponse, ImageFormat, InputActionKind, Modifier, Monitor,
    MouseButton, ScreenshotMeta, ScreenshotResponse, ScrollDirection, WindowInfo,
    WindowListResponse,
};

/// The largest screenshot, whatever `max_file_size_bytes` allows.
const MAX_SCREENSHOT_BYTES: u64 = 12_533_760;
/// The largest clipboard text returned, whatever `max_file_size_bytes` allows.
const MAX_CLIPBOARD_READ_BYTES: u64 = 2_785_280;
/// Longest `wait` or `hold_key`.
const MAX_HOLD_MS: i64 = 5000;
/// How long a clipboard read may take.
const CLIPBOARD_TIMEOUT: Duration = Duration::from_secs(2);
/// The keysym pasted with (with `v`).
const CONTROL_L: u32 = 0xffe3;
/// Pause between typed characters.
const TYPE_INTERVAL: Duration = Duration::from_millis(20);
/// Pause between the clicks of a triple click.
const TRIPLE_INTERVAL: Duration = Duration::from_millis(50);
/// Texts at least this long may be pasted instead of typed.
const PASTE_MIN_CHARS: usize = 200;
/// How long the paste path waits for the target to take the text.
const PASTE_SERVED_WAIT: Duration = Duration::from_millis(500);

fn display_error(feature: &str) -> impl Fn(String) -> DesktopError + '_ {
    move |reason| DesktopError::unsupported(feature, reason)
}

fn internal(error: String) -> DesktopError {
    DesktopError::Internal(error)
}

fn wire_monitors(monitors: &[MonitorRect]) -> Vec<Monitor> {
    monitors
        .iter()
        .enumerate()
        .map(|(index, m)| Monitor {
            index: index as i64,
            primary: index == 0,
            physical_size: [m.rect.w, m.rect.h],
            logical_size: [m.rect.w, m.rect.h],
            scale: 1.0,
            origin: [m.rect.x, m.rect.y],
        })
        .collect()
}

/// What the mask covers now: blacked-out areas and the masked top-level
/// windows (for aiming checks).
struct Masked {
    areas: Vec<Rect>,
    windows: Vec<u32>,
}

impl Desktop {
    fn open<'m>(
        &self,
        machine: &'m mut Machine,
        feature: &str,
    ) -> Result<&'m Display, DesktopError> {
        self.display(machine).map_err(display_error(feature))
    }

    fn masked(&self, display: &Display) -> Result<Masked, DesktopError> {
        let toplevels = display.stacked_toplevels().map_err(internal)?;
        let stacked: Vec<Stacked> = toplevels
            .iter()
            .map(|t| Stacked {
                frame: t.frame,
                masked: self.settings.mask.matches(&t.facts),
            })
            .collect();
        let areas = masked_areas(&self.settings.mask, &stacked);
        let windows = toplevels
            .iter()
            .zip(&stacked)
            .filter(|(_, s)| s.masked)
            .map(|(t, _)| t.top)
            .collect();
        Ok(Masked { areas, windows })
    }

    fn monitors(&self, display: &Display, feature: &str) -> Result<Vec<MonitorRect>, DesktopError> {
        display.monitors().map_err(display_error(feature))
    }

    pub(super) fn display_info(
        &self,
        machine: &mut Machine,
        details: &mut Details,
    ) -> Result<Message, DesktopError> {
        let display = self.open(machine, "display.info")?;
        let monitors = self.monitors(display, "display.info")?;
        details
            .0
            .push(("monitor_count".into(), json!(monitors.len())));
        Ok(Message::DisplayInfoResponse(DisplayInfoResponse {
            monitors: wire_monitors(&monitors),
        }))
    }

    pub(super) fn screenshot(
        &self,
        machine: &mut Machine,
        req: &ScreenshotRequest,
        limits: &Limits<'_>,
        details: &mut Details,
    ) -> Result<Message, DesktopError> {
        (limits.screenshot_slot)().map_err(DesktopError::Overloaded)?;
        if req.region.is_some() && req.window_id.is_some() {
            return Err(DesktopError::unsupported(
                "screenshot.region+window",
                "region and window_id are mutually exclusive",
            ));
        }
        if req.window_id.is_some() {
            return Err(DesktopError::Unsupported {
                feature: "screenshot.window".into(),
                reason: None,
            });
        }
        let display = self.open(machine, "screenshot")?;
        let monitors = self.monitors(display, "screenshot")?;
        if monitors.is_empty() {
            return Err(DesktopError::unsupported(
                "screenshot",
                "no displays detected",
            ));
        }
        let index = usize::try_from(req.monitor)
            .ok()
            .filter(|i| *i < monitors.len())
            .unwrap_or(0);
        let monitor = monitors[index].rect;
        let area = match req.region {
            Some(corners) => Rect::from_corners(corners)
                .and_then(|region| region.intersect(&monitor))
                .ok_or_else(|| {
                    DesktopError::unsupported(
                        "screenshot.region",
                        format!("region {corners:?} does not intersect monitor {index}"),
                    )
                })?,
            None => monitor,
        };
        let masked = self.masked(display)?;
        let mut image: RgbImage = display.capture(area).map_err(internal)?;
        let origin = [area.x, area.y];
        let mut masked_regions = 0;
        for part in &masked.areas {
            if part.intersect(&area).is_some() {
                image.black_out(origin, part);
                masked_regions += 1;
            }
        }
        set(details, "masked_regions", json!(masked_regions));
        let (bytes, mime) = match req.format {
            ImageFormat::Jpeg => (
                encode::jpeg(&image, req.quality).map_err(internal)?,
                "image/jpeg",
            ),
            ImageFormat::Png => (encode::png(&image).map_err(internal)?, "image/png"),
        };
        drop(image);
        let limit = limits.max_file_size_bytes.min(MAX_SCREENSHOT_BYTES);
        let size = bytes.len() as u64;
        if size > limit {
            return Err(DesktopError::TooLarge {
                payload: Payload::Screenshot,
                size,
                limit,
            });
        }
        set(details, "image_bytes_returned", json!(size));
        set(details, "width", json!(area.w));
        set(details, "height", json!(area.h));
        let image_base64 = crate::files::base64::encode(&bytes);
        Ok(Message::ScreenshotResponse(ScreenshotResponse {
            image_base64,
            mime_type: mime.into(),
            width: area.w,
            height: area.h,
            monitor: index as i64,
            region: req.region,
            display_scale: 1.0,
            logical_size: Some([monitor.w, monitor.h]),
            meta: ScreenshotMeta {
                origin,
                display_id: index as i64,
            },
        }))
    }

    pub(super) fn cursor_position(&self, machine: &mut Machine) -> Result<Message, DesktopError> {
        if self.settings.wayland {
            return Err(DesktopError::unsupported(
                "cursor.position",
                "Wayland session",
            ));
        }
        let display = self.open(machine, "cursor.position")?;
        let [x, y] = display
            .pointer()
            .map_err(display_error("cursor.position"))?;
        let monitors = self.monitors(display, "cursor.position")?;
        let monitor = monitors
            .iter()
            .position(|m| m.rect.contains([x, y]))
            .unwrap_or(0);
        Ok(Message::CursorPositionResponse(CursorPositionResponse {
            x,
            y,
            monitor: monitor as i64,
        }))
    }

    pub(super) fn input(
        &self,
        machine: &mut Machine,
        req: &InputAction,
    ) -> Result<Message, DesktopError> {
        if req.action == InputActionKind::Wait {
            std::thread::sleep(hold_duration(req.duration_ms));
            return Ok(ack());
        }
        if self.settings.wayland {
            return Err(DesktopError::unsupported(
                "input",
                "Wayland sessions block input injection; switch to X11",
            ));
        }
        let display = self.open(machine, "input")?;
        let monitors = display.monitors().map_err(display_error("display.info"))?;
        let rects: Vec<Rect> = monitors.iter().map(|m| m.rect).collect();
        let points = req.coordinate.iter().chain(req.path.iter().flatten());
        for point in points.clone() {
            if !inside_any(&rects, *point) {
                return Err(DesktopError::OutOfBounds {
                    coordinate: *point,
                    displays: rects,
                });
            }
        }
        let plan = plan(req)?;
        // Aimed at a masked window: a point inside one, or keys while one
        // holds the keyboard focus.
        let masked = self.masked(display)?;
        if points.clone().any(|p| inside_any(&masked.areas, *p)) {
            return Err(DesktopError::masked("input"));
        }
        // A wheel turned without a coordinate acts where the pointer is.
        if matches!(plan, Plan::Scroll { at: None, .. }) {
            let pointer = display.pointer().map_err(display_error("input"))?;
            if inside_any(&masked.areas, pointer) {
                return Err(DesktopError::masked("input"));
            }
        }
        if plan.uses_keyboard() {
            let focus = display.input_focus().and_then(|w| display.top_of(w));
            if focus.is_some_and(|top| masked.windows.contains(&top)) {
                return Err(DesktopError::masked("input"));
            }
        }
        let paste = req.action == InputActionKind::Type
            && req.paste
            && req
                .text
                .as_ref()
                .is_some_and(|t| t.chars().nth(PASTE_MIN_CHARS - 1).is_some())
            && self.settings.clipboard;
        if machine.injector.is_none() {
            let name = self.settings.display.as_deref().unwrap_or_default();
            machine.injector = Some(Injector::open(name).map_err(display_error("input"))?);
        }
        if paste {
            let text = req.text.clone().unwrap_or_default();
            return self
                .paste(machine, text, req.preserve_clipboard)
                .map(|()| ack());
        }
        let Some(injector) = machine.injector.as_mut() else {
            return Err(DesktopError::unsupported("input", "no input connection"));
        };
        let result = plan.run(injector);
        if result.is_err() {
            // A failed injector may hold a broken connection.
            machine.injector = None;
        }
        result.map(|()| ack()).map_err(internal)
    }

    /// CAPABILITIES.md §4.6.1 with the restore rule: the snapshot goes back
    /// only after the target took the text once (or 500 ms) and only while
    /// no other client has taken the clipboard since.
    fn paste(
        &self,
        machine: &mut Machine,
        text: String,
        preserve: bool,
    ) -> Result<(), DesktopError> {
        self.clipboard(machine, "input")?;
        let Some(clipboard) = machine.clipboard.as_ref() else {
            return Err(DesktopError::unsupported("input", "no clipboard"));
        };
        let snapshot = if preserve {
            match clipboard.read(CLIPBOARD_TIMEOUT).map_err(internal)? {
                ReadOutcome::Text(text) => Some(text),
                _ => None,
            }
        } else {
            None
        };
        let generation = clipboard.write(text.clone()).map_err(internal)?;
        machine.writeback.record(&text, Instant::now());
        let Some(injector) = machine.injector.as_mut() else {
            return Err(DesktopError::unsupported("input", "no input connection"));
        };
        with_modifiers(injector, &[Key::Sym(CONTROL_L), Key::Char('v')], |_| Ok(()))
            .map_err(internal)?;
        let Some(snapshot) = snapshot else {
            return Ok(());
        };
        let Some(clipboard) = machine.clipboard.as_ref() else {
            return Ok(());
        };
        clipboard.wait_served(generation, PASTE_SERVED_WAIT);
        if clipboard.still_holds(generation) {
            // Restored without a writeback record: what was on the
            // clipboard before is not the shim's to hand out.
            clipboard.write(snapshot).map_err(internal)?;
        }
        Ok(())
    }

    fn clipboard(&self, machine: &mut Machine, feature: &str) -> Result<(), DesktopError> {
        if machine.clipboard.as_ref().is_some_and(|c| !c.is_alive()) {
            machine.clipboard = None;
        }
        if machine.clipboard.is_none() {
            let name = self
                .settings
                .display
                .as_deref()
                .ok_or_else(|| DesktopError::unsupported(feature, "DISPLAY is not set"))?;
            machine.clipboard = Some(Clipboard::start(name).map_err(display_error(feature))?);
        }
        Ok(())
    }

    /// The display for a window operation: refused on Wayland and where
    /// this connection's HELLO found no EWMH window manager.
    fn window_display<'m>(
        &self,
        machine: &'m mut Machine,
        conn: &ConnectionDesktop,
        feature: &str,
    ) -> Result<&'m Display, DesktopError> {
        if self.settings.wayland {
            return Err(DesktopError::unsupported(feature, "Wayland session"));
        }
        if !conn.probe.has(feature) {
            return Err(DesktopError::unsupported(feature, "no EWMH window manager"));
        }
        self.open(machine, feature)
    }

    pub(super) fn window_list(
        &self,
        machine: &mut Machine,
        conn: &ConnectionDesktop,
        req: &WindowListRequest,
        details: &mut Details,
    ) -> Result<Message, DesktopError> {
        let display = self.window_display(machine, conn, "window.list")?;
        let clients = display
            .client_windows()
            .map_err(display_error("window.list"))?;
        let monitors = display.monitors().unwrap_or_default();
        let mut table = lock(&conn.windows);
        table.clear();
        let mut windows = Vec::with_capacity(clients.len());
        for client in clients {
            if client.minimized && !req.include_minimized {
                continue;
            }
            let facts = display.facts(client.window);
            let masked = self.settings.mask.matches(&facts);
            let id = mint_window_id()?;
            table.insert(
                id.clone(),
                MintedWindow {
                    native: client.window,
                    pid: client.pid,
                    class: client.class.clone(),
                },
            );
            let b = client.bounds;
            let centre = [b.x + b.w / 2, b.y + b.h / 2];
            windows.push(WindowInfo {
                window_id: id,
                pid: client.pid,
                app_name: client.class,
                app_bundle_id: None,
                // A masked window's title may itself be the secret.
                title: if masked { None } else { client.title },
                bounds: b.corners(),
                monitor: monitors
                    .iter()
                    .position(|m| m.rect.contains(centre))
                    .unwrap_or(0) as i64,
                is_focused: client.focused,
                is_minimized: client.minimized,
                is_fullscreen: client.fullscreen,
            });
        }
        details
            .0
            .push(("windows_returned".into(), json!(windows.len())));
        Ok(Message::WindowListResponse(WindowListResponse {
            windows,
            truncated: false,
        }))
    }

    pub(super) fn window_focus(
        &self,
        machine: &mut Machine,
        conn: &ConnectionDesktop,
        req: &WindowFocus,
    ) -> Result<Message, DesktopError> {
        let display = self.window_display(machine, conn, "window.focus")?;
        let mut table = lock(&conn.windows);
        let Some(minted) = table.get(&req.window_id).cloned() else {
            return Err(DesktopError::WindowStale {
                window_id: req.window_id.clone(),
                known: false,
            });
        };
        let facts = display.facts(minted.native);
        let live_class = facts.class.get(1).or(facts.class.first()).cloned();
        if !display.exists(minted.native)
            || display.pid(minted.native) != minted.pid
            || live_class != minted.class
        {
            table.remove(&req.window_id);
            return Err(DesktopError::WindowStale {
                window_id: req.window_id.clone(),
                known: true,
            });
        }
        drop(table);
        if self.settings.mask.matches(&facts) {
            return Err(DesktopError::masked("window.focus"));
        }
        display
            .activate(minted.native, req.raise)
            .map_err(display_error("window.focus"))?;
        Ok(ack())
    }

    pub(super) fn clipboard_read(
        &self,
        machine: &mut Machine,
        _conn: &ConnectionDesktop,
        req: &ClipboardRead,
        limits: &Limits<'_>,
        details: &mut Details,
    ) -> Result<Message, DesktopError> {
        clipboard_gate(self, "clipboard.read", req.format)?;
        self.clipboard(machine, "clipboard.read")?;
        let Some(clipboard) = machine.clipboard.as_ref() else {
            return Err(DesktopError::unsupported("clipboard.read", "no clipboard"));
        };
        let limit = limits.max_file_size_bytes.min(MAX_CLIPBOARD_READ_BYTES);
        let live = match clipboard.read(CLIPBOARD_TIMEOUT).map_err(internal)? {
            ReadOutcome::Text(text) => Some(text),
            ReadOutcome::Empty => None,
            ReadOutcome::Secret => {
                return Err(DesktopError::Concealed(Concealment::PasswordManager {
                    marker: crate::desktop::x11::clipboard::PASSWORD_HINT,
                }));
            }
            ReadOutcome::TooLarge(size) => {
                set(details, "size_bytes", json!(size));
                return Err(DesktopError::TooLarge {
                    payload: Payload::Clipboard,
                    size,
                    limit,
                });
            }
        };
        if !self.settings.clipboard_read_foreign {
            machine
                .writeback
                .check(live.as_deref(), Instant::now())
                .map_err(DesktopError::Concealed)?;
        }
        let content = live.unwrap_or_default();
        let size = content.len() as u64;
        set(details, "size_bytes", json!(size));
        if size > limit {
            return Err(DesktopError::TooLarge {
                payload: Payload::Clipboard,
                size,
                limit,
            });
        }
        Ok(Message::ClipboardReadResponse(
            crate::protocol::ClipboardReadResponse {
                format: req.format,
                content,
                size_bytes: size,
            },
        ))
    }

    pub(super) fn clipboard_write(
        &self,
        machine: &mut Machine,
        _conn: &ConnectionDesktop,
        req: &ClipboardWrite,
        limits: &Limits<'_>,
    ) -> Result<Message, DesktopError> {
        clipboard_gate(self, "clipboard.write", req.format)?;
        let size = req.content.len() as u64;
        if size > limits.max_file_size_bytes {
            return Err(DesktopError::TooLarge {
                payload: Payload::Clipboard,
                size,
                limit: limits.max_file_size_bytes,
            });
        }
        self.clipboard(machine, "clipboard.write")?;
        let Some(clipboard) = machine.clipboard.as_ref() else {
            return Err(DesktopError::unsupported("clipboard.write", "no clipboard"));
        };
        clipboard.write(req.content.clone()).map_err(internal)?;
        machine.writeback.record(&req.content, Instant::now());
        Ok(ack())
    }
}

/// A fresh `win_<uuid4>`; without randomness no id is minted, since a
/// repeated id could name another window.
fn mint_window_id() -> Result<String, DesktopError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| internal(format!("no randomness for a window id: {e}")))?;
    Ok(format!(
        "win_{}",
        crate::protocol::uuid_v4_from_bytes(bytes)
    ))
}

/// `clamp(ms or 0, 0, 5000)`.
fn hold_duration(ms: Option<i64>) -> Duration {
    Duration::from_millis(u64::try_from(ms.unwrap_or(0).clamp(0, MAX_HOLD_MS)).unwrap_or(0))
}

/// Replaces the value of `key` in `details`, or adds it.
fn set(details: &mut Details, key: &str, value: Value) {
    match details.0.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => details.0.push((key.to_owned(), value)),
    }
}

/// What an `INPUT_ACTION` does, checked before anything is pressed.
enum Plan {
    Move([i64; 2]),
    Click {
        at: [i64; 2],
        button: Pointer,
        times: u32,
        interval: Duration,
        modifiers: Vec<Key>,
    },
    Button {
        at: [i64; 2],
        button: Pointer,
        press: Press,
    },
    Drag {
        points: Vec<[i64; 2]>,
        button: Pointer,
    },
    Type(Vec<Key>),
    Chord {
        keys: Vec<Key>,
        hold: Option<Duration>,
    },
    Scroll {
        at: Option<[i64; 2]>,
        button: Pointer,
        amount: u32,
        modifiers: Vec<Key>,
    },
}

fn button_of(button: Option<MouseButton>) -> Pointer {
    match button {
        Some(MouseButton::Middle) => Pointer::Middle,
        Some(MouseButton::Right) => Pointer::Right,
        _ => Pointer::Left,
    }
}

fn modifier_keys(modifiers: Option<&Vec<Modifier>>) -> Vec<Key> {
    modifiers
        .map(|m| m.iter().map(|m| keys::modifier_key(*m)).collect())
        .unwrap_or_default()
}

/// CAPABILITIES.md §4.6 step 4's table, with every required field and key
/// name checked.
fn plan(req: &InputAction) -> Result<Plan, DesktopError> {
    let action = req.action.as_str();
    let missing = || DesktopError::unsupported(action, format!("unknown action '{action}'"));
    let click_at = || {
        req.coordinate
            .ok_or_else(|| DesktopError::unsupported(action, "coordinate is required"))
    };
    let modifiers = modifier_keys(req.modifiers.as_ref());
    let chord = |spec: &str| {
        keys::chord(spec)
            .map_err(|name| DesktopError::unsupported("input.key", format!("unknown key '{name}'")))
    };
    Ok(match req.action {
        InputActionKind::MouseMove => Plan::Move(req.coordinate.ok_or_else(missing)?),
        InputActionKind::LeftClick
        | InputActionKind::RightClick
        | InputActionKind::MiddleClick
        | InputActionKind::DoubleClick => Plan::Click {
            at: click_at()?,
            button: match req.action {
                InputActionKind::RightClick => Pointer::Right,
                InputActionKind::MiddleClick => Pointer::Middle,
                _ => Pointer::Left,
            },
            times: if req.action == InputActionKind::DoubleClick {
                2
            } else {
                1
            },
            interval: Duration::ZERO,
            modifiers,
        },
        InputActionKind::TripleClick => Plan::Click {
            at: req.coordinate.ok_or_else(missing)?,
            button: Pointer::Left,
            times: 3,
            interval: TRIPLE_INTERVAL,
            modifiers,
        },
        InputActionKind::MouseDown | InputActionKind::MouseUp => Plan::Button {
            at: req.coordinate.ok_or_else(missing)?,
            button: button_of(req.button),
            press: if req.action == InputActionKind::MouseDown {
                Press::Down
            } else {
                Press::Up
            },
        },
        InputActionKind::Drag => {
            let path = req
                .path
                .as_ref()
                .filter(|p| !p.is_empty())
                .ok_or_else(missing)?;
            let step = (path.len() / 100).max(1);
            let mut points = vec![path[0]];
            points.extend(path.iter().skip(1).step_by(step).copied());
            if let Some(last) = path.last() {
                if points.last() != Some(last) {
                    points.push(*last);
                }
            }
            Plan::Drag {
                points,
                button: button_of(req.button),
            }
        }
        InputActionKind::Type => {
            let text = req.text.as_ref().ok_or_else(missing)?;
            Plan::Type(text.chars().map(keys::typed).collect())
        }
        InputActionKind::Key => Plan::Chord {
            keys: chord(req.key.as_deref().ok_or_else(missing)?)?,
            hold: None,
        },
        InputActionKind::HoldKey => Plan::Chord {
            keys: chord(req.key.as_deref().ok_or_else(missing)?)?,
            hold: Some(hold_duration(req.duration_ms)),
        },
        InputActionKind::Scroll => {
            let amount = req
                .scroll_amount
                .or(req.clicks.filter(|c| *c != 0))
                .unwrap_or(3)
                .clamp(0, 1000);
            let direction = req.scroll_direction.or(match req.direction {
                Some(crate::protocol::KeyDirection::Up) => Some(ScrollDirection::Up),
                Some(crate::protocol::KeyDirection::Down) => Some(ScrollDirection::Down),
                None => None,
            });
            Plan::Scroll {
                at: req.coordinate,
                button: match direction.unwrap_or(ScrollDirection::Down) {
                    ScrollDirection::Up => Pointer::WheelUp,
                    ScrollDirection::Down => Pointer::WheelDown,
                    ScrollDirection::Left => Pointer::WheelLeft,
                    ScrollDirection::Right => Pointer::WheelRight,
                },
                amount: u32::try_from(amount).unwrap_or(0),
                modifiers,
            }
        }
        InputActionKind::Wait => Plan::Chord {
            keys: Vec::new(),
            hold: Some(hold_duration(req.duration_ms)),
        },
    })
}

impl Plan {
    fn uses_keyboard(&self) -> bool {
        matches!(self, Plan::Type(_) | Plan::Chord { .. })
    }

    fn run(&self, injector: &mut Injector) -> Result<(), String> {
        match self {
            Plan::Move(at) => injector.move_to(*at),
            Plan::Click {
                at,
                button,
                times,
                interval,
                modifiers,
            } => with_modifiers(injector, modifiers, |injector| {
                injector.move_to(*at)?;
                for i in 0..*times {
                    if i > 0 && !interval.is_zero() {
                        std::thread::sleep(*interval);
                    }
                    injector.button(*button, Press::Click)?;
                }
                Ok(())
            }),
            Plan::Button { at, button, press } => {
                injector.move_to(*at)?;
                injector.button(*button, *press)
            }
            Plan::Drag { points, button } => {
                injector.move_to(points[0])?;
                injector.button(*button, Press::Down)?;
                let mut result = Ok(());
                for point in &points[1..] {
                    result = injector.move_to(*point);
                    if result.is_err() {
                        break;
                    }
                }
                let released = injector.button(*button, Press::Up);
                result.and(released)
            }
            Plan::Type(keys) => {
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        std::thread::sleep(TYPE_INTERVAL);
                    }
                    injector.key(*key, Press::Click)?;
                }
                Ok(())
            }
            Plan::Chord { keys, hold } => {
                let hold = *hold;
                with_modifiers(injector, keys, |_| {
                    if let Some(hold) = hold {
                        std::thread::sleep(hold);
                    }
                    Ok(())
                })
            }
            Plan::Scroll {
                at,
                button,
                amount,
                modifiers,
            } => with_modifiers(injector, modifiers, |injector| {
                if let Some(at) = at {
                    injector.move_to(*at)?;
                }
                for _ in 0..*amount {
                    injector.button(*button, Press::Click)?;
                }
                Ok(())
            }),
        }
    }
}

/// Presses `keys` in order, runs `body`, and releases them in reverse —
/// always, even when pressing or `body` failed.
fn with_modifiers(
    injector: &mut Injector,
    keys: &[Key],
    body: impl FnOnce(&mut Injector) -> Result<(), String>,
) -> Result<(), String> {
    let mut pressed = Vec::with_capacity(keys.len());
    let mut result = Ok(());
    for key in keys {
        if let Err(e) = injector.key(*key, Press::Down) {
            result = Err(e);
            break;
        }
        pressed.push(*key);
    }
    if result.is_ok() {
        result = body(injector);
    }
    for key in pressed.iter().rev() {
        let released = injector.key(*key, Press::Up);
        if result.is_ok() {
            result = released;
        }
    }
    result
}
