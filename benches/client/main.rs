//! keepwire's `Client::send` side by side with the hand-written clients it replaces, in the
//! same run: `cargo bench -p keepwire-benches --bench client`.
//!
//! This package builds keepwire as a user who adds `keepwire-tokio` and `keepwire-smol` gets
//! it: their default features (tracing on; metrics, tower and TLS off), not the test suite's
//! union of every feature. The metrics feature's own cost is measured apart (BENCHMARKS.md).
//!
//! - **A**: keepwire (`keepwire_tokio::client`, or `keepwire_smol::client` on smol), requests
//!   pinned to the one node with a 10 s timeout each.
//! - **B**: the usual hand-written pipelined client: callers hand (payload, oneshot) to a
//!   writer task that frames whatever is queued into one buffer and writes it, and passes the
//!   (id, oneshot) pairs to a reader task that owns the map of pending replies, cuts answers
//!   and fills them. No timeouts. On smol the same on smol's tasks and `Async` socket (the
//!   hand-offs stay tokio's `sync` channels, which need no tokio runtime).
//! - **C**: B with a timeout on every call (`tokio::time::timeout`; on smol, smol's `Timer`
//!   raced against the answer) and the pending map in an `Arc<Mutex<HashMap>>` that callers
//!   fill themselves.
//!
//! All speak keepwire's built-in `LengthPrefixed` framing to one echo server on plain std
//! threads with fixed buffers, so it allocates nothing per request and the counting global
//! allocator below counts the clients alone. Cells: tokio current_thread (`ct`), tokio
//! multi-thread (`mt`, one worker per core), smol (global executor); 64 B and 16 KiB
//! payloads; 1 and 64 callers in flight. Each run warms up, then `IN_FLIGHT` callers send back
//! to back for a fixed time; per cell the clients take turns (rotating who goes first) for
//! every round, and the table gives medians over rounds: throughput, allocations per request,
//! the process's CPU time per request (the echo server's included, the same for every client;
//! steadier than throughput on a busy machine), p50 latency (1 in flight) and the median of
//! the per-round ratios (to three decimals, so that a bar of ×1.00 can tell ×0.996 from it).
//!
//! `idle=N` (0 unless given) opens N more connections per client, each to an echo server of
//! its own, answers one request on each and leaves them idle beside the busy one while the
//! callers run: what a client with many nodes, few of them busy, pays for the quiet ones.
//!
//! `latency=1` adds a table of the 1-in-flight cells' round trips per client (mean, p10, p50,
//! p90, p99; medians over rounds): whether a gap in the rate is a shift of every request or a
//! tail of slow ones. Its next columns split the round trips at `split=` microseconds (20
//! unless given): the share under it, and the median of each side. On a machine whose idle
//! vCPUs halt a round trip takes one of two times, set by whether the client's thread and the
//! echo server's shared a vCPU (BENCHMARKS.md, "Two round-trip times at one in flight, and
//! what sets each"): the share is mostly the run's draw (a client whose thread is busier
//! per round trip leans to a smaller one), and the median under the split is the client's
//! own speed. The last column counts the rounds in which A's share was below and
//! above each other client's.
//!
//! Arguments (after `--`) pick a part: `rt=ct,mt,smol size=64,16384 inflight=1,64
//! clients=A,B,C rounds=5 ms=400 idle=0 latency=0 split=20`. The same keys are read from
//! `KEEPWIRE_BENCH_<KEY>` (e.g. `KEEPWIRE_BENCH_ROUNDS=9`).
#![allow(missing_docs)]
#![allow(unsafe_code)] // the counting allocator and getrusage (the two support modules), and nothing else
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keepwire_driver::LengthPrefixed;
use keepwire_tokio::{Config, Target};

#[path = "../../proto/benches/support/counting.rs"]
mod counting;
#[path = "../support/cpu.rs"]
mod cpu;

mod echo;
mod hand;
mod hand_smol;
mod hand_tokio;

use echo::start_echo_server;

