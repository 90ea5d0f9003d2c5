//! Payloads of the control connection: directory browsing and session
//! binding (CONTROL.md §4–§11).
//!
//! The reference-pair and cursor rules of `DIRECTORY_LIST_REQUEST` are schema
//! rules; their violation is reported as [`FieldProblem::Constraint`] on the
//! field named `browse_id`/`directory_ref`/`cursor`, and the decoder answers it
//! with `DIRECTORY_REFERENCE_INVALID` (PROTOCOL.md §2.4).
//!
//! [`FieldProblem::Constraint`]: crate::protocol::fields::FieldProblem::Constraint

use std::num::NonZeroU64;

use serde::Serialize;

use super::session::session_id;
use crate::protocol::fields::{FieldError, FieldResult, Fields};
use crate::protocol::ids::SessionId;

/// Length bounds of browse tokens on the wire (1–256 chars).
const TOKEN_MAX: usize = 256;
/// Length bound of a root grant (1–131072 chars).
const GRANT_MAX: usize = 131_072;
/// Length bound of a canonical path (1–32767 chars).
const PATH_MAX: usize = 32_767;

/// `DIRECTORY_LIST_REQUEST` (CONTROL.md §4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirectoryListRequest {
    pub browse_id: Option<String>,
    pub directory_ref: Option<String>,
    pub cursor: Option<String>,
}

/// Marks the field errors that break the reference-pair / cursor rule, which
/// are answered with `DIRECTORY_REFERENCE_INVALID` instead of `INTERNAL_ERROR`.
pub(crate) const PAIR_RULE: &str = "must be given together with browse_id and directory_ref (both null or both set; a cursor needs both)";

impl DirectoryListRequest {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            browse_id: f.opt_string_len("browse_id", 1, TOKEN_MAX)?,
            directory_ref: f.opt_string_len("directory_ref", 1, TOKEN_MAX)?,
            cursor: f.opt_string_len("cursor", 1, TOKEN_MAX)?,
        };
        f.finish()?;
        if v.browse_id.is_some() != v.directory_ref.is_some() {
            let field = if v.browse_id.is_some() {
                "directory_ref"
            } else {
                "browse_id"
            };
            return Err(FieldError::constraint(field, PAIR_RULE));
        }
        if v.cursor.is_some() && v.browse_id.is_none() {
            return Err(FieldError::constraint("cursor", PAIR_RULE));
        }
        Ok(v)
    }
}

/// One directory in a listing: `{directory_ref, name, path}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirectoryEntry {
    pub directory_ref: String,
    /// Last component of the canonical path, 1–1024 chars.
    pub name: String,
    /// Canonical absolute path, 1–32767 chars.
    pub path: String,
}

impl DirectoryEntry {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            directory_ref: f.string_len("directory_ref", 1, TOKEN_MAX)?,
            name: f.string_len("name", 1, 1024)?,
            path: f.string_len("path", 1, PATH_MAX)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `DIRECTORY_LIST_RESPONSE` (CONTROL.md §4.2).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectoryListResponse {
    pub browse_id: String,
    /// `None` for the virtual root list.
    pub current: Option<DirectoryEntry>,
    pub parent_ref: Option<String>,
    /// At most 200 entries.
    pub entries: Vec<DirectoryEntry>,
    pub next_cursor: Option<String>,
    pub truncated: bool,
    /// Unix time at which the whole browse expires.
    pub expires_at: f64,
}

/// Most entries one listing page carries.
pub const DIRECTORY_PAGE_SIZE: usize = 200;

impl DirectoryListResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            browse_id: f.string_len("browse_id", 1, TOKEN_MAX)?,
            current: f.opt_object("current", DirectoryEntry::decode)?,
            parent_ref: f.opt_string_len("parent_ref", 1, TOKEN_MAX)?,
            entries: f.objects("entries", DirectoryEntry::decode)?,
            next_cursor: f.opt_string_len("next_cursor", 1, TOKEN_MAX)?,
            truncated: f.bool("truncated")?,
            expires_at: f.number("expires_at")?,
        };
        f.finish()?;
        if v.entries.len() > DIRECTORY_PAGE_SIZE {
            return Err(FieldError::constraint(
                "entries",
                "must hold at most 200 entries",
            ));
        }
        Ok(v)
    }
}

/// `ATTACH_SESSION` (CONTROL.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachSession {
    pub session_id: SessionId,
    pub browse_id: String,
    pub directory_ref: String,
    /// Carried for the platform's own race detection; never compared.
    pub expected_connection_id: Option<String>,
}

impl AttachSession {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: session_id(&mut f, "session_id")?,
            browse_id: f.string_len("browse_id", 1, TOKEN_MAX)?,
            directory_ref: f.string_len("directory_ref", 1, TOKEN_MAX)?,
            expected_connection_id: f.opt_string_len("expected_connection_id", 1, TOKEN_MAX)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// The binding fields shared by `SESSION_ATTACHED`, `SESSION_ACTIVATED` and
/// `SESSION_RESTORED`.
fn fingerprint(f: &mut Fields) -> FieldResult<String> {
    let text = f.string("fingerprint")?;
    let ok = text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !ok {
        return Err(FieldError::constraint(
            "fingerprint",
            "must be 64 lowercase hex digits",
        ));
    }
    Ok(text)
}

/// `SESSION_ATTACHED` (CONTROL.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionAttached {
    pub session_id: SessionId,
    pub allowed_root: String,
    pub fingerprint: String,
    pub revision: NonZeroU64,
    pub root_grant: String,
}

impl SessionAttached {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: session_id(&mut f, "session_id")?,
            allowed_root: f.string_len("allowed_root", 1, PATH_MAX)?,
            fingerprint: fingerprint(&mut f)?,
            revision: f.positive("revision")?,
            root_grant: f.string_len("root_grant", 1, GRANT_MAX)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `ACTIVATE_SESSION` (CONTROL.md §8). `revision: 0` is a schema violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActivateSession {
    pub session_id: SessionId,
    pub revision: NonZeroU64,
}

impl ActivateSession {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: session_id(&mut f, "session_id")?,
            revision: f.positive("revision")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `SESSION_ACTIVATED` (CONTROL.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionActivated {
    pub session_id: SessionId,
    pub allowed_root: String,
    pub fingerprint: String,
    pub revision: NonZeroU64,
}

impl SessionActivated {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: session_id(&mut f, "session_id")?,
            allowed_root: f.string_len("allowed_root", 1, PATH_MAX)?,
            fingerprint: fingerprint(&mut f)?,
            revision: f.positive("revision")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `RESTORE_SESSION` (CONTROL.md §9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreSession {
    pub session_id: SessionId,
    pub root_grant: String,
}

impl RestoreSession {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: session_id(&mut f, "session_id")?,
            root_grant: f.string_len("root_grant", 1, GRANT_MAX)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `SESSION_RESTORED` (CONTROL.md §9): the binding plus the grant as supplied.
pub type SessionRestored = SessionAttached;

/// `DETACH_SESSION` (CONTROL.md §11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DetachSession {
    pub session_id: SessionId,
}

impl DetachSession {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: session_id(&mut f, "session_id")?,
        };
        f.finish()?;
        Ok(v)
    }
}
