//! The real-kernel fault matrix, on every runtime. Each test runs in its own private network
//! namespace (see `keepwire_tests::netns`), client and server on its `127.0.0.1`, and makes
//! its fault with an nftables rule *in that namespace only* that drops every packet of the
//! server's port as it arrives (a blackhole: the sender sees no error). Each asserts a time
//! window (wall clock, measured from the request's `send`) and that every request it sent
//! ended exactly once.
//!
//! | fault                                   | keepwire's answer                   | window          |
//! |-----------------------------------------|-------------------------------------|-----------------|
//! | SYN blackhole                           | setup timeout (1 s) abandons it     | [1 s, 3 s)      |
//! | path stall (1 s) < TCP_USER_TIMEOUT (2 s) | survived: answered, no reconnect  | [1 s, 2 s)      |
//! | path stall > TCP_USER_TIMEOUT (2 s)     | `Failure::TimedOut`, then reconnect | [2 s, 4.5 s)    |
//! | server restarts behind a stall          | first write after it: RST, `Reset`  | [0, 1 s)        |
//! | dead path, idle connection, keepalive   | keepalive 1 s + 3 x 1 s: `TimedOut` | [4 s, 6 s)      |
//! | the same, with TCP_USER_TIMEOUT (2 s)   | keepalive 2 s + one 1 s interval    | [3 s, 4.5 s)    |
//! | peer stops reading, full window         | write timeout (1 s) closes it       | [1 s, 2 s)      |
//! |                                         | `NotWritable` above the high mark   | [0, 250 ms)     |
//! | a name's first address blackholed       | its 2 s share, then the second      | [2 s, 3.5 s)    |
//!
//! If the kernel refuses the namespace, or `nft` is missing or refuses a rule, the test fails
//! with the reason; it never passes silently. Every line `fault window:` on stdout (run with
//! `--nocapture`) is one measurement.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::{Client, ClientBuilder, Endpoint, Events, Runtime, SendError, Target};
use keepwire_proto::{
    CloseReason, Config, Event, Failure, Keepalive, NodeId, NodeState, Phase, Reason,
};
use keepwire_tests::names::Names;
use keepwire_tests::netns::{NFT_TABLE, NsId};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{Ledger, Netns, in_private_netns, sleep, test_config, until_read, wait_for};

const USER_TIMEOUT: Duration = Duration::from_secs(2);
const MIB: usize = 1024 * 1024;

fn start(runtime: &Arc<dyn Runtime>, config: Config, addr: SocketAddr) -> (Client, NodeId, Events) {
    let client = ClientBuilder::new(config)
        .node(addr)
        .build(Arc::clone(runtime))
        .unwrap();
    let events = client.subscribe();
    let node = client.initial_nodes()[0];
    (client, node, events)
}

/// Prints one measurement and asserts `low <= took < high`.
fn window(fault: &str, on: &str, took: Duration, low: Duration, high: Duration) {
    println!("fault window: {fault} on {on}: {took:?} (asserted [{low:?}, {high:?}))");
    assert!(
        took >= low && took < high,
        "{fault} on {on}: {took:?} outside [{low:?}, {high:?})"
    );
}

fn block(netns: &Netns, peer: &Peer) {
    netns
        .block_port(peer.addr().port())
        .unwrap_or_else(|e| panic!("blocking the path with nftables failed: {e}"));
}

fn unblock(netns: &Netns) {
    netns
        .unblock()
        .unwrap_or_else(|e| panic!("unblocking the path with nftables failed: {e}"));
}

/// A SYN blackhole: every SYN to the server's port vanishes, so the kernel alone would keep
/// the connect in SYN_SENT for ~127 s. The 1 s setup timeout abandons it within [1 s, 3 s);
/// once the path returns the next request connects and is answered.
async fn a_syn_blackhole_is_abandoned_at_the_setup_timeout(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    let peer = Peer::start(Behaviour::Echo);
    block(&netns, &peer);
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(1);
    config.setup_timeout_max = Duration::from_secs(2);
    let (client, node, _events) = start(&runtime, config, peer.addr());
    let ledger = Ledger::default();
    let target = Target::Node(node);

    let lost = ledger
        .send(
            &*runtime,
            &client,
            target,
            "into the blackhole",
            Duration::from_secs(10),
        )
        .join()
        .await;
    assert_eq!(
        lost_by(&lost.result),
        Some(CloseReason::SetupTimeout),
        "{:?}",
        lost.result
    );
    window(
        "SYN blackhole, setup timeout 1 s",
        on,
        lost.took,
        Duration::from_secs(1),
        Duration::from_secs(3),
    );
    assert_eq!(peer.accepted(), 0, "no SYN got through");

    unblock(&netns);
    let answered = ledger
        .send(
            &*runtime,
            &client,
            target,
            "after the blackhole",
            Duration::from_secs(5),
        )
        .join()
        .await;
    assert_eq!(answered.result.as_deref(), Ok(&b"after the blackhole"[..]));
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.setup_timeouts, 1, "{counters:?}");
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

