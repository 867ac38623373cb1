//! One node's connection lifecycle, each rule a named test.

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use bytes::Bytes;

use super::{Harness, exact, ms, secs};
use crate::{
    Action, CloseReason, Config, Event, Failure, HandleError, Instant, NodeState, Outcome, Phase,
    Reason, SubmitError, Target, Violation,
};

// --- Connection setup timeout (KIP-601) -------------------------------------------------------

#[test]
fn setup_timeout_fires_one_nanosecond_past_the_limit_not_at_it() {
    let mut h = Harness::new(exact());
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    let (conn, deadline) = h.expect_open();
    assert_eq!(deadline, h.now + secs(10));
    assert_eq!(
        h.pool.poll_timeout(),
        Some(deadline + Duration::from_nanos(1))
    );
    h.advance_to(deadline);
    assert_eq!(
        h.pool.node_state(node),
        Some(NodeState::Connecting),
        "not at the limit"
    );
    h.advance(Duration::from_nanos(1));
    assert!(matches!(
        h.pool.node_state(node),
        Some(NodeState::Disconnected { .. })
    ));
    assert!(h.take_actions().contains(&Action::Close {
        conn,
        reason: CloseReason::SetupTimeout
    }));
    assert_eq!(h.pool.counters().setup_timeouts, 1);
}

#[test]
fn setup_timeout_covers_the_handshake_too() {
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    let (conn, deadline) = h.expect_open();
    h.advance(secs(4));
    h.pool.handle_connected(h.now, conn).unwrap();
    assert_eq!(h.take_actions(), vec![Action::Handshake { conn }]);
    assert_eq!(h.pool.node_state(node), Some(NodeState::Handshaking));
    h.advance_to(deadline + Duration::from_nanos(1));
    assert!(matches!(
        h.pool.node_state(node),
        Some(NodeState::Disconnected { .. })
    ));
    assert_eq!(h.pool.counters().setup_timeouts, 1);
}

/// Drives one attempt that times out while still connecting; returns its setup timeout.
fn attempt_times_out(h: &mut Harness, node: crate::NodeId) -> Duration {
    let (_, deadline) = h.open(node);
    let timeout = deadline - h.now;
    h.advance_to(deadline + Duration::from_nanos(1));
    timeout
}

#[test]
fn setup_timeout_grows_10_20_30_30_and_resets_when_an_attempt_gets_further() {
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    let got: Vec<u64> = (0..4)
        .map(|_| attempt_times_out(&mut h, node).as_secs())
        .collect();
    assert_eq!(got, [10, 20, 30, 30]);

    // The next attempt gets past the TCP connect, then its handshake times out.
    let (conn, deadline) = h.open(node);
    assert_eq!(deadline - h.now, secs(30));
    h.pool.handle_connected(h.now, conn).unwrap();
    h.advance_to(deadline + Duration::from_nanos(1));
    assert_eq!(attempt_times_out(&mut h, node), secs(10), "reset to S(0)");
}

#[test]
fn setup_timeout_jitter_is_drawn_once_per_attempt_within_twenty_percent() {
    let mut seen = Vec::new();
    for seed in 0..50 {
        let mut config = Config::default();
        config.seed = Some(seed);
        let mut h = Harness::new(config);
        let node = h.add();
        h.pool.connect(h.now, node).unwrap();
        let (_, deadline) = h.expect_open();
        let t = deadline - h.now;
        assert!(t >= secs(8) && t < secs(12), "{t:?}");
        seen.push(t);
    }
    seen.sort();
    seen.dedup();
    assert!(seen.len() > 40, "jitter varies with the seed");
}

#[test]
fn same_seed_same_trace() {
    fn trace(seed: u64) -> Vec<Event> {
        let mut config = Config::default();
        config.seed = Some(seed);
        let mut h = Harness::new(config);
        let node = h.add();
        for _ in 0..5 {
            h.pool.connect(h.now, node).unwrap();
            h.advance(secs(60));
        }
        h.take_events()
    }
    assert_eq!(trace(42), trace(42));
    assert_ne!(trace(42), trace(43));
}

