//! The local LLM end to end (CAPABILITIES.md §5, PROTOCOL.md §7.13): the
//! real `autogpt-shim start` binary with `enable_local_llm` on, its
//! `ollama_url` pointed at the emulator's Ollama, driven through the
//! platform emulator.
//!
//! No real Ollama can run where these tests run (no model weights, no
//! network), so the emulator's Ollama-compatible server plays it: it lists
//! the models a test installs, streams the NDJSON lines a test scripts,
//! records every request exactly as sent and says whether the shim left a
//! stream before its end.
//!
//! Pinned here, one test per branch: the model probe at every HELLO and
//! each way it can fail (§5.1), and a model list cut to what fits the
//! platform's 64 KiB HELLO; the switch that keeps Ollama untouched; §5.2's
//! pre-checks (advertised model, the machine-wide busy lock, also across
//! two sessions of a control-mode daemon); the upstream body; the chunks
//! and the response, with and without streaming; the `done` line's reason
//! and counts; a body without `done`; skipped lines (also one over the
//! line-length bound); each upstream failure and its wire error, also after
//! chunks; the cancellation of the upstream request when the platform
//! connection ends, before or during Ollama's answer; and the one audit
//! record per request, which never holds prompt or response text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::ollama::DEFAULT_MODEL;
use autogpt_shim_emulator::{
    ChatBehaviour, ChatOutcome, Conn, DoneLine, Emulator, HelloAck, OllamaEmulator, OllamaOptions,
    RawKind, StreamStep, TagsBehaviour,
};
use serde_json::{Value, json};
use start_support::*;

const BUSY_MESSAGE: &str = "Local LLM backend is already processing another request.";
const NOT_LOADED_MESSAGE: &str = "Requested local LLM model is not loaded on the shim.";
const FAILED_PREFIX: &str = "Local LLM backend failed: ";

// ---------------------------------------------------------------- helpers

/// The environment that switches the local LLM on and points it at `ollama`.
fn llm_env(ollama: &OllamaEmulator) -> Vec<(&'static str, String)> {
    vec![
        ("AUTOGPT_SHIM_ENABLE_LOCAL_LLM", "true".to_owned()),
        ("AUTOGPT_SHIM_OLLAMA_URL", ollama.url()),
    ]
}

fn start_shim(home: &Home, emulator: &Emulator, env: &[(&'static str, String)]) -> Shim {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Shim::start_with_env(home, emulator, &env, &[])
}

/// A legacy-mode shim with the local LLM on, connected once. Fields drop
/// in order: the platform connection is judged first, the shim is killed,
/// then the servers and the home go.
struct Llm {
    conn: Conn,
    hello: Value,
    shim: Shim,
    emulator: Emulator,
    ollama: OllamaEmulator,
    home: Home,
}

impl Llm {
    /// Ollama with `options`, the connection acked with `ack`.
    fn start_with(options: OllamaOptions, ack: HelloAck) -> Llm {
        let ollama = OllamaEmulator::start(options).unwrap();
        let home = Home::new();
        let emulator = emulator();
        let shim = start_shim(&home, &emulator, &llm_env(&ollama));
        let (conn, hello) = connect(&emulator, ack);
        Llm {
            conn,
            hello,
            shim,
            emulator,
            ollama,
            home,
        }
    }

    /// Ollama with `options`; `files` and `local_llm` granted.
    fn start(options: OllamaOptions) -> Llm {
        Llm::start_with(options, HelloAck::new().grant(["files", "local_llm"]))
    }

    /// The default Ollama: [`DEFAULT_MODEL`] installed, replying "Hello world".
    fn default() -> Llm {
        Llm::start(OllamaOptions::new())
    }

    fn audit_text(&self) -> String {
        std::fs::read_to_string(&self.home.audit).unwrap()
    }
}

/// A completion request for `model` saying `text`, with the payload's
/// other fields at their defaults except those in `extra`.
fn request(model: &str, text: &str, extra: Value) -> Value {
    let mut payload = json!({
        "model": model,
        "messages": [{"role": "user", "content": text}],
    });
    for (key, value) in extra.as_object().unwrap() {
        payload[key] = value.clone();
    }
    payload
}

/// Every JSON frame the shim sent on `conn` with this `id`, in the order
/// they arrived.
fn frames_for(conn: &Conn, id: &str) -> Vec<Value> {
    conn.raw_frames()
        .iter()
        .filter(|f| f.kind == RawKind::Text)
        .filter_map(|f| serde_json::from_slice::<Value>(&f.data).ok())
        .filter(|v| v["id"] == id)
        .collect()
}

/// What the platform saw for one completion.
struct Answer {
    id: String,
    chunks: Vec<Value>,
    response: Value,
}

impl Answer {
    /// The chunks' payloads.
    fn chunk_payloads(&self) -> Vec<Value> {
        self.chunks.iter().map(|c| c["payload"].clone()).collect()
    }
}

/// Sends a completion, waits for its terminal frame, and checks the
/// framing every answer shares: every frame has the request's id, the
/// chunks come first and carry `pending_capacity: null`, and exactly one
/// terminal frame ends the answer.
fn complete(conn: &Conn, payload: Value) -> Answer {
    let id = conn.request("LOCAL_LLM_COMPLETION", payload).unwrap();
    let response = conn
        .wait_response(&id, WAIT)
        .unwrap_or_else(|| panic!("no response to completion {id}"));
    let frames = frames_for(conn, &id);
    let (last, chunks) = frames.split_last().unwrap();
    assert_eq!(
        last, &response,
        "the terminal frame is not last: {frames:?}"
    );
    for chunk in chunks {
        assert_eq!(chunk["type"], "LOCAL_LLM_COMPLETION_CHUNK", "{frames:?}");
        assert_eq!(chunk["version"], "1.1", "{chunk}");
        assert_eq!(
            chunk.get("pending_capacity"),
            Some(&Value::Null),
            "a chunk without pending_capacity: null: {chunk}"
        );
        let payload = chunk["payload"].as_object().unwrap();
        assert_eq!(payload.len(), 2, "{chunk}");
        assert!(payload["delta"].is_string(), "{chunk}");
    }
    Answer {
        id,
        chunks: chunks.to_vec(),
        response,
    }
}

/// The `delta`/`finish_reason` chunk payload.
fn chunk(delta: &str, finish_reason: Option<&str>) -> Value {
    json!({"delta": delta, "finish_reason": finish_reason})
}

/// A `LOCAL_LLM_COMPLETION_RESPONSE` with the full capacity of an idle
/// connection; returns its payload.
fn assert_response(response: &Value) -> Value {
    assert_eq!(
        response["type"], "LOCAL_LLM_COMPLETION_RESPONSE",
        "{response}"
    );
    assert_eq!(response["pending_capacity"], 4, "{response}");
    let payload = response["payload"].clone();
    let keys: Vec<&str> = payload
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        sorted(keys),
        ["content", "duration_seconds", "finish_reason", "tokens"],
        "{response}"
    );
    assert_three_decimals(&payload["duration_seconds"]);
    payload
}

fn sorted(mut keys: Vec<&str>) -> Vec<&str> {
    keys.sort_unstable();
    keys
}

/// A non-negative number rounded to 3 decimals (§5.2 step 7).
fn assert_three_decimals(value: &Value) {
    let seconds = value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"));
    assert!(seconds >= 0.0, "{value}");
    let millis = seconds * 1000.0;
    assert!(
        (millis - millis.round()).abs() < 1e-6,
        "more than 3 decimals: {value}"
    );
    let text = value.to_string();
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
    assert!(decimals <= 3, "written with more than 3 decimals: {text}");
}

/// A non-fatal `ERROR` with `code` and `message` and the full capacity of
/// an idle connection; returns its payload.
fn assert_error(response: &Value, code: &str, message: &str) -> Value {
    assert_error_at(response, code, message, 4)
}

/// A non-fatal `ERROR` with `code` and `message` sent with this
/// `pending_capacity`; returns its payload.
fn assert_error_at(response: &Value, code: &str, message: &str, capacity: u64) -> Value {
    assert_eq!(response["type"], "ERROR", "{response}");
    assert_eq!(response["payload"]["code"], code, "{response}");
    assert_eq!(response["payload"]["message"], message, "{response}");
    assert_eq!(response["payload"]["fatal"], false, "{response}");
    assert_eq!(response["pending_capacity"], capacity, "{response}");
    response["payload"].clone()
}

/// The one audit record of request `id`: a `LOCAL_LLM_COMPLETION` of this
/// session whose result says `error_code` (`None`: success); returns its
/// `details`.
fn record_of(home: &Home, id: &str, error_code: Option<&str>) -> Value {
    let found: Vec<Value> = home
        .records()
        .into_iter()
        .filter(|r| r["request_id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "records for {id}: {found:?}");
    let record = &found[0];
    assert_eq!(record["op"], "LOCAL_LLM_COMPLETION", "{record}");
    assert_eq!(record["session_id"], SESSION, "{record}");
    assert_eq!(record["result"]["ok"], error_code.is_none(), "{record}");
    assert_eq!(
        record["result"]["error_code"],
        json!(error_code),
        "{record}"
    );
    assert_eq!(record["result"]["exit_code"], Value::Null, "{record}");
    record["details"].clone()
}

/// The details of a request that failed: §5.2's five keys, `finish_reason`
/// null.
fn failed_details(model: &str, stream: bool, prompt_chars: u64, response_chars: u64) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "prompt_chars": prompt_chars,
        "response_chars": response_chars,
        "finish_reason": null,
    })
}

