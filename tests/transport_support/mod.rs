//! Real counterparts for the transport tests, all on 127.0.0.1: a test PKI
//! made with rcgen, a WebSocket server (rustls + tungstenite) that records
//! each upgrade request, and a small HTTP CONNECT proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Each test file uses part of this module.
#![allow(dead_code)]
// tungstenite's upgrade callback returns its error response by value.
#![allow(clippy::result_large_err)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use sha2::{Digest, Sha256};
use tungstenite::WebSocket;
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http::StatusCode;
use tungstenite::protocol::WebSocketConfig;

/// How long a test waits for something that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it.
pub struct Pki {
    pub ca_pem: String,
    pub leaf: CertificateDer<'static>,
    leaf_key: Vec<u8>,
    /// SHA-256 of the leaf's SubjectPublicKeyInfo, as rcgen encodes it.
    pub leaf_spki_sha256: [u8; 32],
    dir: tempfile::TempDir,
    /// `ca_pem` written to a file.
    pub ca_file: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        leaf_params.is_ca = IsCa::NoCa;
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf_params.use_authority_key_identifier_extension = true;
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        Pki {
            ca_pem: ca.pem(),
            leaf: leaf.der().clone(),
            leaf_spki_sha256: Sha256::digest(leaf_key.subject_public_key_info()).into(),
            leaf_key: leaf_key.serialize_der(),
            dir,
            ca_file,
        }
    }

    /// A file in this PKI's temporary directory.
    pub fn write_file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// The leaf's private key in PEM (a PEM file without certificates).
    pub fn key_pem(&self) -> String {
        KeyPair::try_from(self.leaf_key.as_slice())
            .unwrap()
            .serialize_pem()
    }

    /// A rustls server configuration presenting the leaf, TLS 1.2 and 1.3.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server_config_with(rustls::DEFAULT_VERSIONS)
    }

    pub fn server_config_with(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.clone()));
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(versions)
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![self.leaf.clone()], key)
                .unwrap();
        Arc::new(config)
    }
}

/// The server side of one connection, plain or TLS.
pub enum ServerStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl ServerStream {
    pub fn tcp(&mut self) -> &mut TcpStream {
        match self {
            ServerStream::Plain(tcp) => tcp,
            ServerStream::Tls(tls) => &mut tls.sock,
        }
    }

    /// Writes `bytes` as application data, split across two TCP writes at
    /// `split` (for TLS: the encrypted record(s) are split there,
    /// proportionally), with `pause` in between.
    pub fn write_split(&mut self, bytes: &[u8], split: usize, pause: Duration) {
        match self {
            ServerStream::Plain(tcp) => {
                tcp.write_all(&bytes[..split]).unwrap();
                tcp.flush().unwrap();
                thread::sleep(pause);
                tcp.write_all(&bytes[split..]).unwrap();
            }
            ServerStream::Tls(tls) => {
                tls.conn.writer().write_all(bytes).unwrap();
                let mut records = Vec::new();
                while tls.conn.wants_write() {
                    tls.conn.write_tls(&mut records).unwrap();
                }
                let cut = records.len() * split / bytes.len();
                tls.sock.write_all(&records[..cut]).unwrap();
                tls.sock.flush().unwrap();
                thread::sleep(pause);
                tls.sock.write_all(&records[cut..]).unwrap();
            }
        }
    }
}

impl Read for ServerStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(tcp) => tcp.read(buf),
            ServerStream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for ServerStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(tcp) => tcp.write(buf),
            ServerStream::Tls(tls) => tls.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            ServerStream::Plain(tcp) => tcp.flush(),
            ServerStream::Tls(tls) => tls.flush(),
        }
    }
}

/// What the server saw of one upgrade request.
#[derive(Debug, Clone)]
pub struct Upgrade {
    pub target: String,
    pub host: Option<String>,
    pub authorization: Option<String>,
}

/// How the server answers the upgrade.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Accept,
    Status(u16),
}

pub type ServerSocket = WebSocket<ServerStream>;