// --- Reconnect backoff ------------------------------------------------------------------------

#[test]
fn reconnect_backoff_grows_50_to_1000_ms_and_resets_only_on_ready() {
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    let refuse = |h: &mut Harness| {
        let (conn, _) = h.open(node);
        h.pool
            .handle_connect_failed(h.now, conn, Failure::Refused)
            .unwrap();
        (h.reconnect_at(node) - h.now).as_millis() as u64
    };
    let got: Vec<u64> = (0..7).map(|_| refuse(&mut h)).collect();
    assert_eq!(got, [50, 100, 200, 400, 800, 1000, 1000]);

    // Getting further than connecting (a failed handshake) does not reset the backoff...
    let (conn, _) = h.open(node);
    h.pool.handle_connected(h.now, conn).unwrap();
    h.pool
        .handle_handshake_failed(h.now, conn, crate::HandshakeFailure::Failed)
        .unwrap();
    assert_eq!(h.reconnect_at(node) - h.now, ms(1000));

    // ...reaching Ready does.
    let (conn, _) = h.open(node);
    h.pool.handle_connected(h.now, conn).unwrap();
    h.pool.handle_handshake_done(h.now, conn).unwrap();
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    assert_eq!(h.reconnect_at(node) - h.now, ms(50));
}

#[test]
fn reconnect_is_allowed_at_exactly_the_backoff_not_before() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    let at = h.reconnect_at(node);
    assert_eq!(at - h.now, ms(50));
    h.take_actions();
    h.advance_to(Instant::from_nanos(at.as_nanos() - 1));
    h.pool.connect(h.now, node).unwrap();
    assert!(h.take_actions().is_empty(), "1 ns early: no connect");
    assert_eq!(h.pool.poll_timeout(), Some(at));
    h.advance_to(at);
    let (conn2, _) = h.expect_open();
    assert_ne!(conn, conn2);
}

#[test]
fn auth_failure_is_its_own_state_with_backoff() {
    let mut config = exact();
    config.handshake = true;
    let mut h = Harness::new(config);
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    let (conn, _) = h.expect_open();
    h.pool.handle_connected(h.now, conn).unwrap();
    h.pool
        .handle_handshake_failed(h.now, conn, crate::HandshakeFailure::AuthRefused)
        .unwrap();
    assert_eq!(
        h.pool.node_state(node),
        Some(NodeState::AuthFailed {
            reconnect_at: h.now + secs(30) // final_failure_backoff, not the reconnect backoff
        })
    );
    assert!(h.take_actions().contains(&Action::Close {
        conn,
        reason: CloseReason::AuthFailed
    }));
}

// --- Outbound watermarks -----------------------------------------------------------------------

#[test]
fn netty_hysteresis_vector_gives_exactly_unwritable_then_writable() {
    let mut config = exact();
    config.low_watermark = 224;
    config.high_watermark = 352;
    config.per_frame_overhead = 96;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    h.submit(node, 128, secs(5));
    h.submit(node, 2, secs(5));
    assert_eq!(h.pool.pending_bytes(node), Some(322));
    h.submit(node, 127, secs(5));
    assert_eq!(h.pool.pending_bytes(node), Some(545));
    assert_eq!(h.writability(), [false]);
    // Drain the first two frames.
    for _ in 0..2 {
        let bytes = h.transmit(conn).unwrap();
        h.pool.handle_written(h.now, conn, bytes.len()).unwrap();
    }
    h.collect();
    assert_eq!(h.pool.pending_bytes(node), Some(223));
    assert_eq!(h.writability(), [false, true]);
}

