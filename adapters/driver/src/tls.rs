//! TLS for keepwire connections (feature `tls`): the configuration the runtime crates' `tls`
//! features share, and how a TLS failure becomes a typed [`HandshakeError`].
//!
//! Built on [rustls](https://docs.rs/rustls) with one crypto provider, *ring* (the one rcgen
//! uses for the tests' certificates too, so a workspace builds one); no OpenSSL. The runtime
//! crates run the handshake with tokio-rustls (`keepwire-tokio`) or futures-rustls
//! (`keepwire-smol`, `keepwire-async-std`) in a [`HandshakeHook`](crate::HandshakeHook), under
//! the connection's setup deadline, then install the session as the connection's stream behind
//! a [`KernelAccounted`](crate::KernelAccounted) layer.
//!
//! # The kernel boundary, and how much the TLS layer holds
//!
//! A frame counts as written (its write timeout stops, it leaves the watermarks) only once its
//! *ciphertext* has been accepted by the kernel, not when rustls took the plaintext: a write
//! through the TLS stream reports its bytes only when rustls's outgoing buffer has been
//! emptied into the socket, and until then the frames stay handed out and counted (see
//! [`IoStream`](crate::IoStream#the-kernel-boundary)). So a stalled TLS peer trips the write
//! timeout at the same instant as a stalled plaintext peer.
//!
//! The TLS layer's outgoing buffer is bounded by [`BUFFER_LIMIT`] (64 KiB): rustls encrypts at
//! most that much plaintext into it, in at most four records of 16 KiB, each with at most
//! 29 bytes of header, nonce and tag (22 with TLS 1.3), plus the odd control record (an
//! alert, a key update) — [`MAX_BUFFERED`], 65,700 bytes, per connection. A stalled
//! connection therefore pins at most `high_watermark` + one frame (what keepwire's watermarks
//! bound) + [`MAX_BUFFERED`] of outgoing memory. Inbound, rustls keeps at most one record
//! being received (16 KiB + overhead) and 16 KiB of decrypted plaintext not yet read.
//!
//! # Failures
//!
//! A certificate that does not verify (unknown issuer, wrong name, expired, ...) or a server
//! that rejects ours ends the handshake with [`HandshakeError::certificate`]: final, like an
//! authentication failure (the node enters `AuthFailed` and the requests waiting on it end at
//! once with `CloseReason::CertificateRejected`). Any other TLS failure is [`HandshakeError::failed`];
//! a handshake that stalls is cut by the setup timeout. With TLS 1.3 a server that rejects the
//! client's certificate says so only after the client has finished its side of the
//! handshake: the connection is ready by then, and the alert arrives with a later read. The
//! driver reads it for what it is, the same final certificate failure (a
//! [`ClientEvent::HandshakeFailed`](crate::ClientEvent::HandshakeFailed), `AuthFailed`, and
//! `CloseReason::CertificateRejected` for every request the connection held, written or
//! not), not a retryable I/O error.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

pub use rustls;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, ClientConfig, RootCertStore};

use crate::handshake::{HandshakeError, HandshakeIo};

/// The most plaintext rustls may hold encrypted and not yet written to the socket, per
/// connection (the runtime crates set it on every session; it is also rustls's default).
pub const BUFFER_LIMIT: usize = 64 * 1024;

/// The most outgoing bytes a connection's TLS layer can hold beyond the frames keepwire
/// counts: [`BUFFER_LIMIT`] of plaintext, encrypted into at most four records of at most
/// 29 bytes of overhead each, and some slack for a control record.
pub const MAX_BUFFERED: usize = BUFFER_LIMIT + 4 * 29 + 48;

