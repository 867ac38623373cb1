//! Handing bytes out: readiness without scanning, several frames per write, write reports
//! that span frames, short writes that park a connection, the write timer armed at queue
//! time, and the frame timeout fed by `handle_received`.

use alloc::vec::Vec;

use bytes::Bytes;

use super::{Harness, exact, ms, secs};
use crate::{
    CloseReason, ConnId, Event, HandleError, NodeId, Outcome, Phase, RequestId, Sent, Target,
    Violation,
};

/// Every hand-out until the queue is empty, each with its total byte count.
fn hand_outs(h: &mut Harness, budget: usize) -> Vec<(ConnId, Vec<usize>)> {
    let mut out = Vec::new();
    let mut all = Vec::new();
    while let Some(conn) = h.pool.poll_transmit(budget, &mut out) {
        all.push((conn, out.iter().map(Bytes::len).collect()));
    }
    all
}

fn submit_len(h: &mut Harness, node: NodeId, len: usize) -> RequestId {
    h.submit(node, len, secs(60))
}

#[test]
fn a_frame_queued_on_an_idle_ready_connection_arms_its_write_timer() {
    // The case: an adapter that sleeps until poll_timeout and has not written yet.
    let mut config = exact();
    config.write_timeout = secs(10);
    let mut h = Harness::new(config);
    let node = h.add();
    h.ready(node);
    h.advance(secs(3)); // the connection sits idle and ready for a while
    let t0 = h.now;
    let id = h.submit(node, 100, secs(2_000));
    assert_eq!(
        h.pool.poll_timeout(),
        Some(t0 + secs(10) + core::time::Duration::from_nanos(1)),
        "armed at queue time, not at the first write report"
    );
    h.advance_to(h.pool.poll_timeout().unwrap());
    assert_eq!(
        h.outcome(id),
        Some(Outcome::ConnectionLost(CloseReason::WriteTimeout))
    );
    assert_eq!(h.pool.counters().write_timeouts, 1);
}

#[test]
fn a_frame_queued_after_a_lone_frame_was_written_is_dropped_unsent_at_its_deadline() {
    // The usual write report (the lone queued frame, written whole) takes its own short path.
    // A frame queued after it must still be the one its request's deadline drops: otherwise
    // a request already ended goes out on the wire, or its bytes stay counted as pending.
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let first = h.submit(node, 10, secs(60));
    assert_eq!(h.flush(conn), 10);
    for round in 0..3 {
        // Queued, not handed out (the adapter writes only when it gets round to it), and its
        // deadline passes there.
        let queued = h.submit(node, 20, secs(1));
        h.advance(secs(2));
        assert_eq!(
            h.ended(queued),
            (
                Outcome::DeadlineExceeded {
                    phase: Phase::Queued
                },
                Sent::Nothing,
                false
            ),
            "round {round}"
        );
        assert_eq!(
            hand_outs(&mut h, 1 << 16),
            [],
            "round {round}: dropped unsent"
        );
        assert_eq!(h.pool.pending_bytes(node), Some(0), "round {round}");
        // Another lone frame, written whole, before the next round.
        let next = h.submit(node, 30, secs(60));
        assert_eq!(h.flush(conn), 30, "round {round}");
        h.respond(conn, next);
        assert_eq!(
            h.outcome(next),
            Some(Outcome::Response(Bytes::from_static(b"ok")))
        );
    }
    h.respond(conn, first);
    assert_eq!(
        h.outcome(first),
        Some(Outcome::Response(Bytes::from_static(b"ok")))
    );
}

#[test]
fn only_connections_with_bytes_to_send_are_handed_out() {
    let mut h = Harness::new(exact());
    let (a, b, c) = (h.add(), h.add(), h.add());
    let (_, conn_b, _) = (h.ready(a), h.ready(b), h.ready(c));
    assert_eq!(hand_outs(&mut h, 1 << 16), [], "three idle connections");
    submit_len(&mut h, b, 10);
    submit_len(&mut h, b, 20);
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn_b, alloc::vec![10, 20])]);
    assert_eq!(
        hand_outs(&mut h, 1 << 16),
        [],
        "handed out, not yet reported"
    );
    h.pool.handle_written(h.now, conn_b, 30).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [], "all written");
}

