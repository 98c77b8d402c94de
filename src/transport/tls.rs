//! TLS settings (rustls with the ring provider), in one place: the client's trust (bundled
//! webpki roots, `--ca-cert`, or `--insecure`), SNI and ALPN, session resumption, and the
//! mock's server side. Certificates are verified unless the user says `--insecure`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::client::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::ServerConfig;
use rustls::{CertificateError, RootCertStore};

use super::Stream;

/// What the user said about certificates.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TlsOptions {
    /// PEM file of CA certificates trusted beside the bundled roots.
    pub ca_cert: Option<PathBuf>,
    /// Accept any certificate (`--insecure`): the traffic is still encrypted, but the
    /// server is not authenticated.
    pub insecure: bool,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration every https endpoint shares: one session cache, so that a
/// reconnect resumes its session instead of paying a full handshake.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
}

/// What stops TLS from being set up: a certificate or key file, a host name, or rustls
/// refusing the configuration. Each names the file or the host.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read PEM certificates: {message}")]
    ReadCerts { path: PathBuf, message: String },
    #[error("{0}: no PEM certificate in it")]
    NoCert(PathBuf),
    #[error("--ca-cert {path}: not a usable CA certificate: {message}")]
    BadCa { path: PathBuf, message: String },
    #[error("{path}: no private key in PEM form: {message}")]
    NoKey { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    CertAndKey { path: PathBuf, message: String },
    #[error("{host:?} is not a valid TLS server name: {message}")]
    ServerName { host: String, message: String },
    #[error("{0}")]
    Config(String),
}

/// Bad TLS files or names are the user's to fix (exit status 1).
impl From<TlsError> for crate::error::Error {
    fn from(e: TlsError) -> Self {
        crate::error::Error::Usage(e.to_string())
    }
}

impl ClientTls {
    pub fn new(options: &TlsOptions) -> Result<ClientTls, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let mut config = if options.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    danger::AcceptAnyCertificate(provider()),
                ))
                .with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let mut pinned = Vec::new();
            if let Some(path) = &options.ca_cert {
                for cert in read_certs(path)? {
                    roots.add(cert.clone()).map_err(|e| TlsError::BadCa {
                        path: path.clone(),
                        message: e.to_string(),
                    })?;
                    pinned.push(cert);
                }
            }
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(pinned::PinnedOrWebPki {
                    webpki,
                    pinned,
                }))
                .with_no_client_auth()
        };
        // HTTP/1.1 is all the senders speak; a server that offers only h2 says so at once.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// The settings for one endpoint: its host name goes in SNI and is what the certificate
    /// must name.
    pub fn target(&self, host: &str) -> Result<TlsTarget, TlsError> {
        let server_name =
            ServerName::try_from(host.to_string()).map_err(|e| TlsError::ServerName {
                host: host.to_string(),
                message: e.to_string(),
            })?;
        Ok(TlsTarget {
            config: Arc::clone(&self.config),
            server_name,
        })
    }
}

/// TLS for one endpoint.
#[derive(Clone, Debug)]
pub struct TlsTarget {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
}

impl TlsTarget {
    /// Starts a client session over a socket (the handshake runs as the socket allows:
    /// [`Stream::handshake`]).
    pub fn wrap(&self, tcp: TcpStream) -> std::io::Result<Stream> {
        Ok(Stream::tls(tcp, self.session()?))
    }

    /// A blocking session for the start-up probes.
    pub fn blocking(
        &self,
        tcp: std::net::TcpStream,
    ) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>> {
        Ok(rustls::StreamOwned::new(self.session()?, tcp))
    }

    fn session(&self) -> std::io::Result<rustls::ClientConnection> {
        rustls::ClientConnection::new(Arc::clone(&self.config), self.server_name.clone())
            .map_err(|e| std::io::Error::other(describe(&e)))
    }
}

