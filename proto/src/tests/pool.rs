//! Many nodes: selection, throttling, eviction on readmission and the failure detector. Each
//! rule a named test (the memory budget and idle expiry are in `limits`).

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use bytes::Bytes;

use super::{Harness, exact, ms, secs};
use crate::{
    Action, AfterLastProbe, CloseReason, Event, EvictReason, Failure, HandleError, Instant, NodeId,
    NodeState, Outcome, QuarantineCause, Readmission, Selection, SelectionRule, SubmitError,
    Target, Unavailable,
};

pub(super) fn pool_config() -> crate::Config {
    let mut c = exact();
    c.quarantine_after_failures = 3;
    c.quarantine_after_timeouts = 3;
    c.panic_threshold = 0.0; // these tests are about quarantine itself; see tests/panic.rs
    c
}

// --- Selection (KIP-601) -----------------------------------------------------------------------

#[test]
fn selection_prefers_ready_then_connecting_then_disconnected_past_backoff() {
    let mut h = Harness::new(pool_config());
    let [ready, connecting, backoff, idle] = [h.add(), h.add(), h.add(), h.add()];
    h.ready(ready);
    h.submit(ready, 10, secs(60)); // one in flight: still the best
    h.pool.connect(h.now, connecting).unwrap();
    h.take_actions();
    h.refuse(backoff); // in its backoff now
    let _ = idle; // disconnected, never tried: past its (zero) backoff
    for _ in 0..20 {
        assert_eq!(h.pool.select(h.now), Selection::Ready(ready));
    }
    h.pool.disable_node(h.now, ready).unwrap();
    for _ in 0..20 {
        assert_eq!(h.pool.select(h.now), Selection::Connecting(connecting));
    }
    h.pool.disable_node(h.now, connecting).unwrap();
    for _ in 0..20 {
        assert_eq!(
            h.pool.select(h.now),
            Selection::Connect(idle),
            "the one in backoff is skipped"
        );
    }
    h.pool.disable_node(h.now, idle).unwrap();
    assert_eq!(h.pool.select(h.now), Selection::None { all_full: false });
    h.advance(ms(50));
    assert_eq!(
        h.pool.select(h.now),
        Selection::Connect(backoff),
        "backoff elapsed"
    );
}

#[test]
fn selection_takes_the_fewest_in_flight_and_an_idle_node_at_once() {
    let mut h = Harness::new(pool_config());
    let nodes = [h.add(), h.add(), h.add()];
    for (i, &n) in nodes.iter().enumerate() {
        h.ready(n);
        for _ in 0..(3 - i) {
            h.submit(n, 10, secs(60));
        }
    }
    for _ in 0..20 {
        assert_eq!(
            h.pool.select(h.now),
            Selection::Ready(nodes[2]),
            "1 in flight beats 2 and 3"
        );
    }
    let fresh = h.add();
    h.ready(fresh);
    for _ in 0..20 {
        assert_eq!(
            h.pool.select(h.now),
            Selection::Ready(fresh),
            "zero in flight wins"
        );
    }
}

#[test]
fn first_pick_among_equal_idle_nodes_is_spread_evenly_over_seeds() {
    let mut counts = [0u32; 4];
    for seed in 0..1_000 {
        let mut config = pool_config();
        config.seed = Some(seed);
        let mut h = Harness::new(config);
        let nodes: Vec<NodeId> = (0..4).map(|_| h.add()).collect();
        for &n in &nodes {
            h.ready(n);
        }
        let Selection::Ready(picked) = h.pool.select(h.now) else {
            panic!("a ready node")
        };
        counts[picked.index()] += 1;
    }
    for (i, &c) in counts.iter().enumerate() {
        assert!(
            (200..=300).contains(&c),
            "node {i} picked {c} times of 1000: {counts:?}"
        );
    }
}