/// A one-connection WebSocket server on 127.0.0.1.
pub struct Server {
    pub addr: SocketAddr,
    pub upgrades: Receiver<Upgrade>,
    handle: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves one connection: TLS with `tls` (plain without), the upgrade
    /// answered with `answer`, then `behaviour` runs on the WebSocket.
    pub fn start<F>(tls: Option<Arc<ServerConfig>>, answer: Answer, behaviour: F) -> Server
    where
        F: FnOnce(&mut ServerSocket) + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (record, upgrades) = channel();
        let handle = thread::spawn(move || {
            let Ok((tcp, _)) = listener.accept() else {
                return;
            };
            tcp.set_read_timeout(Some(PATIENCE)).unwrap();
            let stream = match tls {
                Some(config) => ServerStream::Tls(Box::new(StreamOwned::new(
                    ServerConnection::new(config).unwrap(),
                    tcp,
                ))),
                None => ServerStream::Plain(tcp),
            };
            let config = WebSocketConfig::default()
                .max_message_size(None)
                .max_frame_size(None);
            let callback = move |request: &Request, response: Response| {
                let header = |name: &str| {
                    request
                        .headers()
                        .get(name)
                        .map(|v| v.to_str().unwrap().to_owned())
                };
                let _ = record.send(Upgrade {
                    target: request.uri().to_string(),
                    host: header("host"),
                    authorization: header("authorization"),
                });
                match answer {
                    Answer::Accept => Ok(response),
                    Answer::Status(code) => {
                        let mut refusal = ErrorResponse::new(None);
                        *refusal.status_mut() = StatusCode::from_u16(code).unwrap();
                        Err(refusal)
                    }
                }
            };
            if let Ok(mut socket) =
                tungstenite::accept_hdr_with_config(stream, callback, Some(config))
            {
                behaviour(&mut socket);
            }
        });
        Server {
            addr,
            upgrades,
            handle: Some(handle),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `wss://localhost:<port>/ws/local-executor`.
    pub fn wss_url(&self) -> String {
        format!("wss://localhost:{}/ws/local-executor", self.port())
    }

    /// `ws://127.0.0.1:<port>/ws/local-executor`.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}/ws/local-executor", self.port())
    }

    /// The first upgrade request, if one arrives.
    pub fn upgrade(&self) -> Option<Upgrade> {
        self.upgrades.recv_timeout(PATIENCE).ok()
    }

    /// Waits for the server thread; panics if the behaviour panicked.
    pub fn join(mut self) {
        if let Some(handle) = self.handle.take() {
            handle.join().expect("the server thread panicked");
        }
    }
}

/// Reads messages until the close handshake ends, answering pings; returns
/// the data messages read.
pub fn drain(socket: &mut ServerSocket) -> Vec<tungstenite::Message> {
    let mut seen = Vec::new();
    loop {
        match socket.read() {
            Ok(message @ (tungstenite::Message::Text(_) | tungstenite::Message::Binary(_))) => {
                seen.push(message)
            }
            Ok(_) => {}
            Err(_) => return seen,
        }
    }
}

/// A one-connection HTTP CONNECT proxy on 127.0.0.1 that records the
/// request head, answers with `status`, and relays bytes after a 200.
pub struct ConnectProxy {
    pub addr: SocketAddr,
    pub requests: Receiver<String>,
}

impl ConnectProxy {
    pub fn start(status: u16) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (record, requests) = channel();
        thread::spawn(move || {
            let Ok((mut client, _)) = listener.accept() else {
                return;
            };
            client.set_read_timeout(Some(PATIENCE)).unwrap();
            let head = read_head(&mut client);
            let target = head
                .strip_prefix("CONNECT ")
                .and_then(|rest| rest.split(' ').next())
                .unwrap()
                .to_owned();
            record.send(head).unwrap();
            if status != 200 {
                let _ = client.write_all(format!("HTTP/1.1 {status} Refused\r\n\r\n").as_bytes());
                return;
            }
            // The test certificates name localhost and 127.0.0.1; the proxy
            // resolves the target itself, as a real one does.
            let upstream = TcpStream::connect(target.replace("localhost", "127.0.0.1")).unwrap();
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .unwrap();
            client.set_read_timeout(None).unwrap();
            relay(client, upstream);
        });
        ConnectProxy { addr, requests }
    }

    pub fn url(&self, userinfo: &str) -> String {
        format!("http://{userinfo}127.0.0.1:{}", self.addr.port())
    }

    pub fn request(&self, wait: Duration) -> Option<String> {
        self.requests.recv_timeout(wait).ok()
    }
}

fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

fn relay(client: TcpStream, upstream: TcpStream) {
    let (client_reader, upstream_writer) =
        (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let forward = thread::spawn(move || copy_then_shutdown(client_reader, upstream_writer));
    copy_then_shutdown(upstream, client);
    let _ = forward.join();
}

fn copy_then_shutdown(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// A channel pair for a server behaviour to report what it observed.
pub fn report<T>() -> (Sender<T>, Receiver<T>) {
    channel()
}
