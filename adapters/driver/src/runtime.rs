//! The seam between the driver and an async runtime: a clock, timers, a spawner and a
//! non-blocking connect, plus the byte stream the driver reads and writes.
//!
//! Everything is expressed with poll functions and boxed futures so that tokio's
//! `AsyncRead`/`AsyncWrite` and the futures-io traits (smol, async-std) both fit without
//! compatibility crates. socket2 stays behind keepwire's own [`PreparedSocket`] and
//! [`SocketRef`]. See the crate documentation's guide for writing an adapter.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::BytesMut;

use crate::resolve::ResolveError;
use crate::socket::{PreparedSocket, SocketRef};

/// A boxed, sendable future, as the runtime trait hands them around.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the driver needs from an async runtime.
///
/// Implementations are cheap handles (the driver keeps one in an `Arc`). keepwire-tokio,
/// keepwire-smol and keepwire-async-std each implement it in a few dozen lines; the crate
/// documentation walks through writing one.
///
/// # Example
///
/// A runtime that wraps another one and counts the tasks it spawns (every method but
/// [`spawn`](Runtime::spawn) delegates):
///
/// ```
/// use std::io;
/// use std::net::SocketAddr;
/// use std::pin::Pin;
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Instant;
///
/// use keepwire_driver::{BoxFuture, IoStream, PreparedSocket, Runtime, Timer};
///
/// #[derive(Debug)]
/// struct Counting<R> {
///     inner: R,
///     spawned: Arc<AtomicUsize>,
/// }
///
/// impl<R: Runtime> Runtime for Counting<R> {
///     fn now(&self) -> Instant {
///         self.inner.now()
///     }
///
///     fn now_in_task(&self) -> Instant {
///         self.inner.now_in_task()
///     }
///
///     fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
///         self.inner.new_timer(deadline)
///     }
///
///     fn read_after_write(&self) -> bool {
///         self.inner.read_after_write()
///     }
///
///     fn drive_here(&self, run: &mut dyn FnMut()) -> bool {
///         self.inner.drive_here(run)
///     }
///
///     fn spawn(&self, future: BoxFuture<'static, ()>) {
///         self.spawned.fetch_add(1, Ordering::Relaxed);
///         self.inner.spawn(future);
///     }
///
///     fn connect(
///         &self,
///         socket: PreparedSocket,
///         addr: SocketAddr,
///     ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
///         self.inner.connect(socket, addr)
///     }
/// }
/// ```
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
    /// The runtime's monotonic clock. The driver measures every keepwire instant from the
    /// value it reads when it starts, so a runtime with a virtual clock (tokio's paused time)
    /// drives keepwire's timeouts too.
    ///
    /// A coarse clock (one that reads a little behind the timers, as a cached clock does) is
    /// fine: when a timer fires before `now` reaches the deadline, the driver re-arms it.
    fn now(&self) -> Instant;

    /// [`now`](Self::now), read by the driver's own task (which this runtime spawned) while
    /// it is polled: once per round of its work. A runtime whose [`now`](Self::now) first
    /// enters its own context, to be right when called from anywhere, can skip that here,
    /// where its context is already the caller's. The default is [`now`](Self::now).
    fn now_in_task(&self) -> Instant {
        self.now()
    }

    /// A timer that fires at `deadline` (on the same clock as [`Runtime::now`]).
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>>;

    /// Whether the driver's task may read a connection right after writing to it, with
    /// [`IoStream::read_now`], instead of waiting for the stream to wake it. The default is
    /// `false`. (A round a caller runs in place always does: [`drive_here`](Self::drive_here).)
    ///
    /// A peer on the same machine often answers before the write that woke it returns (its
    /// thread runs on the writer's CPU and preempts it). Reading then skips the wait on the
    /// reactor: a round trip to a loopback echo server took 0.8 µs less on tokio's
    /// current_thread runtime (about an eighth) and 2.2 µs less on smol (BENCHMARKS.md, "A
    /// read right after the write"). The driver and a caller then wake each other with no
    /// park between them, which a scheduler may not like: tokio's multi-thread one lets such a
    /// chain run three tasks on one worker, then hands the next to another worker, and the
    /// round trip got slower. keepwire-tokio says yes on a current_thread runtime only;
    /// keepwire-smol and keepwire-async-std say yes (on async-std's executor, one request at
    /// a time made 32.6–35.0 K requests per second against 26.2–26.8 K without it).
    ///
    /// The driver reads after a write that the stream took whole, if the stream can
    /// ([`IoStream::read_now`]; a TLS stream cannot). After a read that finds nothing, it lets
    /// seven writes pass before it tries again. A remote peer's answer never
    /// comes within the write, so against one this costs a `recv` every eighth write.
    fn read_after_write(&self) -> bool {
        false
    }

    /// Runs `run` where the driver's own task could run it (in this runtime's context, if it
    /// has one) and returns `true`, to let a caller run a round of the driver in place; or
    /// runs nothing and returns `false` (the default), and callers always hand their sends to
    /// the driver's task. The driver asks once, with nothing to run, when the client is
    /// built; answer the same way every time.
    ///
    /// A caller whose send finds the driver's task idle (not woken, no other caller waiting)
    /// runs the round itself: the request is written in the caller's own poll, with no switch
    /// to the driver's task, and read right after the write whatever
    /// [`read_after_write`](Self::read_after_write) says (no task waits on another there), so
    /// a peer that answers within the write is read in that same poll. On tokio's
    /// multi-thread runtime a round trip to a loopback echo server on the same CPU took about
    /// 1 µs less (BENCHMARKS.md, "Rounds in the caller's poll"). The round may start a
    /// connect ([`connect`](Self::connect)), arm a timer or spawn, so a runtime whose sockets
    /// and timers bind to a context the calling thread must have entered (tokio's) enters it
    /// around `run`: a caller may be any thread, inside this runtime or not.
    fn drive_here(&self, run: &mut dyn FnMut()) -> bool {
        let _ = run;
        false
    }

    /// Runs `future` to completion in the background.
    fn spawn(&self, future: BoxFuture<'static, ()>);

    /// Connects `socket` (created, made non-blocking and configured by the driver) to `addr`
    /// without blocking a thread, and returns the connected stream.
    ///
    /// The driver drops the returned future when the setup deadline passes, so an
    /// implementation needs no timeout of its own. A runtime with a connect of its own takes
    /// the socket with [`PreparedSocket::into_std`]; one that only offers "wait until
    /// writable" uses [`PreparedSocket::begin_connect`] and
    /// [`finish_connect`](crate::finish_connect).
    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>>;

    /// Resolves a node's host name, on every connect attempt to a node added by name: the
    /// default [`Resolver`](crate::Resolver) of clients on this runtime (a client may replace
    /// it with [`ClientBuilder::resolver`](crate::ClientBuilder::resolver)).
    ///
    /// The default runs std's resolver ([`resolve_blocking`](crate::resolve_blocking)) on a
    /// thread of its own per lookup. A runtime with a pool for blocking work runs it there
    /// instead, as keepwire-tokio, keepwire-smol and keepwire-async-std do. As with
    /// [`connect`](Self::connect), the driver drops the future at the setup deadline.
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        crate::resolve::resolve_on_thread(host, port)
    }
}

