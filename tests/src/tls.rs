//! TLS for the tests: certificates made by rcgen (a test CA and the server certificates it
//! signs), loopback TLS servers on std threads (rustls, blocking, independent of the runtime
//! under test), and the runtime crate's TLS entry point for each runtime.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use keepwire_driver::tls::rustls::pki_types::pem::PemObject;
use keepwire_driver::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use keepwire_driver::tls::rustls::{self, ServerConfig, ServerConnection, StreamOwned};
use keepwire_driver::tls::{TlsConfig, TlsConfigBuilder};
use keepwire_driver::{
    Client, ClientBuilder, Codec, HandshakeError, HandshakeIo, LengthPrefixed, Runtime,
};
use keepwire_proto::NodeId;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use socket2::{Domain, Protocol, Socket, Type};

use crate::peers::read_frame;

/// The common name of a [`Pki`]'s client certificate (a PostgreSQL role name as it stands:
/// certificate authentication logs in as the role the certificate names).
pub const CLIENT_NAME: &str = "keepwire_client";

/// A test certificate authority, and a server certificate and a client certificate it
/// signed.
#[derive(Debug)]
pub struct Pki {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_cert_pem: String,
    server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl Pki {
    /// A fresh CA, and a server certificate for `localhost` and `127.0.0.1` signed by it.
    pub fn new() -> Self {
        Self::for_names(&["localhost", "127.0.0.1"])
    }

    /// A fresh CA, and a server certificate for `names` (and a client certificate) signed by
    /// it.
    pub fn for_names(names: &[&str]) -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own, so that another test CA's certificates read "unknown issuer".
        static CAS: AtomicUsize = AtomicUsize::new(0);
        let ca_name = format!(
            "keepwire test CA {} {}",
            std::process::id(),
            CAS.fetch_add(1, Ordering::Relaxed)
        );
        ca_params
            .distinguished_name
            .push(DnType::CommonName, ca_name);
        let ca_key = KeyPair::generate().expect("CA key");
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "keepwire test server");
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &ca).expect("server certificate");
        let mut client_params =
            CertificateParams::new(Vec::<String>::new()).expect("client params");
        client_params
            .distinguished_name
            .push(DnType::CommonName, CLIENT_NAME);
        let client_key = KeyPair::generate().expect("client key");
        let client_cert = client_params
            .signed_by(&client_key, &ca)
            .expect("client certificate");
        Self {
            ca_pem: ca.pem(),
            server_chain: vec![cert.der().clone()],
            server_cert_pem: cert.pem(),
            server_key_pem: key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    /// The client certificate (signed by this CA), PEM.
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client certificate's private key, PEM.
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server certificate, PEM (for a server of its own, such as PostgreSQL's
    /// `server.crt`).
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// The server's private key, PEM (PostgreSQL's `server.key`).
    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }

    /// A rustls server configuration presenting the server certificate.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server_config_verifying(Arc::new(rustls::server::NoClientAuth))
    }

    /// A rustls server configuration presenting the server certificate and requiring a
    /// client certificate signed by this CA (mutual TLS).
    pub fn server_config_requiring_client_certs(&self) -> Arc<ServerConfig> {
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).expect("the CA");
        roots.add(ca).expect("the CA as a root");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("client certificate verifier");
        self.server_config_verifying(verifier)
    }

    /// A rustls server configuration presenting the server certificate, checking clients'
    /// certificates with `clients`.
    fn server_config_verifying(
        &self,
        clients: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    ) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key =
            PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).expect("server key");
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_client_cert_verifier(clients)
            .with_single_cert(self.server_chain.clone(), key)
            .expect("server certificate and key");
        Arc::new(config)
    }

    /// A client configuration that trusts this CA and checks the name `localhost`.
    pub fn client_config(&self) -> TlsConfig {
        self.client_builder()
            .build()
            .expect("client TLS configuration")
    }

    /// [`client_config`](Self::client_config), presenting `holder`'s client certificate
    /// (this PKI's own, or another CA's).
    pub fn client_config_presenting(&self, holder: &Pki) -> TlsConfig {
        self.client_builder()
            .client_cert_pem(
                holder.client_cert_pem.as_bytes(),
                holder.client_key_pem.as_bytes(),
            )
            .build()
            .expect("client TLS configuration with a certificate")
    }

    /// What every client configuration here starts from: this CA trusted, the name
    /// `localhost` checked.
    fn client_builder(&self) -> TlsConfigBuilder {
        TlsConfig::builder()
            .roots_pem(self.ca_pem.as_bytes())
            .server_name("localhost")
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

/// How a [`TlsPeer`] treats each connection it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsBehaviour {
    /// Completes the TLS handshake, then answers every request frame (the built-in codec's
    /// format) with the same correlation id and payload.
    Echo,
    /// Completes the TLS handshake, then never reads again (pair with a small receive
    /// buffer): the TLS peer that stalls.
    NeverRead,
    /// Reads the client's first handshake flight and never answers: a handshake that stalls
    /// in the middle.
    StallHandshake,
}

/// A TLS server on loopback with one [`TlsBehaviour`].
#[derive(Debug)]
pub struct TlsPeer {
    addr: SocketAddr,
    state: Arc<PeerState>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct PeerState {
    stop: AtomicBool,
    accepted: AtomicUsize,
    handshakes: AtomicUsize,
    requests: AtomicUsize,
    streams: Mutex<Vec<TcpStream>>,
}

impl TlsPeer {
    /// Starts a peer on a fresh port, presenting `config`'s certificate.
    pub fn start(config: Arc<ServerConfig>, behaviour: TlsBehaviour) -> Self {
        Self::start_with(config, behaviour, None)
    }

