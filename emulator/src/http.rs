//! The small HTTP/1.1 both emulator servers and the browser speak: reading
//! one message (a head of bounded size, a body framed by `Content-Length`,
//! chunked encoding or the end of the connection, all under one deadline)
//! and writing one answer, over any [`Socket`] — plain TCP, the platform
//! emulator's TLS transport, or the browser's TLS client stream.
//!
//! It owns framing only: it never decides what a request means (that is
//! `oauth`'s job) and never opens or accepts a connection. One request per
//! connection; every answer carries `Connection: close`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Largest request head (request line and headers) a server reads, and
/// largest response head the browser reads.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Largest request body a server reads, and largest response body the
/// browser reads.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A byte stream one HTTP message is read from and answered on.
pub(crate) trait Socket: Read + Write {
    /// Bounds the next blocking reads (`None`: no bound).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Ends the sending direction after the answer (over TLS, with a
    /// close_notify first), so the peer sees where the answer ends.
    fn end_writes(&mut self);
}

impl Socket for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }

    fn end_writes(&mut self) {
        // The peer may already be gone; the connection ends either way.
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// One HTTP request the emulator read in full, whatever its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method, as sent (e.g. `POST`).
    pub method: String,
    /// The request target, as sent (path and any query).
    pub path: String,
    /// Every header in order, names lower-cased, values as sent (without
    /// surrounding whitespace).
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it was sent chunked.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The value of the first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// Every value of the headers called `name` (any case), in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The body decoded as a form ([`crate::oauth::form_fields`]).
    pub fn form(&self) -> Vec<(String, String)> {
        crate::oauth::form_fields(&self.body)
    }

    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The members of the body's top-level JSON object in the order they
    /// were sent ([`crate::oauth::json_members`]).
    pub fn json_members(&self) -> Option<Vec<(String, serde_json::Value)>> {
        crate::oauth::json_members(&self.body)
    }

    /// The path without its query.
    pub(crate) fn path_only(&self) -> &str {
        self.path
            .split_once('?')
            .map_or(&self.path, |(path, _)| path)
    }

    /// The query after `?`, or the empty string.
    pub(crate) fn query(&self) -> &str {
        self.path.split_once('?').map_or("", |(_, query)| query)
    }
}

/// The method and target of a request head's request line.
pub(crate) fn request_line(head: &Head) -> Result<(&str, &str), Fault> {
    let mut parts = head.start.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Fault::Malformed("request line"));
    };
    if method.is_empty() || path.is_empty() || !version.starts_with("HTTP/1.") {
        return Err(Fault::Malformed("request line"));
    }
    Ok((method, path))
}

/// Reads the rest of a request whose head has been read and parsed:
/// answers `Expect: 100-continue`, then reads the body its framing gives,
/// at most [`MAX_BODY_BYTES`].
pub(crate) fn read_body<S: Socket>(
    reader: &mut HttpReader<S>,
    head: Head,
) -> Result<RecordedRequest, Fault> {
    read_body_within(reader, head, MAX_BODY_BYTES)
}

/// [`read_body`] with a body bound of `limit` bytes, for a server whose
/// requests are larger than the OAuth endpoints' (a chat history).
pub(crate) fn read_body_within<S: Socket>(
    reader: &mut HttpReader<S>,
    head: Head,
    limit: usize,
) -> Result<RecordedRequest, Fault> {
    let (method, path) = request_line(&head)?;
    let (method, path) = (method.to_owned(), path.to_owned());
    let framing = body_framing(&head.headers)?;
    let continues = header_value(&head.headers, "expect")
        .is_some_and(|value| value.eq_ignore_ascii_case("100-continue"));
    if continues && framing != Framing::Length(0) {
        let out = reader.stream_mut();
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .and_then(|()| out.flush())
            .map_err(Fault::Io)?;
    }
    let body = match framing {
        Framing::Length(length) if length > limit => return Err(Fault::BodyTooLarge),
        Framing::Length(length) => reader.take(length)?,
        Framing::Chunked => reader.read_chunked(limit)?,
        // A request without framing has no body (RFC 9112 §6.3).
        Framing::UntilClose => Vec::new(),
    };
    Ok(RecordedRequest {
        method,
        path,
        headers: head.headers,
        body,
    })
}