/// The HELLO's `capabilities`.
fn capabilities(hello: &Value) -> Vec<String> {
    hello["payload"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect()
}

/// A HELLO without `local_llm` and with an empty model list.
fn assert_not_offered(hello: &Value) {
    assert_eq!(capabilities(hello), ["files"], "{hello}");
    assert_eq!(hello["payload"]["local_llm_models"], json!([]), "{hello}");
}

/// Starts a shim whose first model probe meets `tags`; returns its HELLO
/// and how many probes Ollama saw by then.
fn hello_after_tags(tags: TagsBehaviour) -> (Value, usize) {
    let ollama = OllamaEmulator::start(OllamaOptions::new().tags(tags)).unwrap();
    let home = Home::new();
    let emulator = emulator();
    let _shim = start_shim(&home, &emulator, &llm_env(&ollama));
    let (conn, hello) = connect(&emulator, HelloAck::new());
    settle(&conn);
    (hello, ollama.tags_requests())
}

/// `conn`'s connection ends, the shim reconnects; returns the new
/// connection (acked with `ack`) and its HELLO.
fn reconnect(emulator: &Emulator, conn: Conn, ack: HelloAck) -> (Conn, Value) {
    conn.drop_tcp().unwrap();
    conn.wait_closed(WAIT).unwrap();
    drop(conn);
    connect(emulator, ack)
}

// ------------------------------------------------------ §5.1 discovery

#[test]
fn hello_advertises_local_llm_with_the_installed_models_in_listing_order() {
    let models = ["qwen2.5:0.5b", "llama3.2:3b", "mistral:latest"];
    let llm = Llm::start_with(OllamaOptions::new().models(&models), HelloAck::new());
    assert_eq!(capabilities(&llm.hello), ["files", "local_llm"]);
    assert_eq!(llm.hello["payload"]["local_llm_models"], json!(models));
    assert_eq!(llm.ollama.tags_requests(), 1);
    // Every model advertised is accepted.
    for model in models {
        let answer = complete(&llm.conn, request(model, "hi", json!({"stream": false})));
        assert_eq!(assert_response(&answer.response)["content"], "Hello world");
    }
}

#[test]
fn every_hello_asks_ollama_again_and_requests_are_checked_against_the_newest_list() {
    let llm = Llm::start_with(OllamaOptions::new().models(&["a:1"]), HelloAck::new());
    assert_eq!(llm.hello["payload"]["local_llm_models"], json!(["a:1"]));
    assert_eq!(llm.ollama.tags_requests(), 1);

    // A model installed meanwhile appears at the next HELLO only.
    llm.ollama.set_models(&["a:1", "b:2"]);
    let refused = complete(&llm.conn, request("b:2", "hi", json!({})));
    assert_error(
        &refused.response,
        "MODEL_NOT_AVAILABLE",
        "Model 'b:2' not in advertised list.",
    );
    let Llm {
        conn,
        emulator,
        ollama,
        home: _home,
        shim: _shim,
        ..
    } = llm;
    let (conn, hello) = reconnect(&emulator, conn, HelloAck::new());
    assert_eq!(ollama.tags_requests(), 2);
    assert_eq!(capabilities(&hello), ["files", "local_llm"]);
    assert_eq!(hello["payload"]["local_llm_models"], json!(["a:1", "b:2"]));
    let answer = complete(&conn, request("b:2", "hi", json!({"stream": false})));
    assert_response(&answer.response);

    // Every model removed: the next HELLO offers nothing.
    ollama.set_models::<&str>(&[]);
    let (conn, hello) = reconnect(&emulator, conn, HelloAck::new());
    assert_eq!(ollama.tags_requests(), 3);
    assert_not_offered(&hello);
    settle(&conn);
}

#[test]
fn a_model_list_too_long_for_the_hello_is_cut_to_fit_the_platform() {
    // 256 names of 199 bytes: 50 KiB of names, with the rest of the HELLO
    // more than the platform takes.
    let names: Vec<String> = (0..256)
        .map(|n| format!("{n:03}-{}", "m".repeat(195)))
        .collect();
    let entries = names.iter().map(|name| json!({"name": name})).collect();
    let llm = Llm::start_with(
        OllamaOptions::new()
            .models(&names)
            .tags(TagsBehaviour::Entries(entries)),
        HelloAck::new(),
    );
    // `connect` took a HELLO the platform accepts.
    assert!(llm.hello.to_string().len() <= 64 * 1024);
    assert_eq!(capabilities(&llm.hello), ["files", "local_llm"]);
    let advertised: Vec<String> =
        serde_json::from_value(llm.hello["payload"]["local_llm_models"].clone()).unwrap();
    assert_eq!(advertised.len(), 64);
    assert!(advertised.len() < names.len());
    assert_eq!(advertised, names[..advertised.len()]);
    // What was cut off is not advertised, so it is refused.
    let cut = &names[advertised.len()];
    let answer = complete(&llm.conn, request(cut, "hi", json!({})));
    assert_eq!(answer.response["payload"]["code"], "MODEL_NOT_AVAILABLE");
    settle(&llm.conn);
}

#[test]
fn no_installed_models_means_no_capability_and_an_empty_list() {
    let (hello, probes) = hello_after_tags(TagsBehaviour::Entries(vec![]));
    assert_not_offered(&hello);
    assert_eq!(probes, 1);
}

#[test]
fn a_tags_answer_of_http_500_gives_no_capability() {
    let (hello, probes) = hello_after_tags(TagsBehaviour::Status(
        500,
        r#"{"models":[{"name":"llama3.2:3b"}]}"#.into(),
    ));
    assert_not_offered(&hello);
    assert_eq!(probes, 1);
}

#[test]
fn a_tags_answer_that_is_not_json_gives_no_capability() {
    let (hello, _) = hello_after_tags(TagsBehaviour::Body("llama3.2:3b\n".into()));
    assert_not_offered(&hello);
}

#[test]
fn a_tags_answer_that_is_not_an_object_with_a_models_list_gives_no_capability() {
    for body in [
        r#"[{"name":"llama3.2:3b"}]"#,
        r#""llama3.2:3b""#,
        "{}",
        r#"{"models":{"name":"llama3.2:3b"}}"#,
        r#"{"models":"llama3.2:3b"}"#,
    ] {
        let (hello, _) = hello_after_tags(TagsBehaviour::Body(body.into()));
        assert_not_offered(&hello);
    }
}

#[test]
fn tags_entries_without_a_string_name_are_skipped() {
    let (hello, _) = hello_after_tags(TagsBehaviour::Entries(vec![
        json!("llama3.2:3b"),
        json!({"model": "nameless:1"}),
        json!({"name": "first:1"}),
        json!({"name": 7}),
        json!(null),
        json!(["inside:1"]),
        json!({"name": "second:2", "size": 1}),
    ]));
    assert_eq!(capabilities(&hello), ["files", "local_llm"]);
    assert_eq!(
        hello["payload"]["local_llm_models"],
        json!(["first:1", "second:2"])
    );
}

#[test]
fn tags_with_only_nameless_entries_give_no_capability() {
    let (hello, _) = hello_after_tags(TagsBehaviour::Entries(vec![
        json!({"model": "llama3.2:3b"}),
        json!({"name": null}),
        json!(3),
    ]));
    assert_not_offered(&hello);
}

#[test]
fn a_tags_answer_slower_than_two_seconds_gives_no_capability_and_does_not_hold_the_hello() {
    let ollama = OllamaEmulator::start(
        OllamaOptions::new().tags(TagsBehaviour::Models.after(Duration::from_secs(3))),
    )
    .unwrap();
    let home = Home::new();
    let emulator = emulator();
    let _shim = start_shim(&home, &emulator, &llm_env(&ollama));
    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(ollama.wait_tags_requests(1, WAIT), 1);
    let asked = Instant::now();
    let hello = conn.expect_hello(WAIT);
    let waited = asked.elapsed();
    conn.send_hello_ack(&HelloAck::new().session_id(SESSION))
        .unwrap();
    assert_not_offered(&hello);
    // The probe gives up at 2 s, before the 3 s answer.
    assert!(
        waited < Duration::from_millis(2900),
        "the HELLO waited {waited:?} for the model list"
    );
    settle(&conn);
}

#[test]
fn an_unreachable_ollama_gives_no_capability() {
    // A port that was just free and is closed again.
    let url = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let home = Home::new();
    let emulator = emulator();
    let _shim = start_shim(
        &home,
        &emulator,
        &[
            ("AUTOGPT_SHIM_ENABLE_LOCAL_LLM", "true".to_owned()),
            ("AUTOGPT_SHIM_OLLAMA_URL", url),
        ],
    );
    let (conn, hello) = connect(&emulator, HelloAck::new());
    assert_not_offered(&hello);
    settle(&conn);
}

#[test]
fn switched_off_the_shim_never_asks_ollama() {
    let ollama = OllamaEmulator::start(OllamaOptions::new()).unwrap();
    for switch in [None, Some("false")] {
        let home = Home::new();
        let emulator = emulator();
        let mut env = vec![("AUTOGPT_SHIM_OLLAMA_URL", ollama.url())];
        if let Some(value) = switch {
            env.push(("AUTOGPT_SHIM_ENABLE_LOCAL_LLM", value.to_owned()));
        }
        let _shim = start_shim(&home, &emulator, &env);
        let (conn, hello) = connect(&emulator, HelloAck::new());
        assert_not_offered(&hello);
        let (conn, hello) = reconnect(&emulator, conn, HelloAck::new());
        assert_not_offered(&hello);
        // Not advertised, so not granted: the gate answers.
        let answer = complete(&conn, request(DEFAULT_MODEL, "hi", json!({})));
        assert_eq!(
            answer.response["payload"]["code"], "CAPABILITY_NOT_GRANTED",
            "{}",
            answer.response
        );
        assert!(answer.chunks.is_empty());
    }
    assert_eq!(ollama.tags_requests(), 0);
    assert!(ollama.requests().is_empty());
}

// ------------------------------------------------ §5.2 pre-checks

#[test]
fn a_model_outside_the_advertised_list_is_refused_before_ollama_is_asked() {
    let llm = Llm::start(OllamaOptions::new().models(&["llama3.2:3b", "qwen2.5:0.5b"]));
    let answer = complete(&llm.conn, request("llama3.2", "héllo", json!({})));
    assert!(answer.chunks.is_empty());
    let error = assert_error(
        &answer.response,
        "MODEL_NOT_AVAILABLE",
        "Model 'llama3.2' not in advertised list.",
    );
    assert_eq!(
        error["details"],
        json!({
            "requested_model": "llama3.2",
            "available_models": ["llama3.2:3b", "qwen2.5:0.5b"],
        })
    );
    assert!(llm.ollama.requests().is_empty());
    assert_eq!(
        record_of(&llm.home, &answer.id, Some("MODEL_NOT_AVAILABLE")),
        failed_details("llama3.2", true, 5, 0)
    );
}

/// A stream that sends one piece and then waits `stall` before finishing.
fn stalled_reply(stall: Duration) -> ChatBehaviour {
    ChatBehaviour::Stream(vec![
        StreamStep::piece("slow"),
        StreamStep::Stall(stall),
        StreamStep::piece(" answer"),
        StreamStep::Done(DoneLine::stop(3, 2)),
    ])
}

#[test]
fn a_second_completion_while_one_runs_is_busy_without_queueing() {
    let llm = Llm::start(OllamaOptions::new());
    llm.ollama.push_chat(stalled_reply(Duration::from_secs(3)));
    let first = llm
        .conn
        .request(
            "LOCAL_LLM_COMPLETION",
            request(DEFAULT_MODEL, "one", json!({})),
        )
        .unwrap();
    // The first one is running: its first chunk has arrived.
    let first_chunk = llm
        .conn
        .recv_type("LOCAL_LLM_COMPLETION_CHUNK", WAIT)
        .unwrap();
    assert_eq!(first_chunk["id"], first.as_str());

    let asked = Instant::now();
    let second = complete(&llm.conn, request(DEFAULT_MODEL, "two!", json!({})));
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "the busy answer waited"
    );
    // The running completion holds one of the connection's four slots.
    let error = assert_error_at(&second.response, "LOCAL_LLM_BUSY", BUSY_MESSAGE, 3);
    assert!(error.get("details").is_none_or(Value::is_null), "{error}");
    assert!(second.chunks.is_empty());
    assert_eq!(
        record_of(&llm.home, &second.id, Some("LOCAL_LLM_BUSY")),
        failed_details(DEFAULT_MODEL, true, 4, 0)
    );

    // The first completes undisturbed; Ollama saw one request only.
    let response = llm.conn.wait_response(&first, WAIT).unwrap();
    let payload = response["payload"].clone();
    assert_eq!(payload["content"], "slow answer", "{response}");
    assert_eq!(llm.ollama.requests().len(), 1);
    // Once it is done, the next one runs.
    let third = complete(&llm.conn, request(DEFAULT_MODEL, "three", json!({})));
    assert_eq!(assert_response(&third.response)["content"], "Hello world");
}

