//! The platform's rules for what a shim may send on a connection, and the
//! bookkeeping they need: which requests are outstanding, how each may be
//! answered, and which reads went unanswered when a connection ended.
//!
//! The platform's relay ends the whole connection on any shim frame it
//! cannot correlate, so the emulator holds every shim to the same rules:
//!
//! 1. The first frame is a valid `HELLO` ([`crate::hello`]), within the
//!    HELLO deadline; otherwise the emulator closes with 4400 (invalid or
//!    larger than 64 KiB), 4426 (another protocol major) or 4408 (late).
//! 2. Every later frame except `STATUS` and `RECORDING_STEP` answers an
//!    outstanding request: a frame the emulator sent with a string `type`
//!    and a string `id` — also through [`crate::Conn::send`] and
//!    [`crate::Conn::send_raw`] — that has had no terminal answer yet. A
//!    frame whose `id` has none (a second `HELLO`, an answer given twice)
//!    is uncorrelated.
//! 3. The answer's `type` is the one its request is answered with
//!    (`EXECUTE_COMMAND` → `COMMAND_RESULT`, `FILE_WRITE` → `ACK`, …), or
//!    `ERROR`, which answers any request. `LOCAL_LLM_COMPLETION_CHUNK` is a
//!    non-terminal part of a `LOCAL_LLM_COMPLETION`'s answer. A frame the
//!    emulator sent whose type is not a request may only get an `ERROR`.
//! 4. The shim never sends `PING` (its keepalive is WebSocket pings).
//! 5. A `STATUS` carries a non-empty string `id`.
//!
//! A frame breaking rule 2–5 is a [`Violation`]: the emulator records it on
//! the [`crate::Conn`] and closes the connection with 1008 (policy
//! violation) and a reason naming the rule, and the test fails when the
//! `Conn` is dropped unless the test took the violation
//! ([`crate::Conn::wait_violation`], [`crate::Conn::take_violations`]) or
//! declared that it expects some ([`crate::Conn::allow_violations`]).
//! Frames that are not JSON objects with a string `type` are not judged.
//!
//! This module never touches a socket: the connection's I/O thread shows it
//! every frame that goes out and comes in, in order.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::hello::{ConnKind, HelloError, check_hello};
use crate::wire;

/// Close code of the connection after a [`Violation`]: RFC 6455's "policy
/// violation", what a platform sends for a message it will not accept.
pub const VIOLATION_CLOSE_CODE: u16 = 1008;

/// The request types and the response type that answers each
/// (`PROTOCOL.md` §7, Appendix C; `CONTROL.md` §4–§11).
const RESPONSE_TYPES: &[(&str, &str)] = &[
    ("EXECUTE_COMMAND", "COMMAND_RESULT"),
    ("FILE_READ", "FILE_CONTENTS"),
    ("FILE_WRITE", "ACK"),
    ("FILE_STAT", "FILE_STAT_RESPONSE"),
    ("FILE_LIST", "FILE_LIST_RESPONSE"),
    ("FILE_DELETE", "ACK"),
    ("FILE_MOVE", "ACK"),
    ("PING", "PONG"),
    ("LOCAL_LLM_COMPLETION", "LOCAL_LLM_COMPLETION_RESPONSE"),
    ("SCREENSHOT_REQUEST", "SCREENSHOT_RESPONSE"),
    ("INPUT_ACTION", "ACK"),
    ("CURSOR_POSITION_REQUEST", "CURSOR_POSITION_RESPONSE"),
    ("DISPLAY_INFO_REQUEST", "DISPLAY_INFO_RESPONSE"),
    ("WINDOW_LIST_REQUEST", "WINDOW_LIST_RESPONSE"),
    ("WINDOW_FOCUS", "ACK"),
    ("APP_LIST_REQUEST", "APP_LIST_RESPONSE"),
    ("APP_LAUNCH", "ACK"),
    ("CLIPBOARD_READ", "CLIPBOARD_READ_RESPONSE"),
    ("CLIPBOARD_WRITE", "ACK"),
    ("PERMISSIONS_CHECK_REQUEST", "PERMISSIONS_CHECK_RESPONSE"),
    ("REQUEST_RECORDING_CONSENT", "RECORDING_CONSENT_RESULT"),
    ("START_RECORDING", "RECORDING_STARTED"),
    ("STOP_RECORDING", "RECORDING_SUMMARY"),
    ("RECORDING_FETCH", "RECORDING_DATA"),
    ("APPLY_RECORDING_REVIEW", "RECORDING_REVIEW_APPLIED"),
    ("DIRECTORY_LIST_REQUEST", "DIRECTORY_LIST_RESPONSE"),
    ("ATTACH_SESSION", "SESSION_ATTACHED"),
    ("ACTIVATE_SESSION", "SESSION_ACTIVATED"),
    ("RESTORE_SESSION", "SESSION_RESTORED"),
    ("DETACH_SESSION", "ACK"),
];

