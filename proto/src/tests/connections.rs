//! Opening connections: every attempt and every reconnect counted, and a connection opened
//! only when something wants one and the node may have it.

use alloc::vec::Vec;

use super::{Harness, exact, secs};
use crate::{Action, Config, NodeState};

fn opens(h: &mut Harness) -> usize {
    h.take_actions()
        .into_iter()
        .filter(|a| matches!(a, Action::Open { .. }))
        .count()
}

#[test]
fn attempts_and_reconnects_are_counted() {
    let mut h = Harness::new(exact());
    let node = h.add();
    h.refuse(node);
    let c = h.pool.counters();
    assert_eq!((c.connects, c.reconnects), (1, 0), "the first attempt");
    h.refuse(node);
    let (conn, _) = h.open(node);
    h.pool.handle_connected(h.now, conn).unwrap();
    let c = h.pool.counters();
    assert_eq!((c.connects, c.reconnects), (3, 2));
    assert_eq!(c.ready, 1);
}

#[test]
fn an_epoch_change_on_an_idle_node_opens_nothing() {
    let mut h = Harness::new(exact());
    let (ready, failed) = (h.add(), h.add());
    h.ready(ready);
    h.refuse(failed); // disconnected, in its backoff, nothing queued
    h.take_actions();
    h.pool.set_epoch(h.now, ready, 1).unwrap();
    h.pool.set_epoch(h.now, failed, 1).unwrap();
    assert_eq!(opens(&mut h), 0, "nothing wants a connection");
    assert!(matches!(
        h.pool.node_state(ready),
        Some(NodeState::Disconnected { .. })
    ));
    h.advance(secs(60));
    assert_eq!(opens(&mut h), 0);
}

#[test]
fn a_quarantined_node_does_not_reconnect_once_panic_mode_ends() {
    let mut config: Config = exact();
    config.quarantine_after_failures = 3;
    config.panic_threshold = 0.5;
    let mut h = Harness::new(config);
    let (a, b) = (h.add(), h.add());
    for node in [a, b] {
        for _ in 0..3 {
            h.refuse(node);
        }
    }
    assert!(h.pool.in_panic(), "both quarantined");
    // In panic mode a quarantined node takes a request; it is in its backoff, so its
    // connection waits for the reconnect timer.
    h.submit(a, 10, secs(60));
    assert_eq!(opens(&mut h), 0);
    let reconnect_at = h.reconnect_at(a);
    // A healthy node joins: 1 of 3 healthy is still below half; a second one ends panic.
    h.add();
    h.add();
    assert!(!h.pool.in_panic());
    h.advance_to(reconnect_at);
    let opened: Vec<_> = h
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Open { conn, .. } => Some(conn.node()),
            _ => None,
        })
        .collect();
    assert!(
        !opened.contains(&a),
        "quarantine holds again: only a probe may open a connection to it"
    );
}

#[test]
fn a_graceful_shutdown_closes_an_idle_ready_connection_without_draining() {
    let mut h = Harness::new(exact());
    let node = h.add();
    h.ready(node);
    h.take_events();
    h.pool.shutdown_gracefully(h.now);
    let states: Vec<_> = h
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            crate::Event::StateChanged { from, to, .. } => Some((from, to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        states,
        [(NodeState::Ready, NodeState::Closed)],
        "nothing to drain"
    );
}

/// A drain ends with the last live request, even while one that timed out in flight still
/// holds its slot for a late answer: the answer to the other request closes the connection.
#[test]
fn a_drain_ends_with_the_last_live_request_while_a_timed_out_one_holds_its_slot() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let timed_out = h.submit(node, 10, secs(2));
    let live = h.submit(node, 10, secs(60));
    h.flush(conn);
    h.pool.shutdown_gracefully(h.now);
    h.advance(secs(3));
    assert!(h.pool.holds(timed_out), "its slot waits for a late answer");
    assert_eq!(h.pool.node_state(node), Some(NodeState::Closing));
    h.take_actions();
    h.respond(conn, live);
    assert_eq!(h.pool.node_state(node), Some(NodeState::Closed));
    assert_eq!(
        h.take_actions(),
        [Action::Close {
            conn,
            reason: crate::CloseReason::Shutdown
        }]
    );
}

#[test]
fn the_timers_of_a_closed_connection_never_fire() {
    let mut config = exact();
    config.write_timeout = secs(10);
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    let id = h.submit(node, 10, secs(600)); // never written: its write timer runs
    h.advance(secs(1));
    h.pool
        .handle_closed(h.now, conn, crate::Failure::Reset)
        .unwrap();
    h.collect();
    assert!(matches!(
        h.outcome(id),
        Some(crate::Outcome::ConnectionLost(_))
    ));
    let before = h.pool.counters();
    h.advance(secs(60));
    let after = h.pool.counters();
    assert_eq!(
        after.write_timeouts, 0,
        "the write timer went with the connection"
    );
    assert_eq!(after, before, "nothing happened since");
}