#[test]
fn proposal_rule_and_shipped_rule_differ_on_the_same_history() {
    // Node a: failed twice, attempted long ago. Node b: failed once, attempted recently.
    let run = |rule: SelectionRule| {
        let mut config = pool_config();
        config.selection = rule;
        config.quarantine_after_failures = 100;
        config.quarantine_after_timeouts = 100;
        let mut h = Harness::new(config);
        let a = h.add();
        let b = h.add();
        h.refuse(a);
        h.refuse(a);
        h.advance(secs(10));
        h.refuse(b);
        h.advance(secs(10)); // both past their backoff
        let picks: Vec<_> = (0..20).map(|_| h.pool.select(h.now)).collect();
        (picks, a, b)
    };
    let (picks, _, b) = run(SelectionRule::FewestFailedAttempts);
    assert!(
        picks.iter().all(|&p| p == Selection::Connect(b)),
        "fewest failed attempts: {picks:?}"
    );
    let (picks, a, _) = run(SelectionRule::LeastRecentlyAttempted);
    assert!(
        picks.iter().all(|&p| p == Selection::Connect(a)),
        "least recently attempted: {picks:?}"
    );
}

#[test]
fn fewest_failed_attempts_ties_go_to_the_least_recently_attempted() {
    let mut h = Harness::new(pool_config());
    let a = h.add();
    let b = h.add();
    h.refuse(b);
    h.advance(secs(1));
    h.refuse(a);
    h.advance(secs(10));
    for _ in 0..20 {
        assert_eq!(h.pool.select(h.now), Selection::Connect(b));
    }
}

#[test]
fn no_node_because_every_ready_node_is_full_is_flagged() {
    let mut config = pool_config();
    config.max_in_flight = 2;
    let mut h = Harness::new(config);
    let nodes = [h.add(), h.add()];
    for &n in &nodes {
        h.ready(n);
        h.submit(n, 10, secs(60));
        h.submit(n, 10, secs(60));
    }
    assert_eq!(h.pool.select(h.now), Selection::None { all_full: true });
    let err = h
        .pool
        .submit(h.now, Target::Best, h.now + secs(1), Bytes::new());
    assert_eq!(err, Err(SubmitError::NoNode { all_full: true }));
    let err = h
        .pool
        .submit(h.now, Target::Node(nodes[0]), h.now + secs(1), Bytes::new());
    assert_eq!(err, Err(SubmitError::InFlightLimit));
}

#[test]
fn disabled_quarantined_and_throttled_nodes_are_never_chosen() {
    let mut h = Harness::new(pool_config());
    let [disabled, quarantined, throttled] = [h.add(), h.add(), h.add()];
    for n in [disabled, throttled] {
        h.ready(n);
    }
    h.pool.disable_node(h.now, disabled).unwrap();
    let until = h.now + secs(5);
    h.pool.throttle(h.now, throttled, until).unwrap();
    for _ in 0..3 {
        h.refuse(quarantined);
    }
    assert_eq!(h.pool.is_quarantined(quarantined), Some(true));
    for _ in 0..50 {
        assert_eq!(h.pool.select(h.now), Selection::None { all_full: false });
    }
    let submit = |h: &mut Harness, n| {
        h.pool
            .submit(h.now, Target::Node(n), h.now + secs(1), Bytes::new())
    };
    assert_eq!(
        submit(&mut h, disabled),
        Err(SubmitError::NodeUnavailable(Unavailable::Disabled))
    );
    assert_eq!(
        submit(&mut h, quarantined),
        Err(SubmitError::NodeUnavailable(Unavailable::Quarantined))
    );
    assert_eq!(
        submit(&mut h, throttled),
        Err(SubmitError::NodeUnavailable(Unavailable::Throttled {
            until
        }))
    );
}

#[test]
fn a_throttle_is_never_moved_back() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    h.ready(n);
    h.pool.throttle(h.now, n, h.now + secs(5)).unwrap();
    h.pool.throttle(h.now, n, h.now + secs(1)).unwrap();
    h.advance(secs(2));
    assert_eq!(h.pool.select(h.now), Selection::None { all_full: false });
    h.advance(secs(3));
    assert_eq!(
        h.pool.select(h.now),
        Selection::Ready(n),
        "selectable again at the throttle's end"
    );
}

// --- Eviction on readmission (Pinot) -----------------------------------------------------------