#[test]
fn a_completion_on_another_session_is_busy_while_one_runs_on_the_machine() {
    let ollama = OllamaEmulator::start(OllamaOptions::new()).unwrap();
    ollama.push_chat(stalled_reply(Duration::from_secs(4)));
    let home = Home::new();
    std::fs::create_dir(home.path().join("project")).unwrap();
    let home_path = home.path().canonicalize().unwrap();
    let emulator = emulator();
    let env = llm_env(&ollama);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _shim = Shim::start_control_with_env(&home, &emulator, &env, &[]);
    let (control, control_hello) = accept_with(&emulator, &HelloAck::new());
    assert!(capabilities(&control_hello).contains(&"local_llm".to_owned()));

    let mut children = Vec::new();
    for session in ["chat-a", "chat-b"] {
        let (browse, reference) = reference_to(&control, &home_path, "project");
        let attached = control
            .call(
                "ATTACH_SESSION",
                json!({"session_id": session, "browse_id": browse, "directory_ref": reference}),
                WAIT,
            )
            .unwrap();
        assert_eq!(attached["type"], "SESSION_ATTACHED", "{attached}");
        let activated = control
            .call(
                "ACTIVATE_SESSION",
                json!({"session_id": session, "revision": 1}),
                WAIT,
            )
            .unwrap();
        assert_eq!(activated["type"], "SESSION_ACTIVATED", "{activated}");
        let (conn, hello) = accept_with(
            &emulator,
            &HelloAck::new()
                .session_id(session)
                .grant(["files", "local_llm"]),
        );
        assert_eq!(
            hello["payload"]["local_llm_models"],
            json!([DEFAULT_MODEL]),
            "{hello}"
        );
        children.push(conn);
    }
    // The control connection and each child asked at their own HELLO.
    assert_eq!(ollama.tags_requests(), 3);

    let first = children[0]
        .request(
            "LOCAL_LLM_COMPLETION",
            request(DEFAULT_MODEL, "one", json!({})),
        )
        .unwrap();
    children[0]
        .recv_type("LOCAL_LLM_COMPLETION_CHUNK", WAIT)
        .unwrap();
    let second = complete(&children[1], request(DEFAULT_MODEL, "two", json!({})));
    assert_error(&second.response, "LOCAL_LLM_BUSY", BUSY_MESSAGE);
    let response = children[0].wait_response(&first, WAIT).unwrap();
    assert_eq!(response["payload"]["content"], "slow answer", "{response}");
    assert_eq!(ollama.requests().len(), 1);

    // Both records, each stamped with its own session.
    let records = home.records();
    let of = |id: &str| {
        records
            .iter()
            .find(|r| r["request_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(of(&first)["session_id"], "chat-a");
    assert_eq!(of(&second.id)["session_id"], "chat-b");
    assert_eq!(of(&second.id)["result"]["error_code"], "LOCAL_LLM_BUSY");
}

// -------------------------------------------- §5.2 the upstream call

#[test]
fn the_upstream_body_always_streams_and_maps_the_options() {
    let llm = Llm::default();
    let messages = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "héllo"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": ""},
    ]);
    let answer = complete(
        &llm.conn,
        json!({
            "model": DEFAULT_MODEL,
            "messages": messages,
            "max_tokens": 77,
            "temperature": 0.7,
            "top_p": 0.9,
            "stream": false,
        }),
    );
    assert_response(&answer.response);
    let sent = llm.ollama.requests();
    assert_eq!(sent.len(), 1);
    let sent = &sent[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/api/chat");
    assert!(
        sent.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        sent.headers
    );
    assert_eq!(
        sent.json,
        Some(json!({
            "model": DEFAULT_MODEL,
            "messages": messages,
            "stream": true,
            "options": {"temperature": 0.7, "top_p": 0.9, "num_predict": 77},
        }))
    );
}

#[test]
fn the_upstream_body_carries_the_payload_defaults() {
    let llm = Llm::default();
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_response(&answer.response);
    let sent = llm.ollama.requests();
    assert_eq!(
        sent[0].json,
        Some(json!({
            "model": DEFAULT_MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": true,
            "options": {"temperature": 0.0, "top_p": 1.0, "num_predict": 1024},
        }))
    );
}

// --------------------------------------- §5.2 the stream and the reply

#[test]
fn streaming_sends_a_chunk_per_piece_then_a_terminal_chunk_before_the_response() {
    let llm =
        Llm::start(OllamaOptions::new().chat(ChatBehaviour::reply(&["Hel", "lo", ", ", "wörld"])));
    let answer = complete(
        &llm.conn,
        request(DEFAULT_MODEL, "hi", json!({"stream": true})),
    );
    assert_eq!(
        answer.chunk_payloads(),
        [
            chunk("Hel", None),
            chunk("lo", None),
            chunk(", ", None),
            chunk("wörld", None),
            chunk("", Some("stop")),
        ]
    );
    let payload = assert_response(&answer.response);
    assert_eq!(payload["content"], "Hello, wörld");
    assert_eq!(payload["finish_reason"], "stop");
    assert_eq!(
        payload["tokens"],
        json!({"prompt": 12, "completion": 4, "total": 16})
    );
    // The default `stream` is true.
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_eq!(answer.chunks.len(), 5);
}

#[test]
fn stream_false_sends_only_the_response() {
    let llm = Llm::start(OllamaOptions::new().chat(ChatBehaviour::reply(&["a", "b", "c"])));
    let answer = complete(
        &llm.conn,
        request(DEFAULT_MODEL, "hi", json!({"stream": false})),
    );
    assert!(answer.chunks.is_empty(), "{:?}", answer.chunks);
    let payload = assert_response(&answer.response);
    assert_eq!(payload["content"], "abc");
    assert_eq!(payload["finish_reason"], "stop");
    assert_eq!(
        payload["tokens"],
        json!({"prompt": 12, "completion": 3, "total": 15})
    );
}

/// A reply of one piece whose done line has this `done_reason`.
fn reply_with_reason(reason: Option<&str>) -> ChatBehaviour {
    ChatBehaviour::Stream(vec![
        StreamStep::piece("x"),
        StreamStep::Done(DoneLine::stop(1, 1).reason(reason)),
    ])
}

#[test]
fn done_reasons_length_and_content_filter_are_passed_on() {
    let llm = Llm::default();
    for reason in ["length", "content_filter", "stop"] {
        llm.ollama.push_chat(reply_with_reason(Some(reason)));
        let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
        assert_eq!(
            answer.chunk_payloads(),
            [chunk("x", None), chunk("", Some(reason))]
        );
        assert_eq!(assert_response(&answer.response)["finish_reason"], reason);
    }
}

#[test]
fn an_unknown_empty_or_missing_done_reason_is_stop() {
    let llm = Llm::default();
    for reason in [Some("load"), Some("unload"), Some(""), Some("LENGTH"), None] {
        llm.ollama.push_chat(reply_with_reason(reason));
        let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
        assert_eq!(
            answer.chunk_payloads(),
            [chunk("x", None), chunk("", Some("stop"))],
            "done_reason {reason:?}"
        );
        assert_eq!(assert_response(&answer.response)["finish_reason"], "stop");
    }
}

#[test]
fn token_total_is_null_when_a_count_is_missing() {
    let llm = Llm::default();
    let cases = [
        (
            DoneLine::stop(7, 2).without_counts(),
            json!({"prompt": null, "completion": null, "total": null}),
        ),
        (
            DoneLine {
                eval_count: None,
                ..DoneLine::stop(7, 2)
            },
            json!({"prompt": 7, "completion": null, "total": null}),
        ),
        (
            DoneLine {
                prompt_eval_count: None,
                ..DoneLine::stop(7, 2)
            },
            json!({"prompt": null, "completion": 2, "total": null}),
        ),
        (
            DoneLine::stop(0, 0),
            json!({"prompt": 0, "completion": 0, "total": 0}),
        ),
    ];
    for (done, tokens) in cases {
        llm.ollama.push_chat(ChatBehaviour::Stream(vec![
            StreamStep::piece("x"),
            StreamStep::Done(done),
        ]));
        let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
        assert_eq!(assert_response(&answer.response)["tokens"], tokens);
        let details = record_of(&llm.home, &answer.id, None);
        assert_eq!(details["tokens_prompt"], tokens["prompt"]);
        assert_eq!(details["tokens_completion"], tokens["completion"]);
        assert_eq!(details["tokens_total"], tokens["total"]);
    }
}

#[test]
fn a_body_that_ends_without_done_finishes_stop_without_a_terminal_chunk() {
    let llm = Llm::start(OllamaOptions::new().chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("cut"),
        StreamStep::piece(" short"),
    ])));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_eq!(
        answer.chunk_payloads(),
        [chunk("cut", None), chunk(" short", None)]
    );
    let payload = assert_response(&answer.response);
    assert_eq!(payload["content"], "cut short");
    assert_eq!(payload["finish_reason"], "stop");
    assert_eq!(
        payload["tokens"],
        json!({"prompt": null, "completion": null, "total": null})
    );
    assert_eq!(
        record_of(&llm.home, &answer.id, None)["finish_reason"],
        "stop"
    );
}

