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
//! * [`hardware`] — the hardware dependency checks and the serial, USB and
//!   GPIO devices of `HELLO.hardware_devices`, read from sysfs and `/dev`.
//! * [`daemon`] — the running daemon: the handshake's decisions (what to
//!   advertise, whether a `HELLO_ACK` is acceptable, the effective limits),
//!   the served connection (reader, writer, admission, capability gate,
//!   worker pool), the operation handlers and the machine-wide limits.
//! * [`audit`] — the HMAC-chained audit log: records, canonical form,
//!   verification.
//! * [`secrets`] — the token and audit-key store: OS keychain or `tokens.enc`.
//! * [`timefmt`] — civil dates, the audit log's time stamps and the local
//!   UTC offset from the TZif database, without libc.
//! * `text` — untrusted text made safe to show on one line.
//! * [`cli`] — argument parsing and command dispatch for the binary.
//! * `sys` — the few C library calls std and rustix lack (blocking and
//!   waiting for termination signals, the commands' pre-exec hook, the GPIO
//!   chip-information ioctl).
//!
//! The public surface exists for the binary, the integration tests, the
//! benches, the example and the fuzz targets, and is not a stable API. The
//! modules beneath the top level are private to the crate, save three small
//! codecs (`files::base64`, `files::mime`, `secrets::container`); what those
//! callers need is re-exported from the top-level modules.
//!
//! `unsafe` appears only in the small `sys` module, where the operating
//! system forces it, with a `SAFETY` comment per block. Every other module
//! forbids it below, for its whole tree, so no inner attribute can allow it
//! again; the crate-wide `deny` leaves the one `allow` in `sys` possible.
#![deny(unsafe_code)]

#[forbid(unsafe_code)]
pub mod audit;
#[forbid(unsafe_code)]
pub mod auth;
#[forbid(unsafe_code)]
pub mod cli;
#[forbid(unsafe_code)]
pub mod config;
#[forbid(unsafe_code)]
pub mod control;
#[forbid(unsafe_code)]
pub mod daemon;
#[forbid(unsafe_code)]
pub mod desktop;
#[forbid(unsafe_code)]
pub mod exec;
#[forbid(unsafe_code)]
pub mod exit;
#[forbid(unsafe_code)]
pub mod files;
/// Hand-offs between threads that park without spinning.
#[forbid(unsafe_code)]
pub(crate) mod handoff;
#[forbid(unsafe_code)]
pub mod hardware;
#[forbid(unsafe_code)]
pub mod jail;
#[forbid(unsafe_code)]
pub mod llm;
#[forbid(unsafe_code)]
pub mod log;
#[forbid(unsafe_code)]
pub mod protocol;
#[forbid(unsafe_code)]
pub mod secrets;
pub(crate) mod sys;
/// The executable's allocator (huge pages behind large blocks).
pub use sys::LargePages;
#[forbid(unsafe_code)]
pub(crate) mod text;
#[forbid(unsafe_code)]
pub mod timefmt;
#[forbid(unsafe_code)]
pub mod transport;
