//! One request's whole lifecycle in proto — submit, hand-out, write report, response, its
//! `RequestDone` event — against a minimal floor doing the same five steps with none of
//! keepwire's rules (a slab, a FIFO of frames and an event queue), side by side, with 0, 1,000
//! and 100,000 other requests pending. A counting allocator reports allocations per request,
//! and the thread's CPU time per request is printed beside criterion's wall-clock figures.
//!
//! A second group, `pipeline`, runs a client's steady state: a window of 64 or 1,000 requests
//! in flight, each step submitting one and answering the oldest, against a slab-and-FIFO floor.
//! The third, `pipeline_in_order`, is the same for an in-order protocol (PostgreSQL, memcached,
//! Redis): each response is reported with `handle_next_response`, which finds the oldest
//! request itself. The fourth, `routed`, is the lifecycle with the pool choosing the node
//! (`Target::Best`) among 1, 8, 16 or 64 ready nodes, every one of them busy. The fifth,
//! `round`, is a driver's round over 8 or 64 connections: a request submitted to each, then
//! every hand-out and write report, then every response, so each connection's write timer is
//! armed before any is stopped (its figure is per round); `keepwire` submits in node order,
//! `scattered` in a fixed shuffled one.
//!
//! `cargo bench -p keepwire-proto --bench lifecycle -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs)]
#![allow(unsafe_code)] // the counting allocator (support/counting.rs) and the thread's CPU clock below

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keepwire_proto::{Config, ConnId, Event, Instant, NodeId, Pool, RequestId, Target};

#[path = "support/counting.rs"]
mod counting;

const FRAME: &[u8] = b"a 32-byte request frame, say...!";

/// A pool with one ready node and `pending` requests written and awaiting responses (so
/// they sit in the deadline heap and the request table, as in a busy client).
fn busy_pool(pending: usize) -> (Pool, NodeId, ConnId, Instant) {
    let mut config = Config::default();
    config.max_in_flight = u32::MAX;
    config.high_watermark = u64::MAX / 4;
    config.low_watermark = 0;
    config.seed = Some(1);
    let now = Instant::from_secs(1);
    let mut pool = Pool::new(config, now).unwrap();
    let node = ready_node(&mut pool, now, 9000);
    let mut bufs = Vec::new();
    for i in 0..pending {
        let deadline = now + Duration::from_secs(3_600 + (i as u64 * 7_919) % 3_600);
        written(&mut pool, now, node, deadline, &mut bufs);
    }
    while pool.poll_action().is_some() {}
    while pool.poll_event().is_some() {}
    let conn = pool.current_conn(node).unwrap();
    (pool, node, conn, now)
}

