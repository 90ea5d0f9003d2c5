//! The envelope: decoding bytes into a [`Frame`] and encoding it back.
//!
//! Decoding applies every rule of PROTOCOL.md §2.3 in one pass over a
//! strictly parsed value (see [`super::json`]); encoding writes the six
//! envelope keys in the reference's order and enforces the outbound size cap
//! of §1.4. Nothing here reads a clock: timestamps are the caller's.

use serde::Serialize;
use serde::ser::SerializeStruct;
use serde_json::{Map, Value};

use super::error::{DecodeError, EncodeError, Invalid};
use super::ids::MAX_MESSAGE_ID_BYTES;
use super::json::{StrictJsonError, parse_strict};
use super::payload::{ErrorPayload, Message};
use super::types::{Encoding, ErrorCode, MessageType};
use super::version::{SHIM_MAX_VERSION, Version};
use super::{MAX_WEBSOCKET_MESSAGE_BYTES, WIRE_VERSION};

/// One protocol frame: the envelope fields and the typed message.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Correlation id; a response reuses the request's verbatim.
    pub id: String,
    /// Sender's Unix time in seconds. Informational only.
    pub ts: f64,
    /// Sender's wire version; `"1.1"` when the frame omitted it.
    pub version: String,
    /// Backpressure hint (shim → platform); ignored inbound.
    pub pending_capacity: Option<i64>,
    /// Type and payload.
    pub message: Message,
}

impl Frame {
    /// A frame as the shim sends it: version `"1.1"`, no capacity value.
    pub fn new(id: impl Into<String>, ts: f64, message: Message) -> Self {
        Self {
            id: id.into(),
            ts,
            version: WIRE_VERSION.to_owned(),
            pending_capacity: None,
            message,
        }
    }

    /// Sets `pending_capacity` (terminal responses and `STATUS`, §9.1).
    pub fn with_capacity(mut self, capacity: u64) -> Self {
        self.pending_capacity = Some(i64::try_from(capacity).unwrap_or(i64::MAX));
        self
    }

    /// The message type.
    pub fn message_type(&self) -> MessageType {
        self.message.message_type()
    }
}

impl Serialize for Frame {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Frame", 6)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("ts", &self.ts)?;
        st.serialize_field("version", &self.version)?;
        st.serialize_field("pending_capacity", &self.pending_capacity)?;
        st.serialize_field("type", self.message_type().as_str())?;
        st.serialize_field("payload", &self.message)?;
        st.end()
    }
}

/// Decodes one inbound WebSocket message (PROTOCOL.md §2.3).
///
/// On failure the error says why and whether to answer (§2.4).
pub fn decode(bytes: impl AsRef<[u8]>) -> Result<Frame, DecodeError> {
    let bytes = bytes.as_ref();
    check_size(bytes.len())?;
    let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::dropped(Invalid::NotUtf8))?;
    decode_text(text)
}

/// [`decode`] for a message already known to be UTF-8 (a text frame, which
/// the WebSocket codec checked).
pub fn decode_text(text: &str) -> Result<Frame, DecodeError> {
    check_size(text.len())?;
    let value = parse_strict(text).map_err(|e| {
        DecodeError::dropped(match e {
            StrictJsonError::TooDeep => Invalid::TooDeep,
            StrictJsonError::DuplicateKey(k) => Invalid::DuplicateKey(k),
            StrictJsonError::TooManyValues => Invalid::TooManyValues,
            StrictJsonError::Syntax(s) => Invalid::Syntax(s),
        })
    })?;
    let Value::Object(mut envelope) = value else {
        return Err(DecodeError::dropped(Invalid::NotAnObject));
    };

    let kind = match envelope.remove("type") {
        None => return Err(DecodeError::dropped(Invalid::MissingType)),
        Some(Value::String(name)) => match MessageType::parse(&name) {
            Some(kind) => kind,
            None => return Err(DecodeError::dropped(Invalid::UnknownType(name))),
        },
        Some(_) => return Err(DecodeError::dropped(Invalid::TypeNotString)),
    };
    let id = match envelope.remove("id") {
        None => return Err(DecodeError::dropped(Invalid::MissingId)),
        Some(Value::String(id)) if id.len() > MAX_MESSAGE_ID_BYTES => {
            return Err(DecodeError::dropped(Invalid::IdTooLong { len: id.len() }));
        }
        Some(Value::String(id)) => id,
        Some(_) => return Err(DecodeError::dropped(Invalid::IdNotString)),
    };
    // From here on the frame is identified: a request gets an ERROR reply.
    decode_identified(kind, envelope)
        .map(|(ts, version, pending_capacity, message)| Frame {
            id: id.clone(),
            ts,
            version,
            pending_capacity,
            message,
        })
        .map_err(|invalid| DecodeError::identified(invalid, kind, &id))
}

