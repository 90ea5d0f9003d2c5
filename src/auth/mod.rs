//! Authentication with the platform (AUTH.md): the OAuth Authorization
//! Code flow with PKCE that `auth` runs, the refresh a connection performs
//! after an HTTP 401, and the revocation `revoke` performs.
//!
//! * [`pkce`] — verifier, challenge and state.
//! * [`form`] — form encoding of bodies and the authorize URL; query
//!   decoding of the callback.
//! * [`callback`] — the loopback listener the browser returns to.
//! * [`oauth`] — the authorize URL and the token and revoke requests.
//! * [`browser`] — asking the desktop to open the authorize URL.
//! * [`paste`] — the redirect address (or code) a user pastes when the
//!   browser runs on another machine.
//! * [`refresh`] — the connections' tokens and the forced refresh after a
//!   401.
//!
//! No token, authorization code, verifier, state or passphrase is ever
//! printed, logged, written to the audit log, put in an argument vector or
//! in a child's environment; they are held in zeroizing buffers.

pub mod browser;
pub mod callback;
pub mod form;
pub mod oauth;
pub mod paste;
pub mod pkce;
pub mod refresh;