/// A client TLS configuration: which servers to trust (root certificates or a verifier of
/// your own), the name to check in their certificates, and optionally a client certificate.
///
/// ```
/// # fn demo(ca_pem: &[u8]) -> Result<(), keepwire_driver::tls::TlsConfigError> {
/// use keepwire_driver::tls::TlsConfig;
///
/// let tls = TlsConfig::builder()
///     .roots_pem(ca_pem)          // or .root(der), .root_store(..), .verifier(..)
///     .server_name("db.example")  // default: the server's IP address
///     .build()?;
/// # let _ = tls;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl TlsConfig {
    /// Starts a configuration: trust nothing yet, no client certificate.
    pub fn builder() -> TlsConfigBuilder {
        TlsConfigBuilder::default()
    }

    /// A configuration from a rustls `ClientConfig` of your own, for anything the builder
    /// does not offer (its crypto provider is yours to choose).
    pub fn from_rustls(client: Arc<ClientConfig>) -> Self {
        Self {
            client,
            server_name: None,
        }
    }

    /// The name to check in the server's certificate (and send as SNI when it is a DNS
    /// name); by default the node's host name (a node added by name) or else the server's IP
    /// address is checked.
    pub fn with_server_name(mut self, name: ServerName<'static>) -> Self {
        self.server_name = Some(name);
        self
    }

    /// The rustls configuration.
    pub fn rustls(&self) -> &Arc<ClientConfig> {
        &self.client
    }

    /// The name to verify for the server a handshake is connected to: the configured one;
    /// else the node's host name, for a node added by name ([`HandshakeIo::host`]); else the
    /// server's IP address.
    pub fn server_name_of(&self, io: &HandshakeIo) -> Result<ServerName<'static>, HandshakeError> {
        if let (None, Some(host)) = (&self.server_name, io.host()) {
            return ServerName::try_from(host.to_owned()).map_err(|_| {
                HandshakeError::failed(format!(
                    "TLS: the node's host name {host:?} is not a DNS name to check a certificate against"
                ))
            });
        }
        self.server_name_for(io.socket().peer_addr().ok())
    }

    /// The name to verify for a server at `peer`: the configured one, or `peer`'s IP address.
    pub fn server_name_for(
        &self,
        peer: Option<SocketAddr>,
    ) -> Result<ServerName<'static>, HandshakeError> {
        match (&self.server_name, peer) {
            (Some(name), _) => Ok(name.clone()),
            (None, Some(peer)) => Ok(ServerName::IpAddress(peer.ip().into())),
            (None, None) => Err(HandshakeError::failed(
                "TLS: no server name configured and the peer's address is unknown",
            )),
        }
    }
}

/// Builds a [`TlsConfig`].
pub struct TlsConfigBuilder {
    roots: RootCertStore,
    verifier: Option<Arc<dyn ServerCertVerifier>>,
    server_name: Option<String>,
    client_auth: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    alpn: Vec<Vec<u8>>,
    error: Option<TlsConfigError>,
}

impl Default for TlsConfigBuilder {
    fn default() -> Self {
        Self {
            roots: RootCertStore::empty(),
            verifier: None,
            server_name: None,
            client_auth: None,
            alpn: Vec::new(),
            error: None,
        }
    }
}

impl TlsConfigBuilder {
    /// Trusts `root` (DER) as a certificate authority.
    pub fn root(mut self, root: CertificateDer<'static>) -> Self {
        if let Err(e) = self.roots.add(root) {
            self.fail(TlsConfigError::Certificate(format!(
                "a root certificate: {e}"
            )));
        }
        self
    }

    /// Trusts every certificate in `pem` as a certificate authority.
    pub fn roots_pem(mut self, pem: &[u8]) -> Self {
        let mut found = false;
        for cert in CertificateDer::pem_slice_iter(pem) {
            match cert {
                Ok(cert) => {
                    found = true;
                    self = self.root(cert);
                }
                Err(e) => {
                    self.fail(TlsConfigError::Certificate(format!("root PEM: {e}")));
                    return self;
                }
            }
        }
        if !found {
            self.fail(TlsConfigError::Certificate(
                "root PEM: no certificate in it".into(),
            ));
        }
        self
    }

