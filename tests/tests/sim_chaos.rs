//! Chaos runs: random fault schedules over 2–50 nodes, every invariant checked after every
//! step (see `keepwire_tests::sim::chaos`). `KEEPWIRE_CHAOS_SEEDS=N` runs N seeds instead of
//! the default 250; a failure prints its seed and the command that replays it.

use keepwire_tests::sim::chaos::{replay_command, run_seed};

fn seeds() -> u64 {
    std::env::var("KEEPWIRE_CHAOS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(250)
}

#[test]
fn random_fault_schedules_keep_every_invariant() {
    let mut failures = Vec::new();
    let mut requests = 0;
    for seed in 0..seeds() {
        match run_seed(seed) {
            Ok(s) => requests += s.accepted,
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(requests > 0);
}

/// Replays the seed in `KEEPWIRE_CHAOS_SEED` (seed 0 without it).
#[test]
fn one_seed() {
    let seed = std::env::var("KEEPWIRE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let summary = run_seed(seed).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "seed {seed}: {summary:?}\n(replay: {})",
        replay_command(seed)
    );
}