/// The reads the platform resends after a reconnect when they got no answer
/// (`PROTOCOL.md` §10).
const RESENT_READS: &[&str] = &["FILE_READ", "FILE_STAT", "FILE_LIST", "SCREENSHOT_REQUEST"];

/// The response type that answers `request_type`, if it is a request.
pub fn response_type(request_type: &str) -> Option<&'static str> {
    RESPONSE_TYPES
        .iter()
        .find(|(request, _)| *request == request_type)
        .map(|(_, response)| *response)
}

/// A shim frame the platform's relay would not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A frame that answers no outstanding request: its `id` has none (or
    /// it has no string `id`).
    Uncorrelated {
        /// The frame's type.
        message_type: String,
        /// The frame's `id`, if it is a string.
        id: Option<String>,
    },
    /// An answer whose type is neither its request's response type nor
    /// `ERROR`.
    WrongType {
        /// The request's (and answer's) `id`.
        id: String,
        /// The type of the request.
        request_type: String,
        /// The type the answer had.
        message_type: String,
    },
    /// A `PING` from the shim.
    ShimPing {
        /// The frame's `id`, if it is a string.
        id: Option<String>,
    },
    /// A `STATUS` without a non-empty string `id`.
    StatusWithoutId,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Uncorrelated {
                message_type,
                id: Some(id),
            } => write!(
                formatter,
                "{message_type} {} answers no outstanding request",
                shorten(id)
            ),
            Violation::Uncorrelated {
                message_type,
                id: None,
            } => write!(formatter, "{message_type} without a string id"),
            Violation::WrongType {
                id,
                request_type,
                message_type,
            } => match response_type(request_type) {
                Some(expected) => write!(
                    formatter,
                    "{message_type} answers {request_type} {}, which takes {expected} or ERROR",
                    shorten(id)
                ),
                None => write!(
                    formatter,
                    "{message_type} answers {request_type} {}, which takes only ERROR",
                    shorten(id)
                ),
            },
            Violation::ShimPing { .. } => write!(
                formatter,
                "PING from the shim; its keepalive is WebSocket pings"
            ),
            Violation::StatusWithoutId => write!(formatter, "STATUS without a non-empty id"),
        }
    }
}

/// An id as a close reason can hold it: long ids are cut.
fn shorten(id: &str) -> String {
    if id.chars().count() <= 40 {
        id.to_owned()
    } else {
        let cut: String = id.chars().take(37).collect();
        format!("{cut}...")
    }
}

/// `text` cut at a character boundary to what a WebSocket close reason may
/// carry (123 bytes).
pub(crate) fn close_reason(text: &str) -> String {
    const MAX_CLOSE_REASON_BYTES: usize = 123;
    if text.len() <= MAX_CLOSE_REASON_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_CLOSE_REASON_BYTES - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// What the emulator sends, as the rules need it: the envelope's `type` and
/// `id`, and the text itself for a read the platform would resend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    message_type: String,
    id: String,
    resend: Option<String>,
}