#[test]
fn blank_and_non_object_lines_are_skipped_and_empty_pieces_send_no_chunk() {
    let llm = Llm::start(OllamaOptions::new().chat(ChatBehaviour::Stream(vec![
        StreamStep::Line(String::new()),
        StreamStep::piece("one"),
        StreamStep::Line("not json at all".into()),
        StreamStep::Line("   ".into()),
        StreamStep::Json(json!([1, 2])),
        StreamStep::Json(json!("two")),
        StreamStep::Json(json!(null)),
        StreamStep::Line(r#"{"message": {"content": "unterminated"#.into()),
        StreamStep::Bytes(b"\xff\xfe{\"message\":{\"content\":\"bad\"}}\n".to_vec()),
        StreamStep::Json(json!({"message": "three"})),
        StreamStep::Json(json!({"message": {"content": 4}})),
        StreamStep::Json(json!({"message": {"content": ""}, "done": false})),
        StreamStep::Json(json!({"message": {"role": "assistant", "content": "-two"}})),
        StreamStep::Bytes(b"{\"message\":{\"content\":\"-three\"}}\r\n".to_vec()),
        StreamStep::Done(DoneLine::stop(5, 3)),
        // After done nothing is read.
        StreamStep::piece("-after"),
    ])));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_eq!(
        answer.chunk_payloads(),
        [
            chunk("one", None),
            chunk("-two", None),
            chunk("-three", None),
            chunk("", Some("stop")),
        ]
    );
    let payload = assert_response(&answer.response);
    assert_eq!(payload["content"], "one-two-three");
    assert_eq!(
        payload["tokens"],
        json!({"prompt": 5, "completion": 3, "total": 8})
    );
}

#[test]
fn a_done_line_with_content_and_a_truthy_done_ends_the_stream() {
    let llm = Llm::start(OllamaOptions::new().chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("a"),
        StreamStep::Json(json!({"message": {"content": "b"}, "done": 1, "done_reason": "length"})),
        StreamStep::piece("never"),
    ])));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_eq!(
        answer.chunk_payloads(),
        [
            chunk("a", None),
            chunk("b", None),
            chunk("", Some("length"))
        ]
    );
    let payload = assert_response(&answer.response);
    assert_eq!(payload["content"], "ab");
    assert_eq!(payload["finish_reason"], "length");
}

