//! `autogpt-shim`: the local executor of the AutoGPT platform.
//!
//! The module tree follows a request through the daemon:
//!
//! * [`transport`] — the outbound WebSocket: URL, proxy, TLS with trust
//!   anchors and pins, upgrade outcome, a socket shared by a reader and a
//!   writer thread, keepalive. Blocking I/O, no async runtime.
//! * [`protocol`] — sans-IO wire codec: bytes in, typed messages out (and back),
//!   version negotiation, close-code classification, backpressure arithmetic.
//!   It never touches a socket, a file or a clock of its own.
//! * [`config`] — the effective configuration (flags > `config.toml` >
//!   environment > defaults), per-OS paths, platform facts, endpoint URLs.
//! * [`jail`] — the path jail: the Python-compatible accept/reject decision
//!   and fd-based enforcement beneath a pinned root directory.
//! * [`files`] — the `FILE_*` operations on descriptors the jail hands out.
//! * [`exec`] — `EXECUTE_COMMAND`: environment, shell, jailed working
//!   directory, output budget and the timeout's termination sequence.
//! * [`daemon`] — the running daemon: the handshake's decisions (what to
//!   advertise, whether a `HELLO_ACK` is acceptable, the effective limits),
//!   the served connection (reader, writer, admission, capability gate,
//!   worker pool), the operation handlers and the machine-wide limits.
//! * [`audit`] — the HMAC-chained audit log: records, canonical form,
//!   verification.
//! * [`secrets`] — the token and audit-key store: OS keychain or `tokens.enc`.
//! * [`timefmt`] — civil dates, the audit log's time stamps and the local
//!   UTC offset from the TZif database, without libc.
//! * [`text`] — untrusted text made safe to show on one line.
//! * [`cli`] — argument parsing and command dispatch for the binary.
//! * [`sys`] — the few C library calls std and rustix lack (blocking and
//!   waiting for termination signals, the commands' pre-exec hook).
//!
//! Nothing in this crate uses `unsafe`; where the operating system forces it,
//! it is confined to the small [`sys`] module with a `SAFETY` comment per
//! block.
#![deny(unsafe_code)]

pub mod audit;
pub mod auth;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod exec;
pub mod exit;
pub mod files;
pub mod jail;
pub mod log;
pub mod protocol;
pub mod secrets;
pub mod sys;
pub mod text;
pub mod timefmt;
pub mod transport;
