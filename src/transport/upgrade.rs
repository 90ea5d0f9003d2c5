//! The client's half of the WebSocket opening handshake (RFC 6455 §4.1,
//! PROTOCOL.md §1.3): the `GET` that asks for the upgrade, and the checks
//! of the answer.
//!
//! It is ours rather than the WebSocket library's so that a refusal keeps
//! the stream: the platform explains a 401 or 403 in a JSON body, which may
//! arrive after the head, and only the reader of the head can go on reading
//! it. A 101 is checked as the RFC requires (status, `Upgrade`,
//! `Connection`, `Sec-WebSocket-Accept`, no extension or subprotocol that
//! was not asked for) before the stream becomes a WebSocket.
//!
//! It never writes the request before the caller has authenticated the
//! server, never keeps the token outside zeroized memory, and never reads
//! more of a refusal than [`MAX_REFUSAL_BODY`].

use std::io::Write;

use tungstenite::WebSocket;
use tungstenite::handshake::client::generate_key;
use tungstenite::handshake::derive_accept_key;
use tungstenite::protocol::Role;
use zeroize::Zeroizing;

use super::connector::websocket_config;
use super::error::{Stage, TransportError, refusal_detail};
use super::http::{Head, io_error, read_body, read_head};
use super::stream::Stream;
use super::url::WsUrl;

/// The most of a refusal's body that is read for its `detail`.
pub const MAX_REFUSAL_BODY: usize = 16 * 1024;

/// An upgrade request, ready to be written, and the accept value its
/// answer must carry.
pub struct UpgradeRequest {
    bytes: Zeroizing<Vec<u8>>,
    accept: String,
}

impl UpgradeRequest {
    /// The request for `url`, with `Authorization: Bearer <token>` when
    /// `token` is given and not empty. A token that cannot be an HTTP
    /// header value is refused here, before anything is sent.
    pub fn new(url: &WsUrl, token: Option<&Zeroizing<String>>) -> Result<Self, TransportError> {
        let key = generate_key();
        let accept = derive_accept_key(key.as_bytes());
        let mut bytes = Zeroizing::new(Vec::with_capacity(512));
        let head = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n",
            url.target(),
            url.host_header(),
        );
        bytes.extend_from_slice(head.as_bytes());
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            // An HTTP header value: visible ASCII, spaces and tabs. Checked
            // in place, so that no copy of the token outlives the request.
            if !token
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            {
                return Err(TransportError::InvalidToken);
            }
            bytes.extend_from_slice(b"Authorization: Bearer ");
            bytes.extend_from_slice(token.as_bytes());
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"\r\n");
        Ok(UpgradeRequest { bytes, accept })
    }
}

/// Sends `request` on `stream` and turns the stream into a WebSocket when
/// the answer is a valid 101. A 401 or 403 keeps its body's `detail`.
pub fn upgrade(
    mut stream: Stream,
    request: &UpgradeRequest,
) -> Result<WebSocket<Stream>, TransportError> {
    stream
        .write_all(&request.bytes)
        .and_then(|()| stream.flush())
        .map_err(|e| io_error(Stage::Upgrade, e))?;
    let mut head = read_head(&mut stream, Stage::Upgrade)?;
    match head.status {
        101 => {
            check_switch(&head, &request.accept)?;
            // Whatever the server sent after the head already belongs to
            // the WebSocket stream.
            let tail = std::mem::take(&mut *head.rest);
            Ok(WebSocket::from_partially_read(
                stream,
                tail,
                Role::Client,
                Some(websocket_config()),
            ))
        }
        status @ (401 | 403) => {
            // The status decides what happens; an unreadable body only
            // loses the explanation.
            let detail = read_body(&mut stream, head, MAX_REFUSAL_BODY)
                .ok()
                .and_then(|body| refusal_detail(&body));
            Err(if status == 401 {
                TransportError::Unauthorized { detail }
            } else {
                TransportError::Forbidden { detail }
            })
        }
        status => Err(TransportError::UpgradeStatus(status)),
    }
}

/// The RFC 6455 §4.1 checks of a 101 answer to a request that asked for no
/// extension and no subprotocol.
fn check_switch(head: &Head, accept: &str) -> Result<(), TransportError> {
    let text = |name: &str| head.header(name).map(String::from_utf8_lossy);
    let rejected = |why: &str| Err(TransportError::UpgradeRejected(why.to_owned()));
    if !text("upgrade").is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket")) {
        return rejected("the answer does not upgrade to websocket");
    }
    let connection_upgrades = text("connection").is_some_and(|v| {
        v.split(',')
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
    });
    if !connection_upgrades {
        return rejected("the answer's Connection header does not say Upgrade");
    }
    if head.header("sec-websocket-accept") != Some(accept.as_bytes()) {
        return rejected("the answer's Sec-WebSocket-Accept does not match the key");
    }
    if head.has("sec-websocket-extensions") {
        return rejected("the answer names an extension that was not asked for");
    }
    if head.has("sec-websocket-protocol") {
        return rejected("the answer names a subprotocol that was not asked for");
    }
    Ok(())
}
