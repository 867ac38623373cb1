//! Nodes by name, on every runtime: a name resolved again on every connect attempt (its
//! address changes between two connects), every address of a name tried in turn (a refused
//! one moves on at once; a blackholed one is in `real_kernel_faults.rs`, which runs in private
//! network namespaces), a name that does not exist (a final error at once to every waiting
//! request, then the final-failure backoff), a lookup that fails (retryable), and the runtime's
//! own resolver reading the hosts file.
//!
//! Names are answered by a test resolver (`keepwire_tests::names::Names`), never by the
//! system's hosts file or DNS, except `localhost` for the runtime's own resolver (the hosts
//! file, nothing on the network). Every request a test sends ends exactly once; every line
//! `name window:` on stdout (with `--nocapture`) is one measurement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keepwire_driver::{Client, ClientBuilder, Endpoint, Runtime, SendError, Sent, Target};
use keepwire_proto::{CloseReason, Config, Event, Failure, NodeId, NodeState, Reason, Unavailable};
use keepwire_tests::names::Names;
use keepwire_tests::peers::{Behaviour, Peer, RefusingPort};
use keepwire_tests::{Ledger, runtime_name, sleep, test_config, test_on_every_runtime, wait_for};

/// The name the tests give their server.
const NAME: &str = "orders.keepwire.test";

