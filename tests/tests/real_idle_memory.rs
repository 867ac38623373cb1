//! An idle connection holds no read buffer. The driver reads a connection's responses into a
//! 64 KiB chunk; once nothing is in flight on it, the chunk goes back to the driver's few
//! recycled ones (at most 32), and reads that find nothing (or an unexpected byte) go through
//! the driver's scratch buffer. A client with many quiet connections therefore keeps about
//! the memory of those recycled chunks, not 64 KiB per connection. (A lone connection keeps
//! its chunk: there is no other connection to give it to; `real_client.rs` checks both.)
//!
//! Measured with a counting allocator (live bytes), so this file holds one test, and its
//! peers are `peers::batch_echo`: a `peers::Peer` keeps a 64 KiB read buffer per connection
//! in this process, which would be counted with the client's.
#![allow(unsafe_code)] // the counting allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use keepwire_driver::{ClientBuilder, Target};
use keepwire_tests::peers::batch_echo;
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers to the system allocator; only counts the bytes it hands out and takes back.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NODES: usize = 100;
const CHUNK: isize = 64 * 1024;

#[test]
fn quiet_connections_hold_no_read_buffer() {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut builder = ClientBuilder::new(test_config());
    for _ in 0..NODES {
        builder = builder.node(batch_echo(1));
    }
    let runtime = Arc::new(TokioRuntime::from_handle(tokio.handle().clone()));
    let client = tokio.block_on(async { builder.build(runtime).unwrap() });
    let nodes = client.initial_nodes();
    tokio.block_on(async {
        // Every connection answers once (connected, read into a chunk, gone quiet), then once
        // more, from a baseline taken in between.
        let round = || async {
            for &node in nodes {
                let answer = client
                    .send(Target::Node(node), &b"ping"[..], Duration::from_secs(10))
                    .await;
                assert_eq!(answer.as_deref(), Ok(&b"ping"[..]));
            }
        };
        round().await;
        let before = LIVE.load(Ordering::Relaxed);
        round().await;
        round().await;
        let grown = LIVE.load(Ordering::Relaxed) - before;
        assert!(
            grown < 8 * CHUNK,
            "{grown} bytes more after {NODES} quiet connections answered again \
             (a chunk each would be {})",
            NODES as isize * CHUNK
        );
        let live = LIVE.load(Ordering::Relaxed);
        assert!(
            live < (32 + 16) * CHUNK,
            "{live} bytes live with {NODES} quiet connections: more than the recycled chunks"
        );
        client.shutdown().await;
    });
}
