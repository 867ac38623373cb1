//! A steady request load through `keepwire_tokio` against one echo server, for throughput and
//! syscall counts: `IN_FLIGHT` tasks send 64-byte requests back to back until `REQUESTS` have
//! been answered, then it prints the count and the elapsed time.
//!
//! ```text
//! cargo build --release -p keepwire-tokio --example load --example echo_server
//! target/release/examples/echo_server 7000 &
//! perf stat -e syscalls:sys_enter_sendto -e syscalls:sys_enter_writev \
//!     -e syscalls:sys_enter_write -- target/release/examples/load 127.0.0.1:7000
//! ```
//!
//! Arguments: `ADDR [REQUESTS (200000)] [IN_FLIGHT (64)]`. The echo server runs in its own
//! process (the `echo_server` example), so a count taken on this one is the client's alone.
//! The client runs on tokio's multi-threaded runtime with its default worker count.

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use keepwire_tokio::{Config, Target};

const PAYLOAD: [u8; 64] = [b'x'; 64];
const TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .ok_or("usage: load ADDR [REQUESTS] [IN_FLIGHT]")?
        .parse()?;
    let requests: usize = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let in_flight: usize = args.next().map_or(Ok(64), |a| a.parse())?;

    let client = keepwire_tokio::client(Config::default())
        .node(addr)
        .build()?;
    let node = client.initial_nodes()[0];
    // One request first, so the connect is not part of the measurement.
    client
        .send(Target::Node(node), &PAYLOAD[..], TIMEOUT)
        .await?;

    let claimed = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (client, claimed) = (client.clone(), Arc::clone(&claimed));
        senders.spawn(async move {
            let mut failed = 0usize;
            while claimed.fetch_add(1, Ordering::Relaxed) < requests {
                let payload = bytes::Bytes::from_static(&PAYLOAD);
                match client.send(Target::Node(node), payload, TIMEOUT).await {
                    Ok(answer) if answer.len() == PAYLOAD.len() => {}
                    _ => failed += 1,
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(task) = senders.join_next().await {
        failed += task?;
    }
    let elapsed = start.elapsed();
    println!(
        "requests {requests}  in flight {in_flight}  failed {failed}  elapsed {:.3} s  {:.0} req/s",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64()
    );
    client.shutdown().await;
    if failed > 0 {
        return Err(format!("{failed} requests failed").into());
    }
    Ok(())
}
