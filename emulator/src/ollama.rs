//! The local LLM backend the shim calls (`CAPABILITIES.md` §5): an
//! Ollama-compatible HTTP/1.1 server on 127.0.0.1 answering `GET /api/tags`
//! (the model probe of §5.1) and `POST /api/chat` (the streamed completion
//! of §5.2), as [`OllamaEmulator`].
//!
//! No real Ollama can run where these tests run (no model weights, no
//! network), so this server plays it from Ollama's documented API: the
//! `{"models": […]}` listing, and the newline-delimited JSON stream of
//! `{"message": {"role": "assistant", "content": …}, "done": false}` lines
//! ending in a `{"done": true, "done_reason": …, "prompt_eval_count": …,
//! "eval_count": …}` line. Like the rest of the emulator it is written from
//! the specification and Ollama's documentation alone, never from the
//! shim's code, and it is synchronous: one thread per connection.
//!
//! This module owns what the backend does with each request: a queue of
//! per-request behaviours for each endpoint (consumed in order, a default
//! once empty) so a test can script "404, then a stream that stalls, then
//! garbage lines", the record of every chat request as it was sent (so a
//! test can assert the exact body of §5.2 step 4), and what became of each
//! chat answer — written in full, cut by the script, or abandoned by the
//! client (which is how a test sees that the shim cancelled the upstream
//! request). It must never listen beyond 127.0.0.1, never hold a flooded
//! stream in memory (it is generated as the client reads it), and never
//! answer a request before recording it.
//!
//! ```no_run
//! use std::time::Duration;
//! use autogpt_shim_emulator::ollama::{ChatBehaviour, OllamaEmulator, OllamaOptions, StreamStep};
//!
//! let ollama = OllamaEmulator::start(OllamaOptions::new().models(&["llama3.2:3b"]))?;
//! ollama.push_chat(ChatBehaviour::Stream(vec![
//!     StreamStep::piece("Hel"),
//!     StreamStep::Stall(Duration::from_secs(30)),
//!     StreamStep::piece("lo"),
//! ]));
//! // … point a shim's ollama_url at ollama.url(), send LOCAL_LLM_COMPLETION,
//! // end the platform connection during the stall, then:
//! let sent = ollama.wait_chat_requests(1, Duration::from_secs(10));
//! assert_eq!(sent[0].json.as_ref().map(|body| &body["stream"]), Some(&serde_json::json!(true)));
//! assert_eq!(ollama.wait_disconnects(1, Duration::from_secs(10)), 1);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::http::{
    Fault, HttpReader, RecordedRequest, finish, header_value, parse_head, read_body_within,
    write_plain,
};
use crate::listener::{Acceptor, Record};
use crate::oauth::refuse_malformed;
use crate::wire;

/// The model listing (`CAPABILITIES.md` §5.1).
pub const TAGS_PATH: &str = "/api/tags";

/// The chat completion (`CAPABILITIES.md` §5.2 step 4).
pub const CHAT_PATH: &str = "/api/chat";

/// The model [`OllamaOptions::new`] installs: the one in the
/// specification's examples.
pub const DEFAULT_MODEL: &str = "llama3.2:3b";

/// The pieces [`OllamaOptions::new`]'s default chat behaviour streams.
pub const DEFAULT_REPLY: [&str; 2] = ["Hello", " world"];

/// The `prompt_eval_count` of [`ChatBehaviour::reply`]'s done line.
pub const DEFAULT_PROMPT_EVAL_COUNT: u64 = 12;

/// Largest request head (request line and headers) the server reads;
/// larger is answered 431.
pub const MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;

/// Largest request body the server reads (`Content-Length` or chunked);
/// larger is answered 413.
pub const MAX_REQUEST_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How long the server waits for a whole request on one connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Most body bytes one write (one HTTP chunk) of a generated stream
/// carries: large enough to flood quickly, small enough that the bytes
/// counter follows the client closely.
const WRITE_CHUNK_BYTES: usize = 64 * 1024;

/// How often a delay, stall or hang looks at whether the client left.
const WATCH_TICK: Duration = Duration::from_millis(20);

/// `modified_at` of every listed model: a fixed time, so listings compare
/// equal across runs.
const MODIFIED_AT: &str = "2024-09-25T14:30:00.123456789Z";

/// `size` of every listed model, in bytes (a 3B model at Q4_K_M).
const MODEL_SIZE: u64 = 2_019_393_189;

/// What to answer to one `GET /api/tags`.
#[derive(Debug, Clone, PartialEq)]
pub enum TagsBehaviour {
    /// 200 `application/json` with `{"models": [...]}`: one entry per
    /// installed model ([`OllamaEmulator::set_models`]) in order, each
    /// `{"name", "model", "modified_at", "size", "digest", "details"}` with
    /// `name` and `model` the model's name and `digest` the lowercase hex
    /// SHA-256 of it.
    Models,
    /// 200 `application/json` with `{"models": entries}`, the entries as
    /// given: non-objects, objects without `name`, `name` not a string.
    Entries(Vec<Value>),
    /// This status with this body verbatim (possibly empty), labelled
    /// `application/json` when it parses as JSON, `text/plain` otherwise.
    Status(u16, String),
    /// 200 with this raw body labelled `application/json` whatever it is:
    /// `not json`, `[]`, `{"models": 3}`, `{}`.
    Body(String),
    /// Read the request, answer nothing for this long (or until the client
    /// leaves), then close.
    Hang(Duration),
    /// Read the request, then close without answering.
    DropConnection,
    /// Send nothing for this long (or until the client leaves, which ends
    /// the request), then behave as the inner behaviour.
    Delayed(Duration, Box<TagsBehaviour>),
}

