//! `IoStream::poll_read_buf`, the read the driver takes responses with, on real loopback
//! sockets: tokio's stream reads in place (it never touches the scratch buffer), the default
//! copies through the scratch buffer, and both append no more than the buffer has room for,
//! nor more than the limit, after what the buffer already holds.

use std::future::poll_fn;
use std::io::{self, Write};
use std::net::TcpListener;
use std::task::{Context, Poll};

use bytes::BytesMut;
use keepwire_driver::{IoStream, SocketRef};
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
