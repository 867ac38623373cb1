//! The optional application handshake (TLS, an API-version exchange, authentication) that a
//! connection runs after the TCP connect and before it carries requests. It runs under the
//! same setup deadline as the connect.

use std::fmt;
use std::future::{Future, poll_fn};
use std::io;

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
///     .node("127.0.0.1:7000".parse().unwrap())
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

/// A connected stream lent to a [`HandshakeHook`].
#[derive(Debug)]
pub struct HandshakeIo {
    conn: ConnId,
    stream: Box<dyn IoStream>,
}

impl HandshakeIo {
    pub(crate) fn new(conn: ConnId, stream: Box<dyn IoStream>) -> Self {
        Self { conn, stream }
    }

    pub(crate) fn into_stream(self) -> Box<dyn IoStream> {
        self.stream
    }

    /// The connection being set up.
    pub fn conn(&self) -> ConnId {
        self.conn
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

    /// The socket, for reading its options back ([`SocketRef::read_back`]), or, through
    /// `socket2::SockRef::from(&io.socket())`, for setting one the hook needs.
    pub fn socket(&self) -> SocketRef<'_> {
        self.stream.socket()
    }
}

/// Why a handshake failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeError {
    auth: bool,
    message: String,
}

impl HandshakeError {
    /// The peer refused our credentials: the node enters `AuthFailed`.
    pub fn auth(message: impl Into<String>) -> Self {
        Self {
            auth: true,
            message: message.into(),
        }
    }

    /// Any other handshake failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            auth: false,
            message: message.into(),
        }
    }

    /// Whether it was an authentication failure.
    pub fn is_auth(&self) -> bool {
        self.auth
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.auth {
            "authentication failed"
        } else {
            "handshake failed"
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for HandshakeError {}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        Self::failed(e.to_string())
    }
}
