#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The Ollama emulator over real sockets, with a small HTTP/1.1 client
//! written here: the model listing and its scripted failures, the recorded
//! chat request, the streamed lines chunk by chunk, every scripted stream
//! fault, backpressure of a flood, and clients that leave early.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use autogpt_shim_emulator::ollama::{
    ChatBehaviour, ChatOutcome, DEFAULT_MODEL, DEFAULT_PROMPT_EVAL_COUNT, DEFAULT_REPLY, DoneLine,
    OllamaEmulator, OllamaOptions, StreamStep, TagsBehaviour,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

/// The body `CAPABILITIES.md` §5.2 step 4 describes.
fn chat_body(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "stream": true,
        "options": {"temperature": 0.0, "top_p": 1.0, "num_predict": 256},
    })
}

/// One response being read: its head, then its body at the test's pace.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn is_chunked(&self) -> bool {
        self.header("transfer-encoding") == Some("chunked")
    }

    /// The next chunk's data; `None` at the last chunk (trailers read).
    fn chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let size_line = self.line()?;
        let size = usize::from_str_radix(size_line.trim(), 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, size_line.clone()))?;
        if size == 0 {
            assert_eq!(self.line()?, "", "no trailers expected");
            return Ok(None);
        }
        let mut data = vec![0u8; size + 2];
        self.reader.read_exact(&mut data)?;
        assert_eq!(&data[size..], b"\r\n", "chunk data ends with CRLF");
        data.truncate(size);
        Ok(Some(data))
    }

    /// Every remaining chunk, up to the last one.
    fn chunks(&mut self) -> io::Result<Vec<Vec<u8>>> {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.chunk()? {
            chunks.push(chunk);
        }
        Ok(chunks)
    }

    /// The whole body, by its framing.
    fn body(&mut self) -> Vec<u8> {
        if self.is_chunked() {
            return self.chunks().unwrap().concat();
        }
        let length: usize = self.header("content-length").unwrap().parse().unwrap();
        let mut body = vec![0u8; length];
        self.reader.read_exact(&mut body).unwrap();
        body
    }

    fn json(&mut self) -> Value {
        serde_json::from_slice(&self.body()).unwrap()
    }

    /// One line of the head or of chunk framing, without its CRLF.
    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
        }
        assert!(line.ends_with("\r\n"), "CRLF line: {line:?}");
        line.truncate(line.len() - 2);
        Ok(line)
    }

    /// Whether the server closed the connection (after the body).
    fn at_end(&mut self) -> bool {
        let mut rest = Vec::new();
        matches!(self.reader.read_to_end(&mut rest), Ok(0))
    }
}

fn send(ollama: &OllamaEmulator, request: &[u8]) -> TcpStream {
    let mut tcp = TcpStream::connect(ollama.local_addr()).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    tcp.write_all(request).unwrap();
    tcp
}