// ----------------------------------------------- §5.2 upstream failures

#[test]
fn upstream_404_is_model_not_available_with_the_backend_error() {
    let llm = Llm::default();
    llm.ollama.push_chat(ChatBehaviour::ModelNotFound);
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert!(answer.chunks.is_empty());
    let error = assert_error(&answer.response, "MODEL_NOT_AVAILABLE", NOT_LOADED_MESSAGE);
    let backend_error = error["details"]["backend_error"].as_str().unwrap();
    let body: Value = serde_json::from_str(backend_error).unwrap();
    assert_eq!(
        body,
        json!({"error": format!("model '{DEFAULT_MODEL}' not found")})
    );
    assert_eq!(error["details"].as_object().unwrap().len(), 1, "{error}");
    assert_eq!(
        record_of(&llm.home, &answer.id, Some("MODEL_NOT_AVAILABLE")),
        failed_details(DEFAULT_MODEL, true, 2, 0)
    );
}

#[test]
fn upstream_500_is_local_llm_failed_quoting_the_first_200_characters() {
    let llm = Llm::default();
    // 300 characters, most of them two bytes long: the quote counts
    // characters, not bytes.
    let body: String = std::iter::repeat_n("é", 150)
        .chain(std::iter::repeat_n("x", 150))
        .collect();
    llm.ollama
        .push_chat(ChatBehaviour::Status(500, body.clone()));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    let quoted: String = body.chars().take(200).collect();
    let error = assert_error(
        &answer.response,
        "LOCAL_LLM_FAILED",
        &format!("{FAILED_PREFIX}{quoted}"),
    );
    assert_eq!(error["details"], json!({"backend_error": body}));
    assert_eq!(
        record_of(&llm.home, &answer.id, Some("LOCAL_LLM_FAILED")),
        failed_details(DEFAULT_MODEL, true, 2, 0)
    );

    // Any status of 500 or above.
    llm.ollama.push_chat(ChatBehaviour::Status(
        503,
        r#"{"error":"overloaded"}"#.into(),
    ));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_error(
        &answer.response,
        "LOCAL_LLM_FAILED",
        r#"Local LLM backend failed: {"error":"overloaded"}"#,
    );
}