fn user_timeout_config() -> Config {
    let mut config = test_config();
    config.socket.user_timeout = Some(USER_TIMEOUT);
    config.socket.keepalive = None;
    config
}

/// A 1 s path stall with a request in flight, TCP_USER_TIMEOUT 2 s: the kernel's
/// retransmission gets through once the path returns, the request is answered within
/// [1 s, 2 s), on the same connection (no reconnect).
async fn a_path_stall_shorter_than_the_user_timeout_is_survived(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    let peer = Peer::start(Behaviour::Echo);
    let (client, node, _events) = start(&runtime, user_timeout_config(), peer.addr());
    let ledger = Ledger::default();
    let target = Target::Node(node);
    let before = ledger
        .send(&*runtime, &client, target, "before", Duration::from_secs(5))
        .join()
        .await;
    assert_eq!(before.result.as_deref(), Ok(&b"before"[..]));
    let conn = client.node_info(node).await.unwrap().conn;

    block(&netns, &peer);
    let during = ledger.send(
        &*runtime,
        &client,
        target,
        "sent into the stall",
        Duration::from_secs(10),
    );
    sleep(&*runtime, Duration::from_secs(1)).await;
    unblock(&netns);
    let during = during.join().await;
    assert_eq!(during.result.as_deref(), Ok(&b"sent into the stall"[..]));
    window(
        "1 s path stall, TCP_USER_TIMEOUT 2 s, survived",
        on,
        during.took,
        Duration::from_secs(1),
        USER_TIMEOUT,
    );
    assert_eq!(client.node_info(node).await.unwrap().conn, conn);
    assert_eq!(peer.accepted(), 1, "no reconnect");
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.reconnects, 0, "{counters:?}");
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A path stall longer than TCP_USER_TIMEOUT (2 s) with a request in flight: the kernel gives
/// up with ETIMEDOUT, the request fails `Failure::TimedOut` within [2 s, 4.5 s), and once the
/// path returns the next request is answered on a fresh connection.
async fn a_path_stall_longer_than_the_user_timeout_is_detected(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    let peer = Peer::start(Behaviour::Echo);
    let (client, node, _events) = start(&runtime, user_timeout_config(), peer.addr());
    let ledger = Ledger::default();
    let target = Target::Node(node);
    let before = ledger
        .send(&*runtime, &client, target, "before", Duration::from_secs(5))
        .join()
        .await;
    assert_eq!(before.result.as_deref(), Ok(&b"before"[..]));

    block(&netns, &peer);
    let lost = ledger
        .send(
            &*runtime,
            &client,
            target,
            "never acknowledged",
            Duration::from_secs(20),
        )
        .join()
        .await;
    assert_eq!(
        lost_by(&lost.result),
        Some(CloseReason::Io(Failure::TimedOut)),
        "{:?}",
        lost.result
    );
    window(
        "path stall > TCP_USER_TIMEOUT 2 s, detected",
        on,
        lost.took,
        USER_TIMEOUT,
        USER_TIMEOUT + Duration::from_millis(2500),
    );

    unblock(&netns);
    let after = ledger
        .send(&*runtime, &client, target, "after", Duration::from_secs(5))
        .join()
        .await;
    assert_eq!(after.result.as_deref(), Ok(&b"after"[..]));
    assert_eq!(peer.accepted(), 2, "a fresh connection");
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.reconnects, 1, "{counters:?}");
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// The server's host crashes and comes back on the same port while the path is blocked (its
/// RST is lost). The client still believes in its connection; its first write after the path
/// returns reaches a kernel that has forgotten it and answers RST: the request fails with
/// `Failure::Reset` at once, and the next one is answered on a fresh connection.
async fn a_server_restarted_behind_a_stall_is_found_by_the_first_write(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    let mut peer = Peer::start(Behaviour::Echo);
    let (client, node, _events) = start(&runtime, test_config(), peer.addr());
    let ledger = Ledger::default();
    let target = Target::Node(node);
    let before = ledger
        .send(&*runtime, &client, target, "before", Duration::from_secs(5))
        .join()
        .await;
    assert_eq!(before.result.as_deref(), Ok(&b"before"[..]));

    block(&netns, &peer);
    peer.crash_and_restart(Behaviour::Echo);
    sleep(&*runtime, Duration::from_millis(200)).await;
    unblock(&netns);
    assert_eq!(
        client.node_info(node).await.unwrap().state,
        NodeState::Ready,
        "nothing told the client"
    );

    let reset = ledger
        .send(
            &*runtime,
            &client,
            target,
            "first write after the stall",
            Duration::from_secs(5),
        )
        .join()
        .await;
    assert_eq!(
        lost_by(&reset.result),
        Some(CloseReason::Io(Failure::Reset)),
        "{:?}",
        reset.result
    );
    window(
        "server restarted behind a stall, first write",
        on,
        reset.took,
        Duration::ZERO,
        Duration::from_secs(1),
    );
    let fresh = ledger
        .send(
            &*runtime,
            &client,
            target,
            "on a fresh connection",
            Duration::from_secs(5),
        )
        .join()
        .await;
    assert_eq!(fresh.result.as_deref(), Ok(&b"on a fresh connection"[..]));
    assert_eq!(
        peer.accepted(),
        1,
        "the restarted server saw one connection"
    );
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.reconnects, 1, "{counters:?}");
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// Keepalive 1 s idle, 1 s interval, 3 probes; a request the server read (and acknowledged)
/// but holds, so the connection carries no unacknowledged byte and TCP sees it idle. The path
/// goes dark: keepalive fails the connection (`Failure::TimedOut`) and the held request with
/// it after 1 + 3 x 1 s, within [4 s, 6 s) of the send.
async fn keepalive_finds_a_dead_path_under_an_idle_connection(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    let keepalive = Keepalive {
        idle: Duration::from_secs(1),
        interval: Duration::from_secs(1),
        retries: 3,
    };
    let window = (Duration::from_secs(4), Duration::from_secs(6));
    let what = "dead path, idle connection, keepalive 1 s + 3 x 1 s";
    idle_dead_path(runtime, netns, on, keepalive, None, what, window).await;
}

