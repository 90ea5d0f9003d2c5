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

mod anchor;
pub(crate) mod canonical;
pub(crate) mod cap;
pub(crate) mod export;
pub(crate) mod files;
pub(crate) mod pretty;
pub(crate) mod record;
pub(crate) mod tail;
pub(crate) mod verify;
pub(crate) mod view;
pub(crate) mod writer;

/// The sealed tail anchor, parsed and checked against the key.
pub use anchor::Anchor;
/// Python's `repr` of a float, the spelling the canonical form uses.
pub use canonical::repr_f64;
/// The signed ZIP bundle of `audit export`, its manifest and its CRC-32.
pub use export::{
    Crc32, ExportOptions, ManifestEntry, ZipWriter, export, export_with_progress, manifest_json,
};
/// One record, its key and its sealed line; lowercase hex as records spell it.
pub use record::{AuditKey, Details, Outcome, Record, Sealed, hex};
/// The verifier's verdict on a log's bytes.
pub use verify::{Violation, ViolationKind, verify_bytes};
/// The record filter of `audit tail`.
pub use view::Filter;
/// The writer thread and the handles that append through it.
pub use writer::{
    AuditError, AuditLog, Durable, Entry, Location, RotateReason, SessionAudit, Then, Ticket,
    WriterOptions, WriterThread, inspect_location,
};
