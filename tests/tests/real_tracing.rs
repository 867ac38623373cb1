//! What an operator's `tracing` subscriber sees, on every runtime: every request's end is a
//! trace event, a write timeout is a warning, an eviction an info, a quarantine a warning,
//! a watermark flip a warning and its end an info, panic mode a warning and a readmission an
//! info, a codec's panic an error, each under the spans of its node
//! (with the node's address) and connection, with its typed reason. The subscriber is the
//! test's thread-local default and every task runs on that thread.

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::{ClientBuilder, HandshakeError, HandshakeIo, Runtime, SendError, Target};
use keepwire_proto::{CloseReason, Event};
use keepwire_tests::collect::{CollectingSubscriber, SeenEvent};
use keepwire_tests::panicking::PanicsOnBoom;
use keepwire_tests::peers::{Behaviour, Peer, RefusingPort};
use keepwire_tests::{
    quick_to_quarantine, spawn, test_config, test_on_this_thread_on_every_runtime, wait_for,
};
use tracing::Level;

/// Runs `body` with a collecting subscriber as the thread's default, and returns what it saw.
async fn traced<F: Future<Output = ()>>(body: F) -> Vec<SeenEvent> {
    let subscriber = CollectingSubscriber::default();
    let _default = tracing::subscriber::set_default(subscriber.clone());
    body.await;
    subscriber.events()
}

/// The one keepwire event whose message starts with `message`.
fn the<'a>(events: &'a [SeenEvent], message: &str) -> &'a SeenEvent {
    let found: Vec<_> = events
        .iter()
        .filter(|e| e.target == "keepwire" && e.message.starts_with(message))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "events starting {message:?}: {:#?}",
        events.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
    found[0]
}

async fn a_write_timeout_is_a_warning_under_its_node_and_connection(runtime: Arc<dyn Runtime>) {
    let peer = Peer::never_read();
    let events = traced(async {
        let mut config = test_config();
        config.socket.send_buffer_size = Some(4096);
        config.socket.recv_buffer_size = Some(4096);
        let client = ClientBuilder::new(config)
            .node(peer.addr())
            .build(Arc::clone(&runtime))
            .unwrap();
        let outcome = client
            .send(Target::Best, vec![7u8; 4 << 20], Duration::from_secs(10))
            .await;
        assert!(
            matches!(
                outcome,
                Err(SendError::ConnectionLost {
                    cause: CloseReason::WriteTimeout,
                    ..
                })
            ),
            "{outcome:?}"
        );
        client.shutdown().await;
    })
    .await;
    let timeout = the(&events, "write timeout");
    assert_eq!(timeout.level, Level::WARN);
    assert_eq!(timeout.fields["reason"], "closed: write timeout");
    assert_eq!(timeout.fields["kind"], "write_timeout");
    assert_eq!(timeout.fields["from"], "ready");
    assert_eq!(timeout.fields["state"], "disconnected");
    let addr = peer.addr().to_string();
    assert_eq!(timeout.span_field("keepwire_node", "addr"), Some(&*addr));
    assert!(
        timeout.span_field("keepwire_conn", "conn").is_some(),
        "{timeout:?}"
    );
    assert!(timeout.span_field("keepwire_client", "seed").is_some());
    // The connection's way there: connecting and ready are debug, as a reconnect would be.
    let connecting = the(&events, "connecting");
    assert_eq!(connecting.level, Level::DEBUG);
    assert_eq!(connecting.fields["reason"], "on demand");
    // One 4 MiB frame stays below the 16 MiB high watermark: the write timeout, not the
    // watermarks, ended this connection.
    assert!(
        events
            .iter()
            .all(|e| !e.message.starts_with("not writable")),
        "no watermark flip for one 4 MiB frame under a 16 MiB high watermark"
    );
}

