//! The client side of the connection to the platform (PROTOCOL.md §1):
//! WebSocket over TLS (or loopback plain text), opened outbound, blocking
//! I/O without an async runtime.
//!
//! [`url`] checks the URL a connection is opened to; [`der`] finds the
//! SubjectPublicKeyInfo that a certificate pin is computed over.

pub mod der;
pub mod url;

pub use url::{Host, UrlError, WsUrl};