/// A node on loopback `port`, connected and ready.
fn ready_node(pool: &mut Pool, now: Instant, port: u16) -> NodeId {
    let node = pool.add_node(now, std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    pool.connect(now, node).unwrap();
    let conn = pool.current_conn(node).unwrap();
    pool.handle_connected(now, conn).unwrap();
    node
}

/// A request to `node`, submitted and written whole (handed out through `bufs`): it awaits
/// its response until `deadline`.
#[inline(always)]
fn written(
    pool: &mut Pool,
    now: Instant,
    node: NodeId,
    deadline: Instant,
    bufs: &mut Vec<Bytes>,
) -> RequestId {
    let id = pool
        .submit(now, Target::Node(node), deadline, Bytes::from_static(FRAME))
        .unwrap();
    let conn = pool.poll_transmit(64 * 1024, bufs).unwrap();
    pool.handle_written(now, conn, FRAME.len()).unwrap();
    id
}

/// The five steps through keepwire, to a named node.
fn keepwire_once(pool: &mut Pool, node: NodeId, now: Instant, bufs: &mut Vec<Bytes>) {
    once(pool, Target::Node(node), now, bufs);
}

/// The five steps with the pool choosing the node. Never inlined: callgrind counts a
/// lifecycle's instructions by this function (`scripts/instructions.sh`).
#[inline(never)]
fn routed_once(pool: &mut Pool, now: Instant, bufs: &mut Vec<Bytes>) {
    once(pool, Target::Best, now, bufs);
}

/// Submit, hand-out, write report, response and its event, for a request to `target`.
#[inline(always)]
fn once(pool: &mut Pool, target: Target, now: Instant, bufs: &mut Vec<Bytes>) {
    let deadline = now + Duration::from_secs(5);
    let id = pool
        .submit(now, target, deadline, Bytes::from_static(FRAME))
        .unwrap();
    let conn = pool.poll_transmit(64 * 1024, bufs).unwrap();
    pool.handle_written(now, conn, FRAME.len()).unwrap();
    pool.handle_response(now, conn, id, Bytes::from_static(b"ok"))
        .unwrap();
    while let Some(event) = pool.poll_event() {
        black_box(matches!(event, Event::RequestDone { .. }));
    }
}

/// A pool of `nodes` ready nodes with nothing pending, and the nodes.
fn ready_pool(nodes: usize) -> (Pool, Vec<NodeId>, Instant) {
    let (mut pool, first, _, now) = busy_pool(0);
    let nodes: Vec<NodeId> = core::iter::once(first)
        .chain((1..nodes).map(|k| ready_node(&mut pool, now, 9000 + k as u16)))
        .collect();
    while pool.poll_action().is_some() {}
    while pool.poll_event().is_some() {}
    (pool, nodes, now)
}

/// A pool of `nodes` ready nodes, node `k` holding `1 + k % 4` requests written and awaiting
/// responses: no node is idle, so a routed request's node is chosen by comparing loads.
fn routed_pool(nodes: usize) -> (Pool, Instant) {
    let (mut pool, nodes, now) = ready_pool(nodes);
    let mut bufs = Vec::new();
    for (k, &node) in nodes.iter().enumerate() {
        for _ in 0..1 + k % 4 {
            written(
                &mut pool,
                now,
                node,
                now + Duration::from_secs(3_600),
                &mut bufs,
            );
        }
    }
    while pool.poll_action().is_some() {}
    while pool.poll_event().is_some() {}
    (pool, now)
}

/// The floor: the same five steps with a slab, a frame FIFO and an event queue, and none of
/// keepwire's rules (no deadlines, watermarks, timers, states or checks).
#[derive(Default)]
struct Floor {
    slots: Vec<Option<(u64, Bytes)>>,
    free: Vec<usize>,
    queue: VecDeque<usize>,
    events: VecDeque<(usize, Bytes)>,
}

impl Floor {
    fn with_pending(pending: usize) -> Self {
        let mut floor = Self::default();
        for i in 0..pending {
            floor
                .slots
                .push(Some((i as u64, Bytes::from_static(FRAME))));
        }
        floor
    }

    fn once(&mut self, deadline: u64) {
        let slot = self.send(deadline);
        self.answer(slot);
    }

    /// Takes a slot for a request and hands its frame out: its slot.
    fn send(&mut self, deadline: u64) -> usize {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some((deadline, Bytes::from_static(FRAME)));
                slot
            }
            None => {
                self.slots.push(Some((deadline, Bytes::from_static(FRAME))));
                self.slots.len() - 1
            }
        };
        self.queue.push_back(slot);
        let sending = self.queue.pop_front().unwrap();
        black_box(self.slots[sending].as_ref().map(|(_, b)| b.len()));
        slot
    }

    /// The response for the request in `slot`: its slot freed, its event delivered.
    fn answer(&mut self, slot: usize) {
        let (_, frame) = self.slots[slot].take().unwrap();
        drop(frame);
        self.free.push(slot);
        self.events.push_back((slot, Bytes::from_static(b"ok")));
        while let Some(event) = self.events.pop_front() {
            black_box(event);
        }
    }
}

/// Rounds of [`cpu_per_request`], and requests per round.
const CPU_ROUNDS: usize = 9;
const CPU_REQUESTS: u32 = 100_000;

