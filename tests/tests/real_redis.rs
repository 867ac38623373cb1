//! Redis through keepwire, on every runtime, with the RESP2 codec an application would write
//! (`keepwire_tests::protocols::redis`): commands and their nested replies in order, server
//! errors as answers, commands that would break the order refused before they are sent, 64
//! tasks pipelined on one connection, a paused server whose late answers are each consumed in
//! their place, and a server that closes idle connections (`timeout 1`), which heartbeats keep
//! from closing ours and which a client without them survives without a failed request.
//!
//! The server processes are the test binary's own (`keepwire_tests::servers::RedisServer`):
//! one shared by the tests that leave it as it is, and one of its own for each test that
//! pauses or reconfigures it. Every body is bounded in time; each prints what it measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keepwire_driver::{Client, ClientBuilder, NodeId, Runtime, SendError, Sent, Target};
use keepwire_proto::Phase;
use keepwire_tests::protocols::redis::{Redis, Reply, command};
use keepwire_tests::redis::{self, ask};
use keepwire_tests::servers::{RedisServer, Shared};
use keepwire_tests::{
    bounded, closed_by_peer, runtime_name, sleep, spawn, test_config, test_on_every_runtime,
};

static SERVER: Shared<RedisServer> = Shared::new();

/// The shared server (started by the first test that needs it, stopped after the last).
fn server() -> Arc<RedisServer> {
    SERVER
        .get(RedisServer::start)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn client(runtime: &Arc<dyn Runtime>, builder: ClientBuilder) -> (Client, NodeId) {
    let client = builder
        .codec(Redis::new())
        .build(Arc::clone(runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    (client, node)
}

fn bulk(value: impl Into<Bytes>) -> Reply {
    Reply::Bulk(value.into())
}

fn status(text: &str) -> Reply {
    Reply::Status(text.into())
}

/// Strings, numbers, lists and a transaction, with the replies RESP nests; a server error is an
/// answer and the connection goes on; a command that would break the order is refused and the
/// next command gets its own answer.
async fn commands_and_nested_replies_in_order(runtime: Arc<dyn Runtime>) {
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(20), "commands", async {
        let (client, node) = client(
            &runtime,
            ClientBuilder::new(test_config()).node(server.addr()),
        );
        let key = |k: &str| format!("basic-{name}-{k}").into_bytes();
        // A value with RESP's own delimiters in it, and one of 4 MiB.
        let tricky = Bytes::from_static(b"a\r\n$3\r\n*1\r\nb");
        assert_eq!(
            ask(&client, [b"SET", &key("s"), &tricky]).await,
            status("OK")
        );
        assert_eq!(
            ask(&client, [b"GET", &key("s")]).await,
            bulk(tricky.clone())
        );
        assert_eq!(ask(&client, [b"GET", &key("missing")]).await, Reply::Nil);
        let big = Bytes::from(vec![b'r'; 4 << 20]);
        assert_eq!(
            ask(&client, [b"SET", &key("big"), &big]).await,
            status("OK")
        );
        assert!(ask(&client, [b"GET", &key("big")]).await == bulk(big));

        assert_eq!(
            ask(&client, [b"INCRBY", &key("n"), b"41"]).await,
            Reply::Integer(41)
        );
        let wrong = ask(&client, [b"INCR", &key("s")]).await;
        assert!(
            matches!(&wrong, Reply::Error(e) if e.starts_with("ERR")),
            "{wrong:?}"
        );
        assert_eq!(ask(&client, [b"INCR", &key("n")]).await, Reply::Integer(42));

        assert_eq!(
            ask(&client, [b"RPUSH", &key("l"), b"x", b"", b"z"]).await,
            Reply::Integer(3)
        );
        let items = vec![bulk("x"), bulk(""), bulk("z")];
        assert_eq!(
            ask(&client, [b"LRANGE", &key("l"), b"0", b"-1"]).await,
            Reply::Array(items.clone())
        );
        let many = ask(&client, [b"MGET", &key("n"), &key("missing"), &key("s")]).await;
        assert_eq!(
            many,
            Reply::Array(vec![bulk("42"), Reply::Nil, bulk(tricky)])
        );
        assert_eq!(
            ask(&client, [b"LRANGE", &key("none"), b"0", b"-1"]).await,
            Reply::Array(vec![]),
            "a missing list is empty, not nil"
        );

        // A transaction: its commands are queued, and EXEC answers with their replies nested.
        assert_eq!(ask(&client, [b"MULTI"]).await, status("OK"));
        assert_eq!(ask(&client, [b"INCR", &key("n")]).await, status("QUEUED"));
        assert_eq!(
            ask(&client, [b"LRANGE", &key("l"), b"0", b"-1"]).await,
            status("QUEUED")
        );
        assert_eq!(ask(&client, [b"INCR", &key("s")]).await, status("QUEUED"));
        let Reply::Array(replies) = ask(&client, [b"EXEC"]).await else {
            panic!("EXEC")
        };
        assert_eq!(replies[..2], [Reply::Integer(43), Reply::Array(items)]);
        assert!(matches!(&replies[2], Reply::Error(_)), "{replies:?}");

        for refused in [
            command(["SUBSCRIBE", "news"]),
            command(["CLIENT", "REPLY", "OFF"]),
        ] {
            let answer = client
                .send(Target::Node(node), refused.clone(), Duration::from_secs(1))
                .await;
            assert!(
                matches!(answer, Err(SendError::Encode(_))),
                "{refused:?}: {answer:?}"
            );
        }
        assert_eq!(ask(&client, [b"PING"]).await, status("PONG"));
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.reconnects, 0, "{counters:?}");
        client.shutdown().await;
    })
    .await;
}

/// 64 tasks × 200 `ECHO`s of distinct lengths, pipelined on one connection: every answer is
/// checked against its own request.
async fn many_tasks_get_their_own_answers(runtime: Arc<dyn Runtime>) {
    const TASKS: usize = 64;
    const REQUESTS: usize = 200;
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(60),
        "64 × 200 echoes",
        async {
            let (client, _) = client(
                &runtime,
                ClientBuilder::new(test_config()).node(server.addr()),
            );
            assert_eq!(ask(&client, [b"PING"]).await, status("PONG"));
            let took = redis::pipelined(&runtime, &client, TASKS, REQUESTS).await;
            let counters = client.counters().await.unwrap();
            assert_eq!(counters.reconnects, 0, "one connection: {counters:?}");
            println!(
                "[redis 64 × 200, {name}] {} echoes in {took:.2?}",
                TASKS * REQUESTS
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// `CLIENT PAUSE` holds every command the server has read: requests with a short deadline end
/// in flight, fully sent, while those between them with a long one wait. Once the pause ends
/// the server answers all of them in order; each late answer is consumed in its place, the
/// patient requests get their own, and so does the first request sent after the pause.
async fn a_paused_server_answers_late_in_order(runtime: Arc<dyn Runtime>) {
    const PAUSE: Duration = Duration::from_millis(1000);
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(15), "paused server", async {
        let (client, node) = client(
            &runtime,
            ClientBuilder::new(test_config()).node(server.addr()),
        );
        assert_eq!(ask(&client, [b"PING"]).await, status("PONG"));
        let pause = format!("{}", PAUSE.as_millis());
        assert_eq!(
            server.admin(["CLIENT", "PAUSE", &pause, "ALL"]),
            status("OK")
        );
        let paused = Instant::now();
        let sends: Vec<_> = (0..12)
            .map(|i| {
                let client = client.clone();
                let timeout = Duration::from_millis(if i % 2 == 0 { 200 } else { 5000 });
                spawn(&*runtime, async move {
                    let text = format!("during {i}");
                    let answer = client
                        .send(Target::Node(node), command(["ECHO", &text]), timeout)
                        .await;
                    (text, answer, paused.elapsed())
                })
            })
            .collect();
        let mut patient = Vec::new();
        for (i, send) in sends.into_iter().enumerate() {
            let (text, answer, at) = send.join().await;
            if i % 2 == 0 {
                let expected = SendError::DeadlineExceeded {
                    phase: Phase::InFlight,
                    sent: Sent::Fully,
                    retried: false,
                };
                assert_eq!(answer, Err(expected), "{text}");
                assert!(at < PAUSE, "{text} ended at {at:?}, after the pause");
            } else {
                let answer = answer.unwrap_or_else(|e| panic!("{text}: {e}"));
                assert_eq!(Reply::parse(&answer), Ok(bulk(text.clone())));
                assert!(
                    at >= PAUSE - Duration::from_millis(50),
                    "{text} answered at {at:?}, in the pause"
                );
                patient.push(format!("{at:.2?}"));
            }
        }
        assert_eq!(ask(&client, [b"ECHO", b"after"]).await, bulk("after"));
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.late_responses, 6, "{counters:?}");
        assert_eq!(counters.request_timeouts, 6, "{counters:?}");
        assert_eq!(
            counters.reconnects, 0,
            "one connection throughout: {counters:?}"
        );
        println!(
            "[redis CLIENT PAUSE {PAUSE:?}, {name}] 6 timed out; the patient answered at {}",
            patient.join(" ")
        );
        client.shutdown().await;
    })
    .await;
}

/// A server that closes connections idle for more than a second (`CONFIG SET timeout 1`, as
/// Redis, pgbouncer and load balancers do): heartbeats every 300 ms keep one client's
/// connection for 3.5 s of idleness; the other client's, without heartbeats, is closed by the
/// server, keepwire sees the close while idle, and the next request is answered on a new
/// connection without failing first.
async fn heartbeats_outlast_the_servers_idle_timeout(runtime: Arc<dyn Runtime>) {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(15), "idle timeout", async {
        assert_eq!(
            server.admin(["CONFIG", "SET", "timeout", "1"]),
            status("OK")
        );
        let builder = || ClientBuilder::new(test_config()).node(server.addr());
        let (kept, kept_node) = client(
            &runtime,
            builder().heartbeat(Duration::from_millis(300), Duration::from_secs(1)),
        );
        let (plain, plain_node) = client(&runtime, builder());
        let mut plain_events = plain.subscribe();
        assert_eq!(ask(&kept, [b"PING"]).await, status("PONG"));
        assert_eq!(ask(&plain, [b"PING"]).await, status("PONG"));
        let kept_conn = kept.node_info(kept_node).await.unwrap().conn;
        let plain_conn = plain.node_info(plain_node).await.unwrap().conn;
        let idle = Instant::now();

        let closed = closed_by_peer(&*runtime, &mut plain_events, Duration::from_secs(4)).await;
        let closed_after = idle.elapsed();
        assert!(
            closed_after >= Duration::from_secs(1),
            "closed after {closed_after:?} idle"
        );
        let rest = Duration::from_millis(3500).saturating_sub(idle.elapsed());
        sleep(&*runtime, rest).await;

        assert_eq!(ask(&kept, [b"ECHO", b"kept"]).await, bulk("kept"));
        assert_eq!(
            kept.node_info(kept_node).await.unwrap().conn,
            kept_conn,
            "the same connection"
        );
        let kept_counters = kept.counters().await.unwrap();
        assert!(kept_counters.heartbeats_sent >= 8, "{kept_counters:?}");
        assert_eq!(kept_counters.reconnects, 0, "{kept_counters:?}");
        assert_eq!(kept_counters.heartbeat_timeouts, 0, "{kept_counters:?}");

        assert_eq!(ask(&plain, [b"ECHO", b"again"]).await, bulk("again"));
        assert_ne!(
            plain.node_info(plain_node).await.unwrap().conn,
            plain_conn,
            "a new connection"
        );
        println!(
            "[redis timeout 1, {name}] without heartbeats closed by the server after \
             {closed_after:.2?} idle ({closed:?}); with them, one connection through 3.5 s, \
             {} pings",
            kept_counters.heartbeats_sent
        );
        kept.shutdown().await;
        plain.shutdown().await;
    })
    .await;
}

test_on_every_runtime!(
    commands_and_nested_replies_in_order,
    many_tasks_get_their_own_answers,
    a_paused_server_answers_late_in_order,
    heartbeats_outlast_the_servers_idle_timeout,
);
