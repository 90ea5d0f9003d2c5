//! HTTP CONNECT proxies (PROTOCOL.md §1.2a) with a real proxy thread on
//! 127.0.0.1. Loopback hosts always bypass a proxy from the environment, so
//! the tunnel itself is exercised with a connector told to use the proxy
//! for every host; the environment rule is checked on its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod transport_support;

use std::ffi::OsString;
use std::time::Duration;

use autogpt_shim::transport::{Connector, Host, Incoming, ProxyConfig, TransportError};
use transport_support::{Answer, ConnectProxy, Pki, Server, ServerSocket};
use zeroize::Zeroizing;

fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

fn echo_once(socket: &mut ServerSocket) {
    if let Ok(message) = socket.read() {
        socket.send(message).unwrap();
    }
    transport_support::drain(socket);
}

#[test]
fn a_forced_proxy_carries_the_tls_connection_with_basic_credentials() {
    let pki = Pki::new("proxied");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, echo_once);
    let proxy = ConnectProxy::start(200);
    let connector = Connector::new(
        Some(&pki.ca_file),
        &[pki.leaf_spki_sha256],
        ProxyConfig::always(&proxy.url("alice:s%40cret@")).unwrap(),
    )
    .unwrap();
    let connection = connector
        .connect(
            &server.wss_url(),
            Some(&Zeroizing::new("bearer-through-proxy".to_owned())),
        )
        .unwrap();
    assert!(connection.via_proxy());

    let head = proxy.request(transport_support::PATIENCE).unwrap();
    let authority = format!("localhost:{}", server.port());
    assert!(
        head.starts_with(&format!("CONNECT {authority} HTTP/1.1\r\n")),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\nHost: {authority}\r\n")),
        "{head}"
    );
    // base64("alice:s@cret")
    assert!(
        head.contains("\r\nProxy-Authorization: Basic YWxpY2U6c0BjcmV0\r\n"),
        "{head}"
    );
    assert!(
        !head.contains("bearer-through-proxy"),
        "the proxy saw the token"
    );
    assert_eq!(
        server.upgrade().unwrap().authorization.as_deref(),
        Some("Bearer bearer-through-proxy")
    );

    let (mut reader, writer) = connection.split().unwrap();
    writer.send_text("through the tunnel".to_owned()).unwrap();
    loop {
        match reader.read().unwrap() {
            Incoming::Message(bytes) => {
                assert_eq!(bytes[..], b"through the tunnel"[..]);
                break;
            }
            Incoming::Idle => {}
            other => panic!("{other:?}"),
        }
    }
    writer.close(1000, "").unwrap();
}

#[test]
fn a_proxy_without_credentials_sends_no_proxy_authorization() {
    let pki = Pki::new("anonymous");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |s| {
        transport_support::drain(s);
    });
    let proxy = ConnectProxy::start(200);
    Connector::new(
        Some(&pki.ca_file),
        &[],
        ProxyConfig::always(&proxy.url("")).unwrap(),
    )
    .unwrap()
    .connect(&server.wss_url(), None)
    .unwrap();
    let head = proxy.request(transport_support::PATIENCE).unwrap();
    assert!(
        !head.to_ascii_lowercase().contains("proxy-authorization"),
        "{head}"
    );
}

#[test]
fn a_proxy_refusal_is_transient_and_nothing_reaches_the_server() {
    let pki = Pki::new("refused");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |_| {});
    let proxy = ConnectProxy::start(407);
    let error = Connector::new(
        Some(&pki.ca_file),
        &[],
        ProxyConfig::always(&proxy.url("bob:wrong@")).unwrap(),
    )
    .unwrap()
    .connect(&server.wss_url(), Some(&Zeroizing::new("t".to_owned())))
    .unwrap_err();
    assert!(
        matches!(error, TransportError::ProxyRefused { status: 407 }),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert_eq!(error.audit_reason(), "loop_error: proxy_http_407");
    assert!(!error.to_string().contains("wrong"));
    assert!(
        server
            .upgrades
            .recv_timeout(Duration::from_millis(200))
            .is_err()
    );
}

#[test]
fn an_environment_proxy_is_bypassed_for_loopback_hosts() {
    let pki = Pki::new("bypass");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |s| {
        transport_support::drain(s);
    });
    let proxy = ConnectProxy::start(200);
    let config = ProxyConfig::from_env(&env(&[("HTTPS_PROXY", &proxy.url(""))])).unwrap();
    let connection = Connector::new(Some(&pki.ca_file), &[], config)
        .unwrap()
        .connect(&server.wss_url(), None)
        .unwrap();
    assert!(!connection.via_proxy());
    assert!(proxy.request(Duration::from_millis(200)).is_none());
}

#[test]
fn an_environment_proxy_applies_to_remote_hosts_except_no_proxy_matches() {
    let config = ProxyConfig::from_env(&env(&[
        ("HTTPS_PROXY", "http://user:pw@proxy.corp:3128"),
        ("NO_PROXY", "internal.example,.lan"),
    ]))
    .unwrap();
    let remote = Host::Name("platform.autogpt.net".into());
    let server = config.route(&remote).unwrap();
    assert_eq!(server.host(), &Host::Name("proxy.corp".into()));
    assert_eq!(server.port(), 3128);
    assert!(server.has_credentials());
    assert!(!format!("{server:?}").contains("pw"));
    assert!(
        config
            .route(&Host::Name("internal.example".into()))
            .is_none()
    );
    assert!(
        config
            .route(&Host::Name("api.internal.example".into()))
            .is_none()
    );
    assert!(config.route(&Host::Name("nas.lan".into())).is_none());
    assert!(config.route(&Host::Name("localhost".into())).is_none());

    let everything = ProxyConfig::from_env(&env(&[
        ("https_proxy", "proxy.corp:3128"),
        ("no_proxy", "*"),
    ]))
    .unwrap();
    assert!(everything.route(&remote).is_none());
}

#[test]
fn an_unusable_proxy_variable_is_a_configuration_error() {
    let error = ProxyConfig::from_env(&env(&[("HTTPS_PROXY", "socks5://proxy:1080")])).unwrap_err();
    assert!(error.is_terminal());
    assert!(
        error.to_string().starts_with("HTTPS_PROXY cannot be used"),
        "{error}"
    );
}