/// The thread's CPU time per call of `keepwire` and of `floor`, medians of interleaved rounds:
/// unlike the wall clock that criterion reads, it does not count the time other work on a
/// busy machine holds the CPU.
fn cpu_per_request(mut keepwire: impl FnMut(), mut floor: impl FnMut()) -> (f64, f64) {
    let per = |f: &mut dyn FnMut()| {
        let start = thread_cpu();
        for _ in 0..CPU_REQUESTS {
            f();
        }
        (thread_cpu() - start).as_nanos() as f64 / f64::from(CPU_REQUESTS)
    };
    let (mut k, mut f): (Vec<f64>, Vec<f64>) = (0..CPU_ROUNDS)
        .map(|_| (per(&mut keepwire), per(&mut floor)))
        .unzip();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(&mut k), median(&mut f))
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes the time into the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// `LIFECYCLE_TRACE=N`: runs `N` lifecycles with nothing pending and exits, for a tracer too
/// slow for criterion's runs (`scripts/forwarding.sh`). With `LIFECYCLE_TRACE_IN_ORDER` set,
/// `N` steps of the in-order pipeline with 64 in flight instead.
fn trace_only(requests: usize) -> ! {
    if std::env::var_os("LIFECYCLE_TRACE_IN_ORDER").is_some() {
        let mut pipeline = Pipeline::new(64);
        for _ in 0..requests {
            pipeline.step_in_order();
        }
    } else {
        let (mut pool, node, _, now) = busy_pool(0);
        let mut bufs = Vec::with_capacity(16);
        for _ in 0..requests {
            keepwire_once(&mut pool, node, now, &mut bufs);
        }
    }
    std::process::exit(0)
}

/// Whether to run the case `case` of the kind the environment variable `var` picks, for a
/// profiler: `LIFECYCLE_SIZE=1000` runs that size of each group alone,
/// `LIFECYCLE_VARIANT=scattered` that variant of a group that has several. Unset or empty,
/// every case runs.
fn chosen(var: &str, case: &dyn std::fmt::Display) -> bool {
    let only = std::env::var(var).ok();
    only.filter(|v| !v.is_empty())
        .is_none_or(|only| only == case.to_string())
}

fn lifecycle(c: &mut Criterion) {
    if let Some(requests) = std::env::var("LIFECYCLE_TRACE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        trace_only(requests);
    }
    let mut group = c.benchmark_group("request_lifecycle");
    for pending in [0usize, 1_000, 100_000] {
        if !chosen("LIFECYCLE_SIZE", &pending) {
            continue;
        }
        let (mut pool, node, _, now) = busy_pool(pending);
        let mut bufs = Vec::with_capacity(16);
        keepwire_once(&mut pool, node, now, &mut bufs); // warm the free lists
        let before = counting::allocations();
        for _ in 0..10_000 {
            keepwire_once(&mut pool, node, now, &mut bufs);
        }
        let per_request = (counting::allocations() - before) as f64 / 10_000.0;
        println!("keepwire, {pending} pending: {per_request:.2} allocations per request");
        let mut floor = Floor::with_pending(pending);
        floor.once(0);
        let (keepwire_cpu, floor_cpu) = cpu_per_request(
            || keepwire_once(&mut pool, node, now, &mut bufs),
            || floor.once(black_box(5)),
        );
        println!(
            "keepwire, {pending} pending: {keepwire_cpu:.0} ns of thread CPU time per request, \
             floor {floor_cpu:.0} ns (median of {CPU_ROUNDS} interleaved rounds)"
        );
        group.bench_function(BenchmarkId::new("keepwire", pending), |b| {
            b.iter(|| keepwire_once(&mut pool, node, now, &mut bufs));
        });
        group.bench_function(BenchmarkId::new("floor", pending), |b| {
            b.iter(|| floor.once(black_box(5)));
        });
    }
    group.finish();
}

/// A client's steady state: `window` requests in flight on one connection, each step
/// submitting one more (with the same timeout, a microsecond later than the last) and
/// answering the oldest, as a pipelined client does. Unlike the benchmark above, where every
/// new deadline is the earliest, here each new deadline is the latest and each answered one the
/// earliest: the deadline heap's usual case.
struct Pipeline {
    pool: Pool,
    node: NodeId,
    now: Instant,
    in_flight: VecDeque<RequestId>,
    bufs: Vec<Bytes>,
}

impl Pipeline {
    fn new(window: usize) -> Self {
        let (pool, node, _, now) = busy_pool(0);
        let mut pipeline = Self {
            pool,
            node,
            now,
            in_flight: VecDeque::with_capacity(window + 1),
            bufs: Vec::with_capacity(16),
        };
        for _ in 0..window {
            pipeline.send();
        }
        pipeline
    }

