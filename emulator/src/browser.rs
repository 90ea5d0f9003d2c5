//! The user's browser, played by a small HTTP/1.1 client: following the
//! platform's authorize redirect to the shim's callback listener
//! (`AUTH.md` §4–§5), and plain requests to the OAuth endpoints.
//!
//! It speaks `http://` and, when told which CA to trust, `https://` (the
//! platform emulator's endpoints). It refuses any host that is not
//! loopback, before connecting: a test browser must never reach the
//! network. It trusts nothing but the CA it is given — no system roots —
//! so it cannot vouch for anything but an emulator.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::http::{
    Framing, HttpReader, MAX_BODY_BYTES, MAX_HEAD_BYTES, Socket, body_framing, header_value,
    parse_head, remaining,
};

/// How many redirects [`Browser::follow`] follows before giving up, as
/// browsers bound redirect chains.
pub const MAX_REDIRECTS: usize = 5;

/// The headers a desktop browser sends when it navigates to a page.
const NAVIGATION_HEADERS: [(&str, &str); 10] = [
    (
        "User-Agent",
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    ),
    (
        "Accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    ),
    ("Accept-Language", "en-US,en;q=0.5"),
    ("Accept-Encoding", "gzip, deflate, br, zstd"),
    ("Upgrade-Insecure-Requests", "1"),
    ("Sec-Fetch-Dest", "document"),
    ("Sec-Fetch-Mode", "navigate"),
    ("Sec-Fetch-Site", "cross-site"),
    ("Sec-Fetch-User", "?1"),
    ("Priority", "u=0, i"),
];

/// One HTTP response as the browser read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Every header in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it was sent chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The value of the first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// The body as text (invalid UTF-8 becomes U+FFFD).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Where [`Browser::follow`] ended, and how it got there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followed {
    /// Every `Location` followed, in order (absolute URLs).
    pub redirects: Vec<String>,
    /// The URL of the last request.
    pub url: String,
    /// The answer to the last request (not a redirect, or the last one
    /// when [`MAX_REDIRECTS`] were followed).
    pub response: HttpResponse,
}

/// A browser: plain `http://` to loopback, and `https://` to loopback
/// when it trusts a CA ([`Browser::trusting`]).
#[derive(Clone, Default)]
pub struct Browser {
    tls: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Browser")
            .field("https", &self.tls.is_some())
            .finish()
    }
}

impl Browser {
    /// A browser for `http://` URLs only.
    pub fn new() -> Browser {
        Browser::default()
    }