fn read_response(tcp: TcpStream) -> io::Result<Response> {
    let mut response = Response {
        status: 0,
        headers: Vec::new(),
        reader: BufReader::new(tcp),
    };
    let status_line = response.line()?;
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"));
    response.status = parts.next().unwrap().parse().unwrap();
    loop {
        let line = response.line()?;
        if line.is_empty() {
            return Ok(response);
        }
        let (name, value) = line.split_once(':').unwrap();
        response
            .headers
            .push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
}

fn request_bytes(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

fn get(ollama: &OllamaEmulator, path: &str) -> Response {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    read_response(send(ollama, request.as_bytes())).unwrap()
}

fn post_chat(ollama: &OllamaEmulator, body: &Value) -> Response {
    let tcp = send(
        ollama,
        &request_bytes("POST", "/api/chat", body.to_string().as_bytes()),
    );
    read_response(tcp).unwrap()
}

/// The lines of a stream, one per chunk (asserted), parsed as JSON.
fn stream_lines(response: &mut Response) -> Vec<Value> {
    response
        .chunks()
        .unwrap()
        .iter()
        .map(|chunk| {
            assert_eq!(chunk.iter().filter(|&&byte| byte == b'\n').count(), 1);
            assert!(chunk.ends_with(b"\n"), "one whole line per chunk");
            serde_json::from_slice(chunk).unwrap()
        })
        .collect()
}

fn start(options: OllamaOptions) -> OllamaEmulator {
    OllamaEmulator::start(options).unwrap()
}

#[test]
fn tags_list_the_installed_models_in_order_with_ollamas_fields() {
    let ollama = start(OllamaOptions::new().models(&["qwen2.5:7b", "llama3.2:3b"]));
    assert!(ollama.url().starts_with("http://127.0.0.1:"));
    assert_eq!(ollama.url(), format!("http://127.0.0.1:{}", ollama.port()));
    let mut response = get(&ollama, "/api/tags");
    assert_eq!(response.status, 200);
    assert!(
        response
            .header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let body = response.json();
    let models = body["models"].as_array().unwrap();
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["qwen2.5:7b", "llama3.2:3b"]);
    for entry in models {
        assert_eq!(entry["model"], entry["name"]);
        assert!(entry["modified_at"].as_str().unwrap().ends_with('Z'));
        assert!(entry["size"].as_u64().unwrap() > 0);
        let digest = entry["digest"].as_str().unwrap();
        assert_eq!(digest.len(), 64);
        assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert_ne!(models[0]["digest"], models[1]["digest"]);
    assert!(response.at_end());
    assert_eq!(ollama.tags_requests(), 1);

    ollama.set_models(&["phi3"]);
    assert_eq!(ollama.models(), ["phi3"]);
    let names = get(&ollama, "/api/tags").json()["models"][0]["name"].clone();
    assert_eq!(names, "phi3");
    assert_eq!(ollama.wait_tags_requests(2, WAIT), 2);
    assert!(ollama.requests().is_empty(), "tags are not chat requests");
}

#[test]
fn tags_behaviours_are_consumed_in_order_then_the_default_answers() {
    let ollama = start(OllamaOptions::new().models::<&str>(&[]));
    ollama.push_tags(TagsBehaviour::Status(500, "boom".to_owned()));
    ollama.push_tags(TagsBehaviour::Body("not json".to_owned()));
    ollama.push_tags(TagsBehaviour::Body("[1, 2]".to_owned()));
    ollama.push_tags(TagsBehaviour::Entries(vec![
        json!(1),
        json!({"model": "no-name"}),
        json!({"name": 7}),
        json!({"name": "good"}),
    ]));
    ollama.push_tags(TagsBehaviour::Status(503, String::new()));

    let mut first = get(&ollama, "/api/tags");
    assert_eq!(first.status, 500);
    assert!(
        first
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(first.body(), b"boom");

    let mut second = get(&ollama, "/api/tags");
    assert_eq!(second.status, 200);
    assert!(
        second
            .header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(second.body(), b"not json");

    assert_eq!(get(&ollama, "/api/tags").json(), json!([1, 2]));
    assert_eq!(
        get(&ollama, "/api/tags").json(),
        json!({"models": [1, {"model": "no-name"}, {"name": 7}, {"name": "good"}]})
    );

    let mut fifth = get(&ollama, "/api/tags");
    assert_eq!(fifth.status, 503);
    assert_eq!(fifth.header("content-length"), Some("0"));
    assert!(fifth.body().is_empty());

    // The queue is empty: the default, which lists no models here.
    assert_eq!(get(&ollama, "/api/tags").json(), json!({"models": []}));
    ollama.set_default_tags(TagsBehaviour::Status(404, "{}".to_owned()));
    assert_eq!(get(&ollama, "/api/tags").status, 404);
    assert_eq!(ollama.tags_requests(), 7);
}

#[test]
fn a_delayed_listing_sends_nothing_until_its_delay_has_passed() {
    let ollama =
        start(OllamaOptions::new().tags(TagsBehaviour::Models.after(Duration::from_millis(700))));
    let started = Instant::now();
    let tcp = send(&ollama, b"GET /api/tags HTTP/1.1\r\nHost: x\r\n\r\n");
    tcp.set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let mut probe = [0u8; 1];
    let early = (&tcp).read(&mut probe).unwrap_err();
    assert!(matches!(
        early.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ));
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let mut response = read_response(tcp).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["models"][0]["name"], DEFAULT_MODEL);
}

#[test]
fn a_hung_or_dropped_listing_closes_without_an_answer() {
    let ollama = start(OllamaOptions::new());
    ollama.push_tags(TagsBehaviour::Hang(Duration::from_millis(300)));
    ollama.push_tags(TagsBehaviour::DropConnection);
    let started = Instant::now();
    let mut hung = send(&ollama, b"GET /api/tags HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut rest = Vec::new();
    assert_eq!(hung.read_to_end(&mut rest).unwrap_or(0), 0);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let mut dropped = send(&ollama, b"GET /api/tags HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(dropped.read_to_end(&mut rest).unwrap_or(0), 0);
    assert_eq!(ollama.tags_requests(), 2);
}

#[test]
fn chat_records_the_request_and_streams_one_line_per_chunk_then_done() {
    let ollama = start(OllamaOptions::new());
    let sent = chat_body(DEFAULT_MODEL);
    let mut response = post_chat(&ollama, &sent);
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("application/x-ndjson")
    );
    assert!(response.is_chunked());
    assert_eq!(response.header("content-length"), None);
    let lines = stream_lines(&mut response);
    assert!(response.at_end());
    assert_eq!(lines.len(), DEFAULT_REPLY.len() + 1);
    for (line, piece) in lines.iter().zip(DEFAULT_REPLY) {
        assert_eq!(line["model"], DEFAULT_MODEL);
        assert!(line["created_at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(
            line["message"],
            json!({"role": "assistant", "content": piece})
        );
        assert_eq!(line["done"], false);
    }
    let done = &lines[DEFAULT_REPLY.len()];
    assert_eq!(done["done"], true);
    assert_eq!(done["done_reason"], "stop");
    assert_eq!(done["prompt_eval_count"], DEFAULT_PROMPT_EVAL_COUNT);
    assert_eq!(done["eval_count"], DEFAULT_REPLY.len());
    assert_eq!(done["message"]["content"], "");

    let recorded = ollama.wait_chat_requests(1, WAIT);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].method, "POST");
    assert_eq!(recorded[0].path, "/api/chat");
    assert_eq!(recorded[0].header("content-type"), Some("application/json"));
    assert_eq!(recorded[0].json.as_ref(), Some(&sent));
    let names: Vec<String> = recorded[0]
        .json_members()
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names.len(), 4);
    assert_eq!(ollama.wait_outcomes(1, WAIT), [ChatOutcome::Answered]);
    assert_eq!(ollama.disconnects(), 0);
    let body_bytes: u64 = lines
        .iter()
        .map(|line| line.to_string().len() as u64 + 1)
        .sum();
    assert_eq!(ollama.streamed_bytes(), body_bytes);
}

#[test]
fn each_line_is_sent_before_a_stall_that_follows_it() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::Stall(Duration::from_millis(300)),
        StreamStep::piece("first"),
        StreamStep::Stall(Duration::from_millis(600)),
        StreamStep::piece("second"),
        StreamStep::Done(DoneLine::stop(3, 2)),
    ]));
    let started = Instant::now();
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    let head_at = started.elapsed();
    let first = response.chunk().unwrap().unwrap();
    let first_at = started.elapsed();
    let second = response.chunk().unwrap().unwrap();
    let second_at = started.elapsed();
    // The head came before the first stall, each line before the stall
    // after it.
    assert!(
        first_at - head_at >= Duration::from_millis(250),
        "head at {head_at:?}, first line at {first_at:?}"
    );
    assert!(second_at - first_at >= Duration::from_millis(550));
    assert_eq!(
        serde_json::from_slice::<Value>(&first).unwrap()["message"]["content"],
        "first"
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&second).unwrap()["message"]["content"],
        "second"
    );
    let done: Value = serde_json::from_slice(&response.chunk().unwrap().unwrap()).unwrap();
    assert_eq!(done["done"], true);
    assert!(response.chunk().unwrap().is_none());
}