    /// Trusts the certificate authorities of `roots` (in addition to any added before).
    pub fn root_store(mut self, roots: RootCertStore) -> Self {
        self.roots.roots.extend(roots.roots);
        self
    }

    /// Verifies servers with `verifier` instead of root certificates (certificate pinning, a
    /// private PKI, ...). Its supported signature schemes must be ring's.
    pub fn verifier(mut self, verifier: Arc<dyn ServerCertVerifier>) -> Self {
        self.verifier = Some(verifier);
        self
    }

    /// The name to check in the server's certificate (a DNS name or an IP address); by
    /// default each node's host name (for a node added by name) or else the server's IP
    /// address is checked.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Presents `chain` (leaf first) with its private key `key` when a server asks for a
    /// client certificate.
    pub fn client_cert(
        mut self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Self {
        self.client_auth = Some((chain, key));
        self
    }

    /// [`client_cert`](Self::client_cert) from PEM: the chain's certificates, and the key
    /// (PKCS#8, PKCS#1 or SEC1).
    pub fn client_cert_pem(mut self, chain_pem: &[u8], key_pem: &[u8]) -> Self {
        let chain: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(chain_pem).collect();
        match (chain, PrivateKeyDer::from_pem_slice(key_pem)) {
            (Ok(chain), Ok(key)) if !chain.is_empty() => self.client_cert(chain, key),
            (Ok(_), Ok(_)) => {
                self.fail(TlsConfigError::ClientCert(
                    "no certificate in the chain".into(),
                ));
                self
            }
            (Err(e), _) | (_, Err(e)) => {
                self.fail(TlsConfigError::ClientCert(e.to_string()));
                self
            }
        }
    }

    /// Offers these application protocols (ALPN), most preferred first.
    pub fn alpn(mut self, protocols: Vec<Vec<u8>>) -> Self {
        self.alpn = protocols;
        self
    }

    fn fail(&mut self, error: TlsConfigError) {
        self.error.get_or_insert(error);
    }

    /// Checks the configuration and builds it, on ring's provider with rustls's safe default
    /// protocol versions (TLS 1.3 and 1.2).
    pub fn build(self) -> Result<TlsConfig, TlsConfigError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let server_name = self
            .server_name
            .map(|name| {
                ServerName::try_from(name.clone()).map_err(|_| TlsConfigError::ServerName(name))
            })
            .transpose()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsConfigError::Rustls)?;
        let builder = match self.verifier {
            Some(verifier) => builder
                .dangerous()
                .with_custom_certificate_verifier(verifier),
            None if self.roots.is_empty() => return Err(TlsConfigError::NoTrust),
            None => builder.with_root_certificates(self.roots),
        };
        let mut client = match self.client_auth {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsConfigError::ClientCert(e.to_string()))?,
            None => builder.with_no_client_auth(),
        };
        client.alpn_protocols = self.alpn;
        Ok(TlsConfig {
            client: Arc::new(client),
            server_name,
        })
    }
}

impl fmt::Debug for TlsConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfigBuilder")
            .field("roots", &self.roots.len())
            .field("verifier", &self.verifier)
            .field("server_name", &self.server_name)
            .field("client_cert", &self.client_auth.is_some())
            .field("alpn", &self.alpn)
            .finish()
    }
}

/// Why a [`TlsConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// Neither a root certificate nor a verifier was given: no server could be trusted.
    #[error("TLS: no root certificate and no verifier: no server could be trusted")]
    NoTrust,
    /// A root certificate could not be read or used.
    #[error("TLS: {0}")]
    Certificate(String),
    /// The client certificate or its key could not be read or used.
    #[error("TLS client certificate: {0}")]
    ClientCert(String),
    /// Not a DNS name nor an IP address.
    #[error("TLS: invalid server name {0:?}")]
    ServerName(String),
    /// rustls refused the configuration.
    #[error("TLS: {0}")]
    Rustls(rustls::Error),
}

