//! How long the 37-minute, 1.07-million-query replay (story 2) takes, before and after, in
//! wall time: `cargo bench -p keepwire-tests --bench replay`.
//!
//! Each run is repeated (`KEEPWIRE_BENCH_RUNS`, default 5) and the fastest and median wall
//! times are printed with what the run simulated, and the thread's time on a CPU (Linux's
//! `/proc/thread-self/schedstat`), which a machine busy with other work inflates less than
//! the wall clock. A plain harness: one run is a second of work, which a statistics harness
//! would repeat for minutes.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use keepwire_tests::sim::stories::{Mode, Stall, thousands};

/// This thread's time on a CPU so far, where Linux tells it.
fn on_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

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
        let mut cpu: Vec<Duration> = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let (started, cpu_before) = (Instant::now(), on_cpu());
            let run = stall.run("bench", mode);
            times.push(started.elapsed());
            if let (Some(a), Some(b)) = (cpu_before, on_cpu()) {
                cpu.push(b - a);
            }
            last = Some(run);
        }
        times.sort();
        cpu.sort();
        let run = last.expect("at least one run");
        let cpu = cpu.first().map_or(String::new(), |c| {
            format!(" ({:.3} s on a CPU)", c.as_secs_f64())
        });
        println!(
            "{mode:?}: fastest {:.3} s{cpu}, median {:.3} s wall over {runs} runs; {} queries \
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
