//! One HTTP/1.1 `POST` to the platform's OAuth endpoints (AUTH.md §6, §7.3,
//! §11), over the same dialling, proxy tunnel and TLS verification as the
//! WebSocket: extra trust anchors, SPKI pins, plain text only to loopback.
//!
//! Kept deliberately small: one request per connection (`Connection:
//! close`), a bounded response (head and body), one deadline for the whole
//! exchange, and no redirects — a 3xx is just a status the caller refuses.
//! It never logs or keeps the request body, which carries codes and tokens.
//! Its response reader (a bounded head, then a bounded body) also reads the
//! answer to the WebSocket upgrade, and its head reader, within the
//! proxy's bounds, the answer to `CONNECT`.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::connector::{Connector, dial, is_timeout};
use super::error::{Stage, TransportError};
use super::stream::{Paced, Stream};
use super::tunnel::open_tunnel;
use super::url::WsUrl;

/// Longest response head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// Time allowed to connect (AUTH.md §6 note: 10 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time allowed for the whole exchange (AUTH.md §6 note: 30 s).
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A response: the status and the body (at most the caller's bound).
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Zeroizing<Vec<u8>>,
}

impl Connector {
    /// `POST url` with `body` of `content_type`; the response body may hold
    /// at most `max_body` bytes. `url` is `https://…` (or `http://` to a
    /// loopback host).
    pub fn post(
        &self,
        url: &str,
        content_type: &str,
        body: &[u8],
        max_body: usize,
    ) -> Result<HttpResponse, TransportError> {
        // The WebSocket URL rules are the HTTP ones with another scheme.
        let url = WsUrl::parse(&crate::config::ws_ify(url)).map_err(TransportError::Url)?;
        let start = Instant::now();
        let connect_deadline = start + CONNECT_TIMEOUT;
        let deadline = start + EXCHANGE_TIMEOUT;
        let proxy = if url.is_secure() {
            self.proxy_for(url.host())
        } else {
            None
        };
        let tcp = match proxy {
            Some(server) => dial(
                server.host(),
                server.port(),
                false,
                connect_deadline,
                &mut |_| {},
            )?,
            None => dial(
                url.host(),
                url.port(),
                !url.is_secure(),
                connect_deadline,
                &mut |_| {},
            )?,
        };
        let mut socket = Paced::opening(tcp, deadline);
        if let Some(server) = proxy {
            open_tunnel(&mut socket, server, url.host(), url.port())?;
        }
        let mut stream = if url.is_secure() {
            Stream::Tls(Box::new(self.tls().handshake(url.host(), socket)?))
        } else {
            Stream::Plain(socket)
        };
        // Only now, with the server authenticated (or on loopback), does
        // the body go out.
        let mut request = Zeroizing::new(Vec::with_capacity(256 + body.len()));
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nAccept: application/json\r\nConnection: close\r\nUser-Agent: autogpt-shim/{}\r\n\r\n",
            url.target(),
            url.host_header(),
            body.len(),
            env!("CARGO_PKG_VERSION"),
        );
        request.extend_from_slice(head.as_bytes());
        request.extend_from_slice(body);
        stream
            .write_all(&request)
            .and_then(|()| stream.flush())
            .map_err(|e| io_error(Stage::Upgrade, e))?;
        read_response(&mut stream, max_body)
    }
}

pub(super) fn io_error(stage: Stage, source: std::io::Error) -> TransportError {
    if is_timeout(&source) {
        TransportError::Timeout(stage)
    } else {
        TransportError::Io { stage, source }
    }
}

/// Reads a whole response from `stream`: the head, then the body (by
/// `Content-Length`, chunked, or to the end of the connection) of at most
/// `max_body` bytes.
pub fn read_response<S: Read>(
    stream: &mut S,
    max_body: usize,
) -> Result<HttpResponse, TransportError> {
    let head = read_head(stream, Stage::Read)?;
    let status = head.status;
    let body = read_body(stream, head, max_body)?;
    Ok(HttpResponse { status, body })
}

/// A whole response read from `bytes` exactly as [`Connector::post`] reads
/// it from a connection, the end of `bytes` being the end of the stream
/// (the entry point of the response parser's fuzz target).
pub fn parse_response(mut bytes: &[u8], max_body: usize) -> Result<HttpResponse, TransportError> {
    read_response(&mut bytes, max_body)
}

