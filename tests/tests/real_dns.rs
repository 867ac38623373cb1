//! DNS over TCP through keepwire, on every runtime, against a real resolver: Unbound, which
//! answers the queries of one connection in the order their answers are ready, each carrying
//! its query's 16-bit id (`keepwire_tests::protocols::dns`, correlated by id). A slow answer
//! is overtaken by fast ones on one connection; 64 tasks pipeline thousands of names, some
//! answered by the resolver, some by its upstream; a query past its deadline keeps its id
//! until its late answer arrives and is dropped; a resolver killed with queries in flight
//! ends them with a typed outcome, its restart answering the next; heartbeats keep a
//! connection that the resolver would close for idleness, and find one that hangs; and
//! `TCP_QUICKACK` frees the answers Unbound holds behind Nagle's algorithm.
//!
//! The resolver is the test binary's own process (`keepwire_tests::servers::UnboundServer`),
//! and so is its upstream, a UDP server on loopback: no query leaves the machine. One is
//! shared by the tests that leave it running; the test that kills it has its own. Every body
//! is bounded in time; each prints what it measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keepwire_driver::{Client, ClientBuilder, NodeId, Runtime, SendError, Sent};
use keepwire_proto::{CloseReason, Failure, Phase};
use keepwire_tests::dns::{self, resolve, resolve_local};
use keepwire_tests::protocols::dns::{self as wire, CH, Dns, TXT};
use keepwire_tests::servers::{LOCAL_TEXT, LOCAL_ZONE, Shared, Signal, UnboundServer};
use keepwire_tests::{
    bounded, closed_by_peer, heartbeat_timed_out, runtime_name, sleep, spawn, test_config,
    test_on_every_runtime,
};

static SERVER: Shared<UnboundServer> = Shared::new();