fn evictions(h: &mut Harness) -> Vec<EvictReason> {
    h.take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Evicted { reason, .. } => Some(reason),
            _ => None,
        })
        .collect()
}

#[test]
fn disable_then_enable_evicts_the_cached_connection() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let conn = h.ready(n);
    let sent = h.submit(n, 10, secs(60));
    h.flush(conn);
    h.pool.disable_node(h.now, n).unwrap();
    assert_eq!(
        h.pool.current_conn(n),
        Some(conn),
        "disabling keeps the connection cached"
    );
    h.take_events();
    h.pool.enable_node(h.now, n).unwrap();
    let reason = CloseReason::Evicted(EvictReason::Readmitted);
    assert_eq!(h.take_actions(), vec![Action::Close { conn, reason }]);
    assert_eq!(
        h.outcome(sent),
        Some(Outcome::Evicted(EvictReason::Readmitted))
    );
    assert_eq!(evictions(&mut h), [EvictReason::Readmitted]);
    assert_eq!(h.pool.current_conn(n), None);
    assert_eq!(h.pool.counters().evictions, 1);
}

#[test]
fn a_reannouncement_without_leaving_does_not_evict() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let conn = h.ready(n);
    h.pool.enable_node(h.now, n).unwrap();
    h.pool.set_epoch(h.now, n, 0).unwrap(); // same epoch
    assert!(evictions(&mut h).is_empty());
    assert_eq!(h.pool.current_conn(n), Some(conn));
}

#[test]
fn an_epoch_change_evicts() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let conn = h.ready(n);
    h.pool.set_epoch(h.now, n, 7).unwrap();
    assert_eq!(evictions(&mut h), [EvictReason::EpochChanged]);
    assert!(h.take_actions().contains(&Action::Close {
        conn,
        reason: CloseReason::Evicted(EvictReason::EpochChanged)
    }));
    h.pool.set_epoch(h.now, n, 7).unwrap();
    assert!(
        evictions(&mut h).is_empty(),
        "the same epoch again does nothing"
    );
}

#[test]
fn a_sender_holding_an_evicted_connection_retries_once_and_only_once() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let old = h.ready(n);
    let in_flight = h.submit(n, 10, secs(60));
    h.flush(old);
    let queued = h.submit(n, 20, secs(60));
    h.pool.evict(h.now, n).unwrap();
    h.collect();
    assert_eq!(
        h.outcome(in_flight),
        Some(Outcome::Evicted(EvictReason::Requested)),
        "written: cannot retry"
    );
    assert_eq!(
        h.outcome(queued),
        None,
        "queued: moved to a fresh connection"
    );
    assert_eq!(h.transmit(old), None, "the evicted handle never transmits");
    let (fresh, _) = h.expect_open();
    assert_ne!(fresh, old);
    assert_eq!(
        h.pool.handle_connected(h.now, old),
        Err(HandleError::StaleConn),
        "nor reconnects"
    );
    // A second eviction before it was written: the retry also fails, and says so.
    h.pool.evict(h.now, n).unwrap();
    h.collect();
    assert_eq!(
        h.outcome(queued),
        Some(Outcome::Evicted(EvictReason::Requested))
    );
    let retried = h
        .events
        .iter()
        .any(|e| matches!(e, Event::RequestDone { id, retried: true, .. } if *id == queued));
    assert!(retried, "the outcome says it was the retry");
    assert_eq!(h.pool.counters().eviction_retries, 1);
}

#[test]
fn a_retried_request_is_served_by_the_fresh_connection() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    h.ready(n);
    let queued = h.submit(n, 20, secs(60));
    h.pool.evict(h.now, n).unwrap();
    let (fresh, _) = h.expect_open();
    h.pool.handle_connected(h.now, fresh).unwrap();
    assert_eq!(h.flush(fresh), 20);
    h.respond(fresh, queued);
    assert_eq!(
        h.outcome(queued),
        Some(Outcome::Response(Bytes::from_static(b"ok")))
    );
}

