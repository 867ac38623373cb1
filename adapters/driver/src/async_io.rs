//! The async-io pieces of a [`Runtime`](crate::Runtime), written once for every runtime built
//! on async-io's reactor (smol, async-std): [`Timer`] on `async_io::Timer`, [`IoStream`] on
//! `Async<std::net::TcpStream>`, and a non-blocking [`connect`]. keepwire-smol and
//! keepwire-async-std differ only in how they spawn the driver. (This module is behind the
//! `async-io` feature.)
//!
//! async-io's reactor runs on whichever thread blocks on it, or on its own fallback thread, so
//! these streams and timers work under any executor.

use std::io::{self, IoSlice, Read};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
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

    /// One `recv` on the socket; the reactor's registration stays as it was.
    fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        Some(self.get_ref().read(buf))
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self).poll_write(cx, buf)
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

/// The stream [`connect`] hands the driver: `Async<TcpStream>` as the impl above, except that
/// after a read that would have blocked it asks the reactor before reading again.
///
/// async-io's own read tries the socket first and asks the reactor only once that failed. A
/// woken connection's first read took the bytes without asking, so the event that woke it
/// was still unanswered when its next read would have blocked: async-io then said ready for
/// that event and read the socket a third time before registering the waker (two failing
/// `recv`s per wake). Here a read that would have blocked marks the stream dry, and the next
/// read first asks [`Async::poll_readable`], which answers that event. A read that returned
/// bytes reads again at once, as before: more may have come while they were decoded.
///
/// A dry stream reads even when the reactor says not ready. async-io counts an event as new
/// only if the reactor delivered it in a later turn than the one under way when the waker
/// was registered. When the driver's thread is the one in the reactor, none is under way
/// then; when another thread waits in it (smol or async-std with several executor threads),
/// an answer that comes within that same turn wakes the driver, yet `poll_readable` says not
/// ready, registers the waker again and re-arms the socket, and the answer waits for another
/// turn and another wake. On smol with two threads at one request in flight that was 0.5–0.9
/// more turns of the reactor per request, and a median round trip twice a hand-written
/// client's (BENCHMARKS.md, "A dry stream reads when woken"). The read costs a failing `recv`
/// only when the driver polls a dry stream that nothing woke.
#[derive(Debug)]
struct Stream {
    io: Async<TcpStream>,
    /// The last read would have blocked: ask the reactor before the next.
    dry: bool,
}

