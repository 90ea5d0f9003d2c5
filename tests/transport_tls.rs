//! TLS trust and pinning (PROTOCOL.md §1.2a) against a real rustls server
//! on 127.0.0.1 with an rcgen-made CA: the CA file, untrusted servers, SPKI
//! pins, and that the bearer token never reaches a server that failed
//! verification.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod transport_support;

use std::path::Path;

use autogpt_shim::transport::{
    Connector, Disposition, Incoming, ProxyConfig, TransportError, spki_sha256,
};
use transport_support::{Answer, Pki, Server, ServerSocket, drain};
use zeroize::Zeroizing;

fn connector(ca_file: Option<&Path>, pins: &[[u8; 32]]) -> Connector {
    Connector::new(ca_file, pins, ProxyConfig::direct()).unwrap()
}

fn token(text: &str) -> Zeroizing<String> {
    Zeroizing::new(text.to_owned())
}

/// Echoes one text message, then waits for the close.
fn echo_once(socket: &mut ServerSocket) {
    if let Ok(message) = socket.read() {
        socket.send(message).unwrap();
    }
    drain(socket);
}

fn read_message(reader: &mut autogpt_shim::transport::Reader) -> Vec<u8> {
    loop {
        match reader.read().unwrap() {
            Incoming::Message(bytes) => return bytes.to_vec(),
            Incoming::Idle => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn handshake_succeeds_with_the_ca_file_and_carries_the_bearer_token() {
    let pki = Pki::new("main");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, echo_once);
    let connection = connector(Some(&pki.ca_file), &[])
        .connect(&server.wss_url(), Some(&token("access-token-1")))
        .unwrap();
    assert!(connection.is_tls());
    assert!(!connection.via_proxy());
    assert_eq!(
        connection.tls_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );

    let upgrade = server.upgrade().unwrap();
    assert_eq!(
        upgrade.authorization.as_deref(),
        Some("Bearer access-token-1")
    );
    assert_eq!(upgrade.target, "/ws/local-executor");
    assert_eq!(upgrade.host, Some(format!("localhost:{}", server.port())));

    let (mut reader, writer) = connection.split().unwrap();
    writer.send_text(r#"{"type":"HELLO"}"#.to_owned()).unwrap();
    assert_eq!(read_message(&mut reader), br#"{"type":"HELLO"}"#);
    writer.close(1000, "").unwrap();
    server.join();
}

#[test]
fn a_tls_1_2_only_server_is_accepted() {
    let pki = Pki::new("tls12");
    let config = pki.server_config_with(&[&rustls::version::TLS12]);
    let server = Server::start(Some(config), Answer::Accept, |s| {
        drain(s);
    });
    let connection = connector(Some(&pki.ca_file), &[])
        .connect(&server.wss_url(), None)
        .unwrap();
    assert_eq!(
        connection.tls_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    let (_reader, writer) = connection.split().unwrap();
    writer.close(1000, "").unwrap();
}

#[test]
fn an_ip_literal_host_is_verified_against_the_certificates_ip_address() {
    let pki = Pki::new("ip");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |s| {
        drain(s);
    });
    let url = format!("wss://127.0.0.1:{}/ws/local-executor", server.port());
    connector(Some(&pki.ca_file), &[])
        .connect(&url, None)
        .unwrap();
}

#[test]
fn an_untrusted_certificate_is_refused_without_the_ca_file_and_gets_no_token() {
    let pki = Pki::new("untrusted");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |_| {});
    let error = connector(None, &[])
        .connect(&server.wss_url(), Some(&token("secret-token")))
        .unwrap_err();
    assert!(
        matches!(
            error,
            TransportError::Tls(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert_eq!(error.audit_reason(), "loop_error: tls");
    assert!(!error.to_string().contains("secret-token"));
    assert!(server.upgrade().is_none(), "the upgrade request went out");
}

#[test]
fn a_certificate_from_another_ca_is_refused_even_with_a_ca_file() {
    let trusted = Pki::new("trusted");
    let other = Pki::new("other");
    let server = Server::start(Some(other.server_config()), Answer::Accept, |_| {});
    let error = connector(Some(&trusted.ca_file), &[])
        .connect(&server.wss_url(), Some(&token("t")))
        .unwrap_err();
    assert!(matches!(error, TransportError::Tls(_)), "{error:?}");
    assert!(server.upgrade().is_none());
}

#[test]
fn a_matching_pin_lets_the_handshake_succeed() {
    let pki = Pki::new("pinned");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |s| {
        drain(s);
    });
    let other_pin = [0x11; 32];
    let connector = connector(Some(&pki.ca_file), &[other_pin, pki.leaf_spki_sha256]);
    assert!(connector.is_pinned());
    connector
        .connect(&server.wss_url(), Some(&token("t")))
        .unwrap();
    assert_eq!(
        server.upgrade().unwrap().authorization.as_deref(),
        Some("Bearer t")
    );
}

#[test]
fn pin_mismatch_fails_the_handshake_and_names_the_reason() {
    let pki = Pki::new("mismatch");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |_| {});
    let mut wrong = pki.leaf_spki_sha256;
    wrong[0] ^= 1;
    let error = connector(Some(&pki.ca_file), &[wrong])
        .connect(&server.wss_url(), Some(&token("pinned-secret")))
        .unwrap_err();
    assert!(matches!(error, TransportError::PinMismatch), "{error:?}");
    assert_eq!(error.disposition(), Disposition::Transient);
    assert_eq!(error.audit_reason(), "tls_pin_mismatch");
    assert!(!error.to_string().contains("pinned-secret"));
    assert!(
        server.upgrade().is_none(),
        "the token reached a mismatched server"
    );
}

#[test]
fn a_pin_does_not_replace_chain_verification() {
    let pki = Pki::new("pin-only");
    let server = Server::start(Some(pki.server_config()), Answer::Accept, |_| {});
    // The right pin, but the CA is not trusted: still refused.
    let error = connector(None, &[pki.leaf_spki_sha256])
        .connect(&server.wss_url(), None)
        .unwrap_err();
    assert!(matches!(error, TransportError::Tls(_)), "{error:?}");
}

#[test]
fn the_spki_digest_is_the_sha256_of_the_leafs_subject_public_key_info() {
    let pki = Pki::new("digest");
    assert_eq!(
        spki_sha256(pki.leaf.as_ref()).unwrap(),
        pki.leaf_spki_sha256
    );
}

fn ca_file_error(path: &Path) -> TransportError {
    Connector::new(Some(path), &[], ProxyConfig::direct()).unwrap_err()
}

#[test]
fn an_unreadable_ca_file_is_a_configuration_error() {
    let pki = Pki::new("missing");
    let missing = pki.ca_file.with_file_name("absent.pem");
    let error = ca_file_error(&missing);
    assert!(
        matches!(
            &error,
            TransportError::CaFile {
                problem: autogpt_shim::transport::CaFileProblem::Unreadable(_),
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.disposition(), Disposition::Config);
    assert!(error.to_string().contains("absent.pem"), "{error}");
}

#[test]
fn an_empty_ca_file_is_a_configuration_error() {
    let pki = Pki::new("empty");
    let error = ca_file_error(&pki.write_file("empty.pem", b""));
    assert!(
        matches!(
            &error,
            TransportError::CaFile {
                problem: autogpt_shim::transport::CaFileProblem::NoCertificates,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_terminal());
}

#[test]
fn a_ca_file_without_certificates_or_with_broken_pem_is_a_configuration_error() {
    let pki = Pki::new("keys");
    let only_key = ca_file_error(&pki.write_file("key.pem", pki.key_pem().as_bytes()));
    assert!(
        matches!(
            only_key,
            TransportError::CaFile {
                problem: autogpt_shim::transport::CaFileProblem::NoCertificates,
                ..
            }
        ),
        "{only_key:?}"
    );
    let truncated = &pki.ca_pem[..pki.ca_pem.len() / 2];
    let broken = ca_file_error(&pki.write_file("broken.pem", truncated.as_bytes()));
    assert!(
        matches!(
            broken,
            TransportError::CaFile {
                problem: autogpt_shim::transport::CaFileProblem::Malformed(_),
                ..
            }
        ),
        "{broken:?}"
    );
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let bad = ca_file_error(&pki.write_file("bad.pem", garbage.as_bytes()));
    assert!(
        matches!(
            bad,
            TransportError::CaFile {
                problem: autogpt_shim::transport::CaFileProblem::BadCertificate(_),
                ..
            }
        ),
        "{bad:?}"
    );
    assert!(bad.is_terminal());
}