const TIMEOUT: Duration = Duration::from_secs(10);
const WARM_UP: Duration = Duration::from_millis(50);
/// The hand-written clients' read and batch size, as keepwire's driver uses.
const CHUNK: usize = 64 * 1024;
static PAYLOAD: [u8; 16 * 1024] = [b'x'; 16 * 1024];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    CurrentThread,
    MultiThread,
    Smol,
}

impl Flavour {
    fn name(self) -> &'static str {
        match self {
            Self::CurrentThread => "tokio current_thread",
            Self::MultiThread => "tokio multi-thread",
            Self::Smol => "smol",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// keepwire.
    A,
    /// Hand-written, no timeouts.
    B,
    /// Hand-written with a timeout per call and a shared, locked map.
    C,
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    flavour: Flavour,
    payload: usize,
    in_flight: usize,
    /// Where the latency table splits the round trips in two.
    split: Duration,
}

/// What one run of one client measured.
#[derive(Clone, Copy, Debug)]
struct Run {
    rate: f64,
    allocations: f64,
    /// The process's CPU time per request (the echo server's share is the same for every
    /// client): less sensitive than the rate to other work on the machine.
    cpu: Duration,
    /// At 1 in flight: where one request's round trip falls.
    latency: Option<Latency>,
}

/// One run's round trips at 1 in flight: the latency table's columns.
#[derive(Clone, Copy, Debug)]
struct Latency {
    mean: Duration,
    p10: Duration,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    /// The share of round trips under the cell's split.
    under: f64,
    /// The median of those under the split, and of the rest (`None` for a side with none).
    under_median: Option<Duration>,
    over_median: Option<Duration>,
}

impl Latency {
    /// Of nanoseconds, sorted.
    fn of(sorted: &[u64], split: Duration) -> Option<Self> {
        let total: u64 = sorted.iter().sum();
        let mean = total.checked_div(sorted.len() as u64)?;
        let at = |percent: usize| Duration::from_nanos(sorted[sorted.len() * percent / 100]);
        let split = u64::try_from(split.as_nanos()).unwrap_or(u64::MAX);
        let (under, over) = sorted.split_at(sorted.partition_point(|&l| l < split));
        let median = |side: &[u64]| side.get(side.len() / 2).map(|&l| Duration::from_nanos(l));
        Some(Self {
            mean: Duration::from_nanos(mean),
            p10: at(10),
            p50: at(50),
            p90: at(90),
            p99: at(99),
            under: under.len() as f64 / sorted.len() as f64,
            under_median: median(under),
            over_median: median(over),
        })
    }

