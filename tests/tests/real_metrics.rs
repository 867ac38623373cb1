//! What a `metrics` recorder sees, on every runtime: the pool's counters as
//! `keepwire_<field>_total`, per-node counters and gauges labelled with the node's address
//! (connects, closes, evictions, write timeouts, writability, quarantine, probes and
//! readmission), nodes per state and panic mode, every gauge back to zero once the client
//! stops or a node is removed, and a request's end refreshing its node's gauges by itself.
//! The recorder is the test thread's local default and every task runs on that thread.

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::{ClientBuilder, Runtime, SendError, Target};
use keepwire_proto::{CloseReason, Event, Readmission};
use keepwire_tests::collect::{CollectingRecorder, CollectingSubscriber};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{
    endless_handshake, quick_to_quarantine, sleep, spawn, test_config,
    test_on_this_thread_on_every_runtime, wait_for, within,
};

async fn counters_and_gauges_carry_the_documented_names_and_values(runtime: Arc<dyn Runtime>) {
    let recorder = CollectingRecorder::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let echo = Peer::start(Behaviour::Echo);
    let stalled = Peer::never_read();
    let mut config = test_config();
    config.socket.send_buffer_size = Some(4096);
    config.socket.recv_buffer_size = Some(4096);
    // Low enough that the stalled request below takes its connection over the high watermark.
    config.high_watermark = 1 << 20;
    config.low_watermark = 1 << 19;
    let client = ClientBuilder::new(config)
        .node(echo.addr())
        .node(stalled.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let [a, b] = [client.initial_nodes()[0], client.initial_nodes()[1]];
    let (label_a, label_b) = (echo.addr().to_string(), stalled.addr().to_string());
    let node_a = [("node", label_a.as_str())];
    let node_b = [("node", label_b.as_str())];
    // Both nodes start disconnected.
    assert_eq!(
        recorder.gauge("keepwire_nodes", &[("state", "disconnected")]),
        Some(2.0)
    );

    // Five answered requests on A.
    for i in 0..5 {
        let answer = client
            .send(Target::Node(a), format!("ping {i}"), Duration::from_secs(5))
            .await;
        assert!(answer.is_ok(), "{answer:?}");
    }
    client.counters().await.unwrap(); // one more driver poll: the metrics are flushed
    assert_eq!(recorder.counter("keepwire_submitted_total", &[]), Some(5));
    assert_eq!(recorder.counter("keepwire_responses_total", &[]), Some(5));
    assert_eq!(recorder.counter("keepwire_connects_total", &[]), Some(1));
    assert_eq!(
        recorder.counter("keepwire_node_connects_total", &node_a),
        Some(1)
    );
    let ready_a = [("node", label_a.as_str()), ("state", "ready")];
    assert_eq!(recorder.gauge("keepwire_node_state", &ready_a), Some(1.0));
    assert_eq!(
        recorder.gauge("keepwire_nodes", &[("state", "ready")]),
        Some(1.0)
    );
    assert_eq!(
        recorder.gauge("keepwire_nodes", &[("state", "disconnected")]),
        Some(1.0)
    );
    assert_eq!(
        recorder.gauge("keepwire_node_in_flight", &node_a),
        Some(0.0)
    );
    assert_eq!(
        recorder.gauge("keepwire_node_pending_bytes", &node_a),
        Some(0.0)
    );
    assert_eq!(recorder.gauge("keepwire_node_writable", &node_a), Some(1.0));

    // An eviction on A, by request.
    client.evict(a).await.unwrap();
    client.counters().await.unwrap();
    assert_eq!(recorder.counter("keepwire_evictions_total", &[]), Some(1));
    let evicted = [("node", label_a.as_str()), ("reason", "requested")];
    assert_eq!(
        recorder.counter("keepwire_node_evictions_total", &evicted),
        Some(1)
    );
    let closed = [("node", label_a.as_str()), ("reason", "evicted")];
    assert_eq!(
        recorder.counter("keepwire_node_closes_total", &closed),
        Some(1)
    );
    // Only the move to `Connecting` counts a connect, not the move out of `Ready`.
    assert_eq!(
        recorder.counter("keepwire_node_connects_total", &node_a),
        Some(1)
    );

    // A 4 MiB request stalls on B: pending bytes and in flight show, then the write timeout.
    let big = spawn(&*runtime, {
        let client = client.clone();
        async move {
            client
                .send(Target::Node(b), vec![7u8; 4 << 20], Duration::from_secs(10))
                .await
        }
    });
    sleep(&*runtime, Duration::from_millis(150)).await;
    client.counters().await.unwrap();
    let pending = recorder
        .gauge("keepwire_node_pending_bytes", &node_b)
        .unwrap();
    assert!(
        pending > 3.0 * 1024.0 * 1024.0 && pending <= 4.0 * 1024.0 * 1024.0 + 4096.0,
        "{pending}"
    );
    assert_eq!(
        recorder.gauge("keepwire_node_in_flight", &node_b),
        Some(1.0)
    );
    assert_eq!(recorder.gauge("keepwire_pending_bytes", &[]), Some(pending));
    assert_eq!(
        recorder.counter("keepwire_node_unwritable_total", &node_b),
        Some(1)
    );
    assert_eq!(recorder.gauge("keepwire_node_writable", &node_b), Some(0.0));
    let lost = within(&*runtime, Duration::from_secs(3), big.join())
        .await
        .expect("the write timeout ends the request");
    assert!(
        matches!(
            lost,
            Err(SendError::ConnectionLost {
                cause: CloseReason::WriteTimeout,
                ..
            })
        ),
        "{lost:?}"
    );
    client.counters().await.unwrap();
    assert_eq!(
        recorder.counter("keepwire_write_timeouts_total", &[]),
        Some(1)
    );
    assert_eq!(
        recorder.counter("keepwire_node_write_timeouts_total", &node_b),
        Some(1)
    );
    let timed_out = [("node", label_b.as_str()), ("reason", "write_timeout")];
    assert_eq!(
        recorder.counter("keepwire_node_closes_total", &timed_out),
        Some(1)
    );
    assert_eq!(
        recorder.counter("keepwire_node_connects_total", &node_b),
        Some(1)
    );
    assert_eq!(
        recorder.gauge("keepwire_node_pending_bytes", &node_b),
        Some(0.0)
    );
    assert_eq!(
        recorder.gauge("keepwire_node_in_flight", &node_b),
        Some(0.0)
    );
    assert_eq!(recorder.gauge("keepwire_pending_bytes", &[]), Some(0.0));

    // Stopped: every gauge this client moved is back to zero; the counters stay.
    client.shutdown().await;
    for state in ["disconnected", "connecting", "ready", "closed"] {
        assert_eq!(
            recorder.gauge("keepwire_nodes", &[("state", state)]),
            Some(0.0),
            "{state}"
        );
    }
    assert_eq!(recorder.gauge("keepwire_node_state", &ready_a), Some(0.0));
    assert_eq!(recorder.gauge("keepwire_node_writable", &node_a), Some(0.0));
    assert_eq!(recorder.counter("keepwire_submitted_total", &[]), Some(6));
    let names: Vec<String> = recorder
        .counters()
        .into_iter()
        .map(|((name, _), _)| name)
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("keepwire_") && n.ends_with("_total")),
        "{names:?}"
    );
}

