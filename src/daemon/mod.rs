//! The running daemon: connections, dispatch of their frames to operation
//! handlers, the handshake's decisions, limits, and the audit records of it
//! all.
//!
//! Data flow: [`handshake`] builds the HELLO and judges the HELLO_ACK; a
//! transport connection is bridged by [`link`] and served by [`session`]
//! (reader, writer, admission, capability gate), which hands admitted
//! requests to the [`pool`]'s worker threads; a worker runs the operation
//! through [`handlers`] under the machine-wide limits of [`capacity`], and
//! the record is made durable before the response is queued. [`handshake`]
//! and [`capacity`] are sans-IO: they take frames, settings and `Instant`s
//! and return decisions.

pub mod backlog;
pub mod capacity;
pub mod handlers;
pub mod handshake;
pub mod link;
pub mod pool;
pub mod refusal;
pub mod runtime;
pub mod session;
