//! The HTTP `CONNECT` tunnel through a proxy (PROTOCOL.md §1.2a): the
//! request and the checks of the proxy's answer.
//!
//! It must never send anything but the `CONNECT` request to the proxy (the
//! TLS handshake and everything after it run end to end through the
//! tunnel), never accept bytes after a `200` head before anything went
//! through the tunnel, and never show the credentials it sends. Which
//! proxy to use, and its credentials, are [`super::proxy`]'s.

use std::fmt;
use std::io::{Read, Write};

use zeroize::Zeroizing;

use super::error::{Stage, TransportError};
use super::http::{HeadFault, HeadLimits, io_error, read_head_within};
use super::proxy::ProxyServer;
use super::url::Host;

/// Largest `CONNECT` response head accepted (status line and headers).
pub const MAX_PROXY_RESPONSE_BYTES: usize = 16 * 1024;
/// Most header lines accepted in a `CONNECT` response.
const MAX_PROXY_RESPONSE_HEADERS: usize = 100;

/// Why the proxy's answer to `CONNECT` is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyResponseProblem {
    /// The connection ended before the end of the response head.
    Truncated,
    /// The head is longer than `MAX_PROXY_RESPONSE_BYTES` or has more
    /// than 100 header lines.
    TooLarge,
    /// The status line or a header line is malformed.
    Malformed,
    /// Bytes followed a `200` head before anything was sent through the
    /// tunnel.
    DataAfterResponse,
}

impl fmt::Display for ProxyResponseProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProxyResponseProblem::Truncated => "the proxy closed the connection mid-response",
            ProxyResponseProblem::TooLarge => "the response head is too large",
            ProxyResponseProblem::Malformed => "the response is not well-formed HTTP/1.x",
            ProxyResponseProblem::DataAfterResponse => "unexpected data after the response",
        })
    }
}

