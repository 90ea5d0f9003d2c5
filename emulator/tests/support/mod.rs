//! A minimal shim-side client for testing the emulator: tungstenite over
//! rustls (ring), trusting only the emulator's CA file, plus HELLO frames
//! built by hand from PROTOCOL.md §4.2.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod fake;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, StreamOwned};
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::{Message, WebSocket};

pub const WAIT: Duration = Duration::from_secs(10);

/// The client's byte stream: TLS or plain TCP.
#[derive(Debug)]
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl ClientStream {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(tcp) => tcp,
            ClientStream::Tls(tls) => &tls.sock,
        }
    }

    pub fn tls(&self) -> Option<&ClientConnection> {
        match self {
            ClientStream::Plain(_) => None,
            ClientStream::Tls(tls) => Some(&tls.conn),
        }
    }
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

pub type Client = WebSocket<ClientStream>;

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub fn roots(ca_file: &Path) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    roots
}

/// A client configuration trusting exactly the certificates in `ca_file`.
pub fn trusting(ca_file: &Path) -> Arc<ClientConfig> {
    Arc::new(
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots(ca_file))
            .with_no_client_auth(),
    )
}

/// Connects to `url` (`ws://` or `wss://` on 127.0.0.1), with an optional
/// bearer token. `tls` is required for `wss://`.
pub fn connect(
    url: &str,
    tls: Option<Arc<ClientConfig>>,
    token: Option<&str>,
) -> Result<Client, tungstenite::Error> {
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let uri = request.uri().clone();
    let host = uri.host().unwrap().to_owned();
    let port = uri.port_u16().unwrap();
    let tcp = TcpStream::connect((host.as_str(), port))?;
    tcp.set_read_timeout(Some(WAIT))?;
    let stream = match tls {
        None => ClientStream::Plain(tcp),
        Some(config) => {
            let name = ServerName::try_from(host).unwrap();
            let conn = ClientConnection::new(config, name).unwrap();
            ClientStream::Tls(Box::new(StreamOwned::new(conn, tcp)))
        }
    };
    match tungstenite::client::client_with_config(request, stream, None) {
        Ok((ws, _response)) => Ok(ws),
        Err(HandshakeError::Failure(error)) => Err(error),
        Err(HandshakeError::Interrupted(_)) => Err(tungstenite::Error::Io(io::Error::new(
            io::ErrorKind::WouldBlock,
            "handshake interrupted",
        ))),
    }
}

/// Connects to the emulator's URL (or `path` under it) trusting its CA.
pub fn connect_to(emulator: &autogpt_shim_emulator::Emulator, url: &str) -> Client {
    let tls = emulator.ca_file().map(trusting);
    connect(url, tls, Some("test-token")).unwrap()
}

pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

pub fn uuid() -> String {
    autogpt_shim_emulator::wire::uuid_v4()
}

/// A valid HELLO of PROTOCOL.md §4.2.
pub fn hello(capabilities: &[&str], allowed_root: Option<&str>) -> Value {
    json!({
        "type": "HELLO",
        "id": uuid(),
        "ts": now(),
        "version": "1.1",
        "pending_capacity": null,
        "payload": {
            "shim_version": "0.1.0",
            "protocol_version": "1.1",
            "machine_id": "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f",
            "display_name": "test-host",
            "platform": "linux",
            "arch": "x86_64",
            "screen_resolution": null,
            "capabilities": capabilities,
            "allowed_root": allowed_root,
            "local_llm_models": [],
            "hardware_devices": [],
            "computer_use_features": [],
            "computer_use_features_coarse": [],
            "recording_channels": [],
            "recording_routes": []
        }
    })
}

/// A shim→platform frame with all six envelope keys.
pub fn frame(message_type: &str, id: &str, pending_capacity: Value, payload: Value) -> Value {
    json!({
        "type": message_type,
        "id": id,
        "ts": now(),
        "version": "1.1",
        "pending_capacity": pending_capacity,
        "payload": payload,
    })
}

pub fn send(ws: &mut Client, frame: &Value) {
    ws.send(Message::text(frame.to_string())).unwrap();
}

/// The next text or binary message as JSON, skipping pings and pongs.
pub fn read_json(ws: &mut Client) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Binary(bytes) => return serde_json::from_slice(&bytes).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a data message, got {other:?}"),
        }
    }
}

/// Sends a HELLO on `path`'s connection and returns the HELLO_ACK.
pub fn handshake(ws: &mut Client, hello: &Value) -> Value {
    send(ws, hello);
    read_json(ws)
}

/// A verifier that checks like WebPKI and remembers the leaf it was shown.
#[derive(Debug)]
pub struct RecordingVerifier {
    inner: Arc<WebPkiServerVerifier>,
    pub leaf: Mutex<Option<Vec<u8>>>,
}

impl RecordingVerifier {
    pub fn new(ca_file: &Path) -> Arc<Self> {
        let inner =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca_file)), provider())
                .build()
                .unwrap();
        Arc::new(RecordingVerifier {
            inner,
            leaf: Mutex::new(None),
        })
    }
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.leaf.lock().unwrap() = Some(end_entity.to_vec());
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Reads one DER TLV header: (tag, header length, content length).
fn der_header(data: &[u8]) -> (u8, usize, usize) {
    let tag = data[0];
    let first = data[1];
    if first < 0x80 {
        return (tag, 2, usize::from(first));
    }
    let count = usize::from(first & 0x7f);
    let mut length = 0usize;
    for &byte in &data[2..2 + count] {
        length = (length << 8) | usize::from(byte);
    }
    (tag, 2 + count, length)
}

/// The DER SubjectPublicKeyInfo of an X.509 certificate (RFC 5280 §4.1),
/// found by walking the TBSCertificate's fields.
pub fn spki_of(cert: &[u8]) -> Vec<u8> {
    let (_, header, _) = der_header(cert);
    let tbs = &cert[header..];
    let (_, tbs_header, tbs_length) = der_header(tbs);
    let mut rest = &tbs[tbs_header..tbs_header + tbs_length];
    // [0] version (optional), serialNumber, signature, issuer, validity,
    // subject, then subjectPublicKeyInfo.
    if rest[0] == 0xa0 {
        let (_, h, l) = der_header(rest);
        rest = &rest[h + l..];
    }
    for _ in 0..5 {
        let (_, h, l) = der_header(rest);
        rest = &rest[h + l..];
    }
    let (tag, h, l) = der_header(rest);
    assert_eq!(tag, 0x30, "SubjectPublicKeyInfo is a SEQUENCE");
    rest[..h + l].to_vec()
}

pub fn sha256_hex(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