#[test]
fn the_done_line_carries_whatever_reason_counts_and_content_it_is_given() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![StreamStep::Done(
        DoneLine::stop(5, 9).reason(Some("length")),
    )]));
    ollama.push_chat(ChatBehaviour::Stream(vec![StreamStep::Done(
        DoneLine::stop(5, 9).reason(None).without_counts(),
    )]));
    ollama.push_chat(ChatBehaviour::Stream(vec![StreamStep::Done(DoneLine {
        content: "tail".to_owned(),
        done_reason: Some("weird".to_owned()),
        prompt_eval_count: None,
        eval_count: Some(1),
    })]));

    let lines = stream_lines(&mut post_chat(&ollama, &chat_body(DEFAULT_MODEL)));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["done_reason"], "length");
    assert_eq!(lines[0]["prompt_eval_count"], 5);
    assert_eq!(lines[0]["eval_count"], 9);

    let lines = stream_lines(&mut post_chat(&ollama, &chat_body(DEFAULT_MODEL)));
    let done = lines[0].as_object().unwrap();
    assert_eq!(done["done"], true);
    for absent in ["done_reason", "prompt_eval_count", "eval_count"] {
        assert!(!done.contains_key(absent), "{absent}");
    }

    let lines = stream_lines(&mut post_chat(&ollama, &chat_body(DEFAULT_MODEL)));
    let done = lines[0].as_object().unwrap();
    assert_eq!(done["message"]["content"], "tail");
    assert_eq!(done["done_reason"], "weird");
    assert!(!done.contains_key("prompt_eval_count"));
    assert_eq!(done["eval_count"], 1);
}

