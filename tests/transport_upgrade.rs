//! The upgrade request and its outcomes (PROTOCOL.md §1.3, AUTH.md §1):
//! 401/403/other statuses, the Authorization header present or absent,
//! plain text only to loopback, and failures before or during opening.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod transport_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use autogpt_shim::transport::{
    Connector, Disposition, Incoming, ProxyConfig, Stage, Step, TransportError, UrlError, WsUrl,
};
use transport_support::{Answer, PATIENCE, Pki, Server, ServerStream, drain};
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

/// A TLS server on 127.0.0.1 that reads one upgrade request and answers it
/// with `answer`, given the request's `Sec-WebSocket-Key`; the answer is
/// written up to `split(answer)` as one TLS record, then after 300 ms the
/// rest as another.
fn raw_server(
    pki: &Pki,
    answer: impl FnOnce(&str) -> Vec<u8> + Send + 'static,
    split: impl FnOnce(&[u8]) -> usize + Send + 'static,
) -> (u16, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = pki.server_config();
    let handle = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        tcp.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut stream = ServerStream::Tls(Box::new(rustls::StreamOwned::new(
            rustls::ServerConnection::new(config).unwrap(),
            tcp,
        )));
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") {
            assert_eq!(
                stream.read(&mut byte).unwrap(),
                1,
                "the request ended early"
            );
            request.push(byte[0]);
        }
        let request = String::from_utf8(request).unwrap();
        let key = request
            .lines()
            .find_map(|line| line.strip_prefix("Sec-WebSocket-Key: "))
            .unwrap()
            .to_owned();
        let bytes = answer(&key);
        let (first, second) = bytes.split_at(split(&bytes));
        stream.write_all(first).unwrap();
        stream.flush().unwrap();
        if !second.is_empty() {
            thread::sleep(Duration::from_millis(300));
            stream.write_all(second).unwrap();
            stream.flush().unwrap();
        }
        // Keep the connection open until the client is done with it.
        let _ = stream.read(&mut byte);
    });
    (port, handle)
}

fn head_length(bytes: &[u8]) -> usize {
    bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4
}

fn connect_raw(
    pki: &Pki,
    port: u16,
) -> Result<autogpt_shim::transport::Connection, TransportError> {
    Connector::new(Some(&pki.ca_file), &[], ProxyConfig::direct())
        .unwrap()
        .connect(
            &format!("wss://localhost:{port}/ws/local-executor"),
            Some(&token("tok")),
        )
}

#[test]
fn a_refusal_body_sent_after_its_head_still_gives_the_detail() {
    let pki = Pki::new("late-body");
    let body = br#"{"detail":"Session is not bound to this machine"}"#;
    let (port, server) = raw_server(
        &pki,
        move |_| {
            let mut bytes = format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            bytes.extend_from_slice(body);
            bytes
        },
        head_length,
    );
    let error = connect_raw(&pki, port).unwrap_err();
    match &error {
        TransportError::Forbidden { detail } => assert_eq!(
            detail.as_deref(),
            Some("Session is not bound to this machine")
        ),
        other => panic!("{other:?}"),
    }
    drop(error);
    server.join().unwrap();
}

#[test]
fn a_switch_with_a_wrong_accept_value_is_rejected() {
    let pki = Pki::new("bad-accept");
    let (port, server) = raw_server(
        &pki,
        |_| {
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n".to_vec()
        },
        |bytes| bytes.len() / 2,
    );
    let error = connect_raw(&pki, port).unwrap_err();
    assert!(
        matches!(&error, TransportError::UpgradeRejected(why) if why.contains("Sec-WebSocket-Accept")),
        "{error:?}"
    );
    assert_eq!(error.disposition(), Disposition::Transient);
    server.join().unwrap();
}

#[test]
fn a_switch_naming_an_extension_or_subprotocol_never_asked_for_is_rejected() {
    for extra in [
        "Sec-WebSocket-Extensions: permessage-deflate",
        "Sec-WebSocket-Protocol: chat",
    ] {
        let pki = Pki::new("extra");
        let (port, server) = raw_server(
            &pki,
            move |key| {
                format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{extra}\r\n\r\n",
                    tungstenite::handshake::derive_accept_key(key.as_bytes())
                )
                .into_bytes()
            },
            |bytes| bytes.len(),
        );
        let error = connect_raw(&pki, port).unwrap_err();
        assert!(
            matches!(&error, TransportError::UpgradeRejected(why) if why.contains("not asked for")),
            "{extra}: {error:?}"
        );
        server.join().unwrap();
    }
}