#[test]
fn another_non_200_status_is_local_llm_failed_with_its_body_or_http_code() {
    let llm = Llm::default();
    llm.ollama
        .push_chat(ChatBehaviour::Status(429, String::new()));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    let error = assert_error(
        &answer.response,
        "LOCAL_LLM_FAILED",
        "Local LLM backend failed: HTTP 429",
    );
    assert_eq!(error["details"], json!({"backend_error": "HTTP 429"}));

    llm.ollama
        .push_chat(ChatBehaviour::Status(400, r#"{"error":"bad"}"#.into()));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    let error = assert_error(
        &answer.response,
        "LOCAL_LLM_FAILED",
        r#"Local LLM backend failed: {"error":"bad"}"#,
    );
    assert_eq!(
        error["details"],
        json!({"backend_error": r#"{"error":"bad"}"#})
    );
}

#[test]
fn a_refused_connection_is_local_llm_failed() {
    let Llm {
        conn,
        ollama,
        home,
        emulator: _emulator,
        shim: _shim,
        ..
    } = Llm::default();
    // Ollama goes away after the HELLO found its models.
    drop(ollama);
    let answer = complete(&conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert!(answer.chunks.is_empty());
    let error = &answer.response["payload"];
    assert_eq!(error["code"], "LOCAL_LLM_FAILED", "{}", answer.response);
    let backend_error = error["details"]["backend_error"].as_str().unwrap();
    assert!(!backend_error.is_empty());
    let quoted: String = backend_error.chars().take(200).collect();
    assert_eq!(error["message"], format!("{FAILED_PREFIX}{quoted}"));
    assert_eq!(
        record_of(&home, &answer.id, Some("LOCAL_LLM_FAILED")),
        failed_details(DEFAULT_MODEL, true, 2, 0)
    );
}

#[test]
fn a_connection_closed_without_an_answer_is_local_llm_failed() {
    let llm = Llm::default();
    llm.ollama.push_chat(ChatBehaviour::DropConnection);
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert!(answer.chunks.is_empty());
    let error = &answer.response["payload"];
    assert_eq!(error["code"], "LOCAL_LLM_FAILED", "{}", answer.response);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with(FAILED_PREFIX),
        "{error}"
    );
    assert!(error["details"]["backend_error"].is_string(), "{error}");
}

#[test]
fn a_stream_cut_after_chunks_keeps_them_and_ends_with_an_error() {
    let llm = Llm::start(OllamaOptions::new().chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("Hel"),
        StreamStep::piece("lo"),
        StreamStep::Drop,
    ])));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_eq!(
        answer.chunk_payloads(),
        [chunk("Hel", None), chunk("lo", None)]
    );
    let error = &answer.response["payload"];
    assert_eq!(answer.response["type"], "ERROR", "{}", answer.response);
    assert_eq!(error["code"], "LOCAL_LLM_FAILED", "{}", answer.response);
    let backend_error = error["details"]["backend_error"].as_str().unwrap();
    let quoted: String = backend_error.chars().take(200).collect();
    assert_eq!(error["message"], format!("{FAILED_PREFIX}{quoted}"));
    // The pieces that arrived are counted, the reason is null.
    assert_eq!(
        record_of(&llm.home, &answer.id, Some("LOCAL_LLM_FAILED")),
        failed_details(DEFAULT_MODEL, true, 2, 5)
    );
    assert_eq!(llm.ollama.wait_outcomes(1, WAIT), [ChatOutcome::Dropped]);
}

