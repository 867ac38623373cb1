//! Stream layers that encode what they are given (TLS, compression) and so hold bytes the
//! kernel has not taken yet: [`BufferedLayer`] is what such a layer offers, and
//! [`KernelAccounted`] turns it into an [`IoStream`] that keeps keepwire's accounting at the
//! kernel boundary.
//!
//! A TLS layer's `write` returns as soon as it has *encrypted* the plaintext into records,
//! whether or not the kernel has taken those records; a driver trusting that count would stop
//! a frame's write timeout, and release it from the watermarks, while its ciphertext still sits
//! in user space behind a stalled peer. [`KernelAccounted`] reports a write only once the
//! layer's buffer is empty again, so a frame counts as written exactly when its ciphertext has
//! reached the kernel, and a stalled TLS peer trips the write timeout at the same instant as a
//! stalled plaintext peer.

use std::fmt;
use std::io::{self, IoSlice};
use std::task::{Context, Poll, ready};

use crate::runtime::IoStream;
use crate::socket::SocketRef;

/// A stream layer that buffers the encoding of what it is given before the kernel takes it:
/// a TLS session over a socket (the runtime crates' `tls` feature implements it over
/// tokio-rustls and futures-rustls), or a compressor.
pub trait BufferedLayer: Send + fmt::Debug + 'static {
    /// Reads decoded bytes into `buf`; `Ok(0)` is end of stream.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;

    /// Takes bytes from `bufs`, in order, and encodes them into the layer's buffer (pushing
    /// what it can of the encoding to the kernel on the way); returns how many it took.
    /// `Pending` (with the waker registered) only when it took none. The layer bounds what it
    /// buffers: it takes fewer bytes when its buffer is full.
    fn poll_take(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>>;

    /// Pushes the buffered encoding to the kernel: `Ready(Ok(()))` once the kernel has taken
    /// all of it, `Pending` (with the waker registered) while the socket is full.
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// The socket under the layer.
    fn socket(&self) -> SocketRef<'_>;
}

/// An [`IoStream`] over a [`BufferedLayer`] that reports a write only when its encoding has
/// reached the kernel, as the [kernel-boundary contract](IoStream#the-kernel-boundary) asks.
///
/// A write hands the layer what it will take, then pushes the layer's buffer to the kernel.
/// If the kernel takes all of it, the write returns the bytes taken. If not, the write
/// returns `Pending` and [`held`](IoStream::held) tells the bytes taken; the next write (of the
/// same bytes, as the contract asks) takes nothing new until the buffer has drained, then
/// returns that count. So at most one layer buffer's worth of encoded bytes exists outside
/// the kernel per connection, on top of the frames keepwire's watermarks count.
#[derive(Debug)]
pub struct KernelAccounted<L> {
    layer: L,
    /// Bytes taken by the layer whose encoding the kernel has not yet accepted whole.
    taken: usize,
}

impl<L: BufferedLayer> KernelAccounted<L> {
    /// Wraps `layer`, which must not hold unsent bytes yet (a freshly established TLS
    /// session's buffer is empty once its handshake has been flushed).
    pub fn new(layer: L) -> Self {
        Self { layer, taken: 0 }
    }

    /// The layer.
    pub fn get_ref(&self) -> &L {
        &self.layer
    }

    /// The layer, mutably (writing to it directly breaks the accounting).
    pub fn get_mut(&mut self) -> &mut L {
        &mut self.layer
    }

    /// The layer back.
    pub fn into_inner(self) -> L {
        self.layer
    }
}