/// The defaults' keepalive and TCP_USER_TIMEOUT together, at a fifth of their values: idle
/// 2 s, interval 1 s, 3 probes, user timeout 2 s (the defaults are 10 s, 5 s, 3 and 10 s). With
/// TCP_USER_TIMEOUT set, Linux ends a keepalive-probed connection at the first keepalive check
/// where a probe is out and the user timeout has passed since the peer was last heard: at
/// idle plus one interval (3 s here; 15 s under the defaults), not idle plus 3 intervals (5 s;
/// 25 s). The README's detection table states the 15 s from this test.
async fn keepalive_with_the_user_timeout_ends_an_idle_dead_path_after_one_interval(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    let keepalive = Keepalive {
        idle: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        retries: 3,
    };
    let user_timeout = Some(Duration::from_secs(2));
    let window = (Duration::from_secs(3), Duration::from_millis(4_500));
    let what = "dead path, idle connection, keepalive 2 s + 1 s with user timeout 2 s";
    idle_dead_path(runtime, netns, on, keepalive, user_timeout, what, window).await;
}

/// A request the server holds (read and acknowledged), then the path goes dark under the idle
/// connection: the kernel's keepalive (with `user_timeout`, if any) fails it
/// (`Failure::TimedOut`, an event says so), the held request with it, within `window` of the
/// send.
async fn idle_dead_path(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
    keepalive: Keepalive,
    user_timeout: Option<Duration>,
    what: &str,
    (low, high): (Duration, Duration),
) {
    let peer = Peer::start(Behaviour::Hold);
    let mut config = test_config();
    config.socket.user_timeout = user_timeout;
    config.socket.keepalive = Some(keepalive);
    let (client, node, mut events) = start(&runtime, config, peer.addr());
    let ledger = Ledger::default();
    let held = ledger.send(
        &*runtime,
        &client,
        Target::Node(node),
        "held",
        Duration::from_secs(20),
    );
    until_read(&*runtime, &peer, 1).await;
    block(&netns, &peer);
    let held = held.join().await;
    assert_eq!(
        lost_by(&held.result),
        Some(CloseReason::Io(Failure::TimedOut)),
        "{:?}",
        held.result
    );
    window(what, on, held.took, low, high);
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "keepalive failure",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Disconnected { .. },
                reason: Reason::Closed(CloseReason::Io(Failure::TimedOut)),
                ..
            } => Some(()),
            _ => None,
        },
    )
    .await;
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A peer that accepts and never reads, behind small buffers: a 1 MiB request fills its
/// receive window and the client's send buffer and stalls. Above the 64 KiB high watermark a
/// send is rejected with `NotWritable` at once (within 250 ms, a command round trip), and the
/// 1 s write timeout closes the connection within [1 s, 2 s) of the big send. TCP_USER_TIMEOUT
/// stays off: it would kill the zero-window connection itself.
async fn a_peer_behind_a_full_window_is_closed_by_the_write_timeout(
    runtime: Arc<dyn Runtime>,
    _netns: Arc<Netns>,
    on: &str,
) {
    let peer = Peer::never_read();
    let mut config = test_config();
    config.socket.send_buffer_size = Some(4096);
    config.socket.recv_buffer_size = Some(4096);
    config.socket.user_timeout = None;
    config.write_timeout = Duration::from_secs(1);
    config.high_watermark = 64 * 1024;
    config.low_watermark = 32 * 1024;
    let (client, node, mut events) = start(&runtime, config, peer.addr());
    let ledger = Ledger::default();
    let target = Target::Node(node);
    client.connect(node).await.unwrap();
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "ready",
        |e| {
            matches!(
                e,
                Event::StateChanged {
                    to: NodeState::Ready,
                    ..
                }
            )
            .then_some(())
        },
    )
    .await;

    let big = ledger.send(
        &*runtime,
        &client,
        target,
        vec![7u8; MIB],
        Duration::from_secs(10),
    );
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_millis(500),
        "unwritable flip",
        |e| {
            matches!(
                e,
                Event::Writability {
                    writable: false,
                    ..
                }
            )
            .then_some(())
        },
    )
    .await;
    let rejected = ledger
        .send(
            &*runtime,
            &client,
            target,
            vec![8u8; 8 * 1024],
            Duration::from_secs(10),
        )
        .join()
        .await;
    assert_eq!(rejected.result, Err(SendError::NotWritable));
    window(
        "full window, send above the high watermark rejected",
        on,
        rejected.took,
        Duration::ZERO,
        Duration::from_millis(250),
    );

    let big = big.join().await;
    assert_eq!(
        lost_by(&big.result),
        Some(CloseReason::WriteTimeout),
        "{:?}",
        big.result
    );
    window(
        "full window, write timeout 1 s",
        on,
        big.took,
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.write_timeouts, 1, "{counters:?}");
    assert_eq!(counters.unwritable_rejections, 1, "{counters:?}");

    // The next request goes out on a fresh connection (the peer still never answers).
    let next = ledger
        .send(
            &*runtime,
            &client,
            target,
            "after",
            Duration::from_millis(500),
        )
        .join()
        .await;
    assert!(
        matches!(
            next.result,
            Err(SendError::DeadlineExceeded {
                phase: Phase::InFlight,
                ..
            })
        ),
        "{:?}",
        next.result
    );
    assert_eq!(peer.accepted(), 2, "a fresh connection");
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// A child process spawned from the namespace's thread is in that namespace (Linux gives a
/// child the calling *thread's* namespaces), so `nft` run from there changes that namespace's
/// rules only: the rule is listed inside, absent from the host's ruleset, and really drops
/// the port's packets inside. `Netns::nft` refuses to run from a thread outside.
#[test]
fn nft_runs_in_the_private_namespace_only() {
    let host = NsId::of_this_thread().unwrap();
    let netns = in_private_netns(move |netns| {
        let here = NsId::of_this_thread().unwrap();
        assert_eq!(here, netns.id());
        assert_ne!(here, host, "the namespace is not the host's");
        assert_eq!(netns.host(), host);
        let child = Command::new("readlink")
            .arg("/proc/self/ns/net")
            .output()
            .expect("run readlink");
        let child = String::from_utf8_lossy(&child.stdout).trim().to_owned();
        assert_eq!(child, here.to_string(), "the child's namespace");

        let blocked = TcpListener::bind("127.0.0.1:0").unwrap();
        let open = TcpListener::bind("127.0.0.1:0").unwrap();
        netns
            .block_port(blocked.local_addr().unwrap().port())
            .unwrap_or_else(|e| panic!("{e}"));
        let ruleset = netns.nft_ruleset().unwrap();
        assert!(ruleset.contains(NFT_TABLE), "{ruleset}");
        let limit = Duration::from_millis(300);
        assert!(TcpStream::connect_timeout(&blocked.local_addr().unwrap(), limit).is_err());
        assert!(TcpStream::connect_timeout(&open.local_addr().unwrap(), limit).is_ok());
        netns
    })
    .unwrap_or_else(|e| panic!("real-kernel test could not run: {e}"));

    // Back on the test's own thread, in the host's namespace.
    let refused = netns.nft_ruleset().unwrap_err();
    assert!(
        refused.to_string().starts_with("refusing to run nft"),
        "{refused}"
    );
    let host_rules = Command::new(if std::path::Path::new("/usr/sbin/nft").exists() {
        "/usr/sbin/nft"
    } else {
        "nft"
    })
    .args(["list", "ruleset"])
    .output()
    .expect("run nft in the host's namespace (read only)");
    assert!(host_rules.status.success(), "{host_rules:?}");
    let host_rules = String::from_utf8_lossy(&host_rules.stdout);
    assert!(
        !host_rules.contains(NFT_TABLE),
        "a rule leaked into the host's namespace:\n{host_rules}"
    );
}

