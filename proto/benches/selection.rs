//! Node selection through the index against the linear scan of the same rule, side by side,
//! over busy pools of 100 to 10,000 ready nodes (every node with 1–8 requests in flight, so
//! the scan cannot stop at an idle one).
//!
//! `cargo bench -p keepwire-proto --bench selection -- --warm-up-time 1 --measurement-time 3`
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use keepwire_proto::{Config, Instant, Pool, Target};

fn busy_pool(nodes: usize) -> (Pool, Instant) {
    let mut config = Config::default();
    config.seed = Some(7);
    let now = Instant::from_secs(1);
    let mut pool = Pool::new(config, now).unwrap();
    for i in 0..nodes {
        let port = 10_000 + (i % 50_000) as u16;
        let node = pool.add_node(now, std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        pool.connect(now, node).unwrap();
        let conn = pool.current_conn(node).unwrap();
        pool.handle_connected(now, conn).unwrap();
        for _ in 0..1 + (i * 7_919) % 8 {
            let frame = Bytes::from_static(b"x");
            let deadline = now + Duration::from_secs(60);
            pool.submit(now, Target::Node(node), deadline, frame)
                .unwrap();
        }
    }
    while pool.poll_action().is_some() {}
    while pool.poll_event().is_some() {}
    (pool, now)
}

fn selection(c: &mut Criterion) {
    let mut group = c.benchmark_group("select");
    for nodes in [100usize, 1_000, 10_000] {
        let (mut pool, now) = busy_pool(nodes);
        group.bench_function(BenchmarkId::new("index", nodes), |b| {
            b.iter(|| black_box(pool.select(now)));
        });
        group.bench_function(BenchmarkId::new("baseline_linear_scan", nodes), |b| {
            b.iter(|| black_box(pool.select_by_scan(now)));
        });
    }
    group.finish();
}

criterion_group!(benches, selection);
criterion_main!(benches);
