//! What a hand-out of small frames costs the kernel as one slice per frame against one slice
//! of their copies: `cargo bench -p keepwire-benches --bench writev`.
//!
//! The driver writes a connection's hand-out with one vectored write. The kernel copies a
//! `writev`'s slices in one by one, and each slice costs it a step of its own; the driver
//! therefore copies a hand-out of small frames into one buffer first (`gather` in
//! `adapters/driver/src/driver/conn_io.rs`, frames of at most 1 KiB). This measures where
//! that pays: on a loopback connection drained by another thread, `n` frames of `size` bytes
//! written as `n` slices, and copied side by side and written as one, the two taking turns in
//! the same run. The figure is the writing thread's CPU time (user and system,
//! `RUSAGE_THREAD`) per write, and what joining saved per frame.
//!
//! Arguments (after `--`): `writes=20000 rounds=10`.
#![allow(missing_docs)]
#![allow(unsafe_code)] // getrusage, and nothing else
#![allow(clippy::print_stdout)]

#[path = "support/cpu.rs"]
mod cpu;

use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// (frames per write, bytes per frame)
const CASES: [(usize, usize); 7] = [
    (32, 76),
    (64, 76),
    (32, 256),
    (32, 1024),
    (8, 2048),
    (8, 4096),
    (4, 16 * 1024),
];

fn main() {
    let arg = |key: &str, default: usize| {
        std::env::args()
            .filter_map(|a| a.strip_prefix(&format!("{key}=")).map(str::to_owned))
            .next_back()
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let (writes, rounds) = (arg("writes", 20_000), arg("rounds", 10));
    println!("{rounds} rounds of {writes} writes per case and way, taking turns");
    println!("| frames × bytes | n slices, µs per write | 1 slice of copies | saved per frame |");
    println!("|---|---:|---:|---:|");
    for (n, size) in CASES {
        let (sliced, joined) = measure(n, size, writes, rounds);
        let per = |t: Duration| t.as_secs_f64() * 1e6 / (writes * rounds) as f64;
        let saved =
            (sliced.as_secs_f64() - joined.as_secs_f64()) * 1e9 / (writes * rounds * n) as f64;
        println!(
            "| {n} × {size} | {:.2} | {:.2} | {saved:.0} ns |",
            per(sliced),
            per(joined)
        );
    }
}

/// Total thread CPU of the sliced and the joined writes.
fn measure(n: usize, size: usize, writes: usize, rounds: usize) -> (Duration, Duration) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    client.set_nodelay(true).expect("nodelay");
    let (mut server, _) = listener.accept().expect("accept");
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0; 256 * 1024];
        while server.read(&mut buf).is_ok_and(|read| read > 0) {}
    });
    let frames: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; size]).collect();
    // Built once, as the driver keeps its slices' allocation between writes.
    let slices: Vec<IoSlice<'_>> = frames.iter().map(|f| IoSlice::new(f)).collect();
    let mut joined = Vec::with_capacity(n * size);
    let (mut sliced_cpu, mut joined_cpu) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let start = thread_cpu();
        for _ in 0..writes {
            write_all_vectored(&mut client, &slices);
        }
        sliced_cpu += thread_cpu() - start;
        let start = thread_cpu();
        for _ in 0..writes {
            joined.clear();
            for frame in &frames {
                joined.extend_from_slice(frame);
            }
            write_all_vectored(&mut client, &[IoSlice::new(&joined)]);
        }
        joined_cpu += thread_cpu() - start;
    }
    drop(client);
    drain.join().expect("drain");
    (sliced_cpu, joined_cpu)
}

/// Writes every byte of `slices`, resuming a short write (rare with a thread draining).
fn write_all_vectored(stream: &mut TcpStream, slices: &[IoSlice<'_>]) {
    let total: usize = slices.iter().map(|s| s.len()).sum();
    let written = stream.write_vectored(slices).expect("write");
    if written < total {
        let rest: Vec<u8> = slices
            .iter()
            .flat_map(|s| s.iter().copied())
            .skip(written)
            .collect();
        stream.write_all(&rest).expect("write");
    }
}

/// This thread's user and system time so far.
fn thread_cpu() -> Duration {
    cpu::cpu_time(libc::RUSAGE_THREAD)
}
