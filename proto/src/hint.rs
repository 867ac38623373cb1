//! Layout hints for the request path: which side of a branch is the unusual one.
//!
//! The compiler lays out the side of a branch it thinks likelier as the straight path, and
//! the other behind a taken jump. Without a hint it often guesses wrong on the request path
//! (an error return, a slab's growth, a writability flip laid out inline, the usual case
//! jumped to), and each taken jump ends a straight run of the core's fetch. A
//! profile-guided build of the lifecycle bench showed what that costs: it took 4 conditional
//! jumps per lifecycle where the plain build took 41, and ran about 2.5 ns (5 %) faster with
//! 13 fewer instructions (BENCHMARKS.md, "The unusual paths marked cold";
//! `scripts/taken-jumps.sh` counts them).
//!
//! Only branches whose side is unusual for every user are marked: errors and stale handles
//! (a stale transmit entry among them), a buffer's growth or reset, a new request slot, a
//! writability flip, a partial write resumed, a timer re-armed where a stopped one is usual,
//! a quarantine lifted, a heartbeat's answer, an answer out of order. Not those whose likelier
//! side depends on the workload (an empty queue, a node already listed, one request in flight
//! or many).

use alloc::vec::Vec;

/// Marks the path that calls it as the unusual one, which the compiler then lays out of the
/// way of the usual one. Costs nothing where it is called: a call of a `#[cold]` function
/// makes its block cold, and this one is inlined into nothing. (`core::hint::cold_path`
/// does the same from Rust 1.95; the workspace supports 1.85.)
#[cold]
#[inline(always)]
pub(crate) fn cold_path() {}

/// `items.push(item)` with the buffer's growth marked unusual: the standard library's
/// `Vec::push` leaves its growth inline as the straight path, and its usual store behind a
/// taken jump.
#[inline(always)]
pub(crate) fn push<T>(items: &mut Vec<T>, item: T) {
    if items.len() == items.capacity() {
        grow(items);
    }
    items.push(item);
}

/// The growth of [`push`], out of line.
#[cold]
#[inline(never)]
fn grow<T>(items: &mut Vec<T>) {
    items.reserve(1);
}
