//! Authentication with the platform (AUTH.md): the OAuth Authorization
//! Code flow with PKCE that `auth` runs, the refresh a connection performs
//! after an HTTP 401, and the revocation `revoke` performs.
//!
//! * `pkce` — verifier, challenge and state.
//! * `form` — form encoding of bodies and the authorize URL; query
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

pub(crate) mod browser;
pub(crate) mod callback;
mod form;
pub(crate) mod oauth;
pub(crate) mod paste;
pub(crate) mod pkce;
pub(crate) mod refresh;

/// The loopback listener the browser returns to, and what it received.
pub use callback::{Callback, Listener};
/// The request bodies and authorize URL, and the cap on a response's size.
pub use oauth::{MAX_RESPONSE, authorize_url, exchange_body, refresh_body, revoke_body};
/// The PKCE verifier and state, and the S256 challenge of a verifier.
pub use pkce::{Pkce, challenge};
/// A connection's stored tokens and the endpoint that refreshes them.
pub use refresh::{StoredCredentials, TokenEndpoint};