#[test]
fn several_frames_go_out_at_once_up_to_the_byte_budget() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    for _ in 0..3 {
        submit_len(&mut h, node, 100);
    }
    assert_eq!(hand_outs(&mut h, 250), [(conn, alloc::vec![100, 100])]);
    h.pool.handle_written(h.now, conn, 200).unwrap();
    assert_eq!(
        hand_outs(&mut h, 50),
        [(conn, alloc::vec![100])],
        "at least one frame, even over the budget"
    );
}

#[test]
fn a_write_report_may_span_frames() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let ids: Vec<_> = (0..3).map(|_| submit_len(&mut h, node, 100)).collect();
    assert_eq!(
        hand_outs(&mut h, 1 << 16),
        [(conn, alloc::vec![100, 100, 100])]
    );
    h.pool.handle_written(h.now, conn, 250).unwrap();
    assert_eq!(
        h.pool.pending_bytes(node),
        Some(196),
        "the third frame, half written, counts in full"
    );
    for &id in &ids {
        h.respond(conn, id); // the first two whole, the third partly written: all in flight
    }
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![50])]);
}

#[test]
fn a_short_write_parks_the_connection_until_it_is_writable() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    submit_len(&mut h, node, 100);
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![100])]);
    h.pool.handle_written(h.now, conn, 0).unwrap(); // would block
    submit_len(&mut h, node, 7);
    assert_eq!(hand_outs(&mut h, 1 << 16), [], "parked: the socket is full");
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![100, 7])]);
    h.pool.handle_written(h.now, conn, 40).unwrap();
    assert_eq!(
        hand_outs(&mut h, 1 << 16),
        [],
        "parked again after a partial write"
    );
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![60, 7])]);
}

#[test]
fn a_handed_out_frame_whose_request_ended_is_dropped_if_none_of_it_went_out() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let a = submit_len(&mut h, node, 100);
    let b = submit_len(&mut h, node, 100);
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![100, 100])]);
    h.pool.cancel(h.now, b).unwrap();
    h.collect();
    assert_eq!(h.outcome(b), Some(Outcome::Cancelled));
    assert_eq!(
        h.pool.in_flight(node),
        Some(2),
        "b's bytes may be on their way"
    );
    h.pool.handle_written(h.now, conn, 100).unwrap(); // only a's frame went out
    assert_eq!(h.pool.pending_bytes(node), Some(0), "b dropped unsent");
    assert_eq!(h.pool.in_flight(node), Some(1));
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [], "b never goes out");
    h.respond(conn, a);
    assert_eq!(h.pool.in_flight(node), Some(0));
}

#[test]
fn more_bytes_than_were_handed_out_are_refused_and_change_nothing() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    submit_len(&mut h, node, 10);
    assert_eq!(
        h.pool.handle_written(h.now, conn, 1),
        Err(HandleError::Overwritten),
        "nothing handed out yet"
    );
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![10])]);
    assert_eq!(
        h.pool.handle_written(h.now, conn, 11),
        Err(HandleError::Overwritten)
    );
    assert_eq!(h.pool.pending_bytes(node), Some(106));
    h.pool.handle_written(h.now, conn, 10).unwrap();
    assert_eq!(h.pool.pending_bytes(node), Some(0));
}

#[test]
fn a_stale_connection_is_never_handed_out() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let old = h.ready(node);
    submit_len(&mut h, node, 10);
    h.pool.evict(h.now, node).unwrap(); // the untouched frame moves to a fresh connection
    h.collect();
    let fresh = h.pool.current_conn(node).unwrap();
    assert_ne!(fresh, old);
    assert_eq!(
        hand_outs(&mut h, 1 << 16),
        [],
        "the fresh one is still connecting"
    );
    h.pool.handle_connected(h.now, fresh).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [(fresh, alloc::vec![10])]);
}

#[test]
fn a_submit_through_selection_is_handed_out_like_any_other() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let frame = Bytes::from_static(b"abc");
    h.pool
        .submit(h.now, Target::Best, h.now + secs(1), frame)
        .unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [(conn, alloc::vec![3])]);
}

// ---------------------------------------------------------------------------------------------
// The frame timeout.

