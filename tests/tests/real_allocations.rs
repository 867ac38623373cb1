//! A send allocates nothing in steady state (beyond what the caller's payload needs). Each
//! call's reply slot goes back to the client's spares once the call is over, and the next call
//! takes it from there; the frame, the response and the driver's buffers were already
//! allocation-free per request.
//!
//! Counted with a counting allocator on the threads that run the callers and the driver only
//! (the test's own thread under a tokio current_thread runtime; the test's thread, the caller,
//! and the workers of a multi-thread one); the echo peer's thread is not counted.
#![allow(unsafe_code)] // the counting allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use keepwire_driver::{Client, ClientBuilder, NodeId, Target};
use keepwire_tests::peers::batch_echo;
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;

struct Counting;

thread_local! {
    /// Allocations made on this thread (const-initialized, no destructor: safe to touch from
    /// inside the allocator).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Whether this thread runs the multi-thread test's caller or driver.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Allocations made on the multi-thread test's caller's and workers' threads.
static ON_COUNTED: AtomicU64 = AtomicU64::new(0);

fn count() {
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        ON_COUNTED.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: defers to the system allocator; only counts the allocations made on each thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const PAYLOAD: &[u8] = b"ping";
/// A payload larger than a response the driver reads into its small chunks (8 KiB).
static LARGE_PAYLOAD: [u8; 16 * 1024] = [b'x'; 16 * 1024];

/// A client of one echo peer on `tokio`.
fn warm_client(tokio: &tokio::runtime::Runtime) -> (Client, NodeId) {
    let runtime = Arc::new(TokioRuntime::from_handle(tokio.handle().clone()));
    let client = tokio.block_on(async {
        ClientBuilder::new(test_config())
            .node(batch_echo(1))
            .build(runtime)
            .unwrap()
    });
    let node = client.initial_nodes()[0];
    (client, node)
}

async fn send(client: &Client, node: NodeId) {
    send_payload(client, node, PAYLOAD).await;
}

async fn send_payload(client: &Client, node: NodeId, payload: &'static [u8]) {
    let answer = client
        .send(Target::Node(node), payload, Duration::from_secs(10))
        .await;
    assert_eq!(answer.as_deref(), Ok(payload));
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What `count` (a running total of allocations) grew by over `rounds` calls of `round`,
/// after `warm_up` calls (connected, buffers and spare slots in place).
async fn allocations_over(
    count: impl Fn() -> u64,
    warm_up: u64,
    rounds: u64,
    round: impl AsyncFn(),
) -> u64 {
    for _ in 0..warm_up {
        round().await;
    }
    let before = count();
    for _ in 0..rounds {
        round().await;
    }
    count() - before
}

#[test]
fn one_caller_at_a_time_allocates_nothing_per_send() {
    const SENDS: u64 = 1_000;
    let tokio = current_thread();
    let (client, node) = warm_client(&tokio);
    let allocated = tokio.block_on(allocations_over(allocations, 100, SENDS, async || {
        send(&client, node).await;
    }));
    // A reply slot per send would be one each: 1,000.
    assert!(
        allocated <= SENDS / 20,
        "{allocated} allocations for {SENDS} sends one at a time"
    );
    tokio.block_on(client.shutdown());
}

/// Batches of sixteen sends of `payload` at once, on a current_thread runtime: the
/// allocations of 50 batches after 10 to warm up, and the sends they made.
fn sixteen_at_once(payload: &'static [u8]) -> (u64, u64) {
    const BATCHES: u64 = 50;
    let tokio = current_thread();
    let (client, node) = warm_client(&tokio);
    let s = || send_payload(&client, node, payload);
    let allocated = tokio.block_on(allocations_over(allocations, 10, BATCHES, async || {
        tokio::join!(
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s(),
            s()
        );
    }));
    tokio.block_on(client.shutdown());
    (allocated, 16 * BATCHES)
}

#[test]
fn sixteen_callers_at_once_allocate_nothing_per_send() {
    let (allocated, sends) = sixteen_at_once(PAYLOAD);
    assert!(
        allocated <= sends / 20,
        "{allocated} allocations for {sends} sends, 16 at a time"
    );
}

/// Sixteen requests of 16 KiB in flight allocate nothing either: their frames are cut from
/// the 64 KiB chunks (three to a chunk, with their headers) and the answers from the 256 KiB
/// ones, and each chunk comes back for reuse once everything cut from it is dropped. A frame
/// that reserved more than a chunk holds would take a buffer of its own.
#[test]
fn sixteen_callers_of_16_kib_at_once_allocate_nothing_per_send() {
    let (allocated, sends) = sixteen_at_once(&LARGE_PAYLOAD);
    assert!(
        allocated <= sends / 20,
        "{allocated} allocations for {sends} sends of 16 KiB, 16 at a time"
    );
}

/// On a multi-thread runtime, the caller on the test's thread and the driver on a worker:
/// as above, counted on both threads.
#[test]
fn a_caller_on_another_thread_than_the_driver_allocates_nothing_per_send() {
    const SENDS: u64 = 1_000;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| COUNTED.with(|counted| counted.set(true)))
        .enable_all()
        .build()
        .unwrap();
    let (client, node) = warm_client(&tokio);
    COUNTED.with(|counted| counted.set(true));
    let counted = || ON_COUNTED.load(Ordering::Relaxed);
    let allocated = tokio.block_on(allocations_over(counted, 100, SENDS, async || {
        send(&client, node).await;
    }));
    assert!(
        allocated <= SENDS / 20,
        "{allocated} allocations on the caller's and the workers' threads for {SENDS} sends"
    );
    tokio.block_on(client.shutdown());
}
