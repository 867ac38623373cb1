//! What an in-order protocol costs on keepwire: the keepwire memcached client against a
//! hand-written tokio memcached client, `get`s pipelined on one connection
//! (`support/pipelined_bench.rs` says how it runs and what the baseline is).
//!
//! ```text
//! cargo run --release -p keepwire-tests --example memcached_bench [-- REQUESTS [IN_FLIGHT [ROUNDS]]]
//! ```
//!
//! Defaults: 200,000 gets per client per round, 64 in flight, 7 rounds; it starts its own
//! memcached on a free loopback port.

use std::error::Error;

use bytes::Bytes;
use keepwire_tests::protocols::memcached::{self, Memcached, Reply};
use keepwire_tests::servers::MemcachedServer;
use keepwire_tokio::Codec;

#[path = "support/pipelined_bench.rs"]
mod pipelined_bench;

use pipelined_bench::{Workload, key, run_bench, value};

struct Gets;

impl Workload for Gets {
    fn codec(&self) -> impl Codec {
        Memcached::new()
    }

    fn ping(&self) -> Bytes {
        memcached::version()
    }

    fn store(&self, i: usize) -> Option<Bytes> {
        Some(memcached::set(key(i), value(i)))
    }

    fn is_stored(&self, answer: &Bytes) -> bool {
        Reply::parse(answer) == Ok(Reply::Stored)
    }

    fn read(&self, i: usize) -> Bytes {
        memcached::get(key(i))
    }

    fn is_value(&self, answer: &Bytes, i: usize) -> bool {
        Reply::parse(answer)
            .ok()
            .and_then(Reply::into_value)
            .is_some_and(|v| v == value(i).as_bytes())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = MemcachedServer::start()?;
    run_bench(Gets, "memcached", server.addr()).await
}
