//! `ClientService` as a `tower::Service`, on every runtime: its readiness is keepwire's own
//! back-pressure, so a load-shed layer refuses requests at once while the node's connection
//! is above its high watermark (nothing reaches keepwire), and `poll_ready` waits out an
//! in-flight limit, a reconnect backoff, a final failure's backoff or a node disabled by the
//! application, and wakes when keepwire can take a request again.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keepwire_driver::{Backpressure, ClientBuilder, ClientService, Runtime, SendError, Target};
use keepwire_proto::{Endpoint, Event};
use keepwire_tests::names::Names;
use keepwire_tests::peers::{Behaviour, Peer, RefusingPort};
use keepwire_tests::{send_held, sleep, test_config, test_on_every_runtime, wait_for, within};
use tower::load_shed::error::Overloaded;
use tower::{Service, ServiceBuilder, ServiceExt};

async fn a_load_shed_layer_sheds_instead_of_queuing_while_the_node_is_not_writable(
    runtime: Arc<dyn Runtime>,
) {
    let peer = Peer::never_read();
    let mut config = test_config();
    config.socket.send_buffer_size = Some(4096);
    config.socket.recv_buffer_size = Some(4096);
    config.high_watermark = 64 * 1024;
    config.low_watermark = 32 * 1024;
    config.write_timeout = Duration::from_secs(30); // stalled, not closed
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let mut events = client.subscribe();
    let service = client
        .service(Target::Node(node), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(service.backpressure(), None);
    let mut stack = ServiceBuilder::new().load_shed().service(service.clone());

    // Fill the connection past its high watermark with requests that stay in flight.
    let payload = Bytes::from(vec![b'x'; 16 * 1024]);
    let held: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            let payload = payload.clone();
            keepwire_tests::spawn(&*runtime, async move {
                client
                    .send(Target::Node(node), payload, Duration::from_secs(30))
                    .await
            })
        })
        .collect();
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(3),
        "the flip above the high watermark",
        |e| {
            matches!(
                e,
                Event::Writability {
                    writable: false,
                    ..
                }
            )
            .then_some(())
        },
    )
    .await;
    let shed_by_now = within(&*runtime, Duration::from_secs(1), async {
        while service.backpressure().is_none() {
            sleep(&*runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(shed_by_now.is_some(), "readiness never saw the flip");
    assert_eq!(service.backpressure(), Some(Backpressure::NotWritable));
    // Every filler request has been taken or refused by now, so the counters below move
    // only for the request under test.
    let all_handled = within(&*runtime, Duration::from_secs(1), async {
        loop {
            let counters = client.counters().await.unwrap();
            if counters.submitted + counters.unwritable_rejections >= held.len() as u64 {
                break;
            }
            sleep(&*runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(all_handled.is_some());

    let before = client.counters().await.unwrap();
    let started = Instant::now();
    let shed = stack
        .ready()
        .await
        .unwrap()
        .call(Bytes::from_static(b"one more"))
        .await;
    let error = shed.expect_err("shed");
    assert!(error.is::<Overloaded>(), "{error}");
    assert!(started.elapsed() < Duration::from_millis(500));
    let after = client.counters().await.unwrap();
    assert_eq!(after.submitted, before.submitted, "nothing was queued");
    assert_eq!(
        after.unwritable_rejections, before.unwritable_rejections,
        "nothing even reached keepwire"
    );
    // Without the layer, keepwire itself refuses (and counts it).
    let refused = client
        .send(Target::Node(node), &b"direct"[..], Duration::from_secs(1))
        .await;
    assert_eq!(refused, Err(SendError::NotWritable));

    client.shutdown().await;
    for request in held {
        assert!(request.join().await.is_err());
    }
    let mut service = service;
    let after_shutdown = poll_fn(|cx| service.poll_ready(cx)).await;
    assert_eq!(after_shutdown, Err(SendError::Shutdown));
}

/// `service`'s readiness, if `poll_ready` gives one within `limit`.
async fn ready_within(
    runtime: &dyn Runtime,
    limit: Duration,
    service: &mut ClientService,
) -> Option<Result<(), SendError>> {
    within(runtime, limit, poll_fn(|cx| service.poll_ready(cx))).await
}

async fn poll_ready_waits_out_the_in_flight_limit_and_wakes_when_a_slot_frees(
    runtime: Arc<dyn Runtime>,
) {
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    config.max_in_flight = 2;
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let mut service = client
        .service(Target::Node(node), Duration::from_secs(5))
        .await
        .unwrap();
    let ping = client
        .send(Target::Node(node), &b"ping"[..], Duration::from_secs(5))
        .await;
    assert!(ping.is_ok(), "{ping:?}");
    peer.stall();
    let held = send_held(
        &*runtime,
        &client,
        Target::Node(node),
        2,
        Duration::from_secs(5),
    );
    let full = within(&*runtime, Duration::from_secs(1), async {
        while service.backpressure() != Some(Backpressure::InFlightLimit) {
            sleep(&*runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(full.is_some(), "{:?}", service.backpressure());
    let waiting = ready_within(&*runtime, Duration::from_millis(200), &mut service).await;
    assert_eq!(waiting, None, "not ready while both slots are taken");
    let resumed = Instant::now();
    peer.resume();
    let ready = ready_within(&*runtime, Duration::from_secs(2), &mut service).await;
    assert_eq!(
        ready,
        Some(Ok(())),
        "woken when the answers freed the slots"
    );
    println!("ready {:?} after the peer resumed", resumed.elapsed());
    for request in held {
        assert!(request.join().await.is_ok());
    }
    let answer = service.call(&b"after"[..]).await;
    assert_eq!(answer.as_deref(), Ok(&b"after"[..]));
    client.shutdown().await;
}

/// A node the application disabled takes no request, and a service pinned to it says so at
/// once (`NoNode`), until the node is enabled again.
async fn poll_ready_waits_while_the_node_is_disabled(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let mut service = client
        .service(Target::Node(node), Duration::from_secs(5))
        .await
        .unwrap();
    let ping = service.call(&b"ping"[..]).await;
    assert_eq!(ping.as_deref(), Ok(&b"ping"[..]));
    client.disable_node(node).await.unwrap();
    assert_eq!(service.backpressure(), Some(Backpressure::NoNode));
    assert_eq!(
        (service.target(), service.timeout()),
        (Target::Node(node), Duration::from_secs(5))
    );
    let shown = format!("{service:?}");
    assert!(
        shown.starts_with("ClientService") && shown.contains("NoNode"),
        "{shown}"
    );
    let waiting = ready_within(&*runtime, Duration::from_millis(200), &mut service).await;
    assert_eq!(waiting, None, "not ready while the node is disabled");
    client.enable_node(node).await.unwrap();
    let ready = ready_within(&*runtime, Duration::from_secs(2), &mut service).await;
    assert_eq!(ready, Some(Ok(())), "ready once the node is enabled");
    let answer = service.call(&b"after"[..]).await;
    assert_eq!(answer.as_deref(), Ok(&b"after"[..]));
    client.shutdown().await;
}

/// `service` is not ready (`NoNode`) while a backoff that began at `since` runs, and its
/// `poll_ready` wakes once the backoff ends: no sooner than `at_least_ms` after `since`.
async fn blocked_until_the_backoff_ends(
    runtime: &dyn Runtime,
    service: &mut ClientService,
    since: Instant,
    at_least_ms: u64,
) {
    assert_eq!(service.backpressure(), Some(Backpressure::NoNode));
    let ready = ready_within(runtime, Duration::from_secs(2), service).await;
    assert_eq!(ready, Some(Ok(())), "woken when the backoff ended");
    let waited = since.elapsed();
    assert!(waited >= Duration::from_millis(at_least_ms), "{waited:?}");
}

async fn poll_ready_for_the_best_node_waits_out_a_reconnect_backoff(runtime: Arc<dyn Runtime>) {
    let port = RefusingPort::new();
    let mut config = test_config();
    config.reconnect_backoff = Duration::from_millis(300);
    config.reconnect_backoff_max = Duration::from_millis(300);
    let client = ClientBuilder::new(config)
        .node(port.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let refused = client
        .send(Target::Best, &b"hi"[..], Duration::from_secs(1))
        .await;
    let backoff_from = Instant::now();
    assert!(refused.is_err_and(|e| e.is_retryable()));
    let mut service = client
        .service(Target::Best, Duration::from_secs(1))
        .await
        .unwrap();
    blocked_until_the_backoff_ends(&*runtime, &mut service, backoff_from, 250).await;
    // A removed node's service is done for good.
    let node = client.initial_nodes()[0];
    let mut pinned = client
        .service(Target::Node(node), Duration::from_secs(1))
        .await
        .unwrap();
    client.remove_node(node).await.unwrap();
    let gone = ready_within(&*runtime, Duration::from_secs(1), &mut pinned).await;
    assert_eq!(gone, Some(Err(SendError::StaleNode)));
    client.shutdown().await;
}

/// A node whose name does not exist is refused at once for its final backoff: its service is
/// not ready (`NoNode`) while a call would be refused, and wakes when the backoff ends.
async fn poll_ready_for_a_node_waits_out_a_final_failures_backoff(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let names = Names::new();
    let mut config = test_config();
    config.final_failure_backoff = Duration::from_millis(400);
    let client = ClientBuilder::new(config)
        .node(Endpoint::name("db.test", peer.addr().port()).unwrap())
        .resolver(names.clone())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let missing = client
        .send(Target::Node(node), &b"hi"[..], Duration::from_secs(1))
        .await;
    let backoff_from = Instant::now();
    assert!(missing.is_err_and(|e| e.is_final()));
    names.set("db.test", &[peer.addr()]);
    let mut service = client
        .service(Target::Node(node), Duration::from_secs(1))
        .await
        .unwrap();
    blocked_until_the_backoff_ends(&*runtime, &mut service, backoff_from, 300).await;
    let answer = service.call(&b"found"[..]).await;
    assert_eq!(answer.as_deref(), Ok(&b"found"[..]));
    client.shutdown().await;
}

test_on_every_runtime!(
    a_load_shed_layer_sheds_instead_of_queuing_while_the_node_is_not_writable,
    poll_ready_waits_out_the_in_flight_limit_and_wakes_when_a_slot_frees,
    poll_ready_for_the_best_node_waits_out_a_reconnect_backoff,
    poll_ready_for_a_node_waits_out_a_final_failures_backoff,
    poll_ready_waits_while_the_node_is_disabled,
);
