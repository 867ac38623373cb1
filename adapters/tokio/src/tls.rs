//! TLS on tokio (feature `tls`): rustls through tokio-rustls, ring as the crypto provider.
//!
//! [`handshake`] is a [`HandshakeHook`] that runs TLS on every new connection, under its setup
//! deadline; [`connect`] does the same inside a hook of your own, after a plaintext exchange
//! (PostgreSQL's SSLRequest, STARTTLS). Either way the session becomes the connection's
//! stream, and a frame counts as written only when its ciphertext has reached the kernel: see
//! [`keepwire_driver::tls`] for the accounting and the bound on what the TLS layer holds
//! ([`MAX_BUFFERED`]).
//!
//! ```no_run
//! # async fn run(ca_pem: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
//! use keepwire_tokio::{Config, tls};
//!
//! let tls = tls::TlsConfig::builder().roots_pem(ca_pem).server_name("db.example").build()?;
//! let client = keepwire_tokio::client(Config::default())
//!     .node("127.0.0.1:7000".parse::<std::net::SocketAddr>()?)
//!     .handshake(tls::handshake(tls))
//!     .build()?;
//! # let _ = client;
//! # Ok(())
//! # }
//! ```

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use keepwire_driver::tls::*;
use keepwire_driver::{
    BufferedLayer, HandshakeError, HandshakeHook, HandshakeIo, IoStream, KernelAccounted, SocketRef,
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A [`HandshakeHook`] that runs a TLS handshake with `config` on every new connection.
pub fn handshake(config: TlsConfig) -> impl HandshakeHook {
    move |io: HandshakeIo| {
        let config = config.clone();
        async move { connect(&config, io).await }
    }
}

/// Runs a TLS handshake with `config` on `io`'s stream and returns `io` with the TLS session
/// as its stream. A certificate that does not verify, or a server that rejects ours, is a
/// [`HandshakeError::certificate`]; any other failure [`HandshakeError::failed`].
pub async fn connect(config: &TlsConfig, io: HandshakeIo) -> Result<HandshakeIo, HandshakeError> {
    let name = config.server_name_of(&io)?;
    let connector = TlsConnector::from(Arc::clone(config.rustls()));
    io.upgrade(|stream| async move {
        let mut tls = connector
            .connect(name, Compat(stream))
            .await
            .map_err(|e| handshake_error(&e))?;
        tls.get_mut().1.set_buffer_limit(Some(BUFFER_LIMIT));
        Ok(KernelAccounted::new(TokioTls(tls)))
    })
    .await
}

/// A tokio-rustls session as a [`BufferedLayer`].
#[derive(Debug)]
struct TokioTls(TlsStream<Compat>);

impl BufferedLayer for TokioTls {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut self.0).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_take(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn socket(&self) -> SocketRef<'_> {
        self.0.get_ref().0.0.socket()
    }
}

/// The connection's stream (any [`IoStream`], the plain socket or a stream wrapping it) as
/// tokio's `AsyncRead + AsyncWrite`, for tokio-rustls.
#[derive(Debug)]
struct Compat(Box<dyn IoStream>);

impl AsyncRead for Compat {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = std::task::ready!(self.get_mut().0.poll_read(cx, buf.initialize_unfilled()))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Compat {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().0.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().0.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // What a stream returned from a write is in the kernel (or, for a layer under this
        // one, reported only once it is): nothing to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // keepwire never shuts a connection down half-way: dropping the stream closes it.
        Poll::Ready(Ok(()))
    }
}
