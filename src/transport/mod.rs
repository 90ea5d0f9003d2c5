//! The client side of the connection to the platform (PROTOCOL.md §1):
//! WebSocket over TLS (or loopback plain text), opened outbound, blocking
//! I/O without an async runtime.
//!
//! The module tree follows the opening of a connection: [`url`] checks the
//! URL, [`proxy`] decides on a proxy, [`tunnel`] speaks HTTP `CONNECT` to
//! it, [`tls`] verifies the server (web PKI roots, `--ca-file`, SPKI pins),
//! [`connector`]
//! runs the steps, `upgrade` asks for the WebSocket and classifies the
//! answer (reading a refusal's explanation), [`connection`] shares
//! the open socket between one reader and writer threads, [`keepalive`]
//! times the WebSocket pings, [`error`] names every failure. [`http`] sends
//! the OAuth requests over the same dialling, proxy and TLS steps, and
//! reads every HTTP response head, the upgrade's and `CONNECT`'s too.
//! [`percent`] is the one percent codec, for every URL component.
//!
//! The transport moves whole messages as bytes; it never parses a frame's
//! JSON (that is the protocol layer's), never listens on a port, never reads
//! the process environment, and never lets the bearer token reach a
//! connection that is neither TLS-verified (chain and pin) nor loopback
//! `ws://`. There is no switch that disables certificate verification.

pub mod connection;
pub mod connector;
pub mod error;
pub mod http;
pub mod keepalive;
pub mod percent;
pub mod proxy;
mod stream;
pub mod tls;
pub mod tunnel;
mod upgrade;
pub mod url;

pub use connection::{
    CloseInfo, Connection, Incoming, READ_TURN, Reader, WRITE_STALL_TIMEOUT, Writer,
};
pub use connector::{Connector, OPENING_TIMEOUT, Step, websocket_config};
pub use error::{CaFileProblem, Disposition, Stage, TransportError};
pub use http::HttpResponse;
pub use keepalive::{Keepalive, KeepaliveAction, PING_INTERVAL, PONG_TIMEOUT};
pub use proxy::{ProxyConfig, ProxyServer, ProxySettingProblem};
pub use stream::POLL_INTERVAL;
pub use tls::{TlsSettings, spki_sha256};
pub use tunnel::ProxyResponseProblem;
pub use url::{Host, UrlError, WsUrl};

/// Largest WebSocket message in either direction (PROTOCOL.md §1.4).
pub const MAX_MESSAGE_BYTES: usize = crate::protocol::MAX_WEBSOCKET_MESSAGE_BYTES;