/// A resettable timer, like tokio's `Sleep` or async-io's `Timer` (both implement it, behind
/// this crate's `tokio` and `async-io` features).
///
/// The contract is the weaker of the two: [`poll_fire`](Timer::poll_fire) returns `Ready`
/// once the deadline has passed, and after it did, the timer may stay ready (tokio's `Sleep`)
/// or never fire again (async-io's edge-triggered `Timer`) until it is
/// [`reset`](Timer::reset). The driver resets its timer after every fire, even to the same
/// deadline, so either kind works.
///
/// # Example
///
/// A timer that is ready once a shared flag is set (a test's manual clock), and registers the
/// waker to be woken when it is:
///
/// ```
/// use std::pin::Pin;
/// use std::sync::{Arc, Mutex};
/// use std::task::{Context, Poll, Waker};
/// use std::time::Instant;
///
/// use keepwire_driver::Timer;
///
/// #[derive(Debug, Default)]
/// struct Clock {
///     now: Option<Instant>,
///     wakers: Vec<Waker>,
/// }
///
/// #[derive(Debug)]
/// struct ManualTimer {
///     clock: Arc<Mutex<Clock>>,
///     deadline: Instant,
///     fired: bool,
/// }
///
/// impl Timer for ManualTimer {
///     fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
///         self.deadline = deadline;
///         self.fired = false;
///     }
///
///     fn poll_fire(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
///         let mut clock = self.clock.lock().unwrap();
///         if !self.fired && clock.now.is_some_and(|now| now >= self.deadline) {
///             drop(clock);
///             self.fired = true; // edge-triggered: fires once per reset
///             return Poll::Ready(());
///         }
///         clock.wakers.push(cx.waker().clone());
///         Poll::Pending
///     }
/// }
/// ```
pub trait Timer: Send + fmt::Debug {
    /// Moves the deadline (earlier, later or the same); the next poll waits for the new one.
    fn reset(self: Pin<&mut Self>, deadline: Instant);