#[test]
fn a_model_that_is_not_installed_is_answered_404_with_ollamas_error() {
    let ollama = start(OllamaOptions::new().models(&["llama3.2:latest", "qwen2.5:7b"]));
    let mut missing = post_chat(&ollama, &chat_body("mistral:7b"));
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"error": "model 'mistral:7b' not found"})
    );
    // An untagged name means :latest, as Ollama resolves it.
    assert_eq!(post_chat(&ollama, &chat_body("llama3.2")).status, 200);
    assert_eq!(post_chat(&ollama, &chat_body("qwen2.5")).status, 404);
    // Scripted, whatever the model.
    ollama.push_chat(ChatBehaviour::ModelNotFound);
    let mut scripted = post_chat(&ollama, &chat_body("qwen2.5:7b"));
    assert_eq!(scripted.status, 404);
    assert_eq!(scripted.json()["error"], "model 'qwen2.5:7b' not found");
    assert_eq!(ollama.requests().len(), 4);
}

#[test]
fn scripted_statuses_carry_their_bodies_verbatim() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Status(
        500,
        r#"{"error":"llama runner process has terminated"}"#.to_owned(),
    ));
    ollama.push_chat(ChatBehaviour::Status(502, "upstream gone".to_owned()));
    ollama.push_chat(ChatBehaviour::Status(429, String::new()));

    let mut error = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    assert_eq!(error.status, 500);
    assert!(
        error
            .header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(
        error.body(),
        br#"{"error":"llama runner process has terminated"}"#
    );

    let mut text = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    assert_eq!(text.status, 502);
    assert!(
        text.header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(text.body(), b"upstream gone");

    let mut empty = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    assert_eq!(empty.status, 429);
    assert_eq!(empty.header("content-length"), Some("0"));
    assert!(empty.body().is_empty());
    assert!(empty.at_end());

    // Queue used up: the default stream again.
    assert_eq!(post_chat(&ollama, &chat_body(DEFAULT_MODEL)).status, 200);
}

#[test]
fn garbage_lines_are_sent_exactly_as_scripted() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::Line(String::new()),
        StreamStep::Line("not json at all".to_owned()),
        StreamStep::Json(json!([1, 2])),
        StreamStep::Json(json!({"message": "flat", "done": false})),
        StreamStep::Json(json!({"message": {"role": "assistant", "content": 7}, "done": false})),
        StreamStep::Json(json!({"message": {"role": "assistant", "content": ""}, "done": false})),
        StreamStep::piece("real"),
        StreamStep::Bytes(b"\xff\xfe\r\n".to_vec()),
        StreamStep::Bytes(Vec::new()),
        StreamStep::Json(json!({"done": 1})),
    ]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    let chunks = response.chunks().unwrap();
    assert_eq!(chunks.len(), 9, "an empty Bytes step sends no chunk");
    assert_eq!(chunks[0], b"\n");
    assert_eq!(chunks[1], b"not json at all\n");
    assert_eq!(chunks[2], b"[1,2]\n");
    let flat: Value = serde_json::from_slice(&chunks[3]).unwrap();
    assert_eq!(flat["message"], "flat");
    let numeric: Value = serde_json::from_slice(&chunks[4]).unwrap();
    assert_eq!(numeric["message"]["content"], 7);
    let real: Value = serde_json::from_slice(&chunks[6]).unwrap();
    assert_eq!(real["message"]["content"], "real");
    assert_eq!(chunks[7], b"\xff\xfe\r\n");
    assert_eq!(chunks[8], b"{\"done\":1}\n");
    assert!(response.at_end());
}