async fn an_eviction_is_an_info_with_its_reason(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let events = traced(async {
        let client = ClientBuilder::new(test_config())
            .node(peer.addr())
            .build(Arc::clone(&runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        let ping = || client.send(Target::Node(node), &b"ping"[..], Duration::from_secs(5));
        assert_eq!(ping().await.as_deref(), Ok(&b"ping"[..]));
        client.evict(node).await.unwrap();
        assert_eq!(ping().await.as_deref(), Ok(&b"ping"[..]));
        client.shutdown().await;
    })
    .await;
    let evicted = the(&events, "connection evicted");
    assert_eq!(evicted.level, Level::INFO);
    assert_eq!(evicted.fields["kind"], "requested");
    assert_eq!(evicted.fields["reason"], "requested");
    assert_eq!(
        evicted.span_field("keepwire_node", "addr"),
        Some(&*peer.addr().to_string())
    );
    let evicted_conn = evicted.span_field("keepwire_conn", "conn");
    assert!(evicted_conn.is_some());
    // The close it caused is filed under the same connection, not the next one.
    let closed = events
        .iter()
        .find(|e| e.message == "connection closed" && e.fields["kind"] == "evicted")
        .expect("the evicted connection's close");
    assert_eq!(closed.level, Level::DEBUG);
    assert_eq!(closed.span_field("keepwire_conn", "conn"), evicted_conn);
    let connects: Vec<_> = events
        .iter()
        .filter(|e| e.message == "connecting")
        .map(|e| e.span_field("keepwire_conn", "conn"))
        .collect();
    assert_eq!(connects.len(), 2, "the second ping reconnected");
    assert_ne!(connects[0], connects[1], "each connection has its own span");
}

async fn a_quarantine_is_a_warning_with_its_cause(runtime: Arc<dyn Runtime>) {
    let port = RefusingPort::new();
    let events = traced(async {
        let mut config = test_config();
        config.quarantine_after_failures = 2;
        config.panic_threshold = 0.0; // strict quarantine: this test is not about panic mode
        config.reconnect_backoff = Duration::from_millis(10);
        config.reconnect_backoff_max = Duration::from_millis(20);
        let client = ClientBuilder::new(config)
            .node(port.addr())
            .build(Arc::clone(&runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        let mut events = client.subscribe();
        // Each send waits out the backoff, connects, and is refused: two failures.
        for _ in 0..2 {
            let refused = client
                .send(Target::Node(node), &b"hi"[..], Duration::from_secs(2))
                .await;
            assert!(refused.is_err_and(|e| e.is_retryable()));
        }
        wait_for(
            &*runtime,
            &mut events,
            Duration::from_secs(3),
            "quarantine",
            |e| matches!(e, Event::Quarantined { .. }).then_some(()),
        )
        .await;
        client.shutdown().await;
    })
    .await;
    let quarantined = the(&events, "node quarantined");
    assert_eq!(quarantined.level, Level::WARN);
    assert_eq!(quarantined.fields["kind"], "connection_failures");
    assert_eq!(
        quarantined.span_field("keepwire_node", "addr"),
        Some(&*port.addr().to_string())
    );
    let failures: Vec<_> = events
        .iter()
        .filter(|e| e.message == "connection failed")
        .collect();
    assert!(failures.len() >= 2, "{failures:#?}");
    assert!(failures.iter().all(|e| e.level == Level::INFO));
    assert!(
        failures
            .iter()
            .all(|e| e.fields["reason"].starts_with("closed: connect failed")),
        "{failures:#?}"
    );
}

async fn every_request_ends_with_a_trace_event_under_its_node(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let events = traced(async {
        let client = ClientBuilder::new(test_config())
            .node(peer.addr())
            .build(Arc::clone(&runtime))
            .unwrap();
        for _ in 0..3 {
            let answer = client
                .send(Target::Best, b"ping".to_vec(), Duration::from_secs(10))
                .await;
            assert_eq!(answer.as_deref().ok(), Some(&b"ping"[..]), "{answer:?}");
        }
        client.shutdown().await;
    })
    .await;
    // The driver skips its per-request tracing unless a subscriber wants TRACE from keepwire;
    // this one wants everything, so each of the three requests says how it ended.
    let ended: Vec<_> = events
        .iter()
        .filter(|e| e.target == "keepwire" && e.message == "request ended")
        .collect();
    assert_eq!(ended.len(), 3, "{ended:#?}");
    let addr = peer.addr().to_string();
    for event in ended {
        assert_eq!(event.level, Level::TRACE);
        assert_eq!(event.fields["outcome"], "response");
        assert_eq!(event.fields["sent"], "fully sent");
        assert_eq!(event.span_field("keepwire_node", "addr"), Some(&*addr));
    }
}

/// A connection above its high watermark is a warning (sends are rejected), and back below
/// its low watermark an info, each with the pending bytes, under its node and connection: a
/// server that stalls while a 2 MiB request is on its way, then resumes.
async fn a_watermark_flip_is_a_warning_and_its_end_an_info(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let events = traced(async {
        let mut config = test_config();
        config.socket.send_buffer_size = Some(4096);
        config.socket.recv_buffer_size = Some(4096);
        config.high_watermark = 1 << 20;
        config.low_watermark = 1 << 19;
        config.write_timeout = Duration::from_secs(5);
        let client = ClientBuilder::new(config)
            .node(peer.addr())
            .build(Arc::clone(&runtime))
            .unwrap();
        let mut events = client.subscribe();
        let answer = client
            .send(Target::Best, &b"warm up"[..], Duration::from_secs(5))
            .await;
        assert!(answer.is_ok(), "{answer:?}");
        peer.stall();
        let big = spawn(&*runtime, {
            let client = client.clone();
            async move {
                client
                    .send(Target::Best, vec![7u8; 2 << 20], Duration::from_secs(10))
                    .await
            }
        });
        for writable in [false, true] {
            if writable {
                peer.resume();
            }
            wait_for(
                &*runtime,
                &mut events,
                Duration::from_secs(5),
                "a watermark flip",
                |e| {
                    matches!(e, Event::Writability { writable: w, .. } if *w == writable)
                        .then_some(())
                },
            )
            .await;
        }
        let answer = big.join().await;
        assert_eq!(answer.map(|a| a.len()), Ok(2 << 20));
        client.shutdown().await;
    })
    .await;
    let addr = peer.addr().to_string();
    let unwritable = the(&events, "not writable");
    assert_eq!(unwritable.level, Level::WARN);
    let writable = the(&events, "writable again");
    assert_eq!(writable.level, Level::INFO);
    for flip in [unwritable, writable] {
        assert!(flip.fields["pending"].parse::<u64>().is_ok(), "{flip:?}");
        assert_eq!(flip.span_field("keepwire_node", "addr"), Some(&*addr));
        assert!(
            flip.span_field("keepwire_conn", "conn").is_some(),
            "{flip:?}"
        );
    }
}

/// A sole node quarantined enters panic mode (a warning with the healthy and admitted
/// counts); its probe's readmission is an info with how, and the end of panic mode an info.
async fn readmission_and_panic_mode_are_told(runtime: Arc<dyn Runtime>) {
    let mut peer = Peer::start(Behaviour::Echo);
    peer.kill();
    let events = traced(async {
        let client = quick_to_quarantine(&runtime, peer.addr());
        let mut events = client.subscribe();
        let refused = client
            .send(Target::Best, &b"ping"[..], Duration::from_secs(5))
            .await;
        assert!(refused.is_err(), "{refused:?}");
        peer.revive(Behaviour::Echo);
        wait_for(
            &*runtime,
            &mut events,
            Duration::from_secs(5),
            "readmission",
            |e| matches!(e, Event::Readmitted { .. }).then_some(()),
        )
        .await;
        client.shutdown().await;
    })
    .await;
    let panic = the(&events, "panic mode:");
    assert_eq!(panic.level, Level::WARN);
    assert_eq!(
        (
            panic.fields["healthy"].as_str(),
            panic.fields["admitted"].as_str()
        ),
        ("0", "1")
    );
    assert!(panic.span_field("keepwire_client", "seed").is_some());
    let readmitted = the(&events, "node readmitted");
    assert_eq!(readmitted.level, Level::INFO);
    assert_eq!(readmitted.fields["kind"], "probe");
    assert_eq!(
        readmitted.span_field("keepwire_node", "addr"),
        Some(&*peer.addr().to_string())
    );
    assert_eq!(the(&events, "panic mode over").level, Level::INFO);
}

/// What the client itself reports: a socket option the kernel capped and a refused
/// handshake are warnings under the connection they are about (with the report and the
/// error), and a removed node says so at debug level under its node.
async fn client_events_are_told_under_their_connection(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let events = traced(async {
        let mut config = test_config();
        config.socket.send_buffer_size = Some(u32::MAX / 2); // above any kernel's cap
        let refused = |_io: HandshakeIo| async {
            Err::<HandshakeIo, _>(HandshakeError::auth("bad credentials"))
        };
        let client = ClientBuilder::new(config)
            .node(peer.addr())
            .handshake(refused)
            .build(Arc::clone(&runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        let outcome = client
            .send(Target::Node(node), &b"hi"[..], Duration::from_secs(5))
            .await;
        assert!(outcome.is_err_and(|e| e.is_final()));
        client.remove_node(node).await.unwrap();
        client.shutdown().await;
    })
    .await;
    let capped = the(&events, "socket options not applied");
    assert_eq!(capped.level, Level::WARN);
    assert!(capped.fields["report"].contains("SendBuffer"), "{capped:?}");
    let handshake = the(&events, "handshake failed");
    assert_eq!(handshake.level, Level::WARN);
    assert!(
        handshake.fields["error"].contains("bad credentials"),
        "{handshake:?}"
    );
    for event in [capped, handshake] {
        assert!(
            event.span_field("keepwire_conn", "conn").is_some(),
            "{event:?}"
        );
    }
    let removed = the(&events, "node removed");
    assert_eq!(removed.level, Level::DEBUG);
    assert_eq!(
        removed.span_field("keepwire_node", "addr"),
        Some(&*peer.addr().to_string())
    );
}

/// A codec that panics decoding a response is an error (with the panic's message) under
/// the node and connection it broke.
async fn a_codec_panic_is_an_error_under_its_connection(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let events = traced(async {
        let client = ClientBuilder::new(test_config())
            .node(peer.addr())
            .codec(PanicsOnBoom)
            .build(Arc::clone(&runtime))
            .unwrap();
        let outcome = client
            .send(Target::Best, &b"boom"[..], Duration::from_secs(5))
            .await;
        assert!(
            matches!(outcome, Err(SendError::Protocol { .. })),
            "{outcome:?}"
        );
        client.shutdown().await;
    })
    .await;
    let panicked = the(&events, "the codec panicked");
    assert_eq!(panicked.level, Level::ERROR);
    assert_eq!(panicked.fields["panic"], "codec bug");
    assert!(
        panicked.span_field("keepwire_conn", "conn").is_some(),
        "{panicked:?}"
    );
    assert_eq!(
        panicked.span_field("keepwire_node", "addr"),
        Some(&*peer.addr().to_string())
    );
}

test_on_this_thread_on_every_runtime!(
    every_request_ends_with_a_trace_event_under_its_node,
    a_write_timeout_is_a_warning_under_its_node_and_connection,
    an_eviction_is_an_info_with_its_reason,
    a_quarantine_is_a_warning_with_its_cause,
    a_watermark_flip_is_a_warning_and_its_end_an_info,
    readmission_and_panic_mode_are_told,
    client_events_are_told_under_their_connection,
    a_codec_panic_is_an_error_under_its_connection,
);