fn named_client(
    runtime: &Arc<dyn Runtime>,
    config: Config,
    names: &Arc<Names>,
    port: u16,
) -> (Client, NodeId) {
    let client = ClientBuilder::new(config)
        .node(Endpoint::name(NAME, port).unwrap())
        .resolver(names.clone())
        .build(Arc::clone(runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    (client, node)
}

/// Prints one measurement and asserts `low <= took < high`.
fn window(what: &str, on: &str, took: Duration, low: Duration, high: Duration) {
    println!("name window: {what} on {on}: {took:?} (asserted [{low:?}, {high:?}))");
    assert!(
        took >= low && took < high,
        "{what} on {on}: {took:?} outside [{low:?}, {high:?})"
    );
}

/// The name points at server A, the first connect reaches A; A goes away and the name now
/// points at B: the next connect resolves again and reaches B. (A resolver asked once would
/// send the reconnect to A's port, which refuses it.)
async fn a_name_is_resolved_again_on_every_connect(runtime: Arc<dyn Runtime>) {
    let mut a = Peer::start(Behaviour::Echo);
    let b = Peer::start(Behaviour::Echo);
    let names = Names::new();
    names.set(NAME, &[a.addr()]);
    let (client, node) = named_client(&runtime, test_config(), &names, 7000);
    let mut events = client.subscribe();
    let ledger = Ledger::default();
    let target = Target::Node(node);

    let first = ledger
        .send(&*runtime, &client, target, "to A", Duration::from_secs(5))
        .join()
        .await;
    assert_eq!(first.result.as_deref(), Ok(&b"to A"[..]));
    let info = client.node_info(node).await.unwrap();
    assert_eq!(info.endpoint.to_string(), format!("{NAME}:7000"));
    assert_eq!(
        info.addr,
        Some(a.addr()),
        "the address the connection reached"
    );
    assert_eq!(info.socket.and_then(|s| s.peer_addr), Some(a.addr()));

    // A's pod is gone (its port refuses from now on), and the name now points at B.
    a.kill();
    names.set(NAME, &[b.addr()]);
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(2),
        "A's connection lost",
        |e| match e {
            Event::StateChanged {
                from: NodeState::Ready,
                reason: Reason::Closed(_),
                ..
            } => Some(()),
            _ => None,
        },
    )
    .await;
    let second = ledger
        .send(&*runtime, &client, target, "to B", Duration::from_secs(5))
        .join()
        .await;
    assert_eq!(second.result.as_deref(), Ok(&b"to B"[..]));
    assert_eq!((a.requests(), b.requests()), (1, 1));
    assert_eq!(client.node_info(node).await.unwrap().addr, Some(b.addr()));
    assert_eq!(names.lookups(), 2, "one lookup per connect attempt");
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A name with two addresses whose first refuses: the attempt moves on to the second at once,
/// within the same connect attempt (no backoff, no second lookup).
async fn a_refused_address_moves_on_to_the_next_at_once(runtime: Arc<dyn Runtime>) {
    let on = runtime_name(&*runtime);
    let refusing = RefusingPort::new();
    let peer = Peer::start(Behaviour::Echo);
    let names = Names::new();
    names.set(NAME, &[refusing.addr(), peer.addr()]);
    let (client, node) = named_client(&runtime, test_config(), &names, 7000);
    let ledger = Ledger::default();
    let answered = ledger
        .send(
            &*runtime,
            &client,
            Target::Node(node),
            "second address",
            Duration::from_secs(5),
        )
        .join()
        .await;
    assert_eq!(answered.result.as_deref(), Ok(&b"second address"[..]));
    window(
        "first address refused, second answers",
        on,
        answered.took,
        Duration::ZERO,
        Duration::from_millis(500),
    );
    assert_eq!(
        client.node_info(node).await.unwrap().addr,
        Some(peer.addr())
    );
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.connects, 1, "one attempt: {counters:?}");
    assert_eq!(names.lookups(), 1);
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A name that does not exist is a final error: the requests waiting for the node's
/// connection (three, held up behind a slow lookup) end at once when the lookup answers "not
/// found" (not at their 5 s deadline), a send during the final-failure backoff is refused at
/// once with the same reason, and nothing is looked up again before that backoff has passed.
/// Once it has, the name (now registered) is resolved and the node reached.
async fn a_name_that_does_not_exist_fails_at_once(runtime: Arc<dyn Runtime>) {
    let on = runtime_name(&*runtime);
    let peer = Peer::start(Behaviour::Echo);
    let names = Names::new();
    let mut config = test_config();
    config.final_failure_backoff = Duration::from_secs(1);
    let (client, node) = named_client(&runtime, config, &names, peer.addr().port());
    let mut events = client.subscribe();
    let ledger = Ledger::default();
    let target = Target::Node(node);
    let not_found = CloseReason::ConnectFailed(Failure::NameNotFound);

    names.pause();
    let waiting: Vec<_> = (0..3)
        .map(|i| {
            let payload = format!("waiting {i}");
            ledger.send(&*runtime, &client, target, payload, Duration::from_secs(5))
        })
        .collect();
    while client.node_info(node).await.unwrap().in_flight < 3 {
        sleep(&*runtime, Duration::from_millis(2)).await;
    }
    let answered = Instant::now();
    names.resume();
    for request in waiting {
        let ended = request.join().await;
        let after = answered.elapsed();
        match &ended.result {
            Err(
                e @ SendError::ConnectionLost {
                    cause,
                    sent: Sent::Nothing,
                    retried: false,
                },
            ) if *cause == not_found => {
                assert!(e.is_final() && !e.is_retryable(), "{e}");
                assert_eq!(e.final_reason(), Some(not_found));
                assert_eq!(e.io_kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        window(
            "name not found, a waiting request ended after the lookup",
            on,
            after,
            Duration::ZERO,
            Duration::from_millis(250),
        );
    }
    let (failed_at, reconnect_at) = wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "the node's final backoff",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Disconnected { reconnect_at },
                reason: Reason::Closed(reason),
                at,
                ..
            } if *reason == not_found => Some((*at, *reconnect_at)),
            _ => None,
        },
    )
    .await;
    let backoff = reconnect_at.saturating_duration_since(failed_at);
    assert!(
        backoff >= Duration::from_millis(800) && backoff <= Duration::from_millis(1200),
        "final-failure backoff {backoff:?}, not the 100 ms reconnect backoff"
    );

    // During the backoff: refused at once, with the reason.
    let refused = ledger
        .send(
            &*runtime,
            &client,
            target,
            "refused",
            Duration::from_secs(5),
        )
        .join()
        .await;
    assert_eq!(
        refused.result,
        Err(SendError::NodeUnavailable(Unavailable::Failed(not_found)))
    );
    assert!(refused.result.as_ref().unwrap_err().is_final());
    assert!(
        refused.took < Duration::from_millis(250),
        "{:?}",
        refused.took
    );
    assert_eq!(names.lookups(), 1, "no lookup during the final backoff");

    // The name is registered; after the backoff the next request resolves it and is answered.
    names.set(NAME, &[peer.addr()]);
    sleep(&*runtime, backoff + Duration::from_millis(50)).await;
    let answered = ledger
        .send(
            &*runtime,
            &client,
            target,
            "registered",
            Duration::from_secs(5),
        )
        .join()
        .await;
    assert_eq!(answered.result.as_deref(), Ok(&b"registered"[..]));
    assert_eq!(names.lookups(), 2);
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A lookup that fails (no resolver reachable) is not final: the waiting request ends at once
/// as a connect failure does, retryable, and the node backs off for the ordinary reconnect
/// backoff (100 ms), not the final one; a request sent during that backoff is not refused but
/// waits for the next attempt, which looks the name up again and is answered.
async fn a_failed_lookup_is_retryable(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let names = Names::new();
    names.fail(NAME);
    let (client, node) = named_client(&runtime, test_config(), &names, peer.addr().port());
    let mut events = client.subscribe();
    let ledger = Ledger::default();
    let target = Target::Node(node);
    let failed = ledger
        .send(
            &*runtime,
            &client,
            target,
            "during the outage",
            Duration::from_secs(5),
        )
        .join()
        .await;
    let cause = CloseReason::ConnectFailed(Failure::ResolveFailed);
    assert_eq!(
        failed.result,
        Err(SendError::ConnectionLost {
            cause,
            sent: Sent::Nothing,
            retried: false
        })
    );
    let error = failed.result.unwrap_err();
    assert!(!error.is_final() && error.is_retryable(), "{error}");
    let (failed_at, reconnect_at) = wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "the reconnect backoff",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Disconnected { reconnect_at },
                reason: Reason::Closed(reason),
                at,
                ..
            } if *reason == cause => Some((*at, *reconnect_at)),
            _ => None,
        },
    )
    .await;
    assert_eq!(
        reconnect_at.saturating_duration_since(failed_at),
        Duration::from_millis(100),
        "the reconnect backoff (no jitter in the test configuration)"
    );
    let waiting = ledger.send(
        &*runtime,
        &client,
        target,
        "after the outage",
        Duration::from_secs(5),
    );
    names.set(NAME, &[peer.addr()]);
    let answered = waiting.join().await;
    assert_eq!(answered.result.as_deref(), Ok(&b"after the outage"[..]));
    assert_eq!(names.lookups(), 2);
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// Without a resolver of its own the client uses its runtime's (std's resolver on the
/// runtime's blocking pool): `localhost` comes from the hosts file. The node is added to the
/// running client by name.
async fn the_runtimes_resolver_reads_the_hosts_file(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .build(Arc::clone(&runtime))
        .unwrap();
    let endpoint: Endpoint = format!("localhost:{}", peer.addr().port()).parse().unwrap();
    let node = client.add_node(endpoint.clone()).await.unwrap();
    let answered = client
        .send(Target::Node(node), "by name", Duration::from_secs(5))
        .await;
    assert_eq!(answered.as_deref(), Ok(&b"by name"[..]));
    let info = client.node_info(node).await.unwrap();
    assert_eq!(info.endpoint, endpoint);
    let reached = info.addr.unwrap();
    assert!(reached.ip().is_loopback() && reached.port() == peer.addr().port());
    client.shutdown().await;
}

test_on_every_runtime!(
    a_name_is_resolved_again_on_every_connect,
    a_refused_address_moves_on_to_the_next_at_once,
    a_name_that_does_not_exist_fails_at_once,
    a_failed_lookup_is_retryable,
    the_runtimes_resolver_reads_the_hosts_file,
);
