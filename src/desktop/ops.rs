//! The computer-use operations (CAPABILITIES.md §4.4–§4.11), each in the
//! order the specification fixes, under the machine-wide lock, each with
//! the `details` of its one audit record (§4.2).

use serde_json::json;
use std::collections::BTreeMap;

use super::error::DesktopError;
use super::{ConnectionDesktop, Desktop, Machine, apps, lock};
use crate::audit::Details;
use crate::protocol::{
    Ack, AppLaunch, AppListRequest, AppListResponse, ClipboardFormat, ClipboardRead,
    ClipboardWrite, InputAction, Message, PermissionState, PermissionsCheckRequest,
    PermissionsCheckResponse, ScreenshotRequest, WindowFocus, WindowListRequest,
};

/// What an operation may use beyond the desktop: the connection's size
/// limit and the machine-wide screenshot rate.
pub struct Limits<'a> {
    /// Effective `max_file_size_bytes`.
    pub max_file_size_bytes: u64,
    /// Takes a screenshot slot, or says (the wire message) why not.
    pub screenshot_slot: &'a dyn Fn() -> Result<(), String>,
}

impl std::fmt::Debug for Limits<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("max_file_size_bytes", &self.max_file_size_bytes)
            .finish_non_exhaustive()
    }
}

/// A handled operation: its reply and the `details` of its record.
#[derive(Debug)]
pub struct Outcome {
    pub reply: Result<Message, DesktopError>,
    pub details: Details,
}

fn ack() -> Message {
    Message::Ack(Ack::OK)
}

impl Desktop {
    /// Runs one computer-use request for a connection. Requests of other
    /// kinds are refused.
    pub fn handle(
        &self,
        conn: &ConnectionDesktop,
        request: &Message,
        limits: &Limits<'_>,
    ) -> Outcome {
        let mut details = request_details(request);
        if !self.settings.enabled {
            return Outcome {
                reply: Err(DesktopError::Disabled),
                details,
            };
        }
        let mut machine = lock(&self.machine);
        let reply = match request {
            Message::DisplayInfoRequest(_) => self.display_info(&mut machine, &mut details),
            Message::ScreenshotRequest(req) => {
                self.screenshot(&mut machine, req, limits, &mut details)
            }
            Message::InputAction(req) => self.input(&mut machine, req),
            Message::CursorPositionRequest(_) => self.cursor_position(&mut machine),
            Message::WindowListRequest(req) => {
                self.window_list(&mut machine, conn, req, &mut details)
            }
            Message::WindowFocus(req) => self.window_focus(&mut machine, conn, req),
            Message::AppListRequest(req) => self.app_list(req, &mut details),
            Message::AppLaunch(req) => self.app_launch(req, &mut details),
            Message::ClipboardRead(req) => {
                self.clipboard_read(&mut machine, conn, req, limits, &mut details)
            }
            Message::ClipboardWrite(req) => self.clipboard_write(&mut machine, conn, req, limits),
            Message::PermissionsCheckRequest(req) => Ok(self.permissions(req)),
            other => Err(DesktopError::Internal(format!(
                "{} is not a computer-use request",
                other.message_type().as_str()
            ))),
        };
        Outcome { reply, details }
    }

    fn permissions(&self, req: &PermissionsCheckRequest) -> Message {
        let backend = super::BUILT && !self.settings.wsl && self.settings.display.is_some();
        let permissions: BTreeMap<String, PermissionState> = req
            .permissions
            .iter()
            .map(|name| {
                let state = match name.as_str() {
                    "screen_recording" | "accessibility" | "input_monitoring" if backend => {
                        if self.settings.wayland {
                            PermissionState::Denied
                        } else {
                            PermissionState::Granted
                        }
                    }
                    _ => PermissionState::NotApplicable,
                };
                (name.clone(), state)
            })
            .collect();
        Message::PermissionsCheckResponse(PermissionsCheckResponse { permissions })
    }

    fn app_list(
        &self,
        _req: &AppListRequest,
        details: &mut Details,
    ) -> Result<Message, DesktopError> {
        let apps = apps::list(std::path::Path::new("/proc"))?;
        details.0.push(("apps_returned".into(), json!(apps.len())));
        Ok(Message::AppListResponse(AppListResponse { apps }))
    }

    fn app_launch(&self, req: &AppLaunch, details: &mut Details) -> Result<Message, DesktopError> {
        let path_var = self
            .settings
            .launch_env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let launch = apps::plan(req.executable_path.as_deref(), &req.args, path_var)?;
        let pid = self
            .launcher
            .start(&launch, &self.settings.launch_env, &self.settings.home)?;
        details.0.push(("pid".into(), json!(pid)));
        Ok(ack())
    }
}