fn too_slow(h: &Harness) -> Vec<Violation> {
    h.events
        .iter()
        .filter_map(|e| match e {
            Event::RequestDone {
                outcome: Outcome::ConnectionLost(CloseReason::Protocol(v)),
                ..
            } => Some(*v),
            _ => None,
        })
        .collect()
}

/// A ready connection with one request written and awaiting its response.
fn awaiting(config: crate::Config) -> (Harness, NodeId, ConnId, RequestId) {
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    let id = h.submit(node, 10, secs(60));
    h.flush(conn);
    (h, node, conn, id)
}

#[test]
fn a_response_dripping_past_the_frame_timeout_closes_its_connection() {
    let mut config = exact();
    config.frame_timeout = ms(300);
    let (mut h, node, conn, _) = awaiting(config);
    let first_byte = h.now;
    h.pool.handle_received(h.now, conn, true).unwrap();
    let due = first_byte + ms(300) + core::time::Duration::from_nanos(1);
    assert_eq!(h.pool.poll_timeout(), Some(due));
    h.advance(ms(200));
    h.pool.handle_received(h.now, conn, true).unwrap(); // another byte: still incomplete
    assert_eq!(
        h.pool.poll_timeout(),
        Some(due),
        "measured from the first byte"
    );
    h.advance_to(due);
    let elapsed = ms(300) + core::time::Duration::from_nanos(1);
    assert_eq!(too_slow(&h), [Violation::TooSlow { elapsed }]);
    assert_eq!(h.pool.current_conn(node), None);
    assert_eq!(h.pool.counters().protocol_violations, 1);
}

#[test]
fn a_completed_response_restarts_the_frame_clock_and_an_empty_buffer_stops_it() {
    let mut config = exact();
    config.frame_timeout = ms(300);
    config.write_timeout = core::time::Duration::ZERO;
    let (mut h, node, conn, first) = awaiting(config);
    h.submit(node, 10, secs(60));
    h.flush(conn);
    h.pool.handle_received(h.now, conn, true).unwrap();
    h.advance(ms(250));
    // The first response completes; the start of the next one is buffered.
    h.respond(conn, first);
    h.pool.handle_received(h.now, conn, true).unwrap();
    let restarted = h.now + ms(300) + core::time::Duration::from_nanos(1);
    assert_eq!(h.pool.poll_timeout().map(|t| t >= restarted), Some(true));
    h.advance(ms(250)); // 500 ms after the first byte, 250 ms into the second response
    assert_eq!(
        too_slow(&h),
        [],
        "the clock restarted with the second response"
    );
    h.pool.handle_received(h.now, conn, false).unwrap();
    h.advance(secs(5));
    assert_eq!(too_slow(&h), [], "nothing buffered, nothing to time");
    assert!(h.pool.current_conn(node).is_some());
}

#[test]
fn a_zero_frame_timeout_disables_it() {
    let mut config = exact();
    config.frame_timeout = core::time::Duration::ZERO;
    config.write_timeout = core::time::Duration::ZERO;
    let (mut h, node, conn, _) = awaiting(config);
    h.pool.handle_received(h.now, conn, true).unwrap();
    assert!(h.pool.poll_timeout().is_none_or(|t| t > h.now + secs(50)));
    h.advance(secs(30));
    assert!(h.pool.current_conn(node).is_some());
}

#[test]
fn an_eviction_during_a_hand_out_lets_the_fresh_connection_send_what_was_kept() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let old = h.ready(node);
    let handed = submit_len(&mut h, node, 10);
    let kept = submit_len(&mut h, node, 20);
    let mut bufs = Vec::new();
    assert_eq!(h.pool.poll_transmit(1, &mut bufs), Some(old)); // only `handed` goes out
    h.pool.evict(h.now, node).unwrap(); // before the adapter reports the write
    h.collect();
    assert!(matches!(h.outcome(handed), Some(Outcome::Evicted(_))));
    assert_eq!(h.outcome(kept), None, "moved to a fresh connection");
    let fresh = h.pool.current_conn(node).unwrap();
    h.pool.handle_connected(h.now, fresh).unwrap();
    assert_eq!(hand_outs(&mut h, 1 << 16), [(fresh, alloc::vec![20])]);
}

