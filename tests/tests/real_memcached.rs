//! memcached through keepwire, on every runtime: the text protocol in order (set, get, incr,
//! ...), requests on the wire untagged and pipelined, 64 tasks × 500 requests on one
//! connection, a server stopped (SIGSTOP) while large values are sent, and a server killed
//! (`kill -9`) and restarted on the same port.
//!
//! The server processes are the test binary's own (see `keepwire_tests::servers`): one shared
//! by the tests that leave it as it is (each runtime uses its own keys), and one of its own for
//! each test that stops or kills it. Every body is bounded in time; each prints what it
//! measured.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keepwire_driver::{Client, ClientBuilder, NodeId, Runtime, SendError, Sent, Target};
use keepwire_proto::{CloseReason, Config, Failure};
use keepwire_tests::protocols::memcached::{self, Memcached, Reply};
use keepwire_tests::servers::{MemcachedServer, Shared, Signal};
use keepwire_tests::{
    bounded, runtime_name, sleep, spawn, test_config, test_on_every_runtime, watermark,
};

static SERVER: Shared<MemcachedServer> = Shared::new();

/// The shared server (started by the first test that needs it, stopped after the last).
fn server() -> Arc<MemcachedServer> {
    SERVER
        .get(MemcachedServer::start)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn client(runtime: &Arc<dyn Runtime>, config: Config, addr: SocketAddr) -> (Client, NodeId) {
    let client = ClientBuilder::new(config)
        .node(addr)
        .codec(Memcached::new())
        .build(Arc::clone(runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    (client, node)
}

/// Sends `request` to the node and reads the answer; panics on any failure.
async fn ask(client: &Client, node: NodeId, request: Bytes) -> Reply {
    let payload = client
        .send(Target::Node(node), request.clone(), Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{request:?}: {e}"));
    Reply::parse(&payload).unwrap_or_else(|e| panic!("{request:?}: {e}"))
}

async fn set_get_incr_in_order(runtime: Arc<dyn Runtime>) {
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "set, get, incr",
        async {
            let (client, node) = client(&runtime, test_config(), server.addr());
            let key = |k: &str| format!("basic-{name}-{k}");
            assert_eq!(
                ask(&client, node, memcached::set(key("a"), "alpha")).await,
                Reply::Stored
            );
            let got = ask(&client, node, memcached::get(key("a"))).await;
            assert_eq!(got.into_value(), Some(Bytes::from_static(b"alpha")));
            assert_eq!(
                ask(&client, node, memcached::get(key("missing"))).await,
                Reply::Values(vec![])
            );
            assert_eq!(
                ask(&client, node, memcached::set(key("n"), "41")).await,
                Reply::Stored
            );
            assert_eq!(
                ask(&client, node, memcached::incr(key("n"), 1)).await,
                Reply::Number(42)
            );
            assert_eq!(
                ask(&client, node, memcached::decr(key("n"), 50)).await,
                Reply::Number(0)
            );
            assert_eq!(
                ask(&client, node, memcached::incr(key("missing"), 1)).await,
                Reply::NotFound
            );
            let add = memcached::store("add", key("a"), 0, 0, "again");
            assert_eq!(ask(&client, node, add).await, Reply::NotStored);
            assert_eq!(
                ask(&client, node, memcached::delete(key("a"))).await,
                Reply::Deleted
            );
            // A value near memcached's item limit, and several keys in one get.
            let big = Bytes::from(vec![b'b'; 1000 * 1024]);
            assert_eq!(
                ask(&client, node, memcached::set(key("big"), &big)).await,
                Reply::Stored
            );
            let many = ask(
                &client,
                node,
                memcached::get_many([key("n"), key("a"), key("big")]),
            )
            .await;
            let Reply::Values(values) = many else {
                panic!("{many:?}")
            };
            assert_eq!(values.len(), 2);
            // decr keeps the item's length: memcached pads the number with spaces.
            assert_eq!(values[0].data.trim_ascii_end(), b"0");
            assert!(values[1].data == big, "the 1000 KiB value came back whole");
            // A request that would get no answer is refused before it is sent; the stream stays
            // aligned.
            let noreply = Bytes::from(format!("delete {} noreply\r\n", key("n")));
            let refused = client
                .send(Target::Node(node), noreply, Duration::from_secs(1))
                .await;
            assert!(matches!(refused, Err(SendError::Encode(_))), "{refused:?}");
            assert!(matches!(
                ask(&client, node, memcached::version()).await,
                Reply::Version(_)
            ));
            client.shutdown().await;
        },
    )
    .await;
}

/// 64 tasks × 500 requests with distinct keys and values (a set, then a get of the same key),
/// pipelined on one connection: every answer is checked against its own request.
async fn many_tasks_get_their_own_answers(runtime: Arc<dyn Runtime>) {
    const TASKS: usize = 64;
    const REQUESTS: usize = 500;
    let server = server();
    let name = runtime_name(&*runtime);
    bounded(
        &*runtime,
        Duration::from_secs(60),
        "64 × 500 requests",
        async {
            let (client, node) = client(&runtime, test_config(), server.addr());
            assert!(matches!(
                ask(&client, node, memcached::version()).await,
                Reply::Version(_)
            ));
            let started = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let client = client.clone();
                    spawn(&*runtime, async move {
                        let mut mismatches = 0;
                        for r in (0..REQUESTS).step_by(2) {
                            let key = format!("load-{name}-{t}-{r}");
                            // Values of different lengths, so a shifted answer cannot match.
                            let value = format!("{t}:{r}:{}", "v".repeat((t + r) % 97));
                            let stored = client
                                .send(
                                    Target::Node(node),
                                    memcached::set(&key, &value),
                                    Duration::from_secs(20),
                                )
                                .await
                                .unwrap_or_else(|e| panic!("set {key}: {e}"));
                            if Reply::parse(&stored) != Ok(Reply::Stored) {
                                mismatches += 1;
                            }
                            let got = client
                                .send(
                                    Target::Node(node),
                                    memcached::get(&key),
                                    Duration::from_secs(20),
                                )
                                .await
                                .unwrap_or_else(|e| panic!("get {key}: {e}"));
                            match Reply::parse(&got) {
                                Ok(Reply::Values(values))
                                    if values.len() == 1
                                        && values[0].key == key.as_bytes()
                                        && values[0].data == value.as_bytes() => {}
                                _ => mismatches += 1,
                            }
                        }
                        mismatches
                    })
                })
                .collect();
            let mut mismatches = 0;
            for task in tasks {
                mismatches += task.join().await;
            }
            let took = started.elapsed();
            assert_eq!(mismatches, 0);
            let counters = client.counters().await.unwrap();
            assert_eq!(counters.connects, 1, "one connection: {counters:?}");
            println!(
                "[memcached 64 × 500, {name}] {} requests in {took:.2?}, 0 mismatches",
                TASKS * REQUESTS
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// An in-order protocol costs no tag and no round trip: a stand-in server that answers only
/// after it has read all ten requests gets exactly memcached's bytes, ten `get` lines and
/// nothing else, all written before the first answer.
async fn requests_go_out_untagged_and_pipelined(runtime: Arc<dyn Runtime>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let expected: Vec<Bytes> = (0..10).map(|i| memcached::get(format!("k{i}"))).collect();
    let total: usize = expected.iter().map(Bytes::len).sum();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut received = vec![0u8; total];
        stream.read_exact(&mut received).unwrap();
        stream.write_all(&b"END\r\n".repeat(10)).unwrap();
        let mut more = [0u8; 1];
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let extra = stream.read(&mut more).unwrap_or(0);
        (received, extra)
    });
    bounded(
        &*runtime,
        Duration::from_secs(10),
        "pipelined gets",
        async {
            let (client, node) = client(&runtime, test_config(), addr);
            let sends: Vec<_> = expected
                .iter()
                .map(|request| {
                    let (client, request) = (client.clone(), request.clone());
                    spawn(&*runtime, async move {
                        client
                            .send(Target::Node(node), request, Duration::from_secs(3))
                            .await
                    })
                })
                .collect();
            for send in sends {
                assert_eq!(
                    Reply::parse(&send.join().await.unwrap()),
                    Ok(Reply::Values(vec![]))
                );
            }
            client.shutdown().await;
        },
    )
    .await;
    let (received, extra) = server.join().unwrap();
    let mut lines: Vec<&[u8]> = received.split_inclusive(|&b| b == b'\n').collect();
    lines.sort();
    let mut want: Vec<&[u8]> = expected.iter().map(|r| &r[..]).collect();
    want.sort();
    assert_eq!(lines, want, "exactly the ten requests, byte for byte");
    assert_eq!(extra, 0, "nothing else");
}

/// Bytes the client's kernel accepted on the connection `client` → `server`, as the kernel
/// counts them (`/proc/net/tcp`): what the server's socket holds unread plus what the client's
/// socket has not yet had acknowledged. Exact while the server process reads nothing.
fn kernel_accepted(client: SocketAddr, server: SocketAddr) -> u64 {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => unreachable!("loopback v4"),
    };
    let (c, s) = (hex(client), hex(server));
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let queues = |local: &str, remote: &str| {
        table
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 4 && f[1] == local && f[2] == remote)
            .map(|f| {
                let (tx, rx) = f[4].split_once(':').unwrap();
                (
                    u64::from_str_radix(tx, 16).unwrap(),
                    u64::from_str_radix(rx, 16).unwrap(),
                )
            })
            .unwrap_or_else(|| panic!("no socket {local} -> {remote} in /proc/net/tcp"))
    };
    let (client_unacked, _) = queues(&c, &s);
    let (_, server_unread) = queues(&s, &c);
    client_unacked + server_unread
}

/// Waits until the kernel takes no more of the connection's bytes: [`kernel_accepted`]
/// unchanged for 500 ms. (Not the node's pending bytes: they change only when a frame
/// completes, while a stopped server's receive queue may still take a little at each
/// zero-window probe, inside a frame.)
async fn until_stalled(runtime: &dyn Runtime, client: SocketAddr, server: SocketAddr) {
    let mut last = (u64::MAX, Instant::now());
    loop {
        let accepted = kernel_accepted(client, server);
        if accepted != last.0 {
            last = (accepted, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(500) {
            return;
        }
        sleep(runtime, Duration::from_millis(10)).await;
    }
}

/// memcached stopped (SIGSTOP) while 128 KiB values are sent: once pending bytes pass the high
/// watermark (1 MiB) the next send is refused at once with NotWritable; pending bytes never
/// pass the high watermark plus one frame; the write timeout (1 s) closes the connection and
/// ends every request on it, saying what reached the server; after SIGCONT the next request
/// succeeds.
async fn a_stopped_server_while_sending_large_values(runtime: Arc<dyn Runtime>) {
    const HIGH: u64 = 1024 * 1024;
    const VALUE: usize = 128 * 1024;
    let name = runtime_name(&*runtime);
    let mut server = MemcachedServer::start().unwrap_or_else(|e| panic!("{e}"));
    bounded(
        &*runtime,
        Duration::from_secs(20),
        "stopped server",
        async {
            let mut config = test_config();
            config.high_watermark = HIGH;
            config.low_watermark = HIGH / 2;
            config.write_timeout = Duration::from_secs(1);
            config.socket.send_buffer_size = Some(64 * 1024);
            let (client, node) = client(&runtime, config.clone(), server.addr());
            let mut events = client.subscribe();
            assert_eq!(
                ask(&client, node, memcached::set("warm", "up")).await,
                Reply::Stored
            );
            server.signal(Signal::Stop);

            // Watch pending bytes while the sends pile up.
            let watching = Arc::new(AtomicBool::new(true));
            let max_pending = Arc::new(AtomicU64::new(0));
            let watcher = {
                let (client, watching, max_pending) = (
                    client.clone(),
                    Arc::clone(&watching),
                    Arc::clone(&max_pending),
                );
                let runtime = Arc::clone(&runtime);
                spawn(&*runtime.clone(), async move {
                    while watching.load(Ordering::Relaxed) {
                        let pending = client.node_info(node).await.unwrap().pending_bytes;
                        max_pending.fetch_max(pending, Ordering::Relaxed);
                        sleep(&*runtime, Duration::from_millis(2)).await;
                    }
                })
            };
            let value = vec![b'v'; VALUE];
            let frame = memcached::set("stop-00", &value).len() as u64;
            let started = Instant::now();
            let mut sends = Vec::new();
            while client.node_info(node).await.unwrap().writable {
                assert!(sends.len() < 64, "never became unwritable");
                let (sender, request) = (
                    client.clone(),
                    memcached::set(format!("stop-{:02}", sends.len()), &value),
                );
                sends.push(spawn(&*runtime, async move {
                    sender
                        .send(Target::Node(node), request, Duration::from_secs(10))
                        .await
                }));
                let queued = sends.len();
                let since = Instant::now();
                loop {
                    let in_flight = client.node_info(node).await.unwrap().in_flight;
                    if in_flight >= queued {
                        break;
                    }
                    // A request answered after the stop would never let the count catch up.
                    assert!(
                        since.elapsed() < Duration::from_secs(2),
                        "{in_flight} in flight of {queued} sent to the stopped server"
                    );
                    sleep(&*runtime, Duration::from_millis(1)).await;
                }
            }
            let asked = Instant::now();
            let refused = client
                .send(
                    Target::Node(node),
                    memcached::set("stop-refused", &value),
                    Duration::from_secs(10),
                )
                .await;
            let refused_after = asked.elapsed();
            assert_eq!(refused, Err(SendError::NotWritable));
            assert!(
                refused_after < Duration::from_millis(100),
                "refused after {refused_after:?}"
            );
            let flipped_at = watermark::unwritable_flip(&*runtime, &mut events).await;
            let bound = HIGH + frame + config.per_frame_overhead;
            assert!(
                flipped_at > HIGH && flipped_at <= bound,
                "flipped at {flipped_at}"
            );

            // The write timeout closes the connection; every request on it ends.
            let mut sent = Vec::new();
            for send in sends {
                match send.join().await {
                    Err(SendError::ConnectionLost {
                        cause: CloseReason::WriteTimeout,
                        sent: s,
                        retried: false,
                    }) => sent.push(s),
                    other => panic!("{other:?}"),
                }
            }
            let closed_after = started.elapsed();
            watching.store(false, Ordering::Relaxed);
            watcher.join().await;
            let max_pending = max_pending.load(Ordering::Relaxed);
            assert!(
                max_pending <= bound,
                "pending reached {max_pending} > {bound}"
            );
            assert!(
                closed_after >= Duration::from_secs(1)
                    && closed_after < Duration::from_millis(1600),
                "closed after {closed_after:?}"
            );
            assert_eq!(sent.first(), Some(&Sent::Fully), "{sent:?}");
            assert_eq!(sent.last(), Some(&Sent::Nothing), "{sent:?}");
            let info = client.node_info(node).await.unwrap();
            assert_eq!(info.pending_bytes, 0, "released on close");
            let counters = client.counters().await.unwrap();
            assert_eq!(
                (counters.write_timeouts, counters.unwritable_rejections),
                (1, 1),
                "{counters:?}"
            );

            server.signal(Signal::Continue);
            let resumed = Instant::now();
            assert_eq!(
                ask(&client, node, memcached::set("after", "resumed")).await,
                Reply::Stored
            );
            let recovered = resumed.elapsed();
            let got = ask(&client, node, memcached::get("after")).await;
            assert_eq!(got.into_value(), Some(Bytes::from_static(b"resumed")));
            let count = |s: Sent| sent.iter().filter(|x| **x == s).count();
            println!(
                "[memcached SIGSTOP, {name}] NotWritable after {refused_after:.2?} at {flipped_at} \
             pending bytes (bound {bound}, max seen {max_pending}); write timeout closed the \
             connection {closed_after:.2?} after the first send ({} fully, {} partly, {} not \
             sent); first request after SIGCONT answered in {recovered:.2?}",
                count(Sent::Fully),
                count(Sent::Partly),
                count(Sent::Nothing)
            );
            client.shutdown().await;
        },
    )
    .await;
}

/// memcached killed (`kill -9`) with requests on the connection, then restarted on the same
/// port. The server was stopped first, so the kernel's counts (see [`kernel_accepted`]) say
/// exactly how many bytes reached it: each request ends "connection lost" with `Sent::Fully`,
/// `Partly` or `Nothing` exactly as its frame lies against that count. Under the default
/// backoff (50 ms doubling to 1 s) the first success comes within 1.1 s of the new process.
async fn a_killed_server_restarted_on_the_same_port(runtime: Arc<dyn Runtime>) {
    const VALUE: usize = 64 * 1024;
    let name = runtime_name(&*runtime);
    let mut server = MemcachedServer::start().unwrap_or_else(|e| panic!("{e}"));
    bounded(&*runtime, Duration::from_secs(20), "killed and restarted", async {
        let mut config = Config::default(); // the design's backoff, quarantine and panic mode
        config.socket.send_buffer_size = Some(64 * 1024);
        config.socket.keepalive = None;
        config.socket.user_timeout = None;
        let (client, node) = client(&runtime, config, server.addr());
        // Stopped before the connection exists: it waits in the accept queue, and nothing the
        // client sends is ever read.
        server.signal(Signal::Stop);
        let value = vec![b'k'; VALUE];
        let requests: Vec<Bytes> =
            (0..12).map(|i| memcached::set(format!("kill-{i:02}"), &value)).collect();
        let mut sends = Vec::new();
        for request in &requests {
            let (sender, request) = (client.clone(), request.clone());
            sends.push(spawn(&*runtime, async move {
                sender.send(Target::Node(node), request, Duration::from_secs(10)).await
            }));
            let queued = sends.len();
            while client.node_info(node).await.unwrap().in_flight < queued {
                sleep(&*runtime, Duration::from_millis(1)).await;
            }
        }
        // The requests count from their submit, and the connection may still be on its way
        // under load: its socket is known once it is established.
        let local = loop {
            if let Some(socket) = client.node_info(node).await.unwrap().socket {
                break socket.local_addr.unwrap();
            }
            sleep(&*runtime, Duration::from_millis(1)).await;
        };
        until_stalled(&*runtime, local, server.addr()).await;
        // Read and kill back to back: the stopped server takes bytes only at zero-window
        // probes, hundreds of milliseconds apart by now, so the count cannot move between.
        let accepted = kernel_accepted(local, server.addr());
        server.signal(Signal::Kill);
        let killed = Instant::now();
        let mut start = 0u64;
        let mut tally = [0usize; 3];
        for (i, (send, request)) in sends.into_iter().zip(&requests).enumerate() {
            let end = start + request.len() as u64;
            let expected = if end <= accepted {
                Sent::Fully
            } else if start < accepted {
                Sent::Partly
            } else {
                Sent::Nothing
            };
            match send.join().await {
                Err(SendError::ConnectionLost {
                    cause: CloseReason::Io(Failure::Reset | Failure::PeerClosed),
                    sent,
                    retried: false,
                }) => assert_eq!(sent, expected, "request {i}: bytes {start}..{end}, kernel took {accepted}"),
                other => panic!("request {i}: {other:?}"),
            }
            tally[match expected {
                Sent::Fully => 0,
                Sent::Partly => 1,
                _ => 2,
            }] += 1;
            start = end;
        }
        assert!(tally[0] > 0 && tally[2] > 0, "some sent, some not: {tally:?}");
        let lost_after = killed.elapsed();

        // Keep asking while it is down; restart it after 1.5 s (the backoff reaches its 1 s cap).
        let prober = {
            let client = client.clone();
            let runtime2 = Arc::clone(&runtime);
            spawn(&*runtime, async move {
                for _ in 0..1000 {
                    let asked = client
                        .send(Target::Node(node), memcached::version(), Duration::from_millis(300))
                        .await;
                    if asked.is_ok() {
                        return Instant::now();
                    }
                    sleep(&*runtime2, Duration::from_millis(10)).await;
                }
                panic!("no success after 1000 tries");
            })
        };
        sleep(&*runtime, Duration::from_millis(1500)).await;
        let spawned = server.restart().unwrap_or_else(|e| panic!("{e}"));
        let answering = Instant::now();
        let first_success = prober.join().await;
        let since_spawn = first_success.saturating_duration_since(spawned);
        assert!(since_spawn < Duration::from_millis(1100), "first success {since_spawn:?} after the restart");
        let counters = client.counters().await.unwrap();
        println!(
            "[memcached kill -9, {name}] {} requests lost after {lost_after:.2?} ({} fully sent, {} \
             partly, {} not sent; kernel took {accepted} bytes); first success {since_spawn:.2?} \
             after the new process was spawned ({:.2?} after it answered our probe); {} reconnect \
             attempts",
            requests.len(),
            tally[0],
            tally[1],
            tally[2],
            first_success.saturating_duration_since(answering),
            counters.connects
        );
        client.shutdown().await;
    })
    .await;
}

/// The client through each runtime crate, with nothing but that crate's names (it re-exports
/// the driver and the core) and the codec module: what an application with one keepwire
/// dependency writes.
macro_rules! set_and_get_through {
    ($krate:ident, $addr:expr) => {{
        use $krate::{Config, Target};
        let client = $krate::client(Config::default())
            .node($addr)
            .codec(Memcached::new())
            .build()
            .unwrap();
        let key = concat!("alone-", stringify!($krate));
        let timeout = Duration::from_secs(5);
        let stored = client
            .send(Target::Best, memcached::set(key, key), timeout)
            .await
            .unwrap();
        assert_eq!(Reply::parse(&stored), Ok(Reply::Stored));
        let got = client
            .send(Target::Best, memcached::get(key), timeout)
            .await
            .unwrap();
        let value = Reply::parse(&got).unwrap().into_value();
        assert_eq!(value.as_deref(), Some(key.as_bytes()));
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
        .block_on(async { set_and_get_through!(keepwire_tokio, addr) });
    smol::block_on(async { set_and_get_through!(keepwire_smol, addr) });
    async_std::task::block_on(async { set_and_get_through!(keepwire_async_std, addr) });
}

test_on_every_runtime!(
    set_get_incr_in_order,
    many_tasks_get_their_own_answers,
    requests_go_out_untagged_and_pipelined,
    a_stopped_server_while_sending_large_values,
    a_killed_server_restarted_on_the_same_port,
);
