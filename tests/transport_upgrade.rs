//! The upgrade request and its outcomes (PROTOCOL.md §1.3, AUTH.md §1):
//! 401/403/other statuses, the Authorization header present or absent,
//! plain text only to loopback, and failures before or during opening.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod transport_support;

use std::io::Read;
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use autogpt_shim::transport::{
    Connector, Disposition, ProxyConfig, Stage, TransportError, UrlError,
};
use transport_support::{Answer, PATIENCE, Pki, Server, drain};
use zeroize::Zeroizing;

fn plain_connector() -> Connector {
    Connector::new(None, &[], ProxyConfig::direct()).unwrap()
}

fn token(text: &str) -> Zeroizing<String> {
    Zeroizing::new(text.to_owned())
}

fn refused_with(status: u16) -> (TransportError, Option<String>) {
    let pki = Pki::new("status");
    let server = Server::start(Some(pki.server_config()), Answer::Status(status), |_| {});
    let error = Connector::new(Some(&pki.ca_file), &[], ProxyConfig::direct())
        .unwrap()
        .connect(&server.wss_url(), Some(&token("tok")))
        .unwrap_err();
    let authorization = server.upgrade().and_then(|u| u.authorization);
    (error, authorization)
}

#[test]
fn an_upgrade_answered_401_asks_for_a_token_refresh() {
    let (error, authorization) = refused_with(401);
    assert!(
        matches!(error, TransportError::Unauthorized { .. }),
        "{error:?}"
    );
    assert_eq!(error.disposition(), Disposition::RefreshToken);
    assert!(error.needs_token_refresh());
    assert!(!error.is_transient() && !error.is_terminal());
    assert_eq!(authorization.as_deref(), Some("Bearer tok"));
}

#[test]
fn an_upgrade_answered_403_is_a_refusal() {
    let (error, _) = refused_with(403);
    assert!(
        matches!(error, TransportError::Forbidden { .. }),
        "{error:?}"
    );
    assert_eq!(error.disposition(), Disposition::Refused);
    assert!(!error.is_terminal() && !error.is_transient());
    assert_eq!(error.audit_reason(), "loop_error: http_403");
}

#[test]
fn an_upgrade_answered_with_another_status_is_transient() {
    for status in [500, 502, 404, 426] {
        let (error, _) = refused_with(status);
        assert!(
            matches!(error, TransportError::UpgradeStatus(s) if s == status),
            "{error:?}"
        );
        assert!(error.is_transient());
        assert_eq!(error.audit_reason(), format!("loop_error: http_{status}"));
    }
}

#[test]
fn without_a_token_no_authorization_header_is_sent() {
    for no_token in [None, Some(token(""))] {
        let server = Server::start(None, Answer::Accept, |s| {
            drain(s);
        });
        let connection = plain_connector()
            .connect(&server.ws_url(), no_token.as_ref())
            .unwrap();
        assert!(!connection.is_tls());
        let upgrade = server.upgrade().unwrap();
        assert_eq!(upgrade.authorization, None);
        let (_reader, writer) = connection.split().unwrap();
        writer.close(1000, "").unwrap();
    }
}

#[test]
fn plain_ws_to_loopback_carries_the_token() {
    let server = Server::start(None, Answer::Accept, |s| {
        drain(s);
    });
    let url = format!("ws://localhost:{}/ws/local-executor/s%3A1", server.port());
    plain_connector()
        .connect(&url, Some(&token("dev-token")))
        .unwrap();
    let upgrade = server.upgrade().unwrap();
    assert_eq!(upgrade.authorization.as_deref(), Some("Bearer dev-token"));
    assert_eq!(upgrade.target, "/ws/local-executor/s%3A1");
}

#[test]
fn ws_to_a_non_loopback_host_is_refused_before_any_connection() {
    // Nothing is resolved or connected: the refusal is immediate.
    for url in [
        "ws://192.0.2.1/ws/local-executor",
        "ws://platform.example/ws/local-executor",
        "ws://[2001:db8::1]:80/",
    ] {
        let started = Instant::now();
        let error = plain_connector()
            .connect(url, Some(&token("never-sent")))
            .unwrap_err();
        assert!(
            matches!(error, TransportError::Url(UrlError::PlainTextToRemoteHost)),
            "{url}: {error:?}"
        );
        assert_eq!(error.disposition(), Disposition::Config);
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}

#[test]
fn malformed_urls_are_refused_before_any_connection() {
    for (url, problem) in [
        ("https://localhost/ws", UrlError::Scheme),
        ("wss://user:pw@localhost/ws", UrlError::Credentials),
        ("wss://localhost/ws#frag", UrlError::Fragment),
        ("wss://local host/ws", UrlError::BadCharacter),
    ] {
        let error = plain_connector().connect(url, None).unwrap_err();
        assert!(
            matches!(error, TransportError::Url(p) if p == problem),
            "{url}: {error:?}"
        );
    }
}

#[test]
fn a_token_that_cannot_be_a_header_is_refused_before_connecting() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://127.0.0.1:{}/", listener.local_addr().unwrap().port());
    let error = plain_connector()
        .connect(&url, Some(&token("abc\r\nX-Injected: 1")))
        .unwrap_err();
    assert!(matches!(error, TransportError::InvalidToken), "{error:?}");
    assert!(!error.to_string().contains("abc"));
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "a connection was opened");
}

#[test]
fn a_refused_tcp_connection_is_transient() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = plain_connector()
        .connect(&format!("ws://127.0.0.1:{port}/"), None)
        .unwrap_err();
    assert!(matches!(error, TransportError::Connect { .. }), "{error:?}");
    assert!(error.is_transient());
    assert_eq!(error.audit_reason(), "loop_error: connect");
}

/// Accepts one connection and reads it to its end without answering.
fn hold_silently(listener: &TcpListener) {
    let (mut stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut buf = [0u8; 1024];
    while stream.read(&mut buf).unwrap_or(0) > 0 {}
}

#[test]
fn a_server_that_never_answers_times_out_within_the_opening_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let holder = thread::spawn(move || hold_silently(&listener));
    let connector = Connector::new(None, &[], ProxyConfig::direct())
        .unwrap()
        .with_opening_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let error = connector
        .connect(&format!("wss://localhost:{port}/"), None)
        .unwrap_err();
    assert!(
        matches!(error, TransportError::Timeout(Stage::Tls)),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert_eq!(error.audit_reason(), "loop_error: timeout_tls");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < PATIENCE,
        "{took:?}"
    );
    holder.join().unwrap();
}

#[test]
fn an_upgrade_left_unanswered_times_out_in_the_upgrade_stage() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let holder = thread::spawn(move || hold_silently(&listener));
    let connector = Connector::new(None, &[], ProxyConfig::direct())
        .unwrap()
        .with_opening_timeout(Duration::from_millis(300));
    let error = connector
        .connect(&format!("ws://127.0.0.1:{port}/"), Some(&token("t")))
        .unwrap_err();
    assert!(
        matches!(error, TransportError::Timeout(Stage::Upgrade)),
        "{error:?}"
    );
    holder.join().unwrap();
}