#[test]
fn a_partly_written_frame_counts_in_full_until_its_last_byte() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    h.submit(node, 1000, secs(5));
    let bytes = h.transmit(conn).unwrap();
    assert_eq!(bytes.len(), 1000);
    h.pool.handle_written(h.now, conn, 999).unwrap();
    assert_eq!(h.pool.pending_bytes(node), Some(1096));
    assert_eq!(h.transmit(conn).unwrap().len(), 1, "the rest of the frame");
    h.pool.handle_written(h.now, conn, 1).unwrap();
    assert_eq!(h.pool.pending_bytes(node), Some(0));
    assert_eq!(
        h.pool.handle_written(h.now, conn, 1),
        Err(HandleError::Overwritten)
    );
}

#[test]
fn submit_to_an_unwritable_connection_is_rejected_at_once_and_the_connection_stays() {
    let mut config = exact();
    config.high_watermark = 1000;
    config.low_watermark = 500;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    h.submit(node, 2000, secs(5));
    let err = h.pool.submit(
        h.now,
        Target::Node(node),
        h.now + secs(5),
        Bytes::from_static(b"x"),
    );
    assert_eq!(err, Err(SubmitError::NotWritable));
    assert_eq!(h.pool.counters().unwritable_rejections, 1);
    assert_eq!(h.pool.current_conn(node), Some(conn));
    assert!(h.take_actions().is_empty(), "no close");
}

#[test]
fn stalled_connection_at_default_watermarks_stays_bounded() {
    let mut h = Harness::new(Config::default());
    let node = h.add();
    h.ready(node);
    let high = h.pool.config().high_watermark;
    let frame = 1 << 20;
    let cost = frame + h.pool.config().per_frame_overhead;
    let (mut crossed_at, mut first_reject) = (None, None);
    let mut peak = 0;
    // 1 MiB every 10 ms for 5 s (before the 10 s write timeout); the kernel accepts nothing.
    for i in 0..500u64 {
        let result = h.pool.submit(
            h.now,
            Target::Node(node),
            h.now + secs(60),
            Bytes::from(vec![0; frame as usize]),
        );
        let pending = h.pool.pending_bytes(node).unwrap();
        peak = peak.max(pending);
        if pending > high && crossed_at.is_none() {
            crossed_at = Some(i);
        }
        if result.is_err() && first_reject.is_none() {
            first_reject = Some(i);
            assert_eq!(result, Err(SubmitError::NotWritable));
        }
        h.advance(ms(10));
    }
    assert!(
        peak <= high + cost,
        "peak {peak} exceeds high watermark + one frame"
    );
    let (crossed, rejected) = (crossed_at.unwrap(), first_reject.unwrap());
    assert!(
        rejected > crossed && rejected - crossed <= 2,
        "crossed {crossed}, first reject {rejected}"
    );
    assert_eq!(h.pool.counters().unwritable_rejections, 500 - rejected);
}

#[test]
fn close_releases_pending_bytes_without_a_writability_event() {
    let mut config = exact();
    config.high_watermark = 1000;
    config.low_watermark = 500;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    h.submit(node, 2000, secs(5));
    assert_eq!(h.writability(), [false]);
    h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
    h.collect();
    assert_eq!(h.pool.pending_bytes(node), Some(0));
    assert_eq!(h.pool.total_pending_bytes(), 0);
    assert_eq!(h.writability(), [false], "no event on close");
    assert_eq!(h.pool.is_writable(node), Some(true));
}

// --- Write timeout -----------------------------------------------------------------------------