    /// A browser that also opens `https://` URLs whose certificate chains
    /// to the CA certificate(s) in `ca_pem` (the emulator's
    /// [`crate::Emulator::ca_pem`]), and to nothing else.
    pub fn trusting(ca_pem: &str) -> io::Result<Browser> {
        let mut roots = RootCertStore::empty();
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert = cert.map_err(|error| {
                io::Error::new(io::ErrorKind::InvalidData, format!("bad CA PEM: {error}"))
            })?;
            roots
                .add(cert)
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
            count += 1;
        }
        if count == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no certificate in the CA PEM",
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Browser {
            tls: Some(Arc::new(config)),
        })
    }

    /// A navigation: `GET url` with the headers a browser sends. Redirects
    /// are not followed. A compressed answer is an error: the browser
    /// advertises compression as browsers do, and no page the emulator or
    /// the shim serves has a reason to use it.
    pub fn get(&self, url: &str, timeout: Duration) -> io::Result<HttpResponse> {
        let response = self.request("GET", url, &NAVIGATION_HEADERS, &[], timeout)?;
        if let Some(coding) = response.header("content-encoding") {
            if !coding.eq_ignore_ascii_case("identity") {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the page came with Content-Encoding {coding}"),
                ));
            }
        }
        Ok(response)
    }

    /// Navigates to `url` and follows redirects (301, 302, 303, 307, 308
    /// with a `Location`) as a browser does, at most [`MAX_REDIRECTS`];
    /// every URL on the way must be loopback. `timeout` bounds the whole
    /// chain.
    pub fn follow(&self, url: &str, timeout: Duration) -> io::Result<Followed> {
        let deadline = Instant::now() + timeout;
        let mut current = url.to_owned();
        let mut redirects = Vec::new();
        loop {
            let response = self.get(&current, remaining(deadline)?)?;
            let location = match response.status {
                301 | 302 | 303 | 307 | 308 => response.header("location").map(str::to_owned),
                _ => None,
            };
            let Some(location) = location else {
                return Ok(Followed {
                    redirects,
                    url: current,
                    response,
                });
            };
            if redirects.len() == MAX_REDIRECTS {
                return Ok(Followed {
                    redirects,
                    url: current,
                    response,
                });
            }
            current = resolve(&current, &location)?;
            redirects.push(current.clone());
        }
    }

    /// One HTTP/1.1 request to a loopback URL (host `localhost`,
    /// `127.x.x.x` or `[::1]`; `localhost` is resolved to 127.0.0.1), then
    /// the response read to its end. Sends `Host`, the given `headers`,
    /// `Content-Length` when there is a body or the method is `POST` or
    /// `PUT`, and `Connection: close`. Interim 1xx responses are skipped.
    /// The response body is framed by chunked encoding, `Content-Length`, or
    /// the end of the connection, and bounded by [`MAX_BODY_BYTES`].
    /// `timeout` bounds the whole exchange, connecting included.
    pub fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout: Duration,
    ) -> io::Result<HttpResponse> {
        let deadline = Instant::now() + timeout;
        let target = parse_url(url)?;
        let tls = match (&self.tls, target.tls) {
            (_, false) => None,
            (Some(config), true) => Some(config),
            (None, true) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("this browser trusts no CA for https:// URLs: {url}"),
                ));
            }
        };
        let tcp = TcpStream::connect_timeout(&target.addr, remaining(deadline)?)?;
        let _ = tcp.set_nodelay(true);
        tcp.set_write_timeout(Some(remaining(deadline)?))?;
        let mut stream = if let Some(config) = tls {
            let name = ServerName::try_from(target.hostname.clone())
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
            let conn = ClientConnection::new(Arc::clone(config), name).map_err(io::Error::other)?;
            tcp.set_read_timeout(Some(remaining(deadline)?))?;
            ClientStream::Tls(Box::new(StreamOwned::new(conn, tcp)))
        } else {
            ClientStream::Plain(tcp)
        };

        let mut request = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\n",
            target.path, target.host
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || method == "POST" || method == "PUT" {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("Connection: close\r\n\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        stream.write_all(&bytes)?;
        stream.flush()?;

        let mut reader = HttpReader::new(stream, deadline);
        loop {
            let head = reader
                .read_head(MAX_HEAD_BYTES)
                .and_then(|head| parse_head(&head))
                .map_err(crate::http::Fault::into_io)?;
            let status = parse_status_line(&head.start)?;
            if (100..200).contains(&status) {
                continue;
            }
            let bodiless = method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304;
            let body = if bodiless {
                Vec::new()
            } else {
                match body_framing(&head.headers).map_err(crate::http::Fault::into_io)? {
                    Framing::Length(length) if length > MAX_BODY_BYTES => {
                        return Err(crate::http::Fault::BodyTooLarge.into_io());
                    }
                    Framing::Length(length) => reader.take(length),
                    Framing::Chunked => reader.read_chunked(MAX_BODY_BYTES),
                    Framing::UntilClose => reader.read_to_close(MAX_BODY_BYTES),
                }
                .map_err(crate::http::Fault::into_io)?
            };
            return Ok(HttpResponse {
                status,
                headers: head.headers,
                body,
            });
        }
    }
}

/// The browser following the platform's redirect to the shim's callback:
/// [`Browser::get`] of an `http://` loopback URL. Returns the status and
/// the body as text.
pub fn visit(url: &str, timeout: Duration) -> io::Result<(u16, String)> {
    let response = Browser::new().get(url, timeout)?;
    Ok((response.status, response.text()))
}

/// [`Browser::request`] over plain TCP (`http://` URLs only).
pub fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<HttpResponse> {
    Browser::new().request(method, url, headers, body, timeout)
}

/// The browser's byte stream.
enum ClientStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for ClientStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(tcp) => tcp.read(buf),
            ClientStream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for ClientStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(tcp) => tcp.write(buf),
            ClientStream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            ClientStream::Plain(tcp) => tcp.flush(),
            ClientStream::Tls(tls) => tls.flush(),
        }
    }
}

impl Socket for ClientStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            ClientStream::Plain(tcp) => tcp.set_read_timeout(timeout),
            ClientStream::Tls(tls) => tls.sock.set_read_timeout(timeout),
        }
    }

    fn end_writes(&mut self) {
        // The browser reads its answer to the end instead; nothing to do.
    }
}

/// Where a request goes.
struct Target {
    addr: SocketAddr,
    tls: bool,
    /// The authority as written in the URL, for the `Host` header.
    host: String,
    /// The host alone (brackets removed), for the TLS server name.
    hostname: String,
    /// Path and query; the fragment is dropped, as a browser does.
    path: String,
}

