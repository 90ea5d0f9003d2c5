//! Payloads of computer use (PROTOCOL.md §7.14, Appendix B). Parsing only:
//! what the operations mean is CAPABILITIES.md §4, implemented elsewhere.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::protocol::fields::{FieldResult, Fields};
use crate::protocol::types::{
    ClipboardFormat, ImageFormat, InputActionKind, KeyDirection, Modifier, MouseButton,
    PermissionState, ScrollDirection,
};

/// `SCREENSHOT_REQUEST`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScreenshotRequest {
    pub monitor: i64,
    pub quality: i64,
    /// `[x1, y1, x2, y2]`.
    pub region: Option<[i64; 4]>,
    pub window_id: Option<String>,
    pub format: ImageFormat,
    pub include_cursor: bool,
}

impl ScreenshotRequest {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            monitor: f.int_or("monitor", 0)?,
            quality: f.int_or("quality", 75)?,
            region: f.opt_int_array("region")?,
            window_id: f.opt_string("window_id")?,
            format: f.enum_or("format", ImageFormat::Jpeg)?,
            include_cursor: f.bool_or("include_cursor", true)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `SCREENSHOT_RESPONSE.meta`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScreenshotMeta {
    pub origin: [i64; 2],
    pub display_id: i64,
}

impl ScreenshotMeta {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            origin: f.int_array_or("origin", [0, 0])?,
            display_id: f.int_or("display_id", 0)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `SCREENSHOT_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScreenshotResponse {
    pub image_base64: String,
    pub mime_type: String,
    pub width: i64,
    pub height: i64,
    pub monitor: i64,
    pub region: Option<[i64; 4]>,
    pub display_scale: f64,
    pub logical_size: Option<[i64; 2]>,
    pub meta: ScreenshotMeta,
}

impl ScreenshotResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            image_base64: f.string("image_base64")?,
            mime_type: f.string_or("mime_type", "image/jpeg")?,
            width: f.int("width")?,
            height: f.int("height")?,
            monitor: f.int_or("monitor", 0)?,
            region: f.opt_int_array("region")?,
            display_scale: f.number_or("display_scale", 1.0)?,
            logical_size: f.opt_int_array("logical_size")?,
            meta: f.object_or("meta", ScreenshotMeta::default(), ScreenshotMeta::decode)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `INPUT_ACTION`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputAction {
    pub action: InputActionKind,
    pub coordinate: Option<[i64; 2]>,
    pub text: Option<String>,
    pub key: Option<String>,
    pub direction: Option<KeyDirection>,
    pub clicks: Option<i64>,
    pub button: Option<MouseButton>,
    pub modifiers: Option<Vec<Modifier>>,
    pub scroll_amount: Option<i64>,
    pub scroll_direction: Option<ScrollDirection>,
    pub duration_ms: Option<i64>,
    pub path: Option<Vec<[i64; 2]>>,
    pub paste: bool,
    pub preserve_clipboard: bool,
}

impl InputAction {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            action: f.enumeration("action")?,
            coordinate: f.opt_int_array("coordinate")?,
            text: f.opt_string("text")?,
            key: f.opt_string("key")?,
            direction: f.opt_enum("direction")?,
            clicks: f.opt_int("clicks")?,
            button: f.opt_enum("button")?,
            modifiers: f.opt_enums("modifiers")?,
            scroll_amount: f.opt_int("scroll_amount")?,
            scroll_direction: f.opt_enum("scroll_direction")?,
            duration_ms: f.opt_int("duration_ms")?,
            path: f.opt_int_arrays("path")?,
            paste: f.bool_or("paste", false)?,
            preserve_clipboard: f.bool_or("preserve_clipboard", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `CURSOR_POSITION_RESPONSE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CursorPositionResponse {
    pub x: i64,
    pub y: i64,
    pub monitor: i64,
}

impl CursorPositionResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            x: f.int("x")?,
            y: f.int("y")?,
            monitor: f.int_or("monitor", 0)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// One monitor of `DISPLAY_INFO_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Monitor {
    pub index: i64,
    pub primary: bool,
    pub physical_size: [i64; 2],
    pub logical_size: [i64; 2],
    pub scale: f64,
    pub origin: [i64; 2],
}

impl Monitor {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            index: f.int("index")?,
            primary: f.bool_or("primary", false)?,
            physical_size: f.int_array("physical_size")?,
            logical_size: f.int_array("logical_size")?,
            scale: f.number_or("scale", 1.0)?,
            origin: f.int_array_or("origin", [0, 0])?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `DISPLAY_INFO_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DisplayInfoResponse {
    pub monitors: Vec<Monitor>,
}

impl DisplayInfoResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            monitors: f.objects("monitors", Monitor::decode)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `WINDOW_LIST_REQUEST` (payload may be omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WindowListRequest {
    pub app_bundle_id: Option<String>,
    pub include_minimized: bool,
    pub include_offscreen: bool,
}

impl WindowListRequest {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            app_bundle_id: f.opt_string("app_bundle_id")?,
            include_minimized: f.bool_or("include_minimized", false)?,
            include_offscreen: f.bool_or("include_offscreen", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// One window of `WINDOW_LIST_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowInfo {
    pub window_id: String,
    pub pid: i64,
    pub app_name: Option<String>,
    pub app_bundle_id: Option<String>,
    pub title: Option<String>,
    /// `[x1, y1, x2, y2]`.
    pub bounds: [i64; 4],
    pub monitor: i64,
    pub is_focused: bool,
    pub is_minimized: bool,
    pub is_fullscreen: bool,
}

impl WindowInfo {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            window_id: f.string("window_id")?,
            pid: f.int("pid")?,
            app_name: f.opt_string("app_name")?,
            app_bundle_id: f.opt_string("app_bundle_id")?,
            title: f.opt_string("title")?,
            bounds: f.int_array("bounds")?,
            monitor: f.int_or("monitor", 0)?,
            is_focused: f.bool_or("is_focused", false)?,
            is_minimized: f.bool_or("is_minimized", false)?,
            is_fullscreen: f.bool_or("is_fullscreen", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `WINDOW_LIST_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowListResponse {
    pub windows: Vec<WindowInfo>,
    pub truncated: bool,
}

impl WindowListResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            windows: f.objects("windows", WindowInfo::decode)?,
            truncated: f.bool_or("truncated", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `WINDOW_FOCUS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowFocus {
    pub window_id: String,
    pub raise: bool,
}

impl WindowFocus {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            window_id: f.string("window_id")?,
            raise: f.bool_or("raise", true)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `APP_LIST_REQUEST` (payload may be omitted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AppListRequest {
    pub include_background: bool,
}

impl AppListRequest {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            include_background: f.bool_or("include_background", false)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// One application of `APP_LIST_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppInfo {
    pub pid: i64,
    pub name: String,
    pub bundle_id: Option<String>,
    pub executable_path: Option<String>,
    pub is_frontmost: bool,
    pub window_count: i64,
}

impl AppInfo {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            pid: f.int("pid")?,
            name: f.string("name")?,
            bundle_id: f.opt_string("bundle_id")?,
            executable_path: f.opt_string("executable_path")?,
            is_frontmost: f.bool_or("is_frontmost", false)?,
            window_count: f.int_or("window_count", 0)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `APP_LIST_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppListResponse {
    pub apps: Vec<AppInfo>,
}

impl AppListResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            apps: f.objects("apps", AppInfo::decode)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `APP_LAUNCH`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppLaunch {
    pub bundle_id: Option<String>,
    pub executable_path: Option<String>,
    pub args: Vec<String>,
    pub activate: bool,
}

impl AppLaunch {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            bundle_id: f.opt_string("bundle_id")?,
            executable_path: f.opt_string("executable_path")?,
            args: f.strings_or_empty("args")?,
            activate: f.bool_or("activate", true)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `CLIPBOARD_READ` (payload may be omitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClipboardRead {
    pub format: ClipboardFormat,
}

impl Default for ClipboardRead {
    fn default() -> Self {
        Self {
            format: ClipboardFormat::Text,
        }
    }
}

impl ClipboardRead {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            format: f.enum_or("format", ClipboardFormat::Text)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `CLIPBOARD_READ_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClipboardReadResponse {
    pub format: ClipboardFormat,
    pub content: String,
    pub size_bytes: u64,
}

impl ClipboardReadResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            format: f.enum_or("format", ClipboardFormat::Text)?,
            content: f.string("content")?,
            size_bytes: f.nonneg("size_bytes")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `CLIPBOARD_WRITE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClipboardWrite {
    pub format: ClipboardFormat,
    pub content: String,
}

impl ClipboardWrite {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            format: f.enum_or("format", ClipboardFormat::Text)?,
            content: f.string("content")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `PERMISSIONS_CHECK_REQUEST`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PermissionsCheckRequest {
    pub permissions: Vec<String>,
}

impl PermissionsCheckRequest {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            permissions: f.strings("permissions")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `PERMISSIONS_CHECK_RESPONSE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PermissionsCheckResponse {
    pub permissions: BTreeMap<String, PermissionState>,
}

impl PermissionsCheckResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            permissions: f.enum_map("permissions")?,
        };
        f.finish()?;
        Ok(v)
    }
}
