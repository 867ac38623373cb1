//! `IoStream::poll_read_buf`, the read the driver takes responses with, on real loopback
//! sockets: tokio's stream reads in place (it never touches the scratch buffer), the default
//! copies through the scratch buffer, and both append no more than the buffer has room for,
//! nor more than the limit, after what the buffer already holds. And the limits the driver
//! reads with: a read that would fill its chunk stops where a response ends.

use std::future::poll_fn;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use keepwire_driver::{
    BoxFuture, ClientBuilder, IoStream, PreparedSocket, Runtime, SocketRef, Target, Timer,
};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;
use tokio::net::TcpStream;

/// 200 bytes a peer sent, already in the socket's receive buffer.
fn bytes_sent() -> Vec<u8> {
    (0..200u8).collect()
}

/// A tokio stream whose peer has written [`bytes_sent`], which has arrived.
async fn stream_with_bytes_waiting() -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.write_all(&bytes_sent()).unwrap();
    drop(peer); // the end of the stream follows the bytes
    stream.readable().await.unwrap();
    stream
}

/// Reads until the end of the stream, `limit` at a time, into buffers of `room` bytes of
/// spare capacity (the first after `held`); every read's count, and all the bytes.
async fn read_all(
    stream: &mut dyn IoStream,
    held: &[u8],
    room: usize,
    limit: usize,
    scratch: &mut [u8],
) -> (Vec<usize>, Vec<u8>) {
    let mut buf = BytesMut::with_capacity(held.len() + room);
    buf.extend_from_slice(held);
    let mut all = Vec::new();
    let mut counts = Vec::new();
    loop {
        if buf.capacity() == buf.len() {
            all.extend_from_slice(&buf);
            buf = BytesMut::with_capacity(room);
        }
        let before = buf.len();
        let n = poll_fn(|cx| stream.poll_read_buf(cx, &mut buf, limit, scratch))
            .await
            .unwrap();
        assert_eq!(buf.len(), before + n, "the count is what was appended");
        if n == 0 {
            all.extend_from_slice(&buf);
            return (counts, all);
        }
        counts.push(n);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap()
}

#[test]
fn tokio_reads_in_place_within_the_room_and_the_limit() {
    runtime().block_on(async {
        let mut stream = stream_with_bytes_waiting().await;
        // No scratch at all: a copy through it could not read a byte.
        let (counts, buf) = read_all(&mut stream, b"held", 64, 50, &mut []).await;
        assert!(counts.iter().all(|&n| n <= 50), "{counts:?}");
        assert_eq!(&buf[..4], b"held");
        assert_eq!(&buf[4..], &bytes_sent()[..]);

        let mut stream = stream_with_bytes_waiting().await;
        let (counts, buf) = read_all(&mut stream, b"", 30, 1024, &mut []).await;
        assert!(counts.iter().all(|&n| n <= 30), "{counts:?}");
        assert_eq!(&buf[..], &bytes_sent()[..]);
    });
}

#[test]
fn the_default_copies_through_the_scratch_within_the_room_and_the_limit() {
    runtime().block_on(async {
        let mut plain = ReadOnly(stream_with_bytes_waiting().await);
        let mut scratch = [0u8; 40];
        let (counts, buf) = read_all(&mut plain, b"held", 64, 1024, &mut scratch).await;
        assert!(counts.iter().all(|&n| n <= 40), "the scratch: {counts:?}");
        assert_eq!(&buf[..4], b"held");
        assert_eq!(&buf[4..], &bytes_sent()[..]);

        let mut plain = ReadOnly(stream_with_bytes_waiting().await);
        let mut scratch = [0u8; 1024];
        let (counts, _) = read_all(&mut plain, b"", 25, 1024, &mut scratch).await;
        assert!(counts.iter().all(|&n| n <= 25), "the room: {counts:?}");

        let mut plain = ReadOnly(stream_with_bytes_waiting().await);
        let (counts, buf) = read_all(&mut plain, b"", 64, 7, &mut scratch).await;
        assert!(counts.iter().all(|&n| n <= 7), "the limit: {counts:?}");
        assert_eq!(&buf[..], &bytes_sent()[..]);
    });
}

/// A stream that implements only what it must: reads go through the trait's default.
#[derive(Debug)]
struct ReadOnly(TcpStream);

impl IoStream for ReadOnly {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.0.poll_read(cx, buf)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.0.poll_write(cx, buf)
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(&self.0)
    }
}

