//! Availability and honest outcomes: the panic threshold, separate failure thresholds,
//! what reached the server in every outcome, and the transparent retry of the unsent.

use alloc::vec::Vec;

use bytes::Bytes;

use super::{Harness, exact, ms, secs};
use crate::{
    Action, CloseReason, Config, Event, EvictReason, Failure, Outcome, Phase, Readmission,
    Selection, Sent, SubmitError, Target,
};

/// Quarantine on, with the thresholds, panic threshold at its default.
fn detector() -> Config {
    let mut c = exact();
    c.quarantine_after_failures = 3;
    c.quarantine_after_timeouts = 3;
    c.panic_threshold = 0.5;
    c
}

fn panic_events(h: &Harness) -> Vec<bool> {
    h.events
        .iter()
        .filter_map(|e| match e {
            Event::PanicMode { entered, .. } => Some(*entered),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The panic threshold.

#[test]
fn a_sole_stalled_node_is_never_locked_out_and_serves_as_soon_as_it_answers() {
    let mut h = Harness::new(detector());
    let node = h.add();
    let conn = h.ready(node);
    // The server stalls: three requests time out in flight.
    let stalled: Vec<_> = (0..3).map(|_| h.submit(node, 10, secs(1))).collect();
    h.flush(conn);
    let behind = h.submit(node, 10, secs(5)); // pipelined behind them
    h.flush(conn);
    h.advance(secs(1) + ms(1));
    assert_eq!(h.pool.is_quarantined(node), Some(true));
    assert_eq!(
        panic_events(&h),
        [true],
        "one node of one is quarantined: panic"
    );
    assert!(h.pool.in_panic());
    assert_eq!(
        h.pool.current_conn(node),
        Some(conn),
        "its connection is kept"
    );
    assert_eq!(
        h.outcome(behind),
        None,
        "the request behind the stall still waits"
    );
    // New requests are not refused: the node is still selected.
    assert_eq!(h.pool.select(h.now), Selection::Ready(node));
    let fresh = h.submit(node, 10, secs(1));
    h.flush(conn);
    // The server answers again: everything still waiting is served, and the node readmitted.
    h.respond(conn, behind);
    h.respond(conn, fresh);
    assert!(matches!(h.outcome(fresh), Some(Outcome::Response(_))));
    assert_eq!(h.pool.is_quarantined(node), Some(false));
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::Readmitted {
            via: Readmission::Answered,
            ..
        }
    )));
    assert_eq!(panic_events(&h), [true, false]);
    assert_eq!(h.pool.counters().panics, 1);
    for id in stalled {
        assert!(matches!(
            h.outcome(id),
            Some(Outcome::DeadlineExceeded {
                phase: Phase::InFlight
            })
        ));
    }
}

#[test]
fn a_sole_server_killed_and_restarted_is_retried_on_the_reconnect_backoff() {
    let mut h = Harness::new(detector());
    let node = h.add();
    for _ in 0..3 {
        h.refuse(node); // killed: refused
    }
    assert_eq!(h.pool.is_quarantined(node), Some(true));
    assert!(h.pool.in_panic());
    // Not refused, and not left to the first probe (5 s): a request queues and opens a
    // connection as soon as the ordinary backoff allows.
    let at = h.reconnect_at(node);
    assert!(at - h.now <= secs(1), "within the capped backoff");
    let id = h.pool.submit(
        h.now,
        Target::Node(node),
        h.now + secs(5),
        Bytes::from_static(b"x"),
    );
    assert!(id.is_ok(), "{id:?}");
    h.advance_to(at);
    let (conn, _) = h.expect_open();
    h.pool.handle_connected(h.now, conn).unwrap(); // the restarted server listens
    h.flush(conn);
    h.respond(conn, id.unwrap());
    assert!(matches!(h.outcome(id.unwrap()), Some(Outcome::Response(_))));
    assert_eq!(h.pool.is_quarantined(node), Some(false));
    assert!(!h.pool.in_panic());
}