#[test]
fn write_timeout_closes_once_and_fails_every_request_at_that_instant() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let sent = h.submit(node, 100, secs(60));
    h.flush(conn); // written, awaiting a response
    h.advance(secs(1));
    let stuck = h.submit(node, 1 << 20, secs(60));
    let bytes = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, bytes.len() / 2).unwrap(); // kernel takes half, then stalls
    let queued = h.submit(node, 100, secs(60));
    h.take_actions();
    h.advance(secs(10));
    assert!(h.take_actions().is_empty(), "not at the limit");
    h.advance(Duration::from_nanos(1));
    let closes: Vec<_> = h.take_actions();
    assert_eq!(
        closes,
        vec![Action::Close {
            conn,
            reason: CloseReason::WriteTimeout
        }]
    );
    let lost = Outcome::ConnectionLost(CloseReason::WriteTimeout);
    for id in [sent, stuck, queued] {
        assert_eq!(h.outcome(id), Some(lost.clone()), "{id:?}");
    }
    assert_eq!(h.pool.counters().write_timeouts, 1);
    assert_eq!(h.pool.total_pending_bytes(), 0);
    // Nothing more fires for that connection.
    h.advance(secs(60));
    assert_eq!(h.pool.counters().write_timeouts, 1);
    assert!(h.take_actions().is_empty());
    // The next request reconnects.
    h.submit(node, 10, secs(5));
    let (conn2, _) = h.expect_open();
    assert_ne!(conn2, conn);
}

#[test]
fn write_timer_stops_when_the_kernel_accepts_the_last_byte_not_at_the_response() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    h.submit(node, 100, secs(600));
    h.flush(conn);
    h.advance(secs(30)); // no response yet; the frame was accepted
    assert_eq!(h.pool.current_conn(node), Some(conn));
    assert_eq!(h.pool.counters().write_timeouts, 0);
}

#[test]
fn write_timeout_zero_disables_it() {
    let mut config = exact();
    config.write_timeout = Duration::ZERO;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    h.submit(node, 100, secs(600));
    h.advance(secs(300));
    assert_eq!(h.pool.current_conn(node), Some(conn));
}

#[test]
fn write_timeout_starts_when_the_connection_is_ready_not_while_connecting() {
    let mut h = Harness::new(exact());
    let node = h.add();
    h.submit(node, 100, secs(600));
    let (conn, _) = h.expect_open();
    h.advance(secs(9));
    h.pool.handle_connected(h.now, conn).unwrap();
    h.advance(secs(9)); // 18 s after queueing, 9 s after ready
    assert_eq!(h.pool.current_conn(node), Some(conn));
    h.advance(secs(1) + Duration::from_nanos(1));
    assert_eq!(h.pool.current_conn(node), None);
}

// --- Request deadlines and responses -----------------------------------------------------------

#[test]
fn queued_request_past_its_deadline_never_reaches_poll_transmit() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, ms(100));
    let b = h.submit(node, 20, secs(5));
    h.advance(ms(100) + Duration::from_nanos(1));
    assert_eq!(
        h.outcome(a),
        Some(Outcome::DeadlineExceeded {
            phase: Phase::Queued
        })
    );
    assert_eq!(h.pool.pending_bytes(node), Some(20 + 96));
    assert_eq!(h.flush(conn), 20, "only b's bytes reach the socket");
    h.respond(conn, b);
    assert_eq!(
        h.outcome(b),
        Some(Outcome::Response(Bytes::from_static(b"ok")))
    );
    assert_eq!(h.pool.counters().queued_deadline_drops, 1);
}

#[test]
fn in_flight_deadline_fails_the_request_and_its_late_response_is_ignored() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(1));
    h.flush(conn);
    h.advance(secs(1));
    assert_eq!(h.outcome(a), None, "the deadline itself is not past");
    h.advance(Duration::from_nanos(1));
    assert_eq!(
        h.outcome(a),
        Some(Outcome::DeadlineExceeded {
            phase: Phase::InFlight
        })
    );
    assert_eq!(
        h.pool.in_flight(node),
        Some(1),
        "the server may still be working on it"
    );
    h.respond(conn, a); // late: dropped quietly, the connection stays
    assert_eq!(h.pool.current_conn(node), Some(conn));
    assert_eq!(h.pool.in_flight(node), Some(0));
    assert_eq!(h.pool.counters().request_timeouts, 1);
}

