//! Hostile peers, on every runtime: an oversize frame, a malformed header, an unknown
//! correlation id and a one-byte-per-100-ms drip each end only that connection, with a clear
//! error for every request on it, while a second, healthy node in the same client keeps
//! serving on its original connection. And the frame timeout's other side: a message that
//! arrives slowly but whole, and that the decoder consumes without an answer, leaves the
//! connection alone however long the answer then takes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use keepwire_driver::{
    ClientBuilder, Codec, Correlation, Decoded, Decoder, EncodeError, LengthPrefixed, Runtime,
    SendError, Target,
};
use keepwire_proto::{Sent, Violation};
use keepwire_tests::peers::{Behaviour, Peer, read_frame};
use keepwire_tests::{sleep, spawn, test_config, test_on_every_runtime};

const MAX_FRAME: u32 = 1024 * 1024;
const FRAME_TIMEOUT: Duration = Duration::from_millis(300);

async fn hostile_peer_ends_only_its_connection(
    runtime: Arc<dyn Runtime>,
    behaviour: Behaviour,
    expected: impl Fn(&Violation) -> bool,
) {
    let hostile = Peer::start(behaviour);
    let healthy = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(hostile.addr())
        .node(healthy.addr())
        .max_frame(MAX_FRAME)
        .frame_timeout(FRAME_TIMEOUT)
        .build(Arc::clone(&runtime))
        .unwrap();
    let [bad, good] = [client.initial_nodes()[0], client.initial_nodes()[1]];
    let warmup = client
        .send(Target::Node(good), &b"warm-up"[..], Duration::from_secs(5))
        .await;
    assert_eq!(warmup.as_deref(), Ok(&b"warm-up"[..]));
    let good_conn = client.node_info(good).await.unwrap().conn;

    // The three victims queue their requests in one poll of one task, back to back, so all
    // three are the driver's before the hostile answer to the first can come back. (As three
    // tasks, a loaded machine could run the last one after the driver had read that answer
    // and closed the connection: its request then opened a second one, with a second
    // violation.)
    let victims = spawn(&*runtime, {
        let client = client.clone();
        async move {
            let victim = |i: usize| {
                client.send(
                    Target::Node(bad),
                    format!("victim {i}"),
                    Duration::from_secs(10),
                )
            };
            let (first, (second, third)) =
                smol::future::zip(victim(0), smol::future::zip(victim(1), victim(2))).await;
            [first, second, third]
        }
    });
    let bystander = spawn(&*runtime, {
        let client = client.clone();
        let runtime = Arc::clone(&runtime);
        async move {
            for i in 0..20 {
                let payload = format!("healthy {i}");
                let answer = client
                    .send(Target::Node(good), payload.clone(), Duration::from_secs(5))
                    .await;
                assert_eq!(answer.as_deref(), Ok(payload.as_bytes()));
                sleep(&*runtime, Duration::from_millis(25)).await;
            }
        }
    });
    let mut sent = Vec::new();
    for victim in victims.join().await {
        match victim {
            Err(
                error @ SendError::Protocol {
                    violation,
                    retried: false,
                    ..
                },
            ) if expected(&violation) => {
                let message = error.to_string();
                assert!(message.starts_with("protocol error: "), "{message}");
                sent.extend(error.sent());
            }
            other => panic!("{behaviour:?}: unexpected outcome {other:?}"),
        }
    }
    // The server answered (badly) one it had in full; the others were written before the
    // connection closed, or were still queued behind it.
    assert!(sent.contains(&Sent::Fully), "{behaviour:?}: {sent:?}");
    assert!(
        sent.iter()
            .all(|s| matches!(s, Sent::Fully | Sent::Nothing)),
        "{behaviour:?}: {sent:?}"
    );
    bystander.join().await;

    assert_eq!(
        client.node_info(good).await.unwrap().conn,
        good_conn,
        "the healthy connection was untouched"
    );
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.protocol_violations, 1, "{counters:?}");
    assert_eq!(counters.connects, 2, "{counters:?}");
    client.shutdown().await;
}

