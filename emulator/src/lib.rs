//! A platform emulator for `autogpt-shim`: the platform's side of the
//! local-executor wire protocol (`PROTOCOL.md`), as a real WebSocket server
//! over TLS on 127.0.0.1, for integration tests and for people trying a shim
//! by hand.
//!
//! The emulator is a test oracle. It is written from the specification
//! alone and must never depend on the `autogpt-shim` crate or reuse its
//! codec: it speaks JSON through [`serde_json::Value`] and the small functions
//! in [`wire`], so a misreading of the specification in the shim cannot
//! agree with itself here. It is synchronous (plain threads, no async
//! runtime), like the shim.
//!
//! ```no_run
//! use std::time::Duration;
//! use autogpt_shim_emulator::{Emulator, EmulatorOptions, HelloAck};
//! use serde_json::json;
//!
//! let emulator = Emulator::start(EmulatorOptions::new())?;
//! println!("{} {:?} {:?}", emulator.ws_url(), emulator.ca_file(), emulator.spki_sha256());
//! // … start a shim against it, then:
//! let conn = emulator.accept(Duration::from_secs(30)).expect("a shim connected");
//! conn.expect_hello(Duration::from_secs(10));
//! conn.send_hello_ack(&HelloAck::new())?;
//! let reply = conn.call("FILE_STAT", json!({"path": "/tmp", "follow_symlinks": true}), Duration::from_secs(10))?;
//! assert_eq!(reply["type"], "FILE_STAT_RESPONSE");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! The emulator is as strict as the platform: it validates the HELLO with the
//! platform's limits and closes with its codes (4400 invalid, 4408 late, 4426
//! another protocol major), and it treats any shim frame the platform's
//! relay could not correlate — an answer to no outstanding request, an
//! answer of the wrong type, a shim-sent `PING`, a `STATUS` without an id,
//! an answer later than the `HELLO_ACK`'s `command_timeout_seconds` —
//! as fatal: it closes with 1008 and the test fails when its [`Conn`] is
//! dropped (or, for a connection the test never accepted, when the
//! [`Emulator`] is), unless the test said it expects that ([`strict`]
//! lists the rules). It can also expire a token with 4401 ([`Conn::expire_token`]) and
//! resend the reads a lost connection left unanswered
//! ([`Conn::resend_unanswered_reads`]).
//!
//! Modules, in the order a connection meets them: `server` (listening,
//! TLS, HTTP upgrade, per-attempt behaviours), `transport` (the byte
//! stream), [`conn`] (one WebSocket: frames in and out), [`hello`] (the
//! handshake), [`strict`] (the platform relay's rules), [`wire`] (envelopes
//! and identifiers), [`script`] (the chat the command-line emulator runs),
//! [`demo`] (the whole machine-control chat of its `--demo`). Beside them, [`oauth`] plays the
//! platform's OAuth endpoints — authorize, token and revoke — on the same
//! port (or alone, over plain HTTP, as [`OAuthEmulator`]), [`Browser`]
//! plays the user's browser: the authorize redirect, then the shim's
//! callback listener, and [`ollama`] plays the local LLM backend (Ollama's
//! `/api/tags` and streamed `/api/chat`) as [`OllamaEmulator`].

mod browser;
pub mod conn;
pub mod demo;
pub mod hello;
mod http;
mod listener;
pub mod oauth;
pub mod ollama;
pub mod script;
mod server;
pub mod strict;
mod tls;
mod transport;
pub mod wire;

pub use conn::{Conn, Ending, RawFrame, RawKind, RawMessage};
pub use hello::{ConnKind, HelloAck, HelloError, check_hello, hello_problems};
pub use oauth::{
    Browser, Grants, OAuthEmulator, OAuthEndpoints, RecordedRequest, RevokeBehaviour,
    TokenBehaviour,
};
pub use ollama::{
    ChatBehaviour, ChatOutcome, ChatRequest, DoneLine, OllamaEmulator, OllamaOptions, StreamStep,
    TagsBehaviour,
};
pub use server::{AttemptOutcome, Emulator, EmulatorOptions, UpgradeAttempt, UpgradeBehaviour};
pub use strict::Violation;
pub use tls::TlsVersions;