#[test]
fn with_ten_nodes_one_dead_node_is_quarantined_and_probed_while_nine_serve() {
    let mut h = Harness::new(detector());
    let nodes: Vec<_> = (0..10).map(|_| h.add()).collect();
    for &n in &nodes[1..] {
        h.ready(n);
    }
    for _ in 0..3 {
        h.refuse(nodes[0]);
    }
    assert_eq!(h.pool.is_quarantined(nodes[0]), Some(true));
    assert!(!h.pool.in_panic(), "9 of 10 healthy");
    assert_eq!(panic_events(&h), []);
    for _ in 0..200 {
        let pick = h.pool.select(h.now);
        assert!(!matches!(pick, Selection::Ready(n) | Selection::Connect(n) if n == nodes[0]));
    }
    assert_eq!(
        h.pool.connect(h.now, nodes[0]),
        Err(crate::HandleError::WrongState)
    );
    h.advance(secs(5));
    assert_eq!(
        h.pool.counters().probes,
        1,
        "probed on a fresh connection at 5 s"
    );
}

#[test]
fn with_ten_nodes_six_failing_at_once_the_pool_panics_and_tries_them_all() {
    let mut h = Harness::new(detector());
    let nodes: Vec<_> = (0..10).map(|_| h.add()).collect();
    for &n in &nodes[6..] {
        h.ready(n);
    }
    for round in 0..3 {
        for &n in &nodes[..6] {
            h.refuse(n);
        }
        let _ = round;
    }
    assert!((0..6).all(|i| h.pool.is_quarantined(nodes[i]) == Some(true)));
    assert!(h.pool.in_panic(), "4 of 10 healthy is below 50 %");
    assert_eq!(panic_events(&h), [true]);
    // Every node is a candidate again: a quarantined one takes a request to its face and
    // opens a connection on its backoff.
    for &n in &nodes[..6] {
        let frame = Bytes::from_static(b"x");
        let r = h
            .pool
            .submit(h.now, Target::Node(n), h.now + secs(5), frame);
        assert!(r.is_ok(), "{n:?}: {r:?}");
    }
    h.advance(secs(1));
    let opens = h
        .take_actions()
        .into_iter()
        .filter(|a| matches!(a, Action::Open { .. }))
        .count();
    assert_eq!(opens, 6, "each quarantined node reconnects on its backoff");
}

#[test]
fn a_zero_panic_threshold_keeps_quarantine_strict() {
    let mut config = detector();
    config.panic_threshold = 0.0;
    let mut h = Harness::new(config);
    let node = h.add();
    for _ in 0..3 {
        h.refuse(node);
    }
    assert!(!h.pool.in_panic());
    let frame = Bytes::from_static(b"x");
    assert_eq!(
        h.pool.submit(h.now, Target::Best, h.now + secs(1), frame),
        Err(SubmitError::NoNode { all_full: false })
    );
}

// ---------------------------------------------------------------------------------------------
// Separate thresholds.

#[test]
fn connection_failures_and_request_timeouts_have_their_own_thresholds() {
    let mut config = detector();
    config.quarantine_after_failures = 2;
    config.quarantine_after_timeouts = 4;
    config.panic_threshold = 0.0;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    for _ in 0..3 {
        h.submit(node, 10, secs(1));
    }
    h.flush(conn);
    h.advance(secs(2));
    assert_eq!(h.pool.is_quarantined(node), Some(false), "3 timeouts < 4");
    h.submit(node, 10, secs(1));
    h.flush(conn);
    h.advance(secs(2));
    assert_eq!(h.pool.is_quarantined(node), Some(true), "the 4th timeout");

    let mut h = Harness::new(h.pool.config().clone());
    let node = h.add();
    h.refuse(node);
    assert_eq!(h.pool.is_quarantined(node), Some(false), "1 failure < 2");
    h.refuse(node);
    assert_eq!(h.pool.is_quarantined(node), Some(true), "the 2nd failure");
}

// ---------------------------------------------------------------------------------------------
// What reached the server, for every way a request ends.

#[test]
fn a_response_says_whether_the_whole_frame_or_part_of_it_was_sent() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let whole = h.submit(node, 10, secs(5));
    h.flush(conn);
    h.respond(conn, whole);
    assert_eq!(h.ended(whole).1, Sent::Fully);
    let part = h.submit(node, 10, secs(5));
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 4).unwrap();
    h.respond(conn, part);
    assert_eq!(h.ended(part).1, Sent::Partly);
}