#[test]
fn a_frame_handed_out_when_its_deadline_passes_counts_as_in_flight() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, ms(5));
    let _bytes = h.transmit(conn).unwrap();
    h.advance(ms(6));
    assert_eq!(
        h.outcome(a),
        Some(Outcome::DeadlineExceeded {
            phase: Phase::InFlight
        })
    );
    h.pool.handle_written(h.now, conn, 0).unwrap(); // the write would have blocked
    assert_eq!(h.transmit(conn), None, "now dropped unsent");
    assert_eq!(h.pool.pending_bytes(node), Some(0));
    assert_eq!(h.pool.in_flight(node), Some(0));
}

#[test]
fn a_response_for_an_unknown_request_closes_only_that_connection() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(5));
    h.flush(conn);
    let bogus = crate::RequestId::from_u64(0xdead_beef);
    let err = h.pool.handle_response(h.now, conn, bogus, Bytes::new());
    assert_eq!(err, Err(HandleError::UnknownRequest));
    let reason = CloseReason::Protocol(Violation::UnknownRequest(bogus));
    assert!(h.take_actions().contains(&Action::Close { conn, reason }));
    assert_eq!(h.outcome(a), Some(Outcome::ConnectionLost(reason)));
}

#[test]
fn cancel_drops_a_queued_frame_and_ends_an_in_flight_request() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(5));
    h.flush(conn);
    let b = h.submit(node, 10, secs(5));
    h.pool.cancel(h.now, a).unwrap();
    h.pool.cancel(h.now, b).unwrap();
    h.collect();
    assert_eq!(h.outcome(a), Some(Outcome::Cancelled));
    assert_eq!(h.outcome(b), Some(Outcome::Cancelled));
    assert_eq!(h.flush(conn), 0, "b never reaches the socket");
    assert_eq!(
        h.pool.cancel(h.now, a),
        Err(HandleError::UnknownRequest),
        "ends once"
    );
}

#[test]
fn submit_with_a_past_deadline_is_refused() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let past = Instant::from_nanos(h.now.as_nanos() - 1);
    let err = h.pool.submit(h.now, Target::Node(node), past, Bytes::new());
    assert_eq!(err, Err(SubmitError::DeadlinePassed));
}

// --- Handles and time --------------------------------------------------------------------------

#[test]
fn stale_handle_after_reconnect_is_refused_and_touches_nothing() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let old = h.ready(node);
    h.pool.handle_closed(h.now, old, Failure::Reset).unwrap();
    h.advance(secs(1));
    let new = h.ready(node);
    let a = h.submit(node, 10, secs(5));
    h.take_events();
    assert_eq!(
        h.pool.handle_closed(h.now, old, Failure::Reset),
        Err(HandleError::StaleConn)
    );
    assert_eq!(
        h.pool.handle_written(h.now, old, 10),
        Err(HandleError::StaleConn)
    );
    assert_eq!(
        h.pool.handle_connected(h.now, old),
        Err(HandleError::StaleConn)
    );
    assert_eq!(
        h.pool.handle_response(h.now, old, a, Bytes::new()),
        Err(HandleError::StaleConn)
    );
    assert_eq!(
        h.pool
            .handle_violation(h.now, old, Violation::MalformedHeader),
        Err(HandleError::StaleConn)
    );
    assert_eq!(h.transmit(old), None);
    assert!(h.take_events().is_empty() && h.take_actions().is_empty());
    assert_eq!(h.pool.current_conn(node), Some(new));
    assert_eq!(h.flush(new), 10, "the new connection is untouched");
}

#[test]
fn reports_that_do_not_fit_the_state_are_refused() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    assert_eq!(
        h.pool.handle_connected(h.now, conn),
        Err(HandleError::WrongState)
    );
    assert_eq!(
        h.pool.handle_handshake_done(h.now, conn),
        Err(HandleError::WrongState)
    );
    assert_eq!(
        h.pool.handle_written(h.now, conn, 1),
        Err(HandleError::Overwritten)
    );
}

