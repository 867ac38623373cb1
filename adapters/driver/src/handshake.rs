//! The optional application handshake (TLS, an API-version exchange, authentication) that a
//! connection runs after the TCP connect and before it carries requests. It runs under the
//! same setup deadline as the connect: when the deadline passes, the handshake is dropped
//! wherever it is, and the connection closed.
//!
//! The handshake may *replace* the stream: a hook that installs TLS, compression or a proxy
//! protocol takes the connected stream out of its [`HandshakeIo`] and hands back one that
//! wraps it ([`HandshakeIo::upgrade`]); every request of the connection then goes through the
//! wrapper, and the socket underneath stays reachable ([`IoStream::socket`]) for options and
//! read-back.

use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::sync::Arc;

use keepwire_proto::ConnId;

use crate::runtime::{BoxFuture, IoStream};
use crate::socket::SocketRef;

/// Runs the handshake on a freshly connected stream and hands the stream back when done.
///
/// Any `Fn(HandshakeIo) -> impl Future<Output = Result<HandshakeIo, HandshakeError>>` closure
/// or `async fn` that is `Send + Sync` implements it. It runs on every new connection, before
/// the connection carries requests, under the same setup deadline as the TCP connect.
///
/// # Example
///
/// A protocol that opens with a greeting: the client sends `HELLO <token>`, the server
/// answers `OK` or `DENIED`. A refusal of the credentials is an authentication failure
/// ([`HandshakeError::auth`]): the node enters `AuthFailed` and the requests waiting for it end
/// at once. Anything else is a plain failure ([`HandshakeError::failed`]), retried on the
/// reconnect backoff.
///
/// ```
/// use keepwire_driver::{ClientBuilder, Config, HandshakeError, HandshakeIo};
///
/// async fn hello(mut io: HandshakeIo) -> Result<HandshakeIo, HandshakeError> {
///     io.write_all(b"HELLO secret-token\n").await?;
///     // One byte at a time: what the stream holds after the greeting belongs to the
///     // connection's decoder, and bytes read here would be lost to it.
///     let mut answer = Vec::new();
///     let mut byte = [0u8; 1];
///     while !answer.ends_with(b"\n") {
///         if io.read(&mut byte).await? == 0 {
///             return Err(HandshakeError::failed("closed during the greeting"));
///         }
///         answer.push(byte[0]);
///         if answer.len() > 256 {
///             return Err(HandshakeError::failed("greeting too long"));
///         }
///     }
///     match &answer[..] {
///         b"OK\n" => Ok(io),
///         b"DENIED\n" => Err(HandshakeError::auth("the server refused the token")),
///         other => Err(HandshakeError::failed(format!("unexpected greeting {other:?}"))),
///     }
/// }
///
/// let builder = ClientBuilder::new(Config::default())
///     .node("127.0.0.1:7000".parse::<std::net::SocketAddr>().unwrap())
///     .handshake(hello); // also turns on Config::handshake
/// # drop(builder);
/// ```
///
/// A hook for a real protocol: `keepwire_tests::protocols::postgres::Startup` (in this
/// repository's `tests/` crate) runs PostgreSQL's startup with trust or a clear-text password.
pub trait HandshakeHook: Send + Sync + 'static {
    /// Performs the handshake on `io`.
    fn handshake(&self, io: HandshakeIo)
    -> BoxFuture<'static, Result<HandshakeIo, HandshakeError>>;
}

impl<F, Fut> HandshakeHook for F
where
    F: Fn(HandshakeIo) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HandshakeIo, HandshakeError>> + Send + 'static,
{
    fn handshake(
        &self,
        io: HandshakeIo,
    ) -> BoxFuture<'static, Result<HandshakeIo, HandshakeError>> {
        Box::pin(self(io))
    }
}

/// A connected stream lent to a [`HandshakeHook`]: the hook reads and writes through it, may
/// replace the stream with one that wraps it, and hands it back.
#[derive(Debug)]
pub struct HandshakeIo {
    conn: ConnId,
    stream: Box<dyn IoStream>,
    host: Option<Arc<str>>,
}

impl HandshakeIo {
    /// The stream `stream` of connection `conn`. A hook builds one to hand back a stream of
    /// its own (the driver goes on with its own connection id, whatever `conn` says).
    pub fn new(conn: ConnId, stream: Box<dyn IoStream>) -> Self {
        Self {
            conn,
            stream,
            host: None,
        }
    }

    /// The same, for a node added by name: `host` is that name.
    pub(crate) fn with_host(mut self, host: Option<Arc<str>>) -> Self {
        self.host = host;
        self
    }

