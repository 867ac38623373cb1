//! The runtime crates' streams on real sockets, on every runtime: a vectored write puts every
//! slice on the wire, in order (the driver hands a connection's queued frames out in one
//! `poll_write_vectored`, natively: one `writev`).

use std::future::poll_fn;
use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keepwire_driver::{LengthPrefixed, PreparedSocket, Runtime, SocketOptions};
use keepwire_proto::RequestId;
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{test_on_every_runtime, within};

async fn a_vectored_write_sends_every_slice_in_order(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let (socket, _) = PreparedSocket::new(peer.addr(), &SocketOptions::default()).unwrap();
    let mut stream = runtime.connect(socket, peer.addr()).await.unwrap();
    let frames: Vec<Bytes> = (0..3u64)
        .map(|id| LengthPrefixed::frame(id, format!("frame {id}").as_bytes()).unwrap())
        .collect();
    let total: usize = frames.iter().map(Bytes::len).sum();

    let mut written = 0;
    while written < total {
        // Rebuild the slices past what was written: a short write may end mid-frame.
        let mut skip = written;
        let slices: Vec<IoSlice<'_>> = frames
            .iter()
            .filter_map(|f| {
                let rest = f.get(skip.min(f.len())..).filter(|r| !r.is_empty());
                skip = skip.saturating_sub(f.len());
                rest.map(IoSlice::new)
            })
            .collect();
        let n = poll_fn(|cx| stream.poll_write_vectored(cx, &slices))
            .await
            .unwrap();
        assert!(n > 0, "the stream took no byte");
        if written == 0 {
            // An empty socket buffer takes 60 bytes at once: a native `writev` takes them
            // all, a fallback to `poll_write` only the first slice.
            assert!(
                n > frames[0].len(),
                "not a native vectored write: {n} bytes"
            );
        }
        written += n;
    }

    let codec = LengthPrefixed::default();
    let mut inbound = BytesMut::new();
    let mut answers = Vec::new();
    let read_all = within(&*runtime, Duration::from_secs(3), async {
        let mut buf = [0; 256];
        while answers.len() < frames.len() {
            let n = poll_fn(|cx| stream.poll_read(cx, &mut buf)).await.unwrap();
            assert_ne!(n, 0, "the peer closed early");
            inbound.extend_from_slice(&buf[..n]);
            while let Some((id, payload)) = codec.cut(&mut inbound).unwrap() {
                answers.push((RequestId::from_u64(id), payload));
            }
        }
    })
    .await;
    assert!(read_all.is_some(), "echoes missing: {answers:?}");
    let expected: Vec<(RequestId, Bytes)> = (0..3u64)
        .map(|id| (RequestId::from_u64(id), Bytes::from(format!("frame {id}"))))
        .collect();
    assert_eq!(answers, expected);
    assert_eq!(peer.requests(), 3);
}

test_on_every_runtime!(a_vectored_write_sends_every_slice_in_order);