#[test]
fn a_close_during_a_hand_out_leaves_nothing_handed_out_for_the_next_connection() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let old = h.ready(node);
    submit_len(&mut h, node, 10);
    let mut bufs = Vec::new();
    assert_eq!(h.pool.poll_transmit(1 << 16, &mut bufs), Some(old));
    h.pool
        .handle_closed(h.now, old, crate::Failure::Reset)
        .unwrap();
    h.collect();
    let (fresh, _) = h.open(node);
    h.pool.handle_connected(h.now, fresh).unwrap();
    submit_len(&mut h, node, 30);
    assert_eq!(hand_outs(&mut h, 1 << 16), [(fresh, alloc::vec![30])]);
}

#[test]
fn has_transmit_says_whether_poll_transmit_may_hand_out() {
    let mut h = Harness::new(exact());
    let node = h.add();
    assert!(!h.pool.has_transmit(), "a fresh pool has nothing to write");
    let conn = h.ready(node);
    assert!(
        !h.pool.has_transmit(),
        "a ready connection with nothing queued"
    );
    submit_len(&mut h, node, 100);
    assert!(
        h.pool.has_transmit(),
        "a frame queued on a ready connection"
    );
    assert_eq!(hand_outs(&mut h, 1 << 16).len(), 1);
    assert!(
        !h.pool.has_transmit(),
        "handed out, not yet reported: nothing more until the report"
    );
    h.pool.handle_written(h.now, conn, 100).unwrap();
    assert!(!h.pool.has_transmit(), "written whole: nothing left");
}

#[test]
fn has_output_says_whether_an_action_or_an_event_waits() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    assert!(!h.pool.has_output(), "everything collected");
    let id = h
        .pool
        .submit(
            h.now,
            Target::Node(node),
            h.now + secs(60),
            Bytes::from_static(b"ping"),
        )
        .unwrap();
    let mut out = Vec::new();
    assert_eq!(h.pool.poll_transmit(1 << 16, &mut out), Some(conn));
    h.pool.handle_written(h.now, conn, 4).unwrap();
    assert!(
        !h.pool.has_output(),
        "queued and written: nothing to say yet"
    );
    h.pool
        .handle_response(h.now, conn, id, Bytes::from_static(b"pong"))
        .unwrap();
    assert!(h.pool.has_output(), "the request's end waits");
    assert!(matches!(
        h.pool.poll_event(),
        Some(Event::RequestDone { id: done, .. }) if done == id
    ));
    assert!(!h.pool.has_output());
    let other = h.add();
    h.pool.connect(h.now, other).unwrap();
    assert!(h.pool.has_output(), "an action waits");
    h.collect();
    assert!(!h.pool.has_output());
}

/// A connection with three frames queued (`a` × 10, `b` × 20, `c` × 30) whose first hand-out
/// took `a` alone and whose report said 3 of its bytes went out; then `b` is cancelled,
/// leaving a tombstone between `a`'s rest and `c`. Returns the harness, the connection and the
/// three requests.
fn a_partly_written_queue_with_a_tombstone() -> (Harness, ConnId, Vec<RequestId>) {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let mut ids = Vec::new();
    for (byte, len) in [(b'a', 10), (b'b', 20), (b'c', 30)] {
        let frame = Bytes::from(alloc::vec![byte; len]);
        let deadline = h.now + secs(60);
        ids.push(
            h.pool
                .submit(h.now, Target::Node(node), deadline, frame)
                .unwrap(),
        );
    }
    let mut out = Vec::new();
    assert_eq!(h.pool.poll_transmit(1, &mut out), Some(conn));
    h.pool.handle_written(h.now, conn, 3).unwrap();
    h.pool.handle_writable(h.now, conn).unwrap();
    h.pool.cancel(h.now, ids[1]).unwrap();
    h.collect();
    (h, conn, ids)
}

/// The bytes of `conn`'s outstanding hand-out, read where the pool keeps them.
fn read_hand_out(h: &Harness, conn: ConnId) -> Option<Vec<Vec<u8>>> {
    let frames = h.pool.handed_out(conn)?;
    let total = frames.bytes();
    let read: Vec<Vec<u8>> = frames.map(<[u8]>::to_vec).collect();
    assert_eq!(total, read.iter().map(Vec::len).sum::<usize>());
    Some(read)
}

