//! A panic in user code the driver runs (the codec, the handshake hook) ends only the
//! connection it happened on, with a typed outcome for every request on it, on every runtime.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use keepwire_driver::{
    ClientBuilder, ClientEvent, EncodeError, Events, HandshakeError, HandshakeIo, Runtime,
    SendError, Target,
};
use keepwire_proto::{CloseReason, Sent, Violation};
use keepwire_tests::panicking::PanicsOnBoom;
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{test_config, test_on_every_runtime, within};

async fn a_panicking_codec_ends_only_its_connection(runtime: Arc<dyn Runtime>) {
    let bad = Peer::start(Behaviour::Echo);
    let good = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(bad.addr())
        .node(good.addr())
        .codec(PanicsOnBoom)
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let [bad_node, good_node] = [client.initial_nodes()[0], client.initial_nodes()[1]];
    let ping = |node| client.send(Target::Node(node), &b"ping"[..], Duration::from_secs(5));
    assert_eq!(ping(good_node).await.as_deref(), Ok(&b"ping"[..]));
    let good_conn = client.node_info(good_node).await.unwrap().conn;

    let outcome = within(
        &*runtime,
        Duration::from_secs(5),
        client.send(Target::Node(bad_node), &b"boom"[..], Duration::from_secs(3)),
    )
    .await
    .expect("the request ends");
    assert_eq!(
        outcome,
        Err(SendError::Protocol {
            violation: Violation::Undecodable,
            sent: Sent::Fully,
            retried: false,
        }),
        "the server had the whole request when its answer broke the codec"
    );
    let message = next_matching(&*runtime, &mut events, |e| match e {
        ClientEvent::CodecPanicked { message, .. } => Some(message),
        _ => None,
    })
    .await;
    assert_eq!(message, "codec bug");
    let framing = client
        .send(
            Target::Node(good_node),
            &b"bang"[..],
            Duration::from_secs(3),
        )
        .await;
    assert_eq!(framing, Err(SendError::Encode(EncodeError::Panicked)));
    assert_eq!(ping(good_node).await.as_deref(), Ok(&b"ping"[..]));
    assert_eq!(client.node_info(good_node).await.unwrap().conn, good_conn);
    assert_eq!(
        ping(bad_node).await.as_deref(),
        Ok(&b"ping"[..]),
        "reconnects"
    );
    client.shutdown().await;
}

async fn a_panicking_handshake_hook_fails_only_that_handshake(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let hook = |_io: HandshakeIo| {
        poll_fn(|_| -> Poll<Result<HandshakeIo, HandshakeError>> { panic!("hook bug") })
    };
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .handshake(hook)
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let outcome = within(
        &*runtime,
        Duration::from_secs(5),
        client.send(Target::Best, &b"hi"[..], Duration::from_secs(3)),
    )
    .await
    .expect("the request ends");
    assert_eq!(
        outcome,
        Err(SendError::ConnectionLost {
            cause: CloseReason::HandshakeFailed,
            sent: Sent::Nothing,
            retried: false,
        })
    );
    let error = next_matching(&*runtime, &mut events, |e| match e {
        ClientEvent::HandshakeFailed { error, .. } => Some(error),
        _ => None,
    })
    .await;
    assert_eq!(
        error.to_string(),
        "handshake failed: the handshake hook panicked: hook bug"
    );
    assert!(client.counters().await.is_ok(), "the driver still runs");
    client.shutdown().await;
}

/// The first event `select` picks, within 2 s.
async fn next_matching<T>(
    runtime: &dyn Runtime,
    events: &mut Events,
    mut select: impl FnMut(ClientEvent) -> Option<T>,
) -> T {
    within(runtime, Duration::from_secs(2), async {
        loop {
            let event = events.recv().await.expect("the client still runs");
            if let Some(found) = select(event) {
                return found;
            }
        }
    })
    .await
    .expect("the event within 2 s")
}

test_on_every_runtime!(
    a_panicking_codec_ends_only_its_connection,
    a_panicking_handshake_hook_fails_only_that_handshake,
);