#[test]
fn a_deadline_says_nothing_was_sent_when_queued_and_how_much_when_in_flight() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let queued = h.submit(node, 10, secs(1)); // never connected
    h.advance(secs(2));
    assert_eq!(
        h.ended(queued),
        (
            Outcome::DeadlineExceeded {
                phase: Phase::Queued
            },
            Sent::Nothing,
            false
        )
    );
    let conn = h.ready(node);
    let whole = h.submit(node, 10, secs(1));
    let part = h.submit(node, 10, secs(1));
    let handed = h.submit(node, 10, secs(1));
    let mut bufs = Vec::new();
    assert_eq!(h.pool.poll_transmit(1 << 16, &mut bufs), Some(conn));
    h.pool.handle_written(h.now, conn, 13).unwrap(); // `whole`, and 3 bytes of `part`
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(h.pool.poll_transmit(1 << 16, &mut bufs), Some(conn)); // never reported
    h.advance(secs(2));
    assert_eq!(h.ended(whole).1, Sent::Fully);
    assert_eq!(h.ended(part).1, Sent::Partly);
    assert_eq!(h.ended(handed).1, Sent::Unknown);
}

#[test]
fn a_lost_connection_says_for_each_request_how_much_was_sent() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let ids: Vec<_> = (0..4).map(|_| h.submit(node, 10, secs(5))).collect();
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 10).unwrap(); // ids[0] whole
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 5).unwrap(); // ids[1] half
    let _ = h.transmit(conn).unwrap(); // ids[1]'s rest handed out, unreported
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    h.collect();
    let lost = Outcome::ConnectionLost(CloseReason::Io(Failure::Reset));
    let got: Vec<_> = ids.iter().map(|&id| h.ended(id)).collect();
    assert_eq!(
        got,
        [
            (lost.clone(), Sent::Fully, false),
            (lost.clone(), Sent::Partly, false),
            (lost.clone(), Sent::Nothing, false),
            (lost, Sent::Nothing, false),
        ]
    );
}

#[test]
fn an_eviction_and_a_cancel_say_how_much_was_sent() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let whole = h.submit(node, 10, secs(5));
    let handed = h.submit(node, 10, secs(5));
    let cancelled = h.submit(node, 10, secs(5));
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 10).unwrap();
    let _ = h.transmit(conn).unwrap();
    h.pool.cancel(h.now, cancelled).unwrap();
    h.pool.evict(h.now, node).unwrap();
    h.collect();
    let evicted = Outcome::Evicted(EvictReason::Requested);
    assert_eq!(h.ended(whole), (evicted.clone(), Sent::Fully, false));
    assert_eq!(h.ended(handed), (evicted, Sent::Unknown, false));
    assert_eq!(
        h.ended(cancelled),
        (Outcome::Cancelled, Sent::Nothing, false)
    );
}

// ---------------------------------------------------------------------------------------------
// Transparent retry of the unsent.

fn retrying() -> Config {
    let mut c = exact();
    c.retry_unsent = true;
    c
}

#[test]
fn an_unsent_request_is_retried_once_on_another_node() {
    let mut h = Harness::new(retrying());
    let (a, b) = (h.add(), h.add());
    let conn_a = h.ready(a);
    let conn_b = h.ready(b);
    let sent = h.submit(a, 10, secs(5));
    h.flush(conn_a);
    for _ in 0..2 {
        h.submit(b, 10, secs(5));
    }
    h.flush(conn_b);
    let frame = Bytes::from_static(b"queued behind it");
    let unsent = h
        .pool
        .submit(h.now, Target::Best, h.now + secs(5), frame)
        .unwrap();
    assert_eq!(h.pool.in_flight(a), Some(2), "a has the fewest in flight");
    h.pool.handle_closed(h.now, conn_a, Failure::Reset).unwrap();
    h.collect();
    assert_eq!(
        h.ended(sent).1,
        Sent::Fully,
        "written requests are never retried"
    );
    assert_eq!(h.outcome(unsent), None, "moved, not ended");
    assert_eq!(
        h.pool.in_flight(b),
        Some(3),
        "moved to b, with a backing off"
    );
    assert_eq!(h.flush(conn_b), 16);
    h.respond(conn_b, unsent);
    let (outcome, was_sent, retried) = h.ended(unsent);
    assert!(matches!(outcome, Outcome::Response(_)));
    assert_eq!((was_sent, retried), (Sent::Fully, true));
    assert_eq!(h.pool.counters().transparent_retries, 1);
}

