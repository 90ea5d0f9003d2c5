//! The OAuth requests' HTTP client (`Connector::post`) over real sockets:
//! TLS with the CA file and SPKI pins, the CONNECT proxy, plain text only to
//! loopback, no redirects followed, a bounded body.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod transport_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};

use autogpt_shim::transport::{Connector, ProxyConfig, TransportError};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use transport_support::{ConnectProxy, Pki};

/// An HTTPS server answering one request with `response`; the request
/// head and body it received come back on the channel.
fn https_once(config: Arc<ServerConfig>, response: &'static str) -> (u16, Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let Ok((tcp, _)) = listener.accept() else {
            return;
        };
        let Ok(conn) = ServerConnection::new(config) else {
            return;
        };
        let mut tls = StreamOwned::new(conn, tcp);
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = tls.read(&mut buf) {
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&request).into_owned());
        let _ = tls.write_all(response.as_bytes());
        let _ = tls.flush();
        tls.conn.send_close_notify();
        let _ = tls.flush();
    });
    (port, rx)
}

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";

#[test]
fn post_over_tls_with_the_ca_file_and_a_matching_pin() {
    let pki = Pki::new("http");
    let (port, requests) = https_once(pki.server_config(), OK);
    let connector = Connector::new(
        Some(&pki.ca_file),
        &[pki.leaf_spki_sha256],
        ProxyConfig::direct(),
    )
    .unwrap();
    let response = connector
        .post(
            &format!("https://localhost:{port}/api/oauth/token"),
            "application/x-www-form-urlencoded",
            b"grant_type=refresh_token&refresh_token=rt",
            1024,
        )
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body.as_slice(), b"{\"ok\":true}");
    let request = requests.recv().unwrap();
    assert!(
        request.starts_with("POST /api/oauth/token HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request.contains(&format!("\r\nHost: localhost:{port}\r\n")),
        "{request}"
    );
    assert!(request.ends_with("\r\n\r\ngrant_type=refresh_token&refresh_token=rt"));
}

#[test]
fn a_pin_mismatch_sends_nothing() {
    let pki = Pki::new("http-pin");
    let (port, requests) = https_once(pki.server_config(), OK);
    let connector =
        Connector::new(Some(&pki.ca_file), &[[7u8; 32]], ProxyConfig::direct()).unwrap();
    let error = connector
        .post(
            &format!("https://localhost:{port}/api/oauth/token"),
            "application/x-www-form-urlencoded",
            b"refresh_token=secret-refresh",
            1024,
        )
        .unwrap_err();
    assert!(matches!(error, TransportError::PinMismatch), "{error:?}");
    // The server saw no request at all (the handshake failed first).
    assert!(
        requests
            .recv()
            .map_or(true, |r| !r.contains("secret-refresh"))
    );
}

#[test]
fn post_goes_through_a_connect_proxy() {
    let pki = Pki::new("http-proxy");
    let (port, requests) = https_once(pki.server_config(), OK);
    let proxy = ConnectProxy::start(200);
    let connector = Connector::new(
        Some(&pki.ca_file),
        &[],
        ProxyConfig::always(&proxy.url("")).unwrap(),
    )
    .unwrap();
    let response = connector
        .post(
            &format!("https://localhost:{port}/api/oauth/revoke"),
            "application/json",
            b"{\"token\": \"t\"}",
            1024,
        )
        .unwrap();
    assert_eq!(response.status, 200);
    let head = proxy.request(transport_support::PATIENCE).unwrap();
    assert!(head.starts_with(&format!("CONNECT localhost:{port} HTTP/1.1\r\n")));
    assert!(!head.contains("\"token\""), "the proxy saw the body");
    assert!(requests.recv().unwrap().contains("POST /api/oauth/revoke"));
}

#[test]
fn redirects_are_statuses_and_large_bodies_are_refused() {
    let pki = Pki::new("http-redirect");
    let connector = Connector::new(Some(&pki.ca_file), &[], ProxyConfig::direct()).unwrap();
    let (port, _) = https_once(
        pki.server_config(),
        "HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example/\r\nContent-Length: 0\r\n\r\n",
    );
    let response = connector
        .post(
            &format!("https://localhost:{port}/t"),
            "text/plain",
            b"x",
            1024,
        )
        .unwrap();
    assert_eq!(response.status, 302);

    let (port, _) = https_once(
        pki.server_config(),
        "HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n",
    );
    let error = connector
        .post(
            &format!("https://localhost:{port}/t"),
            "text/plain",
            b"x",
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(error, TransportError::MessageTooLarge { .. }),
        "{error:?}"
    );
}

#[test]
fn plain_http_only_reaches_loopback() {
    let connector = Connector::new(None, &[], ProxyConfig::direct()).unwrap();
    let error = connector
        .post(
            "http://example.com/api/oauth/token",
            "text/plain",
            b"x",
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            TransportError::Url(_) | TransportError::NotLoopback { .. }
        ),
        "{error:?}"
    );
}