/// A length-prefixed response of 2,988 bytes of payload: 3,000 bytes with its header, which
/// do not divide a 64 KiB chunk.
const RESPONSE: usize = 3000;

/// Once the driver has decoded a response, a read into a connection's chunk asks for no more
/// than ends where a whole number of responses of that length would end (`read_limit` in
/// `conn_io.rs`): a response the chunk's end cut in two would be copied to the next chunk.
/// Sixty-four requests in flight, 40 times over, against an echo peer, through a stream that
/// reads at most [`SHORT_READ`] bytes at a time, so that reads end inside responses.
#[test]
fn reads_that_would_fill_a_chunk_stop_where_a_response_ends() {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reads = Arc::new(Mutex::new(Reads::default()));
    let runtime = Arc::new(RecordingRuntime {
        inner: TokioRuntime::from_handle(tokio.handle().clone()),
        reads: Arc::clone(&reads),
    });
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(runtime)
        .unwrap();
    tokio.block_on(async {
        let payload = vec![7u8; RESPONSE - 12];
        for _ in 0..40 {
            let sends: Vec<_> = (0..64)
                .map(|_| {
                    let (client, payload) = (client.clone(), payload.clone());
                    tokio::spawn(async move {
                        client
                            .send(Target::Best, payload, Duration::from_secs(5))
                            .await
                    })
                })
                .collect();
            for send in sends {
                assert_eq!(send.await.unwrap().unwrap().len(), RESPONSE - 12);
            }
        }
        client.shutdown().await;
    });
    let reads = reads.lock().unwrap();
    assert!(reads.checked > 100, "only {} reads checked", reads.checked);
    assert!(reads.misaligned.is_empty(), "{:?}", reads.misaligned);
    // Every response went into a chunk in place, the first included (read into a connection
    // that had no chunk yet): none through the scratch buffer and copied from it.
    assert_eq!(reads.total, 40 * 64 * RESPONSE);
    assert_eq!(reads.copied, 0, "bytes read through the scratch buffer");
}

/// The most a [`Recording`] stream reads at a time: not a multiple of [`RESPONSE`].
const SHORT_READ: usize = 4000;

/// What the recording stream saw of the driver's reads.
#[derive(Debug, Default)]
struct Reads {
    /// Bytes read so far in place ([`IoStream::poll_read_buf`]).
    total: usize,
    /// Bytes read through the scratch buffer ([`IoStream::poll_read`]), which the driver
    /// uses only for a connection that awaits no response.
    copied: usize,
    /// Reads made after a whole response had been read (so decoded before them).
    checked: usize,
    /// Those whose ask, `(held, room, limit)`, would end inside a response.
    misaligned: Vec<(usize, usize, usize)>,
}

/// tokio's runtime, but each connection's stream records the driver's reads.
#[derive(Debug)]
struct RecordingRuntime {
    inner: TokioRuntime,
    reads: Arc<Mutex<Reads>>,
}

impl Runtime for RecordingRuntime {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        self.inner.new_timer(deadline)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        self.inner.spawn(future);
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        let (connect, reads) = (self.inner.connect(socket, addr), Arc::clone(&self.reads));
        Box::pin(async move {
            let inner = connect.await?;
            Ok(Box::new(Recording { inner, reads }) as Box<dyn IoStream>)
        })
    }
}

/// A stream that records each read's ask into a buffer, and reads at most [`SHORT_READ`].
#[derive(Debug)]
struct Recording {
    inner: Box<dyn IoStream>,
    reads: Arc<Mutex<Reads>>,
}

impl IoStream for Recording {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let read = self.inner.poll_read(cx, buf);
        if let Poll::Ready(Ok(n)) = read {
            self.reads.lock().unwrap().copied += n;
        }
        read
    }

    fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        limit: usize,
        scratch: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let (held, room) = (buf.len(), buf.capacity() - buf.len());
        let read = self
            .inner
            .poll_read_buf(cx, buf, limit.min(SHORT_READ), scratch);
        let mut reads = self.reads.lock().unwrap();
        if reads.total >= RESPONSE {
            reads.checked += 1;
            if (held + limit.min(room)) % RESPONSE != 0 {
                reads.misaligned.push((held, room, limit));
            }
        }
        if let Poll::Ready(Ok(n)) = read {
            reads.total += n;
        }
        read
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_write_vectored(cx, bufs)
    }

    fn held(&self) -> usize {
        self.inner.held()
    }

    fn socket(&self) -> SocketRef<'_> {
        self.inner.socket()
    }
}
