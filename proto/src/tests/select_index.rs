//! The selection index against the plain linear scan of the rule, over random node tables:
//! every pick, from every offset, must be the same.

use alloc::vec::Vec;

use bytes::Bytes;

use super::{Harness, exact, ms, secs};
use crate::rng::Rng;
use crate::select::SCAN_UP_TO;
use crate::{Action, Failure, NodeId, SelectionRule, Target};

fn random_config(rule: SelectionRule, rng: &mut Rng) -> crate::Config {
    let mut config = exact();
    config.selection = rule;
    config.max_in_flight = 3;
    config.high_watermark = 300;
    config.low_watermark = 100;
    config.quarantine_after_failures = 2;
    config.quarantine_after_timeouts = 2;
    config.panic_threshold = [0.0, 0.5][rng.below(2)];
    config
}

/// One random input to a random node of `nodes` (routed submits pick a node themselves).
fn random_step(h: &mut Harness, nodes: &[NodeId], rng: &mut Rng) {
    let n = nodes[rng.below(nodes.len())];
    let now = h.now;
    match rng.below(12) {
        0 => drop(h.pool.connect(now, n)),
        1 | 2 => {
            if let Some(conn) = h.pool.current_conn(n) {
                let _ = h.pool.handle_connected(now, conn);
            }
        }
        3 => {
            if let Some(conn) = h.pool.current_conn(n) {
                let _ = h.pool.handle_connect_failed(now, conn, Failure::Refused);
            }
        }
        4 | 5 => {
            let frame = Bytes::from(alloc::vec![0; 10 + rng.below(200)]);
            let _ = h.pool.submit(now, Target::Node(n), now + ms(500), frame);
        }
        6 => {
            let frame = Bytes::from_static(b"best");
            let _ = h.pool.submit(now, Target::Best, now + ms(500), frame);
        }
        7 => {
            if let Some(conn) = h.pool.current_conn(n) {
                h.flush(conn);
            }
        }
        8 => drop(h.pool.throttle(now, n, now + ms(rng.below(300) as u64))),
        9 => drop(if rng.below(2) == 0 {
            h.pool.disable_node(now, n)
        } else {
            h.pool.enable_node(now, n)
        }),
        10 => {
            if let Some(conn) = h.pool.current_conn(n) {
                let _ = h.pool.handle_closed(now, conn, Failure::Reset);
            }
        }
        _ => h.advance(ms(rng.below(400) as u64)),
    }
    h.collect();
    h.actions.retain(|a| !matches!(a, Action::Close { .. }));
}

/// Every offset's pick through the index against the scan's: how many were compared.
fn compare_every_offset(h: &mut Harness, nodes: usize, seed: u64) -> usize {
    let now = h.pool.latest();
    for offset in 0..nodes {
        let (indexed, scanned) = (h.pool.pick_from(now, offset), h.pool.scan_from(now, offset));
        assert_eq!(indexed, scanned, "seed {seed}, offset {offset}");
    }
    nodes
}

fn random_tables(rule: SelectionRule, seed: u64) -> usize {
    let mut rng = Rng::new(seed);
    let mut h = Harness::new(random_config(rule, &mut rng));
    let nodes: Vec<NodeId> = (0..1 + rng.below(40)).map(|_| h.add()).collect();
    let mut compared = 0;
    for _ in 0..300 {
        random_step(&mut h, &nodes, &mut rng);
        compared += compare_every_offset(&mut h, nodes.len(), seed);
    }
    compared
}

#[test]
fn the_index_picks_what_the_linear_scan_picks_over_random_node_tables() {
    let mut compared = 0;
    for seed in 0..60 {
        compared += random_tables(SelectionRule::FewestFailedAttempts, seed);
        compared += random_tables(SelectionRule::LeastRecentlyAttempted, seed + 1_000);
    }
    assert!(compared > 100_000, "{compared} picks compared");
}

#[test]
fn a_pool_that_outgrows_the_scan_picks_through_an_index_kept_up_to_date() {
    // Up to `SCAN_UP_TO` node slots a pick scans and never asks the index: the nodes that
    // inputs touch meanwhile, and the time that passes, must be in the index once the pool
    // outgrows the scan.
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let mut h = Harness::new(random_config(SelectionRule::FewestFailedAttempts, &mut rng));
        let mut nodes: Vec<NodeId> = (0..SCAN_UP_TO).map(|_| h.add()).collect();
        for _ in 0..100 + rng.below(200) {
            random_step(&mut h, &nodes, &mut rng);
        }
        nodes.extend((0..1 + rng.below(8)).map(|_| h.add()));
        compare_every_offset(&mut h, nodes.len(), seed);
        for _ in 0..50 {
            random_step(&mut h, &nodes, &mut rng);
            compare_every_offset(&mut h, nodes.len(), seed);
        }
    }
}

#[test]
fn a_throttle_and_a_backoff_end_on_time_in_the_index() {
    let mut h = Harness::new(exact());
    let (a, b) = (h.add(), h.add());
    h.pool.throttle(h.now, a, h.now + secs(1)).unwrap();
    h.refuse(b); // b backs off 50 ms
    let now = h.now;
    assert_eq!(
        h.pool.pick_from(now, 0),
        crate::Selection::None { all_full: false }
    );
    let later = now + ms(50);
    assert_eq!(h.pool.pick_from(later, 0), crate::Selection::Connect(b));
    let after = now + secs(1);
    assert_eq!(
        h.pool.pick_from(after, 0),
        crate::Selection::Connect(a),
        "a: never attempted"
    );
}

#[test]
fn a_backoff_that_outlasts_a_throttle_still_ends_in_the_index() {
    // The throttle ends first, with the node still in its backoff, and the node waits for
    // that to end with its placement still throttled: when it ends, the node is a candidate.
    let mut h = Harness::new(exact());
    let a = h.add();
    h.pool.throttle(h.now, a, h.now + ms(20)).unwrap();
    h.refuse(a); // backs off 50 ms
    let now = h.now;
    let none = crate::Selection::None { all_full: false };
    assert_eq!(h.pool.pick_from(now, 0), none, "throttled");
    assert_eq!(h.pool.pick_from(now + ms(30), 0), none, "in its backoff");
    let later = now + ms(50);
    assert_eq!(h.pool.scan_from(later, 0), crate::Selection::Connect(a));
    assert_eq!(h.pool.pick_from(later, 0), crate::Selection::Connect(a));
}

#[test]
fn the_public_linear_scan_draws_and_picks_as_the_index_does() {
    // Two pools with the same seed and nodes: one picks through the index (more nodes than
    // `SCAN_UP_TO`, or `select` would scan too), the other through `select_by_scan` (the
    // benchmark's baseline); both draw the same offsets.
    let (mut indexed, mut scanned) = (Harness::new(exact()), Harness::new(exact()));
    for h in [&mut indexed, &mut scanned] {
        let nodes: Vec<NodeId> = (0..SCAN_UP_TO + 3).map(|_| h.add()).collect();
        h.ready(nodes[1]);
        h.ready(nodes[3]);
    }
    let now = indexed.now;
    let picks: Vec<_> = (0..20).map(|_| indexed.pool.select(now)).collect();
    let scans: Vec<_> = (0..20).map(|_| scanned.pool.select_by_scan(now)).collect();
    assert_eq!(picks, scans);
    assert!(
        picks
            .iter()
            .all(|p| matches!(p, crate::Selection::Ready(_))),
        "{picks:?}"
    );
    assert_eq!(
        Harness::new(exact()).pool.select_by_scan(now),
        crate::Selection::None { all_full: false },
        "no node"
    );
}