    /// `Ready` once the deadline has passed (at least once per [`reset`](Timer::reset));
    /// registers the waker otherwise, to be woken when the deadline passes (the driver polls
    /// a waiting timer again only once that waker woke).
    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()>;
}

/// A connected stream as the driver uses it: non-blocking reads and writes through poll
/// functions, and access to the socket for reading options back.
///
/// Implemented for `tokio::net::TcpStream` (this crate's `tokio` feature) and for
/// `async_io::Async<std::net::TcpStream>` (the `async-io` feature).
///
/// # Example
///
/// A stream that wraps another and counts the bytes the kernel accepted:
///
/// ```
/// use std::io::{self, IoSlice};
/// use std::task::{Context, Poll};
///
/// use bytes::BytesMut;
/// use keepwire_driver::{IoStream, SocketRef};
///
/// #[derive(Debug)]
/// struct Counted<S> {
///     inner: S,
///     written: u64,
/// }
///
/// impl<S: IoStream> IoStream for Counted<S> {
///     fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
///         self.inner.poll_read(cx, buf)
///     }
///
///     // Passed on, so that a stream that reads in place still does when wrapped.
///     fn poll_read_buf(
///         &mut self,
///         cx: &mut Context<'_>,
///         buf: &mut BytesMut,
///         limit: usize,
///         scratch: &mut [u8],
///     ) -> Poll<io::Result<usize>> {
///         self.inner.poll_read_buf(cx, buf, limit, scratch)
///     }
///
///     fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
///         let written = self.inner.poll_write(cx, buf);
///         if let Poll::Ready(Ok(n)) = written {
///             self.written += n as u64;
///         }
///         written
///     }
///
///     fn poll_write_vectored(
///         &mut self,
///         cx: &mut Context<'_>,
///         bufs: &[IoSlice<'_>],
///     ) -> Poll<io::Result<usize>> {
///         let written = self.inner.poll_write_vectored(cx, bufs);
///         if let Poll::Ready(Ok(n)) = written {
///             self.written += n as u64;
///         }
///         written
///     }
///
///     fn socket(&self) -> SocketRef<'_> {
///         self.inner.socket()
///     }
/// }
/// ```
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
///
/// # A refusal after the handshake
///
/// A read or write error ends the connection as a lost one (`CloseReason::Io`), except one
/// whose inner error ([`io::Error::get_ref`]) is a [`HandshakeError`](crate::HandshakeError):
/// that ends it as the handshake failure it names, final for a refused credential or
/// certificate, as if the handshake hook had returned it. This is how a stream reports a
/// refusal that comes after its handshake seemed done, such as a TLS 1.3 server rejecting
/// the client's certificate (it checks it only after the client's side has finished). The
/// runtime crates' TLS streams need nothing: keepwire reads rustls's certificate alerts
/// itself.
pub trait IoStream: Send + fmt::Debug + 'static {
    /// Reads into `buf`; `Ok(0)` is end of stream.
    ///
    /// `Pending` must leave the waker of `cx` registered to be woken once the stream may be
    /// readable (as `AsyncRead` asks). The driver reads a connection again only when that
    /// waker, the connection's own, has woken it: it does not read every connection on every
    /// round. A stream that returns `Pending` without registering it is not read again.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;

    /// Reads at most `limit` bytes (no more than `buf` has room for) and appends them to
    /// `buf`, returning how many; `Ok(0)` is end of stream. The driver reads responses this
    /// way, into the buffer they are cut from. `buf` must have room and `limit` be above
    /// zero (the driver makes sure): a read of nothing returns `Ok(0)`, as at the end.
    ///
    /// The default reads into `scratch` with [`poll_read`](Self::poll_read) and copies what
    /// it read into `buf`: correct for any stream, at the cost of that copy. A stream that can
    /// read into uninitialized memory overrides it and reads in place; keepwire's tokio stream
    /// does (a 16 KiB response is 16 KiB less copying).
    fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        limit: usize,
        scratch: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let limit = limit.min(buf.capacity() - buf.len()).min(scratch.len());
        let read = self.poll_read(cx, &mut scratch[..limit]);
        if let Poll::Ready(Ok(n)) = read {
            buf.extend_from_slice(&scratch[..n]);
        }
        read
    }

    /// Writes from `buf`, returning how many bytes the kernel accepted (see the kernel
    /// boundary above for a stream that encodes what it is given).
    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;

    /// Writes from `bufs` in order, in one system call where the stream can (`writev`),
    /// returning how many bytes the kernel accepted across them.
    ///
    /// The driver hands a connection's queued frames out in one call (a hand-out of small
    /// frames as one slice of their copies, larger frames a slice each), so a native vectored
    /// write saves a syscall per frame. A native one should still write a lone slice with a
    /// plain write, as keepwire's own socket streams do: the kernel takes a `send` of one
    /// slice 95–150 ns faster than a `writev` of it (`scripts/writev_cost.rs`), and at one
    /// request in flight every hand-out is one slice. The default writes the first non-empty
    /// slice with [`poll_write`](Self::poll_write), as `std::io::Write::write_vectored` does:
    /// correct, but one syscall per frame. Every runtime crate of keepwire overrides it.
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

    /// Reads into `buf` now, from the socket itself, whether or not the runtime has reported
    /// the stream readable; `None` if the stream cannot. The default is `None`, which a stream
    /// that buffers or decodes (TLS) must keep.
    ///
    /// The driver calls it only on a runtime that asks for it
    /// ([`Runtime::read_after_write`]), right after a write. Like a non-blocking read, it
    /// returns the bytes read, `Ok(0)` at the end of the stream, or an error
    /// (`WouldBlock` if nothing is there). It must not change what the stream's
    /// [`poll_read`](Self::poll_read) has registered: a wake the read made pointless still
    /// comes, and the read after it finds nothing. keepwire's tokio and async-io streams read
    /// the socket with one `recv`, past the reactor's record of its readiness.
    fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let _ = buf;
        None
    }

    /// Bytes this stream took from writes that returned `Pending` and whose encoding the
    /// kernel has not yet accepted whole: they must be offered again (see the kernel boundary
    /// above). Always zero for a plain socket, which is the default.
    fn held(&self) -> usize {
        0
    }

    /// The underlying socket, for reading options back ([`SocketRef::new`] borrows it from
    /// any stream that owns one). A stream that wraps another returns the socket underneath.
    fn socket(&self) -> SocketRef<'_>;
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

    fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        limit: usize,
        scratch: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        (**self).poll_read_buf(cx, buf, limit, scratch)
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

    fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        (**self).read_now(buf)
    }

    fn held(&self) -> usize {
        (**self).held()
    }

    fn socket(&self) -> SocketRef<'_> {
        (**self).socket()
    }
}

