//! How long the 37-minute, 1.07-million-query replay (story 2) takes, before and after, in
//! wall time: `cargo bench -p keepwire-tests --bench replay`.
//!
//! Each run is repeated (`KEEPWIRE_BENCH_RUNS`, default 5) and the fastest and median wall
//! times are printed with what the run simulated. A plain harness: one run is a second of
//! work, which a statistics harness would repeat for minutes.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use keepwire_tests::sim::stories::{Mode, Stall, thousands};

fn main() {
    let runs: usize = std::env::var("KEEPWIRE_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let stall = Stall::story();
    println!(
        "story 2: {} + {} servers at {:.1} queries/s, a {} min stall, {} simulated s",
        stall.stalled,
        stall.healthy,
        stall.rate,
        stall.length.as_secs() / 60,
        (stall.start + stall.length + stall.tail).as_secs()
    );
    for mode in [Mode::Before, Mode::After] {
        let mut times: Vec<Duration> = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let started = Instant::now();
            let run = stall.run("bench", mode);
            times.push(started.elapsed());
            last = Some(run);
        }
        times.sort();
        let run = last.expect("at least one run");
        println!(
            "{mode:?}: fastest {:.3} s, median {:.3} s wall over {runs} runs; {} queries \
             submitted ({} accepted), {} timed out, peak pending {} bytes",
            times[0].as_secs_f64(),
            times[times.len() / 2].as_secs_f64(),
            thousands(run.tally.accepted + run.tally.failed_fast),
            thousands(run.tally.accepted),
            thousands(run.tally.timed_out),
            thousands(run.tally.peak_total),
        );
    }
}