    /// Submits one request and writes it. Inlined into each step, whose calls of
    /// `Pool::submit` `scripts/instructions.sh` counts the steps by.
    #[inline(always)]
    fn send(&mut self) {
        self.now = self.now + Duration::from_micros(1);
        let deadline = self.now + Duration::from_secs(5);
        let id = written(
            &mut self.pool,
            self.now,
            self.node,
            deadline,
            &mut self.bufs,
        );
        self.in_flight.push_back(id);
    }

    /// One step: a new request out, the oldest answered by its id. Never inlined: callgrind
    /// counts a step's instructions by this function (`scripts/instructions.sh`).
    #[inline(never)]
    fn step(&mut self) {
        self.send();
        let oldest = self.in_flight.pop_front().unwrap();
        let conn = self.pool.current_conn(self.node).unwrap();
        self.pool
            .handle_response(self.now, conn, oldest, Bytes::from_static(b"ok"))
            .unwrap();
        self.drain_events();
    }

    /// [`step`](Self::step) for an in-order protocol: the response answers the oldest request
    /// written, which the pool finds itself. Never inlined, as `step`.
    #[inline(never)]
    fn step_in_order(&mut self) {
        self.send();
        let oldest = self.in_flight.pop_front().unwrap();
        let conn = self.pool.current_conn(self.node).unwrap();
        let answered = self
            .pool
            .handle_next_response(self.now, conn, Bytes::from_static(b"ok"));
        assert_eq!(answered, Ok(Some(oldest)));
        self.drain_events();
    }

    #[inline(always)]
    fn drain_events(&mut self) {
        while let Some(event) = self.pool.poll_event() {
            black_box(matches!(event, Event::RequestDone { .. }));
        }
    }
}

/// The floor of a pipelined step: a slab and a FIFO of slots, the oldest answered.
struct PipelineFloor {
    floor: Floor,
    in_flight: VecDeque<usize>,
}

impl PipelineFloor {
    fn new(window: usize) -> Self {
        let mut floor = Self {
            floor: Floor::default(),
            in_flight: VecDeque::with_capacity(window + 1),
        };
        for _ in 0..window {
            floor.send();
        }
        floor
    }

    fn send(&mut self) {
        let slot = self.floor.send(5);
        self.in_flight.push_back(slot);
    }

    fn step(&mut self) {
        self.send();
        let oldest = self.in_flight.pop_front().unwrap();
        self.floor.answer(oldest);
    }
}

fn pipeline(c: &mut Criterion) {
    pipeline_group(c, "pipeline", Pipeline::step);
    pipeline_group(c, "pipeline_in_order", Pipeline::step_in_order);
}

/// One group of pipelined steps: `step` is [`Pipeline::step`] or [`Pipeline::step_in_order`]
/// (a function item, so each group calls its own directly).
fn pipeline_group(c: &mut Criterion, name: &str, step: impl Fn(&mut Pipeline) + Copy) {
    let mut group = c.benchmark_group(name);
    for window in [64usize, 1_000] {
        if !chosen("LIFECYCLE_SIZE", &window) {
            continue;
        }
        let mut keepwire = Pipeline::new(window);
        let mut floor = PipelineFloor::new(window);
        let before = counting::allocations();
        for _ in 0..10_000 {
            step(&mut keepwire);
        }
        let per_request = (counting::allocations() - before) as f64 / 10_000.0;
        println!("{name}, {window} in flight: {per_request:.2} allocations per request");
        let (keepwire_cpu, floor_cpu) = cpu_per_request(|| step(&mut keepwire), || floor.step());
        println!(
            "{name}, {window} in flight: {keepwire_cpu:.0} ns of thread CPU time per request, \
             floor {floor_cpu:.0} ns (median of {CPU_ROUNDS} interleaved rounds)"
        );
        group.bench_function(BenchmarkId::new("keepwire", window), |b| {
            b.iter(|| step(&mut keepwire));
        });
        group.bench_function(BenchmarkId::new("floor", window), |b| {
            b.iter(|| floor.step());
        });
    }
    group.finish();
}