#[test]
fn a_body_without_a_done_line_still_ends_its_chunked_body() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("a"),
        StreamStep::piece("b"),
    ]));
    ollama.push_chat(ChatBehaviour::Stream(Vec::new()));
    let lines = stream_lines(&mut post_chat(&ollama, &chat_body(DEFAULT_MODEL)));
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|line| line["done"] == false));
    let mut empty = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    assert_eq!(empty.status, 200);
    assert!(empty.chunks().unwrap().is_empty());
    assert!(empty.at_end());
    assert_eq!(
        ollama.wait_outcomes(2, WAIT),
        [ChatOutcome::Answered, ChatOutcome::Answered]
    );
}

#[test]
fn dropping_mid_stream_cuts_the_chunked_body_short() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("partial"),
        StreamStep::Drop,
        StreamStep::Done(DoneLine::stop(1, 1)),
    ]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    let first = response.chunk().unwrap().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&first).unwrap()["message"]["content"],
        "partial"
    );
    let cut = response.chunk().unwrap_err();
    assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(ollama.wait_outcomes(1, WAIT), [ChatOutcome::Dropped]);
    assert_eq!(ollama.disconnects(), 0);
}

#[test]
fn a_dropped_or_hung_chat_closes_without_a_response() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::DropConnection);
    ollama.push_chat(ChatBehaviour::Hang(Duration::from_millis(300)));
    let started = Instant::now();
    for _ in 0..2 {
        let tcp = send(
            &ollama,
            &request_bytes(
                "POST",
                "/api/chat",
                chat_body(DEFAULT_MODEL).to_string().as_bytes(),
            ),
        );
        let closed = read_response(tcp).unwrap_err();
        assert_eq!(closed.kind(), io::ErrorKind::UnexpectedEof);
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        ollama.wait_outcomes(2, WAIT),
        [ChatOutcome::Dropped, ChatOutcome::Dropped]
    );
    assert_eq!(ollama.requests().len(), 2);
}

#[test]
fn a_delayed_chat_sends_no_byte_until_its_delay_has_passed() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::reply(&["late"]).after(Duration::from_millis(700)));
    let started = Instant::now();
    let tcp = send(
        &ollama,
        &request_bytes(
            "POST",
            "/api/chat",
            chat_body(DEFAULT_MODEL).to_string().as_bytes(),
        ),
    );
    assert_eq!(
        ollama.wait_chat_requests(1, WAIT).len(),
        1,
        "recorded before the delay"
    );
    tcp.set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let mut probe = [0u8; 1];
    let early = (&tcp).read(&mut probe).unwrap_err();
    assert!(matches!(
        early.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ));
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let mut response = read_response(tcp).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(700));
    let lines = stream_lines(&mut response);
    assert_eq!(lines[0]["message"]["content"], "late");
    assert_eq!(lines[1]["eval_count"], 1);
}

#[test]
fn a_client_leaving_during_a_stall_is_counted_as_a_disconnect_at_once() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("before"),
        StreamStep::Stall(Duration::from_secs(60)),
        StreamStep::piece("never"),
    ]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    let first = response.chunk().unwrap().unwrap();
    // The count follows the write the client has just read from.
    let bytes_before = ollama.wait_streamed_bytes(first.len() as u64, WAIT);
    assert_eq!(bytes_before, first.len() as u64);
    drop(response);
    let left_at = Instant::now();
    assert_eq!(ollama.wait_disconnects(1, WAIT), 1);
    assert!(left_at.elapsed() < Duration::from_secs(2));
    assert_eq!(ollama.outcomes(), [ChatOutcome::ClientClosed]);
    assert_eq!(
        ollama.streamed_bytes(),
        bytes_before,
        "nothing written after the client left"
    );
}