    /// The units of [`columns`](Self::columns), in the same order.
    const UNITS: [&'static str; 8] = [" µs", " µs", " µs", " µs", " µs", "%", " µs", " µs"];

    /// The columns, in the table's order: microseconds, but for the share under the split, a
    /// percentage (`None` for a side with no round trip).
    fn columns(&self) -> [Option<f64>; 8] {
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        [
            Some(micros(self.mean)),
            Some(micros(self.p10)),
            Some(micros(self.p50)),
            Some(micros(self.p90)),
            Some(micros(self.p99)),
            Some(self.under * 100.0),
            self.under_median.map(micros),
            self.over_median.map(micros),
        ]
    }
}

struct Options {
    flavours: Vec<Flavour>,
    sizes: Vec<usize>,
    in_flight: Vec<usize>,
    kinds: Vec<Kind>,
    rounds: usize,
    phase: Duration,
    idle: usize,
    /// `latency=1`: a second table of the 1-in-flight cells' round trips.
    latency: bool,
    /// `split=`: where that table splits them.
    split: Duration,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    let addr = start_echo_server()?;
    let idle = (0..options.idle)
        .map(|_| start_echo_server())
        .collect::<io::Result<Vec<_>>>()?;
    let idle = &idle[..];
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let multi = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "echo server on {addr}; {} idle connections per client; {} rounds of {} ms per client \
         and cell; load average {}",
        idle.len(),
        options.rounds,
        options.phase.as_millis(),
        load_average()
    );
    let mut lines = Vec::new();
    let mut latency_lines = Vec::new();
    for &flavour in &options.flavours {
        for &payload in &options.sizes {
            for &in_flight in &options.in_flight {
                let cell = Cell {
                    flavour,
                    payload,
                    in_flight,
                    split: options.split,
                };
                let kinds = &options.kinds;
                let mut runs: Vec<Vec<Run>> = vec![Vec::new(); kinds.len()];
                for round in 0..options.rounds {
                    for turn in 0..kinds.len() {
                        let i = (turn + round) % kinds.len();
                        let run = match flavour {
                            Flavour::CurrentThread => current.block_on(tokio_run(
                                kinds[i],
                                addr,
                                idle,
                                cell,
                                options.phase,
                            )),
                            Flavour::MultiThread => {
                                multi.block_on(tokio_run(kinds[i], addr, idle, cell, options.phase))
                            }
                            Flavour::Smol => {
                                smol::block_on(smol_run(kinds[i], addr, idle, cell, options.phase))
                            }
                        }?;
                        runs[i].push(run);
                    }
                    eprint!(".");
                }
                let line = summary(cell, kinds, &runs);
                eprintln!("\n{line}");
                lines.push(line);
                if options.latency && in_flight == 1 {
                    latency_lines.extend(latency_summary(cell, kinds, &runs));
                }
            }
        }
    }
    println!("load average after the run {}", load_average());
    println!(
        "| runtime | payload | in flight | A req/s | B req/s | C req/s | A / B | A / C | allocations per request A / B / C | CPU µs per request A / B / C | p50 A / B / C |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for line in lines {
        println!("{line}");
    }
    if !latency_lines.is_empty() {
        println!();
        let split = options.split.as_micros();
        println!(
            "| runtime | payload | client | mean | p10 | p50 | p90 | p99 | under {split} µs | median under | median over | rounds with A's share below / above |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for line in latency_lines {
            println!("{line}");
        }
    }
    Ok(())
}

/// Rows of the latency table for a 1-in-flight cell, one per client: medians over rounds, and
/// in how many rounds A's share under the split was below and above this client's (a share
/// moves so much from round to round that only a count over many rounds tells a client that
/// gets fewer fast round trips from one that drew worse rounds).
fn latency_summary(cell: Cell, kinds: &[Kind], runs: &[Vec<Run>]) -> Vec<String> {
    let share = |run: &Run| run.latency.map(|l| l.under);
    let a = kinds.iter().position(|k| *k == Kind::A).map(|i| &runs[i]);
    kinds
        .iter()
        .zip(runs)
        .map(|(kind, runs)| {
            let against_a = match a {
                Some(a) if *kind != Kind::A => {
                    let pairs = a
                        .iter()
                        .zip(runs)
                        .filter_map(|(a, r)| share(a).zip(share(r)));
                    let (below, above) = pairs.fold((0, 0), |(below, above), (a, r)| {
                        (below + usize::from(a < r), above + usize::from(a > r))
                    });
                    format!(" {below} / {above} |")
                }
                _ => " — |".to_owned(),
            };
            // Each run's columns, worked out once; then each column's median over the runs.
            let rows: Vec<_> = runs
                .iter()
                .filter_map(|r| r.latency.as_ref().map(Latency::columns))
                .collect();
            let cells = Latency::UNITS.iter().enumerate().map(|(column, unit)| {
                let mut values: Vec<f64> = rows.iter().filter_map(|row| row[column]).collect();
                if values.is_empty() {
                    " — |".to_owned()
                } else {
                    format!(" {:.2}{unit} |", median_of(&mut values))
                }
            });
            format!(
                "| {} | {} | {kind:?} |{}{against_a}",
                cell.flavour.name(),
                size_name(cell.payload),
                cells.collect::<String>()
            )
        })
        .collect()
}

fn size_name(payload: usize) -> String {
    if payload >= 1024 {
        format!("{} KiB", payload / 1024)
    } else {
        format!("{payload} B")
    }
}

/// One table row: medians over rounds, ratios as the median of per-round ratios.
fn summary(cell: Cell, kinds: &[Kind], runs: &[Vec<Run>]) -> String {
    let of = |kind: Kind| kinds.iter().position(|k| *k == kind).map(|i| &runs[i]);
    let rate = |kind| {
        of(kind).map_or("—".to_owned(), |r| {
            format!("{:.0}", median(r, |r| r.rate))
        })
    };
    let allocations = |kind| {
        of(kind).map_or("—".to_owned(), |r| {
            format!("{:.2}", median(r, |r| r.allocations))
        })
    };
    let p50 = |kind| {
        of(kind)
            .filter(|_| cell.in_flight == 1)
            .map_or("—".to_owned(), |r| {
                format!(
                    "{:.1} µs",
                    median(r, |r| {
                        r.latency.map_or(0.0, |l| l.p50.as_secs_f64() * 1e6)
                    })
                )
            })
    };
    let cpu = |kind| {
        of(kind).map_or("—".to_owned(), |r| {
            format!("{:.2}", median(r, |r| r.cpu.as_secs_f64() * 1e6))
        })
    };
    let ratio = |other| match (of(Kind::A), of(other)) {
        (Some(a), Some(o)) => {
            let mut ratios: Vec<f64> = a.iter().zip(o).map(|(a, o)| a.rate / o.rate).collect();
            format!("×{:.3}", median_of(&mut ratios))
        }
        _ => "—".to_owned(),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {} / {} / {} |",
        cell.flavour.name(),
        size_name(cell.payload),
        cell.in_flight,
        rate(Kind::A),
        rate(Kind::B),
        rate(Kind::C),
        ratio(Kind::B),
        ratio(Kind::C),
        allocations(Kind::A),
        allocations(Kind::B),
        allocations(Kind::C),
        cpu(Kind::A),
        cpu(Kind::B),
        cpu(Kind::C),
        p50(Kind::A),
        p50(Kind::B),
        p50(Kind::C),
    )
}

fn median(runs: &[Run], figure: impl Fn(&Run) -> f64) -> f64 {
    let mut values: Vec<f64> = runs.iter().map(figure).collect();
    median_of(&mut values)
}

fn median_of(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn options() -> Result<Options, String> {
    let mut given: HashMap<String, String> = HashMap::new();
    for key in [
        "rt", "size", "inflight", "clients", "rounds", "ms", "idle", "latency", "split",
    ] {
        if let Ok(value) = std::env::var(format!("KEEPWIRE_BENCH_{}", key.to_uppercase())) {
            given.insert(key.to_owned(), value);
        }
    }
    // `cargo bench` passes `--bench`; a plain harness ignores flags.
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with("--")) {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("expected KEY=VALUE, got {arg:?}"))?;
        given.insert(key.to_owned(), value.to_owned());
    }
    let list = |key: &str, default: &str| -> Vec<String> {
        given
            .get(key)
            .map_or(default, String::as_str)
            .split(',')
            .map(str::to_owned)
            .collect()
    };
    let number = |s: &str| s.parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
    let flavours = list("rt", "ct,mt,smol")
        .iter()
        .map(|f| match f.as_str() {
            "ct" => Ok(Flavour::CurrentThread),
            "mt" => Ok(Flavour::MultiThread),
            "smol" => Ok(Flavour::Smol),
            other => Err(format!("unknown runtime {other:?} (ct, mt, smol)")),
        })
        .collect::<Result<_, _>>()?;
    let kinds = list("clients", "A,B,C")
        .iter()
        .map(|k| match k.as_str() {
            "A" | "a" => Ok(Kind::A),
            "B" | "b" => Ok(Kind::B),
            "C" | "c" => Ok(Kind::C),
            other => Err(format!("unknown client {other:?} (A, B, C)")),
        })
        .collect::<Result<_, _>>()?;
    let sizes: Vec<usize> = list("size", "64,16384")
        .iter()
        .map(|s| number(s))
        .collect::<Result<_, _>>()?;
    if let Some(too_long) = sizes.iter().find(|s| **s > PAYLOAD.len()) {
        return Err(format!("payload {too_long} is over {}", PAYLOAD.len()));
    }
    Ok(Options {
        flavours,
        sizes,
        in_flight: list("inflight", "1,64")
            .iter()
            .map(|s| number(s))
            .collect::<Result<_, _>>()?,
        kinds,
        rounds: number(&list("rounds", "5")[0])?.max(1),
        phase: Duration::from_millis(number(&list("ms", "400")[0])? as u64),
        idle: number(&list("idle", "0")[0])?,
        latency: number(&list("latency", "0")[0])? != 0,
        split: Duration::from_micros(number(&list("split", "20")[0])? as u64),
    })
}

