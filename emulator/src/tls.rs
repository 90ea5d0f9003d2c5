//! Certificates and the TLS server configuration.
//!
//! Owns the throw-away PKI of one emulator: a CA generated at start, a leaf
//! for `127.0.0.1` and `localhost` signed by it, the CA certificate written
//! as PEM where a shim can be pointed at it (`--ca-file`), and the SHA-256 of
//! the leaf's SubjectPublicKeyInfo (`--tls-pin-sha256`).
//!
//! It must never write a private key to disk or reuse key material between
//! emulators: every start is a fresh PKI, so a shim that trusts one emulator
//! trusts nothing else. The crypto provider is `ring`, chosen explicitly
//! rather than through a process-wide default, so the emulator never depends
//! on what another crate in the same test binary installed.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::wire;

/// Which TLS versions the emulator's server offers.
///
/// The shim must accept TLS 1.2 and prefer 1.3 (`PROTOCOL.md` §1.2a); the
/// one-version settings let a test prove each half of that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersions {
    /// TLS 1.3 and TLS 1.2 (the default).
    #[default]
    Both,
    /// TLS 1.2 only.
    Tls12Only,
    /// TLS 1.3 only.
    Tls13Only,
}

/// Everything TLS-related that one running emulator holds.
pub(crate) struct TlsMaterial {
    pub(crate) server_config: Arc<ServerConfig>,
    pub(crate) ca_pem: String,
    pub(crate) ca_file: PathBuf,
    pub(crate) spki_sha256: String,
    /// A directory this emulator created for the CA file and removes on drop;
    /// `None` when the caller chose the CA file's path.
    pub(crate) owned_dir: Option<PathBuf>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TlsMaterial")
            .field("ca_file", &self.ca_file)
            .field("spki_sha256", &self.spki_sha256)
            .finish_non_exhaustive()
    }
}

impl Drop for TlsMaterial {
    fn drop(&mut self) {
        if let Some(dir) = &self.owned_dir {
            // Best effort: a leftover CA certificate in the temporary
            // directory is harmless (its key existed only in this process).
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Generates a CA and a leaf, writes the CA PEM (to `ca_file` when given,
/// else into a new private temporary directory) and builds the server
/// configuration.
pub(crate) fn generate(ca_file: Option<&Path>, versions: TlsVersions) -> io::Result<TlsMaterial> {
    let ca_key = KeyPair::generate().map_err(pki_error)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error)?;
    // A name of its own per emulator: a client holding another emulator's CA
    // then reports an unknown issuer instead of a bad signature.
    let mut tag = [0u8; 6];
    getrandom::fill(&mut tag).map_err(|error| io::Error::other(error.to_string()))?;
    ca_params.distinguished_name.push(
        DnType::CommonName,
        format!("autogpt-shim emulator CA {}", wire::hex_lower(&tag)),
    );
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(pki_error)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate().map_err(pki_error)?;
    // rcgen turns a name that parses as an IP address into an iPAddress SAN,
    // which is what a client connecting to 127.0.0.1 matches against.
    let mut leaf_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .map_err(pki_error)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "autogpt-shim emulator");
    leaf_params.is_ca = IsCa::ExplicitNoCa;
    leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_cert = leaf_params
        .signed_by(&leaf_key, &issuer)
        .map_err(pki_error)?;

    let spki = leaf_key.subject_public_key_info();
    let spki_sha256 = wire::hex_lower(ring::digest::digest(&ring::digest::SHA256, &spki).as_ref());

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let protocol_versions: &[&'static rustls::SupportedProtocolVersion] = match versions {
        TlsVersions::Both => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersions::Tls12Only => &[&rustls::version::TLS12],
        TlsVersions::Tls13Only => &[&rustls::version::TLS13],
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    // Only the leaf is served: a client anchors on the CA from the PEM file,
    // as it would on a private CA it was told to trust.
    let server_config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(protocol_versions)
        .map_err(tls_error)?
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone()], key)
        .map_err(tls_error)?;

    let ca_pem = ca_cert.pem();
    let (ca_file, owned_dir) = match ca_file {
        Some(path) => {
            fs::write(path, &ca_pem)?;
            (path.to_path_buf(), None)
        }
        None => {
            let dir = private_temp_dir()?;
            let path = dir.join("ca.pem");
            if let Err(error) = fs::write(&path, &ca_pem) {
                let _ = fs::remove_dir_all(&dir);
                return Err(error);
            }
            (path, Some(dir))
        }
    };

    Ok(TlsMaterial {
        server_config: Arc::new(server_config),
        ca_pem,
        ca_file,
        spki_sha256,
        owned_dir,
    })
}

/// A new directory under the system temporary directory with an
/// unpredictable name. `create_dir` fails on an existing name, so another
/// user cannot pre-create it and have us write into their directory.
fn private_temp_dir() -> io::Result<PathBuf> {
    let base = std::env::temp_dir();
    let mut last_error = None;
    for _ in 0..8 {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|error| io::Error::other(error.to_string()))?;
        let dir = base.join(format!(
            "autogpt-shim-emulator-{}",
            wire::hex_lower(&random)
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last_error = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("no free temporary directory name")))
}

fn pki_error(error: rcgen::Error) -> io::Error {
    io::Error::other(format!("certificate generation failed: {error}"))
}

fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::other(format!("TLS configuration failed: {error}"))
}
