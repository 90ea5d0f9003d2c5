//! The tamper-evident audit log (AUDIT.md).
//!
//! * `canonical` — the byte formats: canonical form, float `repr`, line spelling.
//! * `record` — one record, its HMAC and its line.
//! * `cap` — the 4 KiB cap of free-text fields, with length and hash.
//! * `verify` — the verifier of AUDIT.md §10.1, the tail-anchor and
//!   file-link checks, and the current file read consistently with its anchor.
//! * `writer` — the single writer thread: group commit, durable tickets,
//!   recovery, rotation, the tail anchor, session-bound handles.
//! * `anchor` — the sealed tail anchor.
//! * `files` — the current and rotated files in their strict order; the
//!   last complete line of a file; a record by `seq`, the newest `ts`.
//! * `tail` — following the current log across rotations (`audit tail`).
//! * `pretty` — a record re-indented in on-disk order (`audit show`), and
//!   a record line made safe for a terminal (`audit tail --json`).
//! * `view` — the one-line summary of a record, local times, the record
//!   filters and the known operation names (`audit tail`, `audit show`).
//! * `export` — the signed ZIP bundle (`audit export`).
//!
//! This module never logs or prints a record's secrets (there are none by
//! construction: callers put only the fields of AUDIT.md §3 into details)
//! and never prints the key.

pub mod anchor;
pub mod canonical;
pub mod cap;
pub mod export;
pub mod files;
pub mod pretty;
pub mod record;
pub mod tail;
pub mod verify;
pub mod view;
pub mod writer;

pub use record::{AuditKey, Details, Outcome, Record, Sealed};
pub use verify::{Violation, ViolationKind, verify_bytes};
pub use writer::{
    AuditError, AuditLog, Durable, Entry, RotateReason, SessionAudit, Ticket, WriterOptions,
    WriterThread,
};
