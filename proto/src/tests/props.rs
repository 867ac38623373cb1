//! Property tests: random sessions through the fuzzing interpreter, whose checks include
//! "every submitted request ends exactly once".

use alloc::vec::Vec;

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn every_submitted_request_ends_exactly_once(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        crate::fuzzing::run(&data);
    }
}

#[test]
fn long_sessions_keep_every_invariant() {
    // Deterministic long inputs from a fixed generator, so the slow paths (heap compaction,
    // awaiting-list compaction, slot reuse) are reached on every run.
    let mut rng = crate::rng::Rng::new(7);
    let mut reached = crate::Counters::default();
    let (mut compactions, mut evicted_half_written) = (0, 0);
    for _ in 0..200 {
        let data: Vec<u8> = (0..16_384).map(|_| rng.next_u64() as u8).collect();
        let session = crate::fuzzing::run(&data);
        compactions += session.compactions;
        evicted_half_written += session.evicted_half_written;
        let c = session.counters;
        reached.responses += c.responses;
        reached.write_timeouts += c.write_timeouts;
        reached.evictions += c.evictions;
        reached.quarantines += c.quarantines;
        reached.readmissions += c.readmissions;
        reached.queued_deadline_drops += c.queued_deadline_drops;
        reached.unwritable_rejections += c.unwritable_rejections;
        reached.setup_timeouts += c.setup_timeouts;
        reached.eviction_retries += c.eviction_retries;
        reached.transparent_retries += c.transparent_retries;
        reached.panics += c.panics;
        reached.protocol_violations += c.protocol_violations;
        reached.heartbeats_sent += c.heartbeats_sent;
        reached.heartbeat_timeouts += c.heartbeat_timeouts;
    }
    // The sessions must reach every mechanism, or the checks above prove little.
    std::println!(
        "{reached:?}, {compactions} compactions, {evicted_half_written} evictions of a half-written frame"
    );
    assert!(reached.responses > 0 && reached.write_timeouts > 0 && reached.evictions > 0);
    assert!(reached.quarantines > 0 && reached.readmissions > 0 && reached.setup_timeouts > 0);
    assert!(reached.queued_deadline_drops > 0 && reached.unwritable_rejections > 0);
    assert!(reached.transparent_retries > 0 && reached.panics > 0);
    assert!(reached.heartbeats_sent > 0 && reached.heartbeat_timeouts > 0);
    assert!(compactions > 0 && evicted_half_written > 0);
}
