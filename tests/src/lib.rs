//! # keepwire-tests
//!
//! Support for keepwire's cross-crate tests: loopback [`peers`], the real-kernel half-open
//! helper ([`netns`]), the three [`runtimes`] behind one trait, small async helpers that work
//! on every runtime, a tracing subscriber and a metrics recorder that keep what they see
//! ([`collect`]), [`tls`] (test certificates and loopback TLS servers), a codec with a bug
//! ([`panicking`]), an in-memory echoing peer ([`memory`]), and [`sim`], a deterministic simulator of kernels, links and servers
//! around the real `Pool` (with the incident replays and the chaos runs). The tests live in
//! `tests/real_*.rs` (real sockets, every runtime) and `tests/sim_*.rs` (simulated clock,
//! keepwire-proto only: [`sim`], and for `sim_availability.rs` the older scripted simulator in
//! `tests/sim/`); `examples/replay.rs` replays the incidents.
//!
//! `unsafe` is allowed in this crate only for the namespace helper's `unshare` and `ioctl`
//! calls, each with its SAFETY comment.
#![allow(unsafe_code)]
#![warn(missing_docs)]

pub mod collect;
pub mod dns;
pub mod load;
pub mod memory;
pub mod names;
pub mod netns;
pub mod panicking;
pub mod peers;
pub mod pg;
pub mod protocols;
pub mod redis;
pub mod runtimes;
pub mod servers;
pub mod sim;
pub mod tls;
pub mod watermark;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant as WallClock};

use bytes::Bytes;
use keepwire_driver::{
    Client, ClientBuilder, ClientEvent, Events, HandshakeError, HandshakeIo, Runtime, SendError,
    Target, sleep_until,
};
use keepwire_proto::{CloseReason, Config, ConnId, Event, NodeId, NodeState, Reason};

pub use netns::{Netns, NetnsError, in_private_netns};
pub use runtimes::{AsyncStd, Smol, TestRuntime, Tokio};

/// Sleeps for `duration` on `runtime`'s clock.
pub async fn sleep(runtime: &dyn Runtime, duration: Duration) {
    sleep_until(runtime, runtime.now() + duration).await;
}

/// `future`'s output, or `None` if it takes longer than `limit`.
pub async fn within<F: Future>(
    runtime: &dyn Runtime,
    limit: Duration,
    future: F,
) -> Option<F::Output> {
    smol::future::or(async { Some(future.await) }, async {
        sleep(runtime, limit).await;
        None
    })
    .await
}

/// `future`'s output; panics with `what` if it takes longer than `limit` (every real-server
/// test body is bounded so).
pub async fn bounded<F: Future>(
    runtime: &dyn Runtime,
    limit: Duration,
    what: &str,
    future: F,
) -> F::Output {
    match within(runtime, limit, future).await {
        Some(output) => output,
        None => panic!("{what}: not done within {limit:?}"),
    }
}

/// The runtime's short name for test output: `tokio`, `smol` or `async-std`.
pub fn runtime_name(runtime: &dyn Runtime) -> &'static str {
    let debug = format!("{runtime:?}");
    if debug.contains("Tokio") {
        "tokio"
    } else if debug.contains("AsyncStd") || debug.contains("SpawnHere") {
        "async-std"
    } else {
        "smol"
    }
}

/// Runs `future` as a task on `runtime`; await the returned handle for its output.
pub fn spawn<T, F>(runtime: &dyn Runtime, future: F) -> Task<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let (sender, receiver) = smol::channel::bounded(1);
    runtime.spawn(Box::pin(async move {
        let _ = sender.send(future.await).await;
    }));
    Task { receiver }
}

/// A spawned task's output.
#[derive(Debug)]
pub struct Task<T> {
    receiver: smol::channel::Receiver<T>,
}

impl<T> Task<T> {
    /// Waits for the output.
    ///
    /// # Panics
    /// If the task was dropped before finishing (the runtime shut down).
    pub async fn join(self) -> T {
        self.receiver.recv().await.expect("the task finished")
    }
}