/// The mock's TLS: one certificate chain and key from PEM files, ALPN http/1.1.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = read_certs(cert)?;
    let no_key = |message: String| TlsError::NoKey {
        path: key.to_path_buf(),
        message,
    };
    let pem = crate::sys::small_file::read(key, crate::sys::small_file::PEM_CAP)
        .map_err(|e| no_key(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| no_key(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::CertAndKey {
            path: cert.to_path_buf(),
            message: e.to_string(),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |message: String| TlsError::ReadCerts {
        path: path.to_path_buf(),
        message,
    };
    let pem = crate::sys::small_file::read(path, crate::sys::small_file::PEM_CAP)
        .map_err(|e| failed(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCert(path.to_path_buf()));
    }
    Ok(certs)
}

/// A TLS failure in words a user can act on, with the advice that fits it.
pub fn describe(e: &rustls::Error) -> String {
    const SKIP: &str = "or --insecure to skip verification";
    match e {
        rustls::Error::InvalidCertificate(c) => {
            let (what, advice) = match c {
                CertificateError::UnknownIssuer => (
                    "the server's certificate is not signed by a trusted CA (unknown issuer)"
                        .to_string(),
                    format!("give --ca-cert PATH with the server's CA or certificate, {SKIP}"),
                ),
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => (
                    format!("the server's certificate does not name this host: {c}"),
                    format!("use a host name the certificate names (its subjectAltName), {SKIP}"),
                ),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
                    format!("the server's certificate has expired: {c}"),
                    format!("renew it on the server, or check this machine's clock; {SKIP}"),
                ),
                _ if is_ca_used_as_end_entity(e) => (
                    "the server presents a self-signed CA certificate (CA:TRUE, as \
                         `openssl req -x509` makes them), which no CA this machine trusts signed"
                        .to_string(),
                    format!(
                        "give --ca-cert PATH with that certificate to trust it as it is, {SKIP}"
                    ),
                ),
                other => (
                    format!("the server's certificate was refused: {other}"),
                    SKIP.trim_start_matches("or ").to_string(),
                ),
            };
            format!("TLS certificate verification failed: {what} ({advice})")
        }
        rustls::Error::AlertReceived(rustls::AlertDescription::ProtocolVersion)
        | rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::ServerDoesNotSupportTls12Or13,
        ) => "TLS handshake failed: the server offers no TLS version llmreplay speaks; TLS 1.2 or \
              later is needed (the server may offer only TLS 1.0 or 1.1: enable 1.2 there)"
            .to_string(),
        rustls::Error::AlertReceived(alert) => {
            format!("TLS handshake refused by the peer (alert {alert:?})")
        }
        other => format!("TLS error: {other}"),
    }
}

/// A certificate made as a CA (most self-signed ones: `openssl req -x509` sets CA:TRUE)
/// presented as the server's own, which webpki refuses as an end entity.
fn is_ca_used_as_end_entity(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => {
            other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity)
        }
        _ => false,
    }
}

/// An I/O error in words: the TLS failure it carries, if any, else the error itself.
pub fn describe_io(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => describe(tls),
        None => e.to_string(),
    }
}

/// The usual checks, plus one case they refuse: the server presents exactly a certificate
/// given with `--ca-cert`, made as most self-signed ones are (`openssl req -x509` sets
/// CA:TRUE), which webpki will not take as an end entity. Its name is still checked.
mod pinned {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

    #[derive(Debug)]
    pub struct PinnedOrWebPki {
        pub webpki: Arc<WebPkiServerVerifier>,
        pub pinned: Vec<CertificateDer<'static>>,
    }

    impl ServerCertVerifier for PinnedOrWebPki {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            let refused = match self.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp,
                now,
            ) {
                Ok(verified) => return Ok(verified),
                Err(e) => e,
            };
            let given = self
                .pinned
                .iter()
                .any(|p| p.as_ref() == end_entity.as_ref());
            if !(given && super::is_ca_used_as_end_entity(&refused)) {
                return Err(refused);
            }
            let cert = webpki::EndEntityCert::try_from(end_entity)
                .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
            cert.verify_is_valid_for_subject_name(server_name)
                .map_err(|_| Error::InvalidCertificate(CertificateError::NotValidForName))?;
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.webpki.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.webpki.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.webpki.supported_verify_schemes()
        }
    }
}

/// Certificate checks switched off, for `--insecure` alone.
mod danger {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, Error, SignatureScheme};

    /// Accepts any certificate; the handshake's signatures are still checked, so the session
    /// is with whoever holds the certificate's key.
    #[derive(Debug)]
    pub struct AcceptAnyCertificate(pub Arc<CryptoProvider>);

    impl ServerCertVerifier for AcceptAnyCertificate {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that offers only TLS 1.0 or 1.1 answers the hello with a protocol-version
    /// alert, or with an old version: both say TLS 1.2 is needed.
    #[test]
    fn an_old_tls_server_is_told_apart_from_other_refusals() {
        for e in [
            rustls::Error::AlertReceived(rustls::AlertDescription::ProtocolVersion),
            rustls::Error::PeerIncompatible(
                rustls::PeerIncompatible::ServerDoesNotSupportTls12Or13,
            ),
        ] {
            assert!(describe(&e).contains("TLS 1.2 or later is needed"), "{e:?}");
        }
        let other = describe(&rustls::Error::AlertReceived(
            rustls::AlertDescription::HandshakeFailure,
        ));
        assert!(
            other.contains("HandshakeFailure") && !other.contains("1.2"),
            "{other}"
        );
    }
}
