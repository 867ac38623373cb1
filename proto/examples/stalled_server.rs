//! A stalled server, detected by the write timeout and reconnected — narrated on a simulated
//! clock, with no sockets: the sans-IO core alone.
//!
//! The simulated server answers every request until t = 2 s, then stops reading (its process
//! hangs; the path stays up) until t = 4 s. The kernel's send buffer (64 KiB here) fills, the
//! connection stops accepting bytes and goes unwritable, new requests are rejected at once
//! instead of queuing, the write timeout (1 s) closes the connection, the requests on it fail
//! at that instant, and the next request reconnects.
//!
//! `cargo run -p keepwire-proto --example stalled_server`
#![allow(clippy::print_stdout)]

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use keepwire_proto::{Action, Config, Event, Instant, Outcome, Pool, RequestId, Target};

const SEND_BUFFER: usize = 64 * 1024;
const FRAME: usize = 16 * 1024;

fn at(t: Instant) -> String {
    format!("{:>7.3}s", t.as_nanos() as f64 / 1e9)
}

fn main() {
    let mut config = Config::default();
    config.write_timeout = Duration::from_secs(1);
    config.high_watermark = 128 * 1024;
    config.low_watermark = 64 * 1024;
    let mut now = Instant::ZERO;
    let mut pool = Pool::new(config, now).expect("valid config");
    let node = pool.add_node(
        now,
        "127.0.0.1:9092"
            .parse::<std::net::SocketAddr>()
            .expect("address"),
    );
    let stall = Instant::from_secs(2)..Instant::from_secs(4);

    // The simulated world: bytes in the kernel's send buffer and bytes the server has read.
    // Each frame carries its request id in its first 8 bytes, as a codec's correlation id would.
    let mut in_kernel: Vec<u8> = Vec::new();
    let mut received: VecDeque<u8> = VecDeque::new();
    let mut bufs = Vec::new(); // what the pool hands out for one vectored write
    let mut tally = Tally::default();
    let tick = Duration::from_millis(100);
    println!("  time   what happened");
    while now < Instant::from_secs(6) {
        if now == stall.start {
            println!(
                "{}  --- the server stops reading: no FIN, no RST, the socket looks fine ---",
                at(now)
            );
        }
        if now == stall.end {
            println!("{}  --- the server recovers ---", at(now));
        }
        let stalled = stall.contains(&now);
        // The application sends a 16 KiB request every tick, each with a 3 s deadline.
        let mut frame = vec![7u8; FRAME];
        frame[..8].copy_from_slice(&pool.next_request_id().as_u64().to_be_bytes());
        let frame = Bytes::from(frame);
        if let Err(e) = pool.submit(now, Target::Node(node), now + Duration::from_secs(3), frame) {
            tally.rejected += 1;
            println!("{}  submit rejected at once: {e}", at(now));
        }
        // The adapter: connects succeed at once; the kernel takes what fits its buffer.
        while let Some(action) = pool.poll_action() {
            match action {
                Action::Open { conn, .. } => pool.handle_connected(now, conn).expect("current"),
                Action::Close { reason, .. } => {
                    println!("{}  the adapter closes the socket ({reason:?})", at(now));
                    in_kernel.clear();
                    received.clear();
                }
                _ => {}
            }
        }
        if let Some(conn) = pool.current_conn(node) {
            if !stalled {
                received.extend(in_kernel.drain(..)); // a healthy server reads everything
            }
            if in_kernel.len() < SEND_BUFFER {
                let _ = pool.handle_writable(now, conn); // the socket has room again
            }
            while let Some(conn) = pool.poll_transmit(64 * 1024, &mut bufs) {
                let mut n = 0;
                for bytes in &bufs {
                    let take = bytes.len().min(SEND_BUFFER - in_kernel.len());
                    in_kernel.extend_from_slice(&bytes[..take]);
                    n += take;
                }
                pool.handle_written(now, conn, n).expect("handed out");
            }
            if !stalled {
                received.extend(in_kernel.drain(..));
            }
            // The server answers each request it has read in full.
            while received.len() >= FRAME {
                let frame: Vec<u8> = received.drain(..FRAME).collect();
                let id = RequestId::from_u64(u64::from_be_bytes(
                    frame[..8].try_into().expect("8 bytes"),
                ));
                let _ = pool.handle_response(now, conn, id, Bytes::from_static(b"ok"));
            }
        }
        narrate(&mut pool, now, &mut tally);
        // Sleep until the next tick or the pool's next deadline, whichever comes first.
        let next = now + tick;
        while let Some(deadline) = pool.poll_timeout().filter(|&d| d < next) {
            now = deadline;
            pool.handle_timeout(now);
            narrate(&mut pool, now, &mut tally);
        }
        now = next;
        pool.handle_timeout(now);
    }
    let c = pool.counters();
    println!();
    let Tally {
        ok,
        rejected,
        lost,
        late,
    } = tally;
    println!(
        "answered {ok}, rejected at submit {rejected}, lost with the connection {lost}, past deadline {late}"
    );
    println!(
        "write timeouts {}, unwritable rejections {}, connects {} (reconnects {})",
        c.write_timeouts, c.unwritable_rejections, c.connects, c.reconnects
    );
}

#[derive(Default)]
struct Tally {
    ok: u32,
    rejected: u32,
    lost: u32,
    late: u32,
}

/// Prints what the pool reports, as it happens.
fn narrate(pool: &mut Pool, now: Instant, tally: &mut Tally) {
    while let Some(event) = pool.poll_event() {
        match event {
            Event::RequestDone { id, outcome, .. } => match outcome {
                Outcome::Response(_) => tally.ok += 1,
                Outcome::ConnectionLost(reason) => {
                    tally.lost += 1;
                    println!(
                        "{}  {id} failed at once: connection lost ({reason:?})",
                        at(now)
                    );
                }
                Outcome::DeadlineExceeded { phase } => {
                    tally.late += 1;
                    println!("{}  {id} failed: deadline exceeded ({phase:?})", at(now));
                }
                other => println!("{}  {id} ended: {other:?}", at(now)),
            },
            Event::StateChanged {
                from, to, reason, ..
            } => {
                println!("{}  {from:?} -> {to:?} ({reason:?})", at(now));
            }
            Event::Writability {
                writable, pending, ..
            } => {
                let what = if writable {
                    "writable again"
                } else {
                    "UNWRITABLE"
                };
                println!("{}  connection {what} at {pending} pending bytes", at(now));
            }
            _ => {}
        }
    }
}
