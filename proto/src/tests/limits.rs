//! Limits over many nodes: the global memory budget, idle expiry, and the edges of a pool's
//! numbers (seeds, byte counts).

use alloc::vec;
use core::time::Duration;

use bytes::Bytes;

use super::pool::{pool_config, probe_times};
use super::{Harness, ms, secs};
use crate::{Action, CloseReason, Failure, Instant, NodeState, Outcome, SubmitError, Target};

// --- Memory budget, idle expiry, scale ---------------------------------------------------------

#[test]
fn the_global_budget_rejects_the_stalled_connections_submits_while_a_healthy_one_is_served() {
    let mut config = pool_config();
    config.memory_budget = Some(64 * 1024);
    config.high_watermark = 1 << 20; // the per-connection marks alone would not stop it
    config.low_watermark = 1 << 19;
    config.write_timeout = Duration::ZERO;
    let mut h = Harness::new(config);
    let stalled = h.add();
    let healthy = h.add();
    h.ready(stalled);
    let good = h.ready(healthy);
    let mut rejected = 0;
    for _ in 0..100 {
        match h.pool.submit(
            h.now,
            Target::Node(stalled),
            h.now + secs(60),
            Bytes::from(vec![0; 4096]),
        ) {
            Err(SubmitError::MemoryBudget) => rejected += 1,
            other => assert!(other.is_ok(), "{other:?}"),
        }
        let id = h.submit(healthy, 4096, secs(60));
        h.flush(good);
        h.respond(good, id);
        assert!(matches!(h.outcome(id), Some(Outcome::Response(_))));
    }
    assert!(rejected > 80, "rejected {rejected}");
    assert!(h.pool.total_pending_bytes() <= 64 * 1024 + 4096 + 96);
    assert_eq!(
        h.pool.node_state(stalled),
        Some(NodeState::Ready),
        "nothing closed to free memory"
    );
    assert_eq!(h.pool.counters().memory_budget_rejections, rejected);
}

#[test]
fn an_idle_connection_expires_without_counting_as_a_failure() {
    let mut config = pool_config();
    config.idle_timeout = secs(30);
    let mut h = Harness::new(config);
    let n = h.add();
    let conn = h.ready(n);
    let a = h.submit(n, 10, secs(60));
    h.flush(conn);
    h.advance(secs(40));
    assert_eq!(
        h.pool.current_conn(n),
        Some(conn),
        "not idle while a request is out"
    );
    h.respond(conn, a);
    h.advance(secs(30));
    assert_eq!(
        h.pool.current_conn(n),
        Some(conn),
        "the limit itself is not past"
    );
    h.advance(Duration::from_nanos(1));
    assert!(h.take_actions().contains(&Action::Close {
        conn,
        reason: CloseReason::Idle
    }));
    assert_eq!(h.pool.counters().idle_closes, 1);
    assert_eq!(h.pool.node(n).unwrap().failures, 0);
}

/// Ending the requests of a connection that closes or is evicted must not leave an idle timer
/// behind: the next connection's idle clock starts when it becomes ready, not at the close.
#[test]
fn the_next_connection_gets_its_own_idle_clock_after_a_close_or_eviction_with_requests() {
    for evict in [false, true] {
        let mut config = pool_config();
        config.idle_timeout = secs(30);
        let mut h = Harness::new(config);
        let n = h.add();
        let conn = h.ready(n);
        h.submit(n, 10, secs(60));
        h.flush(conn);
        let lost_at = h.now;
        if evict {
            h.pool.evict(h.now, n).unwrap();
        } else {
            h.pool.handle_closed(h.now, conn, Failure::Reset).unwrap();
        }
        h.advance(secs(10));
        let next = h.ready(n);
        let ready_at = h.now;
        h.take_actions();
        h.advance_to(lost_at + secs(30) + Duration::from_nanos(1));
        assert_eq!(h.pool.current_conn(n), Some(next), "evict: {evict}");
        assert_eq!(
            h.pool.poll_timeout(),
            Some(ready_at + secs(30) + Duration::from_nanos(1))
        );
        h.advance_to(ready_at + secs(30) + Duration::from_nanos(1));
        let close = Action::Close {
            conn: next,
            reason: CloseReason::Idle,
        };
        assert_eq!(h.take_actions(), [close], "evict: {evict}");
    }
}

#[test]
fn poll_timeout_with_100_000_pending_requests_returns_the_earliest_deadline() {
    let mut config = pool_config();
    config.max_in_flight = 200_000;
    config.write_timeout = Duration::ZERO;
    let mut h = Harness::new(config);
    let n = h.add();
    h.ready(n);
    let start = h.now;
    // Deadlines in a scrambled order; the earliest is 1 s + 17 ms.
    for i in 0..100_000u64 {
        let offset = ms(1_000 + (i * 7_919) % 100_000);
        h.pool
            .submit(
                h.now,
                Target::Node(n),
                start + offset,
                Bytes::from_static(b"x"),
            )
            .unwrap();
    }
    h.collect();
    let earliest = start + ms(1_000) + Duration::from_nanos(1);
    assert_eq!(h.pool.poll_timeout(), Some(earliest));
    h.advance_to(earliest);
    assert_eq!(h.outcomes().len(), 1);
    assert!(h.pool.poll_timeout().unwrap() > earliest);
}

#[test]
fn a_readmitted_probe_connection_is_an_ordinary_connection_afterwards() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    for _ in 0..3 {
        h.refuse(n);
    }
    h.advance(secs(5));
    let (probe, _) = h.expect_open();
    h.pool.handle_connected(h.now, probe).unwrap();
    assert_eq!(h.pool.is_quarantined(n), Some(false));
    // Three request timeouts on it quarantine the node afresh: the first probe comes 5 s later.
    for _ in 0..3 {
        h.submit(n, 10, secs(1));
        h.flush(probe);
        h.advance(secs(1) + Duration::from_nanos(1));
    }
    assert_eq!(h.pool.is_quarantined(n), Some(true));
    h.take_actions();
    let start = h.now;
    let got = probe_times(&mut h, n, start);
    assert_eq!(&got[..3], [5, 15, 35]);
}

#[test]
fn the_seed_in_use_is_the_configured_one_or_the_documented_fallback() {
    let pool = crate::Pool::new(crate::Config::default(), Instant::ZERO).unwrap();
    assert_eq!(pool.seed(), crate::Config::FALLBACK_SEED);
    let mut config = crate::Config::default();
    config.seed = Some(42);
    let pool = crate::Pool::new(config, Instant::ZERO).unwrap();
    assert_eq!(pool.seed(), 42);
}

#[test]
fn a_submit_whose_cost_would_overflow_the_byte_count_is_refused() {
    let mut config = pool_config();
    config.per_frame_overhead = u64::MAX;
    let mut h = Harness::new(config);
    let n = h.add();
    let frame = Bytes::from_static(b"x");
    let refused = h
        .pool
        .submit(h.now, Target::Node(n), h.now + secs(1), frame);
    assert_eq!(refused, Err(SubmitError::MemoryBudget));
    assert_eq!(h.pool.total_pending_bytes(), 0);
}
