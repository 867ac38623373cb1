//! keepwire's `IoStream` on tokio's `TcpStream`, read in place.

use std::future::poll_fn;
use std::io::{IoSlice, Read, Write};

use bytes::BytesMut;
use keepwire_tokio::IoStream;

/// tokio's stream reads into the buffer's spare capacity, in place, and no more than the
/// buffer has room for, whatever the limit: a buffer half full of an earlier response, 10
/// bytes waiting, a limit of 100, and 4 bytes of room take 4, without growing the buffer.
#[tokio::test]
async fn a_read_into_a_buffer_stops_at_its_room() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.write_all(b"0123456789").unwrap();
    let mut buf = BytesMut::with_capacity(8);
    buf.extend_from_slice(b"held");
    let capacity = buf.capacity();
    let read = poll_fn(|cx| IoStream::poll_read_buf(&mut stream, cx, &mut buf, 100, &mut []))
        .await
        .unwrap();
    assert_eq!(read, capacity - 4);
    assert_eq!(&buf[..8], b"held0123");
    assert_eq!(buf.capacity(), capacity, "the buffer did not grow");
}

/// The stream says how much it wrote, and it is what the peer reads: 5 bytes into an empty
/// socket buffer, plain, vectored and a lone slice through the vectored write (which sends it
/// plainly) take all 5 each (what the handshake hooks write through; the driver's own writes
/// are vectored).
#[tokio::test]
async fn writes_report_what_reached_the_peer() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let plain = poll_fn(|cx| IoStream::poll_write(&mut stream, cx, b"hello"))
        .await
        .unwrap();
    let slices = [IoSlice::new(b"wo"), IoSlice::new(b"rld")];
    let vectored = poll_fn(|cx| IoStream::poll_write_vectored(&mut stream, cx, &slices))
        .await
        .unwrap();
    assert_eq!((plain, vectored), (5, 5));
    let mut got = [0; 10];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"helloworld");

    let lone = [IoSlice::new(b"again")];
    let written = poll_fn(|cx| IoStream::poll_write_vectored(&mut stream, cx, &lone))
        .await
        .unwrap();
    assert_eq!(written, 5);
    let mut got = [0; 5];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"again");
}