/// Asks the proxy on `stream` for a tunnel to `target:port` and reads its
/// answer. On success the stream is positioned at the first byte of the
/// tunnel.
pub(crate) fn open_tunnel<S: Read + Write>(
    stream: &mut S,
    proxy: &ProxyServer,
    target: &Host,
    port: u16,
) -> Result<(), TransportError> {
    let authority = target.with_port(port);
    let mut request = Zeroizing::new(Vec::with_capacity(256));
    request.extend_from_slice(
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n").as_bytes(),
    );
    if let Some(authorization) = proxy.authorization() {
        request.extend_from_slice(b"Proxy-Authorization: ");
        request.extend_from_slice(authorization.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    stream
        .write_all(&request)
        .and_then(|()| stream.flush())
        .map_err(|e| io_error(Stage::Proxy, e))?;
    read_connect_reply(stream)
}

/// Reads the proxy's answer to `CONNECT` from `stream`: `Ok` for a `200`
/// head with nothing after it, the refusal's status otherwise. Public so
/// that the reader can be fuzzed on bytes.
pub fn read_connect_reply<S: Read>(stream: &mut S) -> Result<(), TransportError> {
    let limits = HeadLimits {
        bytes: MAX_PROXY_RESPONSE_BYTES,
        headers: MAX_PROXY_RESPONSE_HEADERS,
    };
    let head = read_head_within(stream, Stage::Proxy, limits, |fault| {
        TransportError::ProxyResponse(match fault {
            HeadFault::Ended => ProxyResponseProblem::Truncated,
            HeadFault::TooLarge | HeadFault::Unparsable(httparse::Error::TooManyHeaders) => {
                ProxyResponseProblem::TooLarge
            }
            HeadFault::Unparsable(_) => ProxyResponseProblem::Malformed,
        })
    })?;
    // httparse is lenient where a proxy answer must not be (a bare LF, a
    // status of 000): the head is checked again, strictly.
    match parse_connect_response(&head.bytes).map_err(TransportError::ProxyResponse)? {
        // Bytes after a 200 would be taken for the server's: refused.
        200 if !head.rest.is_empty() => Err(TransportError::ProxyResponse(
            ProxyResponseProblem::DataAfterResponse,
        )),
        200 => Ok(()),
        // A refusal commonly carries a page; its status is what matters.
        status => Err(TransportError::ProxyRefused { status }),
    }
}

/// The status code of a `CONNECT` response head (ending in an empty line):
/// `HTTP/1.0` or `HTTP/1.1`, a three-digit status, an optional reason,
/// then well-formed `name: value` lines, all ending in CRLF.
pub fn parse_connect_response(head: &[u8]) -> Result<u16, ProxyResponseProblem> {
    if head.len() > MAX_PROXY_RESPONSE_BYTES {
        return Err(ProxyResponseProblem::TooLarge);
    }
    let body = head
        .strip_suffix(b"\r\n\r\n")
        .ok_or(ProxyResponseProblem::Malformed)?;
    let mut lines = crlf_lines(body)?.into_iter();
    let status_line = lines.next().ok_or(ProxyResponseProblem::Malformed)?;
    let status = parse_status_line(status_line)?;
    let mut count = 0;
    for line in lines {
        count += 1;
        if count > MAX_PROXY_RESPONSE_HEADERS {
            return Err(ProxyResponseProblem::TooLarge);
        }
        check_header_line(line)?;
    }
    Ok(status)
}

/// `body` split at CRLF; a bare CR or LF anywhere is malformed.
fn crlf_lines(body: &[u8]) -> Result<Vec<&[u8]>, ProxyResponseProblem> {
    let mut lines = Vec::new();
    let mut rest = body;
    loop {
        match rest.iter().position(|&b| b == b'\r' || b == b'\n') {
            None => {
                lines.push(rest);
                return Ok(lines);
            }
            Some(at) if rest.get(at..at + 2) == Some(b"\r\n") => {
                lines.push(&rest[..at]);
                rest = &rest[at + 2..];
            }
            Some(_) => return Err(ProxyResponseProblem::Malformed),
        }
    }
}

fn parse_status_line(line: &[u8]) -> Result<u16, ProxyResponseProblem> {
    let rest = line
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| line.strip_prefix(b"HTTP/1.0 "))
        .ok_or(ProxyResponseProblem::Malformed)?;
    let (code, reason) = rest.split_at(rest.len().min(3));
    if code.len() != 3 || !code.iter().all(u8::is_ascii_digit) || code[0] == b'0' {
        return Err(ProxyResponseProblem::Malformed);
    }
    if !(reason.is_empty() || reason.starts_with(b" ")) || !reason.iter().all(|&b| is_text(b)) {
        return Err(ProxyResponseProblem::Malformed);
    }
    code.iter()
        .try_fold(0u16, |acc, d| {
            acc.checked_mul(10)?.checked_add(u16::from(d - b'0'))
        })
        .ok_or(ProxyResponseProblem::Malformed)
}

fn check_header_line(line: &[u8]) -> Result<(), ProxyResponseProblem> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(ProxyResponseProblem::Malformed)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_token_char(b)) {
        return Err(ProxyResponseProblem::Malformed);
    }
    if !value.iter().all(|&b| is_text(b)) {
        return Err(ProxyResponseProblem::Malformed);
    }
    Ok(())
}

