//! The running daemon: connections, dispatch of their frames to operation
//! handlers, the handshake's decisions, limits, and the audit records of it
//! all.
//!
//! Data flow: `handshake` builds the HELLO and judges the HELLO_ACK; a
//! transport connection is bridged by `link` and served by `session`
//! (reader, writer, admission, capability gate), which hands admitted
//! requests to the `pool`'s worker threads; a worker runs the operation
//! through `handlers` under the machine-wide limits of `capacity`, and
//! the record is made durable before the response is queued (by the audit
//! writer, right after its sync, unless the operation has a sync of its
//! own for the worker to finish). `handshake`
//! and `capacity` are sans-IO: they take frames, settings and `Instant`s
//! and return decisions.

pub(crate) mod approvals;
pub(crate) mod backlog;
pub(crate) mod capacity;
pub(crate) mod features;
pub(crate) mod handlers;
pub(crate) mod handshake;
mod link;
mod outbox;
pub(crate) mod pool;
pub(crate) mod refusal;
pub(crate) mod runtime;
pub(crate) mod runtime_file;
pub(crate) mod session;

/// The machine-wide command and screenshot limits and the machine work pool.
pub use capacity::{MachineLimitSettings, MachineLimits, MachineWorkPool};
/// The optional capabilities, checked at each HELLO.
pub use features::{ConnectionLlm, Found, Optional};
/// The command gate, and how an operation's failure and a command's outcome
/// become a wire code and an audit result.
pub use handlers::{CommandGate, OperationError, command_audit_result, rejection_code};
/// What a connection is, what it advertises, and the limits it negotiated.
pub use handshake::{ConnectionKind, Gates, Identity, Limits, advertised_capabilities};
/// A transport connection's two halves as the session reads and writes them.
pub use link::{LinkIn, LinkOut};
/// The worker threads that run admitted requests.
pub use pool::{WORKERS, WorkerThreads};
/// What a runtime needs from its tokens and its plane.
pub use runtime::{Credentials, Plane, Renewal};
/// One served connection: its setup, its two ends, and how it ended.
pub use session::{
    AuditSink, CommandRules, ControlRequests, DataPlane, DataPlaneFactory, End, Ended, Inbound,
    Outbound, Serving, Setup, serve,
};