    /// Starts a peer that completes the TLS handshake and never reads again, with a 4 KiB
    /// receive buffer set on the listener before bind/listen (accepted sockets inherit it).
    pub fn never_read(config: Arc<ServerConfig>) -> Self {
        Self::start_with(config, TlsBehaviour::NeverRead, Some(4096))
    }

    fn start_with(
        config: Arc<ServerConfig>,
        behaviour: TlsBehaviour,
        recv_buffer: Option<usize>,
    ) -> Self {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("socket");
        if let Some(size) = recv_buffer {
            socket.set_recv_buffer_size(size).expect("receive buffer");
        }
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        socket.bind(&any.into()).expect("bind a loopback listener");
        socket.listen(128).expect("listen");
        let listener: TcpListener = socket.into();
        let addr = listener.local_addr().expect("listener address");
        let state = Arc::new(PeerState::default());
        let acceptor = {
            let state = Arc::clone(&state);
            thread::spawn(move || accept_loop(&listener, &config, behaviour, &state))
        };
        Self {
            addr,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// TLS handshakes completed so far.
    pub fn handshakes(&self) -> usize {
        self.state.handshakes.load(Ordering::SeqCst)
    }

    /// Request frames read so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }
}

impl Drop for TlsPeer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let streams = std::mem::take(
            &mut *self
                .state
                .streams
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for stream in streams {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    config: &Arc<ServerConfig>,
    behaviour: TlsBehaviour,
    state: &Arc<PeerState>,
) {
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    while !state.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("blocking stream");
                state.accepted.fetch_add(1, Ordering::SeqCst);
                let kept = stream.try_clone().expect("clone accepted stream");
                state
                    .streams
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(kept);
                let (config, state) = (Arc::clone(config), Arc::clone(state));
                // Detached: each ends when its socket is shut down (on drop) or closed.
                drop(thread::spawn(move || {
                    let _ = serve(stream, &config, behaviour, &state);
                }));
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn serve(
    mut tcp: TcpStream,
    config: &Arc<ServerConfig>,
    behaviour: TlsBehaviour,
    state: &PeerState,
) -> io::Result<()> {
    if behaviour == TlsBehaviour::StallHandshake {
        // Take the ClientHello off the socket, answer nothing; the socket stays open (a clone
        // is kept) until the peer is dropped.
        let mut hello = [0; 512];
        let _ = tcp.read(&mut hello)?;
        return Ok(());
    }
    let mut conn = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    // Send what the handshake left (TLS 1.3 session tickets).
    while conn.wants_write() {
        conn.write_tls(&mut tcp)?;
    }
    state.handshakes.fetch_add(1, Ordering::SeqCst);
    if behaviour == TlsBehaviour::NeverRead {
        return Ok(());
    }
    let mut tls = StreamOwned::new(conn, tcp);
    loop {
        let (id, payload) = read_frame(&mut tls)?;
        state.requests.fetch_add(1, Ordering::SeqCst);
        let answer = LengthPrefixed::frame(id, &payload).map_err(io::Error::other)?;
        tls.write_all(&answer)?;
        tls.flush()?;
    }
}

/// The runtime crate whose `tls` module a test uses: each runtime with its own crate's TLS
/// (tokio-rustls for tokio, futures-rustls for smol and async-std).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsOn {
    /// `keepwire_tokio::tls`.
    Tokio,
    /// `keepwire_smol::tls`.
    Smol,
    /// `keepwire_async_std::tls`.
    AsyncStd,
}

impl TlsOn {
    /// Runs the TLS handshake on `io` with that crate's `tls::connect`.
    pub async fn connect(
        self,
        config: &TlsConfig,
        io: HandshakeIo,
    ) -> Result<HandshakeIo, HandshakeError> {
        match self {
            Self::Tokio => keepwire_tokio::tls::connect(config, io).await,
            Self::Smol => keepwire_smol::tls::connect(config, io).await,
            Self::AsyncStd => keepwire_async_std::tls::connect(config, io).await,
        }
    }

    /// `builder` with that crate's `tls::handshake(config)` as its handshake hook.
    pub fn handshake(self, builder: ClientBuilder, config: TlsConfig) -> ClientBuilder {
        match self {
            Self::Tokio => builder.handshake(keepwire_tokio::tls::handshake(config)),
            Self::Smol => builder.handshake(keepwire_smol::tls::handshake(config)),
            Self::AsyncStd => builder.handshake(keepwire_async_std::tls::handshake(config)),
        }
    }

    /// A client of one node, the TLS server at `addr`, speaking `codec` over this crate's TLS
    /// with `config` (the real servers' TLS suites); returns it and its node.
    pub fn client(
        self,
        runtime: &Arc<dyn Runtime>,
        addr: SocketAddr,
        codec: impl Codec,
        config: TlsConfig,
    ) -> (Client, NodeId) {
        let builder = ClientBuilder::new(crate::test_config())
            .node(addr)
            .codec(codec);
        let client = self
            .handshake(builder, config)
            .build(Arc::clone(runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        (client, node)
    }
}
