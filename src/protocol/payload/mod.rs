//! Typed messages: one variant per message type of protocol 1.1, each with
//! its payload struct (PROTOCOL.md §4, §7, Appendix B; CONTROL.md §4–§11).
//!
//! Payload structs serialize with every schema field present, `null` for
//! absent optional values, in the order the specification's examples use.
//! Decoding goes through [`Fields`], which names the offending field on any
//! failure.

mod control;
mod data;
mod desktop;
mod llm;
mod session;

use serde::Serialize;
use serde_json::{Map, Value};

pub(crate) use control::PAIR_RULE;
/// The control connection's messages (CONTROL.md).
pub use control::{
    ActivateSession, AttachSession, DIRECTORY_PAGE_SIZE, DetachSession, DirectoryEntry,
    DirectoryListRequest, DirectoryListResponse, RestoreSession, SessionActivated, SessionAttached,
    SessionRestored,
};
/// The file and command messages.
pub use data::{
    CommandResult, ExecuteCommand, FileContents, FileDelete, FileList, FileListEntry,
    FileListResponse, FileMove, FileRead, FileStat, FileStatResponse, FileWrite,
};
/// The desktop capability messages.
pub use desktop::{
    AppInfo, AppLaunch, AppListRequest, AppListResponse, ClipboardRead, ClipboardReadResponse,
    ClipboardWrite, CursorPositionResponse, DisplayInfoResponse, InputAction, Monitor,
    PermissionsCheckRequest, PermissionsCheckResponse, ScreenshotMeta, ScreenshotRequest,
    ScreenshotResponse, WindowFocus, WindowInfo, WindowListRequest, WindowListResponse,
};
/// The local LLM messages.
pub use llm::{
    ChatMessage, LocalLlmCompletion, LocalLlmCompletionChunk, LocalLlmCompletionResponse,
    TokenCounts,
};
/// The handshake and session messages, and the defaults `HELLO_ACK` may omit.
pub use session::{
    Ack, DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_FILE_SIZE_BYTES,
    Empty, ErrorCodeText, ErrorPayload, Hello, HelloAck, SessionRevoked, Status,
};

use super::fields::{FieldResult, Fields};
use super::types::MessageType;

macro_rules! messages {
    ( $( $(#[$doc:meta])* $variant:ident($payload:ty) ),+ $(,)? ) => {
        /// A decoded message: its type and typed payload.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Message {
            $( $(#[$doc])* $variant($payload), )+
            /// A reserved workflow-recording message (PROTOCOL.md §7.15): only
            /// the type name is recognised; the payload is any object.
            Recording {
                /// One of the recording type names.
                kind: MessageType,
                /// The payload, unchecked.
                payload: Map<String, Value>,
            },
        }

        impl Message {
            /// The wire type of this message.
            pub fn message_type(&self) -> MessageType {
                match self {
                    $( Message::$variant(_) => MessageType::$variant, )+
                    Message::Recording { kind, .. } => *kind,
                }
            }

            /// Decodes the payload object of a message of type `kind`.
            pub(crate) fn decode_payload(
                kind: MessageType,
                payload: Map<String, Value>,
            ) -> FieldResult<Message> {
                let fields = Fields::new(payload);
                match kind {
                    $( MessageType::$variant => <$payload>::decode(fields).map(Message::$variant), )+
                    // What remains are exactly the reserved recording names.
                    recording => Ok(Message::Recording { kind: recording, payload: fields.into_map() }),
                }
            }
        }

        impl Serialize for Message {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( Message::$variant(p) => p.serialize(s), )+
                    Message::Recording { payload, .. } => payload.serialize(s),
                }
            }
        }
    };
}

messages! {
    Hello(Hello),
    HelloAck(HelloAck),
    DirectoryListRequest(DirectoryListRequest),
    DirectoryListResponse(DirectoryListResponse),
    AttachSession(AttachSession),
    SessionAttached(SessionAttached),
    ActivateSession(ActivateSession),
    SessionActivated(SessionActivated),
    RestoreSession(RestoreSession),
    SessionRestored(SessionRestored),
    DetachSession(DetachSession),
    ExecuteCommand(ExecuteCommand),
    CommandResult(CommandResult),
    FileRead(FileRead),
    FileContents(FileContents),
    FileWrite(FileWrite),
    FileStat(FileStat),
    FileStatResponse(FileStatResponse),
    FileList(FileList),
    FileListResponse(FileListResponse),
    FileDelete(FileDelete),
    FileMove(FileMove),
    Ack(Ack),
    Error(ErrorPayload),
    Ping(Empty),
    Pong(Empty),
    Status(Status),
    SessionRevoked(SessionRevoked),
    LocalLlmCompletion(LocalLlmCompletion),
    LocalLlmCompletionChunk(LocalLlmCompletionChunk),
    LocalLlmCompletionResponse(LocalLlmCompletionResponse),
    ScreenshotRequest(ScreenshotRequest),
    ScreenshotResponse(ScreenshotResponse),
    InputAction(InputAction),
    CursorPositionRequest(Empty),
    CursorPositionResponse(CursorPositionResponse),
    DisplayInfoRequest(Empty),
    DisplayInfoResponse(DisplayInfoResponse),
    WindowListRequest(WindowListRequest),
    WindowListResponse(WindowListResponse),
    WindowFocus(WindowFocus),
    AppListRequest(AppListRequest),
    AppListResponse(AppListResponse),
    AppLaunch(AppLaunch),
    ClipboardRead(ClipboardRead),
    ClipboardReadResponse(ClipboardReadResponse),
    ClipboardWrite(ClipboardWrite),
    PermissionsCheckRequest(PermissionsCheckRequest),
    PermissionsCheckResponse(PermissionsCheckResponse),
}