#[test]
fn a_platform_connection_that_closes_mid_completion_cancels_the_upstream_request() {
    let llm = Llm::start_with(
        OllamaOptions::new(),
        HelloAck::new()
            .grant(["files", "local_llm"])
            .command_timeout_seconds(300),
    );
    llm.ollama.push_chat(stalled_reply(Duration::from_secs(60)));
    let id = llm
        .conn
        .request(
            "LOCAL_LLM_COMPLETION",
            request(DEFAULT_MODEL, "hi", json!({})),
        )
        .unwrap();
    llm.conn
        .recv_type("LOCAL_LLM_COMPLETION_CHUNK", WAIT)
        .unwrap();
    assert_eq!(llm.ollama.disconnects(), 0);
    let closed = Instant::now();
    llm.conn.drop_tcp().unwrap();
    assert_eq!(llm.ollama.wait_disconnects(1, WAIT), 1);
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "the upstream request outlived the connection by {:?}",
        closed.elapsed()
    );
    assert_eq!(llm.ollama.outcomes(), [ChatOutcome::ClientClosed]);
    // The shim reconnects; the cancelled completion has its record.
    let (conn, _) = connect(&llm.emulator, HelloAck::new().grant(["files", "local_llm"]));
    settle(&conn);
    llm.home.wait_record("LOCAL_LLM_COMPLETION", WAIT);
    assert_eq!(
        record_of(&llm.home, &id, Some("LOCAL_LLM_FAILED")),
        failed_details(DEFAULT_MODEL, true, 2, 4)
    );
    // The lock was released: the next completion runs.
    let answer = complete(
        &conn,
        request(DEFAULT_MODEL, "hi", json!({"stream": false})),
    );
    assert_response(&answer.response);
}

