//! The closed vocabularies of the wire: message types, capabilities, error
//! codes and the small enums used inside payloads.
//!
//! Spellings here are exact and case-sensitive (PROTOCOL.md Appendix C, §4.2.4,
//! §8). Nothing in this module performs I/O.

use super::wire_enum::wire_enum;

wire_enum! {
    /// Every message type name of protocol 1.1 (PROTOCOL.md Appendix C).
    pub enum MessageType {
        Hello = "HELLO",
        HelloAck = "HELLO_ACK",
        DirectoryListRequest = "DIRECTORY_LIST_REQUEST",
        DirectoryListResponse = "DIRECTORY_LIST_RESPONSE",
        AttachSession = "ATTACH_SESSION",
        SessionAttached = "SESSION_ATTACHED",
        ActivateSession = "ACTIVATE_SESSION",
        SessionActivated = "SESSION_ACTIVATED",
        RestoreSession = "RESTORE_SESSION",
        SessionRestored = "SESSION_RESTORED",
        DetachSession = "DETACH_SESSION",
        ExecuteCommand = "EXECUTE_COMMAND",
        CommandResult = "COMMAND_RESULT",
        FileRead = "FILE_READ",
        FileContents = "FILE_CONTENTS",
        FileWrite = "FILE_WRITE",
        FileStat = "FILE_STAT",
        FileStatResponse = "FILE_STAT_RESPONSE",
        FileList = "FILE_LIST",
        FileListResponse = "FILE_LIST_RESPONSE",
        FileDelete = "FILE_DELETE",
        FileMove = "FILE_MOVE",
        Ack = "ACK",
        Error = "ERROR",
        Ping = "PING",
        Pong = "PONG",
        Status = "STATUS",
        SessionRevoked = "SESSION_REVOKED",
        LocalLlmCompletion = "LOCAL_LLM_COMPLETION",
        LocalLlmCompletionChunk = "LOCAL_LLM_COMPLETION_CHUNK",
        LocalLlmCompletionResponse = "LOCAL_LLM_COMPLETION_RESPONSE",
        ScreenshotRequest = "SCREENSHOT_REQUEST",
        ScreenshotResponse = "SCREENSHOT_RESPONSE",
        InputAction = "INPUT_ACTION",
        CursorPositionRequest = "CURSOR_POSITION_REQUEST",
        CursorPositionResponse = "CURSOR_POSITION_RESPONSE",
        DisplayInfoRequest = "DISPLAY_INFO_REQUEST",
        DisplayInfoResponse = "DISPLAY_INFO_RESPONSE",
        WindowListRequest = "WINDOW_LIST_REQUEST",
        WindowListResponse = "WINDOW_LIST_RESPONSE",
        WindowFocus = "WINDOW_FOCUS",
        AppListRequest = "APP_LIST_REQUEST",
        AppListResponse = "APP_LIST_RESPONSE",
        AppLaunch = "APP_LAUNCH",
        ClipboardRead = "CLIPBOARD_READ",
        ClipboardReadResponse = "CLIPBOARD_READ_RESPONSE",
        ClipboardWrite = "CLIPBOARD_WRITE",
        PermissionsCheckRequest = "PERMISSIONS_CHECK_REQUEST",
        PermissionsCheckResponse = "PERMISSIONS_CHECK_RESPONSE",
        RequestRecordingConsent = "REQUEST_RECORDING_CONSENT",
        RecordingConsentResult = "RECORDING_CONSENT_RESULT",
        StartRecording = "START_RECORDING",
        RecordingStarted = "RECORDING_STARTED",
        StopRecording = "STOP_RECORDING",
        RecordingSummary = "RECORDING_SUMMARY",
        RecordingFetch = "RECORDING_FETCH",
        RecordingData = "RECORDING_DATA",
        ApplyRecordingReview = "APPLY_RECORDING_REVIEW",
        RecordingReviewApplied = "RECORDING_REVIEW_APPLIED",
        RecordingStep = "RECORDING_STEP",
    }
}

impl MessageType {
    /// The capability a request of this type needs (PROTOCOL.md §5.3), or
    /// `None` for types that are not requests.
    pub fn required_capability(self) -> Option<Capability> {
        use MessageType as T;
        Some(match self {
            T::ExecuteCommand => Capability::Shell,
            T::FileRead
            | T::FileWrite
            | T::FileStat
            | T::FileList
            | T::FileDelete
            | T::FileMove => Capability::Files,
            T::ScreenshotRequest
            | T::InputAction
            | T::CursorPositionRequest
            | T::DisplayInfoRequest
            | T::WindowListRequest
            | T::WindowFocus
            | T::AppListRequest
            | T::AppLaunch
            | T::ClipboardRead
            | T::ClipboardWrite
            | T::PermissionsCheckRequest => Capability::ComputerUse,
            T::LocalLlmCompletion => Capability::LocalLlm,
            T::RequestRecordingConsent
            | T::StartRecording
            | T::StopRecording
            | T::ApplyRecordingReview
            | T::RecordingFetch => Capability::Recording,
            T::DirectoryListRequest
            | T::AttachSession
            | T::ActivateSession
            | T::RestoreSession
            | T::DetachSession => Capability::DirectoryBrowse,
            _ => return None,
        })
    }

