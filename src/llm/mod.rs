//! The local LLM (CAPABILITIES.md §5): which models the user's Ollama has,
//! for `HELLO.local_llm_models`, and `LOCAL_LLM_COMPLETION` — one streaming
//! chat request at a time, machine-wide, its pieces forwarded as chunks.
//!
//! This module owns the HTTP calls to Ollama, the NDJSON stream and the
//! order of §5.2's checks. It says what happened ([`LlmError`]); the
//! data-plane handlers choose the wire codes. Prompt and response text are
//! never logged or recorded: the audit details count characters only.
//!
//! Everything Ollama sends is untrusted and bounded: the model list, each
//! NDJSON line and the assembled response have byte limits, every read has
//! its own 60 s limit, and a completion whose connection ends is cancelled
//! by shutting its socket down.

mod stream;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::audit::Details;
use crate::protocol::{
    FinishReason, LocalLlmCompletion, LocalLlmCompletionChunk, LocalLlmCompletionResponse,
    TokenCounts,
};

pub use stream::{Done, Line, MAX_LINE_BYTES, parse_line};

/// The model list request's whole time (§5.1).
const TAGS_TIMEOUT: Duration = Duration::from_secs(2);
/// Connecting to Ollama, and each read of its answer (§5.2 step 4).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest `/api/tags` answer read.
const MAX_TAGS_BYTES: u64 = 4 * 1024 * 1024;
/// Models kept from the list, and the longest name kept: the list goes into
/// `HELLO`, which the platform takes only up to 64 KiB (a larger one is
/// refused with 4400, which ends the daemon after a few attempts): at most
/// about 13 KiB of names leaves room for the root and up to 64 devices.
const MAX_MODELS: usize = 64;
const MAX_MODEL_NAME_BYTES: usize = 200;
/// The largest assembled response: it travels in one frame.
pub const MAX_CONTENT_BYTES: usize = 8 * 1024 * 1024;
/// The longest error body of Ollama kept.
const MAX_ERROR_BODY_BYTES: u64 = 64 * 1024;
/// How often the watchdog looks at the completion.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// A failed completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LlmError {
    /// The local `enable_local_llm` switch is off.
    Disabled,
    /// The model is not in the list advertised at this connection's HELLO.
    NotAdvertised {
        requested: String,
        available: Vec<String>,
    },
    /// Another completion is running on this machine.
    Busy,
    /// Ollama answered 404: the model is not there.
    ModelNotAvailable { backend_error: String },
    /// Ollama failed, or could not be reached, or its answer was unusable.
    Failed { backend_error: String },
}

/// Where chunks go: the connection's writer, which waits while the
/// platform has not read what was sent before. A chunk that cannot be sent
/// is dropped (§5.2 framing: a failed chunk send is ignored); a connection
/// that ended cancels the completion instead.
pub trait ChunkSink {
    fn send(&mut self, chunk: LocalLlmCompletionChunk);
}

/// A handled completion: its reply and the `details` of its one record.
#[derive(Debug)]
pub struct Outcome {
    pub reply: Result<LocalLlmCompletionResponse, LlmError>,
    pub details: Details,
}

/// The local Ollama.
#[derive(Debug)]
pub struct LocalLlm {
    enabled: bool,
    base: String,
    /// Held by the one running completion (§5.2 step 3).
    busy: Mutex<()>,
}

impl LocalLlm {
    /// `ollama_url` without its trailing `/`.
    pub fn new(enabled: bool, ollama_url: &str) -> LocalLlm {
        LocalLlm {
            enabled,
            base: ollama_url.trim_end_matches('/').to_owned(),
            busy: Mutex::new(()),
        }
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    fn agent(&self, timeout: Option<Duration>) -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .timeout_global(timeout)
            .timeout_connect(Some(READ_TIMEOUT))
            .user_agent(concat!("autogpt-shim/", env!("CARGO_PKG_VERSION")))
            .build();
        config.into()
    }

    /// The installed models (§5.1): `GET /api/tags` within 2 s; any failure
    /// is an empty list.
    pub fn models(&self) -> Result<Vec<String>, String> {
        if !self.enabled {
            return Ok(Vec::new());
        }
        let agent = self.agent(Some(TAGS_TIMEOUT));
        let mut response = agent
            .get(format!("{}/api/tags", self.base))
            .call()
            .map_err(|e| e.to_string())?;
        if response.status().as_u16() != 200 {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_TAGS_BYTES)
            .read_to_vec()
            .map_err(|e| e.to_string())?;
        let value: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let models = value
            .get("models")
            .and_then(Value::as_array)
            .ok_or("the answer has no models list")?;
        Ok(models
            .iter()
            .filter_map(|m| m.as_object()?.get("name")?.as_str())
            .filter(|name| !name.is_empty() && name.len() <= MAX_MODEL_NAME_BYTES)
            .take(MAX_MODELS)
            .map(str::to_owned)
            .collect())
    }

