//! The upkeep of the pool's lists: timer-heap entries leave with their timer or request, and
//! awaited requests answered out of order stay only until the pool prunes them, which it does
//! before they pile up.

use super::{Harness, exact, secs};

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

#[test]
fn answered_requests_do_not_pile_up_in_the_awaited_list() {
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
    // Answered by id, each request leaves a stale entry in the list of awaited requests
    // (removal is lazy). A write report that completes a frame drops the stale entries once
    // the list holds more than 2 x requests + 16: here 2 x 3 + 16 = 22 (the two unanswered
    // ones and the one just written), so it grows to 22 and the report that makes it 23
    // brings it back to those 3.
    let mut lengths = alloc::vec::Vec::new();
    for _ in 0..100 {
        let id = h.submit(node, 10, secs(600));
        h.flush(conn);
        lengths.push(h.pool.node(node).unwrap().awaiting_len());
        h.respond(conn, id);
    }
    assert_eq!(
        lengths.iter().max(),
        Some(&22),
        "never more than 22 after a report"
    );
    let expected: alloc::vec::Vec<usize> = (3..=22).chain([3, 4]).collect();
    assert_eq!(&lengths[..22], &expected[..]);
    // Compaction kept the ones still awaited: in-order responses find them, oldest first.
    let answered = h
        .pool
        .handle_next_response(h.now, conn, bytes::Bytes::from_static(b"ok"))
        .unwrap();
    assert_eq!(answered, Some(unanswered[0]));
    let answered = h
        .pool
        .handle_next_response(h.now, conn, bytes::Bytes::from_static(b"ok"))
        .unwrap();
    assert_eq!(answered, Some(unanswered[1]));
}
