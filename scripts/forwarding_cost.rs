//! What a load the store buffer cannot forward costs on this machine: a chain of dependent
//! steps, each storing a value and loading it straight back, once as two 4-byte stores read
//! by one 8-byte load (which cannot be forwarded: the load waits for both stores to reach the
//! cache), once as one 8-byte store read by an 8-byte load (forwarded). The difference per
//! step is the price of one such stall on the path a computation waits on. Built and run by
//! `scripts/forwarding.sh cost`.

use std::hint::black_box;
use std::time::Instant;

const STEPS: u64 = 200_000_000;

/// Stores `x` and `x + 1` as two 4-byte halves of bytes 4..12.
#[inline(never)]
fn store_halves(out: &mut [u32; 4], x: u32) {
    out[1] = x;
    out[2] = x.wrapping_add(1);
}

/// Stores `x` as one 8-byte word.
#[inline(never)]
fn store_word(out: &mut [u64; 2], x: u64) {
    out[0] = x;
}

fn main() {
    for _ in 0..3 {
        let mut halves = [0u32; 4];
        let mut acc = 0u64;
        let start = Instant::now();
        for i in 0..STEPS {
            store_halves(black_box(&mut halves), acc as u32);
            // SAFETY: bytes 4..12 of a 16-byte array, read unaligned.
            let v = unsafe {
                halves
                    .as_ptr()
                    .cast::<u8>()
                    .add(4)
                    .cast::<u64>()
                    .read_unaligned()
            };
            acc = acc.wrapping_add(v & 1).wrapping_add(i & 1);
        }
        let spanning = start.elapsed().as_nanos() as f64 / STEPS as f64;
        let mut word = [0u64; 2];
        let start = Instant::now();
        for i in 0..STEPS {
            store_word(black_box(&mut word), acc);
            acc = acc.wrapping_add(word[0] & 1).wrapping_add(i & 1);
        }
        let forwarded = start.elapsed().as_nanos() as f64 / STEPS as f64;
        black_box(acc);
        println!(
            "a step whose load spans two stores: {spanning:.2} ns; one store: {forwarded:.2} ns; \
             the stall: {:.2} ns",
            spanning - forwarded
        );
    }
}
