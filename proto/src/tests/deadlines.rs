//! The upkeep of the pool's lists: timer-heap entries leave with their timer or request, and
//! an awaited request leaves its node's list with its answer, wherever it is in the list.
//! Request deadlines due at one instant end in the order submitted.

use super::{Harness, exact, secs};
use crate::{ConnId, NodeId, RequestId};

#[test]
fn deadlines_of_requests_that_ended_do_not_pile_up_in_the_timer_heap() {
    let mut config = exact();
    config.max_in_flight = 100_000;
    config.write_timeout = core::time::Duration::ZERO;
    let mut h = Harness::new(config);
    let node = h.add();
    h.ready(node);
    let live = h.submit(node, 10, secs(300));
    // Ten thousand requests, each cancelled at once: each one's deadline, below the live
    // request's earlier one, leaves the heap with the cancel.
    let mut most = 0;
    for _ in 0..10_000 {
        let id = h.submit(node, 10, secs(600));
        most = most.max(h.pool.timer_heap().len());
        h.pool.cancel(h.now, id).unwrap();
        assert_eq!(
            h.pool.timer_heap().len(),
            1,
            "only the live request's deadline"
        );
    }
    h.collect();
    assert_eq!(most, 2, "the live request's deadline and the new one's");
    // The live request still ends at its deadline.
    h.advance(secs(301));
    assert_eq!(
        h.outcome(live),
        Some(crate::Outcome::DeadlineExceeded {
            phase: crate::Phase::Queued
        })
    );
}

/// A ready connection with no write timeout and two requests written and left unanswered, at
/// the front of the list of awaited requests for the tests of its upkeep.
fn two_unanswered() -> (Harness, NodeId, ConnId, [RequestId; 2]) {
    let mut config = exact();
    config.write_timeout = core::time::Duration::ZERO;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    let unanswered = [
        h.submit(node, 10, secs(3_600)),
        h.submit(node, 10, secs(3_600)),
    ];
    h.flush(conn);
    (h, node, conn, unanswered)
}

/// The list kept the ones still awaited: in-order responses find them, oldest first.
fn assert_answered_in_order(h: &mut Harness, conn: ConnId, unanswered: [RequestId; 2]) {
    for id in unanswered {
        let answered = h
            .pool
            .handle_next_response(h.now, conn, bytes::Bytes::from_static(b"ok"))
            .unwrap();
        assert_eq!(answered, Some(id));
    }
}

/// The node's list of awaited requests, oldest first.
fn awaited(h: &Harness, node: NodeId) -> alloc::vec::Vec<RequestId> {
    let list = h.pool.node(node).unwrap().awaiting();
    h.pool.requests().awaited(list).collect()
}

#[test]
fn a_request_answered_out_of_order_leaves_the_awaited_list_at_once() {
    let (mut h, node, conn, [a, b]) = two_unanswered();
    // Answered by id behind two older requests still awaited: each request is in the list
    // from its write report to its answer, and no longer (the list never holds an answered
    // request, so it has nothing to skip or compact).
    for _ in 0..100 {
        let id = h.submit(node, 10, secs(600));
        assert_eq!(awaited(&h, node), [a, b], "queued, not yet awaited");
        h.flush(conn);
        assert_eq!(awaited(&h, node), [a, b, id]);
        h.respond(conn, id);
        assert_eq!(awaited(&h, node), [a, b]);
    }
    assert_answered_in_order(&mut h, conn, [a, b]);
    assert_eq!(awaited(&h, node), []);
}

#[test]
fn requests_answered_anywhere_in_the_list_leave_it_after_reports_of_several_frames() {
    let (mut h, node, conn, [a, b]) = two_unanswered();
    // Every report completes three frames handed out together (the report of a batch, not of
    // a lone frame); they are answered middle, last, first: the list keeps the rest in order
    // each time.
    let mut out = alloc::vec::Vec::new();
    for _ in 0..30 {
        let [x, y, z] = [0; 3].map(|_| h.submit(node, 10, secs(600)));
        assert_eq!(h.pool.poll_transmit(usize::MAX, &mut out), Some(conn));
        assert_eq!(out.len(), 3, "the frames in one hand-out");
        h.pool.handle_written(h.now, conn, 30).unwrap();
        assert_eq!(awaited(&h, node), [a, b, x, y, z]);
        h.respond(conn, y);
        assert_eq!(awaited(&h, node), [a, b, x, z]);
        h.respond(conn, z);
        assert_eq!(awaited(&h, node), [a, b, x]);
        h.respond(conn, x);
        assert_eq!(awaited(&h, node), [a, b]);
    }
    assert_answered_in_order(&mut h, conn, [a, b]);
}