// ---- the load ----

/// A client as the callers use it.
trait Caller: Clone + Send + Sync + 'static {
    /// Sends `payload`, returns the answer (`None` on any failure).
    fn call(&self, payload: Bytes) -> impl Future<Output = Option<Bytes>> + Send + '_;
}

/// Where the callers run.
trait Exec {
    fn spawn<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Pin<Box<dyn Future<Output = T> + Send>>;
}

struct Tokio;

impl Exec for Tokio {
    fn spawn<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Pin<Box<dyn Future<Output = T> + Send>> {
        let handle = tokio::spawn(task);
        Box::pin(async move { handle.await.expect("a caller panicked") })
    }
}

struct Smol;

impl Exec for Smol {
    fn spawn<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Pin<Box<dyn Future<Output = T> + Send>> {
        Box::pin(smol::spawn(task))
    }
}

/// One caller's count.
struct Tally {
    done: u64,
    failed: u64,
    /// Nanoseconds per request, when recorded (kept within its first allocation).
    latencies: Vec<u64>,
}

/// Warms up, then runs `cell.in_flight` callers back to back for `phase`.
async fn measure(caller: &impl Caller, exec: &impl Exec, cell: Cell, phase: Duration) -> Run {
    let payload = Bytes::from_static(&PAYLOAD[..cell.payload]);
    load(caller, exec, cell, &payload, WARM_UP, false).await;
    let before = counting::allocations();
    let cpu_before = process_cpu();
    let start = Instant::now();
    let tallies = load(caller, exec, cell, &payload, phase, cell.in_flight == 1).await;
    let elapsed = start.elapsed();
    let cpu = process_cpu().saturating_sub(cpu_before);
    let allocations = counting::allocations() - before;
    let done: u64 = tallies.iter().map(|t| t.done).sum();
    let failed: u64 = tallies.iter().map(|t| t.failed).sum();
    assert_eq!(failed, 0, "{cell:?}: {failed} requests failed");
    let mut latencies: Vec<u64> = tallies.into_iter().flat_map(|t| t.latencies).collect();
    latencies.sort_unstable();
    Run {
        rate: done as f64 / elapsed.as_secs_f64(),
        allocations: allocations as f64 / done.max(1) as f64,
        cpu: cpu / u32::try_from(done.max(1)).unwrap_or(u32::MAX),
        latency: Latency::of(&latencies, cell.split),
    }
}