    /// `LOCAL_LLM_COMPLETION` (§5.2): `advertised` is the connection's
    /// cached model list; `cancelled` turns true when the connection ends
    /// or the daemon stops.
    pub fn complete(
        &self,
        advertised: &[String],
        req: &LocalLlmCompletion,
        sink: &mut dyn ChunkSink,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Outcome {
        let started = Instant::now();
        let prompt_chars: usize = req.messages.iter().map(|m| m.content.chars().count()).sum();
        let details = |response_chars: usize, finish: Option<FinishReason>| {
            Details::new()
                .with("model", json!(req.model))
                .with("stream", json!(req.stream))
                .with("prompt_chars", json!(prompt_chars))
                .with("response_chars", json!(response_chars))
                .with("finish_reason", json!(finish.map(|f| f.as_str())))
        };
        let fail = |error: LlmError, response_chars: usize| Outcome {
            reply: Err(error),
            details: details(response_chars, None),
        };
        if !self.enabled {
            return fail(LlmError::Disabled, 0);
        }
        if !advertised.is_empty() && !advertised.contains(&req.model) {
            return fail(
                LlmError::NotAdvertised {
                    requested: req.model.clone(),
                    available: advertised.to_vec(),
                },
                0,
            );
        }
        let Ok(_running) = self.busy.try_lock() else {
            return fail(LlmError::Busy, 0);
        };
        let run = self.run(req, sink, cancelled);
        let response_chars = run.content.chars().count();
        match run.error {
            Some(error) => fail(error, response_chars),
            None => {
                let tokens = TokenCounts {
                    prompt: run.prompt_tokens,
                    completion: run.completion_tokens,
                    total: match (run.prompt_tokens, run.completion_tokens) {
                        (Some(p), Some(c)) => p.checked_add(c),
                        _ => None,
                    },
                };
                let duration = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
                let details = details(response_chars, Some(run.finish_reason))
                    .with("tokens_prompt", json!(tokens.prompt))
                    .with("tokens_completion", json!(tokens.completion))
                    .with("tokens_total", json!(tokens.total));
                Outcome {
                    reply: Ok(LocalLlmCompletionResponse {
                        content: run.content,
                        finish_reason: run.finish_reason,
                        tokens,
                        duration_seconds: duration,
                    }),
                    details,
                }
            }
        }
    }

    /// Step 4 onwards, under a watchdog for the per-read timeout and for
    /// cancellation.
    fn run(
        &self,
        req: &LocalLlmCompletion,
        sink: &mut dyn ChunkSink,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Run {
        let agent = self.agent(None);
        let watch = Watch::default();
        std::thread::scope(|scope| {
            let watchdog = scope.spawn(|| watch.guard(&agent, cancelled));
            let run = self.stream(&agent, &watch, req, sink, cancelled);
            watch.finished.store(true, Ordering::SeqCst);
            watchdog.thread().unpark();
            run
        })
    }

    /// The upstream call and its stream.
    fn stream(
        &self,
        agent: &ureq::Agent,
        watch: &Watch,
        req: &LocalLlmCompletion,
        sink: &mut dyn ChunkSink,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Run {
        let mut run = Run::default();
        let messages: Vec<Value> = req
            .messages
            .iter()
            .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
            .collect();
        let body = json!({
            "model": req.model,
            "messages": messages,
            "stream": true,
            "options": {
                "temperature": req.temperature,
                "top_p": req.top_p,
                "num_predict": req.max_tokens,
            },
        });
        watch.progress();
        let result = agent
            .post(format!("{}/api/chat", self.base))
            .header("Content-Type", "application/json")
            .send(body.to_string());
        let mut response = match result {
            Ok(response) => response,
            Err(e) => {
                run.error = Some(watch.failure(e.to_string()));
                return run;
            }
        };
        watch.progress();
        let status = response.status().as_u16();
        if status != 200 {
            let text = response
                .body_mut()
                .with_config()
                .limit(MAX_ERROR_BODY_BYTES)
                .read_to_vec()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            run.error = Some(match status {
                404 => LlmError::ModelNotAvailable {
                    backend_error: text,
                },
                _ if text.is_empty() => LlmError::Failed {
                    backend_error: format!("HTTP {status}"),
                },
                _ => LlmError::Failed {
                    backend_error: text,
                },
            });
            return run;
        }
        let mut reader = response.body_mut().as_reader();
        let mut lines = stream::Lines::default();
        loop {
            let line = match lines.next(&mut reader, &|| watch.progress()) {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    run.error = Some(watch.failure(e.to_string()));
                    return run;
                }
            };
            if cancelled() {
                run.error = Some(watch.failure("the completion was cancelled".into()));
                return run;
            }
            let Line::Object { delta, done } = parse_line(&line) else {
                continue;
            };
            if !delta.is_empty() {
                if run.content.len() + delta.len() > MAX_CONTENT_BYTES {
                    run.error = Some(LlmError::Failed {
                        backend_error: format!(
                            "the completion is longer than {MAX_CONTENT_BYTES} bytes"
                        ),
                    });
                    return run;
                }
                run.content.push_str(&delta);
                if req.stream {
                    watch.while_platform_reads(|| {
                        sink.send(LocalLlmCompletionChunk {
                            delta,
                            finish_reason: None,
                        });
                    });
                }
            }
            if let Some(done) = done {
                run.finish_reason = done.finish_reason;
                run.prompt_tokens = done.prompt_tokens;
                run.completion_tokens = done.completion_tokens;
                if req.stream {
                    sink.send(LocalLlmCompletionChunk {
                        delta: String::new(),
                        finish_reason: Some(done.finish_reason),
                    });
                }
                break;
            }
        }
        run
    }
}

/// What the stream produced.
#[derive(Debug)]
struct Run {
    content: String,
    finish_reason: FinishReason,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    error: Option<LlmError>,
}

impl Default for Run {
    fn default() -> Run {
        Run {
            content: String::new(),
            // A body that ends without a `done` object (§5.2 step 6).
            finish_reason: FinishReason::Stop,
            prompt_tokens: None,
            completion_tokens: None,
            error: None,
        }
    }
}

/// The completion's watchdog: shuts the upstream socket down when a read
/// has waited [`READ_TIMEOUT`] or the completion is cancelled, since a
/// blocked read cannot be interrupted otherwise.
#[derive(Debug, Default)]
struct Watch {
    last_progress: Mutex<Option<Instant>>,
    /// Set while a chunk waits for the platform to read: Ollama is not
    /// being read then, so its silence is not Ollama's.
    waiting_for_platform: AtomicBool,
    finished: AtomicBool,
    timed_out: AtomicBool,
    cancelled: AtomicBool,
}

impl Watch {
    /// Data arrived (or the request went out): the read clock restarts.
    fn progress(&self) {
        *self
            .last_progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
    }

    /// Runs `send` with the read clock stopped, and restarts it after.
    fn while_platform_reads(&self, send: impl FnOnce()) {
        self.waiting_for_platform.store(true, Ordering::SeqCst);
        send();
        self.progress();
        self.waiting_for_platform.store(false, Ordering::SeqCst);
    }

    fn idle_for(&self) -> Duration {
        self.last_progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Runs until the completion finishes; shuts `agent`'s sockets down on
    /// a timeout or a cancellation.
    fn guard(&self, agent: &ureq::Agent, cancelled: &(dyn Fn() -> bool + Sync)) {
        while !self.finished.load(Ordering::SeqCst) {
            if cancelled() {
                self.cancelled.store(true, Ordering::SeqCst);
                agent.clone().shutdown();
                return;
            }
            if !self.waiting_for_platform.load(Ordering::SeqCst) && self.idle_for() > READ_TIMEOUT {
                self.timed_out.store(true, Ordering::SeqCst);
                agent.clone().shutdown();
                return;
            }
            std::thread::park_timeout(WATCH_EVERY);
        }
    }

    /// The error of a failed call or read, named after its real cause when
    /// the watchdog ended it.
    fn failure(&self, error: String) -> LlmError {
        let backend_error = if self.timed_out.load(Ordering::SeqCst) {
            format!("no data from Ollama for {} s", READ_TIMEOUT.as_secs())
        } else if self.cancelled.load(Ordering::SeqCst) {
            "the completion was cancelled".to_owned()
        } else {
            error
        };
        LlmError::Failed { backend_error }
    }
}