async fn an_oversize_frame_ends_only_that_connection(runtime: Arc<dyn Runtime>) {
    hostile_peer_ends_only_its_connection(runtime, Behaviour::Oversize, |v| {
        *v == Violation::FrameTooLong {
            len: 0x8000_0000 - 8,
            max: u64::from(MAX_FRAME),
        }
    })
    .await;
}

async fn a_malformed_header_ends_only_that_connection(runtime: Arc<dyn Runtime>) {
    hostile_peer_ends_only_its_connection(runtime, Behaviour::Malformed, |v| {
        *v == Violation::MalformedHeader
    })
    .await;
}

async fn an_unknown_correlation_id_ends_only_that_connection(runtime: Arc<dyn Runtime>) {
    hostile_peer_ends_only_its_connection(runtime, Behaviour::UnknownId, |v| {
        matches!(v, Violation::UnknownId(_))
    })
    .await;
}

async fn a_dripping_peer_ends_only_that_connection(runtime: Arc<dyn Runtime>) {
    hostile_peer_ends_only_its_connection(runtime, Behaviour::Drip, |v| match v {
        Violation::TooSlow { elapsed } => {
            println!("drip detected after {elapsed:?} (frame timeout {FRAME_TIMEOUT:?})");
            // Upper end: a loaded CI's timer latency, still well before the ~2 s the drip
            // needs to complete the frame.
            *elapsed > FRAME_TIMEOUT && *elapsed < FRAME_TIMEOUT + Duration::from_secs(1)
        }
        _ => false,
    })
    .await;
}

/// The correlation id of a notice: a message the server sends on its own, which answers no
/// request (as PostgreSQL's `NoticeResponse`).
const NOTICE: u64 = u64::MAX;

/// The built-in framing, whose decoder consumes notices and hands over only answers.
#[derive(Debug, Clone, Copy)]
struct WithNotices;

impl Codec for WithNotices {
    fn correlation(&self) -> Correlation {
        LengthPrefixed::default().correlation()
    }

    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        LengthPrefixed::default().encode(payload, id, dst)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(*self)
    }
}

impl Decoder for WithNotices {
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Violation> {
        loop {
            match LengthPrefixed::default().decode(buf)? {
                Some(Decoded::Tagged { id: NOTICE, .. }) => {}
                decoded => return Ok(decoded),
            }
        }
    }
}

/// A server that takes one request, sends a notice in two pieces 20 ms apart, stays quiet
/// for three frame timeouts, then answers. Its address.
fn notice_then_late_answer() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let (id, payload) = read_frame(&mut stream).unwrap();
        let notice = LengthPrefixed::frame(NOTICE, b"a notice").unwrap();
        let (head, tail) = notice.split_at(6);
        stream.write_all(head).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        stream.write_all(tail).unwrap();
        std::thread::sleep(3 * FRAME_TIMEOUT);
        let answer = LengthPrefixed::frame(id, &payload).unwrap();
        stream.write_all(&answer).unwrap();
        let _ = stream.read(&mut [0; 1]); // until the client closes
    });
    addr
}

/// Part of a notice starts the frame timeout; the rest of it, consumed by the decoder with no
/// answer, must stop it, or the quiet wait for the answer that follows reads as a response
/// arriving too slowly.
async fn a_whole_message_without_an_answer_stops_the_frame_timeout(runtime: Arc<dyn Runtime>) {
    let client = ClientBuilder::new(test_config())
        .node(notice_then_late_answer())
        .codec(WithNotices)
        .frame_timeout(FRAME_TIMEOUT)
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let answer = client
        .send(
            Target::Node(node),
            &b"patience"[..],
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(answer.as_deref(), Ok(&b"patience"[..]));
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.protocol_violations, 0, "{counters:?}");
    client.shutdown().await;
}

test_on_every_runtime!(
    an_oversize_frame_ends_only_that_connection,
    a_malformed_header_ends_only_that_connection,
    an_unknown_correlation_id_ends_only_that_connection,
    a_dripping_peer_ends_only_that_connection,
    a_whole_message_without_an_answer_stops_the_frame_timeout,
);