#[test]
fn poll_hand_out_hands_out_what_poll_transmit_does_and_handed_out_reads_it_in_place() {
    let expected = [alloc::vec![b'a'; 7], alloc::vec![b'c'; 30]];
    // Through poll_transmit: a Bytes of each frame, and the same bytes in place.
    let (mut h, conn, _) = a_partly_written_queue_with_a_tombstone();
    let mut out = Vec::new();
    assert_eq!(h.pool.poll_transmit(1 << 16, &mut out), Some(conn));
    let taken: Vec<Vec<u8>> = out.iter().map(|b| b.to_vec()).collect();
    assert_eq!(
        taken, expected,
        "the rest of `a`, then `c`: `b` was dropped"
    );
    assert_eq!(read_hand_out(&h, conn).as_deref(), Some(&expected[..]));
    // Through poll_hand_out: the same hand-out, read only in place.
    let (mut h, conn, _) = a_partly_written_queue_with_a_tombstone();
    assert_eq!(h.pool.poll_hand_out(1 << 16), Some(conn));
    assert_eq!(read_hand_out(&h, conn).as_deref(), Some(&expected[..]));
    assert_eq!(
        h.pool.poll_hand_out(1 << 16),
        None,
        "one hand-out at a time"
    );
    // Reported like any hand-out: all of it written, nothing is left to hand out.
    h.pool.handle_written(h.now, conn, 37).unwrap();
    assert_eq!(read_hand_out(&h, conn), None, "reported: no hand-out left");
    assert!(!h.pool.has_transmit());
    assert_eq!(h.pool.pending_bytes(conn.node()), Some(0));
}

#[test]
fn poll_hand_out_keeps_to_the_byte_budget_as_poll_transmit_does() {
    let (mut h, conn, _) = a_partly_written_queue_with_a_tombstone();
    assert_eq!(h.pool.poll_hand_out(1), Some(conn));
    assert_eq!(
        read_hand_out(&h, conn).as_deref(),
        Some(&[alloc::vec![b'a'; 7]][..]),
        "a budget of one byte: the first frame alone"
    );
    h.pool.handle_written(h.now, conn, 7).unwrap();
    assert_eq!(h.pool.poll_hand_out(1), Some(conn));
    assert_eq!(
        read_hand_out(&h, conn).as_deref(),
        Some(&[alloc::vec![b'c'; 30]][..])
    );
}

#[test]
fn a_hand_out_read_in_place_stays_the_same_until_its_report() {
    let (mut h, conn, ids) = a_partly_written_queue_with_a_tombstone();
    assert_eq!(h.pool.poll_hand_out(1 << 16), Some(conn));
    let before = read_hand_out(&h, conn);
    // Both requests in it end meanwhile; their frames, handed out, cannot be dropped until
    // the report says none of them went out, so a stream that holds part of them is offered
    // the same bytes again.
    h.pool.cancel(h.now, ids[0]).unwrap();
    h.pool.cancel(h.now, ids[2]).unwrap();
    h.collect();
    assert_eq!(
        read_hand_out(&h, conn),
        before,
        "the same bytes, offered again"
    );
    h.pool.handle_written(h.now, conn, 0).unwrap();
    assert_eq!(read_hand_out(&h, conn), None);
}

#[test]
fn a_hand_out_skips_the_transmit_entry_of_a_connection_closed_since() {
    // Both ways of handing out: the first connection in the transmit queue closed after its
    // frame was queued, so its entry is stale and the next connection's frames go out.
    for in_place in [false, true] {
        let mut h = Harness::new(exact());
        let (a, b) = (h.add(), h.add());
        let (stale, live) = (h.ready(a), h.ready(b));
        submit_len(&mut h, a, 10);
        submit_len(&mut h, b, 20);
        h.pool
            .handle_closed(h.now, stale, crate::Failure::Reset)
            .unwrap();
        h.collect();
        let mut out = Vec::new();
        let handed = if in_place {
            h.pool.poll_hand_out(1 << 16)
        } else {
            h.pool.poll_transmit(1 << 16, &mut out)
        };
        assert_eq!(handed, Some(live), "in place: {in_place}");
        let frames = read_hand_out(&h, live).expect("the live connection's hand-out");
        assert_eq!(frames[0].len(), 20, "its own frame first");
        if !in_place {
            let taken: Vec<Vec<u8>> = out.iter().map(|b| b.to_vec()).collect();
            assert_eq!(taken, frames, "the same frames as read in place");
        }
    }
}

