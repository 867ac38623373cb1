//! The async-io pieces of a [`Runtime`](crate::Runtime), written once for every runtime built
//! on async-io's reactor (smol, async-std): [`Timer`] on `async_io::Timer`, [`IoStream`] on
//! `Async<std::net::TcpStream>`, and a non-blocking [`connect`]. keepwire-smol and
//! keepwire-async-std differ only in how they spawn the driver. (This module is behind the
//! `async-io` feature.)
//!
//! async-io's reactor runs on whichever thread blocks on it, or on its own fallback thread, so
//! these streams and timers work under any executor.

use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use ::async_io::Async;
use futures_lite::FutureExt;
use futures_lite::io::{AsyncRead, AsyncWrite};

use crate::runtime::{BoxFuture, IoStream, Timer};
use crate::socket::{PreparedSocket, SocketRef, finish_connect};

/// async-io's timer is edge-triggered: it fires once, then stays pending until it is reset.
/// The [`Timer`] contract allows exactly that, because the driver resets after every fire.
impl Timer for ::async_io::Timer {
    fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.get_mut().set_at(deadline);
    }

    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll(cx).map(drop)
    }
}

impl IoStream for Async<TcpStream> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(self).poll_read(cx, buf)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self).poll_write_vectored(cx, bufs)
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(self)
    }
}

/// The clock async-io's timers run on.
pub fn now() -> Instant {
    Instant::now()
}

/// An async-io timer for [`Runtime::new_timer`](crate::Runtime::new_timer).
pub fn new_timer(deadline: Instant) -> Pin<Box<dyn Timer>> {
    Box::pin(::async_io::Timer::at(deadline))
}

/// [`Runtime::connect`](crate::Runtime::connect) on async-io's reactor: a non-blocking
/// `connect(2)`, a wait until the socket is writable, then the kernel's verdict.
pub fn connect(
    socket: PreparedSocket,
    addr: SocketAddr,
) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
    Box::pin(async move {
        let (stream, connected) = socket.begin_connect(addr)?;
        let stream = Async::new(stream)?;
        if !connected {
            stream.writable().await?;
            finish_connect(&SocketRef::new(&stream))?;
        }
        Ok(Box::new(stream) as Box<dyn IoStream>)
    })
}
