//! The seam between the driver and an async runtime: a clock, timers, a spawner and a
//! non-blocking connect, plus the byte stream the driver reads and writes.
//!
//! Everything is expressed with poll functions and boxed futures so that tokio's
//! `AsyncRead`/`AsyncWrite` and the futures-io traits (smol, async-std) both fit without
//! compatibility crates. A runtime crate implements [`Runtime`] in about a hundred lines.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use socket2::{SockRef, Socket};

/// A boxed, sendable future, as the runtime trait hands them around.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the driver needs from an async runtime.
///
/// Implementations are cheap handles (the driver keeps one in an `Arc`).
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
    /// The runtime's monotonic clock. The driver measures every keepwire instant from the
    /// value it reads when it starts, so a runtime with a virtual clock (tokio's paused time)
    /// drives keepwire's timeouts too.
    fn now(&self) -> Instant;

    /// A timer that fires at `deadline` (on the same clock as [`Runtime::now`]).
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>>;

    /// Runs `future` to completion in the background.
    fn spawn(&self, future: BoxFuture<'static, ()>);

    /// Connects `socket` (created and configured by the driver, not yet connected) to `addr`
    /// without blocking a thread, and returns the connected stream.
    ///
    /// The driver drops the returned future when the setup deadline passes, so an
    /// implementation needs no timeout of its own. [`begin_connect`] and [`finish_connect`]
    /// do the non-blocking `connect(2)` dance for runtimes that only offer "wait until
    /// writable".
    fn connect(
        &self,
        socket: Socket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>>;
}

/// A resettable timer, like tokio's `Sleep` or async-io's `Timer`.
pub trait Timer: Send + fmt::Debug {
    /// Moves the deadline (earlier or later); the next poll waits for the new one.
    fn reset(self: Pin<&mut Self>, deadline: Instant);

    /// Ready once the deadline has passed; registers the waker otherwise.
    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()>;
}

/// A connected stream as the driver uses it: non-blocking reads and writes through poll
/// functions, and access to the socket for reading options back.
///
/// The runtime crates hand the driver a plain TCP stream; a
/// [`HandshakeHook`](crate::HandshakeHook) may replace it with a stream that wraps it (TLS,
/// compression, a proxy protocol), which then carries every request of the connection.
///
/// # The kernel boundary
///
/// keepwire counts a frame as written (its write timeout stops, it leaves the watermarks)
/// only when the kernel has accepted its last byte. A plain socket's write returns exactly
/// that. A stream that *encodes* what it is given takes bytes before the kernel has their
/// encoding, and must then keep this contract (as OpenSSL's `SSL_write` does):
///
/// - a write returns `Ready(Ok(n))` only once the encoding of those `n` bytes, and of nothing
///   more, has been accepted by the kernel: it holds nothing taken from that write;
/// - while it holds bytes it took (say, TLS records still waiting for socket space), a write
///   returns `Pending`, having registered the waker, and [`held`](Self::held) says how many;
///   the caller must then write **the same bytes again** (more may follow them), and the
///   stream goes on from where it was instead of taking them twice.
///
/// The driver keeps to it: while a stream holds bytes, the frames they belong to stay handed
/// out (so no deadline can drop a frame whose bytes are already encoded) and unreported (so
/// they keep counting for the write timeout and the watermarks). [`KernelAccounted`]
/// implements the contract over any buffering layer.
///
/// [`KernelAccounted`]: crate::KernelAccounted
pub trait IoStream: Send + fmt::Debug + 'static {
    /// Reads into `buf`; `Ok(0)` is end of stream.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;

    /// Writes from `buf`, returning how many bytes the kernel accepted (see the kernel
    /// boundary above for a stream that encodes what it is given).
    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;

    /// Writes from `bufs` in order, in one system call where the stream can (`writev`),
    /// returning how many bytes the kernel accepted across them.
    ///
    /// The driver hands a connection's queued frames out in one call, so a native vectored
    /// write saves a syscall per frame. The default writes the first non-empty slice with
    /// [`poll_write`](Self::poll_write), as `std::io::Write::write_vectored` does: correct,
    /// but one syscall per frame. Every runtime crate of keepwire overrides it.
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let buf = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &**b);
        self.poll_write(cx, buf)
    }

    /// Bytes this stream took from writes that returned `Pending` and whose encoding the
    /// kernel has not yet accepted whole: they must be offered again (see the kernel boundary
    /// above). Always zero for a plain socket, which is the default.
    fn held(&self) -> usize {
        0
    }

    /// The underlying socket, for `getsockopt` through socket2. A stream that wraps another
    /// returns the socket underneath, so options can still be read back and set.
    fn socket(&self) -> SockRef<'_>;
}

/// Starts a non-blocking `connect(2)` of `socket` to `addr`: sets `O_NONBLOCK` and connects.
///
/// Returns `Ok(true)` if the connection completed at once, `Ok(false)` if it is in progress
/// (wait until the socket is writable, then call [`finish_connect`]).
pub fn begin_connect(socket: &Socket, addr: SocketAddr) -> io::Result<bool> {
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(true),
        Err(e) if connect_in_progress(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Completes a connect started with [`begin_connect`] once the socket is writable: returns
/// the connect error, if the kernel recorded one.
pub fn finish_connect(socket: &SockRef<'_>) -> io::Result<()> {
    match socket.take_error()? {
        Some(e) => Err(e),
        None => {
            // Writable without an error can still mean "not connected" on some platforms.
            socket.peer_addr().map(drop)
        }
    }
}

fn connect_in_progress(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::WouldBlock
    }
}

/// Sleeps until `deadline` on `runtime`'s clock.
pub async fn sleep_until(runtime: &dyn Runtime, deadline: Instant) {
    let mut timer = runtime.new_timer(deadline);
    std::future::poll_fn(|cx| timer.as_mut().poll_fire(cx)).await;
}

/// A boxed stream is a stream (so a wrapper may hold, or return, `Box<dyn IoStream>`).
impl<S: IoStream + ?Sized> IoStream for Box<S> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        (**self).poll_read(cx, buf)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        (**self).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        (**self).poll_write_vectored(cx, bufs)
    }

    fn held(&self) -> usize {
        (**self).held()
    }

    fn socket(&self) -> SockRef<'_> {
        (**self).socket()
    }
}