    /// True for the platform→shim request types of PROTOCOL.md §5.3: the ones
    /// that get an `ERROR` reply when their envelope or payload is invalid.
    pub fn is_request(self) -> bool {
        self.required_capability().is_some()
    }

    /// True for the five control-connection requests (CONTROL.md §3.3).
    pub fn is_control_request(self) -> bool {
        self.required_capability() == Some(Capability::DirectoryBrowse)
    }

    /// True for the reserved workflow-recording names (PROTOCOL.md §7.15),
    /// whose payloads are only required to be objects.
    pub fn is_recording(self) -> bool {
        use MessageType as T;
        matches!(
            self,
            T::RequestRecordingConsent
                | T::RecordingConsentResult
                | T::StartRecording
                | T::RecordingStarted
                | T::StopRecording
                | T::RecordingSummary
                | T::RecordingFetch
                | T::RecordingData
                | T::ApplyRecordingReview
                | T::RecordingReviewApplied
                | T::RecordingStep
        )
    }

    /// Types whose `payload` may be omitted (PROTOCOL.md §2).
    pub fn payload_optional(self) -> bool {
        use MessageType as T;
        matches!(
            self,
            T::Ping
                | T::Pong
                | T::CursorPositionRequest
                | T::DisplayInfoRequest
                | T::WindowListRequest
                | T::AppListRequest
                | T::ClipboardRead
        )
    }
}

wire_enum! {
    /// Capability names (PROTOCOL.md §4.2.4), in advertisement order.
    pub enum Capability {
        Shell = "shell",
        Files = "files",
        ComputerUse = "computer_use",
        LocalLlm = "local_llm",
        HardwareSerial = "hardware_serial",
        HardwareUsb = "hardware_usb",
        HardwareGpio = "hardware_gpio",
        DirectoryBrowse = "directory_browse",
        /// Reserved: never advertised.
        Recording = "recording",
    }
}

wire_enum! {
    /// `HELLO.platform` (PROTOCOL.md §4.2.2).
    pub enum Platform {
        Darwin = "darwin",
        Linux = "linux",
        Windows = "windows",
        Wsl2 = "wsl2",
    }
}

wire_enum! {
    /// `HELLO.arch` (PROTOCOL.md §4.2.3).
    pub enum Arch {
        X86_64 = "x86_64",
        Arm64 = "arm64",
    }
}

wire_enum! {
    /// Content encoding of `FILE_READ` / `FILE_WRITE` / `FILE_CONTENTS`.
    pub enum Encoding {
        Utf8 = "utf-8",
        Base64 = "base64",
    }
}

wire_enum! {
    /// `FILE_READ.format`.
    pub enum ReadFormat {
        Text = "text",
        Bytes = "bytes",
    }
}

wire_enum! {
    /// `EXECUTE_COMMAND.shell` (PROTOCOL.md §7.1).
    pub enum Shell {
        Auto = "auto",
        Bash = "bash",
        Sh = "sh",
        Zsh = "zsh",
        Pwsh = "pwsh",
        Powershell = "powershell",
        Cmd = "cmd",
    }
}

wire_enum! {
    /// Role of a `LOCAL_LLM_COMPLETION` message.
    pub enum ChatRole {
        System = "system",
        User = "user",
        Assistant = "assistant",
    }
}

wire_enum! {
    /// Why a local LLM completion ended.
    pub enum FinishReason {
        Stop = "stop",
        Length = "length",
        ContentFilter = "content_filter",
    }
}

wire_enum! {
    /// Image format of a screenshot.
    pub enum ImageFormat {
        Jpeg = "jpeg",
        Png = "png",
    }
}

wire_enum! {
    /// `INPUT_ACTION.action`.
    pub enum InputActionKind {
        LeftClick = "left_click",
        RightClick = "right_click",
        DoubleClick = "double_click",
        MiddleClick = "middle_click",
        TripleClick = "triple_click",
        MouseMove = "mouse_move",
        MouseDown = "mouse_down",
        MouseUp = "mouse_up",
        Drag = "drag",
        Type = "type",
        Key = "key",
        HoldKey = "hold_key",
        Scroll = "scroll",
        Wait = "wait",
    }
}

wire_enum! {
    /// `INPUT_ACTION.direction` (key press direction).
    pub enum KeyDirection {
        Up = "up",
        Down = "down",
    }
}

wire_enum! {
    /// `INPUT_ACTION.button`.
    pub enum MouseButton {
        Left = "left",
        Middle = "middle",
        Right = "right",
    }
}

wire_enum! {
    /// `INPUT_ACTION.modifiers` entries.
    pub enum Modifier {
        Shift = "shift",
        Ctrl = "ctrl",
        Alt = "alt",
        Super = "super",
    }
}