#[test]
fn time_going_backwards_is_clamped_never_a_panic() {
    let mut h = Harness::new(exact());
    let node = h.add();
    h.pool.connect(h.now, node).unwrap();
    let (conn, deadline) = h.expect_open();
    let earlier = Instant::from_secs(1);
    h.pool.handle_timeout(earlier);
    h.pool.handle_connected(earlier, conn).unwrap();
    let a = h
        .pool
        .submit(
            earlier,
            Target::Node(node),
            h.now + secs(1),
            Bytes::from_static(b"x"),
        )
        .unwrap();
    h.collect();
    assert_eq!(
        h.outcome(a),
        None,
        "the deadline is measured from the clamped now"
    );
    assert!(h.pool.poll_timeout().unwrap() > h.now);
    assert!(deadline > earlier);
}

#[test]
fn state_changes_carry_typed_reasons() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    h.pool
        .handle_closed(h.now, conn, Failure::PeerClosed)
        .unwrap();
    let changes: Vec<_> = h
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::StateChanged {
                from, to, reason, ..
            } => Some((from, to, reason)),
            _ => None,
        })
        .collect();
    let start = NodeState::Disconnected {
        reconnect_at: Instant::ZERO,
    };
    assert_eq!(
        changes,
        vec![
            (start, NodeState::Connecting, Reason::Demand),
            (NodeState::Connecting, NodeState::Ready, Reason::Connected),
            (
                NodeState::Ready,
                NodeState::Disconnected {
                    reconnect_at: h.now + ms(50)
                },
                Reason::Closed(CloseReason::Io(Failure::PeerClosed))
            ),
        ]
    );
}

#[test]
fn frames_dropped_behind_a_stuck_one_do_not_pile_up() {
    let mut config = exact();
    config.write_timeout = Duration::ZERO;
    config.max_in_flight = 10_000;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    let stuck = h.submit(node, 10, secs(600));
    let _ = h.transmit(conn).unwrap(); // handed out; the kernel takes nothing
    h.pool.handle_written(h.now, conn, 0).unwrap();
    let mut survivors = Vec::new();
    for i in 0..5_000u32 {
        let id = h.submit(node, 4, secs(600));
        if i % 10 == 0 {
            survivors.push(id);
        } else {
            h.pool.cancel(h.now, id).unwrap();
        }
    }
    h.pool.check_invariants().unwrap();
    let queue = h.pool.node(node).unwrap().outbound.len();
    assert!(
        queue <= 2 * (survivors.len() + 1) + 64,
        "{queue} entries for {} live frames",
        survivors.len() + 1
    );
    // Everything left still goes out, in order, and is answered.
    h.flush(conn);
    h.respond(conn, stuck);
    for id in &survivors {
        h.respond(conn, *id);
        assert!(matches!(h.outcome(*id), Some(Outcome::Response(_))));
    }
}

#[test]
fn a_response_before_any_byte_was_written_is_a_violation() {
    // Queued, or handed to the adapter with nothing written yet: the peer cannot have it.
    for handed_out in [false, true] {
        let mut h = Harness::new(exact());
        let node = h.add();
        let conn = h.ready(node);
        let a = h.submit(node, 10, secs(5));
        if handed_out {
            let _ = h.transmit(conn).unwrap();
        }
        let err = h.pool.handle_response(h.now, conn, a, Bytes::new());
        assert_eq!(
            err,
            Err(HandleError::UnknownRequest),
            "handed out: {handed_out}"
        );
        h.collect();
        assert_eq!(h.pool.current_conn(node), None);
        assert!(matches!(
            h.outcome(a),
            Some(Outcome::ConnectionLost(CloseReason::Protocol(_)))
        ));
    }
}

#[test]
fn a_response_to_a_partly_written_frame_is_accepted() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = h.submit(node, 10, secs(5));
    let _ = h.transmit(conn).unwrap();
    h.pool.handle_written(h.now, conn, 4).unwrap();
    h.respond(conn, a);
    assert!(matches!(h.outcome(a), Some(Outcome::Response(_))));
    assert_eq!(
        h.flush(conn),
        6,
        "the rest of the frame still goes out, keeping the stream whole"
    );
    assert_eq!(h.pool.pending_bytes(node), Some(0));
}
