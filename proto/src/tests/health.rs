//! The failure detector and panic mode at their exact thresholds, and what counts (or not)
//! towards a node's quarantine.

use super::{Harness, exact};
use crate::Config;

/// Quarantine after three consecutive failures; panic below half the nodes healthy.
fn detector() -> Config {
    let mut c = exact();
    c.quarantine_after_failures = 3;
    c.quarantine_after_timeouts = 3;
    c.panic_threshold = 0.5;
    c
}

#[test]
fn exactly_at_the_panic_threshold_the_pool_is_not_in_panic() {
    let mut h = Harness::new(detector());
    let (a, b) = (h.add(), h.add());
    for _ in 0..3 {
        h.refuse(a);
    }
    assert_eq!(h.pool.is_quarantined(a), Some(true));
    assert!(!h.pool.in_panic(), "1 of 2 healthy is not below half");
    for _ in 0..3 {
        h.refuse(b);
    }
    assert!(h.pool.in_panic(), "0 of 2 is");
}
