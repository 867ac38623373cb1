//! What an in-order protocol costs on keepwire: the keepwire Redis client against a
//! hand-written tokio Redis client, `GET`s pipelined on one connection
//! (`support/pipelined_bench.rs` says how it runs and what the baseline is).
//!
//! ```text
//! cargo run --release -p keepwire-tests --example redis_bench [-- REQUESTS [IN_FLIGHT [ROUNDS]]]
//! ```
//!
//! Defaults: 200,000 `GET`s per client per round, 64 in flight, 7 rounds; it starts its own
//! Redis on a free loopback port.

use std::error::Error;

use bytes::Bytes;
use keepwire_tests::protocols::redis::{Redis, Reply, command};
use keepwire_tests::servers::RedisServer;
use keepwire_tokio::Codec;

#[path = "support/pipelined_bench.rs"]
mod pipelined_bench;

use pipelined_bench::{Workload, key, run_bench, value};

struct Gets;

impl Workload for Gets {
    fn codec(&self) -> impl Codec {
        Redis::new()
    }

    fn ping(&self) -> Bytes {
        command(["PING"])
    }

    fn store(&self, i: usize) -> Option<Bytes> {
        Some(command(["SET", &key(i), &value(i)]))
    }

    fn is_stored(&self, answer: &Bytes) -> bool {
        Reply::parse(answer) == Ok(Reply::Status("OK".into()))
    }

    fn read(&self, i: usize) -> Bytes {
        command(["GET", &key(i)])
    }

    fn is_value(&self, answer: &Bytes, i: usize) -> bool {
        Reply::parse(answer).is_ok_and(|reply| reply == Reply::Bulk(value(i).into()))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = RedisServer::start()?;
    run_bench(Gets, "Redis", server.addr()).await
}
