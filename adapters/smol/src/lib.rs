//! # keepwire-smol
//!
//! keepwire on [smol](https://docs.rs/smol): [`SmolRuntime`] implements the driver's
//! [`Runtime`] trait with async-io sockets and timers, and [`client`] builds a [`Client`]
//! whose driver runs on smol's global executor (or on an executor you pass).
//!
//! ```no_run
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_smol::{Config, Target};
//!
//! smol::block_on(async {
//!     let client = keepwire_smol::client(Config::default())
//!         .node("127.0.0.1:7000".parse()?)
//!         .build()?;
//!     let reply = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//!     # let _ = reply;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! **Feature `tls`** (off by default): TLS on rustls through futures-rustls, with ring as
//! the crypto provider and no OpenSSL, in the `tls` module:
//! `.handshake(keepwire_smol::tls::handshake(config))` runs the TLS handshake under the setup
//! deadline, and a frame then counts as written only when its ciphertext has reached the
//! kernel.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "tls")]
pub mod tls;

use std::fmt;
use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

pub use keepwire_driver::*;
use smol::future::FutureExt;
use smol::io::{AsyncRead, AsyncWrite};
use smol::{Async, Executor, Timer as SmolTimer};
use socket2::{SockRef, Socket};

/// The smol [`Runtime`]: async-io sockets and timers, tasks on smol's global executor or on
/// a given [`Executor`].
#[derive(Clone, Default)]
pub struct SmolRuntime {
    executor: Option<Arc<Executor<'static>>>,
}

impl SmolRuntime {
    /// Spawns on smol's global executor (`smol::spawn`).
    pub fn new() -> Self {
        Self { executor: None }
    }

    /// Spawns on `executor`; the application must keep running it.
    pub fn with_executor(executor: Arc<Executor<'static>>) -> Self {
        Self {
            executor: Some(executor),
        }
    }
}

impl fmt::Debug for SmolRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let executor = if self.executor.is_some() {
            "given"
        } else {
            "global"
        };
        f.debug_struct("SmolRuntime")
            .field("executor", &executor)
            .finish()
    }
}

impl Runtime for SmolRuntime {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        Box::pin(AsyncIoTimer(SmolTimer::at(deadline)))
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        match &self.executor {
            Some(executor) => executor.spawn(future).detach(),
            None => smol::spawn(future).detach(),
        }
    }

    fn connect(
        &self,
        socket: Socket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        Box::pin(async move {
            let connected_now = begin_connect(&socket, addr)?;
            let stream = Async::new(TcpStream::from(socket))?;
            if !connected_now {
                stream.writable().await?;
                finish_connect(&SockRef::from(&stream))?;
            }
            Ok(Box::new(SmolStream(stream)) as Box<dyn IoStream>)
        })
    }
}

/// Builds a [`Client`] whose driver runs on smol's global executor; to run it on an executor
/// of your own, pass `.runtime(SmolRuntime::with_executor(executor))`.
pub fn client(config: Config) -> SmolClientBuilder {
    BoundClientBuilder::new(config, SmolRuntime::new())
}

/// A [`ClientBuilder`] bound to a [`SmolRuntime`].
pub type SmolClientBuilder = BoundClientBuilder<SmolRuntime>;

#[derive(Debug)]
struct AsyncIoTimer(SmolTimer);

impl Timer for AsyncIoTimer {
    fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.get_mut().0.set_at(deadline);
    }

    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().0.poll(cx).map(drop)
    }
}

#[derive(Debug)]
struct SmolStream(Async<TcpStream>);

impl IoStream for SmolStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
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
