//! The deadline index against a linear scan, side by side: finding the next deadline with 1 k
//! to 100 k requests pending, and the cost of one request's submit, timer check and cancel as
//! the number of other pending requests grows.
//!
//! `cargo bench -p keepwire-proto --bench deadlines`
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keepwire_proto::{Config, Instant, Pool, Target};

/// A pool with one ready node and `pending` queued requests with scrambled deadlines.
fn loaded_pool(
    pending: u64,
) -> (
    Pool,
    keepwire_proto::NodeId,
    keepwire_proto::ConnId,
    Vec<Instant>,
) {
    let mut config = Config::default();
    config.max_in_flight = u32::MAX;
    config.write_timeout = Duration::ZERO;
    config.high_watermark = u64::MAX / 2;
    let now = Instant::ZERO;
    let mut pool = Pool::new(config, now).unwrap();
    let node = pool.add_node(
        now,
        "127.0.0.1:9000".parse::<std::net::SocketAddr>().unwrap(),
    );
    pool.connect(now, node).unwrap();
    let conn = pool.current_conn(node).unwrap();
    pool.handle_connected(now, conn).unwrap();
    let mut deadlines = Vec::with_capacity(pending as usize);
    for i in 0..pending {
        let deadline = now + Duration::from_millis(10_000 + (i * 7_919) % 1_000_000);
        pool.submit(now, Target::Node(node), deadline, Bytes::from_static(b"x"))
            .unwrap();
        deadlines.push(deadline);
    }
    while pool.poll_action().is_some() {}
    while pool.poll_event().is_some() {}
    (pool, node, conn, deadlines)
}

fn next_deadline(c: &mut Criterion) {
    let mut group = c.benchmark_group("next_deadline");
    for pending in [1_000u64, 10_000, 100_000] {
        let (pool, _, _, deadlines) = loaded_pool(pending);
        group.bench_with_input(
            BenchmarkId::new("pool_poll_timeout", pending),
            &pool,
            |b, pool| {
                b.iter(|| black_box(pool.poll_timeout()));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("baseline_linear_scan", pending),
            &deadlines,
            |b, d| {
                b.iter(|| black_box(d.iter().min().copied()));
            },
        );
    }
    group.finish();
}

fn request_lifecycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_lifecycle");
    for pending in [0u64, 1_000, 100_000] {
        let (mut pool, node, _, _) = loaded_pool(pending);
        let now = Instant::ZERO + Duration::from_millis(1);
        group.bench_function(
            BenchmarkId::new("submit_timeout_check_cancel", pending),
            |b| {
                b.iter(|| {
                    let id = pool
                        .submit(
                            now,
                            Target::Node(node),
                            now + Duration::from_secs(5),
                            Bytes::from_static(b"ping"),
                        )
                        .unwrap();
                    pool.handle_timeout(now);
                    black_box(pool.poll_timeout());
                    pool.cancel(now, id).unwrap();
                    while pool.poll_event().is_some() {}
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, next_deadline, request_lifecycle);
criterion_main!(benches);