#[test]
fn a_platform_connection_that_closes_before_ollama_answers_cancels_the_request() {
    let llm = Llm::start_with(
        OllamaOptions::new(),
        HelloAck::new()
            .grant(["files", "local_llm"])
            .command_timeout_seconds(300),
    );
    llm.ollama
        .push_chat(ChatBehaviour::reply(&["late"]).after(Duration::from_secs(60)));
    let id = llm
        .conn
        .request(
            "LOCAL_LLM_COMPLETION",
            request(DEFAULT_MODEL, "hi", json!({})),
        )
        .unwrap();
    // Ollama has the request and has not answered.
    assert_eq!(llm.ollama.wait_chat_requests(1, WAIT).len(), 1);
    let closed = Instant::now();
    llm.conn.drop_tcp().unwrap();
    assert_eq!(llm.ollama.wait_disconnects(1, WAIT), 1);
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "the upstream request outlived the connection by {:?}",
        closed.elapsed()
    );
    let (conn, _) = connect(&llm.emulator, HelloAck::new().grant(["files", "local_llm"]));
    settle(&conn);
    llm.home.wait_record("LOCAL_LLM_COMPLETION", WAIT);
    assert_eq!(
        record_of(&llm.home, &id, Some("LOCAL_LLM_FAILED")),
        failed_details(DEFAULT_MODEL, true, 2, 0)
    );
}

#[test]
fn a_line_over_the_length_bound_is_skipped_whole() {
    // A single line of 2 MiB of text: longer than any line the shim keeps
    // (1 MiB), so it is dropped as a line that is not JSON would be.
    let llm = Llm::start(OllamaOptions::new().chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("before"),
        StreamStep::HugeLine(2 << 20),
        StreamStep::piece("-after"),
        StreamStep::Done(DoneLine::stop(1, 3)),
    ])));
    let answer = complete(&llm.conn, request(DEFAULT_MODEL, "hi", json!({})));
    assert_eq!(
        answer.chunk_payloads(),
        [
            chunk("before", None),
            chunk("-after", None),
            chunk("", Some("stop"))
        ]
    );
    assert_eq!(assert_response(&answer.response)["content"], "before-after");
}

// --------------------------------------------------------- §5.2 audit

#[test]
fn each_request_has_one_audit_record_without_prompt_or_response_text() {
    const PROMPT: &str = "PROMPT-TEXT-zyxwvu";
    const REPLY: &str = "REPLY-TEXT-qponml";
    let llm = Llm::default();
    let messages = json!([
        {"role": "system", "content": format!("{PROMPT}-sys")},
        {"role": "user", "content": format!("{PROMPT}-ünï")},
    ]);
    // 18 + 4 and 18 + 4 characters.
    let prompt_chars = 44;
    let payload =
        |model: &str, stream: bool| json!({"model": model, "messages": messages, "stream": stream});

    // Success, streamed and not.
    for stream in [true, false] {
        llm.ollama.push_chat(ChatBehaviour::Stream(vec![
            StreamStep::piece(REPLY),
            StreamStep::piece("-ß"),
            StreamStep::Stall(Duration::from_millis(250)),
            StreamStep::Done(DoneLine::stop(9, 2).reason(Some("length"))),
        ]));
        let answer = complete(&llm.conn, payload(DEFAULT_MODEL, stream));
        let response = assert_response(&answer.response);
        let duration = response["duration_seconds"].as_f64().unwrap();
        assert!(duration >= 0.25, "{duration}");
        assert_eq!(
            record_of(&llm.home, &answer.id, None),
            json!({
                "model": DEFAULT_MODEL,
                "stream": stream,
                "prompt_chars": prompt_chars,
                "response_chars": REPLY.len() + 2,
                "finish_reason": "length",
                "tokens_prompt": 9,
                "tokens_completion": 2,
                "tokens_total": 11,
            })
        );
    }

    // Pre-check.
    let answer = complete(&llm.conn, payload("other:1", false));
    assert_eq!(answer.response["payload"]["code"], "MODEL_NOT_AVAILABLE");
    assert_eq!(
        record_of(&llm.home, &answer.id, Some("MODEL_NOT_AVAILABLE")),
        failed_details("other:1", false, prompt_chars, 0)
    );

    // Busy.
    llm.ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::piece(REPLY),
        StreamStep::Stall(Duration::from_secs(2)),
        StreamStep::Done(DoneLine::stop(1, 1)),
    ]));
    let running = llm
        .conn
        .request("LOCAL_LLM_COMPLETION", payload(DEFAULT_MODEL, true))
        .unwrap();
    llm.conn
        .recv_type("LOCAL_LLM_COMPLETION_CHUNK", WAIT)
        .unwrap();
    let busy = complete(&llm.conn, payload(DEFAULT_MODEL, true));
    assert_eq!(busy.response["payload"]["code"], "LOCAL_LLM_BUSY");
    assert_eq!(
        record_of(&llm.home, &busy.id, Some("LOCAL_LLM_BUSY")),
        failed_details(DEFAULT_MODEL, true, prompt_chars, 0)
    );
    llm.conn.wait_response(&running, WAIT).unwrap();
    record_of(&llm.home, &running, None);

    // Upstream failure.
    llm.ollama
        .push_chat(ChatBehaviour::Status(500, format!("{REPLY} failed")));
    let failed = complete(&llm.conn, payload(DEFAULT_MODEL, true));
    assert_eq!(failed.response["payload"]["code"], "LOCAL_LLM_FAILED");
    assert_eq!(
        record_of(&llm.home, &failed.id, Some("LOCAL_LLM_FAILED")),
        failed_details(DEFAULT_MODEL, true, prompt_chars, 0)
    );

    // Six requests, six records; no text of either side anywhere in the
    // log.
    let completions = llm
        .home
        .records()
        .iter()
        .filter(|r| r["op"] == "LOCAL_LLM_COMPLETION")
        .count();
    assert_eq!(completions, 6);
    let audit = llm.audit_text();
    assert!(!audit.contains(PROMPT), "the prompt is in the audit log");
    assert!(!audit.contains(REPLY), "the response is in the audit log");
    let (code, text) = llm.home.verify();
    assert_eq!(code, 0, "{text}");
}