impl Sent {
    /// The request a JSON frame makes, if it has a string `type` and `id`;
    /// `text` is the frame as it goes on the wire.
    pub(crate) fn of_frame(frame: &Value, text: &str) -> Option<Sent> {
        Sent::new(wire::frame_type(frame)?, wire::frame_id(frame)?, text)
    }

    /// The request a raw message makes, if its bytes are a JSON object with
    /// a string `type` and `id`. Only the envelope is read: a payload of
    /// millions of values costs no tree.
    pub(crate) fn of_raw(bytes: &[u8]) -> Option<Sent> {
        let text = std::str::from_utf8(bytes).ok()?;
        let envelope: HashMap<String, Box<RawValue>> = serde_json::from_str(text).ok()?;
        let field = |key: &str| -> Option<String> {
            serde_json::from_str::<String>(envelope.get(key)?.get()).ok()
        };
        Sent::new(&field("type")?, &field("id")?, text)
    }

    fn new(message_type: &str, id: &str, text: &str) -> Option<Sent> {
        Some(Sent {
            message_type: message_type.to_owned(),
            id: id.to_owned(),
            resend: RESENT_READS
                .contains(&message_type)
                .then(|| text.to_owned()),
        })
    }
}

/// A request that has had no terminal answer.
struct Pending {
    seq: u64,
    message_type: String,
    resend: Option<String>,
}

/// A read to resend on the next connection to the same path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnansweredRead {
    pub(crate) path: String,
    pub(crate) id: String,
    pub(crate) text: String,
}

/// The reads that connections left unanswered when they ended, shared by
/// every connection of one emulator.
#[derive(Debug, Default)]
pub(crate) struct UnansweredReads {
    reads: Mutex<Vec<UnansweredRead>>,
}

impl UnansweredReads {
    pub(crate) fn add(&self, reads: impl IntoIterator<Item = UnansweredRead>) {
        self.lock().extend(reads);
    }