/// The request part of each operation's `details` (CAPABILITIES.md §4.2);
/// what the result adds is pushed by the operation.
fn request_details(request: &Message) -> Details {
    match request {
        Message::ScreenshotRequest(r) => Details::new()
            .with("monitor", json!(r.monitor))
            .with("quality", json!(r.quality))
            .with("region", json!(r.region))
            .with("window_id", json!(r.window_id))
            .with("format", json!(r.format.as_str()))
            .with("image_bytes_returned", json!(0)),
        Message::InputAction(r) => Details::new()
            .with("action", json!(r.action.as_str()))
            .with("coordinate", json!(r.coordinate))
            .with("key", json!(r.key))
            .with("direction", json!(r.direction.map(|d| d.as_str())))
            .with("clicks", json!(r.clicks))
            .with(
                "text_length",
                json!(r.text.as_ref().map(|t| t.chars().count())),
            )
            .with(
                "modifiers",
                json!(
                    r.modifiers
                        .as_ref()
                        .map(|m| m.iter().map(|m| m.as_str()).collect::<Vec<_>>())
                ),
            )
            .with("button", json!(r.button.map(|b| b.as_str())))
            .with("paste", json!(r.paste)),
        Message::WindowListRequest(r) => Details::new()
            .with("app_bundle_id", json!(r.app_bundle_id))
            .with("include_minimized", json!(r.include_minimized))
            .with("include_offscreen", json!(r.include_offscreen)),
        Message::WindowFocus(r) => Details::new()
            .with("window_id", json!(r.window_id))
            .with("raise", json!(r.raise)),
        Message::AppListRequest(r) => {
            Details::new().with("include_background", json!(r.include_background))
        }
        Message::AppLaunch(r) => Details::new()
            .with("bundle_id", json!(r.bundle_id))
            .with("executable_path", json!(r.executable_path))
            .with("args_count", json!(r.args.len()))
            .with("activate", json!(r.activate)),
        Message::ClipboardRead(r) => Details::new()
            .with("format", json!(r.format.as_str()))
            .with("size_bytes", json!(0)),
        Message::ClipboardWrite(r) => Details::new()
            .with("format", json!(r.format.as_str()))
            .with("size_bytes", json!(r.content.len())),
        Message::PermissionsCheckRequest(r) => {
            Details::new().with("permissions", json!(r.permissions))
        }
        _ => Details::new(),
    }
}

/// The clipboard paths need `enable_clipboard`, then the text format.
fn clipboard_gate(
    desktop: &Desktop,
    feature: &str,
    format: ClipboardFormat,
) -> Result<(), DesktopError> {
    if !desktop.settings.clipboard {
        return Err(DesktopError::unsupported(
            feature,
            "--enable-clipboard not set",
        ));
    }
    if format != ClipboardFormat::Text {
        return Err(DesktopError::unsupported(
            feature,
            format!("format '{}' not supported", format.as_str()),
        ));
    }
    Ok(())
}

#[cfg(all(feature = "desktop", target_os = "linux"))]
mod backend;

#[cfg(not(all(feature = "desktop", target_os = "linux")))]
mod backend {
    //! No desktop in this build: every operation but the permission check
    //! is refused.
    use super::*;

    const REASON: &str = "no display reachable";

    fn none<T>(feature: &str) -> Result<T, DesktopError> {
        Err(DesktopError::unsupported(feature, REASON))
    }

    impl Desktop {
        pub(super) fn display_info(
            &self,
            _: &mut Machine,
            _: &mut Details,
        ) -> Result<Message, DesktopError> {
            none("display.info")
        }
        pub(super) fn screenshot(
            &self,
            _: &mut Machine,
            _: &ScreenshotRequest,
            _: &Limits<'_>,
            _: &mut Details,
        ) -> Result<Message, DesktopError> {
            none("screenshot")
        }
        pub(super) fn input(
            &self,
            _: &mut Machine,
            _: &InputAction,
        ) -> Result<Message, DesktopError> {
            none("input")
        }
        pub(super) fn cursor_position(&self, _: &mut Machine) -> Result<Message, DesktopError> {
            none("cursor.position")
        }
        pub(super) fn window_list(
            &self,
            _: &mut Machine,
            _: &ConnectionDesktop,
            _: &WindowListRequest,
            _: &mut Details,
        ) -> Result<Message, DesktopError> {
            none("window.list")
        }
        pub(super) fn window_focus(
            &self,
            _: &mut Machine,
            _: &ConnectionDesktop,
            _: &WindowFocus,
        ) -> Result<Message, DesktopError> {
            none("window.focus")
        }
        pub(super) fn clipboard_read(
            &self,
            _: &mut Machine,
            _: &ConnectionDesktop,
            req: &ClipboardRead,
            _: &Limits<'_>,
            _: &mut Details,
        ) -> Result<Message, DesktopError> {
            clipboard_gate(self, "clipboard.read", req.format)?;
            none("clipboard.read")
        }
        pub(super) fn clipboard_write(
            &self,
            _: &mut Machine,
            _: &ConnectionDesktop,
            req: &ClipboardWrite,
            _: &Limits<'_>,
        ) -> Result<Message, DesktopError> {
            clipboard_gate(self, "clipboard.write", req.format)?;
            none("clipboard.write")
        }
    }
}