/// Ends the server's side of a connection gracefully: ends the writes, then
/// reads (and discards) briefly whatever the client still sends, so unread
/// bytes do not turn the close into a reset that could destroy the answer
/// in flight.
pub(crate) fn finish<S: Socket>(reader: &mut HttpReader<S>) {
    reader.stream_mut().end_writes();
    reader.drain(Duration::from_millis(200), 64 * 1024);
}

/// What is left until `deadline`, or a timeout error when nothing is.
pub(crate) fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    } else {
        Ok(left)
    }
}

/// Why reading or parsing a message failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The peer closed before sending anything.
    Closed,
    /// The connection failed or timed out, or closed mid-message.
    Io(io::Error),
    /// The message is not HTTP/1.1 as understood here.
    Malformed(&'static str),
    /// The head exceeded its bound.
    HeadTooLarge,
    /// The body exceeded its bound.
    BodyTooLarge,
}

impl Fault {
    /// The status a server answers this fault with.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Fault::HeadTooLarge => 431,
            Fault::BodyTooLarge => 413,
            _ => 400,
        }
    }

    pub(crate) fn into_io(self) -> io::Error {
        match self {
            Fault::Closed => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before any response",
            ),
            Fault::Io(error) => error,
            Fault::Malformed(what) => {
                io::Error::new(io::ErrorKind::InvalidData, format!("malformed {what}"))
            }
            Fault::HeadTooLarge => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("head larger than {MAX_HEAD_BYTES} bytes"),
            ),
            Fault::BodyTooLarge => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("body larger than {MAX_BODY_BYTES} bytes"),
            ),
        }
    }
}

/// A parsed message head.
pub(crate) struct Head {
    /// The request line or status line.
    pub(crate) start: String,
    /// The headers, names lower-cased, values trimmed.
    pub(crate) headers: Vec<(String, String)>,
}

/// How a message's body is delimited.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

pub(crate) fn parse_head(bytes: &[u8]) -> Result<Head, Fault> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split("\r\n").filter(|line| !line.is_empty());
    let start = lines
        .next()
        .ok_or(Fault::Malformed("start line"))?
        .to_owned();
    let mut headers = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            // Obsolete line folding (RFC 9112 §5.2).
            return Err(Fault::Malformed("header folding"));
        }
        let (name, value) = line.split_once(':').ok_or(Fault::Malformed("header"))?;
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(Fault::Malformed("header name"));
        }
        headers.push((
            name.to_ascii_lowercase(),
            value.trim_matches([' ', '\t']).to_owned(),
        ));
    }
    Ok(Head { start, headers })
}

pub(crate) fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// The body framing of a message (RFC 9112 §6.3), strictly: both
/// `Transfer-Encoding` and `Content-Length`, a transfer coding other than a
/// final `chunked`, or disagreeing lengths are malformed.
pub(crate) fn body_framing(headers: &[(String, String)]) -> Result<Framing, Fault> {
    let codings: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name == "transfer-encoding")
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .filter(|coding| !coding.is_empty())
        .collect();
    let lengths: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name == "content-length")
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .collect();
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err(Fault::Malformed(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        return match codings.last() {
            Some(last) if last.eq_ignore_ascii_case("chunked") && codings.len() == 1 => {
                Ok(Framing::Chunked)
            }
            _ => Err(Fault::Malformed("transfer coding")),
        };
    }
    let Some(first) = lengths.first() else {
        return Ok(Framing::UntilClose);
    };
    if lengths.iter().any(|length| length != first)
        || first.is_empty()
        || !first.bytes().all(|byte| byte.is_ascii_digit())
    {
        return Err(Fault::Malformed("Content-Length"));
    }
    // A length too large for usize is certainly too large to read.
    first
        .parse::<usize>()
        .map(Framing::Length)
        .map_err(|_| Fault::BodyTooLarge)
}

