//! A send allocates nothing in steady state (beyond what the caller's payload needs). Each
//! call's reply slot goes back to the client's spares once the call is over, and the next call
//! takes it from there; the frame, the response and the driver's buffers were already
//! allocation-free per request.
//!
//! Counted with a counting allocator on the threads that run the callers and the driver only
//! (the test's own thread under a tokio current_thread runtime, or the workers of a
//! multi-thread one); the echo peer's thread is not counted.
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
    /// Whether this thread is a worker of the multi-thread test's runtime.
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Allocations made on the multi-thread test's workers, all of them.
static ON_WORKERS: AtomicU64 = AtomicU64::new(0);

fn count() {
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
    if WORKER.try_with(Cell::get).unwrap_or(false) {
        ON_WORKERS.fetch_add(1, Ordering::Relaxed);
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
    let answer = client
        .send(Target::Node(node), PAYLOAD, Duration::from_secs(10))
        .await;
    assert_eq!(answer.as_deref(), Ok(PAYLOAD));
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Allocations on this thread over `rounds` calls of `round` on `tokio`, after `warm_up`
/// calls (connected, buffers and spare slots in place).
fn allocations_over(
    tokio: &tokio::runtime::Runtime,
    warm_up: u64,
    rounds: u64,
    round: impl AsyncFn(),
) -> u64 {
    tokio.block_on(async {
        for _ in 0..warm_up {
            round().await;
        }
        let before = allocations();
        for _ in 0..rounds {
            round().await;
        }
        allocations() - before
    })
}

#[test]
fn one_caller_at_a_time_allocates_nothing_per_send() {
    const SENDS: u64 = 1_000;
    let tokio = current_thread();
    let (client, node) = warm_client(&tokio);
    let allocated = allocations_over(&tokio, 100, SENDS, async || send(&client, node).await);
    // A reply slot per send would be one each: 1,000.
    assert!(
        allocated <= SENDS / 20,
        "{allocated} allocations for {SENDS} sends one at a time"
    );
    tokio.block_on(client.shutdown());
}

#[test]
fn sixteen_callers_at_once_allocate_nothing_per_send() {
    const BATCHES: u64 = 50;
    let tokio = current_thread();
    let (client, node) = warm_client(&tokio);
    let s = || send(&client, node);
    let allocated = allocations_over(&tokio, 10, BATCHES, async || {
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
    });
    let sends = 16 * BATCHES;
    assert!(
        allocated <= sends / 20,
        "{allocated} allocations for {sends} sends, 16 at a time"
    );
    tokio.block_on(client.shutdown());
}

/// On two workers (the caller and the driver on either): as above, counted on both.
#[test]
fn a_caller_on_another_worker_allocates_nothing_per_send() {
    const SENDS: u64 = 1_000;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| WORKER.with(|worker| worker.set(true)))
        .enable_all()
        .build()
        .unwrap();
    let (client, node) = warm_client(&tokio);
    let caller = tokio.spawn(async move {
        for _ in 0..100 {
            send(&client, node).await;
        }
        let before = ON_WORKERS.load(Ordering::Relaxed);
        for _ in 0..SENDS {
            send(&client, node).await;
        }
        let allocated = ON_WORKERS.load(Ordering::Relaxed) - before;
        client.shutdown().await;
        allocated
    });
    let allocated = tokio.block_on(caller).unwrap();
    assert!(
        allocated <= SENDS / 20,
        "{allocated} allocations on the workers for {SENDS} sends one at a time"
    );
}