/// The tokio pieces of a [`Runtime`]: [`Timer`] on `tokio::time::Sleep` and [`IoStream`] on
/// `tokio::net::TcpStream` (this crate's `tokio` feature; keepwire-tokio builds on them).
#[cfg(feature = "tokio")]
mod tokio_impls {
    use std::future::Future;
    use std::io::{self, IoSlice, Read};
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Instant;

    use bytes::{BufMut, BytesMut};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
    use tokio::net::TcpStream;
    use tokio::time::Sleep;

    use super::{IoStream, Timer};
    use crate::socket::SocketRef;

    impl Timer for Sleep {
        fn reset(self: Pin<&mut Self>, deadline: Instant) {
            Sleep::reset(self, deadline.into());
        }

        fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.poll(cx)
        }
    }

    impl IoStream for TcpStream {
        fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
            let mut buf = ReadBuf::new(buf);
            match Pin::new(self).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        }

        /// In place: tokio reads into the buffer's spare capacity, uninitialized.
        fn poll_read_buf(
            &mut self,
            cx: &mut Context<'_>,
            buf: &mut BytesMut,
            limit: usize,
            _scratch: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            let limit = limit.min(buf.capacity() - buf.len());
            let mut room = buf.limit(limit);
            // A fresh future per call: it keeps nothing between polls.
            std::pin::pin!(self.read_buf(&mut room)).poll(cx)
        }

        fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            Pin::new(self).poll_write(cx, buf)
        }

        /// One `recv` on the socket, whatever tokio last saw of its readiness (which stays as
        /// it was).
        fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
            Some((&*socket2::SockRef::from(&*self)).read(buf))
        }

        /// A lone slice with a plain write (`send`), several with `writev`.
        fn poll_write_vectored(
            &mut self,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            match bufs {
                [one] => Pin::new(self).poll_write(cx, one),
                _ => Pin::new(self).poll_write_vectored(cx, bufs),
            }
        }

        fn socket(&self) -> SocketRef<'_> {
            SocketRef::new(self)
        }
    }
}

/// A runtime that never runs the driver it is given (its `spawn` drops it): enough for the
/// unit tests of what a client does without its driver (building, its services' bookkeeping).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct DriverNeverRuns;

#[cfg(test)]
impl Runtime for DriverNeverRuns {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn new_timer(&self, _: Instant) -> Pin<Box<dyn Timer>> {
        unreachable!("the driver never runs")
    }

    fn spawn(&self, driver: BoxFuture<'static, ()>) {
        drop(driver);
    }

    fn connect(
        &self,
        _: PreparedSocket,
        _: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        unreachable!("the driver never runs")
    }
}
