//! PostgreSQL 15 through keepwire, on every runtime: the startup handshake (trust, clear-text
//! password, a refused password ending in `AuthFailed`), simple queries in order, 64 tasks
//! pipelining on one connection, a slow query past its deadline with queries pipelined behind
//! it, a session killed on the server (`pg_terminate_backend`), and a postmaster that never
//! accepts.
//!
//! The server processes are the test binary's own (see `keepwire_tests::servers`): one shared
//! by the tests that leave the server as it is, and one of its own for the test that freezes
//! the postmaster. Every body is bounded in time; each prints what it measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keepwire_driver::{Client, ClientBuilder, ClientEvent, Runtime, SendError, Sent, Target};
use keepwire_proto::{CloseReason, Config, Event, Failure, NodeState, Phase, Reason, Unavailable};
use keepwire_tests::pg::{pipelined, query, text, value};
use keepwire_tests::protocols::postgres::{Postgres, Response, Startup};
use keepwire_tests::servers::{PostgresServer, Shared, Signal};
use keepwire_tests::{
    bounded, runtime_name, sleep, spawn, test_config, test_on_every_runtime, wait_for,
};

/// The role that logs in with a clear-text password.
const APP: (&str, &str) = ("app", "app-secret");

static SERVER: Shared<PostgresServer> = Shared::new();

