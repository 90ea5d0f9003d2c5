//! The running daemon: connections, dispatch of their frames to operation
//! handlers, limits, and the audit records of it all.
//!
//! Data flow: a transport connection is served by [`session`] (reader,
//! writer, admission, capability gate), which hands admitted requests to
//! the [`pool`]; a worker runs the operation through [`handlers`] and the
//! record is made durable before the response is queued.

pub mod handlers;
pub mod link;
pub mod pool;
pub mod session;