/// A response head as it was read, and what was read past it.
pub(super) struct Head {
    /// The status code.
    pub status: u16,
    /// The head's bytes, up to and including the empty line that ends it.
    pub bytes: Zeroizing<Vec<u8>>,
    /// Every header, its name lower-cased, in order.
    headers: Vec<(String, Vec<u8>)>,
    /// The bytes read after the head: the start of the body, or of the
    /// WebSocket stream after a 101, or of a proxy tunnel.
    pub rest: Zeroizing<Vec<u8>>,
    /// The stage read errors are reported at.
    stage: Stage,
}

impl Head {
    /// The first header called `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(have, _)| have.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
    }

    /// Whether any header is called `name`.
    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }
}

/// How much of a response head a reader accepts.
#[derive(Clone, Copy)]
pub(super) struct HeadLimits {
    /// Bytes read without finding the end of the head.
    pub bytes: usize,
    /// Header lines.
    pub headers: usize,
}

/// Why a response head was not read; each caller names these its way.
pub(super) enum HeadFault {
    /// The connection ended before the end of the head.
    Ended,
    /// The head is longer than its limit allows.
    TooLarge,
    /// httparse refused the head (`TooManyHeaders` included).
    Unparsable(httparse::Error),
}

/// Reads a response head of at most [`MAX_HEAD`] bytes and 64 headers;
/// read errors and timeouts are reported at `stage`.
pub(super) fn read_head<S: Read>(stream: &mut S, stage: Stage) -> Result<Head, TransportError> {
    let limits = HeadLimits {
        bytes: MAX_HEAD,
        headers: 64,
    };
    read_head_within(stream, stage, limits, |fault| match fault {
        HeadFault::Ended => malformed("the connection ended before the response head"),
        HeadFault::TooLarge => malformed("the response head is too large"),
        HeadFault::Unparsable(e) => malformed(&format!("unreadable response head: {e}")),
    })
}

/// Reads a response head within `limits`; read errors and timeouts are
/// reported at `stage`, every other failure as `fault` names it.
pub(super) fn read_head_within<S: Read>(
    stream: &mut S,
    stage: Stage,
    limits: HeadLimits,
    fault: impl Fn(HeadFault) -> TransportError,
) -> Result<Head, TransportError> {
    let mut buffer = Zeroizing::new(Vec::with_capacity(4096));
    let mut chunk = [0u8; 4096];
    loop {
        let n = read_some(stream, &mut chunk, stage)?;
        if n == 0 {
            return Err(fault(HeadFault::Ended));
        }
        buffer.extend_from_slice(&chunk[..n]);
        let mut slots = vec![httparse::EMPTY_HEADER; limits.headers];
        let mut response = httparse::Response::new(&mut slots);
        match response.parse(&buffer) {
            Ok(httparse::Status::Complete(len)) => {
                let status = response
                    .code
                    .ok_or_else(|| fault(HeadFault::Unparsable(httparse::Error::Status)))?;
                let headers = response
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                    .collect();
                let rest = Zeroizing::new(buffer.split_off(len));
                return Ok(Head {
                    status,
                    bytes: buffer,
                    headers,
                    rest,
                    stage,
                });
            }
            Ok(httparse::Status::Partial) if buffer.len() > limits.bytes => {
                return Err(fault(HeadFault::TooLarge));
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(fault(HeadFault::Unparsable(e))),
        }
    }
}

/// Reads the body that follows `head`, of at most `max_body` bytes.
pub(super) fn read_body<S: Read>(
    stream: &mut S,
    head: Head,
    max_body: usize,
) -> Result<Zeroizing<Vec<u8>>, TransportError> {
    let stage = head.stage;
    let framing = framing(&head)?;
    let mut rest = head.rest;
    let mut chunk = [0u8; 4096];
    let body = match framing {
        Framing::Length(len) => {
            if len > max_body {
                return Err(too_large(max_body));
            }
            while rest.len() < len {
                let n = read_some(stream, &mut chunk, stage)?;
                if n == 0 {
                    return Err(malformed("the body ended early"));
                }
                rest.extend_from_slice(&chunk[..n]);
            }
            rest.truncate(len);
            rest
        }
        Framing::Chunked => dechunk(stream, rest, max_body, stage)?,
        Framing::UntilClose => {
            loop {
                if rest.len() > max_body {
                    return Err(too_large(max_body));
                }
                let n = read_some(stream, &mut chunk, stage)?;
                if n == 0 {
                    break;
                }
                rest.extend_from_slice(&chunk[..n]);
            }
            rest
        }
    };
    Ok(body)
}

enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

fn framing(head: &Head) -> Result<Framing, TransportError> {
    let value = |name: &str| {
        head.header(name)
            .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
    };
    if let Some(encoding) = value("transfer-encoding") {
        return if encoding == "chunked" {
            Ok(Framing::Chunked)
        } else {
            Err(malformed("unsupported transfer encoding"))
        };
    }
    match value("content-length") {
        Some(len) => len
            .parse()
            .map(Framing::Length)
            .map_err(|_| malformed("invalid Content-Length")),
        None => Ok(Framing::UntilClose),
    }
}

/// Chunked transfer coding, with the body bound applied to the decoded
/// size and the chunk-size lines bounded too.
fn dechunk<S: Read>(
    stream: &mut S,
    mut raw: Zeroizing<Vec<u8>>,
    max_body: usize,
    stage: Stage,
) -> Result<Zeroizing<Vec<u8>>, TransportError> {
    let mut body = Zeroizing::new(Vec::new());
    let mut chunk = [0u8; 4096];
    let mut fill = |raw: &mut Zeroizing<Vec<u8>>| -> Result<(), TransportError> {
        let n = read_some(stream, &mut chunk, stage)?;
        if n == 0 {
            return Err(malformed("the chunked body ended early"));
        }
        raw.extend_from_slice(&chunk[..n]);
        Ok(())
    };
    loop {
        let line_end = loop {
            if let Some(pos) = raw.windows(2).position(|w| w == b"\r\n") {
                break pos;
            }
            if raw.len() > 1024 {
                return Err(malformed("a chunk size line is too long"));
            }
            fill(&mut raw)?;
        };
        let line =
            std::str::from_utf8(&raw[..line_end]).map_err(|_| malformed("bad chunk size"))?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| malformed("bad chunk size"))?;
        raw.drain(..line_end + 2);
        if size == 0 {
            return Ok(body);
        }
        if body.len().saturating_add(size) > max_body {
            return Err(too_large(max_body));
        }
        while raw.len() < size + 2 {
            fill(&mut raw)?;
        }
        body.extend_from_slice(&raw[..size]);
        raw.drain(..size + 2);
    }
}