/// The shared server (started by the first test that needs it, stopped after the last).
fn server() -> Arc<PostgresServer> {
    SERVER
        .get(|| {
            let server = PostgresServer::start()?;
            server.create_role(APP.0, APP.1)?;
            Ok(server)
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The test configuration with room for a fork per session on a loaded machine.
fn config() -> Config {
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(2);
    config.setup_timeout_max = Duration::from_secs(4);
    config.write_timeout = Duration::from_secs(2);
    config
}

fn client(
    runtime: &Arc<dyn Runtime>,
    config: Config,
    addr: std::net::SocketAddr,
    startup: Startup,
) -> Client {
    ClientBuilder::new(config)
        .node(addr)
        .codec(Postgres::new())
        .handshake(startup)
        .build(Arc::clone(runtime))
        .unwrap()
}

fn superuser() -> Startup {
    Startup::new("postgres", "postgres")
}

async fn queries_and_logins(runtime: Arc<dyn Runtime>) {
    let server = server();
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "queries and logins",
        async {
            // Trust.
            let admin = client(&runtime, config(), server.addr(), superuser());
            assert_eq!(value(&admin, "SELECT current_user").await, "postgres");
            // Several statements, NULLs, a command tag.
            let response = query(
                &admin,
                "SELECT 1 AS a, NULL AS b; SELECT 'x' UNION ALL SELECT 'y'",
            )
            .await
            .into_result()
            .unwrap();
            assert_eq!(response.results.len(), 2);
            assert_eq!(response.results[0].columns, ["a", "b"]);
            assert_eq!(response.value(0, 1), None);
            assert_eq!(response.results[1].tag, "SELECT 2");
            // An error is an answer like any other: the stream stays aligned.
            let error = query(&admin, "SELECT * FROM no_such_table").await;
            assert_eq!(error.into_result().unwrap_err().code, "42P01");
            assert_eq!(
                value(&admin, "SELECT 'after the error'").await,
                "after the error"
            );

            // Clear-text password.
            let app = client(
                &runtime,
                config(),
                server.addr(),
                Startup::new(APP.0, "postgres").password(APP.1),
            );
            assert_eq!(value(&app, "SELECT current_user").await, "app");
            admin.shutdown().await;
            app.shutdown().await;
        },
    )
    .await;
}

/// A refused password: the handshake hook fails as an authentication failure, the node
/// enters `AuthFailed`, and the request waiting for the connection ends at once with a typed,
/// final error (within the round trip of the server's answer, not at its 5 s deadline; a
/// login with the right password is timed as the yardstick). During the final-failure
/// backoff the next send is refused at once with the same reason.
async fn a_refused_password_ends_in_auth_failed(runtime: Arc<dyn Runtime>) {
    let server = server();
    bounded(
        &*runtime,
        Duration::from_secs(10),
        "refused password",
        async {
            let good = client(
                &runtime,
                config(),
                server.addr(),
                Startup::new(APP.0, "postgres").password(APP.1),
            );
            let started = Instant::now();
            assert_eq!(value(&good, "SELECT 1").await, "1");
            let login = started.elapsed();
            good.shutdown().await;
            let startup = Startup::new(APP.0, "postgres").password("wrong");
            let client = client(&runtime, config(), server.addr(), startup);
            let mut events = client.subscribe();
            let node = client.initial_nodes()[0];
            let started = Instant::now();
            let refused = client
                .send(Target::Node(node), "SELECT 1", Duration::from_secs(5))
                .await;
            let took = started.elapsed();
            assert_eq!(
                refused,
                Err(SendError::ConnectionLost {
                    cause: CloseReason::AuthFailed,
                    sent: Sent::Nothing,
                    retried: false
                }),
                "{refused:?}"
            );
            assert!(
                took < Duration::from_secs(1),
                "ended after {took:?}, not at once"
            );
            let refusal = refused.unwrap_err();
            assert!(refusal.is_final() && !refusal.is_retryable(), "{refusal}");
            assert_eq!(refusal.final_reason(), Some(CloseReason::AuthFailed));
            assert_eq!(refusal.io_kind(), std::io::ErrorKind::PermissionDenied);
            let state = client.node_info(node).await.unwrap().state;
            assert!(matches!(state, NodeState::AuthFailed { .. }), "{state:?}");
            let asked = Instant::now();
            let again = client
                .send(Target::Node(node), "SELECT 1", Duration::from_secs(5))
                .await;
            let again_took = asked.elapsed();
            assert_eq!(
                again,
                Err(SendError::NodeUnavailable(Unavailable::Failed(
                    CloseReason::AuthFailed
                )))
            );
            assert!(again_took < Duration::from_millis(250), "{again_took:?}");
            let error = bounded(
                &*runtime,
                Duration::from_secs(1),
                "handshake event",
                async {
                    loop {
                        match events.recv().await {
                            Some(ClientEvent::HandshakeFailed { error, .. }) => return error,
                            Some(_) => {}
                            None => panic!("events ended"),
                        }
                    }
                },
            )
            .await;
            assert!(error.is_auth(), "{error}");
            assert!(error.to_string().contains("28P01"), "{error}");
            println!(
                "[postgres refused password, {}] final AuthFailed after {took:?} (a good login \
                 and query: {login:?}); the next send refused after {again_took:?}: {error}",
                runtime_name(&*runtime)
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// 64 tasks × 500 queries, each with its own text, pipelined on one connection: every answer
/// is checked against its own query.
async fn many_tasks_get_their_own_answers(runtime: Arc<dyn Runtime>) {
    const TASKS: usize = 64;
    const REQUESTS: usize = 500;
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(60),
        "64 × 500 queries",
        async {
            let client = client(&runtime, config(), server.addr(), superuser());
            let took = pipelined(&runtime, &client, TASKS, REQUESTS).await;
            println!(
                "[postgres 64 × 500, {name}] {} queries in {took:?}, 0 mismatches",
                TASKS * REQUESTS
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// `pg_sleep(3)` with a 1 s deadline and 10 queries pipelined behind it on the same
/// connection: the slow one fails at 1 s (in flight), the ones behind with a 2 s deadline fail
/// at 2 s, the ones with a 6 s deadline get their own answers after the sleep, and so does the
/// first query sent after the slow one's deadline: the sleep's late answer is consumed, never
/// handed to the request behind it.
async fn a_slow_query_past_its_deadline_keeps_its_place(runtime: Arc<dyn Runtime>) {
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(&*runtime, Duration::from_secs(15), "slow query", async {
        let client = client(&runtime, config(), server.addr(), superuser());
        let node = client.initial_nodes()[0];
        let pid = value(&client, "SELECT pg_backend_pid()").await;
        let send = |sql: String, timeout: Duration| {
            let client = client.clone();
            spawn(&*runtime, async move {
                let sent = Instant::now();
                let result = client.send(Target::Node(node), sql, timeout).await;
                (result, sent.elapsed())
            })
        };
        let started = Instant::now();
        let slow = send("SELECT pg_sleep(3)".into(), Duration::from_secs(1));
        while client.node_info(node).await.unwrap().in_flight == 0 {
            sleep(&*runtime, Duration::from_millis(1)).await;
        }
        let behind: Vec<_> = (0..10)
            .map(|i| {
                let timeout = Duration::from_secs(if i % 2 == 0 { 6 } else { 2 });
                send(format!("SELECT 'behind {i}'"), timeout)
            })
            .collect();
        let (slow, slow_took) = slow.join().await;
        assert_eq!(
            slow,
            Err(SendError::DeadlineExceeded {
                phase: Phase::InFlight,
                sent: Sent::Fully,
                retried: false
            })
        );
        // The driver reads the clock once per round, and a send taken in a round counts its
        // timeout from that reading: a deadline may fire up to a round before the caller's own
        // clock says (a CI run once saw 26 µs). The lower bounds allow a round of 10 ms.
        let round = Duration::from_millis(10);
        assert!(
            slow_took >= Duration::from_secs(1) - round && slow_took < Duration::from_millis(1500),
            "the 1 s deadline fired after {slow_took:?}"
        );
        // The first request after the sleep's deadline, on the same connection.
        let after = send("SELECT 'after'".into(), Duration::from_secs(6));
        let (after, after_took) = after.join().await;
        assert_eq!(text(&after.expect("the request after the sleep")), "after");
        let answered_at = started.elapsed();
        assert!(
            answered_at >= Duration::from_secs(3),
            "{answered_at:?}: before the sleep ended?"
        );
        let mut lines = Vec::new();
        for (i, task) in behind.into_iter().enumerate() {
            let (result, took) = task.join().await;
            if i % 2 == 0 {
                let payload = result.unwrap_or_else(|e| panic!("behind {i}: {e}"));
                assert_eq!(text(&payload), format!("behind {i}"));
                assert!(
                    took >= Duration::from_millis(1900),
                    "behind {i} answered after {took:?}"
                );
            } else {
                assert_eq!(
                    result,
                    Err(SendError::DeadlineExceeded {
                        phase: Phase::InFlight,
                        sent: Sent::Fully,
                        retried: false
                    }),
                    "behind {i}"
                );
                assert!(
                    took >= Duration::from_secs(2) - round && took < Duration::from_millis(2500),
                    "behind {i}: the 2 s deadline fired after {took:?}"
                );
            }
            lines.push(format!("{took:.2?}"));
        }
        assert_eq!(
            value(&client, "SELECT pg_backend_pid()").await,
            pid,
            "one connection throughout"
        );
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.reconnects, 0, "{counters:?}");
        // The late answers of the sleep and of the five that timed out behind it were read
        // and dropped, each in its place.
        assert_eq!(counters.late_responses, 6, "{counters:?}");
        println!(
            "[postgres slow query, {name}] deadline after {slow_took:.2?}; behind: {}; \
             first after the sleep answered after {after_took:.2?} (at {answered_at:.2?})",
            lines.join(" ")
        );
        client.shutdown().await;
    })
    .await;
}

/// `pg_terminate_backend` ends a session on the server: the query in flight on it ends at once
/// with "connection lost", the next query gets a fresh session, and a session killed while
/// idle is noticed at once (its read waker stays registered, so the server's goodbye and the
/// close wake the client to read them), so the query after it needs no failure first.
async fn a_terminated_session_ends_its_query_and_the_next_reconnects(runtime: Arc<dyn Runtime>) {
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "terminated session",
        async {
            let client = client(&runtime, config(), server.addr(), superuser());
            let admin = self::client(&runtime, config(), server.addr(), superuser());
            let node = client.initial_nodes()[0];
            let first = value(&client, "SELECT pg_backend_pid()").await;

            // In flight.
            let sleeping = {
                let client = client.clone();
                spawn(&*runtime, async move {
                    client
                        .send(
                            Target::Node(node),
                            "SELECT pg_sleep(10)",
                            Duration::from_secs(15),
                        )
                        .await
                })
            };
            while client.node_info(node).await.unwrap().in_flight == 0 {
                sleep(&*runtime, Duration::from_millis(1)).await;
            }
            sleep(&*runtime, Duration::from_millis(100)).await;
            let killed = Instant::now();
            assert_eq!(
                value(&admin, &format!("SELECT pg_terminate_backend({first})")).await,
                "t"
            );
            let lost = sleeping.join().await;
            let in_flight_ended = killed.elapsed();
            assert!(
                matches!(
                    lost,
                    Err(SendError::ConnectionLost {
                        cause: CloseReason::Io(Failure::PeerClosed | Failure::Reset),
                        sent: Sent::Fully,
                        retried: false
                    })
                ),
                "{lost:?}"
            );
            assert!(
                in_flight_ended < Duration::from_secs(1),
                "{in_flight_ended:?}"
            );
            let second = value(&client, "SELECT pg_backend_pid()").await;
            assert_ne!(second, first, "a fresh session");

            // Idle.
            let mut events = client.subscribe();
            let killed = Instant::now();
            assert_eq!(
                value(&admin, &format!("SELECT pg_terminate_backend({second})")).await,
                "t"
            );
            wait_for(
                &*runtime,
                &mut events,
                Duration::from_secs(2),
                "the idle session's close",
                |e| {
                    matches!(
                        e,
                        Event::StateChanged {
                            from: NodeState::Ready,
                            reason: Reason::Closed(CloseReason::Io(_)),
                            ..
                        }
                    )
                    .then_some(())
                },
            )
            .await;
            let noticed = killed.elapsed();
            let third = value(&client, "SELECT pg_backend_pid()").await;
            assert!(third != first && third != second);
            println!(
                "[postgres terminated session, {name}] in-flight query ended {in_flight_ended:.2?} \
             after the kill; idle kill noticed after {noticed:.2?}; next query on a fresh session"
            );
            client.shutdown().await;
            admin.shutdown().await;
        },
    )
    .await;
}

/// A postmaster that never accepts (SIGSTOP): TCP connects complete in the kernel's accept
/// queue, but no backend ever answers the startup message. Each attempt (connect plus
/// handshake) ends at the setup timeout and ends the request waiting for it, never sent:
/// nothing hangs. The timeout stays at its base (300 ms here) rather than doubling, because
/// each attempt got further than the TCP connect (KIP-601's rule, as proto keeps it: the
/// timeout grows only over attempts that fail while still connecting). After SIGCONT the next
/// request succeeds.
async fn a_postmaster_that_never_accepts(runtime: Arc<dyn Runtime>) {
    let name = runtime_name(&*runtime);
    let server = PostgresServer::start().unwrap_or_else(|e| panic!("{e}"));
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "postmaster that never accepts",
        async {
            server.signal(Signal::Stop);
            let client = client(&runtime, test_config(), server.addr(), superuser());
            let mut events = client.subscribe();
            let node = client.initial_nodes()[0];
            let mut took = Vec::new();
            for _ in 0..3 {
                let started = Instant::now();
                let result = client
                    .send(Target::Node(node), "SELECT 1", Duration::from_secs(5))
                    .await;
                took.push(started.elapsed());
                assert_eq!(
                    result,
                    Err(SendError::ConnectionLost {
                        cause: CloseReason::SetupTimeout,
                        sent: Sent::Nothing,
                        retried: false
                    })
                );
            }
            // On the pool's clock: each attempt from Connecting to its setup timeout. (The
            // events may trail the outcomes a little: read them as they come.)
            let mut attempts = Vec::new();
            let mut connecting_at = None;
            bounded(
                &*runtime,
                Duration::from_secs(1),
                "three setup timeouts",
                async {
                    while attempts.len() < 3 {
                        match events.recv().await.expect("events") {
                            ClientEvent::Pool(Event::StateChanged {
                                to: NodeState::Connecting,
                                at,
                                ..
                            }) => connecting_at = Some(at),
                            ClientEvent::Pool(Event::StateChanged {
                                from: NodeState::Handshaking,
                                reason: Reason::Closed(CloseReason::SetupTimeout),
                                at,
                                ..
                            }) => {
                                attempts.push(at - connecting_at.take().expect("connecting first"))
                            }
                            _ => {}
                        }
                    }
                },
            )
            .await;
            assert_eq!(attempts.len(), 3, "{attempts:?}");
            for attempt in &attempts {
                let limit = Duration::from_millis(300);
                assert!(
                    *attempt > limit && *attempt < limit + Duration::from_millis(250),
                    "attempt took {attempt:?}, setup timeout {limit:?}"
                );
            }
            let counters = client.counters().await.unwrap();
            assert_eq!(counters.setup_timeouts, 3, "{counters:?}");

            server.signal(Signal::Continue);
            let resumed = Instant::now();
            let answer = client
                .send(
                    Target::Node(node),
                    "SELECT 'resumed'",
                    Duration::from_secs(5),
                )
                .await
                .expect("after SIGCONT");
            assert_eq!(text(&answer), "resumed");
            let recovered = resumed.elapsed();
            println!(
                "[postgres never accepts, {name}] attempts ended by the setup timeout after \
             {attempts:.2?} (requests ended, never sent, after {took:.2?}); first answer \
             {recovered:.2?} after SIGCONT"
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// The client through each runtime crate, with nothing but that crate's names (it re-exports
/// the driver and the core) and the protocol module: what an application with one keepwire
/// dependency writes.
macro_rules! query_through {
    ($krate:ident, $addr:expr) => {{
        use $krate::{Config, Target};
        let client = $krate::client(Config::default())
            .node($addr)
            .codec(Postgres::new())
            .handshake(Startup::new(APP.0, "postgres").password(APP.1))
            .build()
            .unwrap();
        let sql = concat!("SELECT '", stringify!($krate), "', current_user");
        let payload = client
            .send(Target::Best, sql, Duration::from_secs(5))
            .await
            .unwrap();
        let response = Response::parse(&payload).unwrap().into_result().unwrap();
        assert_eq!(response.value(0, 0), Some(stringify!($krate).as_bytes()));
        assert_eq!(response.value(0, 1), Some(APP.0.as_bytes()));
        client.shutdown().await;
    }};
}

#[test]
fn each_runtime_crate_alone_runs_the_client() {
    let server = server();
    let addr = server.addr();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { query_through!(keepwire_tokio, addr) });
    smol::block_on(async { query_through!(keepwire_smol, addr) });
    async_std::task::block_on(async { query_through!(keepwire_async_std, addr) });
}

test_on_every_runtime!(
    queries_and_logins,
    a_refused_password_ends_in_auth_failed,
    many_tasks_get_their_own_answers,
    a_slow_query_past_its_deadline_keeps_its_place,
    a_terminated_session_ends_its_query_and_the_next_reconnects,
    a_postmaster_that_never_accepts,
);
