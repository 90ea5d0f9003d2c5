//! Why an inbound frame was refused, and what (if anything) to answer.
//!
//! PROTOCOL.md §2.3–§2.4: an invalid frame is dropped, except that a request
//! type with a usable string `id` gets an `ERROR` naming the problem. Frames of
//! another major version are always dropped. This is the one place where a
//! decoding failure is mapped to a wire error code.

use std::fmt;

use super::fields::FieldError;
use super::payload::PAIR_RULE;
use super::types::{ErrorCode, MessageType};

/// One precise reason an inbound frame is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// The message is larger than 16 MiB.
    TooLarge {
        /// Its size in bytes.
        len: usize,
    },
    /// The bytes are not UTF-8.
    NotUtf8,
    /// Not JSON (syntax, trailing data, lone surrogate escape, number out of range).
    Syntax(String),
    /// Arrays/objects nested deeper than [`super::MAX_JSON_DEPTH`].
    TooDeep,
    /// An object repeats a key.
    DuplicateKey(String),
    /// More JSON values than [`super::MAX_FRAME_JSON_VALUES`].
    TooManyValues,
    /// The top-level value is not an object.
    NotAnObject,
    /// `type` is absent.
    MissingType,
    /// `type` is not a string.
    TypeNotString,
    /// `type` names no message of protocol 1.1.
    UnknownType(String),
    /// `id` is absent.
    MissingId,
    /// `id` is not a string.
    IdNotString,
    /// `id` is longer than [`super::MAX_MESSAGE_ID_BYTES`]: no usable id.
    IdTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// `ts` is absent.
    MissingTs,
    /// `ts` is not a number.
    TsNotNumber,
    /// `version` is present but not a string (`null` included).
    VersionNotString,
    /// `pending_capacity` is neither an integer nor null.
    PendingCapacityInvalid,
    /// The envelope has a key other than the six of PROTOCOL.md §2.
    UnknownEnvelopeKey(String),
    /// `version` parses as `major.minor` with a major other than ours.
    WrongMajor {
        /// The version as sent.
        version: String,
    },
    /// `payload` is absent for a type that requires it.
    MissingPayload,
    /// `payload` is not an object.
    PayloadNotObject,
    /// A payload field breaks the schema.
    Payload(FieldError),
}

fn excerpt(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::TooLarge { len } => {
                write!(f, "frame of {len} bytes exceeds the 16 MiB message limit")
            }
            Invalid::NotUtf8 => f.write_str("frame is not valid UTF-8"),
            Invalid::Syntax(why) => write!(f, "frame is not valid JSON: {why}"),
            Invalid::TooDeep => write!(
                f,
                "frame nests arrays/objects deeper than {}",
                super::MAX_JSON_DEPTH
            ),
            Invalid::DuplicateKey(key) => {
                write!(f, "frame repeats the key {:?}", excerpt(key))
            }
            Invalid::TooManyValues => write!(
                f,
                "frame holds more than {} JSON values",
                super::MAX_FRAME_JSON_VALUES
            ),
            Invalid::NotAnObject => f.write_str("frame is not a JSON object"),
            Invalid::MissingType => f.write_str("envelope field 'type' is required"),
            Invalid::TypeNotString => f.write_str("envelope field 'type' must be a string"),
            Invalid::UnknownType(t) => write!(f, "unknown message type {:?}", excerpt(t)),
            Invalid::MissingId => f.write_str("envelope field 'id' is required"),
            Invalid::IdNotString => f.write_str("envelope field 'id' must be a string"),
            Invalid::IdTooLong { len } => write!(
                f,
                "envelope field 'id' is {len} bytes, longer than the {}-byte limit",
                super::MAX_MESSAGE_ID_BYTES
            ),
            Invalid::MissingTs => f.write_str("envelope field 'ts' is required"),
            Invalid::TsNotNumber => f.write_str("envelope field 'ts' must be a number"),
            Invalid::VersionNotString => f.write_str("envelope field 'version' must be a string"),
            Invalid::PendingCapacityInvalid => {
                f.write_str("envelope field 'pending_capacity' must be an integer or null")
            }
            Invalid::UnknownEnvelopeKey(key) => {
                write!(f, "envelope field '{}' is not allowed", excerpt(key))
            }
            Invalid::WrongMajor { version } => write!(
                f,
                "frame version {:?} has a major version other than 1",
                excerpt(version)
            ),
            Invalid::MissingPayload => f.write_str("envelope field 'payload' is required"),
            Invalid::PayloadNotObject => f.write_str("envelope field 'payload' must be an object"),
            Invalid::Payload(field) => field.fmt(f),
        }
    }
}

/// The `ERROR` the shim answers to an invalid request it can identify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// The request's `id`, to be reused verbatim.
    pub id: String,
    /// The request's type.
    pub request: MessageType,
    /// `INTERNAL_ERROR`, or `DIRECTORY_REFERENCE_INVALID` for a broken
    /// reference pair / cursor rule.
    pub code: ErrorCode,
}

/// An inbound frame that was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What is wrong with it.
    pub invalid: Invalid,
    /// `Some` when PROTOCOL.md §2.4 wants an `ERROR` reply; `None` means drop
    /// silently. Either way nothing is admitted, executed or audited.
    pub reply: Option<ErrorReply>,
}

impl DecodeError {
    /// A frame dropped without reply.
    pub(crate) fn dropped(invalid: Invalid) -> Self {
        Self {
            invalid,
            reply: None,
        }
    }

    /// A frame of type `kind` with string `id`: answered when it is a request.
    pub(crate) fn identified(invalid: Invalid, kind: MessageType, id: &str) -> Self {
        if !kind.is_request() || matches!(invalid, Invalid::WrongMajor { .. }) {
            return Self::dropped(invalid);
        }
        let pair_rule = matches!(
            &invalid,
            Invalid::Payload(FieldError { problem: super::fields::FieldProblem::Constraint(why), .. })
                if kind == MessageType::DirectoryListRequest && why == PAIR_RULE
        );
        let code = if pair_rule {
            ErrorCode::DirectoryReferenceInvalid
        } else {
            ErrorCode::InternalError
        };
        Self {
            reply: Some(ErrorReply {
                id: id.to_owned(),
                request: kind,
                code,
            }),
            invalid,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.invalid.fmt(f)
    }
}

impl std::error::Error for DecodeError {}

/// An outbound frame that could not be serialized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// `ts` is NaN or infinite (JSON has no such numbers).
    NonFiniteTs,
    /// The JSON serializer failed (not expected for the message types here).
    Json(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::NonFiniteTs => f.write_str("frame timestamp is not a finite number"),
            EncodeError::Json(why) => write!(f, "frame could not be serialized: {why}"),
        }
    }
}

impl std::error::Error for EncodeError {}
