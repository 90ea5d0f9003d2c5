//! The client side of the connection to the platform (PROTOCOL.md §1):
//! WebSocket over TLS (or loopback plain text), opened outbound, blocking
//! I/O without an async runtime.
//!
//! The module tree follows the opening of a connection: `url` checks the
//! URL, `proxy` decides on a proxy, `tunnel` speaks HTTP `CONNECT` to it,
//! `tls` verifies the server (web PKI roots, `--ca-file`, SPKI pins),
//! `connector` runs the steps, `upgrade` asks for the WebSocket and
//! classifies the answer (reading a refusal's explanation), `connection`
//! shares the open socket between one reader and writer threads, `keepalive`
//! times the WebSocket pings, `error` names every failure. `http` sends
//! the OAuth requests over the same dialling, proxy and TLS steps, and
//! reads every HTTP response head, the upgrade's and `CONNECT`'s too.
//! `percent` is the one percent codec, for every URL component.
//!
//! The transport moves whole messages as bytes; it never parses a frame's
//! JSON (that is the protocol layer's), never listens on a port, never reads
//! the process environment, and never lets the bearer token reach a
//! connection that is neither TLS-verified (chain and pin) nor loopback
//! `ws://`. There is no switch that disables certificate verification.

mod connection;
mod connector;
mod error;
mod http;
mod keepalive;
pub(crate) mod percent;
mod proxy;
mod stream;
mod tls;
mod tunnel;
mod upgrade;
mod url;

/// The open connection, shared by one reader and writer threads.
pub use connection::{
    CloseInfo, Connection, FRAGMENT_BYTES, Incoming, Payload, QUEUED_TEXT_BYTES, READ_TURN, Reader,
    WRITE_STALL_TIMEOUT, Writer,
};
/// Opening a connection, step by step.
pub use connector::{Connector, OPENING_TIMEOUT, Step, websocket_config};
/// Every failure of the transport, and how to react to it.
pub use error::{CaFileProblem, Disposition, Stage, TransportError};
/// An HTTP response, and the parser of a whole one from bytes.
pub use http::{HttpResponse, parse_response};
/// The WebSocket pings' timing.
pub use keepalive::{Keepalive, KeepaliveAction, PING_INTERVAL, PONG_TIMEOUT};
/// Whether and through which proxy to connect.
pub use proxy::{ProxyConfig, ProxyServer, ProxySettingProblem};
/// How long one read or write on an open connection waits for the socket.
pub use stream::POLL_INTERVAL;
/// Server verification: trust anchors, `--ca-file` and SPKI pins.
pub use tls::{TlsSettings, spki_sha256};
/// A received message's bytes, shared with the frame codec that read them.
pub use tungstenite::Bytes;
/// The proxy's answer to `CONNECT`, read from a stream or parsed from a head.
pub use tunnel::{ProxyResponseProblem, parse_connect_response, read_connect_reply};
/// A parsed `ws://` or `wss://` URL and its classified host.
pub use url::{Host, UrlError, WsUrl};

/// Largest WebSocket message in either direction (PROTOCOL.md §1.4).
pub const MAX_MESSAGE_BYTES: usize = crate::protocol::MAX_WEBSOCKET_MESSAGE_BYTES;
