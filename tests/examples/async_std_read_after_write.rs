//! keepwire on async-std, one request at a time to a loopback echo server, with the driver's
//! read right after the write (`Runtime::read_after_write`) and without it, taking turns in
//! the same run: the measurement behind `AsyncStdRuntime::read_after_write`.
//!
//! ```text
//! cargo run --release -p keepwire-tests --example async_std_read_after_write -- [ROUNDS] [MS]
//! # defaults: 10 rounds of 500 ms for each side
//! ```
//!
//! Each round builds a client on async-std's executor (its default threads, one per core)
//! whose runtime is `AsyncStdRuntime` but for its answer to `read_after_write`, opens one
//! connection to a fresh echo server (`peers::batch_echo(1)`: a plain thread that answers
//! each request as it comes), and sends 64-byte requests back to back from one task for `MS`
//! milliseconds. It prints each side's per-round request rates, and the medians of its rates
//! and of its rounds' median round trips. Neither side lets callers run the driver's rounds in
//! place (`Runtime::drive_here`, which reads after every write whatever the answer): both
//! measure the driver's task.

use std::error::Error;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, Instant};

use keepwire_async_std::{
    AsyncStdRuntime, BoundClientBuilder, BoxFuture, Config, IoStream, PreparedSocket, ResolveError,
    Runtime, Target, Timer,
};
use keepwire_tests::peers::batch_echo;

const PAYLOAD: [u8; 64] = [b'x'; 64];
const TIMEOUT: Duration = Duration::from_secs(10);

/// async-std's runtime, asking for the read right after the write or not.
#[derive(Debug)]
struct Asking(bool);

impl Runtime for Asking {
    fn now(&self) -> Instant {
        AsyncStdRuntime.now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        AsyncStdRuntime.new_timer(deadline)
    }

    fn read_after_write(&self) -> bool {
        self.0
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        AsyncStdRuntime.spawn(future);
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        AsyncStdRuntime.connect(socket, addr)
    }

    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        AsyncStdRuntime.resolve(host, port)
    }
}

/// One round: requests per second, and the median round trip in microseconds.
fn round(asks: bool, phase: Duration) -> Result<(f64, f64), Box<dyn Error>> {
    let client = BoundClientBuilder::new(Config::default(), Asking(asks))
        .node(batch_echo(1))
        .build()?;
    async_std::task::block_on(async {
        let caller = client.clone();
        let mut latencies = async_std::task::spawn(async move {
            let start = Instant::now();
            let mut latencies = Vec::with_capacity(1 << 20);
            while start.elapsed() < phase {
                let sent = Instant::now();
                let answer = caller.send(Target::Best, &PAYLOAD[..], TIMEOUT).await?;
                assert_eq!(answer.len(), PAYLOAD.len());
                latencies.push(sent.elapsed());
            }
            Ok::<_, keepwire_async_std::SendError>(latencies)
        })
        .await?;
        client.shutdown().await;
        latencies.sort_unstable();
        let rate = latencies.len() as f64 / phase.as_secs_f64();
        let median = latencies[latencies.len() / 2].as_secs_f64() * 1e6;
        Ok((rate, median))
    })
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(10), |a| a.parse())?;
    let phase = Duration::from_millis(args.next().map_or(Ok(500), |a| a.parse())?);
    // Index 0 asks, 1 does not; the side that goes first alternates.
    let mut runs: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        for turn in 0..2 {
            let side = (r + turn) % 2;
            runs[side].push(round(side == 0, phase)?);
        }
    }
    for (side, name) in ["asks", "does not ask"].iter().enumerate() {
        let rates: Vec<f64> = runs[side].iter().map(|run| run.0).collect();
        let medians: Vec<f64> = runs[side].iter().map(|run| run.1).collect();
        let shown: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{name}: {} requests/s per round; median {:.0} requests/s, median round trip {:.1} µs",
            shown.join(", "),
            median(&rates),
            median(&medians)
        );
    }
    Ok(())
}