/// One read; timeouts surface as `Timeout` at `stage`.
fn read_some<S: Read>(
    stream: &mut S,
    buf: &mut [u8],
    stage: Stage,
) -> Result<usize, TransportError> {
    loop {
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A TLS peer that closes without close_notify still ended the
            // response (Connection: close).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) => return Err(io_error(stage, e)),
        }
    }
}

fn malformed(why: &str) -> TransportError {
    TransportError::Protocol(format!("HTTP response: {why}"))
}

fn too_large(max: usize) -> TransportError {
    TransportError::MessageTooLarge { size: max + 1 }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn response(bytes: &[u8], max_body: usize) -> Result<HttpResponse, TransportError> {
        read_response(&mut &bytes[..], max_body)
    }

    #[test]
    fn a_chunked_body_is_joined_and_bounded() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let answer = response(raw, 5).unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body.as_slice(), b"abcde");
        assert!(matches!(
            response(raw, 4),
            Err(TransportError::MessageTooLarge { size: 5 })
        ));
    }

    #[test]
    fn a_head_of_more_than_sixty_four_headers_is_refused() {
        let head = |count: usize| {
            let mut raw = b"HTTP/1.1 204 No Content\r\n".to_vec();
            for i in 0..count {
                raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
            }
            raw.extend_from_slice(b"Content-Length: 0\r\n\r\n");
            raw
        };
        assert_eq!(response(&head(63), 0).unwrap().status, 204);
        match response(&head(64), 0) {
            Err(TransportError::Protocol(why)) => {
                assert_eq!(
                    why,
                    "HTTP response: unreadable response head: too many headers"
                );
            }
            other => panic!("{other:?}"),
        }
        match response(b"HTTP/1.1 200 OK\r\n", 0) {
            Err(TransportError::Protocol(why)) => assert_eq!(
                why,
                "HTTP response: the connection ended before the response head"
            ),
            other => panic!("{other:?}"),
        }
    }
}