/// Sends `count` requests (`held 0`, `held 1`, …) to `target`, each from its own task with
/// `timeout`; await the returned tasks for their results.
pub fn send_held(
    runtime: &dyn Runtime,
    client: &Client,
    target: Target,
    count: usize,
    timeout: Duration,
) -> Vec<Task<Result<Bytes, SendError>>> {
    (0..count)
        .map(|i| {
            let client = client.clone();
            spawn(runtime, async move {
                client.send(target, format!("held {i}"), timeout).await
            })
        })
        .collect()
}

/// Every request a test sends through it, and how many times each ended: the check that
/// every request ends exactly once (every `send` returns exactly one result, none hangs).
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    ends: Arc<Mutex<Vec<(String, usize)>>>,
}

/// How one request sent through a [`Ledger`] ended.
#[derive(Debug)]
pub struct Ended {
    /// What `send` returned.
    pub result: Result<Bytes, SendError>,
    /// Wall time from the request's `send` call to its result.
    pub took: Duration,
}

impl Ledger {
    /// Sends `payload` to `target` from its own task, recording the result; await the task
    /// for it.
    pub fn send(
        &self,
        runtime: &dyn Runtime,
        client: &Client,
        target: Target,
        payload: impl Into<Bytes>,
        timeout: Duration,
    ) -> Task<Ended> {
        let payload = payload.into();
        let index = {
            let mut ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
            ends.push((
                String::from_utf8_lossy(&payload[..payload.len().min(40)]).into(),
                0,
            ));
            ends.len() - 1
        };
        let ends = Arc::clone(&self.ends);
        let client = client.clone();
        spawn(runtime, async move {
            let started = WallClock::now();
            let result = client.send(target, payload, timeout).await;
            let took = started.elapsed();
            ends.lock().unwrap_or_else(PoisonError::into_inner)[index].1 += 1;
            Ended { result, took }
        })
    }

    /// Waits, at most `limit`, until every request sent has ended; then asserts that each
    /// ended exactly once.
    ///
    /// # Panics
    /// Naming the requests that never ended, or ended more than once.
    pub async fn assert_each_ended_once(&self, runtime: &dyn Runtime, limit: Duration) {
        let all_ended = || {
            let ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
            ends.iter().all(|(_, count)| *count > 0)
        };
        within(runtime, limit, async {
            while !all_ended() {
                sleep(runtime, Duration::from_millis(5)).await;
            }
        })
        .await;
        let ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
        let wrong: Vec<_> = ends.iter().filter(|(_, count)| *count != 1).collect();
        assert!(
            wrong.is_empty(),
            "requests that did not end exactly once (payload, times ended): {wrong:?}"
        );
    }