#[test]
fn a_late_failure_report_for_an_evicted_connection_never_touches_its_replacement() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let old = h.ready(n);
    h.pool.set_epoch(h.now, n, 1).unwrap();
    let fresh = h.ready(n);
    let a = h.submit(n, 10, secs(60));
    for _ in 0..5 {
        assert_eq!(
            h.pool.handle_closed(h.now, old, Failure::Reset),
            Err(HandleError::StaleConn)
        );
    }
    assert_eq!(h.pool.current_conn(n), Some(fresh));
    assert_eq!(h.pool.node_state(n), Some(NodeState::Ready));
    assert_eq!(h.outcome(a), None);
}

#[test]
fn a_removed_node_handle_is_stale_and_a_new_node_reuses_the_slot_safely() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let conn = h.ready(n);
    let a = h.submit(n, 10, secs(60));
    h.pool.remove_node(h.now, n).unwrap();
    h.collect();
    assert_eq!(
        h.outcome(a),
        Some(Outcome::ConnectionLost(CloseReason::NodeRemoved))
    );
    assert_eq!(h.pool.remove_node(h.now, n), Err(HandleError::StaleNode));
    assert_eq!(h.pool.disable_node(h.now, n), Err(HandleError::StaleNode));
    let m = h.add();
    assert_eq!(m.index(), n.index());
    assert_ne!(m, n);
    assert_eq!(
        h.pool.handle_connected(h.now, conn),
        Err(HandleError::StaleConn)
    );
    let err = h
        .pool
        .submit(h.now, Target::Node(n), h.now + secs(1), Bytes::new());
    assert_eq!(err, Err(SubmitError::StaleHandle));
}

// --- Failure detection and quarantine ----------------------------------------------------------

pub(super) fn probe_times(h: &mut Harness, node: NodeId, start: Instant) -> Vec<u64> {
    let mut at = Vec::new();
    while let Some(next) = h.pool.poll_timeout() {
        h.advance_to(next);
        let opens: Vec<_> = h
            .take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Open { conn, .. } => Some(conn),
                _ => None,
            })
            .collect();
        for conn in opens {
            at.push((h.now - start).as_secs());
            h.pool
                .handle_connect_failed(h.now, conn, Failure::Refused)
                .unwrap();
            h.collect();
        }
        if h.pool.node_state(node).is_none() {
            break;
        }
    }
    at
}

#[test]
fn pinot_probe_schedule_with_defaults_is_5_15_35_up_to_5115_s() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    for _ in 0..3 {
        h.refuse(n);
    }
    assert_eq!(h.pool.is_quarantined(n), Some(true));
    let start = h.now;
    let got = probe_times(&mut h, n, start);
    assert_eq!(got, [5, 15, 35, 75, 155, 315, 635, 1275, 2555, 5115]);
    assert_eq!(
        h.pool.is_quarantined(n),
        Some(true),
        "stays excluded after the last probe by default"
    );
    assert_eq!(h.pool.counters().probes, 10);
}

#[test]
fn after_the_last_probe_the_node_is_readmitted_one_probe_delay_later() {
    // Pinot's detector: with the defaults, the 10th probe fails at 5,115 s; the node is
    // readmitted one more delay (5 s · 2^10) later, at 10,235 s, not the moment it fails.
    let mut config = pool_config();
    config.after_last_probe = AfterLastProbe::Readmit;
    let mut h = Harness::new(config);
    let n = h.add();
    for _ in 0..3 {
        h.refuse(n);
    }
    let start = h.now;
    let got = probe_times(&mut h, n, start);
    assert_eq!(got, [5, 15, 35, 75, 155, 315, 635, 1275, 2555, 5115]);
    assert_eq!(h.pool.is_quarantined(n), Some(false));
    let readmitted: Vec<_> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Readmitted { via, at, .. } => Some((*via, *at - start)),
            _ => None,
        })
        .collect();
    assert_eq!(readmitted, [(Readmission::GaveUp, secs(10_235))]);
    assert_eq!(h.pool.counters().probes, 10, "no eleventh probe");
}