impl TagsBehaviour {
    /// This behaviour, after `delay` without a byte sent
    /// ([`TagsBehaviour::Delayed`]).
    #[must_use]
    pub fn after(self, delay: Duration) -> TagsBehaviour {
        TagsBehaviour::Delayed(delay, Box::new(self))
    }
}

/// What to answer to one `POST /api/chat` whose body is valid (an invalid
/// one is answered 400 without consuming a behaviour; see
/// [`OllamaEmulator::push_chat`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ChatBehaviour {
    /// When the requested model is installed (a name without a `:tag`
    /// meaning `:latest`, as Ollama resolves it): 200
    /// `application/x-ndjson` with `Transfer-Encoding: chunked`, the head
    /// sent at once, then the steps in order, every line its own chunk
    /// written and flushed on its own (the last one together with the end
    /// of the body). Otherwise as [`ChatBehaviour::ModelNotFound`].
    Stream(Vec<StreamStep>),
    /// 404 with `{"error":"model '<requested model>' not found"}`, Ollama's
    /// answer for a model that is not installed, whatever the model.
    ModelNotFound,
    /// This status with this body verbatim (possibly empty), labelled
    /// `application/json` when it parses as JSON, `text/plain` otherwise.
    Status(u16, String),
    /// Read the request, answer nothing for this long (or until the client
    /// leaves), then close.
    Hang(Duration),
    /// Read the request, then close without answering.
    DropConnection,
    /// Send nothing for this long (or until the client leaves, which ends
    /// the request), then behave as the inner behaviour: a delay before the
    /// first byte of the head.
    Delayed(Duration, Box<ChatBehaviour>),
}

impl ChatBehaviour {
    /// A stream of these pieces as content lines, then
    /// `DoneLine::stop(DEFAULT_PROMPT_EVAL_COUNT, number of pieces)`.
    pub fn reply(pieces: &[&str]) -> ChatBehaviour {
        let mut steps: Vec<StreamStep> = pieces
            .iter()
            .map(|piece| StreamStep::piece(piece))
            .collect();
        let count = u64::try_from(pieces.len()).unwrap_or(u64::MAX);
        steps.push(StreamStep::Done(DoneLine::stop(
            DEFAULT_PROMPT_EVAL_COUNT,
            count,
        )));
        ChatBehaviour::Stream(steps)
    }

    /// This behaviour, after `delay` without a byte sent
    /// ([`ChatBehaviour::Delayed`]).
    #[must_use]
    pub fn after(self, delay: Duration) -> ChatBehaviour {
        ChatBehaviour::Delayed(delay, Box::new(self))
    }
}

/// One step of a [`ChatBehaviour::Stream`]. `model` in the generated lines
/// is the requested model; `created_at` the time the line is made.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamStep {
    /// A content line: `{"model", "created_at", "message": {"role":
    /// "assistant", "content": piece}, "done": false}`.
    Piece(String),
    /// The done line ([`DoneLine`]). Steps after it are still sent, as a
    /// backend that keeps talking would.
    Done(DoneLine),
    /// This JSON value, serialized, on a line of its own: a non-object
    /// (`[1]`, `"x"`, `null`), an object whose `message` is not an object
    /// or whose `content` is not a string or is empty, `"done": 1`.
    Json(Value),
    /// This text followed by `\n` (the empty string: a blank line), e.g.
    /// a line that is not JSON.
    Line(String),
    /// These bytes exactly, no newline added (nothing when empty): a line
    /// ending in `\r\n`, a last line without its newline, bytes that are
    /// not UTF-8.
    Bytes(Vec<u8>),
    /// Send nothing for this long, watching the client (it leaving ends the
    /// answer as [`ChatOutcome::ClientClosed`]). The head is already sent,
    /// so a stall first is a delay between the head and the first line.
    Stall(Duration),
    /// Content lines whose pieces total `content_bytes` bytes, each piece
    /// `piece_bytes` long (the last one shorter; 0 is taken as 1), ASCII
    /// letters, generated as they are written, several lines to a chunk of
    /// at most 64 KiB: only as fast as the client reads, and never held in
    /// memory.
    Flood {
        /// Total content bytes, over all pieces.
        content_bytes: u64,
        /// Content bytes per line.
        piece_bytes: usize,
    },
    /// One content line whose piece is this many bytes of ASCII letters,
    /// generated as it is written in chunks of 64 KiB: a line without end
    /// in sight, for a client's bound on line length.
    HugeLine(u64),
    /// Close the connection here, without the end of the chunked body
    /// (the client sees the body cut short).
    Drop,
}

impl StreamStep {
    /// [`StreamStep::Piece`] of `piece`.
    pub fn piece(piece: &str) -> StreamStep {
        StreamStep::Piece(piece.to_owned())
    }
}