wire_enum! {
    /// `INPUT_ACTION.scroll_direction`.
    pub enum ScrollDirection {
        Up = "up",
        Down = "down",
        Left = "left",
        Right = "right",
    }
}

wire_enum! {
    /// Clipboard content kind.
    pub enum ClipboardFormat {
        Text = "text",
        Image = "image",
    }
}

wire_enum! {
    /// One entry of `PERMISSIONS_CHECK_RESPONSE.permissions`.
    pub enum PermissionState {
        Granted = "granted",
        Denied = "denied",
        Unknown = "unknown",
        NotApplicable = "not_applicable",
    }
}

wire_enum! {
    /// `HELLO.recording_channels` values (reserved; always empty today).
    pub enum RecordingChannel {
        Floor = "floor",
        Browser = "browser",
        DesktopAx = "desktop_ax",
    }
}

wire_enum! {
    /// `HELLO.recording_routes` values (reserved; always empty today).
    pub enum RecordingRoute {
        ExtractThenCloud = "extract_then_cloud",
        LocalVlm = "local_vlm",
        ScreenshotsToCloud = "screenshots_to_cloud",
    }
}

wire_enum! {
    /// Error codes the shim sends (PROTOCOL.md §8). Inbound `ERROR` frames may
    /// carry any string; see [`super::ErrorCodeText`].
    pub enum ErrorCode {
        PathOutsideAllowedRoot = "PATH_OUTSIDE_ALLOWED_ROOT",
        PathReservedName = "PATH_RESERVED_NAME",
        PathInvalidChars = "PATH_INVALID_CHARS",
        PathNotFound = "PATH_NOT_FOUND",
        PathNotEmpty = "PATH_NOT_EMPTY",
        PathExists = "PATH_EXISTS",
        /// Audit only; never sent.
        CommandTimeout = "COMMAND_TIMEOUT",
        ShellNotAvailable = "SHELL_NOT_AVAILABLE",
        /// Platform-side; never sent.
        UnsupportedArch = "UNSUPPORTED_ARCH",
        CapabilityNotGranted = "CAPABILITY_NOT_GRANTED",
        /// Reserved for the platform.
        AuthFailed = "AUTH_FAILED",
        ShimOverloaded = "SHIM_OVERLOADED",
        InternalError = "INTERNAL_ERROR",
        FileTooLarge = "FILE_TOO_LARGE",
        /// Audit only; never sent.
        DependencyMissing = "DEPENDENCY_MISSING",
        DirectoryReferenceInvalid = "DIRECTORY_REFERENCE_INVALID",
        DirectoryUnavailable = "DIRECTORY_UNAVAILABLE",
        RootGrantInvalid = "ROOT_GRANT_INVALID",
        SessionNotAttached = "SESSION_NOT_ATTACHED",
        SessionAlreadyActive = "SESSION_ALREADY_ACTIVE",
        SessionRevisionMismatch = "SESSION_REVISION_MISMATCH",
        WindowStale = "WINDOW_STALE",
        PermissionPending = "PERMISSION_PENDING",
        FeatureNotSupported = "FEATURE_NOT_SUPPORTED",
        ClipboardConcealed = "CLIPBOARD_CONCEALED",
        InputOutOfBounds = "INPUT_OUT_OF_BOUNDS",
        ModelNotAvailable = "MODEL_NOT_AVAILABLE",
        LocalLlmBusy = "LOCAL_LLM_BUSY",
        LocalLlmFailed = "LOCAL_LLM_FAILED",
        RecordingNotFound = "RECORDING_NOT_FOUND",
        RecordingChannelUnavailable = "RECORDING_CHANNEL_UNAVAILABLE",
        RecordingAlreadyActive = "RECORDING_ALREADY_ACTIVE",
        RecordingReviewInvalid = "RECORDING_REVIEW_INVALID",
        ConsentRequired = "CONSENT_REQUIRED",
        InterpretationUnavailable = "INTERPRETATION_UNAVAILABLE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire_enum::WireEnum;

    #[test]
    fn message_type_index_has_sixty_distinct_names() {
        let names: std::collections::BTreeSet<_> =
            MessageType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names.len(), 60);
        for t in MessageType::ALL {
            assert_eq!(MessageType::parse(t.as_str()), Some(*t));
        }
        assert_eq!(MessageType::parse("ping"), None);
    }

    #[test]
    fn request_types_are_exactly_the_capability_gate_table() {
        let requests: Vec<_> = MessageType::ALL
            .iter()
            .filter(|t| t.is_request())
            .map(|t| t.as_str())
            .collect();
        assert_eq!(requests.len(), 1 + 6 + 11 + 1 + 5 + 5);
        assert!(!MessageType::Ping.is_request());
        assert!(!MessageType::SessionRevoked.is_request());
        assert!(!MessageType::RecordingStep.is_request());
        assert_eq!(
            MessageType::FileMove.required_capability(),
            Some(Capability::Files)
        );
    }
}