#[test]
fn a_successful_probe_on_a_fresh_connection_readmits() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    for _ in 0..3 {
        h.refuse(n);
    }
    h.take_events();
    h.advance(secs(5));
    let (probe, _) = h.expect_open();
    h.pool.handle_connected(h.now, probe).unwrap();
    h.collect();
    assert_eq!(h.pool.is_quarantined(n), Some(false));
    assert!(h.events.iter().any(|e| matches!(
        e,
        Event::Readmitted {
            via: Readmission::Probe,
            ..
        }
    )));
    assert_eq!(
        h.pool.select(h.now),
        Selection::Ready(n),
        "and the probe's connection serves"
    );
}

#[test]
fn a_node_that_accepts_requests_and_never_answers_is_quarantined() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let other = h.add();
    let conn = h.ready(n);
    h.ready(other);
    for _ in 0..3 {
        h.submit(n, 10, secs(1));
        h.flush(conn);
        h.advance(secs(1) + Duration::from_nanos(1));
    }
    assert_eq!(h.pool.is_quarantined(n), Some(true));
    let cause = h.events.iter().find_map(|e| match e {
        Event::Quarantined { cause, .. } => Some(*cause),
        _ => None,
    });
    assert_eq!(cause, Some(QuarantineCause::RequestTimeouts));
    for _ in 0..20 {
        assert_eq!(h.pool.select(h.now), Selection::Ready(other));
    }
}

#[test]
fn a_response_resets_the_consecutive_timeouts() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let conn = h.ready(n);
    for _ in 0..5 {
        for _ in 0..2 {
            h.submit(n, 10, secs(1));
            h.flush(conn);
            h.advance(secs(1) + Duration::from_nanos(1));
        }
        let ok = h.submit(n, 10, secs(1));
        h.flush(conn);
        h.respond(conn, ok);
    }
    assert_eq!(h.pool.is_quarantined(n), Some(false));
}

#[test]
fn a_quarantined_node_is_not_readmitted_because_a_cached_connection_looks_active() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    let cached = h.ready(n);
    for _ in 0..3 {
        h.submit(n, 10, secs(1));
        h.flush(cached);
        h.advance(secs(1) + Duration::from_nanos(1));
    }
    assert_eq!(h.pool.is_quarantined(n), Some(true));
    assert!(h.take_actions().contains(&Action::Close {
        conn: cached,
        reason: CloseReason::Quarantined
    }));
    // The cached connection "looks active": reports about it are refused and change nothing.
    assert_eq!(
        h.pool.handle_connected(h.now, cached),
        Err(HandleError::StaleConn)
    );
    assert_eq!(
        h.pool.handle_written(h.now, cached, 0),
        Err(HandleError::StaleConn)
    );
    assert_eq!(h.pool.is_quarantined(n), Some(true));
    // Only a probe on a fresh connection readmits.
    h.advance(secs(5));
    let (probe, _) = h.expect_open();
    assert_ne!(probe, cached);
    h.pool.handle_connected(h.now, probe).unwrap();
    assert_eq!(h.pool.is_quarantined(n), Some(false));
}

#[test]
fn the_same_failure_reported_twice_counts_once() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    for _ in 0..2 {
        let (conn, _) = h.open(n);
        h.pool
            .handle_connect_failed(h.now, conn, Failure::Refused)
            .unwrap();
        assert!(
            h.pool
                .handle_connect_failed(h.now, conn, Failure::Refused)
                .is_err()
        );
        assert!(h.pool.handle_closed(h.now, conn, Failure::Refused).is_err());
    }
    assert_eq!(
        h.pool.is_quarantined(n),
        Some(false),
        "two distinct failures, not six"
    );
    h.refuse(n);
    assert_eq!(h.pool.is_quarantined(n), Some(true));
}

#[test]
fn a_server_closing_an_idle_connection_is_not_a_failure() {
    let mut h = Harness::new(pool_config());
    let n = h.add();
    for _ in 0..5 {
        let conn = h.ready(n);
        h.pool
            .handle_closed(h.now, conn, Failure::PeerClosed)
            .unwrap();
        h.advance(secs(1));
    }
    assert_eq!(h.pool.is_quarantined(n), Some(false));
}