fn routed(c: &mut Criterion) {
    let mut group = c.benchmark_group("routed");
    for nodes in [1usize, 8, 16, 64] {
        if !chosen("LIFECYCLE_SIZE", &nodes) {
            continue;
        }
        let (mut pool, now) = routed_pool(nodes);
        let mut bufs = Vec::with_capacity(16);
        routed_once(&mut pool, now, &mut bufs); // warm the free lists
        let before = counting::allocations();
        for _ in 0..10_000 {
            routed_once(&mut pool, now, &mut bufs);
        }
        let per_request = (counting::allocations() - before) as f64 / 10_000.0;
        println!("routed, {nodes} nodes: {per_request:.2} allocations per request");
        let mut floor = Floor::with_pending(0);
        floor.once(0);
        let (keepwire_cpu, floor_cpu) = cpu_per_request(
            || routed_once(&mut pool, now, &mut bufs),
            || floor.once(black_box(5)),
        );
        println!(
            "routed, {nodes} nodes: {keepwire_cpu:.0} ns of thread CPU time per request, \
             floor {floor_cpu:.0} ns (median of {CPU_ROUNDS} interleaved rounds)"
        );
        group.bench_function(BenchmarkId::new("keepwire", nodes), |b| {
            b.iter(|| routed_once(&mut pool, now, &mut bufs));
        });
    }
    group.finish();
}

/// One request to each of `conns` (each node's ready connection), all submitted before any
/// is handed out, then every hand-out and write report, then every response and the events: a
/// driver's round over several busy connections. Never inlined: callgrind counts it by this
/// function.
#[inline(never)]
fn round_once(
    pool: &mut Pool,
    conns: &[(NodeId, ConnId)],
    now: Instant,
    bufs: &mut Vec<Bytes>,
    ids: &mut Vec<RequestId>,
) {
    let deadline = now + Duration::from_secs(5);
    ids.clear();
    for &(node, _) in conns {
        let id = pool
            .submit(now, Target::Node(node), deadline, Bytes::from_static(FRAME))
            .unwrap();
        ids.push(id);
    }
    // The connections come out in the order their first frames were queued.
    for &(_, conn) in conns {
        assert_eq!(pool.poll_transmit(64 * 1024, bufs), Some(conn));
    }
    for &(_, conn) in conns {
        pool.handle_written(now, conn, FRAME.len()).unwrap();
    }
    for (&(_, conn), &id) in conns.iter().zip(ids.iter()) {
        pool.handle_response(now, conn, id, Bytes::from_static(b"ok"))
            .unwrap();
    }
    while let Some(event) = pool.poll_event() {
        black_box(matches!(event, Event::RequestDone { .. }));
    }
}

fn round(c: &mut Criterion) {
    let mut group = c.benchmark_group("round");
    // `scattered`: as a router that picks connections by load submits, so the write timers of
    // one instant are armed out of node order.
    for connections in [8usize, 64] {
        if !chosen("LIFECYCLE_SIZE", &connections) {
            continue;
        }
        for (name, shuffled) in [("keepwire", false), ("scattered", true)] {
            if !chosen("LIFECYCLE_VARIANT", &name) {
                continue;
            }
            let (mut pool, nodes, now) = ready_pool(connections);
            let mut conns: Vec<(NodeId, ConnId)> = nodes
                .iter()
                .map(|&node| (node, pool.current_conn(node).unwrap()))
                .collect();
            if shuffled {
                shuffle(&mut conns);
            }
            let (mut bufs, mut ids) = (Vec::with_capacity(16), Vec::with_capacity(connections));
            round_once(&mut pool, &conns, now, &mut bufs, &mut ids); // warm the free lists
            let before = counting::allocations();
            for _ in 0..1_000 {
                round_once(&mut pool, &conns, now, &mut bufs, &mut ids);
            }
            let per_request =
                (counting::allocations() - before) as f64 / (1_000 * connections) as f64;
            println!(
                "round, {name}, {connections} connections: {per_request:.2} allocations per request"
            );
            group.bench_function(BenchmarkId::new(name, connections), |b| {
                b.iter(|| round_once(&mut pool, &conns, now, &mut bufs, &mut ids));
            });
        }
    }
    group.finish();
}

/// Shuffles `items` into the same order every run (Fisher-Yates over a fixed xorshift).
fn shuffle<T>(items: &mut [T]) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

criterion_group!(benches, lifecycle, pipeline, routed, round);
criterion_main!(benches);