#[test]
fn a_client_leaving_during_the_delay_before_the_head_is_a_disconnect() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::reply(&["x"]).after(Duration::from_secs(60)));
    ollama.push_chat(ChatBehaviour::Hang(Duration::from_secs(60)));
    for expected in 1..=2 {
        let tcp = send(
            &ollama,
            &request_bytes(
                "POST",
                "/api/chat",
                chat_body(DEFAULT_MODEL).to_string().as_bytes(),
            ),
        );
        assert_eq!(ollama.wait_chat_requests(expected, WAIT).len(), expected);
        drop(tcp);
        assert_eq!(ollama.wait_disconnects(expected, WAIT), expected);
    }
    assert_eq!(
        ollama.outcomes(),
        [ChatOutcome::ClientClosed, ChatOutcome::ClientClosed]
    );
}

#[test]
fn a_flood_goes_only_as_fast_as_the_client_reads_and_totals_its_bytes() {
    const TOTAL: u64 = 48 * 1024 * 1024;
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::Flood {
            content_bytes: TOTAL,
            piece_bytes: 1000,
        },
        StreamStep::Done(DoneLine::stop(1, 2)),
    ]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    let mut content: u64 = 0;
    let mut lines: u64 = 0;
    let mut done = None;
    let mut partial = Vec::new();
    let mut read_lines = |chunk: &[u8], content: &mut u64, done: &mut Option<Value>| {
        partial.extend_from_slice(chunk);
        while let Some(end) = partial.iter().position(|&b| b == b'\n') {
            let line: Value = serde_json::from_slice(&partial[..end]).unwrap();
            partial.drain(..=end);
            lines += 1;
            if line["done"] == true {
                *done = Some(line);
            } else {
                *content += line["message"]["content"].as_str().unwrap().len() as u64;
            }
        }
    };
    // Read a little, then stop reading: the writer must stall.
    while content < 1024 * 1024 {
        let chunk = response.chunk().unwrap().unwrap();
        assert!(chunk.len() <= 64 * 1024 + 1100);
        read_lines(&chunk, &mut content, &mut done);
    }
    let mut stalled = ollama.streamed_bytes();
    loop {
        thread::sleep(Duration::from_millis(300));
        let now = ollama.streamed_bytes();
        if now == stalled {
            break;
        }
        stalled = now;
    }
    assert!(
        stalled < TOTAL / 2,
        "the writer ran ahead of the reader: {stalled} of {TOTAL}"
    );
    // Resume: everything arrives, in order, and then the done line.
    while let Some(chunk) = response.chunk().unwrap() {
        read_lines(&chunk, &mut content, &mut done);
    }
    assert_eq!(content, TOTAL);
    assert_eq!(lines, TOTAL.div_ceil(1000) + 1);
    assert_eq!(done.unwrap()["eval_count"], 2);
    assert!(ollama.streamed_bytes() > TOTAL);
    assert_eq!(ollama.wait_outcomes(1, WAIT), [ChatOutcome::Answered]);
}

#[test]
fn a_client_leaving_a_backpressured_flood_is_a_disconnect() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![StreamStep::Flood {
        content_bytes: 1 << 40,
        piece_bytes: 4096,
    }]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    assert!(response.chunk().unwrap().is_some());
    ollama.wait_streamed_bytes(1024 * 1024, WAIT);
    drop(response);
    assert_eq!(ollama.wait_disconnects(1, WAIT), 1);
    assert_eq!(ollama.outcomes(), [ChatOutcome::ClientClosed]);
}

#[test]
fn a_huge_line_is_one_json_line_of_the_given_content_length() {
    const CONTENT: u64 = 3 * 1024 * 1024 + 17;
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::HugeLine(CONTENT),
        StreamStep::Done(DoneLine::stop(1, 1)),
    ]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    let chunks = response.chunks().unwrap();
    assert!(chunks.len() > 40, "sent in many chunks");
    assert!(chunks.iter().all(|chunk| chunk.len() <= 64 * 1024));
    let body = chunks.concat();
    let mut lines = body.split(|&b| b == b'\n').filter(|line| !line.is_empty());
    let huge: Value = serde_json::from_slice(lines.next().unwrap()).unwrap();
    let content = huge["message"]["content"].as_str().unwrap();
    assert_eq!(content.len() as u64, CONTENT);
    assert!(content.starts_with("abcdefghijklmnopqrstuvwxyzabc"));
    assert_eq!(huge["done"], false);
    let done: Value = serde_json::from_slice(lines.next().unwrap()).unwrap();
    assert_eq!(done["done"], true);
    assert!(lines.next().is_none());
}

