//! Heartbeats, on every runtime: an idle connection gets its codec's ping and stays open while
//! the pings are answered (the built-in codec against an echoing peer; memcached's `version`
//! and PostgreSQL's empty query against the real servers, in order, between requests); a
//! server that hangs while its kernel lives (a stalled peer, a SIGSTOPped memcached) behind
//! an idle connection is found by the heartbeat within `interval + timeout`, before any
//! request pays for it, where a client without heartbeats only finds out at a request's
//! deadline.
//!
//! Every request a test sends ends exactly once. Every line `heartbeat window:` on stdout
//! (with `--nocapture`) is one measurement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keepwire_driver::{Client, ClientBuilder, Events, NodeId, Runtime, SendError, Target};
use keepwire_proto::Phase;
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::pg::{query, value};
use keepwire_tests::protocols::memcached::{self, Memcached, Reply};
use keepwire_tests::protocols::postgres::{Postgres, Startup};
use keepwire_tests::servers::{MemcachedServer, PostgresServer, Shared, Signal};
use keepwire_tests::{
    Ledger, bounded, heartbeat_timed_out, runtime_name, sleep, test_config, test_on_every_runtime,
};

/// Prints one measurement and asserts `low <= took < high`.
fn window(what: &str, on: &str, took: Duration, low: Duration, high: Duration) {
    println!("heartbeat window: {what} on {on}: {took:?} (asserted [{low:?}, {high:?}))");
    assert!(
        took >= low && took < high,
        "{what} on {on}: {took:?} outside [{low:?}, {high:?})"
    );
}

fn with_heartbeat(
    runtime: &Arc<dyn Runtime>,
    builder: ClientBuilder,
    interval: Duration,
    timeout: Duration,
) -> (Client, NodeId, Events) {
    let client = builder
        .heartbeat(interval, timeout)
        .build(Arc::clone(runtime))
        .unwrap();
    let events = client.subscribe();
    let node = client.initial_nodes()[0];
    (client, node, events)
}

/// An idle connection to an echoing peer (built-in codec, ids): pinged every 100 ms, every
/// ping answered (its id mapped like a request's), the connection kept, the requests between
/// the pings answered as ever.
async fn answered_pings_keep_an_idle_connection(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let builder = ClientBuilder::new(test_config()).node(peer.addr());
    let interval = Duration::from_millis(100);
    let (client, node, _events) =
        with_heartbeat(&runtime, builder, interval, Duration::from_millis(500));
    let ledger = Ledger::default();
    for round in 0..3 {
        let payload = format!("round {round}");
        let answered = ledger
            .send(
                &*runtime,
                &client,
                Target::Node(node),
                payload.clone(),
                Duration::from_secs(2),
            )
            .join()
            .await;
        assert_eq!(answered.result.as_deref(), Ok(payload.as_bytes()));
        sleep(&*runtime, Duration::from_millis(450)).await;
    }
    let counters = client.counters().await.unwrap();
    assert!(counters.heartbeats_sent >= 6, "{counters:?}");
    assert_eq!(counters.heartbeat_timeouts, 0, "{counters:?}");
    assert_eq!(peer.accepted(), 1, "one connection throughout");
    assert!(peer.requests() as u64 >= 3 + counters.heartbeats_sent - 1);
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A peer that stalls (a wedged process; its kernel still acknowledges) behind an idle
/// connection: the ping goes unanswered and the connection closes with `HeartbeatTimeout`
/// within `interval + timeout` of the last answer; the next request, once the peer resumes,
/// is answered on a fresh connection.
async fn a_stalled_peer_is_found_by_the_heartbeat(runtime: Arc<dyn Runtime>) {
    let on = runtime_name(&*runtime);
    let (interval, timeout) = (Duration::from_millis(400), Duration::from_millis(300));
    let peer = Peer::start(Behaviour::Echo);
    let builder = ClientBuilder::new(test_config()).node(peer.addr());
    let (client, node, mut events) = with_heartbeat(&runtime, builder, interval, timeout);
    let ledger = Ledger::default();
    let target = Target::Node(node);
    let warm = ledger
        .send(&*runtime, &client, target, "warm", Duration::from_secs(2))
        .join()
        .await;
    assert_eq!(warm.result.as_deref(), Ok(&b"warm"[..]));
    let quiet_since = Instant::now();
    peer.stall();
    heartbeat_timed_out(&*runtime, &mut events, Duration::from_secs(3)).await;
    window(
        "stalled peer, idle connection, heartbeat 400 ms + 300 ms",
        on,
        quiet_since.elapsed(),
        interval + timeout - Duration::from_millis(50),
        interval + timeout + Duration::from_secs(1),
    );
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.heartbeat_timeouts, 1, "{counters:?}");
    peer.resume();
    let answered = ledger
        .send(&*runtime, &client, target, "fresh", Duration::from_secs(2))
        .join()
        .await;
    assert_eq!(answered.result.as_deref(), Ok(&b"fresh"[..]));
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// Sends SIGCONT to the server when dropped, so that a failing test never leaves a stopped
/// process behind (the server's own drop then stops it for good).
struct Stopped<'a>(&'a mut MemcachedServer);