fn parse_url(url: &str) -> io::Result<Target> {
    let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{why}: {url}"));
    let scheme_end = url.find("://").ok_or_else(|| invalid("not a URL"))?;
    let scheme = &url[..scheme_end];
    let (tls, default_port) = if scheme.eq_ignore_ascii_case("http") {
        (false, 80)
    } else if scheme.eq_ignore_ascii_case("https") {
        (true, 443)
    } else {
        return Err(invalid("only http:// and https:// URLs are supported"));
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let mut path = rest[authority_end..].to_owned();
    if let Some(hash) = path.find('#') {
        path.truncate(hash);
    }
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    if authority.contains('@') {
        return Err(invalid("credentials in the URL are not supported"));
    }
    let (host, port) = match authority.rfind(':') {
        Some(colon) if !authority[colon..].contains(']') => {
            let port = authority[colon + 1..]
                .parse::<u16>()
                .map_err(|_| invalid("bad port"))?;
            (&authority[..colon], port)
        }
        _ => (authority, default_port),
    };
    let (ip, hostname): (std::net::IpAddr, String) = if host.eq_ignore_ascii_case("localhost") {
        (Ipv4Addr::LOCALHOST.into(), "localhost".to_owned())
    } else if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        (
            inner.parse().map_err(|_| invalid("bad host"))?,
            inner.to_owned(),
        )
    } else {
        (
            host.parse::<Ipv4Addr>()
                .map_err(|_| invalid("bad host"))?
                .into(),
            host.to_owned(),
        )
    };
    if !ip.is_loopback() {
        return Err(invalid("only loopback hosts are visited"));
    }
    Ok(Target {
        addr: SocketAddr::new(ip, port),
        tls,
        host: authority.to_owned(),
        hostname,
        path,
    })
}

/// The absolute URL a `Location` names, seen from `base`: an absolute URL
/// as it is, a path-absolute one on `base`'s scheme and authority.
fn resolve(base: &str, location: &str) -> io::Result<String> {
    if location.contains("://") {
        return Ok(location.to_owned());
    }
    let unsupported = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unsupported redirect target {location:?}"),
        )
    };
    if !location.starts_with('/') || location.starts_with("//") {
        return Err(unsupported());
    }
    let scheme_end = base.find("://").ok_or_else(unsupported)? + 3;
    let authority_end = base[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(base.len(), |at| scheme_end + at);
    Ok(format!("{}{location}", &base[..authority_end]))
}

fn parse_status_line(line: &str) -> io::Result<u16> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad status line: {line}"),
        )
    };
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(bad());
    }
    code.parse::<u16>().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_loopback_http_or_https() {
        let target = parse_url("http://localhost:41899/callback?code=c&state=s#frag");
        let target = target.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            target.addr,
            SocketAddr::from(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41899))
        );
        assert_eq!(target.host, "localhost:41899");
        assert_eq!(target.path, "/callback?code=c&state=s");
        assert!(!target.tls);
        let target = parse_url("http://127.0.0.1:9?x=1").unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(target.path, "/?x=1");
        assert!(parse_url("http://[::1]:80/").is_ok());
        let target =
            parse_url("https://127.0.0.1:8443/auth/authorize").unwrap_or_else(|e| panic!("{e}"));
        assert!(target.tls);
        assert_eq!(target.hostname, "127.0.0.1");
        assert_eq!(
            parse_url("https://localhost/")
                .map(|t| t.addr.port())
                .unwrap_or_default(),
            443
        );
        assert!(parse_url("ftp://localhost:1/").is_err());
        assert!(parse_url("http://example.com:1/").is_err());
        assert!(parse_url("https://10.0.0.1:1/").is_err());
        assert!(parse_url("http://user@localhost:1/").is_err());
        assert!(parse_url("localhost:1/").is_err());
    }

    #[test]
    fn redirect_targets_resolve_against_the_page() {
        let base = "https://127.0.0.1:8443/auth/authorize?x=1";
        assert_eq!(
            resolve(base, "http://localhost:41899/callback?code=c").ok(),
            Some("http://localhost:41899/callback?code=c".to_owned())
        );
        assert_eq!(
            resolve(base, "/done").ok(),
            Some("https://127.0.0.1:8443/done".to_owned())
        );
        assert!(resolve(base, "relative").is_err());
        assert!(resolve(base, "//elsewhere/x").is_err());
    }
}
