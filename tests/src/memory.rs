//! In-memory connections, for deterministic tests of the driver's reads and wake-ups with no
//! socket traffic (`real_wakeups.rs`, `real_read_after_write.rs`): [`Echo`], the peer of a
//! stream that answers every write at once with what was written, and [`InMemory`], a runtime
//! whose connects hand out the test's own stream. A test wraps an [`Echo`] in its own
//! `IoStream`, which decides when a read is woken.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use keepwire_driver::{BoxFuture, IoStream, PreparedSocket, ResolveError, Runtime, Timer};

/// A stream a test hands the driver, made from the connection's socket.
type OpenStream = dyn Fn(TcpStream) -> Box<dyn IoStream> + Send + Sync;

/// A runtime that is `inner` but for two things: a connect hands out the stream the test makes
/// over the prepared socket, left unconnected (the driver only reads its options back), and
/// the driver reads right after its writes if the test says so.
pub struct InMemory {
    inner: Arc<dyn Runtime>,
    read_after_write: bool,
    rounds_in_place: bool,
    open: Box<OpenStream>,
}

impl InMemory {
    /// `inner`, its connects handing out `open(socket)`, asking for reads right after writes
    /// if `read_after_write`.
    pub fn new(
        inner: Arc<dyn Runtime>,
        read_after_write: bool,
        open: impl Fn(TcpStream) -> Box<dyn IoStream> + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            read_after_write,
            rounds_in_place: false,
            open: Box::new(open),
        }
    }

    /// Lets callers run the driver's rounds in place (`Runtime::drive_here`, through
    /// `inner`'s); by default they never do, and every send goes to the driver's task.
    pub fn with_rounds_in_place(mut self) -> Self {
        self.rounds_in_place = true;
        self
    }
}

impl fmt::Debug for InMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemory")
            .field("inner", &self.inner)
            .field("read_after_write", &self.read_after_write)
            .field("rounds_in_place", &self.rounds_in_place)
            .finish_non_exhaustive()
    }
}

impl Runtime for InMemory {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn now_in_task(&self) -> Instant {
        self.inner.now_in_task()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        self.inner.new_timer(deadline)
    }

    fn read_after_write(&self) -> bool {
        self.read_after_write
    }

    fn drive_here(&self, run: &mut dyn FnMut()) -> bool {
        self.rounds_in_place && self.inner.drive_here(run)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        self.inner.spawn(future);
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        _addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        Box::pin(std::future::ready(Ok((self.open)(socket.into_std()))))
    }

    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.inner.resolve(host, port)
    }
}

/// What an echoing peer has sent and not yet been read: a `LengthPrefixed` response is its
/// request's frame, so every request written is answered by the bytes read back. A peer that
/// closed reads as the end of the stream once its answers are drained.
#[derive(Debug, Default)]
pub struct Echo {
    echoed: Vec<u8>,
    closed: bool,
    reader: Option<Waker>,
}

impl Echo {
    /// Echoes `bytes`. Returns the waker of a read that waits for them, to be woken now or
    /// later, as the test decides.
    pub fn answer(&mut self, bytes: &[u8]) -> Option<Waker> {
        self.echoed.extend_from_slice(bytes);
        self.reader.take()
    }

    /// The peer closes instead of answering. Returns the waker of a read that waits.
    pub fn close(&mut self) -> Option<Waker> {
        self.closed = true;
        self.reader.take()
    }

    /// A non-blocking read: what was echoed, as much as `buf` holds; `Ok(0)` once the peer
    /// closed and everything was read; `WouldBlock` while nothing is there.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.echoed.is_empty() {
            return if self.closed {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(self.echoed.len());
        buf[..n].copy_from_slice(&self.echoed[..n]);
        self.echoed.drain(..n);
        Ok(n)
    }

    /// [`read`](Self::read), keeping `cx`'s waker for the next answer when it would block.
    pub fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.reader = Some(cx.waker().clone());
                Poll::Pending
            }
            read => Poll::Ready(read),
        }
    }
}
