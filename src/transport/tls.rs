//! TLS for `wss://` (PROTOCOL.md §1.2a): trust anchors, the SPKI pin and
//! the client handshake.
//!
//! This module owns the rustls client configuration: the ring provider, TLS
//! 1.2 as the minimum (1.3 preferred), the built-in web PKI roots plus the
//! certificates of `--ca-file`, and — when pins are configured — a verifier
//! that first runs the normal chain verification and then requires the
//! leaf's SubjectPublicKeyInfo digest to be one of the pins. No switch that
//! weakens verification exists, session resumption is off so that every
//! handshake verifies the chain and the pin afresh, and nothing is sent
//! through a [`ClientConnection`] by this module except the handshake itself.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, OtherError,
    RootCertStore, SignatureScheme,
};
use sha2::{Digest, Sha256};

use super::error::{CaFileProblem, Stage, TransportError};
use super::stream::Paced;
use super::url::Host;
use crate::config::{SmallFileError, read_small_file};

/// Largest `--ca-file` read (a full public root bundle is about 250 KiB).
pub const MAX_CA_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The most TLS bytes rustls queues for sending before a write must wait.
const TLS_SEND_BUFFER_BYTES: usize = 1024 * 1024;

/// The certificates of the PEM file `path`; unreadable, oversized, malformed
/// or certificate-less files, and anything but a regular file, are
/// configuration errors.
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let ca_error = |problem| TransportError::CaFile {
        path: path.to_owned(),
        problem,
    };
    // A FIFO or device would block start-up or never end: regular files only.
    let bytes = read_small_file(path, MAX_CA_FILE_BYTES).map_err(|e| match e {
        SmallFileError::Io(e) => ca_error(CaFileProblem::Unreadable(e)),
        SmallFileError::TooLarge(max) => ca_error(CaFileProblem::TooLarge(max)),
    })?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ca_error(CaFileProblem::Malformed(e.to_string())))?;
    if certificates.is_empty() {
        return Err(ca_error(CaFileProblem::NoCertificates));
    }
    Ok(certificates)
}

/// The ready TLS client configuration of a connector.
#[derive(Clone)]
pub struct TlsSettings {
    config: Arc<ClientConfig>,
    pinned: bool,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("pinned", &self.pinned)
            .finish_non_exhaustive()
    }
}

impl TlsSettings {
    /// The web PKI roots plus `extra_roots` (already checked), and the pin
    /// set `pins` (empty: chain verification only).
    fn build(
        extra_roots: Vec<CertificateDer<'static>>,
        pins: &[[u8; 32]],
    ) -> Result<TlsSettings, TransportError> {
        let provider = Arc::new(ring::default_provider());
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for certificate in extra_roots {
            roots.add(certificate).map_err(TransportError::TlsSetup)?;
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TransportError::TlsSetup(rustls::Error::General(e.to_string())))?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TransportError::TlsSetup)?;
        let builder = if pins.is_empty() {
            builder.with_webpki_verifier(webpki)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinningVerifier {
                    inner: webpki,
                    pins: pins.to_vec(),
                }))
        };
        let mut config = builder.with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.resumption = Resumption::disabled();
        Ok(TlsSettings {
            config: Arc::new(config),
            pinned: !pins.is_empty(),
        })
    }

    /// The built-in web PKI roots plus the certificates of the PEM file
    /// `ca_file`, and the pin set `pins` (empty: chain verification only).
    pub fn new(ca_file: Option<&Path>, pins: &[[u8; 32]]) -> Result<TlsSettings, TransportError> {
        let extra = match ca_file {
            Some(path) => {
                let certificates = load_ca_file(path)?;
                // Check each certificate here so that a bad one is reported
                // against the file rather than as a handshake failure.
                let mut check = RootCertStore::empty();
                for certificate in &certificates {
                    check
                        .add(certificate.clone())
                        .map_err(|e| TransportError::CaFile {
                            path: path.to_owned(),
                            problem: CaFileProblem::BadCertificate(e),
                        })?;
                }
                certificates
            }
            None => Vec::new(),
        };
        TlsSettings::build(extra, pins)
    }

    /// Whether a pin set is enforced.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Runs the TLS handshake with `host` over `socket` to completion
    /// (bounded by the socket's opening deadline). The server's chain — and
    /// pin, if configured — have been verified when this returns `Ok`.
    pub(crate) fn handshake(
        &self,
        host: &Host,
        mut socket: Paced,
    ) -> Result<rustls::StreamOwned<ClientConnection, Paced>, TransportError> {
        let server_name = match host {
            Host::Name(name) => ServerName::try_from(name.clone())
                .map_err(|_| TransportError::Url(super::url::UrlError::BadHost))?,
            Host::V4(v4) => ServerName::IpAddress(std::net::IpAddr::V4(*v4).into()),
            Host::V6(v6) => ServerName::IpAddress(std::net::IpAddr::V6(*v6).into()),
        };
        let mut connection =
            ClientConnection::new(self.config.clone(), server_name).map_err(TransportError::Tls)?;
        connection.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES));
        while connection.is_handshaking() {
            connection
                .complete_io(&mut socket)
                .map_err(handshake_error)?;
        }
        Ok(rustls::StreamOwned::new(connection, socket))
    }
}

/// Classifies an I/O error from the handshake: a pin mismatch, another TLS
/// failure, the opening timeout, or a socket error.
fn handshake_error(error: io::Error) -> TransportError {
    if let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        if is_pin_mismatch(tls) {
            return TransportError::PinMismatch;
        }
        return TransportError::Tls(tls.clone());
    }
    match error.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => TransportError::Timeout(Stage::Tls),
        _ => TransportError::Io {
            stage: Stage::Tls,
            source: error,
        },
    }
}

fn is_pin_mismatch(error: &rustls::Error) -> bool {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            inner.downcast_ref::<PinMismatch>().is_some()
        }
        _ => false,
    }
}

/// The verifier's report that the chain is valid but the key is not pinned.
#[derive(Debug)]
struct PinMismatch;

impl fmt::Display for PinMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the server's public key matches none of the configured pins")
    }
}

impl std::error::Error for PinMismatch {}

/// The SHA-256 digest of the DER SubjectPublicKeyInfo of the X.509
/// certificate `certificate`, as rustls' certificate parser finds it.
pub fn spki_sha256(certificate: &[u8]) -> Result<[u8; 32], rustls::Error> {
    let certificate = CertificateDer::from(certificate);
    let parsed = ParsedCertificate::try_from(&certificate)?;
    Ok(Sha256::digest(parsed.subject_public_key_info()).into())
}

/// Web PKI verification, then the pin check on the leaf.
#[derive(Debug)]
struct PinningVerifier {
    inner: Arc<WebPkiServerVerifier>,
    pins: Vec<[u8; 32]>,
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let digest = spki_sha256(end_entity.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self.pins.contains(&digest) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(PinMismatch)),
            )))
        }
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

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