#[test]
fn a_request_submitted_to_a_node_is_retried_on_a_fresh_connection_of_that_node() {
    let mut h = Harness::new(retrying());
    let (a, _b) = (h.add(), h.add());
    let conn = h.ready(a);
    let id = h.submit(a, 10, secs(5));
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    h.collect();
    assert_eq!(h.outcome(id), None);
    assert_eq!(h.pool.in_flight(a), Some(1), "pinned to its node");
    let at = h.reconnect_at(a);
    h.advance_to(at);
    let (fresh, _) = h.expect_open();
    h.pool.handle_connected(h.now, fresh).unwrap();
    h.flush(fresh);
    h.respond(fresh, id);
    assert!(h.ended(id).2, "retried");
}

#[test]
fn a_request_is_retried_at_most_once() {
    let mut h = Harness::new(retrying());
    let node = h.add();
    let id = h.submit(node, 10, secs(5));
    h.refuse(node);
    assert_eq!(h.outcome(id), None, "retried after the failed connect");
    h.refuse(node);
    assert_eq!(
        h.ended(id),
        (
            Outcome::ConnectionLost(CloseReason::ConnectFailed(Failure::Refused)),
            Sent::Nothing,
            true
        )
    );
    assert_eq!(h.pool.counters().transparent_retries, 1);
}

#[test]
fn a_handed_out_request_is_never_retried_and_none_is_without_the_option() {
    let mut h = Harness::new(retrying());
    let node = h.add();
    let conn = h.ready(node);
    let handed = h.submit(node, 10, secs(5));
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    h.collect();
    assert_eq!(h.ended(handed).1, Sent::Unknown);
    assert_eq!(h.pool.counters().transparent_retries, 0);

    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let queued = h.submit(node, 10, secs(5));
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    h.collect();
    assert_eq!(h.ended(queued).1, Sent::Nothing);
    assert_eq!(h.pool.counters().transparent_retries, 0);
}

#[test]
fn a_retry_that_nothing_can_take_ends_with_its_first_outcome() {
    let mut config = retrying();
    config.quarantine_after_failures = 1;
    config.panic_threshold = 0.0;
    let mut h = Harness::new(config);
    let node = h.add();
    let id = h.submit(node, 10, secs(5));
    let (conn, _) = h.expect_open();
    // The failure quarantines the only node: the retry has nowhere to go.
    h.pool
        .handle_connect_failed(h.now, conn, Failure::Refused)
        .unwrap();
    h.collect();
    assert_eq!(
        h.ended(id),
        (
            Outcome::ConnectionLost(CloseReason::ConnectFailed(Failure::Refused)),
            Sent::Nothing,
            false
        )
    );
    assert_eq!(h.pool.in_flight(node), Some(0));
}

#[test]
fn a_refused_authentication_is_final_and_its_requests_are_not_retried() {
    let mut config = retrying();
    config.handshake = true;
    let mut h = Harness::new(config);
    let (a, _b) = (h.add(), h.add());
    let id = h.submit(a, 10, secs(5));
    let (conn, _) = h.expect_open();
    h.pool.handle_connected(h.now, conn).unwrap();
    h.pool
        .handle_handshake_failed(h.now, conn, crate::HandshakeFailure::AuthRefused)
        .unwrap();
    h.collect();
    assert_eq!(
        h.ended(id),
        (
            Outcome::ConnectionLost(CloseReason::AuthFailed),
            Sent::Nothing,
            false
        )
    );
    assert_eq!(h.pool.counters().transparent_retries, 0);
}

#[test]
fn a_throttle_ends_at_its_instant_for_a_submit_to_the_node_as_for_selection() {
    let mut h = Harness::new(exact());
    let n = h.add();
    h.ready(n);
    let until = h.now + secs(1);
    h.pool.throttle(h.now, n, until).unwrap();
    let submit = |h: &mut Harness| {
        h.pool
            .submit(h.now, Target::Node(n), h.now + secs(60), Bytes::new())
    };
    h.advance_to(until - core::time::Duration::from_nanos(1));
    assert_eq!(
        submit(&mut h),
        Err(SubmitError::NodeUnavailable(
            crate::Unavailable::Throttled { until }
        ))
    );
    assert_eq!(h.pool.select(h.now), Selection::None { all_full: false });
    h.advance_to(until);
    assert_eq!(h.pool.select(h.now), Selection::Ready(n));
    assert!(submit(&mut h).is_ok());
}