/// A removed node leaves the gauges: it is counted in no state, and its own state gauge is
/// back to zero, while the client and its other node carry on.
async fn a_removed_node_leaves_the_gauges(runtime: Arc<dyn Runtime>) {
    let recorder = CollectingRecorder::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (removed, kept) = (Peer::start(Behaviour::Echo), Peer::start(Behaviour::Echo));
    let client = ClientBuilder::new(test_config())
        .node(removed.addr())
        .node(kept.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let [a, b] = [client.initial_nodes()[0], client.initial_nodes()[1]];
    for node in [a, b] {
        let answer = client
            .send(Target::Node(node), &b"ping"[..], Duration::from_secs(5))
            .await;
        assert!(answer.is_ok(), "{answer:?}");
    }
    client.counters().await.unwrap(); // one more driver poll: the metrics are flushed
    let label = removed.addr().to_string();
    let ready_a = [("node", label.as_str()), ("state", "ready")];
    assert_eq!(recorder.gauge("keepwire_node_state", &ready_a), Some(1.0));
    assert_eq!(
        recorder.gauge("keepwire_nodes", &[("state", "ready")]),
        Some(2.0)
    );

    client.remove_node(a).await.unwrap();
    client.counters().await.unwrap();
    for state in ["disconnected", "connecting", "closed"] {
        let at = [("node", label.as_str()), ("state", state)];
        let gauge = recorder.gauge("keepwire_node_state", &at);
        assert!(matches!(gauge, None | Some(0.0)), "{state}: {gauge:?}");
        let count = recorder.gauge("keepwire_nodes", &[("state", state)]);
        assert!(matches!(count, None | Some(0.0)), "{state}: {count:?}");
    }
    assert_eq!(recorder.gauge("keepwire_node_state", &ready_a), Some(0.0));
    assert_eq!(
        recorder.gauge("keepwire_nodes", &[("state", "ready")]),
        Some(1.0)
    );
    client.shutdown().await;
}

/// A request that reaches its deadline queued (its node's handshake hangs, so nothing is
/// written or read meanwhile) takes its bytes out of its node's gauges as it ends: the end of
/// a request refreshes them by itself.
async fn a_request_ending_queued_leaves_the_gauges(runtime: Arc<dyn Runtime>) {
    request_ending_queued(runtime, false).await;
}

/// The same while a subscriber wants every request's trace (a request's end then takes the
/// driver's other path, through the whole event).
async fn a_request_ending_queued_leaves_the_gauges_when_traced(runtime: Arc<dyn Runtime>) {
    request_ending_queued(runtime, true).await;
}

async fn request_ending_queued(runtime: Arc<dyn Runtime>, traced: bool) {
    let recorder = CollectingRecorder::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let _traced = traced.then(|| tracing::subscriber::set_default(CollectingSubscriber::default()));
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(30);
    config.setup_timeout_max = Duration::from_secs(30);
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .handshake(endless_handshake)
        .build(Arc::clone(&runtime))
        .unwrap();
    let label = peer.addr().to_string();
    let node = [("node", label.as_str())];
    let queued = spawn(&*runtime, {
        let client = client.clone();
        async move {
            client
                .send(Target::Best, vec![7u8; 1000], Duration::from_millis(400))
                .await
        }
    });
    sleep(&*runtime, Duration::from_millis(100)).await;
    client.counters().await.unwrap(); // one more driver poll: the metrics are flushed
    let pending = recorder.gauge("keepwire_node_pending_bytes", &node);
    assert!(pending.is_some_and(|bytes| bytes >= 1000.0), "{pending:?}");
    let ended = within(&*runtime, Duration::from_secs(3), queued.join())
        .await
        .expect("the deadline ends the request");
    assert!(
        matches!(ended, Err(SendError::DeadlineExceeded { .. })),
        "{ended:?}"
    );
    client.counters().await.unwrap();
    assert_eq!(
        recorder.gauge("keepwire_node_pending_bytes", &node),
        Some(0.0)
    );
    client.shutdown().await;
}

/// A node quarantined after a refused connect, in panic mode as the sole node, then probed
/// and readmitted once its server is back: each step shows in its counter and gauge.
async fn quarantine_panic_mode_probe_and_readmission_show(runtime: Arc<dyn Runtime>) {
    let recorder = CollectingRecorder::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut peer = Peer::start(Behaviour::Echo);
    peer.kill();
    let client = quick_to_quarantine(&runtime, peer.addr());
    let mut events = client.subscribe();
    let label = peer.addr().to_string();
    let node = [("node", label.as_str())];
    let refused = client
        .send(Target::Best, &b"ping"[..], Duration::from_secs(5))
        .await;
    assert!(
        matches!(
            refused,
            Err(SendError::ConnectionLost {
                cause: CloseReason::ConnectFailed(_),
                ..
            })
        ),
        "{refused:?}"
    );
    client.counters().await.unwrap(); // one more driver poll: the metrics are flushed
    let cause = [("node", label.as_str()), ("cause", "connection_failures")];
    assert_eq!(
        recorder.counter("keepwire_node_quarantines_total", &cause),
        Some(1)
    );
    assert_eq!(recorder.counter("keepwire_quarantines_total", &[]), Some(1));
    assert_eq!(
        recorder.gauge("keepwire_node_quarantined", &node),
        Some(1.0)
    );
    // The sole node quarantined: no admitted node is left healthy, so panic mode.
    assert_eq!(recorder.gauge("keepwire_panic_mode", &[]), Some(1.0));
    assert_eq!(recorder.counter("keepwire_panics_total", &[]), Some(1));
    // A refused connect is one connect, not two (the move to `Connecting`, not out of it).
    assert_eq!(
        recorder.counter("keepwire_node_connects_total", &node),
        Some(1)
    );

    peer.revive(Behaviour::Echo);
    let via = wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(5),
        "readmission",
        |e| match e {
            Event::Readmitted { via, .. } => Some(*via),
            _ => None,
        },
    )
    .await;
    assert_eq!(via, Readmission::Probe);
    client.counters().await.unwrap();
    let by_probe = [("node", label.as_str()), ("via", "probe")];
    assert_eq!(
        recorder.counter("keepwire_node_readmissions_total", &by_probe),
        Some(1)
    );
    assert_eq!(
        recorder.counter("keepwire_readmissions_total", &[]),
        Some(1)
    );
    assert!(
        recorder
            .counter("keepwire_node_probes_total", &node)
            .is_some_and(|probes| probes >= 1),
        "{:?}",
        recorder.counter("keepwire_node_probes_total", &node)
    );
    assert_eq!(
        recorder.gauge("keepwire_node_quarantined", &node),
        Some(0.0)
    );
    assert_eq!(recorder.gauge("keepwire_panic_mode", &[]), Some(0.0));
    client.shutdown().await;
}

test_on_this_thread_on_every_runtime!(
    counters_and_gauges_carry_the_documented_names_and_values,
    quarantine_panic_mode_probe_and_readmission_show,
    a_removed_node_leaves_the_gauges,
    a_request_ending_queued_leaves_the_gauges,
    a_request_ending_queued_leaves_the_gauges_when_traced,
);