impl<'a> Stopped<'a> {
    fn new(server: &'a mut MemcachedServer) -> Self {
        server.signal(Signal::Stop);
        Self(server)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.signal(Signal::Continue);
    }
}

/// A real memcached stopped with SIGSTOP behind an idle connection (its kernel still
/// acknowledges, so TCP keepalive would see nothing): the heartbeat (1 s, 500 ms) closes the
/// connection within `interval + timeout` of the last answer, before any request. A client
/// without heartbeats, idle on the same server, learns nothing until a request's deadline.
/// After SIGCONT the next request is answered.
async fn a_stopped_memcached_is_found_by_the_heartbeat(runtime: Arc<dyn Runtime>) {
    let on = runtime_name(&*runtime);
    let (interval, timeout) = (Duration::from_secs(1), Duration::from_millis(500));
    let mut server = MemcachedServer::start().unwrap_or_else(|e| panic!("{e}"));
    let addr = server.addr();
    bounded(&*runtime, Duration::from_secs(20), "stopped memcached", async {
        let builder = ClientBuilder::new(test_config())
            .node(addr)
            .codec(Memcached::new());
        let (client, node, mut events) = with_heartbeat(&runtime, builder, interval, timeout);
        let plain = ClientBuilder::new(test_config())
            .node(addr)
            .codec(Memcached::new())
            .build(Arc::clone(&runtime))
            .unwrap();
        let plain_node = plain.initial_nodes()[0];
        let ledger = Ledger::default();
        let warm_plain = ledger
            .send(&*runtime, &plain, Target::Node(plain_node), memcached::set("hb-plain", "1"), Duration::from_secs(2))
            .join()
            .await;
        assert_eq!(warm_plain.result.map(|r| Reply::parse(&r)), Ok(Ok(Reply::Stored)));
        let warm = ledger
            .send(&*runtime, &client, Target::Node(node), memcached::set("hb", "1"), Duration::from_secs(2))
            .join()
            .await;
        assert_eq!(warm.result.map(|r| Reply::parse(&r)), Ok(Ok(Reply::Stored)));
        let quiet_since = Instant::now();
        let stopped = Stopped::new(&mut server);

        heartbeat_timed_out(&*runtime, &mut events, Duration::from_secs(5)).await;
        let detected = quiet_since.elapsed();
        window(
            "SIGSTOPped memcached, idle connection, heartbeat 1 s + 500 ms",
            on,
            detected,
            interval + timeout - Duration::from_millis(50),
            interval + timeout + Duration::from_secs(1),
        );
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.heartbeat_timeouts, 1, "{counters:?}");
        assert!(counters.heartbeats_sent >= 1, "{counters:?}");

        // Without heartbeats the connection still looks fine: the request pays its deadline.
        let paid = ledger
            .send(&*runtime, &plain, Target::Node(plain_node), memcached::get("hb-plain"), Duration::from_millis(500))
            .join()
            .await;
        match paid.result {
            Err(SendError::DeadlineExceeded { phase: Phase::InFlight, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(paid.took >= Duration::from_millis(500), "{:?}", paid.took);

        drop(stopped);
        let answered = ledger
            .send(&*runtime, &client, Target::Node(node), memcached::get("hb"), Duration::from_secs(2))
            .join()
            .await;
        let value = answered.result.map(|r| Reply::parse(&r).unwrap().into_value());
        assert_eq!(value, Ok(Some(bytes::Bytes::from_static(b"1"))));
        println!(
            "[memcached SIGSTOP under an idle connection, {on}] heartbeat 1 s + 500 ms found it \
             after {detected:.2?}; without heartbeats the next request paid its {:.2?} deadline",
            paid.took
        );
        ledger
            .assert_each_ended_once(&*runtime, Duration::from_secs(1))
            .await;
        client.shutdown().await;
        plain.shutdown().await;
    })
    .await;
}

static MEMCACHED: Shared<MemcachedServer> = Shared::new();
static POSTGRES: Shared<PostgresServer> = Shared::new();

/// memcached is in order: a request sent while a ping is out waits behind it, and every
/// answer still goes to its own request. Requests with pauses around the 50 ms interval, so
/// pings and requests interleave.
async fn memcached_pings_keep_their_place_in_order(runtime: Arc<dyn Runtime>) {
    let server = MEMCACHED
        .get(MemcachedServer::start)
        .unwrap_or_else(|e| panic!("{e}"));
    let on = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "memcached in order",
        async {
            let builder = ClientBuilder::new(test_config())
                .node(server.addr())
                .codec(Memcached::new());
            let (client, node, _events) = with_heartbeat(
                &runtime,
                builder,
                Duration::from_millis(50),
                Duration::from_secs(1),
            );
            let ledger = Ledger::default();
            for i in 0..40u64 {
                let key = format!("hb-order-{on}-{i}");
                let stored = ledger
                    .send(
                        &*runtime,
                        &client,
                        Target::Node(node),
                        memcached::set(&key, i.to_string()),
                        Duration::from_secs(2),
                    )
                    .join()
                    .await;
                assert_eq!(
                    stored.result.map(|r| Reply::parse(&r)),
                    Ok(Ok(Reply::Stored))
                );
                sleep(&*runtime, Duration::from_millis(40 + (i % 4) * 10)).await;
                let got = ledger
                    .send(
                        &*runtime,
                        &client,
                        Target::Node(node),
                        memcached::get(&key),
                        Duration::from_secs(2),
                    )
                    .join()
                    .await;
                let value = got.result.map(|r| Reply::parse(&r).unwrap().into_value());
                assert_eq!(
                    value,
                    Ok(Some(bytes::Bytes::from(i.to_string()))),
                    "request {i}"
                );
            }
            let counters = client.counters().await.unwrap();
            assert!(counters.heartbeats_sent >= 10, "{counters:?}");
            assert_eq!(counters.heartbeat_timeouts, 0, "{counters:?}");
            assert_eq!(counters.connects, 1, "{counters:?}");
            ledger
                .assert_each_ended_once(&*runtime, Duration::from_secs(1))
                .await;
            client.shutdown().await;
        },
    )
    .await;
}

/// PostgreSQL's ping is an empty query: answered (EmptyQueryResponse, ReadyForQuery) in its
/// place, so the session stays the same backend, and a transaction left open between
/// queries is still open after the pings.
async fn postgres_pings_keep_the_session(runtime: Arc<dyn Runtime>) {
    let server = POSTGRES
        .get(PostgresServer::start)
        .unwrap_or_else(|e| panic!("{e}"));
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "postgres pings",
        async {
            let mut config = test_config();
            config.setup_timeout = Duration::from_secs(2);
            config.setup_timeout_max = Duration::from_secs(4);
            let builder = ClientBuilder::new(config)
                .node(server.addr())
                .codec(Postgres::new())
                .handshake(Startup::new("postgres", "postgres"));
            let (client, _node, _events) = with_heartbeat(
                &runtime,
                builder,
                Duration::from_millis(100),
                Duration::from_secs(1),
            );
            let pid = value(&client, "SELECT pg_backend_pid()").await;
            query(&client, "BEGIN").await.into_result().unwrap();
            let started = value(&client, "SELECT now()::text").await;
            sleep(&*runtime, Duration::from_millis(600)).await;
            assert_eq!(
                value(&client, "SELECT now()::text").await,
                started,
                "still in the transaction the pings found (now() is its start)"
            );
            query(&client, "COMMIT").await.into_result().unwrap();
            sleep(&*runtime, Duration::from_millis(300)).await;
            assert_eq!(value(&client, "SELECT pg_backend_pid()").await, pid);
            let counters = client.counters().await.unwrap();
            assert!(counters.heartbeats_sent >= 5, "{counters:?}");
            assert_eq!(counters.heartbeat_timeouts, 0, "{counters:?}");
            client.shutdown().await;
        },
    )
    .await;
}

test_on_every_runtime!(
    answered_pings_keep_an_idle_connection,
    a_stalled_peer_is_found_by_the_heartbeat,
    a_stopped_memcached_is_found_by_the_heartbeat,
    memcached_pings_keep_their_place_in_order,
    postgres_pings_keep_the_session,
);