/// A name with two addresses whose first never answers (every SYN to its port dropped): the
/// first address gets its share of the 4 s setup deadline (2 s, Go's minimum), then the attempt
/// moves on to the second, which answers within the same attempt: [2 s, 3.5 s), one connect,
/// no setup timeout.
async fn a_name_whose_first_address_is_blackholed_reaches_the_second(
    runtime: Arc<dyn Runtime>,
    netns: Arc<Netns>,
    on: &str,
) {
    const NAME: &str = "orders.keepwire.test";
    let dead = Peer::start(Behaviour::Echo);
    let alive = Peer::start(Behaviour::Echo);
    block(&netns, &dead);
    let names = Names::new();
    names.set(NAME, &[dead.addr(), alive.addr()]);
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(4);
    config.setup_timeout_max = Duration::from_secs(8);
    let client = ClientBuilder::new(config)
        .node(Endpoint::name(NAME, 7000).unwrap())
        .resolver(names.clone())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let ledger = Ledger::default();
    let answered = ledger
        .send(
            &*runtime,
            &client,
            Target::Node(node),
            "past the blackhole",
            Duration::from_secs(10),
        )
        .join()
        .await;
    assert_eq!(answered.result.as_deref(), Ok(&b"past the blackhole"[..]));
    window(
        "name with two addresses, the first blackholed, setup timeout 4 s",
        on,
        answered.took,
        Duration::from_secs(2),
        Duration::from_millis(3500),
    );
    assert_eq!(dead.accepted(), 0, "no SYN got through");
    let info = client.node_info(node).await.unwrap();
    assert_eq!(info.addr, Some(alive.addr()));
    let counters = client.counters().await.unwrap();
    assert_eq!(
        (counters.connects, counters.setup_timeouts),
        (1, 0),
        "{counters:?}"
    );
    assert_eq!(names.lookups(), 1);
    ledger
        .assert_each_ended_once(&*runtime, Duration::from_secs(1))
        .await;
    client.shutdown().await;
}