#[test]
fn requests_due_at_one_instant_end_in_the_order_they_were_submitted() {
    let mut config = exact();
    config.write_timeout = core::time::Duration::ZERO;
    let mut h = Harness::new(config);
    let node = h.add();
    h.ready(node);
    // One timeout for every request, all submitted at one instant. Slots freed out of order
    // make the later requests' ids fall and rise against their submit order.
    let first: alloc::vec::Vec<_> = (0..6).map(|_| h.submit(node, 10, secs(30))).collect();
    for &i in &[4, 1, 3] {
        h.pool.cancel(h.now, first[i]).unwrap();
    }
    let later: alloc::vec::Vec<_> = (0..5).map(|_| h.submit(node, 10, secs(30))).collect();
    let submitted: alloc::vec::Vec<_> = [first[0], first[2], first[5]]
        .into_iter()
        .chain(later)
        .collect();
    assert!(
        submitted.windows(2).any(|w| w[0] > w[1]),
        "slots reused out of order: {submitted:?}"
    );
    h.take_events();
    h.advance(secs(31));
    let ended: alloc::vec::Vec<_> = h.outcomes().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ended, submitted, "in submit order, not in id order");
}

#[test]
fn a_request_index_is_its_slot_reused_once_the_request_is_done() {
    let mut h = Harness::new(exact());
    let node = h.add();
    h.ready(node);
    let a = h.submit(node, 10, secs(60));
    let b = h.submit(node, 10, secs(60));
    assert_ne!(a.index(), b.index(), "two live requests never share a slot");
    assert_eq!(
        a.index(),
        (a.as_u64() & 0xFFFF_FFFF) as usize,
        "the low 32 bits"
    );
    // Cancelled while queued: the slot is free at once and the next request takes it, with a
    // new id.
    h.pool.cancel(h.now, a).unwrap();
    let c = h.submit(node, 10, secs(60));
    assert_eq!(c.index(), a.index());
    assert_ne!(c, a);
}

#[test]
fn requests_answered_by_id_oldest_first_leave_the_awaited_list_at_once() {
    let mut config = exact();
    config.write_timeout = core::time::Duration::ZERO;
    let mut h = Harness::new(config);
    let node = h.add();
    let conn = h.ready(node);
    // A pipelined client's steady state: four in flight, the oldest answered each time. The
    // list holds exactly the four awaited, in the order written.
    let mut in_flight: alloc::collections::VecDeque<_> =
        (0..4).map(|_| h.submit(node, 10, secs(600))).collect();
    h.flush(conn);
    for _ in 0..50 {
        h.respond(conn, in_flight.pop_front().unwrap());
        in_flight.push_back(h.submit(node, 10, secs(600)));
        h.flush(conn);
        assert!(awaited(&h, node).iter().eq(in_flight.iter()));
    }
}

#[test]
fn an_answer_out_of_order_keeps_the_older_request_awaited_through_a_drain() {
    let mut h = Harness::new(exact());
    let node = h.add();
    let conn = h.ready(node);
    let older = h.submit(node, 10, secs(60));
    let newer = h.submit(node, 10, secs(60));
    h.flush(conn);
    h.pool.shutdown_gracefully(h.now);
    // The newer one answered first: the older one, at the list's front, still awaits its
    // answer, and the drain waits for it.
    h.respond(conn, newer);
    assert_eq!(h.pool.node_state(node), Some(crate::NodeState::Closing));
    h.respond(conn, older);
    assert_eq!(h.pool.node_state(node), Some(crate::NodeState::Closed));
    assert!(matches!(
        h.outcome(older),
        Some(crate::Outcome::Response(_))
    ));
}