/// The last line of a stream: `{"model", "created_at", "message":
/// {"role": "assistant", "content": content}, "done": true,
/// "total_duration", "load_duration", "prompt_eval_duration",
/// "eval_duration"}` plus `done_reason`, `prompt_eval_count` and
/// `eval_count` when they are `Some`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneLine {
    /// The done line's own `message.content` (usually empty).
    pub content: String,
    /// `done_reason`; `None` leaves the key out.
    pub done_reason: Option<String>,
    /// `prompt_eval_count`; `None` leaves the key out.
    pub prompt_eval_count: Option<u64>,
    /// `eval_count`; `None` leaves the key out.
    pub eval_count: Option<u64>,
}

impl DoneLine {
    /// `done_reason: "stop"` with both counts and empty content.
    pub fn stop(prompt_eval_count: u64, eval_count: u64) -> DoneLine {
        DoneLine {
            content: String::new(),
            done_reason: Some("stop".to_owned()),
            prompt_eval_count: Some(prompt_eval_count),
            eval_count: Some(eval_count),
        }
    }

    /// This line with `done_reason` set to `reason` (`None`: left out).
    #[must_use]
    pub fn reason(mut self, reason: Option<&str>) -> DoneLine {
        self.done_reason = reason.map(str::to_owned);
        self
    }

    /// This line without `prompt_eval_count` and `eval_count`.
    #[must_use]
    pub fn without_counts(mut self) -> DoneLine {
        self.prompt_eval_count = None;
        self.eval_count = None;
        self
    }
}

/// How to start an [`OllamaEmulator`]. Defaults: [`DEFAULT_MODEL`]
/// installed, [`TagsBehaviour::Models`] and
/// `ChatBehaviour::reply(&DEFAULT_REPLY)` once the queues are empty.
#[derive(Debug, Clone)]
pub struct OllamaOptions {
    models: Vec<String>,
    tags: TagsBehaviour,
    chat: ChatBehaviour,
}

impl Default for OllamaOptions {
    fn default() -> Self {
        OllamaOptions {
            models: vec![DEFAULT_MODEL.to_owned()],
            tags: TagsBehaviour::Models,
            chat: ChatBehaviour::reply(&DEFAULT_REPLY),
        }
    }
}

impl OllamaOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs exactly these models, listed in this order (none: an
    /// empty listing, and every chat answered 404 by
    /// [`ChatBehaviour::Stream`]).
    #[must_use]
    pub fn models<S: AsRef<str>>(mut self, names: &[S]) -> Self {
        self.models = names.iter().map(|name| name.as_ref().to_owned()).collect();
        self
    }

    /// The tags behaviour once the queue is empty.
    #[must_use]
    pub fn tags(mut self, behaviour: TagsBehaviour) -> Self {
        self.tags = behaviour;
        self
    }

    /// The chat behaviour once the queue is empty.
    #[must_use]
    pub fn chat(mut self, behaviour: ChatBehaviour) -> Self {
        self.chat = behaviour;
        self
    }
}

/// One `POST /api/chat` as the server read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The method (`POST`).
    pub method: String,
    /// The request target, as sent.
    pub path: String,
    /// Every header in order, names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it was sent chunked.
    pub body: Vec<u8>,
    /// The body parsed as JSON (`None` when it is not JSON).
    pub json: Option<Value>,
}

impl ChatRequest {
    /// The value of the first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// The members of the body's top-level JSON object in the order they
    /// were sent ([`crate::oauth::json_members`]).
    pub fn json_members(&self) -> Option<Vec<(String, Value)>> {
        crate::oauth::json_members(&self.body)
    }
}

/// What became of one chat request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatOutcome {
    /// Written in full: a complete response, or a stream through the end of
    /// its chunked body (a 400 for an invalid body included).
    Answered,
    /// The client closed the connection before the answer was written in
    /// full: seen at once during a delay, stall or hang, or while a write
    /// blocks; otherwise at the next line.
    ClientClosed,
    /// The server closed early as scripted: [`StreamStep::Drop`],
    /// [`ChatBehaviour::DropConnection`], or a [`ChatBehaviour::Hang`] that
    /// ran its course.
    Dropped,
}

/// State shared by the connection threads and the handle.
struct Shared {
    stop: Arc<AtomicBool>,
    models: Mutex<Vec<String>>,
    default_tags: Mutex<TagsBehaviour>,
    default_chat: Mutex<ChatBehaviour>,
    tags_queue: Mutex<VecDeque<TagsBehaviour>>,
    chat_queue: Mutex<VecDeque<ChatBehaviour>>,
    chats: Record<ChatRequest>,
    tags: Record<()>,
    outcomes: Record<ChatOutcome>,
    disconnects: Record<()>,
    streamed: AtomicU64,
    /// Every open connection, so stopping can unblock a write the client
    /// does not read.
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every value behind these locks is changed in one step under the lock,
    // so a panic elsewhere cannot leave it half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a connection in [`Shared::conns`] while it is served.
struct Registered<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.shared.conns).remove(&self.id);
    }
}

impl Shared {
    fn register(&self, tcp: &TcpStream) -> Option<Registered<'_>> {
        let clone = tcp.try_clone().ok()?;
        let id = self.next_conn.fetch_add(1, Ordering::SeqCst);
        lock(&self.conns).insert(id, clone);
        // Stopping may have swept the list just before this insert.
        if self.stop.load(Ordering::SeqCst) {
            lock(&self.conns).remove(&id);
            return None;
        }
        Some(Registered { shared: self, id })
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn installed(&self, model: &str) -> bool {
        let wanted = canonical_model(model);
        lock(&self.models)
            .iter()
            .any(|name| canonical_model(name) == wanted)
    }
}