/// Instantiates each case on each runtime, in its own private namespace, with the runtime's
/// name for the measurements.
macro_rules! fault_matrix {
    ($($case:ident),* $(,)?) => {
        mod on_tokio {
            $( #[test] fn $case() {
                keepwire_tests::run_in_netns::<keepwire_tests::Tokio, _, _>(
                    |runtime, netns| super::$case(runtime, netns, "tokio"))
            } )*
        }
        mod on_smol {
            $( #[test] fn $case() {
                keepwire_tests::run_in_netns::<keepwire_tests::Smol, _, _>(
                    |runtime, netns| super::$case(runtime, netns, "smol"))
            } )*
        }
        mod on_async_std {
            $( #[test] fn $case() {
                keepwire_tests::run_in_netns::<keepwire_tests::AsyncStd, _, _>(
                    |runtime, netns| super::$case(runtime, netns, "async-std"))
            } )*
        }
    };
}

fault_matrix!(
    a_syn_blackhole_is_abandoned_at_the_setup_timeout,
    a_path_stall_shorter_than_the_user_timeout_is_survived,
    a_path_stall_longer_than_the_user_timeout_is_detected,
    a_server_restarted_behind_a_stall_is_found_by_the_first_write,
    keepalive_finds_a_dead_path_under_an_idle_connection,
    keepalive_with_the_user_timeout_ends_an_idle_dead_path_after_one_interval,
    a_peer_behind_a_full_window_is_closed_by_the_write_timeout,
    a_name_whose_first_address_is_blackholed_reaches_the_second,
);

/// Why the connection under a request closed, if it ended with "connection lost".
fn lost_by<T>(result: &Result<T, SendError>) -> Option<CloseReason> {
    match result {
        Err(SendError::ConnectionLost { cause, .. }) => Some(*cause),
        _ => None,
    }
}
