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
//! 6. An answer to a request (a frame of a type that has a response type,
//!    not the `HELLO_ACK` nor a `STATUS`) arrives at most the connection's
//!    wait after its request was sent: the `command_timeout_seconds` of the
//!    last `HELLO_ACK` the emulator sent on it, whatever `timeout_seconds`
//!    the request carried. The platform stops waiting then and drops the
//!    request, so a later answer has nothing to correlate with. Arrival is
//!    when the emulator reads the frame, as the platform sees it: a test
//!    that reads slowly delays it. Before such an ack (or with one whose
//!    value is not a positive integer) there is no wait.
//!
//! A frame breaking rule 2–6 is a [`Violation`]: the emulator records it on
//! the [`crate::Conn`] and closes the connection with 1008 (policy
//! violation) and a reason naming the rule, and the test fails when the
//! `Conn` is dropped unless the test took the violation
//! ([`crate::Conn::wait_violation`], [`crate::Conn::take_violations`]) or
//! declared that it expects some ([`crate::Conn::allow_violations`], or
//! only late answers: [`crate::Conn::allow_late_answers`]). A connection
//! the test never took with [`crate::Emulator::accept`] is judged the same
//! way when the [`crate::Emulator`] is dropped.
//! Frames that are not JSON objects with a string `type` are not judged.
//!
//! This module never touches a socket: the connection's I/O thread shows it
//! every frame that goes out and comes in, in order.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

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

/// The frame whose payload sets how long the platform waits for answers,
/// and the field that says it (`PROTOCOL.md` §4.3).
const ACK_TYPE: &str = "HELLO_ACK";
const ANSWER_WAIT_FIELD: &str = "command_timeout_seconds";

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
    /// An answer that came later after its request than the connection's
    /// `HELLO_ACK` lets the platform wait (`command_timeout_seconds`): the
    /// platform has given up on the request and cannot correlate it.
    Late {
        /// The request's (and answer's) `id`.
        id: String,
        /// How long after the request was sent the answer was read.
        after: Duration,
        /// The platform's wait: the ack's `command_timeout_seconds`.
        limit: Duration,
    },
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
            Violation::Late { id, after, limit } => write!(
                formatter,
                "{} answered after {:.3} s, past the platform's {} s wait",
                shorten(id),
                after.as_secs_f64(),
                limit.as_secs()
            ),
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
    /// For a `HELLO_ACK`, its `command_timeout_seconds` if that is a
    /// positive integer: how long the platform waits for any answer.
    answer_wait: Option<Duration>,
}

impl Sent {
    /// The request a JSON frame makes, if it has a string `type` and `id`;
    /// `text` is the frame as it goes on the wire.
    pub(crate) fn of_frame(frame: &Value, text: &str) -> Option<Sent> {
        let wait = wire::frame_payload(frame)
            .and_then(|payload| payload.get(ANSWER_WAIT_FIELD))
            .and_then(Value::as_u64);
        Sent::new(wire::frame_type(frame)?, wire::frame_id(frame)?, text, wait)
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
        let message_type = field("type")?;
        // Only an ack's payload is read, and only for its one number.
        let wait = (message_type == ACK_TYPE)
            .then(|| envelope.get("payload"))
            .flatten()
            .and_then(|payload| {
                serde_json::from_str::<HashMap<String, Box<RawValue>>>(payload.get()).ok()
            })
            .and_then(|payload| {
                serde_json::from_str::<u64>(payload.get(ANSWER_WAIT_FIELD)?.get()).ok()
            });
        Sent::new(&message_type, &field("id")?, text, wait)
    }

    fn new(message_type: &str, id: &str, text: &str, wait_seconds: Option<u64>) -> Option<Sent> {
        Some(Sent {
            message_type: message_type.to_owned(),
            id: id.to_owned(),
            resend: RESENT_READS
                .contains(&message_type)
                .then(|| text.to_owned()),
            answer_wait: wait_seconds
                .filter(|seconds| message_type == ACK_TYPE && *seconds > 0)
                .map(Duration::from_secs),
        })
    }
}