#[test]
fn unknown_paths_are_404_and_wrong_methods_405() {
    let ollama = start(OllamaOptions::new());
    let mut unknown = get(&ollama, "/api/generate");
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.body(), b"404 page not found");
    let chat_get = get(&ollama, "/api/chat");
    assert_eq!(chat_get.status, 405);
    assert_eq!(chat_get.header("allow"), Some("POST"));
    let tags_post =
        read_response(send(&ollama, &request_bytes("POST", "/api/tags", b"{}"))).unwrap();
    assert_eq!(tags_post.status, 405);
    assert_eq!(tags_post.header("allow"), Some("GET"));
    let mut root = get(&ollama, "/");
    assert_eq!(root.status, 200);
    assert_eq!(root.body(), b"Ollama is running");
    // A query does not change the route.
    assert_eq!(get(&ollama, "/api/tags?x=1").status, 200);
    assert!(ollama.requests().is_empty());
    assert_eq!(ollama.tags_requests(), 1);
}

#[test]
fn invalid_chat_bodies_are_refused_400_recorded_and_consume_no_behaviour() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Status(500, "scripted".to_owned()));
    for body in [
        b"not json".to_vec(),
        b"[]".to_vec(),
        json!({"messages": []}).to_string().into_bytes(),
        json!({"model": DEFAULT_MODEL, "messages": [{"role": "user"}]})
            .to_string()
            .into_bytes(),
        json!({"model": DEFAULT_MODEL, "stream": "true"})
            .to_string()
            .into_bytes(),
    ] {
        let mut response =
            read_response(send(&ollama, &request_bytes("POST", "/api/chat", &body))).unwrap();
        assert_eq!(response.status, 400, "{}", String::from_utf8_lossy(&body));
        assert!(response.json()["error"].is_string());
    }
    assert_eq!(post_chat(&ollama, &chat_body(DEFAULT_MODEL)).status, 500);
    let recorded = ollama.requests();
    assert_eq!(recorded.len(), 6);
    assert_eq!(recorded[0].json, None);
    assert_eq!(recorded[0].body, b"not json");
}

#[test]
fn request_reads_are_bounded_and_chunked_bodies_are_read() {
    let ollama = start(OllamaOptions::new());
    let huge_head = format!(
        "GET /api/tags HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let mut tcp = TcpStream::connect(ollama.local_addr()).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    // The server may answer before taking the whole head.
    let _ = tcp.write_all(huge_head.as_bytes());
    assert_eq!(read_response(tcp).unwrap().status, 431);

    let too_long = "POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 16777217\r\n\r\n";
    assert_eq!(
        read_response(send(&ollama, too_long.as_bytes()))
            .unwrap()
            .status,
        413
    );

    // A large but allowed body, sent chunked.
    let mut body = chat_body(DEFAULT_MODEL);
    body["messages"][1]["content"] = Value::String("y".repeat(2 * 1024 * 1024));
    let text = body.to_string();
    let mut request =
        b"POST /api/chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in text.as_bytes().chunks(100_000) {
        request.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        request.extend_from_slice(piece);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let mut response = read_response(send(&ollama, &request)).unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(stream_lines(&mut response).len(), 3);
    assert_eq!(ollama.requests()[0].json.as_ref(), Some(&body));
    assert_eq!(
        ollama.requests().len(),
        1,
        "refused requests are not recorded"
    );
}

#[test]
fn dropping_the_emulator_ends_a_stalled_stream() {
    let ollama = start(OllamaOptions::new());
    ollama.push_chat(ChatBehaviour::Stream(vec![
        StreamStep::piece("x"),
        StreamStep::Stall(Duration::from_secs(60)),
    ]));
    let mut response = post_chat(&ollama, &chat_body(DEFAULT_MODEL));
    assert!(response.chunk().unwrap().is_some());
    let dropped_at = Instant::now();
    drop(ollama);
    assert!(response.chunk().is_err(), "the body never ends");
    assert!(dropped_at.elapsed() < Duration::from_secs(3));
}