/// Buffered reading of one HTTP message from a [`Socket`], every read
/// bounded by one overall deadline.
pub(crate) struct HttpReader<S: Socket> {
    stream: S,
    buf: Vec<u8>,
    deadline: Instant,
}

impl<S: Socket> HttpReader<S> {
    pub(crate) fn new(stream: S, deadline: Instant) -> Self {
        HttpReader {
            stream,
            buf: Vec::new(),
            deadline,
        }
    }

    /// The stream, to answer on.
    pub(crate) fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The stream and every byte read from it but not yet consumed, for
    /// handing the connection to another reader.
    pub(crate) fn into_parts(self) -> (S, Vec<u8>) {
        (self.stream, self.buf)
    }

    /// Reads more bytes into the buffer; `Ok(0)` at the end of the stream.
    pub(crate) fn fill(&mut self) -> Result<usize, Fault> {
        let left = remaining(self.deadline).map_err(Fault::Io)?;
        self.stream
            .set_read_timeout(Some(left))
            .map_err(Fault::Io)?;
        let mut chunk = [0u8; 8192];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(count) => {
                    self.buf.extend_from_slice(&chunk[..count]);
                    return Ok(count);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                // A socket read timeout shows as WouldBlock on some systems.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Fault::Io(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out",
                    )));
                }
                Err(error) => return Err(Fault::Io(error)),
            }
        }
    }

    pub(crate) fn fill_or_eof(&mut self) -> Result<(), Fault> {
        if self.fill()? == 0 {
            return Err(Fault::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed mid-message",
            )));
        }
        Ok(())
    }

    /// The head up to and including its blank line, at most `limit` bytes.
    pub(crate) fn read_head(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut searched: usize = 0;
        loop {
            let from = searched.saturating_sub(3);
            if let Some(at) = find(&self.buf[from..], b"\r\n\r\n") {
                let end = from + at + 4;
                if end > limit {
                    return Err(Fault::HeadTooLarge);
                }
                return Ok(self.buf.drain(..end).collect());
            }
            if self.buf.len() > limit {
                return Err(Fault::HeadTooLarge);
            }
            searched = self.buf.len();
            if self.fill()? == 0 {
                return Err(if self.buf.is_empty() {
                    Fault::Closed
                } else {
                    Fault::Malformed("head cut short")
                });
            }
        }
    }

    /// Exactly `count` bytes.
    pub(crate) fn take(&mut self, count: usize) -> Result<Vec<u8>, Fault> {
        while self.buf.len() < count {
            self.fill_or_eof()?;
        }
        Ok(self.buf.drain(..count).collect())
    }

    /// One line without its line ending (CRLF, or a bare LF), at most
    /// `limit` bytes.
    pub(crate) fn read_line(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut searched: usize = 0;
        loop {
            if let Some(at) = self.buf[searched..].iter().position(|&byte| byte == b'\n') {
                let end = searched + at;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.buf.len() > limit {
                return Err(Fault::Malformed("line too long"));
            }
            searched = self.buf.len();
            self.fill_or_eof()?;
        }
    }

    /// A chunked body (RFC 9112 §7.1), extensions and trailers ignored, at
    /// most `limit` bytes of data.
    pub(crate) fn read_chunked(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line(1024)?;
            let line = String::from_utf8_lossy(&line);
            let size = line.split(';').next().unwrap_or_default().trim();
            if size.is_empty() || !size.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return Err(Fault::Malformed("chunk size"));
            }
            let size = usize::from_str_radix(size, 16).map_err(|_| Fault::BodyTooLarge)?;
            if size == 0 {
                break;
            }
            if size > limit.saturating_sub(body.len()) {
                return Err(Fault::BodyTooLarge);
            }
            body.extend(self.take(size)?);
            if !self.read_line(2)?.is_empty() {
                return Err(Fault::Malformed("chunk end"));
            }
        }
        // Trailer fields, up to the blank line.
        let mut trailer_bytes = 0;
        loop {
            let line = self.read_line(MAX_HEAD_BYTES)?;
            if line.is_empty() {
                return Ok(body);
            }
            trailer_bytes += line.len();
            if trailer_bytes > MAX_HEAD_BYTES {
                return Err(Fault::HeadTooLarge);
            }
        }
    }

    /// Everything up to the end of the stream, at most `limit` bytes.
    pub(crate) fn read_to_close(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        while self.fill()? > 0 {
            if self.buf.len() > limit {
                return Err(Fault::BodyTooLarge);
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }

    /// Reads and discards for at most `wait` or `limit` bytes, or until the
    /// stream ends.
    pub(crate) fn drain(&mut self, wait: Duration, limit: usize) {
        self.deadline = self.deadline.min(Instant::now() + wait);
        let mut total = 0;
        while total < limit {
            self.buf.clear();
            match self.fill() {
                Ok(0) | Err(_) => return,
                Ok(count) => total += count,
            }
        }
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Writes a complete answer framed by `Content-Length`, with `extra`
/// headers (e.g. a redirect's `Location`) after the framing ones.
pub(crate) fn write_plain(
    out: &mut dyn Write,
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    // A status HTTP cannot carry as three digits becomes 500.
    let status = if (100..=999).contains(&status) {
        status
    } else {
        500
    };
    // These statuses have no body and no Content-Length (RFC 9110 §8.6).
    let bodiless = status < 200 || status == 204 || status == 304;
    let mut message = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if !bodiless {
        message.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    for (name, value) in extra {
        message.push_str(&format!("{name}: {value}\r\n"));
    }
    message.push_str("Cache-Control: no-store\r\nConnection: close\r\n\r\n");
    let mut bytes = message.into_bytes();
    if !bodiless {
        bytes.extend_from_slice(body);
    }
    out.write_all(&bytes)?;
    out.flush()
}

/// Writes a 200 answer whose body is sent chunked, in small chunks of
/// varying size.
pub(crate) fn write_chunked(
    out: &mut dyn Write,
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    );
    out.write_all(head.as_bytes())?;
    out.flush()?;
    // Small chunks of varying size, each its own write, so a client meets
    // sizes of one and two hex digits and chunks split across reads.
    let sizes = [1usize, 7, 16, 31];
    let mut rest = body;
    let mut turn = 0;
    while !rest.is_empty() {
        let size = sizes[turn % sizes.len()].min(rest.len());
        let (chunk, tail) = rest.split_at(size);
        let mut bytes = format!("{size:X}\r\n").into_bytes();
        bytes.extend_from_slice(chunk);
        bytes.extend_from_slice(b"\r\n");
        out.write_all(&bytes)?;
        out.flush()?;
        rest = tail;
        turn += 1;
    }
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_is_strict() {
        let headers = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect()
        };
        assert_eq!(
            body_framing(&headers(&[("content-length", "12")])).ok(),
            Some(Framing::Length(12))
        );
        assert_eq!(
            body_framing(&headers(&[("transfer-encoding", "chunked")])).ok(),
            Some(Framing::Chunked)
        );
        assert_eq!(body_framing(&[]).ok(), Some(Framing::UntilClose));
        for bad in [
            vec![("content-length", "1"), ("content-length", "2")],
            vec![("content-length", "-1")],
            vec![("content-length", "1"), ("transfer-encoding", "chunked")],
            vec![("transfer-encoding", "gzip")],
        ] {
            assert!(body_framing(&headers(&bad)).is_err(), "{bad:?}");
        }
    }
}
