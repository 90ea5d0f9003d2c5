//! Machine control mode (CONTROL.md): the control connection's browsing,
//! root grants, session bindings and per-chat child runtimes.
//!
//! * [`plane`] — the control requests (browse, ATTACH, ACTIVATE, RESTORE,
//!   DETACH), serialised per session, and the idle reaper.
//! * [`children`] — the per-chat child runtimes, at most eight.
//! * [`bindings`] — session bindings and persisted grant revisions.
//! * [`browse`] — browses, opaque references and cursors, one listing page
//!   at a time.
//! * [`grant`] — the fingerprint and root-grant token, byte for byte (pure).
//! * [`folder`] — which folders may be chosen, and their live identity.
//! * [`names`] — which directory names may be shown, and their sort order.
//!
//! Nothing here widens what a child runtime may touch: a child's root comes
//! only from a folder the user picked through a reference the shim minted,
//! or from a grant the shim signed and re-verified against the live folder.

pub mod bindings;
pub mod browse;
pub mod children;
pub mod folder;
pub mod grant;
pub mod names;
pub mod plane;
mod unicode_tables;