    /// The node's host name, if it was added by name (`db.example` for `db.example:5432`):
    /// the name to check in a server certificate. `None` for a node added by address.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// Takes the stream out, to wrap it; hand the wrapper back with [`HandshakeIo::new`], or
    /// do both with [`upgrade`](Self::upgrade).
    pub fn into_stream(self) -> Box<dyn IoStream> {
        self.stream
    }

    /// Replaces the stream with the one `wrap` makes of it (a TLS session, a compressor, a
    /// proxy protocol): from then on the handshake, and every request of the connection, go
    /// through the new stream. It must return the socket underneath from
    /// [`IoStream::socket`] and keep the kernel-boundary contract of [`IoStream`] (a
    /// [`KernelAccounted`](crate::KernelAccounted) layer does).
    ///
    /// ```no_run
    /// # use keepwire_driver::{HandshakeError, HandshakeIo, IoStream};
    /// # async fn wrap_in_tls(s: Box<dyn IoStream>) -> std::io::Result<Box<dyn IoStream>> { Ok(s) }
    /// async fn handshake(io: HandshakeIo) -> Result<HandshakeIo, HandshakeError> {
    ///     io.upgrade(|stream| async move {
    ///         wrap_in_tls(stream).await.map_err(HandshakeError::from)
    ///     })
    ///     .await
    /// }
    /// ```
    pub async fn upgrade<S, F, Fut>(self, wrap: F) -> Result<Self, HandshakeError>
    where
        S: IoStream,
        F: FnOnce(Box<dyn IoStream>) -> Fut,
        Fut: Future<Output = Result<S, HandshakeError>>,
    {
        let (conn, host) = (self.conn, self.host);
        let stream = wrap(self.stream).await?;
        Ok(Self::new(conn, into_boxed(stream)).with_host(host))
    }

    /// The connection being set up.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// Reads exactly `buf.len()` bytes; end of stream before that is `UnexpectedEof`.
    pub async fn read_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.read(buf).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            buf = &mut buf[n..];
        }
        Ok(())
    }

    /// Reads some bytes into `buf`; `Ok(0)` is end of stream.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| self.stream.poll_read(cx, buf)).await
    }

    /// Writes all of `buf`.
    pub async fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = poll_fn(|cx| self.stream.poll_write(cx, buf)).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n..];
        }
        Ok(())
    }

    /// The socket (underneath any stream that wraps it), for reading its options back
    /// ([`SocketRef::read_back`]), or, through `socket2::SockRef::from(&io.socket())`, for
    /// setting one the hook needs.
    pub fn socket(&self) -> SocketRef<'_> {
        self.stream.socket()
    }
}

/// `stream` as a trait object, without boxing one twice.
fn into_boxed<S: IoStream>(stream: S) -> Box<dyn IoStream> {
    let mut slot = Some(stream);
    match (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<Box<dyn IoStream>>>() {
        Some(boxed) => boxed.take().expect("just filled"),
        None => Box::new(slot.take().expect("just filled")),
    }
}

/// What kind of handshake failure it was: it decides what becomes of the node (the driver
/// reports it to the pool as keepwire-proto's
/// [`HandshakeFailure`](keepwire_proto::HandshakeFailure)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandshakeErrorKind {
    /// Any other failure (a timeout inside the hook, a malformed answer, a reset): retryable,
    /// the node reconnects on its backoff (`HandshakeFailure::Failed`).
    Failed,
    /// The peer refused our credentials (`HandshakeFailure::AuthRefused`). Final: the node
    /// enters `AuthFailed`, every request waiting on it ends at once with
    /// [`CloseReason::AuthFailed`](keepwire_proto::CloseReason::AuthFailed), and the node is
    /// not tried again before
    /// [`Config::final_failure_backoff`](keepwire_proto::Config::final_failure_backoff).
    Auth,
    /// A certificate was rejected: the server's did not verify (unknown issuer, wrong name,
    /// expired, ...) or the server refused ours (`HandshakeFailure::CertificateRejected`).
    /// Final like `Auth`, with
    /// [`CloseReason::CertificateRejected`](keepwire_proto::CloseReason::CertificateRejected).
    Certificate,
}

/// Why a handshake failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeError {
    kind: HandshakeErrorKind,
    message: String,
}

