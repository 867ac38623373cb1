//! The failure detector and panic mode at their exact thresholds, and what counts (or not)
//! towards a node's quarantine.

use super::{Harness, exact, secs};
use crate::{Config, Failure, Violation};

/// Quarantine after three consecutive failures; panic below half the nodes healthy.
fn detector() -> Config {
    let mut c = exact();
    c.quarantine_after_failures = 3;
    c.quarantine_after_timeouts = 3;
    c.panic_threshold = 0.5;
    c
}

#[test]
fn exactly_at_the_panic_threshold_the_pool_is_not_in_panic() {
    let mut h = Harness::new(detector());
    let (a, b) = (h.add(), h.add());
    for _ in 0..3 {
        h.refuse(a);
    }
    assert_eq!(h.pool.is_quarantined(a), Some(true));
    assert!(!h.pool.in_panic(), "1 of 2 healthy is not below half");
    for _ in 0..3 {
        h.refuse(b);
    }
    assert!(h.pool.in_panic(), "0 of 2 is");
}

/// Three times: a fresh ready connection to `node`, with a request in flight if `busy`,
/// reset by the peer.
fn three_lost_connections(h: &mut Harness, node: crate::NodeId, busy: bool) {
    for round in 0..3 {
        assert_eq!(h.pool.is_quarantined(node), Some(false), "round {round}");
        let (conn, _) = h.open(node);
        h.pool.handle_connected(h.now, conn).unwrap();
        if busy {
            h.submit(node, 10, secs(60));
            h.flush(conn);
        }
        h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
        h.collect();
    }
}

#[test]
fn a_ready_connection_that_loses_requests_to_an_io_error_counts_towards_quarantine() {
    let mut h = Harness::new(detector());
    let node = h.add();
    three_lost_connections(&mut h, node, true);
    assert_eq!(h.pool.is_quarantined(node), Some(true));
    // The same without requests: a server closing idle connections is not failing.
    let mut h = Harness::new(detector());
    let node = h.add();
    three_lost_connections(&mut h, node, false);
    assert_eq!(h.pool.is_quarantined(node), Some(false));
}

#[test]
fn a_protocol_violation_counts_towards_quarantine_even_on_an_idle_connection() {
    let mut h = Harness::new(detector());
    let node = h.add();
    for round in 0..3 {
        assert_eq!(h.pool.is_quarantined(node), Some(false), "round {round}");
        let (conn, _) = h.open(node);
        h.pool.handle_connected(h.now, conn).unwrap();
        h.pool
            .handle_violation(h.now, conn, Violation::MalformedHeader)
            .unwrap();
        h.collect();
    }
    assert_eq!(h.pool.is_quarantined(node), Some(true));
}