#[test]
fn no_hand_out_is_read_for_a_connection_without_one() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    assert_eq!(read_hand_out(&h, conn), None, "nothing handed out yet");
    submit_len(&mut h, node, 10);
    assert_eq!(read_hand_out(&h, conn), None, "queued, not handed out");
    assert_eq!(h.pool.poll_hand_out(1 << 16), Some(conn));
    assert!(read_hand_out(&h, conn).is_some());
    h.pool
        .handle_closed(h.now, conn, crate::Failure::Reset)
        .unwrap();
    h.collect();
    assert_eq!(read_hand_out(&h, conn), None, "a close ends the hand-out");
    let (fresh, _) = h.open(node);
    h.pool.handle_connected(h.now, fresh).unwrap();
    submit_len(&mut h, node, 20);
    assert_eq!(h.pool.poll_hand_out(1 << 16), Some(fresh));
    assert_eq!(
        read_hand_out(&h, conn),
        None,
        "the stale connection has none"
    );
    assert_eq!(read_hand_out(&h, fresh).map(|frames| frames.len()), Some(1));
}

#[test]
fn a_partly_written_frame_stays_queued_and_counted_after_its_request_ends() {
    // The kernel took part of a frame, then its request was cancelled: the peer holds the
    // frame's start, so the rest must still go (or the connection close). A later report
    // that none of the rest went out does not drop it.
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let id = submit_len(&mut h, node, 10);
    let cost = h.pool.pending_bytes(node).unwrap();
    let mut out = Vec::new();
    assert_eq!(h.pool.poll_transmit(1 << 16, &mut out), Some(conn));
    h.pool.handle_written(h.now, conn, 3).unwrap();
    h.pool.cancel(h.now, id).unwrap();
    h.collect();
    assert_eq!(h.sent(id), Some(Sent::Partly));
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(h.pool.poll_hand_out(1 << 16), Some(conn));
    assert_eq!(
        read_hand_out(&h, conn),
        Some(alloc::vec![alloc::vec![0xAB; 7]])
    );
    h.pool.handle_written(h.now, conn, 0).unwrap();
    assert_eq!(
        h.pool.pending_bytes(node),
        Some(cost),
        "still queued, still counted"
    );
    h.pool.handle_writable(h.now, conn).unwrap();
    assert_eq!(h.pool.poll_hand_out(1 << 16), Some(conn));
    h.pool.handle_written(h.now, conn, 7).unwrap();
    assert_eq!(
        h.pool.pending_bytes(node),
        Some(0),
        "its rest written: released"
    );
    assert_eq!(
        h.pool.current_conn(node),
        Some(conn),
        "the stream stayed aligned"
    );
}

#[test]
fn a_frame_behind_a_written_tombstone_can_still_be_dropped_unsent() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let ids: Vec<_> = (0..4).map(|_| submit_len(&mut h, node, 10)).collect();
    // The second cancelled while queued: a tombstone between the first and the third.
    h.pool.cancel(h.now, ids[1]).unwrap();
    // A hand-out of the first and the third (a budget of two frames), written whole: the
    // report passes the tombstone on its way and leaves the fourth at the queue's front.
    assert_eq!(hand_outs(&mut h, 20)[0], (conn, alloc::vec![10, 10]));
    h.pool.handle_written(h.now, conn, 20).unwrap();
    h.collect();
    // The fourth, untouched, is found where its number says: its cancel drops it unsent.
    h.pool.cancel(h.now, ids[3]).unwrap();
    h.collect();
    assert_eq!(h.outcome(ids[3]), Some(Outcome::Cancelled));
    assert_eq!(h.sent(ids[3]), Some(Sent::Nothing));
    assert_eq!(hand_outs(&mut h, 1 << 16), [], "nothing left to hand out");
    assert_eq!(h.pool.pending_bytes(node), Some(0));
}