impl HandshakeError {
    /// The peer refused our credentials: final, the node enters `AuthFailed`
    /// ([`HandshakeErrorKind::Auth`]).
    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(HandshakeErrorKind::Auth, message)
    }

    /// A certificate was rejected (ours by the server, or the server's by us): final, the
    /// node enters `AuthFailed` ([`HandshakeErrorKind::Certificate`]).
    pub fn certificate(message: impl Into<String>) -> Self {
        Self::new(HandshakeErrorKind::Certificate, message)
    }

    /// Any other handshake failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(HandshakeErrorKind::Failed, message)
    }

    fn new(kind: HandshakeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// What kind of failure it was.
    pub fn kind(&self) -> HandshakeErrorKind {
        self.kind
    }

    /// Whether the peer refused our credentials ([`HandshakeErrorKind::Auth`]).
    pub fn is_auth(&self) -> bool {
        self.kind == HandshakeErrorKind::Auth
    }

    /// Whether a certificate was rejected ([`HandshakeErrorKind::Certificate`]).
    pub fn is_certificate(&self) -> bool {
        self.kind == HandshakeErrorKind::Certificate
    }

    /// Whether trying again cannot help until something changes (credentials, certificates):
    /// an authentication or certificate failure. The node enters `AuthFailed` and waits its
    /// final-failure backoff.
    pub fn is_final(&self) -> bool {
        matches!(
            self.kind,
            HandshakeErrorKind::Auth | HandshakeErrorKind::Certificate
        )
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            HandshakeErrorKind::Failed => "handshake failed",
            HandshakeErrorKind::Auth => "authentication failed",
            HandshakeErrorKind::Certificate => "certificate rejected",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for HandshakeError {}

/// A stream error in a handshake hook (`?` on a read or write): a [`failed`](Self::failed)
/// handshake, unless it is a refusal: a rustls certificate alert (a TLS 1.3 server refusing
/// our certificate, which a hook meets on its first read after the TLS handshake, as
/// PostgreSQL's startup does) or a `HandshakeError` inside the error (see
/// [`IoStream`](crate::IoStream#a-refusal-after-the-handshake)).
impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        refusal_of(&e).unwrap_or_else(|| Self::failed(e.to_string()))
    }
}