/// The typed handshake failure for an error of a TLS handshake (tokio-rustls and
/// futures-rustls wrap rustls's errors in `io::Error`): a rejected certificate, ours or the
/// server's, is [`HandshakeError::certificate`]; anything else [`HandshakeError::failed`].
pub fn handshake_error(error: &io::Error) -> HandshakeError {
    let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return HandshakeError::failed(format!("TLS handshake: {error}"));
    };
    match tls {
        rustls::Error::InvalidCertificate(e) => {
            HandshakeError::certificate(format!("the server's certificate: {e}"))
        }
        rustls::Error::InvalidCertRevocationList(e) => {
            HandshakeError::certificate(format!("a certificate revocation list: {e:?}"))
        }
        rustls::Error::NoCertificatesPresented => {
            HandshakeError::certificate("the server presented no certificate")
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::AccessDenied),
        ) => HandshakeError::certificate(format!("the server rejected our certificate: {alert:?}")),
        other => HandshakeError::failed(format!("TLS handshake: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HandshakeErrorKind;

    /// The bounds the module's documentation states: 64 KiB of plaintext, and 65,700 bytes
    /// held at most once encrypted (four full records' overhead and a control record's).
    #[test]
    fn the_documented_buffer_bounds() {
        assert_eq!(BUFFER_LIMIT, 65_536);
        assert_eq!(MAX_BUFFERED, 65_700);
        let records = BUFFER_LIMIT.div_ceil(16 * 1024);
        assert!(
            MAX_BUFFERED >= BUFFER_LIMIT + records * 29,
            "{MAX_BUFFERED}"
        );
    }

    /// A self-signed certificate for `localhost` and its key, PEM.
    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Every setting of the builder reaches the rustls configuration: a root store alone is
    /// trust enough, the client certificate (PEM or DER) is offered, the ALPN protocols in
    /// their order; and none of them when not set.
    #[test]
    fn the_builder_carries_every_setting_into_rustls() {
        let (cert, key) = self_signed();
        let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let mut store = RootCertStore::empty();
        store.add(der.clone()).unwrap();
        let builder = TlsConfig::builder()
            .root_store(store)
            .client_cert_pem(cert.as_bytes(), key.as_bytes())
            .alpn(vec![b"postgresql".to_vec(), b"h2".to_vec()]);
        let shown = format!("{builder:?}");
        assert!(
            shown.contains("roots: 1") && shown.contains("client_cert: true"),
            "{shown}"
        );
        let tls = builder.build().unwrap();
        assert!(tls.rustls().client_auth_cert_resolver.has_certs());
        assert_eq!(
            tls.rustls().alpn_protocols,
            [b"postgresql".to_vec(), b"h2".to_vec()]
        );
        let key_der = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let tls = TlsConfig::builder()
            .root(der)
            .client_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                key_der,
            )
            .build()
            .unwrap();
        assert!(tls.rustls().client_auth_cert_resolver.has_certs());
        let plain = TlsConfig::builder()
            .roots_pem(cert.as_bytes())
            .build()
            .unwrap();
        assert!(!plain.rustls().client_auth_cert_resolver.has_certs());
        assert!(plain.rustls().alpn_protocols.is_empty());
    }

    /// The first mistake is the one `build` reports, whatever comes after it; a client
    /// certificate needs a certificate and a key.
    #[test]
    fn the_first_error_is_the_one_reported() {
        let (cert, key) = self_signed();
        let error = TlsConfig::builder()
            .root(CertificateDer::from(vec![1, 2, 3]))
            .roots_pem(cert.as_bytes())
            .build()
            .unwrap_err();
        assert!(
            matches!(&error, TlsConfigError::Certificate(why) if why.starts_with("a root certificate")),
            "{error}"
        );
        let trusting = || TlsConfig::builder().roots_pem(cert.as_bytes());
        assert_eq!(
            trusting()
                .client_cert_pem(b"", key.as_bytes())
                .build()
                .unwrap_err(),
            TlsConfigError::ClientCert("no certificate in the chain".into())
        );
        let no_key = trusting()
            .client_cert_pem(cert.as_bytes(), b"not a key")
            .build()
            .unwrap_err();
        assert!(matches!(no_key, TlsConfigError::ClientCert(_)), "{no_key}");
    }

    #[test]
    fn a_configuration_needs_something_to_trust() {
        assert_eq!(
            TlsConfig::builder().build().unwrap_err(),
            TlsConfigError::NoTrust
        );
        let error = TlsConfig::builder()
            .roots_pem(b"not pem")
            .build()
            .unwrap_err();
        assert!(matches!(error, TlsConfigError::Certificate(_)), "{error}");
    }

    #[test]
    fn a_bad_server_name_is_refused_when_building() {
        #[derive(Debug)]
        struct AnyServer;
        impl ServerCertVerifier for AnyServer {
            fn verify_server_cert(
                &self,
                _: &CertificateDer<'_>,
                _: &[CertificateDer<'_>],
                _: &ServerName<'_>,
                _: &[u8],
                _: rustls::pki_types::UnixTime,
            ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
                Ok(rustls::client::danger::ServerCertVerified::assertion())
            }
            fn verify_tls12_signature(
                &self,
                _: &[u8],
                _: &CertificateDer<'_>,
                _: &rustls::DigitallySignedStruct,
            ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error>
            {
                Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
            }
            fn verify_tls13_signature(
                &self,
                _: &[u8],
                _: &CertificateDer<'_>,
                _: &rustls::DigitallySignedStruct,
            ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error>
            {
                Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
            }
            fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
                Vec::new()
            }
        }
        let error = TlsConfig::builder()
            .verifier(Arc::new(AnyServer))
            .server_name("not a name!")
            .build()
            .unwrap_err();
        assert_eq!(error, TlsConfigError::ServerName("not a name!".into()));
        let config = TlsConfig::builder()
            .verifier(Arc::new(AnyServer))
            .build()
            .unwrap();
        let peer: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        assert_eq!(
            config.server_name_for(Some(peer)).unwrap(),
            ServerName::IpAddress(peer.ip().into())
        );
    }

    #[test]
    fn certificate_errors_are_told_apart() {
        let bad = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(
            handshake_error(&bad).kind(),
            HandshakeErrorKind::Certificate
        );
        let refused = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
        );
        assert!(handshake_error(&refused).is_final());
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(handshake_error(&reset).kind(), HandshakeErrorKind::Failed);
        let decrypt = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert!(!handshake_error(&decrypt).is_final());
    }

    /// After the handshake, only a certificate alert is a refusal: the connection then ends
    /// as that final failure (and a hook's `?` gives it), anything else as lost.
    #[test]
    fn a_certificate_alert_after_the_handshake_is_a_refusal() {
        use crate::handshake::refusal_of;
        let alert = |alert| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::AlertReceived(alert),
            )
        };
        for refused in [
            alert(AlertDescription::CertificateRequired),
            alert(AlertDescription::BadCertificate),
            alert(AlertDescription::UnknownCA),
        ] {
            let refusal = refusal_of(&refused);
            assert!(
                refusal.as_ref().is_some_and(HandshakeError::is_certificate),
                "{refused}"
            );
            assert!(HandshakeError::from(refused).is_certificate());
        }
        for lost in [
            alert(AlertDescription::InternalError),
            io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError),
            io::Error::from(io::ErrorKind::ConnectionReset),
        ] {
            assert_eq!(refusal_of(&lost), None, "{lost}");
            assert_eq!(
                HandshakeError::from(lost).kind(),
                HandshakeErrorKind::Failed
            );
        }
    }
}