/// A request that has had no terminal answer.
struct Pending {
    seq: u64,
    message_type: String,
    resend: Option<String>,
    sent_at: Instant,
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
    /// How long the platform waits for an answer, once an ack said so.
    answer_wait: Option<Duration>,
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
            answer_wait: None,
        }
    }

    /// Notes a frame the emulator wrote to the shim at `at`.
    pub(crate) fn sent(&mut self, sent: Sent, at: Instant) {
        self.seq += 1;
        if sent.answer_wait.is_some() {
            self.answer_wait = sent.answer_wait;
        }
        self.pending.entry(sent.id).or_default().push(Pending {
            seq: self.seq,
            message_type: sent.message_type,
            resend: sent.resend,
            sent_at: at,
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

    /// Judges a text or binary message from the shim, read at `at`: `json`
    /// is its parse, if it is JSON.
    pub(crate) fn received(&mut self, json: Option<&Value>, text: &str, at: Instant) -> Judgement {
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
            Stage::Serving => match json.and_then(|frame| self.violation(frame, at)) {
                Some(violation) => {
                    self.stage = Stage::Ended;
                    Judgement::Broken(violation)
                }
                None => Judgement::Fine,
            },
        }
    }

    fn violation(&mut self, frame: &Value, at: Instant) -> Option<Violation> {
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
                self.answer(id, message_type, at)
            }
        }
    }

    /// Matches an answer read at `at` to the oldest outstanding request with
    /// its id that it may answer; a terminal answer settles that request.
    fn answer(&mut self, id: &str, message_type: &str, at: Instant) -> Option<Violation> {
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
        let request = &requests[position];
        // Only a request has the platform waiting for its answer.
        if let (Some(limit), Some(_)) = (self.answer_wait, response_type(&request.message_type)) {
            let after = at.saturating_duration_since(request.sent_at);
            if after > limit {
                return Some(Violation::Late {
                    id: id.to_owned(),
                    after,
                    limit,
                });
            }
        }
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
        send_at(judge, message_type, id, json!({}), Instant::now());
    }

    fn send_at(judge: &mut Judge, message_type: &str, id: &str, payload: Value, at: Instant) {
        let frame = wire::envelope(message_type, id, payload);
        judge.sent(Sent::of_frame(&frame, &frame.to_string()).unwrap(), at);
    }

    fn receive(judge: &mut Judge, frame: Value) -> Judgement {
        receive_at(judge, frame, Instant::now())
    }

    fn receive_at(judge: &mut Judge, frame: Value, at: Instant) -> Judgement {
        judge.received(Some(&frame), &frame.to_string(), at)
    }

    #[test]
    fn an_answer_past_the_acks_wait_is_late_and_one_within_it_or_to_no_request_is_not() {
        let mut judge = serving();
        let start = Instant::now();
        let second = Duration::from_secs(1);
        send_at(
            &mut judge,
            "HELLO_ACK",
            "h",
            json!({"command_timeout_seconds": 3}),
            start,
        );
        send_at(&mut judge, "FILE_READ", "in-time", json!({}), start);
        send_at(
            &mut judge,
            "EXECUTE_COMMAND",
            "late",
            json!({}),
            start + second,
        );
        let in_time = json!({"type": "FILE_CONTENTS", "id": "in-time"});
        assert_eq!(
            receive_at(&mut judge, in_time, start + 3 * second),
            Judgement::Fine
        );
        // The ack is no request: the platform waits for no answer to it.
        let error = json!({"type": "ERROR", "id": "h"});
        assert_eq!(
            receive_at(&mut judge, error, start + 9 * second),
            Judgement::Fine
        );
        let late = json!({"type": "COMMAND_RESULT", "id": "late"});
        assert_eq!(
            receive_at(
                &mut judge,
                late,
                start + 4 * second + Duration::from_millis(1)
            ),
            Judgement::Broken(Violation::Late {
                id: "late".to_owned(),
                after: 3 * second + Duration::from_millis(1),
                limit: 3 * second,
            })
        );
    }

    #[test]
    fn without_an_ack_that_sets_a_wait_no_answer_is_late() {
        let start = Instant::now();
        for wait in [json!(0), json!(-1), json!("30"), Value::Null] {
            let mut judge = serving();
            send_at(
                &mut judge,
                "HELLO_ACK",
                "h",
                json!({"command_timeout_seconds": wait}),
                start,
            );
            send_at(&mut judge, "FILE_STAT", "s", json!({}), start);
            let answer = json!({"type": "FILE_STAT_RESPONSE", "id": "s"});
            let at = start + Duration::from_secs(3600);
            assert_eq!(
                receive_at(&mut judge, answer, at),
                Judgement::Fine,
                "{wait}"
            );
        }
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
        assert_eq!(sent.answer_wait, None);
        let ack = Sent::of_raw(
            br#"{"type":"HELLO_ACK","id":"h","payload":{"command_timeout_seconds":7}}"#,
        )
        .unwrap();
        assert_eq!(ack.answer_wait, Some(Duration::from_secs(7)));
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