#[test]
fn a_message_sent_with_the_switch_is_not_lost() {
    let pki = Pki::new("tail");
    let (port, server) = raw_server(
        &pki,
        |key| {
            let mut bytes = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                tungstenite::handshake::derive_accept_key(key.as_bytes())
            )
            .into_bytes();
            // An unmasked text frame "hi" in the same write as the head.
            bytes.extend_from_slice(&[0x81, 0x02, b'h', b'i']);
            bytes
        },
        |bytes| bytes.len(),
    );
    let (mut reader, writer) = connect_raw(&pki, port).unwrap().split().unwrap();
    let until = Instant::now() + PATIENCE;
    let message = loop {
        match reader.read().unwrap() {
            Incoming::Idle if Instant::now() < until => {}
            other => break other,
        }
    };
    assert!(
        matches!(&message, Incoming::Message(m) if m[..] == b"hi"[..]),
        "{message:?}"
    );
    drop((reader, writer));
    server.join().unwrap();
}

fn observed(
    connector: &Connector,
    url: &str,
    token: Option<&Zeroizing<String>>,
) -> (Vec<Step>, Result<(), TransportError>) {
    let url = WsUrl::parse(url).unwrap();
    let mut steps = Vec::new();
    let outcome = match token {
        Some(token) => connector
            .connect_observed(&url, Some(token), &mut |step| steps.push(step))
            .map(|connection| {
                let (_reader, writer) = connection.split().unwrap();
                writer.close(1000, "").unwrap();
            }),
        None => connector.reach_observed(&url, &mut |step| steps.push(step)),
    };
    (steps, outcome)
}

#[test]
fn each_opening_step_is_reported_as_it_succeeds() {
    let pki = Pki::new("steps");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |s| {
        drain(s);
    });
    let connector = Connector::new(
        Some(&pki.ca_file),
        &[pki.leaf_spki_sha256],
        ProxyConfig::direct(),
    )
    .unwrap();
    let (steps, outcome) = observed(&connector, &server.wss_url(), Some(&token("tok")));
    outcome.unwrap();
    assert_eq!(steps.len(), 4, "{steps:?}");
    match &steps[0] {
        Step::Resolved {
            host,
            addresses,
            looked_up,
        } => {
            assert_eq!(host, "localhost");
            assert!(*looked_up);
            assert!(
                addresses.iter().all(|a| a.ip().is_loopback()),
                "{addresses:?}"
            );
        }
        other => panic!("not a resolution: {other:?}"),
    }
    assert_eq!(steps[1], Step::Connected { addr: server.addr });
    match &steps[2] {
        Step::Secured {
            version,
            pinned,
            spki_sha256,
        } => {
            assert!(version.is_some());
            assert!(*pinned);
            assert_eq!(spki_sha256.as_ref(), Some(&pki.leaf_spki_sha256));
        }
        other => panic!("not TLS: {other:?}"),
    }
    assert_eq!(steps[3], Step::Upgraded);
    assert_eq!(
        server.upgrade().unwrap().authorization.as_deref(),
        Some("Bearer tok")
    );
    server.join();
}

#[test]
fn a_failed_step_is_the_one_after_the_last_reported() {
    let pki = Pki::new("steps-pin");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |_| {});
    let connector =
        Connector::new(Some(&pki.ca_file), &[[7u8; 32]], ProxyConfig::direct()).unwrap();
    let (steps, outcome) = observed(&connector, &server.wss_url(), Some(&token("tok")));
    assert!(
        matches!(outcome, Err(TransportError::PinMismatch)),
        "{outcome:?}"
    );
    assert!(
        matches!(steps[..], [Step::Resolved { .. }, Step::Connected { .. }]),
        "{steps:?}"
    );
    assert!(server.upgrade().is_none());
}

#[test]
fn reaching_the_platform_proves_tls_and_sends_no_request() {
    let pki = Pki::new("steps-reach");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |_| {});
    let connector = Connector::new(Some(&pki.ca_file), &[], ProxyConfig::direct()).unwrap();
    let (steps, outcome) = observed(&connector, &server.wss_url(), None);
    outcome.unwrap();
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(matches!(
        steps[2],
        Step::Secured {
            pinned: false,
            spki_sha256: Some(_),
            ..
        }
    ));
    // The server read no upgrade request before the connection ended.
    assert!(server.upgrade().is_none());
    server.join();
}