    /// How many requests were sent through this ledger.
    pub fn sent(&self) -> usize {
        self.ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Waits until `peer` has read `count` requests; panics after 3 s.
pub async fn until_read(runtime: &dyn Runtime, peer: &peers::Peer, count: usize) {
    let read = within(runtime, Duration::from_secs(3), async {
        while peer.requests() < count {
            sleep(runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        read.is_some(),
        "the peer read {} of {count} requests",
        peer.requests()
    );
}

/// Waits until `node` has at least `bytes` queued (its frames not yet all accepted by the
/// kernel); panics after 3 s. A test that needs one request queued behind another waits here
/// for the first before sending the second: two spawned tasks reach the driver in no set
/// order (on a loaded machine the first one spawned reached it after one spawned 50 ms later).
pub async fn until_pending(runtime: &dyn Runtime, client: &Client, node: NodeId, bytes: u64) {
    let mut pending = 0;
    let queued = within(runtime, Duration::from_secs(3), async {
        loop {
            pending = client
                .node_info(node)
                .await
                .expect("node info")
                .pending_bytes;
            if pending >= bytes {
                return;
            }
            sleep(runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        queued.is_some(),
        "{node:?} has {pending} bytes queued, not {bytes}"
    );
}

/// Waits, at most `limit`, for the first pool event that `matches` selects; other events are
/// skipped. Panics with `what` on timeout.
pub async fn wait_for<T>(
    runtime: &dyn Runtime,
    events: &mut Events,
    limit: Duration,
    what: &str,
    mut matches: impl FnMut(&Event) -> Option<T>,
) -> T {
    let found = within(runtime, limit, async {
        while let Some(event) = events.recv().await {
            if let ClientEvent::Pool(event) = &event {
                if let Some(found) = matches(event) {
                    return Some(found);
                }
            }
        }
        None
    })
    .await;
    match found {
        Some(Some(found)) => found,
        Some(None) => panic!("the client shut down before: {what}"),
        None => panic!("no {what} within {limit:?}"),
    }
}

/// Waits, at most `limit`, for the peer to close a ready connection (a FIN or a reset the
/// client read); returns how it was closed.
pub async fn closed_by_peer(
    runtime: &dyn Runtime,
    events: &mut Events,
    limit: Duration,
) -> CloseReason {
    wait_for(runtime, events, limit, "the peer's close", |e| match e {
        Event::StateChanged {
            from: NodeState::Ready,
            reason: Reason::Closed(reason @ CloseReason::Io(_)),
            ..
        } => Some(*reason),
        _ => None,
    })
    .await
}

/// Waits, at most `limit`, for a ready connection to be closed because a heartbeat ping went
/// unanswered past its deadline.
pub async fn heartbeat_timed_out(runtime: &dyn Runtime, events: &mut Events, limit: Duration) {
    wait_for(runtime, events, limit, "a heartbeat timeout", |e| match e {
        Event::StateChanged {
            from: NodeState::Ready,
            reason: Reason::Closed(CloseReason::HeartbeatTimeout),
            ..
        } => Some(()),
        _ => None,
    })
    .await;
}

/// The connection a client's one node is on when a test starts sending, to assert later that
/// every request went over it ([`held`](Self::held)).
#[derive(Debug)]
pub struct OneConnection {
    node: NodeId,
    conn: ConnId,
}

impl OneConnection {
    /// The connection `client`'s first node is on now; panics if it has none.
    pub async fn now(client: &Client) -> Self {
        let node = client.initial_nodes()[0];
        let conn = client.node_info(node).await.unwrap().conn;
        let conn = conn.unwrap_or_else(|| panic!("{node:?} is not connected before the requests"));
        Self { node, conn }
    }

    /// Asserts the node is still on the same connection.
    pub async fn held(&self, client: &Client) {
        let now = client.node_info(self.node).await.unwrap().conn;
        assert_eq!(now, Some(self.conn), "all on one connection");
    }
}

/// A configuration with the short timeouts the real-socket tests use: setup 300 ms (doubling
/// to 1.2 s), reconnect backoff 100 ms (doubling to 800 ms), no jitter, keepalive and
/// TCP_USER_TIMEOUT off, write timeout 500 ms. Tests change what they exercise.
pub fn test_config() -> Config {
    let mut config = Config::default();
    config.setup_timeout = Duration::from_millis(300);
    config.setup_timeout_max = Duration::from_millis(1200);
    config.setup_timeout_jitter = 0.0;
    config.reconnect_backoff = Duration::from_millis(100);
    config.reconnect_backoff_max = Duration::from_millis(800);
    config.reconnect_jitter = 0.0;
    config.write_timeout = Duration::from_millis(500);
    config.socket.keepalive = None;
    config.socket.user_timeout = None;
    config.quarantine_after_failures = 1000;
    config.quarantine_after_timeouts = 1000;
    config
}

/// A client of the one node at `addr` that quarantines it at its first failure and probes it
/// 200 ms later: with the node's server down, a send is refused, the sole node is
/// quarantined (panic mode), and once the server is back the probe readmits it.
pub fn quick_to_quarantine(runtime: &Arc<dyn Runtime>, addr: SocketAddr) -> Client {
    let mut config = test_config();
    config.quarantine_after_failures = 1;
    config.probe_backoff = Duration::from_millis(200);
    ClientBuilder::new(config)
        .node(addr)
        .build(Arc::clone(runtime))
        .expect("a client of one node")
}

/// A handshake hook that never finishes: the connection stays in its setup until the setup
/// deadline, and the requests sent meanwhile wait queued.
pub async fn endless_handshake(io: HandshakeIo) -> Result<HandshakeIo, HandshakeError> {
    std::future::pending::<()>().await;
    Ok(io)
}

/// Instantiates each listed `async fn case(runtime: Arc<dyn Runtime>)` as a `#[test]` on
/// each runtime: `on_tokio::case`, `on_smol::case`, `on_async_std::case`.
#[macro_export]
macro_rules! test_on_every_runtime {
    ($($case:ident),* $(,)?) => {
        mod on_tokio {
            $( #[test] fn $case() { <$crate::Tokio as $crate::TestRuntime>::run(super::$case) } )*
        }
        mod on_smol {
            $( #[test] fn $case() { <$crate::Smol as $crate::TestRuntime>::run(super::$case) } )*
        }
        mod on_async_std {
            $( #[test] fn $case() { <$crate::AsyncStd as $crate::TestRuntime>::run(super::$case) } )*
        }
    };
}

/// Like [`test_on_every_runtime!`] for `async fn case(runtime, tls: TlsOn)` bodies: each
/// runtime with its own crate's TLS ([`tls::TlsOn`]).
#[macro_export]
macro_rules! test_tls_on_every_runtime {
    ($($case:ident),* $(,)?) => {
        mod on_tokio {
            $( #[test] fn $case() {
                <$crate::Tokio as $crate::TestRuntime>::run(|runtime| {
                    super::$case(runtime, $crate::tls::TlsOn::Tokio)
                })
            } )*
        }
        mod on_smol {
            $( #[test] fn $case() {
                <$crate::Smol as $crate::TestRuntime>::run(|runtime| {
                    super::$case(runtime, $crate::tls::TlsOn::Smol)
                })
            } )*
        }
        mod on_async_std {
            $( #[test] fn $case() {
                <$crate::AsyncStd as $crate::TestRuntime>::run(|runtime| {
                    super::$case(runtime, $crate::tls::TlsOn::AsyncStd)
                })
            } )*
        }
    };
}

/// Like [`test_on_every_runtime!`], with every task (the driver included) polled on the test's
/// thread: for bodies that install a thread-local tracing subscriber or metrics recorder.
#[macro_export]
macro_rules! test_on_this_thread_on_every_runtime {
    ($($case:ident),* $(,)?) => {
        mod on_tokio {
            $( #[test] fn $case() { <$crate::Tokio as $crate::TestRuntime>::run_on_this_thread(super::$case) } )*
        }
        mod on_smol {
            $( #[test] fn $case() { <$crate::Smol as $crate::TestRuntime>::run_on_this_thread(super::$case) } )*
        }
        mod on_async_std {
            $( #[test] fn $case() { <$crate::AsyncStd as $crate::TestRuntime>::run_on_this_thread(super::$case) } )*
        }
    };
}

/// Like [`test_on_every_runtime!`] for `async fn case(runtime, netns: Arc<Netns>)` bodies
/// that run inside a private network namespace (see [`run_in_netns`]).
#[macro_export]
macro_rules! test_in_netns_on_every_runtime {
    ($($case:ident),* $(,)?) => {
        mod on_tokio {
            $( #[test] fn $case() { $crate::run_in_netns::<$crate::Tokio, _, _>(super::$case) } )*
        }
        mod on_smol {
            $( #[test] fn $case() { $crate::run_in_netns::<$crate::Smol, _, _>(super::$case) } )*
        }
        mod on_async_std {
            $( #[test] fn $case() { $crate::run_in_netns::<$crate::AsyncStd, _, _>(super::$case) } )*
        }
    };
}

/// Runs `case` on runtime `R` inside a fresh private network namespace, every task on the
/// namespace's thread.
///
/// # Panics
/// If the kernel refuses the namespace (with the reason), or if `case` panics.
pub fn run_in_netns<R, F, Fut>(case: F)
where
    R: TestRuntime + 'static,
    F: FnOnce(Arc<dyn Runtime>, Arc<Netns>) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let outcome =
        in_private_netns(move |netns| R::run_on_this_thread(|runtime| case(runtime, netns)));
    if let Err(e) = outcome {
        panic!("real-kernel test could not run: {e}");
    }
}