fn check_size(len: usize) -> Result<(), DecodeError> {
    if len > MAX_WEBSOCKET_MESSAGE_BYTES {
        return Err(DecodeError::dropped(Invalid::TooLarge { len }));
    }
    Ok(())
}

type Decoded = (f64, String, Option<i64>, Message);

fn decode_identified(
    kind: MessageType,
    mut envelope: Map<String, Value>,
) -> Result<Decoded, Invalid> {
    let version = match envelope.remove("version") {
        None => WIRE_VERSION.to_owned(),
        Some(Value::String(v)) => v,
        Some(_) => return Err(Invalid::VersionNotString),
    };
    // A frame of another major is not ours to interpret at all (§2.4).
    if Version::parse(&version).is_some_and(|v| !v.same_major(&SHIM_MAX_VERSION)) {
        return Err(Invalid::WrongMajor { version });
    }
    let ts = match envelope.remove("ts") {
        None => return Err(Invalid::MissingTs),
        Some(Value::Number(n)) => n.as_f64().ok_or(Invalid::TsNotNumber)?,
        Some(_) => return Err(Invalid::TsNotNumber),
    };
    let pending_capacity = match envelope.remove("pending_capacity") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_i64().ok_or(Invalid::PendingCapacityInvalid)?),
        Some(_) => return Err(Invalid::PendingCapacityInvalid),
    };
    let payload = match envelope.remove("payload") {
        Some(Value::Object(map)) => map,
        Some(_) => return Err(Invalid::PayloadNotObject),
        None if kind.payload_optional() => Map::new(),
        None => return Err(Invalid::MissingPayload),
    };
    if let Some(key) = envelope.keys().next() {
        return Err(Invalid::UnknownEnvelopeKey(key.clone()));
    }
    let message = Message::decode_payload(kind, payload).map_err(Invalid::Payload)?;
    Ok((ts, version, pending_capacity, message))
}

/// Serializes a frame as compact JSON.
pub fn encode(frame: &Frame) -> Result<String, EncodeError> {
    if !frame.ts.is_finite() {
        return Err(EncodeError::NonFiniteTs);
    }
    serde_json::to_string(frame).map_err(|e| EncodeError::Json(e.to_string()))
}

/// Message of the `FILE_TOO_LARGE` substitute for an oversized response.
pub const OVERSIZE_MESSAGE: &str =
    "The local executor response exceeded the WebSocket message limit.";

/// Base64 content shorter than this is serialized like any other string;
/// longer, it is left in its own buffer and the envelope's text is built
/// around it (see [`Encoded`]).
const SPLICE_MIN_BYTES: usize = 64 * 1024;

/// An encoded response: its text, in up to three pieces that go to the
/// socket one after another as one message.
///
/// A large base64 `FILE_CONTENTS` keeps its content in the buffer it was
/// read into: the envelope before it (`head`) and after it (`tail`) are
/// separate strings, so the 13 MiB of a large read are neither copied nor
/// moved to make room for a few hundred bytes of envelope. Every other
/// response is one piece, its `head`. Equality compares the pieces, not
/// only the text they make.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    head: String,
    content: String,
    tail: String,
}

