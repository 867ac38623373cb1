//! Real-kernel half-open connections, on every runtime: each test runs in its own private
//! network namespace (see `keepwire_tests::netns`) with client and server on its `127.0.0.1`,
//! then takes that namespace's `lo` down so no packet is delivered any more. The kernel's
//! TCP_USER_TIMEOUT and keepalive must then fail the connection with `ETIMEDOUT`, which keepwire
//! reports as `Failure::TimedOut`. If the kernel refuses the namespace the test fails with the
//! reason.

use std::sync::Arc;
use std::time::{Duration, Instant as WallClock};

use keepwire_driver::{ClientBuilder, Runtime, SendError, Target};
use keepwire_proto::{CloseReason, Event, Failure, Keepalive, NodeState, Reason, Sent};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{
    Netns, spawn, test_config, test_in_netns_on_every_runtime, until_read, wait_for,
};

/// TCP_USER_TIMEOUT = 2 s with a write outstanding when the path goes dark: the connection
/// fails with TimedOut within [2 s, 4.5 s).
async fn user_timeout_fails_a_connection_with_unacknowledged_writes(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
) {
    let peer = Peer::start(Behaviour::Hold);
    let mut config = test_config();
    config.write_timeout = Duration::ZERO;
    config.socket.user_timeout = Some(Duration::from_secs(2));
    config.socket.keepalive = None;
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let send = |payload: &'static str| {
        let client = client.clone();
        spawn(&*runtime, async move {
            client
                .send(Target::Node(node), payload, Duration::from_secs(20))
                .await
        })
    };
    let first = send("acknowledged before the blackhole");
    until_read(&*runtime, &peer, 1).await;

    netns.set_loopback(false).expect("take lo down");
    let dark = WallClock::now();
    let second = send("never acknowledged");
    let outcome = second.join().await;
    let detected = dark.elapsed();
    // The kernel had accepted both frames (it still held the second, unacknowledged).
    let lost = Err(SendError::ConnectionLost {
        cause: CloseReason::Io(Failure::TimedOut),
        sent: Sent::Fully,
        retried: false,
    });
    assert_eq!(outcome, lost);
    assert_eq!(first.join().await, lost);
    println!("TCP_USER_TIMEOUT (2 s) detected after {detected:?}");
    assert!(detected >= Duration::from_secs(2), "{detected:?}");
    assert!(detected < Duration::from_millis(4500), "{detected:?}");
    client.shutdown().await;
}

/// Keepalive 1 s idle, 1 s interval, 3 probes on an idle connection when the path goes dark:
/// the connection fails with TimedOut within about [3 s, 7 s).
async fn keepalive_fails_an_idle_dead_connection(runtime: Arc<dyn Runtime>, netns: Arc<Netns>) {
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    config.write_timeout = Duration::ZERO;
    config.socket.user_timeout = None;
    config.socket.keepalive = Some(Keepalive {
        idle: Duration::from_secs(1),
        interval: Duration::from_secs(1),
        retries: 3,
    });
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let node = client.initial_nodes()[0];
    let answer = client
        .send(
            Target::Node(node),
            &b"then idle"[..],
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(answer.as_deref(), Ok(&b"then idle"[..]));

    netns.set_loopback(false).expect("take lo down");
    let dark = WallClock::now();
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(10),
        "keepalive failure",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Disconnected { .. },
                reason: Reason::Closed(CloseReason::Io(Failure::TimedOut)),
                ..
            } => Some(()),
            _ => None,
        },
    )
    .await;
    let detected = dark.elapsed();
    println!("keepalive (1 s + 3 x 1 s) detected after {detected:?}");
    assert!(detected >= Duration::from_secs(3), "{detected:?}");
    assert!(detected < Duration::from_secs(7), "{detected:?}");
    client.shutdown().await;
}

test_in_netns_on_every_runtime!(
    user_timeout_fails_a_connection_with_unacknowledged_writes,
    keepalive_fails_an_idle_dead_connection,
);
