//! Machine control mode (CONTROL.md): the control connection's browsing,
//! root grants, session bindings and per-chat child runtimes.
//!
//! * `plane` — the control requests (browse, ATTACH, ACTIVATE, RESTORE,
//!   DETACH), serialised per session, and the idle reaper.
//! * `children` — the per-chat child runtimes, at most eight.
//! * `bindings` — session bindings and persisted grant revisions.
//! * `browse` — browses, opaque references and cursors, one listing page
//!   at a time.
//! * `grant` — the fingerprint and root-grant token, byte for byte (pure).
//! * `folder` — which folders may be chosen, and their live identity.
//! * `names` — which directory names may be shown, and their sort order.
//!
//! Nothing here widens what a child runtime may touch: a child's root comes
//! only from a folder the user picked through a reference the shim minted,
//! or from a grant the shim signed and re-verified against the live folder.

pub(crate) mod bindings;
pub(crate) mod browse;
pub(crate) mod children;
mod folder;
pub(crate) mod grant;
mod names;
pub(crate) mod plane;
mod unicode_tables;

/// Session bindings, their cap, and the persisted grant revisions.
pub use bindings::{
    BINDING_CAP, Binding, Bindings, REVISION_CAP, REVISIONS_FILE, RevisionError, Revisions,
    StoreFull,
};
/// Browses with their references and cursors, and the messages of their refusals.
pub use browse::{
    BROWSE_LIFETIME, BrowseError, Browser, CURSOR_INVALID, NOT_ACCESSIBLE, REFERENCE_INVALID,
    RootSources,
};
/// The per-chat child runtimes and the template each is started from.
pub use children::{ChildTemplate, Children};
/// Which folders may be chosen, and the check of a chosen folder's live identity.
pub use folder::{FolderError, canonical_accessible, verify_folder};
/// The root-grant token: its claims, key and fingerprint, signed and verified.
pub use grant::{
    Accepted, Claims, DirIdentity, GrantError, GrantKey, claims_json, fingerprint, sign, verify,
};
/// The control plane that serves the control connection's requests.
pub use plane::{ControlPlane, ControlSettings};