impl Encoded {
    /// Bytes of the whole text.
    pub fn len(&self) -> usize {
        self.head.len() + self.content.len() + self.tail.len()
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces in the order they are sent; only the first may be the
    /// whole text, and any may be empty.
    pub fn into_pieces(self) -> [String; 3] {
        [self.head, self.content, self.tail]
    }

    /// The whole text as one string (one copy when it is in pieces).
    pub fn into_string(self) -> String {
        if self.content.is_empty() && self.tail.is_empty() {
            return self.head;
        }
        let mut text = self.head;
        text.reserve_exact(self.content.len() + self.tail.len());
        text.push_str(&self.content);
        text.push_str(&self.tail);
        text
    }

    /// Rewrites the `pending_capacity` of a response that [`encode_response`]
    /// encoded, as its request releases its slot (PROTOCOL.md §9.1): the
    /// response is encoded when its reply is ready, possibly before its
    /// record is durable, and the capacity it announces must be the one it
    /// leaves. False, with the text unchanged, when the text carries no
    /// capacity number, or when the new number's extra digits would take
    /// the frame over the 16 MiB cap (it then keeps the capacity of its
    /// encoding).
    ///
    /// The envelope's member is the first `,"pending_capacity":` of the
    /// text, which is in its head: the content of a frame in pieces comes
    /// after every envelope member but the payload. Inside a JSON string
    /// every `"` is escaped, so a `"` right after a comma opens a string or
    /// closes one; a closing quote is never followed by
    /// `pending_capacity":`, and an opening one after a comma starts an
    /// object key (an array element is never followed by `:`). The
    /// envelope's members come first, in a fixed order, and none before it
    /// can hold an object.
    pub fn restamp_capacity(&mut self, capacity: u64) -> bool {
        const MEMBER: &str = ",\"pending_capacity\":";
        let Some(at) = self.head.find(MEMBER) else {
            return false;
        };
        let start = at + MEMBER.len();
        let digits = self.head.as_bytes()[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return false;
        }
        let mut spelled = [0u8; 20];
        let number = decimal(capacity, &mut spelled);
        let current = start..start + digits;
        // The common case: nothing was admitted or finished meanwhile.
        if self.head.as_bytes()[current.clone()] == *number {
            return true;
        }
        if self.len() - digits + number.len() > MAX_WEBSOCKET_MESSAGE_BYTES {
            return false;
        }
        // Digits only, so the text stays UTF-8.
        self.head
            .replace_range(current, std::str::from_utf8(number).unwrap_or_default());
        true
    }
}

impl From<String> for Encoded {
    fn from(text: String) -> Encoded {
        Encoded {
            head: text,
            ..Encoded::default()
        }
    }
}

/// Serializes a response for sending, applying the outbound cap of
/// PROTOCOL.md §1.4: a frame over 16 MiB is replaced by
/// `ERROR FILE_TOO_LARGE` with the same `id`, `ts` and `pending_capacity`
/// (the caller stamps the fresh capacity before calling).
///
/// The frame is taken because a large base64 `FILE_CONTENTS` keeps its
/// content's buffer as the middle piece of the text: base64 text needs no
/// escaping, so the envelope is serialized around an empty content and
/// split there. The pieces joined are byte for byte what serializing the
/// whole frame gives.
pub fn encode_response(mut frame: Frame) -> Result<Encoded, EncodeError> {
    let encoded = match &mut frame.message {
        Message::FileContents(contents)
            if contents.encoding == Encoding::Base64
                && contents.content.len() >= SPLICE_MIN_BYTES
                && needs_no_escaping(&contents.content) =>
        {
            let content = std::mem::take(&mut contents.content);
            around(&frame, content)?
        }
        _ => Encoded::from(encode(&frame)?),
    };
    if encoded.len() <= MAX_WEBSOCKET_MESSAGE_BYTES {
        return Ok(encoded);
    }
    drop(encoded);
    let substitute = Frame {
        id: frame.id,
        ts: frame.ts,
        version: WIRE_VERSION.to_owned(),
        pending_capacity: frame.pending_capacity,
        message: Message::Error(ErrorPayload::new(ErrorCode::FileTooLarge, OVERSIZE_MESSAGE)),
    };
    encode(&substitute).map(Encoded::from)
}

/// `n` in decimal, spelled into `buffer` (20 digits hold every `u64`).
fn decimal(mut n: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buffer[at..];
        }
    }
}

/// Whether `text` serializes as itself between quotes: printable ASCII
/// other than `"` and `\`, as base64 is. Checked, not trusted from the
/// `encoding` label, in one pass without an early exit inside a block of
/// 64 bytes: blocks of a fixed size run over whole vector registers (a
/// quarter faster than blocks the compiler cannot count on).
fn needs_no_escaping(text: &str) -> bool {
    let plain = |b: u8| (b.wrapping_sub(0x20) < 0x5f) & (b != b'"') & (b != b'\\');
    let mut blocks = text.as_bytes().chunks_exact(64);
    blocks
        .by_ref()
        .all(|block| block.iter().fold(true, |ok, &b| ok & plain(b)))
        && blocks.remainder().iter().all(|&b| plain(b))
}

/// `frame`, whose base64 content was taken out and is `content`, encoded
/// as the envelope's text around `content`.
fn around(frame: &Frame, content: String) -> Result<Encoded, EncodeError> {
    let Message::FileContents(contents) = &frame.message else {
        return encode(frame).map(Encoded::from);
    };
    // The payload is the envelope's last member and the content its
    // payload's first, so the envelope around an empty content ends with
    // the payload's own text and one brace. Checked rather than assumed: a
    // change of member order falls back to serializing the whole frame.
    let mut envelope = encode(frame)?;
    let payload = serde_json::to_string(contents).map_err(|e| EncodeError::Json(e.to_string()))?;
    const OPENING: &str = "{\"content\":\"";
    let split = envelope
        .len()
        .checked_sub(payload.len() + 1)
        .filter(|&at| payload.starts_with(OPENING) && envelope[at..].starts_with(&payload))
        .map(|at| at + OPENING.len());
    let Some(split) = split else {
        let mut whole = frame.clone();
        if let Message::FileContents(c) = &mut whole.message {
            c.content = content;
        }
        return encode(&whole).map(Encoded::from);
    };
    let tail = envelope.split_off(split);
    Ok(Encoded {
        head: envelope,
        content,
        tail,
    })
}
