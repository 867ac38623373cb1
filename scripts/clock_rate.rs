//! The core's clock rate right now, from a chain of dependent steps of known latency: each
//! step multiplies (3 cycles) and then xors (1 cycle) the previous step's result, so a step
//! takes 4 cycles whatever the machine's width, and steps per second times 4 is the clock.
//! With it, a benchmark's time per call gives its cycles, and its instructions (callgrind)
//! give instructions per cycle: whether a slow hour is a slower clock or a busier core. Five
//! rounds of 300 million steps. Run:
//!
//! ```text
//! rustc -O --edition 2021 scripts/clock_rate.rs -o /tmp/clock_rate && /tmp/clock_rate
//! ```

use std::hint::black_box;
use std::time::Instant;

/// Cycles one step of [`chain`] takes: `imul` (3) then `xor` (1) on the dependent path; the
/// shift reads the same input as the multiply, in parallel with it.
const CYCLES_PER_STEP: f64 = 4.0;

#[inline(never)]
fn chain(mut x: u64, steps: u64) -> u64 {
    for _ in 0..steps {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (x >> 7);
    }
    x
}

fn main() {
    for _ in 0..5 {
        let steps = black_box(300_000_000u64);
        let start = Instant::now();
        black_box(chain(black_box(3), steps));
        let seconds = start.elapsed().as_secs_f64();
        println!("{:.2} GHz", steps as f64 * CYCLES_PER_STEP / seconds / 1e9);
    }
}