    /// Removes and returns the reads left on connections to `path`, oldest
    /// first.
    pub(crate) fn take_for(&self, path: &str) -> Vec<UnansweredRead> {
        let mut reads = self.lock();
        let (taken, kept) = reads.drain(..).partition(|read| read.path == path);
        *reads = kept;
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<UnansweredRead>> {
        // Every update is one extend or one swap; a panic elsewhere leaves
        // the list whole.
        self.reads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How the judge takes one frame from the shim.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Judgement {
    /// Within the rules.
    Fine,
    /// The HELLO is refused: close with this code and reason.
    RefuseHello(u16, String),
    /// A rule is broken: record it and close with 1008.
    Broken(Violation),
}

enum Stage {
    AwaitingHello {
        deadline: Instant,
    },
    Serving,
    /// The emulator refused the HELLO or closed for a violation: what
    /// follows is not judged.
    Ended,
}

/// One connection's judge, owned by its I/O thread.
pub(crate) struct Judge {
    kind: ConnKind,
    stage: Stage,
    pending: HashMap<String, Vec<Pending>>,
    seq: u64,
}

impl Judge {
    pub(crate) fn new(kind: ConnKind, hello_deadline: Instant) -> Judge {
        Judge {
            kind,
            stage: Stage::AwaitingHello {
                deadline: hello_deadline,
            },
            pending: HashMap::new(),
            seq: 0,
        }
    }

    /// Notes a frame the emulator wrote to the shim.
    pub(crate) fn sent(&mut self, sent: Sent) {
        self.seq += 1;
        self.pending.entry(sent.id).or_default().push(Pending {
            seq: self.seq,
            message_type: sent.message_type,
            resend: sent.resend,
        });
    }

    /// The close code and reason when the HELLO deadline has passed at
    /// `now` without a HELLO.
    pub(crate) fn hello_late(&mut self, now: Instant) -> Option<(u16, String)> {
        match self.stage {
            Stage::AwaitingHello { deadline } if now >= deadline => {
                self.stage = Stage::Ended;
                let error = HelloError::Timeout;
                error.close()
            }
            _ => None,
        }
    }

    /// Judges a text or binary message from the shim: `json` is its parse,
    /// if it is JSON.
    pub(crate) fn received(&mut self, json: Option<&Value>, text: &str) -> Judgement {
        match self.stage {
            Stage::Ended => Judgement::Fine,
            Stage::AwaitingHello { .. } => match check_hello(text, json, &self.kind) {
                Ok(_) => {
                    self.stage = Stage::Serving;
                    Judgement::Fine
                }
                Err(error) => {
                    self.stage = Stage::Ended;
                    match error.close() {
                        Some((code, reason)) => Judgement::RefuseHello(code, reason),
                        None => Judgement::Fine,
                    }
                }
            },
            Stage::Serving => match json.and_then(|frame| self.violation(frame)) {
                Some(violation) => {
                    self.stage = Stage::Ended;
                    Judgement::Broken(violation)
                }
                None => Judgement::Fine,
            },
        }
    }

    fn violation(&mut self, frame: &Value) -> Option<Violation> {
        let message_type = wire::frame_type(frame)?;
        let id = wire::frame_id(frame);
        match message_type {
            "STATUS" => match id {
                Some(id) if !id.is_empty() => None,
                _ => Some(Violation::StatusWithoutId),
            },
            "RECORDING_STEP" => None,
            "PING" => Some(Violation::ShimPing {
                id: id.map(str::to_owned),
            }),
            _ => {
                let Some(id) = id else {
                    return Some(Violation::Uncorrelated {
                        message_type: message_type.to_owned(),
                        id: None,
                    });
                };
                self.answer(id, message_type)
            }
        }
    }

    /// Matches an answer to the oldest outstanding request with its id that
    /// it may answer; a terminal answer settles that request.
    fn answer(&mut self, id: &str, message_type: &str) -> Option<Violation> {
        let Some(requests) = self.pending.get_mut(id) else {
            return Some(Violation::Uncorrelated {
                message_type: message_type.to_owned(),
                id: Some(id.to_owned()),
            });
        };
        let answers = |request: &Pending| match message_type {
            "ERROR" => true,
            "LOCAL_LLM_COMPLETION_CHUNK" => request.message_type == "LOCAL_LLM_COMPLETION",
            _ => response_type(&request.message_type) == Some(message_type),
        };
        let Some(position) = requests.iter().position(answers) else {
            return Some(Violation::WrongType {
                id: id.to_owned(),
                request_type: requests
                    .first()
                    .map(|request| request.message_type.clone())
                    .unwrap_or_default(),
                message_type: message_type.to_owned(),
            });
        };
        if message_type != "LOCAL_LLM_COMPLETION_CHUNK" {
            requests.remove(position);
            if requests.is_empty() {
                self.pending.remove(id);
            }
        }
        None
    }

    /// The reads still outstanding, oldest first, for the connection to
    /// `path` that has ended.
    pub(crate) fn unanswered_reads(&self, path: &str) -> Vec<UnansweredRead> {
        let mut reads: Vec<(u64, UnansweredRead)> = self
            .pending
            .iter()
            .flat_map(|(id, requests)| {
                requests.iter().filter_map(move |request| {
                    let text = request.resend.clone()?;
                    Some((
                        request.seq,
                        UnansweredRead {
                            path: path.to_owned(),
                            id: id.clone(),
                            text,
                        },
                    ))
                })
            })
            .collect();
        reads.sort_by_key(|(seq, _)| *seq);
        reads.into_iter().map(|(_, read)| read).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn serving() -> Judge {
        let mut judge = Judge::new(ConnKind::Other, Instant::now());
        judge.stage = Stage::Serving;
        judge
    }

    fn send(judge: &mut Judge, message_type: &str, id: &str) {
        let frame = wire::envelope(message_type, id, json!({}));
        judge.sent(Sent::of_frame(&frame, &frame.to_string()).unwrap());
    }

    fn receive(judge: &mut Judge, frame: Value) -> Judgement {
        judge.received(Some(&frame), &frame.to_string())
    }

    #[test]
    fn an_answer_settles_its_request_and_a_second_answer_is_uncorrelated() {
        let mut judge = serving();
        send(&mut judge, "FILE_STAT", "r1");
        let answer = json!({"type": "FILE_STAT_RESPONSE", "id": "r1"});
        assert_eq!(receive(&mut judge, answer.clone()), Judgement::Fine);
        assert_eq!(
            receive(&mut judge, answer),
            Judgement::Broken(Violation::Uncorrelated {
                message_type: "FILE_STAT_RESPONSE".to_owned(),
                id: Some("r1".to_owned())
            })
        );
    }

    #[test]
    fn error_answers_any_request_and_chunks_precede_the_llm_response() {
        let mut judge = serving();
        send(&mut judge, "HELLO_ACK", "h");
        send(&mut judge, "LOCAL_LLM_COMPLETION", "l");
        let error = json!({"type": "ERROR", "id": "h"});
        assert_eq!(receive(&mut judge, error), Judgement::Fine);
        for _ in 0..2 {
            let chunk = json!({"type": "LOCAL_LLM_COMPLETION_CHUNK", "id": "l"});
            assert_eq!(receive(&mut judge, chunk), Judgement::Fine);
        }
        let done = json!({"type": "LOCAL_LLM_COMPLETION_RESPONSE", "id": "l"});
        assert_eq!(receive(&mut judge, done), Judgement::Fine);
    }

    #[test]
    fn two_requests_with_one_id_take_one_answer_each() {
        let mut judge = serving();
        send(&mut judge, "FILE_WRITE", "same");
        send(&mut judge, "FILE_READ", "same");
        let contents = json!({"type": "FILE_CONTENTS", "id": "same"});
        assert_eq!(receive(&mut judge, contents), Judgement::Fine);
        let ack = json!({"type": "ACK", "id": "same"});
        assert_eq!(receive(&mut judge, ack.clone()), Judgement::Fine);
        assert!(matches!(
            receive(&mut judge, ack),
            Judgement::Broken(Violation::Uncorrelated { .. })
        ));
    }

    #[test]
    fn raw_envelopes_are_read_without_their_payload() {
        let sent =
            Sent::of_raw(br#"{"payload":{"path":[0,0,0]},"id":"z","type":"FILE_STAT"}"#).unwrap();
        assert_eq!(sent.message_type, "FILE_STAT");
        assert_eq!(sent.id, "z");
        assert!(sent.resend.is_some());
        assert_eq!(Sent::of_raw(br#"{"type":"PING","id":5}"#), None);
        assert_eq!(Sent::of_raw(b"not json"), None);
    }

    #[test]
    fn close_reasons_are_cut_to_123_bytes_at_a_character_boundary() {
        let reason = close_reason(&"é".repeat(100));
        assert!(reason.len() <= 123, "{}", reason.len());
        assert!(reason.ends_with("..."));
        assert_eq!(close_reason("short"), "short");
    }

    #[test]
    fn unanswered_reads_are_listed_oldest_first_and_others_are_not() {
        let mut judge = serving();
        send(&mut judge, "FILE_LIST", "b");
        send(&mut judge, "EXECUTE_COMMAND", "c");
        send(&mut judge, "FILE_READ", "a");
        let ids: Vec<String> = judge
            .unanswered_reads("/p")
            .into_iter()
            .map(|read| read.id)
            .collect();
        assert_eq!(ids, ["b", "a"]);
    }
}
