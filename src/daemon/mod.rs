//! The running daemon: what happens between a connected WebSocket and the
//! operations — the handshake's decisions and the limits on concurrent and
//! repeated work.
//!
//! The submodules here are sans-IO: they take frames, settings and
//! `Instant`s as arguments and return decisions, leaving sockets, clocks,
//! threads and audit writes to their callers.

pub mod handshake;
pub mod limits;
