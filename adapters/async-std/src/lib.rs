//! # keepwire-async-std (legacy)
//!
//! keepwire on [async-std](https://docs.rs/async-std): [`AsyncStdRuntime`] implements the
//! driver's [`Runtime`] trait, and [`client`] builds a [`Client`] whose driver runs on
//! async-std's executor.
//!
//! **Legacy.** async-std is discontinued upstream; its authors point to
//! [smol](https://docs.rs/smol) instead (advisory RUSTSEC-2025-0052). This crate stays, as
//! thin as `keepwire-smol`, for applications that still run on async-std; new code should
//! use `keepwire-smol` (both share the same async-io reactor).
//!
//! ```no_run
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_async_std::{Config, Target};
//!
//! async_std::task::block_on(async {
//!     let client = keepwire_async_std::client(Config::default())
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
//! `.handshake(keepwire_async_std::tls::handshake(config))` runs the TLS handshake under the setup
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

use async_io::{Async, Timer as AsyncIoTimer};
use async_std::io::{Read, Write};
use async_std::net::TcpStream;
pub use keepwire_driver::*;
use socket2::{SockRef, Socket};

/// The async-std [`Runtime`]: async-std tasks and streams, async-io timers (the reactor
/// async-std itself runs on).
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncStdRuntime;

impl Runtime for AsyncStdRuntime {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        Box::pin(Sleep(AsyncIoTimer::at(deadline)))
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        drop(async_std::task::spawn(future));
    }

    fn connect(
        &self,
        socket: Socket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        Box::pin(async move {
            // async-std has no "wait until writable": connect through async-io, then hand the
            // connected socket to async-std.
            let connected_now = begin_connect(&socket, addr)?;
            let pending = Async::new(std::net::TcpStream::from(socket))?;
            if !connected_now {
                pending.writable().await?;
                finish_connect(&SockRef::from(&pending))?;
            }
            let stream = TcpStream::from(pending.into_inner()?);
            Ok(Box::new(AsyncStdStream(stream)) as Box<dyn IoStream>)
        })
    }
}

/// Builds a [`Client`] whose driver runs on async-std's executor.
pub fn client(config: Config) -> AsyncStdClientBuilder {
    BoundClientBuilder::new(config, AsyncStdRuntime)
}

/// A [`ClientBuilder`] bound to [`AsyncStdRuntime`].
pub type AsyncStdClientBuilder = BoundClientBuilder<AsyncStdRuntime>;

#[derive(Debug)]
struct Sleep(AsyncIoTimer);

impl Timer for Sleep {
    fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.get_mut().0.set_at(deadline);
    }

    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.get_mut().0).poll(cx).map(drop)
    }
}

#[derive(Debug)]
struct AsyncStdStream(TcpStream);

impl IoStream for AsyncStdStream {
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