impl IoStream for Stream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        // Ready answers the event that woke the driver; not ready has registered the waker,
        // and the read below finds what an event in the reactor's turn under way announced.
        if self.dry
            && let Poll::Ready(ready) = self.io.poll_readable(cx)
        {
            ready?;
        }
        loop {
            match self.io.get_ref().read(buf) {
                Ok(n) => {
                    self.dry = false;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.dry = true;
                    ready!(self.io.poll_readable(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// One `recv` on the socket, dry or not: the reactor's registration, and `dry`, stay as
    /// they were (a wake the read made pointless still comes; the read it brings finds
    /// nothing and marks the stream dry again).
    fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        Some(self.io.get_ref().read(buf))
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        IoStream::poll_write_vectored(&mut self.io, cx, bufs)
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(&self.io)
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
        Ok(Box::new(Stream {
            io: stream,
            dry: false,
        }) as Box<dyn IoStream>)
    })
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use bytes::BytesMut;
    use futures_lite::future::block_on;

    use super::*;

    /// The default `poll_read_buf` (this stream's) reads no more than the buffer has room
    /// for, whatever the limit: a buffer half full of an earlier response, 10 bytes waiting,
    /// a limit of 100, and 4 bytes of room take 4, without growing the buffer.
    #[test]
    fn a_read_into_a_buffer_stops_at_its_room() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut stream =
            block_on(Async::<TcpStream>::connect(listener.local_addr().unwrap())).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        peer.write_all(b"0123456789").unwrap();
        let mut buf = BytesMut::with_capacity(8);
        buf.extend_from_slice(b"held");
        let capacity = buf.capacity();
        let mut scratch = [0; 64];
        let read = block_on(poll_fn(|cx| {
            IoStream::poll_read_buf(&mut stream, cx, &mut buf, 100, &mut scratch)
        }))
        .unwrap();
        assert_eq!(read, capacity - 4);
        assert_eq!(&buf[..8], b"held0123");
        assert_eq!(buf.capacity(), capacity, "the buffer did not grow");
    }

    /// A stream the driver got from [`connect`] to a listener on loopback, and the peer.
    fn connected() -> (Box<dyn IoStream>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (socket, _) = PreparedSocket::new(addr, &crate::SocketOptions::default()).unwrap();
        let stream = block_on(connect(socket, addr)).unwrap();
        (stream, listener.accept().unwrap().0)
    }

    /// Writes `bytes` through `stream`'s plain and vectored writes; returns what each said
    /// it wrote.
    fn write_both(stream: &mut dyn IoStream, bytes: &[u8]) -> (usize, usize) {
        let plain = block_on(poll_fn(|cx| stream.poll_write(cx, bytes))).unwrap();
        let (head, tail) = bytes.split_at(2);
        let slices = [IoSlice::new(head), IoSlice::new(tail)];
        let vectored = block_on(poll_fn(|cx| stream.poll_write_vectored(cx, &slices))).unwrap();
        (plain, vectored)
    }

    /// Both streams (the driver's and async-io's own) say how much they wrote, and it is
    /// what the peer reads: a write of 5 bytes into an empty socket buffer takes all 5.
    #[test]
    fn writes_report_what_reached_the_peer() {
        let (mut driver_stream, mut peer) = connected();
        assert_eq!(write_both(&mut *driver_stream, b"hello"), (5, 5));

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut plain =
            block_on(Async::<TcpStream>::connect(listener.local_addr().unwrap())).unwrap();
        let (mut plain_peer, _) = listener.accept().unwrap();
        assert_eq!(write_both(&mut plain, b"world"), (5, 5));

        for (peer, expected) in [(&mut peer, b"hellohello"), (&mut plain_peer, b"worldworld")] {
            let mut got = [0; 10];
            Read::read_exact(peer, &mut got).unwrap();
            assert_eq!(&got, expected);
        }
    }

    /// A lone slice through either stream's vectored write (sent plainly) is written whole and
    /// is what the peer reads.
    #[test]
    fn a_lone_slice_is_written_whole() {
        let (mut driver_stream, mut peer) = connected();
        let lone = [IoSlice::new(b"hello")];
        let written = block_on(poll_fn(|cx| driver_stream.poll_write_vectored(cx, &lone)));
        assert_eq!(written.unwrap(), 5);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut plain =
            block_on(Async::<TcpStream>::connect(listener.local_addr().unwrap())).unwrap();
        let (mut plain_peer, _) = listener.accept().unwrap();
        let lone = [IoSlice::new(b"world")];
        let written = block_on(poll_fn(|cx| {
            IoStream::poll_write_vectored(&mut plain, cx, &lone)
        }));
        assert_eq!(written.unwrap(), 5);

        for (peer, expected) in [(&mut peer, b"hello"), (&mut plain_peer, b"world")] {
            let mut got = [0; 5];
            Read::read_exact(peer, &mut got).unwrap();
            assert_eq!(&got, expected);
        }
    }

    /// Both streams read now what came after they found the socket dry, with no turn of the
    /// reactor in between; and the next bytes still wake the read that found it dry.
    #[test]
    fn read_now_takes_what_came_after_the_socket_ran_dry() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let plain = block_on(Async::<TcpStream>::connect(listener.local_addr().unwrap())).unwrap();
        let plain_peer = listener.accept().unwrap().0;
        let streams: [(Box<dyn IoStream>, TcpStream); 2] =
            [connected(), (Box::new(plain), plain_peer)];
        for (mut stream, mut peer) in streams {
            let mut buf = [0; 16];
            let dry = block_on(poll_fn(|cx| Poll::Ready(stream.poll_read(cx, &mut buf))));
            assert!(dry.is_pending());
            let nothing = stream.read_now(&mut buf).unwrap().map_err(|e| e.kind());
            assert_eq!(nothing, Err(io::ErrorKind::WouldBlock));
            peer.write_all(b"first").unwrap();
            // A loaded machine may deliver the bytes a moment after the write returns.
            let start = Instant::now();
            let read = loop {
                match stream.read_now(&mut buf).unwrap() {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        assert!(start.elapsed() < Duration::from_secs(5));
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    read => break read.unwrap(),
                }
            };
            assert_eq!(&buf[..read], b"first");
            peer.write_all(b"second").unwrap();
            let read = block_on(poll_fn(|cx| stream.poll_read(cx, &mut buf))).unwrap();
            assert_eq!(&buf[..read], b"second");
        }
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A stream found dry, then woken by the reactor for an answer, reads the answer at the
    /// next poll. Here async-io's own thread runs the reactor (no `async_io::block_on` in this
    /// test), as another executor thread does under smol or async-std with several: it waits
    /// in a turn of the reactor while the stream registers its waker, and delivers the answer
    /// in that same turn, which `poll_readable` does not count as new. Asking the reactor
    /// alone, the poll registered the waker again and the answer waited for another turn and
    /// another wake.
    #[test]
    fn a_dry_stream_woken_by_the_reactor_reads_at_the_next_poll() {
        let (mut stream, mut peer) = connected();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let cx = &mut Context::from_waker(&waker);
        let mut buf = [0; 16];
        for round in 0..20 {
            assert!(
                stream.poll_read(cx, &mut buf).is_pending(),
                "round {round}: dry"
            );
            let before = wakes.0.load(Ordering::SeqCst);
            peer.write_all(b"answer").unwrap();
            let start = Instant::now();
            while wakes.0.load(Ordering::SeqCst) == before {
                assert!(start.elapsed() < Duration::from_secs(10), "never woken");
                std::thread::sleep(Duration::from_millis(1));
            }
            match stream.poll_read(cx, &mut buf) {
                Poll::Ready(read) => assert_eq!(&buf[..read.unwrap()], b"answer"),
                Poll::Pending => panic!("round {round}: woken, yet not read"),
            }
        }
    }

    /// A read that fails for any reason but "would block" is that error, not a wait for the
    /// reactor: a peer that resets the connection is `ConnectionReset` (asked again, the
    /// socket would say end of stream, and the reset's cause would be lost).
    #[test]
    fn a_reset_reads_as_an_error() {
        let (mut stream, peer) = connected();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        let mut buf = [0; 16];
        let read = block_on(poll_fn(|cx| stream.poll_read(cx, &mut buf)));
        assert_eq!(
            read.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset)
        );
    }
}
