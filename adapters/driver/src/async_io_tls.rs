//! TLS for the runtimes on async-io's reactor (smol, async-std): rustls through
//! futures-rustls, written once; keepwire-smol and keepwire-async-std re-export it as their
//! `tls` module. (Behind the `async-io-tls` feature.)
//!
//! [`handshake`] is a [`HandshakeHook`] that runs TLS on every new connection, under its setup
//! deadline; [`connect`] does the same inside a hook of your own, after a plaintext exchange
//! (PostgreSQL's SSLRequest, STARTTLS). Either way the session becomes the connection's
//! stream, and a frame counts as written only when its ciphertext has reached the kernel: see
//! [`crate::tls`] for the accounting and the bound on what the TLS layer holds.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_rustls::TlsConnector;
use futures_rustls::client::TlsStream;

use crate::tls::{BUFFER_LIMIT, TlsConfig, handshake_error};
use crate::{
    BufferedLayer, HandshakeError, HandshakeHook, HandshakeIo, IoStream, KernelAccounted, SocketRef,
};

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
        Ok(KernelAccounted::new(FuturesTls(tls)))
    })
    .await
}

/// A futures-rustls session as a [`BufferedLayer`].
#[derive(Debug)]
struct FuturesTls(TlsStream<Compat>);

impl BufferedLayer for FuturesTls {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
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
/// futures-io's `AsyncRead + AsyncWrite`, for futures-rustls.
#[derive(Debug)]
struct Compat(Box<dyn IoStream>);

impl AsyncRead for Compat {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().0.poll_read(cx, buf)
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

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // What a stream returned from a write is in the kernel (or, for a layer under this
        // one, reported only once it is): nothing to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // keepwire never shuts a connection down half-way: dropping the stream closes it.
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    use async_io::Async;
    use futures_lite::future::block_on;
    use futures_lite::io::AsyncWriteExt;

    use super::*;

    /// The glue futures-rustls writes through hands a plain write and a vectored one to the
    /// stream under it (rustls writes its records vectored today; a plain write must work
    /// as well), and its flush and close have nothing to do.
    #[test]
    fn writes_through_the_glue_reach_the_stream() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = block_on(Async::<TcpStream>::connect(addr)).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let mut glue = Compat(Box::new(client));
        block_on(async {
            glue.write_all(b"plain").await.unwrap();
            let parts = [IoSlice::new(b" and"), IoSlice::new(b" vectored")];
            assert_eq!(glue.write_vectored(&parts).await.unwrap(), 13);
            glue.flush().await.unwrap();
            glue.close().await.unwrap();
        });
        drop(glue);
        let mut got = String::new();
        server.read_to_string(&mut got).unwrap();
        assert_eq!(got, "plain and vectored");
    }
}