/// User and system time of the whole process so far.
fn process_cpu() -> Duration {
    cpu::cpu_time(libc::RUSAGE_SELF)
}

async fn load(
    caller: &impl Caller,
    exec: &impl Exec,
    cell: Cell,
    payload: &Bytes,
    phase: Duration,
    record: bool,
) -> Vec<Tally> {
    let end = Instant::now() + phase;
    let tasks: Vec<_> = (0..cell.in_flight)
        .map(|_| {
            let (caller, payload) = (caller.clone(), payload.clone());
            exec.spawn(async move {
                let mut tally = Tally {
                    done: 0,
                    failed: 0,
                    latencies: Vec::with_capacity(if record { 1 << 20 } else { 0 }),
                };
                loop {
                    let began = Instant::now();
                    if began >= end {
                        return tally;
                    }
                    match caller.call(payload.clone()).await {
                        Some(answer) if answer.len() == payload.len() => tally.done += 1,
                        _ => tally.failed += 1,
                    }
                    if tally.latencies.len() < tally.latencies.capacity() {
                        tally.latencies.push(began.elapsed().as_nanos() as u64);
                    }
                }
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        tallies.push(task.await);
    }
    tallies
}

// ---- the clients ----

async fn tokio_run(
    kind: Kind,
    addr: SocketAddr,
    idle: &[SocketAddr],
    cell: Cell,
    phase: Duration,
) -> Result<Run, Box<dyn std::error::Error>> {
    Ok(match kind {
        Kind::A => {
            let builder = keepwire_tokio::client(Config::default());
            keepwire_run(builder, addr, idle, &Tokio, cell, phase).await?
        }
        Kind::B => hand_run(hand_tokio::connect, addr, idle, &Tokio, cell, phase).await?,
        Kind::C => {
            let connect = hand_tokio::connect_with_timeouts;
            hand_run(connect, addr, idle, &Tokio, cell, phase).await?
        }
    })
}

async fn smol_run(
    kind: Kind,
    addr: SocketAddr,
    idle: &[SocketAddr],
    cell: Cell,
    phase: Duration,
) -> Result<Run, Box<dyn std::error::Error>> {
    Ok(match kind {
        Kind::A => {
            let builder = keepwire_smol::client(Config::default());
            keepwire_run(builder, addr, idle, &Smol, cell, phase).await?
        }
        Kind::B => hand_run(hand_smol::connect, addr, idle, &Smol, cell, phase).await?,
        Kind::C => {
            let connect = hand_smol::connect_with_timeouts;
            hand_run(connect, addr, idle, &Smol, cell, phase).await?
        }
    })
}

/// A, built on its runtime's `builder` with `addr` and the idle servers as its nodes: every
/// node's connection opened (the idle ones answered once), the first measured, then the client
/// shut down.
async fn keepwire_run<R: keepwire_driver::Runtime>(
    builder: keepwire_driver::BoundClientBuilder<R>,
    addr: SocketAddr,
    idle: &[SocketAddr],
    exec: &impl Exec,
    cell: Cell,
    phase: Duration,
) -> Result<Run, Box<dyn std::error::Error>> {
    let client = builder.node(addr).nodes(idle.iter().copied()).build()?;
    let caller = Keepwire::new(client.clone());
    caller.open_idle().await?;
    let run = measure(&caller, exec, cell, phase).await;
    client.shutdown().await;
    Ok(run)
}

/// B or C: a connection to `addr` and one to each idle server (answered once), the first
/// measured, then every one closed (its callers' handle dropped, then its tasks finished).
async fn hand_run<C: Caller, T: hand::Finish, F: Future<Output = io::Result<(C, T)>>>(
    connect: impl Fn(SocketAddr) -> F,
    addr: SocketAddr,
    idle: &[SocketAddr],
    exec: &impl Exec,
    cell: Cell,
    phase: Duration,
) -> io::Result<Run> {
    let busy = connect(addr).await?;
    let mut quiet = Vec::new();
    for &addr in idle {
        quiet.push(open_idle(connect(addr).await?).await?);
    }
    let run = measure(&busy.0, exec, cell, phase).await;
    for (caller, tasks) in std::iter::once(busy).chain(quiet) {
        drop(caller);
        tasks.finish().await;
    }
    Ok(run)
}

/// A: keepwire's `Client::send`, pinned to the one node.
#[derive(Clone)]
struct Keepwire {
    client: keepwire_driver::Client,
    target: Target,
}

impl Keepwire {
    fn new(client: keepwire_driver::Client) -> Self {
        let target = Target::Node(client.initial_nodes()[0]);
        Self { client, target }
    }

    /// One request to each node but the first, so that each has its connection open.
    async fn open_idle(&self) -> Result<(), keepwire_driver::SendError> {
        for &node in &self.client.initial_nodes()[1..] {
            let payload = Bytes::from_static(&PAYLOAD[..8]);
            self.client
                .send(Target::Node(node), payload, TIMEOUT)
                .await?;
        }
        Ok(())
    }
}

/// A hand-written client's connection, open, answered once, to stay idle.
async fn open_idle<C: Caller, T>(client: (C, T)) -> io::Result<(C, T)> {
    match client.0.call(Bytes::from_static(&PAYLOAD[..8])).await {
        Some(_) => Ok(client),
        None => Err(io::Error::other(
            "an idle connection's first request failed",
        )),
    }
}

impl Caller for Keepwire {
    async fn call(&self, payload: Bytes) -> Option<Bytes> {
        self.client.send(self.target, payload, TIMEOUT).await.ok()
    }
}