/// The shared resolver (started by the first test that needs it, stopped after the last).
fn server() -> Arc<UnboundServer> {
    SERVER
        .get(UnboundServer::start)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn client(runtime: &Arc<dyn Runtime>, server: &UnboundServer) -> (Client, NodeId) {
    let client = ClientBuilder::new(test_config())
        .node(server.addr())
        .codec(Dns::new())
        .build(Arc::clone(runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    (client, node)
}

const PATIENT: Duration = Duration::from_secs(5);

/// A query the upstream answers after 400 ms, then 16 the resolver answers itself: the 16
/// answers come first, each to its own query, and the slow one after, on the one connection.
async fn a_slow_answer_is_overtaken_on_one_connection(runtime: Arc<dyn Runtime>) {
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(20), "overtaken", async {
        let (client, _) = client(&runtime, &server);
        resolve_local(&client, &format!("warm-{name}")).await;
        let delay = Duration::from_millis(400);
        let seen = dns::overtaken(&runtime, &client, delay, 16, name).await;
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.reconnects, 0, "{counters:?}");
        println!(
            "[dns out of order, {name}] 16 local answers within {:.2?}; the upstream's, \
             written first, after {:.2?}",
            seen.fast, seen.slow
        );
        client.shutdown().await;
    })
    .await;
}

/// 64 tasks × 100 distinct names pipelined on one connection, every eighth answered by the
/// upstream (so answers overtake one another all the time): every answer is its own query's.
async fn many_tasks_get_their_own_answers(runtime: Arc<dyn Runtime>) {
    const TASKS: usize = 64;
    const REQUESTS: usize = 100;
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(60),
        "64 × 100 names",
        async {
            let (client, _) = client(&runtime, &server);
            resolve_local(&client, &format!("warm-many-{name}")).await;
            let upstream_before = server.upstream_queries();
            let took = dns::pipelined(&runtime, &client, TASKS, REQUESTS, name).await;
            let forwarded = server.upstream_queries() - upstream_before;
            assert!(
                forwarded >= TASKS * REQUESTS / 8,
                "{forwarded} forwarded to the upstream"
            );
            let counters = client.counters().await.unwrap();
            assert_eq!(counters.reconnects, 0, "one connection: {counters:?}");
            println!(
                "[dns 64 × 100, {name}] {} queries in {took:.2?}, {forwarded} of them forwarded \
             (with other tests' meanwhile)",
                TASKS * REQUESTS
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// Four queries the upstream answers after 600 ms, with a deadline of 150 ms: each ends in
/// flight, fully sent, while queries beside them are answered. Each keeps its id until its
/// late answer comes and is dropped; after that the connection goes on as before.
async fn a_query_past_its_deadline_keeps_its_id_until_its_late_answer(runtime: Arc<dyn Runtime>) {
    const LATE: usize = 4;
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(20), "late answers", async {
        let (client, node) = client(&runtime, &server);
        resolve_local(&client, &format!("warm-late-{name}")).await;
        let started = Instant::now();
        let late: Vec<_> = (0..LATE)
            .map(|i| {
                let client = client.clone();
                let query = format!("d600.late{i}-{name}.up");
                spawn(&*runtime, async move {
                    let outcome = resolve(&client, &query, Duration::from_millis(150)).await;
                    (query, outcome, started.elapsed())
                })
            })
            .collect();
        for i in 0..8 {
            resolve_local(&client, &format!("beside{i}-{name}")).await;
        }
        for task in late {
            let (query, outcome, at) = task.join().await;
            assert_eq!(
                outcome,
                Err(SendError::DeadlineExceeded {
                    phase: Phase::InFlight,
                    sent: Sent::Fully,
                    retried: false,
                }),
                "{query}"
            );
            assert!(
                at < Duration::from_millis(600),
                "{query} ended after {at:?}"
            );
        }
        // Their ids stay taken until their answers come (after 600 ms), which are then known
        // as late: an answer under a freed id would name no request and close the connection.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut counters = client.counters().await.unwrap();
        while counters.late_responses < LATE as u64 {
            assert!(Instant::now() < deadline, "late answers: {counters:?}");
            sleep(&*runtime, Duration::from_millis(10)).await;
            counters = client.counters().await.unwrap();
        }
        let dropped_at = started.elapsed();
        assert_eq!(client.node_info(node).await.unwrap().in_flight, 0);
        resolve_local(&client, &format!("after-{name}")).await;
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.request_timeouts, LATE as u64, "{counters:?}");
        assert_eq!(
            counters.reconnects, 0,
            "one connection throughout: {counters:?}"
        );
        println!(
            "[dns late answers, {name}] {LATE} queries ended at their 150 ms deadline; their \
             answers came and were dropped by {dropped_at:.2?}"
        );
        client.shutdown().await;
    })
    .await;
}

/// `kill -9` while a query waits on the upstream: the kernel closes the connection and the
/// query ends at once, `ConnectionLost` and fully sent. The resolver restarted on the same
/// port answers the next query, on a new connection.
async fn a_killed_resolver_ends_its_queries_and_its_restart_answers(runtime: Arc<dyn Runtime>) {
    let mut server = UnboundServer::start().unwrap_or_else(|e| panic!("{e}"));
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(20), "killed resolver", async {
        let (client, node) = client(&runtime, &server);
        resolve_local(&client, &format!("warm-kill-{name}")).await;
        let before = client.node_info(node).await.unwrap().conn;
        let waiting = {
            let client = client.clone();
            let query = format!("d1000.killed-{name}.up");
            spawn(&*runtime, async move { resolve(&client, &query, PATIENT).await })
        };
        while client.node_info(node).await.unwrap().in_flight == 0 {
            sleep(&*runtime, Duration::from_millis(1)).await;
        }
        sleep(&*runtime, Duration::from_millis(50)).await; // forwarded by now
        server.kill();
        let killed = Instant::now();
        match waiting.join().await {
            Err(SendError::ConnectionLost {
                cause: CloseReason::Io(Failure::Reset | Failure::PeerClosed),
                sent: Sent::Fully,
                retried: false,
            }) => {}
            other => panic!("{other:?}"),
        }
        let lost_after = killed.elapsed();
        assert!(lost_after < Duration::from_millis(500), "lost after {lost_after:?}");

        server.restart().unwrap_or_else(|e| panic!("{e}"));
        let restarted = Instant::now();
        let again = format!("again-{name}.{LOCAL_ZONE}");
        // The node may still be in its reconnect backoff: ask until it answers.
        let mut tries = 0;
        let text = loop {
            tries += 1;
            match resolve(&client, &again, Duration::from_millis(500)).await {
                Ok(text) => break text,
                Err(e) if tries < 20 => {
                    assert!(!e.is_final(), "{e}");
                    sleep(&*runtime, Duration::from_millis(50)).await;
                }
                Err(e) => panic!("no answer after the restart: {e}"),
            }
        };
        assert_eq!(text, LOCAL_TEXT);
        let answered_after = restarted.elapsed();
        assert_ne!(client.node_info(node).await.unwrap().conn, before, "a new connection");
        let counters = client.counters().await.unwrap();
        assert!(counters.reconnects >= 1, "{counters:?}");
        println!(
            "[dns kill -9, {name}] the waiting query lost after {lost_after:.2?}; the restarted \
             resolver answered {answered_after:.2?} after it was ready ({tries} tries)"
        );
        client.shutdown().await;
    })
    .await;
}

/// A resolver that closes connections idle for a second (`tcp-idle-timeout`): heartbeats
/// every 300 ms (an `id.server` query in class CH, which the resolver answers itself, under an
/// id of its own) keep one client's connection through 3.5 s of idleness; the other client's,
/// without heartbeats, is closed by the resolver while idle, and its next query is answered on
/// a new connection without failing first.
async fn heartbeats_outlast_the_resolvers_idle_timeout(runtime: Arc<dyn Runtime>) {
    let server =
        UnboundServer::start_closing_idle(Duration::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(15), "idle timeout", async {
        let ping = wire::query_in("id.server", TXT, CH).unwrap();
        let build = |codec: Dns, heartbeat: bool| {
            let mut builder = ClientBuilder::new(test_config()).node(server.addr());
            if heartbeat {
                builder = builder.heartbeat(Duration::from_millis(300), Duration::from_secs(1));
            }
            let client = builder.codec(codec).build(Arc::clone(&runtime)).unwrap();
            let node = client.initial_nodes()[0];
            (client, node)
        };
        let (kept, kept_node) = build(Dns::new().with_heartbeat(ping), true);
        let (plain, plain_node) = build(Dns::new(), false);
        let mut plain_events = plain.subscribe();
        resolve_local(&kept, &format!("kept-{name}")).await;
        // The resolver's idle time starts once it has read this query: after `idle`.
        let idle = Instant::now();
        resolve_local(&plain, &format!("plain-{name}")).await;
        let kept_conn = kept.node_info(kept_node).await.unwrap().conn;
        let plain_conn = plain.node_info(plain_node).await.unwrap().conn;

        let closed = closed_by_peer(&*runtime, &mut plain_events, Duration::from_secs(4)).await;
        let closed_after = idle.elapsed();
        // Not before the timeout, give or take the few milliseconds Unbound's event loop
        // (libevent, with its clock read once per loop) may fire a timer early: 997.8 ms seen.
        assert!(
            closed_after >= Duration::from_millis(950),
            "closed after {closed_after:?} idle"
        );
        let rest = Duration::from_millis(3500).saturating_sub(idle.elapsed());
        sleep(&*runtime, rest).await;

        resolve_local(&kept, &format!("kept-again-{name}")).await;
        assert_eq!(
            kept.node_info(kept_node).await.unwrap().conn,
            kept_conn,
            "the same connection"
        );
        let kept_counters = kept.counters().await.unwrap();
        assert!(kept_counters.heartbeats_sent >= 8, "{kept_counters:?}");
        assert_eq!(kept_counters.reconnects, 0, "{kept_counters:?}");
        assert_eq!(kept_counters.heartbeat_timeouts, 0, "{kept_counters:?}");

        resolve_local(&plain, &format!("plain-again-{name}")).await;
        assert_ne!(
            plain.node_info(plain_node).await.unwrap().conn,
            plain_conn,
            "a new connection"
        );
        println!(
            "[dns tcp-idle-timeout 1 s, {name}] without heartbeats closed by the resolver \
             after {closed_after:.2?} idle ({closed:?}); with them, one connection through \
             3.5 s, {} pings",
            kept_counters.heartbeats_sent
        );
        kept.shutdown().await;
        plain.shutdown().await;
    })
    .await;
}

/// A resolver that hangs (SIGSTOP) under an idle connection: the kernel still accepts the
/// pings, but nothing answers them. The ping sent after 300 ms of idleness misses its 500 ms
/// deadline and closes the connection as a heartbeat timeout, before any query pays for it;
/// once the resolver goes on (SIGCONT), the next query is answered on a new connection.
async fn a_hung_resolver_is_found_by_the_heartbeat(runtime: Arc<dyn Runtime>) {
    let (interval, timeout) = (Duration::from_millis(300), Duration::from_millis(500));
    let server = UnboundServer::start().unwrap_or_else(|e| panic!("{e}"));
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(15), "hung resolver", async {
        let ping = wire::query_in("id.server", TXT, CH).unwrap();
        let client = ClientBuilder::new(test_config())
            .node(server.addr())
            .codec(Dns::new().with_heartbeat(ping))
            .heartbeat(interval, timeout)
            .build(Arc::clone(&runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        let mut events = client.subscribe();
        resolve_local(&client, &format!("warm-hung-{name}")).await;
        let before = client.node_info(node).await.unwrap().conn;
        let quiet_since = Instant::now();
        server.signal(Signal::Stop);

        heartbeat_timed_out(&*runtime, &mut events, Duration::from_secs(5)).await;
        let detected = quiet_since.elapsed();
        server.signal(Signal::Continue);
        assert!(
            detected >= interval + timeout - Duration::from_millis(50)
                && detected < interval + timeout + Duration::from_secs(1),
            "found after {detected:?}"
        );
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.heartbeat_timeouts, 1, "{counters:?}");

        resolve_local(&client, &format!("after-hung-{name}")).await;
        assert_ne!(
            client.node_info(node).await.unwrap().conn,
            before,
            "a new connection"
        );
        println!(
            "[dns SIGSTOP under an idle connection, {name}] heartbeat 300 ms + 500 ms found it \
             after {detected:.2?}"
        );
        client.shutdown().await;
    })
    .await;
}

/// The overtaken case again with `TCP_QUICKACK` on. Unbound leaves Nagle's algorithm on, so
/// of 16 answers written at once the last few wait for the client's ACK, which the kernel
/// delays by 40 ms at least (the first test's 16 answers take 43–46 ms). With quick ACKs
/// re-armed after every read they come without that wait: the best of three tries is under
/// the delayed-ACK minimum, which no try could be without the option.
async fn quick_acks_free_answers_held_behind_nagle(runtime: Arc<dyn Runtime>) {
    const DELAYED_ACK_MIN: Duration = Duration::from_millis(40);
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(20), "quick ACKs", async {
        let mut config = test_config();
        config.socket.quickack = true;
        let client = ClientBuilder::new(config)
            .node(server.addr())
            .codec(Dns::new())
            .build(Arc::clone(&runtime))
            .unwrap();
        resolve_local(&client, &format!("warm-quick-{name}")).await;
        let mut tries = Vec::new();
        for attempt in 0..3 {
            let tag = format!("quick{attempt}-{name}");
            let delay = Duration::from_millis(200);
            tries.push(
                dns::overtaken(&runtime, &client, delay, 16, &tag)
                    .await
                    .fast,
            );
        }
        let best = tries.iter().min().copied().unwrap_or_default();
        assert!(best < DELAYED_ACK_MIN, "16 answers took {tries:?}");
        println!("[dns quick ACKs, {name}] 16 local answers within {tries:.2?}");
        client.shutdown().await;
    })
    .await;
}

test_on_every_runtime!(
    a_slow_answer_is_overtaken_on_one_connection,
    many_tasks_get_their_own_answers,
    a_query_past_its_deadline_keeps_its_id_until_its_late_answer,
    a_killed_resolver_ends_its_queries_and_its_restart_answers,
    heartbeats_outlast_the_resolvers_idle_timeout,
    quick_acks_free_answers_held_behind_nagle,
    a_hung_resolver_is_found_by_the_heartbeat,
);
