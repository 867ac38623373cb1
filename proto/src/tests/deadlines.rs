//! The timer heap's upkeep: entries whose timer was stopped or moved stay in the heap until
//! they reach its top or the pool prunes them, and the pool prunes them before they pile up.

use super::{Harness, exact, secs};

#[test]
fn deadlines_of_requests_that_ended_do_not_pile_up_in_the_timer_heap() {
    let mut config = exact();
    config.max_in_flight = 100_000;
    config.write_timeout = core::time::Duration::ZERO;
    let mut h = Harness::new(config);
    let node = h.add();
    h.ready(node);
    let live = h.submit(node, 10, secs(3_600));
    // Ten thousand requests, each cancelled at once: each leaves a stale deadline entry far
    // from the top of the heap, where popping never reaches it.
    for _ in 0..10_000 {
        let id = h.submit(node, 10, secs(600));
        h.pool.cancel(h.now, id).unwrap();
    }
    h.collect();
    // The pool prunes once stale entries exceed four times the live timers (one per request,
    // one slot per node timer) plus 64.
    let bound = 4 * (1 + crate::timers::NodeTimer::ALL.len()) + 64;
    let entries = h.pool.timer_entries();
    assert!(
        entries <= bound,
        "{entries} heap entries for one live request (bound {bound})"
    );
    // Pruning kept what is still armed: the live request still ends at its deadline.
    h.advance(secs(3_601));
    assert_eq!(
        h.outcome(live),
        Some(crate::Outcome::DeadlineExceeded {
            phase: crate::Phase::Queued
        })
    );
}