/// The refusal a ready connection's read or write error stands for, if it stands for one: the
/// server refused our credentials after our side of the handshake had finished. A TLS 1.3
/// server checks a client certificate only then, and its alert arrives as the error of a
/// later read. Recognised: an error whose inner error is a [`HandshakeError`] (how a stream
/// of your own reports one; see [`IoStream`](crate::IoStream#a-refusal-after-the-handshake)),
/// and, with the `tls` feature, a rustls error that
/// `tls::handshake_error` reads as a certificate refusal.
#[cold]
pub(crate) fn refusal_of(error: &io::Error) -> Option<HandshakeError> {
    let inner = error.get_ref()?;
    if let Some(refusal) = inner.downcast_ref::<HandshakeError>() {
        return Some(refusal.clone());
    }
    #[cfg(feature = "tls")]
    if inner.is::<rustls::Error>() {
        let refusal = crate::tls::handshake_error(error);
        if refusal.is_certificate() {
            return Some(refusal);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::pin::pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll, Waker};

    use keepwire_proto::{Config, Instant, Pool};

    use super::*;

    /// A stream of one's own reports a refusal by carrying a `HandshakeError` inside its
    /// error; any other error is no refusal, and a hook's `?` makes it a failed handshake.
    #[test]
    fn a_handshake_error_inside_a_stream_error_is_a_refusal() {
        let refused = io::Error::new(
            io::ErrorKind::PermissionDenied,
            HandshakeError::auth("password expired"),
        );
        assert_eq!(
            refusal_of(&refused),
            Some(HandshakeError::auth("password expired"))
        );
        assert_eq!(
            HandshakeError::from(refused),
            HandshakeError::auth("password expired")
        );
        let other = io::Error::other("something else");
        assert_eq!(refusal_of(&other), None);
        assert_eq!(
            HandshakeError::from(other).kind(),
            HandshakeErrorKind::Failed
        );
        assert_eq!(refusal_of(&io::ErrorKind::BrokenPipe.into()), None);
    }

    /// A stream that never blocks: a read hands out at most `piece` bytes of `incoming` (then
    /// end of stream), a write takes at most `piece` bytes (none at all with `piece` 0) into
    /// `written`. The socket is a real one, for [`IoStream::socket`] only.
    #[derive(Debug)]
    struct Pieces {
        socket: TcpStream,
        _peer: TcpStream,
        piece: usize,
        incoming: VecDeque<u8>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl IoStream for Pieces {
        fn poll_read(&mut self, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.piece).min(self.incoming.len());
            for (slot, byte) in buf.iter_mut().zip(self.incoming.drain(..n)) {
                *slot = byte;
            }
            Poll::Ready(Ok(n))
        }

        fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.piece);
            self.written.lock().unwrap().extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn socket(&self) -> SocketRef<'_> {
            SocketRef::new(&self.socket)
        }
    }

    /// A handshake's stream over [`Pieces`], and what is written to it.
    fn lend(piece: usize, incoming: &[u8]) -> (HandshakeIo, Arc<Mutex<Vec<u8>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let written = Arc::default();
        let stream = Pieces {
            socket,
            _peer: peer,
            piece,
            incoming: incoming.iter().copied().collect(),
            written: Arc::clone(&written),
        };
        (HandshakeIo::new(a_conn(), Box::new(stream)), written)
    }

    /// A connection id (only a pool makes them).
    fn a_conn() -> ConnId {
        let now = Instant::from_secs(1);
        let mut pool = Pool::new(Config::default(), now).unwrap();
        let node = pool.add_node(now, SocketAddr::from(([127, 0, 0, 1], 1)));
        let _ = pool.connect(now, node);
        pool.current_conn(node).expect("a node connects once added")
    }

    /// Runs `future` to its end; it never waits (the stream never blocks).
    fn run<T>(future: impl Future<Output = T>) -> T {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("waited on a stream that never blocks"),
        }
    }

    #[test]
    fn read_exact_gathers_short_reads_and_reports_an_early_end() {
        let (mut io, _) = lend(3, b"hello world");
        let mut buf = [0u8; 11];
        run(io.read_exact(&mut buf)).unwrap();
        assert_eq!(&buf, b"hello world");

        let (mut io, _) = lend(3, b"abc");
        let mut buf = [0u8; 5];
        let early = run(io.read_exact(&mut buf)).unwrap_err();
        assert_eq!(early.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn read_returns_what_one_read_of_the_stream_gives() {
        let (mut io, _) = lend(3, b"hello");
        let mut buf = [0u8; 8];
        assert_eq!(run(io.read(&mut buf)).unwrap(), 3);
        assert_eq!(&buf[..3], b"hel");
        assert_eq!(run(io.read(&mut buf)).unwrap(), 2);
        assert_eq!(&buf[..2], b"lo");
        assert_eq!(run(io.read(&mut buf)).unwrap(), 0, "end of stream");
    }

    #[test]
    fn write_all_gathers_short_writes_and_refuses_a_stream_that_takes_nothing() {
        let (mut io, written) = lend(2, b"");
        run(io.write_all(b"hello")).unwrap();
        assert_eq!(&written.lock().unwrap()[..], b"hello");

        let (mut io, written) = lend(0, b"");
        let refused = run(io.write_all(b"hello")).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::WriteZero);
        run(io.write_all(b"")).unwrap();
        assert!(written.lock().unwrap().is_empty());
    }

    #[test]
    fn an_error_says_its_kind_whether_it_is_final_and_its_message() {
        let cases = [
            (
                HandshakeError::auth("bad password"),
                HandshakeErrorKind::Auth,
            ),
            (
                HandshakeError::certificate("expired"),
                HandshakeErrorKind::Certificate,
            ),
            (HandshakeError::failed("reset"), HandshakeErrorKind::Failed),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind);
            assert_eq!(error.is_auth(), kind == HandshakeErrorKind::Auth, "{error}");
            assert_eq!(
                error.is_certificate(),
                kind == HandshakeErrorKind::Certificate,
                "{error}"
            );
            assert_eq!(
                error.is_final(),
                kind != HandshakeErrorKind::Failed,
                "{error}"
            );
        }
        let error = HandshakeError::certificate("expired");
        assert_eq!(error.message(), "expired");
        assert_eq!(error.to_string(), "certificate rejected: expired");
        let from_io = HandshakeError::from(io::Error::other("boom"));
        assert_eq!(from_io.kind(), HandshakeErrorKind::Failed);
        assert_eq!(from_io.message(), "boom");
    }

    #[test]
    fn the_host_is_a_named_nodes_name_and_an_upgrade_keeps_it() {
        let (io, _) = lend(1, b"");
        assert_eq!(io.host(), None, "a node added by address");
        let conn = io.conn();
        let io = io.with_host(Some("db.example".into()));
        assert_eq!(io.host(), Some("db.example"));
        let upgraded = run(io.upgrade(|stream| async move { Ok(stream) })).unwrap();
        assert_eq!(upgraded.host(), Some("db.example"));
        assert_eq!(upgraded.conn(), conn);
    }
}