impl<L: BufferedLayer> IoStream for KernelAccounted<L> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.layer.poll_read(cx, buf)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.taken == 0 {
            if bufs.iter().all(|b| b.is_empty()) {
                return Poll::Ready(Ok(0));
            }
            let taken = ready!(self.layer.poll_take(cx, bufs))?;
            if taken == 0 {
                return Poll::Ready(Ok(0));
            }
            self.taken = taken;
        } else {
            let offered: usize = bufs.iter().map(|b| b.len()).sum();
            if offered < self.taken {
                // The caller broke the contract: bytes already encoded were not offered again.
                // The stream's content no longer matches the caller's view of it.
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} bytes taken by the stream layer were not offered again \
                         ({offered} were)",
                        self.taken
                    ),
                )));
            }
        }
        ready!(self.layer.poll_push(cx))?;
        Poll::Ready(Ok(std::mem::take(&mut self.taken)))
    }

    fn held(&self) -> usize {
        self.taken
    }

    fn socket(&self) -> SocketRef<'_> {
        self.layer.socket()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use super::*;

    /// A layer whose "kernel" takes `room` bytes, then would block; each byte taken is
    /// "encoded" as two bytes; at most `limit` encoded bytes are buffered.
    #[derive(Debug)]
    struct Doubling {
        socket: TcpStream,
        _peer: TcpStream,
        buffer: usize,
        limit: usize,
        room: usize,
        kernel: Vec<u8>,
        taken_log: Vec<u8>,
    }

    impl Doubling {
        fn new(limit: usize, room: usize) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (peer, _) = listener.accept().unwrap();
            Self {
                socket,
                _peer: peer,
                buffer: 0,
                limit,
                room,
                kernel: Vec::new(),
                taken_log: Vec::new(),
            }
        }

        fn push_some(&mut self) {
            let n = self.buffer.min(self.room);
            self.buffer -= n;
            self.room -= n;
            self.kernel.extend(std::iter::repeat_n(b'x', n));
        }
    }

    impl BufferedLayer for Doubling {
        fn poll_read(&mut self, _: &mut Context<'_>, _: &mut [u8]) -> Poll<io::Result<usize>> {
            Poll::Pending
        }

        fn poll_take(
            &mut self,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let space = (self.limit - self.buffer) / 2;
            let mut taken = 0;
            for b in bufs {
                let n = b.len().min(space - taken);
                self.taken_log.extend_from_slice(&b[..n]);
                taken += n;
            }
            if taken == 0 {
                return Poll::Pending;
            }
            self.buffer += 2 * taken;
            self.push_some();
            Poll::Ready(Ok(taken))
        }

        fn poll_push(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.push_some();
            if self.buffer == 0 {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        }

        fn socket(&self) -> SocketRef<'_> {
            SocketRef::new(&self.socket)
        }
    }

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_write_counts_only_once_its_encoding_is_in_the_kernel() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut stream = KernelAccounted::new(Doubling::new(100, 30));
        let data = [7u8; 80];
        // 50 bytes taken (100 encoded), the kernel takes 30 of the encoding: nothing counts.
        let first = stream.poll_write_vectored(&mut cx, &[IoSlice::new(&data)]);
        assert!(first.is_pending());
        assert_eq!(stream.held(), 50);
        // Offered again: nothing new is taken while the layer holds bytes.
        stream.get_mut().room = 60;
        assert!(stream.poll_write(&mut cx, &data).is_pending());
        assert_eq!(stream.get_ref().taken_log.len(), 50, "nothing taken twice");
        stream.get_mut().room = 10;
        match stream.poll_write(&mut cx, &data) {
            Poll::Ready(Ok(50)) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(stream.held(), 0);
        assert_eq!(stream.get_ref().kernel.len(), 100);
        // The rest: 30 bytes, all in the kernel at once.
        stream.get_mut().room = 1000;
        match stream.poll_write(&mut cx, &data[50..]) {
            Poll::Ready(Ok(30)) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(stream.get_ref().taken_log, vec![7u8; 80]);
    }

    #[test]
    fn offering_fewer_bytes_than_were_taken_is_an_error() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut stream = KernelAccounted::new(Doubling::new(100, 0));
        assert!(stream.poll_write(&mut cx, &[1; 20]).is_pending());
        match stream.poll_write(&mut cx, &[1; 10]) {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_socket_underneath_stays_reachable() {
        let stream = KernelAccounted::new(Doubling::new(100, 0));
        socket2::SockRef::from(&stream.socket())
            .set_tcp_nodelay(true)
            .unwrap();
        assert_eq!(stream.socket().read_back().nodelay, Some(true));
    }
}