/// `tchar` of RFC 9110 §5.6.2.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Visible characters, space, tab and obs-text; no other controls.
fn is_text(b: u8) -> bool {
    b == b'\t' || b == b' ' || b.is_ascii_graphic() || b >= 0x80
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::{self, Cursor};
    use std::net::Ipv6Addr;

    use super::*;

    fn name(host: &str) -> Host {
        Host::Name(host.into())
    }

    /// A stream that replays `input` and records what is written.
    struct Scripted {
        input: Cursor<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn tunnel(response: &[u8], proxy: &str, target: Host) -> (Result<(), TransportError>, String) {
        let mut stream = Scripted {
            input: Cursor::new(response.to_vec()),
            written: Vec::new(),
        };
        let server = ProxyServer::parse(proxy).unwrap();
        let result = open_tunnel(&mut stream, &server, &target, 443);
        (result, String::from_utf8(stream.written).unwrap())
    }

    #[test]
    fn the_connect_request_names_the_target_and_carries_the_credentials() {
        let (result, sent) = tunnel(
            b"HTTP/1.1 200 Connection established\r\n\r\n",
            "http://u:p@proxy:1",
            name("platform.example"),
        );
        result.unwrap();
        assert_eq!(
            sent,
            "CONNECT platform.example:443 HTTP/1.1\r\nHost: platform.example:443\r\n\
             Proxy-Authorization: Basic dTpw\r\n\r\n"
        );
        let (result, sent) = tunnel(
            b"HTTP/1.0 200\r\nVia: x\r\n\r\n",
            "proxy:1",
            Host::V6(Ipv6Addr::LOCALHOST),
        );
        result.unwrap();
        assert_eq!(
            sent,
            "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n"
        );
    }

    #[test]
    fn a_refusal_is_a_transient_error_with_its_status() {
        let (result, _) = tunnel(
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n",
            "proxy:1",
            name("h"),
        );
        let error = result.unwrap_err();
        assert!(matches!(
            error,
            TransportError::ProxyRefused { status: 407 }
        ));
        assert!(error.is_transient());
        let (result, _) = tunnel(
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html\r\n\r\n<html>denied</html>",
            "proxy:1",
            name("h"),
        );
        assert!(matches!(
            result,
            Err(TransportError::ProxyRefused { status: 403 })
        ));
    }

    #[test]
    fn malformed_truncated_oversized_and_overlong_responses_are_refused() {
        for (response, problem) in [
            (&b"HTTP/1.1 200 OK\r\n"[..], ProxyResponseProblem::Truncated),
            (b"", ProxyResponseProblem::Truncated),
            (
                b"HTTP/1.1 200 OK\r\n\r\n\x16\x03",
                ProxyResponseProblem::DataAfterResponse,
            ),
            (b"HTTP/2 200\r\n\r\n", ProxyResponseProblem::Malformed),
            (b"HTTP/1.1 20 OK\r\n\r\n", ProxyResponseProblem::Malformed),
            (b"HTTP/1.1 2000\r\n\r\n", ProxyResponseProblem::Malformed),
            (
                b"HTTP/1.1 200 OK\nX: y\r\n\r\n",
                ProxyResponseProblem::Malformed,
            ),
            (
                b"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
                ProxyResponseProblem::Malformed,
            ),
            (
                b"HTTP/1.1 200 OK\r\nNo colon\r\n\r\n",
                ProxyResponseProblem::Malformed,
            ),
            (
                b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
                ProxyResponseProblem::Malformed,
            ),
        ] {
            let (result, _) = tunnel(response, "proxy:1", name("h"));
            match result {
                Err(TransportError::ProxyResponse(got)) => {
                    assert_eq!(got, problem, "{:?}", String::from_utf8_lossy(response));
                }
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(response)),
            }
        }
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        while huge.len() <= MAX_PROXY_RESPONSE_BYTES {
            huge.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        huge.extend_from_slice(b"\r\n");
        let (result, _) = tunnel(&huge, "proxy:1", name("h"));
        assert!(matches!(
            result,
            Err(TransportError::ProxyResponse(
                ProxyResponseProblem::TooLarge
            ))
        ));
    }

    #[test]
    fn the_status_code_is_read_from_a_well_formed_head() {
        assert_eq!(parse_connect_response(b"HTTP/1.1 200 OK\r\n\r\n"), Ok(200));
        assert_eq!(
            parse_connect_response(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
            ),
            Ok(503)
        );
    }
    fn reply_with_headers(count: usize) -> Vec<u8> {
        let mut reply = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..count {
            reply.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        reply.extend_from_slice(b"\r\n");
        reply
    }

    #[test]
    fn a_reply_may_carry_a_hundred_header_lines_and_no_more() {
        assert!(read_connect_reply(&mut reply_with_headers(100).as_slice()).is_ok());
        assert!(matches!(
            read_connect_reply(&mut reply_with_headers(101).as_slice()),
            Err(TransportError::ProxyResponse(
                ProxyResponseProblem::TooLarge
            ))
        ));
    }

    /// A reader that hands out one byte per read.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let Some((&first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            match buf.first_mut() {
                Some(slot) => *slot = first,
                None => return Ok(0),
            }
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn a_reply_arriving_byte_by_byte_is_read_to_its_empty_line() {
        let mut reply = Trickle(b"HTTP/1.1 200 Connection established\r\nVia: p\r\n\r\n");
        assert!(read_connect_reply(&mut reply).is_ok());
        let mut refusal = Trickle(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
        assert!(matches!(
            read_connect_reply(&mut refusal),
            Err(TransportError::ProxyRefused { status: 502 })
        ));
    }
}