/// A model name with Ollama's default tag: `llama3.2` is `llama3.2:latest`.
fn canonical_model(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    if base.contains(':') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

/// A running Ollama emulator on 127.0.0.1, plain HTTP. Dropping it stops
/// accepting connections and ends every open one at once (a stalled or
/// backpressured stream included: the client sees its connection close).
pub struct OllamaEmulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Acceptor,
}

impl std::fmt::Debug for OllamaEmulator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("OllamaEmulator")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

impl OllamaEmulator {
    /// Binds an ephemeral port of 127.0.0.1 and starts answering, one
    /// thread per connection.
    pub fn start(options: OllamaOptions) -> io::Result<OllamaEmulator> {
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            stop: Arc::clone(&stop),
            models: Mutex::new(options.models),
            default_tags: Mutex::new(options.tags),
            default_chat: Mutex::new(options.chat),
            tags_queue: Mutex::new(VecDeque::new()),
            chat_queue: Mutex::new(VecDeque::new()),
            chats: Record::new(),
            tags: Record::new(),
            outcomes: Record::new(),
            disconnects: Record::new(),
            streamed: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        });
        let conn_shared = Arc::clone(&shared);
        let acceptor = Acceptor::start(
            listener,
            "ollama-accept",
            "ollama-conn",
            stop,
            move |tcp, _peer| serve(tcp, &conn_shared),
        )?;
        Ok(OllamaEmulator {
            addr,
            shared,
            acceptor,
        })
    }

    /// `http://127.0.0.1:PORT`, the `ollama_url` to give a shim.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address (always 127.0.0.1).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Installs exactly these models from now on: what
    /// [`TagsBehaviour::Models`] lists and [`ChatBehaviour::Stream`]
    /// accepts.
    pub fn set_models<S: AsRef<str>>(&self, names: &[S]) {
        *lock(&self.shared.models) = names.iter().map(|name| name.as_ref().to_owned()).collect();
    }

    /// The installed models, in listing order.
    pub fn models(&self) -> Vec<String> {
        lock(&self.shared.models).clone()
    }

    /// Queues the behaviour for a coming `GET /api/tags` (first in, first
    /// out); once the queue is empty the default answers.
    pub fn push_tags(&self, behaviour: TagsBehaviour) {
        lock(&self.shared.tags_queue).push_back(behaviour);
    }

    /// Queues the behaviour for a coming valid `POST /api/chat` (first in,
    /// first out); once the queue is empty the default answers. A request
    /// whose body is not a JSON object with a non-empty string `model`,
    /// `messages` (if present) a list of objects with string `role` and
    /// `content`, `stream` (if present) a boolean and `options` (if
    /// present) an object is answered 400 `{"error": …}` and consumes no
    /// behaviour.
    pub fn push_chat(&self, behaviour: ChatBehaviour) {
        lock(&self.shared.chat_queue).push_back(behaviour);
    }

    /// The tags behaviour once the queue is empty, from now on.
    pub fn set_default_tags(&self, behaviour: TagsBehaviour) {
        *lock(&self.shared.default_tags) = behaviour;
    }

    /// The chat behaviour once the queue is empty, from now on.
    pub fn set_default_chat(&self, behaviour: ChatBehaviour) {
        *lock(&self.shared.default_chat) = behaviour;
    }

    /// Every `POST /api/chat` read so far, valid or not, in the order they
    /// were read in full. A request is recorded before it is answered.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.shared.chats.all()
    }

    /// Waits until at least `count` chat requests have been read (or
    /// `timeout` passed) and returns all of them.
    pub fn wait_chat_requests(&self, count: usize, timeout: Duration) -> Vec<ChatRequest> {
        self.shared.chats.wait_for(count, timeout)
    }

    /// How many `GET /api/tags` have been read so far.
    pub fn tags_requests(&self) -> usize {
        self.shared.tags.all().len()
    }

    /// Waits until at least `count` `GET /api/tags` have been read (or
    /// `timeout` passed) and returns how many have.
    pub fn wait_tags_requests(&self, count: usize, timeout: Duration) -> usize {
        self.shared.tags.wait_for(count, timeout).len()
    }

    /// What became of each chat answer that has ended, in the order they
    /// ended (answers cut short by the emulator stopping are not here).
    pub fn outcomes(&self) -> Vec<ChatOutcome> {
        self.shared.outcomes.all()
    }

    /// Waits until at least `count` chat answers have ended (or `timeout`
    /// passed) and returns their outcomes.
    pub fn wait_outcomes(&self, count: usize, timeout: Duration) -> Vec<ChatOutcome> {
        self.shared.outcomes.wait_for(count, timeout)
    }

    /// How many chat answers the client abandoned
    /// ([`ChatOutcome::ClientClosed`]) so far.
    pub fn disconnects(&self) -> usize {
        self.shared.disconnects.all().len()
    }

    /// Waits until at least `count` chat answers were abandoned by their
    /// client (or `timeout` passed) and returns how many were.
    pub fn wait_disconnects(&self, count: usize, timeout: Duration) -> usize {
        self.shared.disconnects.wait_for(count, timeout).len()
    }

    /// Body bytes of every chat stream the socket has taken so far (chunk
    /// framing and heads excluded), counted as each write returns: the
    /// client may read a write's bytes just before they are counted. A
    /// write blocks once the client stops reading and the kernel's socket
    /// buffers are full, so this stops growing a few MiB past what the
    /// client has read.
    pub fn streamed_bytes(&self) -> u64 {
        self.shared.streamed.load(Ordering::SeqCst)
    }

    /// Waits until [`OllamaEmulator::streamed_bytes`] is at least
    /// `at_least` (or `timeout` passed) and returns it.
    pub fn wait_streamed_bytes(&self, at_least: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            let streamed = self.streamed_bytes();
            if streamed >= at_least || Instant::now() >= deadline {
                return streamed;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for OllamaEmulator {
    fn drop(&mut self) {
        self.acceptor.stop();
        for tcp in lock(&self.shared.conns).values() {
            // The connection may already be closing; it ends either way.
            let _ = tcp.shutdown(Shutdown::Both);
        }
    }
}

/// Where a request goes, by method and path.
enum Route {
    Tags,
    Chat,
    Running,
    NotAllowed(&'static str),
    NotFound,
}

fn route(method: &str, path: &str) -> Route {
    match (method, path) {
        ("GET", TAGS_PATH) => Route::Tags,
        (_, TAGS_PATH) => Route::NotAllowed("GET"),
        ("POST", CHAT_PATH) => Route::Chat,
        (_, CHAT_PATH) => Route::NotAllowed("POST"),
        // Ollama's liveness answer at its root.
        ("GET", "/") => Route::Running,
        _ => Route::NotFound,
    }
}

/// One connection: one request, one answer, then the connection ends.
fn serve(tcp: TcpStream, shared: &Shared) {
    let _ = tcp.set_nodelay(true);
    let Some(_registered) = shared.register(&tcp) else {
        return;
    };
    let mut reader = HttpReader::new(tcp, Instant::now() + REQUEST_TIMEOUT);
    let read = reader
        .read_head(MAX_REQUEST_HEAD_BYTES)
        .and_then(|head| parse_head(&head))
        .and_then(|head| read_body_within(&mut reader, head, MAX_REQUEST_BODY_BYTES));
    let request = match read {
        Ok(request) => request,
        Err(Fault::Closed | Fault::Io(_)) => return,
        Err(fault) => {
            refuse_malformed(&mut reader, &fault);
            return;
        }
    };
    match route(&request.method, request.path_only()) {
        Route::Tags => {
            shared.tags.push(());
            let behaviour = lock(&shared.tags_queue)
                .pop_front()
                .unwrap_or_else(|| lock(&shared.default_tags).clone());
            answer_tags(&mut reader, behaviour, shared);
        }
        Route::Chat => chat(&mut reader, request, shared),
        Route::Running => {
            respond(
                &mut reader,
                200,
                "text/plain; charset=utf-8",
                &[],
                b"Ollama is running",
            );
        }
        Route::NotAllowed(allow) => {
            respond(
                &mut reader,
                405,
                "text/plain; charset=utf-8",
                &[("Allow", allow)],
                b"405 method not allowed",
            );
        }
        Route::NotFound => {
            respond(
                &mut reader,
                404,
                "text/plain; charset=utf-8",
                &[],
                b"404 page not found",
            );
        }
    }
}

/// Writes a complete answer and ends the connection gracefully; whether
/// it was written.
fn respond(
    reader: &mut HttpReader<TcpStream>,
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> bool {
    let written = write_plain(reader.stream_mut(), status, content_type, extra, body).is_ok();
    if written {
        finish(reader);
    }
    written
}

/// The content type a scripted status body is labelled with.
fn label(body: &str) -> &'static str {
    if serde_json::from_str::<Value>(body).is_ok() {
        "application/json; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    }
}

const JSON: &str = "application/json; charset=utf-8";

fn answer_tags(reader: &mut HttpReader<TcpStream>, behaviour: TagsBehaviour, shared: &Shared) {
    match behaviour {
        TagsBehaviour::Models => {
            let models: Vec<Value> = lock(&shared.models)
                .iter()
                .map(|name| model_entry(name))
                .collect();
            let body = json!({ "models": models }).to_string();
            respond(reader, 200, JSON, &[], body.as_bytes());
        }
        TagsBehaviour::Entries(entries) => {
            let body = json!({ "models": entries }).to_string();
            respond(reader, 200, JSON, &[], body.as_bytes());
        }
        TagsBehaviour::Status(status, body) => {
            respond(reader, status, label(&body), &[], body.as_bytes());
        }
        TagsBehaviour::Body(body) => {
            respond(reader, 200, JSON, &[], body.as_bytes());
        }
        TagsBehaviour::Hang(duration) => {
            watch(reader.stream_mut(), duration, &shared.stop);
        }
        TagsBehaviour::DropConnection => {}
        TagsBehaviour::Delayed(delay, inner) => {
            if watch(reader.stream_mut(), delay, &shared.stop) == Watch::Elapsed {
                answer_tags(reader, *inner, shared);
            }
        }
    }
}

/// One entry of the model listing, as Ollama documents it.
fn model_entry(name: &str) -> Value {
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    json!({
        "name": name,
        "model": name,
        "modified_at": MODIFIED_AT,
        "size": MODEL_SIZE,
        "digest": wire::hex_lower(digest.as_ref()),
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "llama",
            "families": ["llama"],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        },
    })
}

/// Why a chat body is refused with 400, as Ollama would refuse it.
fn chat_problem(body: Option<&Value>) -> Option<&'static str> {
    let Some(Value::Object(body)) = body else {
        return Some("invalid request body: expected a JSON object");
    };
    if !matches!(body.get("model"), Some(Value::String(model)) if !model.is_empty()) {
        return Some("model is required");
    }
    match body.get("messages") {
        None | Some(Value::Null) => {}
        Some(Value::Array(messages)) => {
            let well_formed = messages.iter().all(|message| {
                message.get("role").is_some_and(Value::is_string)
                    && message.get("content").is_some_and(Value::is_string)
            });
            if !well_formed {
                return Some("invalid message format");
            }
        }
        Some(_) => return Some("invalid message format"),
    }
    if !matches!(body.get("stream"), None | Some(Value::Bool(_))) {
        return Some("stream must be a boolean");
    }
    if !matches!(
        body.get("options"),
        None | Some(Value::Null | Value::Object(_))
    ) {
        return Some("options must be an object");
    }
    None
}

fn chat(reader: &mut HttpReader<TcpStream>, request: RecordedRequest, shared: &Shared) {
    let parsed = serde_json::from_slice::<Value>(&request.body).ok();
    let problem = chat_problem(parsed.as_ref());
    let model = parsed
        .as_ref()
        .and_then(|body| body.get("model"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    shared.chats.push(ChatRequest {
        method: request.method,
        path: request.path,
        headers: request.headers,
        body: request.body,
        json: parsed,
    });
    let outcome = match problem {
        Some(problem) => {
            let body = json!({ "error": problem }).to_string();
            written(respond(reader, 400, JSON, &[], body.as_bytes()), shared)
        }
        None => {
            let behaviour = lock(&shared.chat_queue)
                .pop_front()
                .unwrap_or_else(|| lock(&shared.default_chat).clone());
            answer_chat(reader, behaviour, &model, shared)
        }
    };
    match outcome {
        Some(ChatOutcome::ClientClosed) => {
            shared.outcomes.push(ChatOutcome::ClientClosed);
            shared.disconnects.push(());
        }
        Some(outcome) => shared.outcomes.push(outcome),
        None => {}
    }
}

/// The outcome of a complete answer, by whether its write succeeded;
/// `None` when it failed because the emulator is stopping.
fn written(ok: bool, shared: &Shared) -> Option<ChatOutcome> {
    if ok {
        Some(ChatOutcome::Answered)
    } else if shared.stopping() {
        None
    } else {
        Some(ChatOutcome::ClientClosed)
    }
}

/// Answers one valid chat request; `None` when the emulator stopped first.
fn answer_chat(
    reader: &mut HttpReader<TcpStream>,
    behaviour: ChatBehaviour,
    model: &str,
    shared: &Shared,
) -> Option<ChatOutcome> {
    // Ollama looks the model up before it answers anything else.
    let behaviour = match behaviour {
        ChatBehaviour::Stream(_) if !shared.installed(model) => ChatBehaviour::ModelNotFound,
        other => other,
    };
    match behaviour {
        ChatBehaviour::ModelNotFound => {
            let body = json!({ "error": format!("model '{model}' not found") }).to_string();
            let ok = respond(reader, 404, JSON, &[], body.as_bytes());
            written(ok, shared)
        }
        ChatBehaviour::Stream(steps) => {
            let streamed = Streamer {
                tcp: reader.stream_mut(),
                shared,
                model,
            }
            .stream(&steps);
            match streamed {
                Ok(Streamed::Complete) => {
                    finish(reader);
                    Some(ChatOutcome::Answered)
                }
                Ok(Streamed::Dropped) => Some(ChatOutcome::Dropped),
                Err(Gone::Client) => Some(ChatOutcome::ClientClosed),
                Err(Gone::Stopped) => None,
            }
        }
        ChatBehaviour::Status(status, body) => {
            let ok = respond(reader, status, label(&body), &[], body.as_bytes());
            written(ok, shared)
        }
        ChatBehaviour::Hang(duration) => match watch(reader.stream_mut(), duration, &shared.stop) {
            Watch::Elapsed => Some(ChatOutcome::Dropped),
            Watch::ClientLeft => Some(ChatOutcome::ClientClosed),
            Watch::Stopped => None,
        },
        ChatBehaviour::DropConnection => Some(ChatOutcome::Dropped),
        ChatBehaviour::Delayed(delay, inner) => {
            match watch(reader.stream_mut(), delay, &shared.stop) {
                Watch::Elapsed => answer_chat(reader, *inner, model, shared),
                Watch::ClientLeft => Some(ChatOutcome::ClientClosed),
                Watch::Stopped => None,
            }
        }
    }
}

/// How a wait that watches the client ended.
#[derive(Debug, PartialEq, Eq)]
enum Watch {
    Elapsed,
    ClientLeft,
    Stopped,
}

/// Waits `duration`, looking every [`WATCH_TICK`] whether the client left
/// or the emulator is stopping.
fn watch(tcp: &TcpStream, duration: Duration, stop: &AtomicBool) -> Watch {
    let deadline = Instant::now() + duration;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Watch::Stopped;
        }
        if client_left(tcp) {
            return Watch::ClientLeft;
        }
        let now = Instant::now();
        if now >= deadline {
            return Watch::Elapsed;
        }
        thread::sleep((deadline - now).min(WATCH_TICK));
    }
}

/// Whether the client has closed its side, without blocking. The request
/// was read in full and every answer says `Connection: close`, so the end
/// of the client's stream can only mean it gave up; bytes it still sends
/// mean nothing and are discarded.
fn client_left(tcp: &TcpStream) -> bool {
    if tcp.set_nonblocking(true).is_err() {
        return false;
    }
    let mut scratch = [0u8; 4096];
    let mut reads = 0;
    let left = loop {
        match (&*tcp).read(&mut scratch) {
            Ok(0) => break true,
            // A client that keeps sending is still there; a bound keeps it
            // from holding the answer up.
            Ok(_) if reads >= 16 => break false,
            Ok(_) => reads += 1,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    // Should this fail, the next write fails too and ends the answer.
    let _ = tcp.set_nonblocking(false);
    left
}

/// How a stream that was not cut short by the client ended.
enum Streamed {
    Complete,
    Dropped,
}

/// Why a stream ended before its script did.
enum Gone {
    Client,
    Stopped,
}

/// Writes one chat stream as chunks on a connection.
struct Streamer<'a> {
    tcp: &'a TcpStream,
    shared: &'a Shared,
    model: &'a str,
}

impl Streamer<'_> {
    fn stream(&mut self, steps: &[StreamStep]) -> Result<Streamed, Gone> {
        self.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\
              Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )?;
        for (index, step) in steps.iter().enumerate() {
            let last = index + 1 == steps.len();
            match step {
                StreamStep::Piece(piece) => {
                    self.chunk(&content_line(self.model, piece, &now_rfc3339()), last)?;
                }
                StreamStep::Done(done) => self.chunk(&done_line(self.model, done), last)?,
                StreamStep::Json(value) => {
                    let mut line = value.to_string().into_bytes();
                    line.push(b'\n');
                    self.chunk(&line, last)?;
                }
                StreamStep::Line(text) => {
                    self.chunk(format!("{text}\n").as_bytes(), last)?;
                }
                StreamStep::Bytes(bytes) => self.chunk(bytes, last)?,
                StreamStep::Stall(duration) => {
                    match watch(self.tcp, *duration, &self.shared.stop) {
                        Watch::Elapsed => {}
                        Watch::ClientLeft => return Err(Gone::Client),
                        Watch::Stopped => return Err(Gone::Stopped),
                    }
                    if last {
                        self.chunk(&[], true)?;
                    }
                }
                StreamStep::Flood {
                    content_bytes,
                    piece_bytes,
                } => {
                    self.flood(*content_bytes, *piece_bytes)?;
                    if last {
                        self.chunk(&[], true)?;
                    }
                }
                StreamStep::HugeLine(content_bytes) => {
                    self.huge_line(*content_bytes)?;
                    if last {
                        self.chunk(&[], true)?;
                    }
                }
                StreamStep::Drop => {
                    // Already closing if the client left; it ends either way.
                    let _ = self.tcp.shutdown(Shutdown::Both);
                    return Ok(Streamed::Dropped);
                }
            }
        }
        if steps.is_empty() {
            self.chunk(&[], true)?;
        }
        Ok(Streamed::Complete)
    }

    /// Writes `payload` as one chunk (none when empty), followed by the end
    /// of the body when `last`, in one write, and counts the payload.
    fn chunk(&mut self, payload: &[u8], last: bool) -> Result<(), Gone> {
        let mut bytes = Vec::with_capacity(payload.len() + 24);
        if !payload.is_empty() {
            bytes.extend_from_slice(format!("{:X}\r\n", payload.len()).as_bytes());
            bytes.extend_from_slice(payload);
            bytes.extend_from_slice(b"\r\n");
        }
        if last {
            bytes.extend_from_slice(b"0\r\n\r\n");
        }
        if bytes.is_empty() {
            return Ok(());
        }
        self.send(&bytes)?;
        let count = u64::try_from(payload.len()).unwrap_or(u64::MAX);
        self.shared.streamed.fetch_add(count, Ordering::SeqCst);
        Ok(())
    }

    /// Writes `bytes` unless the client has left or the emulator stops.
    fn send(&mut self, bytes: &[u8]) -> Result<(), Gone> {
        // A client that closed is seen here before the write: the first
        // write after a close would still succeed.
        if client_left(self.tcp) {
            return Err(self.gone());
        }
        let mut out: &TcpStream = self.tcp;
        out.write_all(bytes)
            .and_then(|()| out.flush())
            .map_err(|_| self.gone())
    }

    fn gone(&self) -> Gone {
        if self.shared.stopping() {
            Gone::Stopped
        } else {
            Gone::Client
        }
    }

    fn flood(&mut self, content_bytes: u64, piece_bytes: usize) -> Result<(), Gone> {
        let piece_bytes = piece_bytes.max(1);
        let created_at = now_rfc3339();
        let full_line = content_line(self.model, &letters(0, piece_bytes), &created_at);
        let mut batch = Vec::with_capacity(WRITE_CHUNK_BYTES + full_line.len());
        let mut left = content_bytes;
        while left > 0 {
            let take = usize::try_from(left).map_or(piece_bytes, |left| left.min(piece_bytes));
            if take == piece_bytes {
                batch.extend_from_slice(&full_line);
            } else {
                batch.extend(content_line(self.model, &letters(0, take), &created_at));
            }
            left -= u64::try_from(take).unwrap_or(left);
            if batch.len() >= WRITE_CHUNK_BYTES {
                self.chunk(&batch, false)?;
                batch.clear();
            }
        }
        self.chunk(&batch, false)
    }

    fn huge_line(&mut self, content_bytes: u64) -> Result<(), Gone> {
        let prefix = format!(
            "{{\"model\":{},\"created_at\":\"{}\",\"message\":{{\"role\":\"assistant\",\"content\":\"",
            Value::String(self.model.to_owned()),
            now_rfc3339()
        );
        self.chunk(prefix.as_bytes(), false)?;
        let mut offset: u64 = 0;
        while offset < content_bytes {
            let size = usize::try_from(content_bytes - offset)
                .map_or(WRITE_CHUNK_BYTES, |left| left.min(WRITE_CHUNK_BYTES));
            self.chunk(letters(offset, size).as_bytes(), false)?;
            offset += u64::try_from(size).unwrap_or(content_bytes);
        }
        self.chunk(b"\"},\"done\":false}\n", false)
    }
}

/// `size` lowercase ASCII letters continuing the alphabet from `offset`.
fn letters(offset: u64, size: usize) -> String {
    (0..size)
        .map(|index| {
            let at = (offset + u64::try_from(index).unwrap_or(0)) % 26;
            char::from(b'a' + u8::try_from(at).unwrap_or(0))
        })
        .collect()
}

/// A content line of a stream, newline included.
fn content_line(model: &str, piece: &str, created_at: &str) -> Vec<u8> {
    let mut line = json!({
        "model": model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": piece},
        "done": false,
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

/// The done line of a stream, newline included.
fn done_line(model: &str, done: &DoneLine) -> Vec<u8> {
    let mut line = json!({
        "model": model,
        "created_at": now_rfc3339(),
        "message": {"role": "assistant", "content": done.content},
        "done": true,
        "total_duration": 1_250_000_000_u64,
        "load_duration": 50_000_000_u64,
        "prompt_eval_duration": 200_000_000_u64,
        "eval_duration": 1_000_000_000_u64,
    });
    if let Some(reason) = &done.done_reason {
        line["done_reason"] = Value::String(reason.clone());
    }
    if let Some(count) = done.prompt_eval_count {
        line["prompt_eval_count"] = Value::from(count);
    }
    if let Some(count) = done.eval_count {
        line["eval_count"] = Value::from(count);
    }
    let mut line = line.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// The current time as Ollama writes `created_at`:
/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
fn now_rfc3339() -> String {
    // A clock before 1970 is not worth failing over: the field is
    // informational, so the epoch is written instead.
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since)
}

fn rfc3339(since_epoch: Duration) -> String {
    let seconds = since_epoch.as_secs();
    let (year, month, day) = civil_from_days(seconds / 86_400);
    let of_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        since_epoch.subsec_nanos()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's
/// `civil_from_days`, for non-negative day counts).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_at_is_rfc3339_utc_with_nanoseconds() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339(Duration::new(951_782_400, 5)),
            "2000-02-29T00:00:00.000000005Z"
        );
        assert_eq!(
            rfc3339(Duration::new(1_727_274_600, 123_456_789)),
            "2024-09-25T14:30:00.123456789Z"
        );
        assert_eq!(
            rfc3339(Duration::new(4_102_444_799, 0)),
            "2099-12-31T23:59:59.000000000Z"
        );
    }

    #[test]
    fn untagged_model_names_mean_latest() {
        assert_eq!(canonical_model("llama3.2"), "llama3.2:latest");
        assert_eq!(canonical_model("llama3.2:3b"), "llama3.2:3b");
        assert_eq!(
            canonical_model("registry.example:5000/library/qwen"),
            "registry.example:5000/library/qwen:latest"
        );
    }

    #[test]
    fn letters_continue_across_offsets() {
        assert_eq!(letters(0, 3), "abc");
        assert_eq!(letters(25, 3), "zab");
        assert_eq!(
            format!("{}{}", letters(0, 10), letters(10, 20)),
            letters(0, 30)
        );
    }

    #[test]
    fn chat_bodies_ollama_refuses_are_named() {
        let good = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "stream": true, "options": {"temperature": 0.0}});
        assert_eq!(chat_problem(Some(&good)), None);
        assert_eq!(chat_problem(Some(&json!({"model": "m"}))), None);
        for bad in [
            json!([1]),
            json!({"messages": []}),
            json!({"model": ""}),
            json!({"model": "m", "messages": {}}),
            json!({"model": "m", "messages": [{"role": "user"}]}),
            json!({"model": "m", "messages": ["hi"]}),
            json!({"model": "m", "stream": "yes"}),
            json!({"model": "m", "options": []}),
        ] {
            assert!(chat_problem(Some(&bad)).is_some(), "{bad}");
        }
        assert!(chat_problem(None).is_some());
    }
}
