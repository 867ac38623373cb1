//! # keepwire-tokio
//!
//! keepwire on [tokio](https://tokio.rs): [`TokioRuntime`] implements the driver's
//! [`Runtime`] trait, and [`client`] builds a [`Client`] on the current tokio runtime.
//!
//! The driver reads time from `tokio::time::Instant`, so with tokio's paused clock
//! (`tokio::time::pause`) keepwire's timeouts follow the virtual time.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_tokio::{Config, Target};
//!
//! let client = keepwire_tokio::client(Config::default())
//!     .node("127.0.0.1:7000".parse()?)
//!     .build()?;
//! let reply = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//! # let _ = reply;
//! # Ok(())
//! # }
//! ```
//!
//! **Feature `tls`** (off by default): TLS on rustls through tokio-rustls, with ring as
//! the crypto provider and no OpenSSL, in the `tls` module:
//! `.handshake(keepwire_tokio::tls::handshake(config))` runs the TLS handshake under the setup
//! deadline, and a frame then counts as written only when its ciphertext has reached the
//! kernel.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "tls")]
pub mod tls;

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

pub use keepwire_driver::*;
use socket2::{SockRef, Socket};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::runtime::Handle;
use tokio::time::Sleep;

/// The tokio [`Runtime`]: spawns on a tokio runtime handle, uses tokio's clock and timers.
#[derive(Clone, Debug)]
pub struct TokioRuntime {
    handle: Handle,
}

impl TokioRuntime {
    /// The runtime of the calling context.
    ///
    /// # Panics
    /// Outside a tokio runtime (as `tokio::runtime::Handle::current` does).
    pub fn current() -> Self {
        Self {
            handle: Handle::current(),
        }
    }

    /// A given tokio runtime (its time and I/O drivers must be enabled).
    pub fn from_handle(handle: Handle) -> Self {
        Self { handle }
    }
}

impl Runtime for TokioRuntime {
    fn now(&self) -> Instant {
        // Outside a runtime context tokio's clock falls back to the system clock, which a
        // paused runtime does not follow: read the clock of *this* runtime wherever we are
        // called from (a client may be built on a plain thread with `from_handle`).
        let _context = self.handle.enter();
        tokio::time::Instant::now().into_std()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        let _context = self.handle.enter();
        Box::pin(TokioTimer {
            sleep: Box::pin(tokio::time::sleep_until(deadline.into())),
        })
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        drop(self.handle.spawn(future));
    }

    fn connect(
        &self,
        socket: Socket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        Box::pin(async move {
            socket.set_nonblocking(true)?;
            let socket = TcpSocket::from_std_stream(socket.into());
            let stream = socket.connect(addr).await?;
            Ok(Box::new(TokioStream(stream)) as Box<dyn IoStream>)
        })
    }
}

/// Builds a [`Client`] on the tokio runtime of the calling context.
///
/// # Panics
/// Outside a tokio runtime (use [`BoundClientBuilder::runtime`] with
/// [`TokioRuntime::from_handle`] to build from elsewhere).
pub fn client(config: Config) -> TokioClientBuilder {
    BoundClientBuilder::new(config, TokioRuntime::current())
}

/// A [`ClientBuilder`] bound to a tokio runtime.
pub type TokioClientBuilder = BoundClientBuilder<TokioRuntime>;

#[derive(Debug)]
struct TokioTimer {
    sleep: Pin<Box<Sleep>>,
}

impl Timer for TokioTimer {
    fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.get_mut().sleep.as_mut().reset(deadline.into());
    }

    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().sleep.as_mut().poll(cx)
    }
}

#[derive(Debug)]
struct TokioStream(TcpStream);

impl IoStream for TokioStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut self.0).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn socket(&self) -> SockRef<'_> {
        SockRef::from(&self.0)
    }
}
