//! # keepwire-driver
//!
//! The runtime-agnostic half of keepwire's adapters, written once: a [`Client`] whose driver
//! (one task, or a sending caller in its place while it is idle) owns a
//! [`keepwire_proto::Pool`] and every socket, applies socket options
//! through socket2 (reporting each one the platform could not apply), enforces the setup,
//! write and request deadlines the pool computes, frames requests and cuts responses with a
//! [`Codec`], and sleeps until the pool's next deadline.
//!
//! A runtime crate (`keepwire-tokio`, `keepwire-smol`, `keepwire-async-std`) only implements
//! the small [`Runtime`] trait.
//!
//! ```no_run
//! # async fn demo(runtime: std::sync::Arc<dyn keepwire_driver::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_driver::{ClientBuilder, Target};
//! use keepwire_proto::Config;
//!
//! let mut config = Config::default();
//! config.write_timeout = Duration::from_secs(2);
//! let client = ClientBuilder::new(config)
//!     .node("127.0.0.1:7000".parse::<std::net::SocketAddr>()?)
//!     .node("127.0.0.1:7001".parse::<std::net::SocketAddr>()?)
//!     .build(runtime)?;
//! let response = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//! # let _ = response;
//! client.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Nodes by name, resolvers, final errors and heartbeats
//!
//! A node is an address or a **name** ([`Endpoint`]). A name is resolved again on *every*
//! connect attempt, under the attempt's setup deadline, so a server that moved (a pod that
//! restarted on another address) is found by the next reconnect; when it has several
//! addresses they are tried in turn, each with a share of the setup deadline (what is left
//! divided by the addresses left, but at least 2 s: Go's `net.Dialer` rule), before the node
//! backs off. [`NodeInfo::addr`] says which address the last connection reached.
//!
//! The runtime's resolver ([`Runtime::resolve`]: std's, on the runtime's blocking pool) is the
//! default; [`ClientBuilder::resolver`] replaces it with any [`Resolver`] (an async DNS client,
//! a service registry, or a table a test controls).
//!
//! Some connect failures no retry can fix: refused credentials, a rejected certificate, a
//! name that does not exist ([`ResolveError::NotFound`]). Each is **final**
//! ([`SendError::is_final`], with its reason in [`SendError::final_reason`]): every request
//! waiting on the node ends at once with it (not at its deadline), and the node waits
//! [`Config::final_failure_backoff`] (30 s) before it tries again, refusing sends at once
//! meanwhile. Everything else (a refused port, a failed lookup, a timeout) stays retryable
//! on the reconnect backoff.
//!
//! A server process that hangs while its kernel lives (SIGSTOP, a deadlock, a long GC pause)
//! is invisible to TCP keepalive on an idle connection: its kernel answers the probes.
//! **Heartbeats** ([`ClientBuilder::heartbeat`], off by default) send the codec's ping
//! ([`Codec::heartbeat`]) on a connection idle longer than `interval`, with a deadline of its
//! own: an unanswered ping closes the connection within `interval + timeout` of its last
//! answer, as a failure (`CloseReason::HeartbeatTimeout`), before a request pays for it.
//!
//! ```no_run
//! # async fn demo(runtime: std::sync::Arc<dyn keepwire_driver::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use keepwire_driver::{ClientBuilder, Endpoint, ResolveError, Target};
//! use keepwire_proto::Config;
//!
//! // A registry's view of the service, as a resolver (any closure of this shape is one).
//! let registry = Arc::new(|host: &str, port: u16| {
//!     let found = (host == "orders").then(|| vec![std::net::SocketAddr::from(([10, 0, 0, 7], port))]);
//!     async move { found.ok_or(ResolveError::NotFound) }
//! });
//! let client = ClientBuilder::new(Config::default())
//!     .node("db.example:5432".parse::<Endpoint>()?) // the runtime's resolver
//!     .node(Endpoint::name("orders", 7000)?)         // resolved by the registry below
//!     .node("10.0.0.8:7000".parse::<std::net::SocketAddr>()?)
//!     .resolver(registry)
//!     .heartbeat(Duration::from_secs(5), Duration::from_secs(1))
//!     .build(runtime)?;
//! match client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await {
//!     Err(e) if e.is_final() => eprintln!("fix the configuration: {e}"),
//!     other => { let _ = other; }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Feature flags
//!
//! None is on by default here; the runtime crates turn `tracing` on by default and pass every
//! other flag through under the same name.
//!
//! - **`tracing`**: spans per client, node and connection, and an event per state change
//!   (with its typed reason), write timeout, watermark flip, eviction, quarantine, probe,
//!   readmission and panic mode. See [Tracing](#tracing).
//! - **`metrics`**: keepwire's counters and live figures through the `metrics` facade. See
//!   [Metrics](#metrics).
//! - **`tower`**: [`ClientService`] implements `tower::Service<Bytes>`, its readiness being
//!   keepwire's back-pressure, so load-shed, buffer, timeout and retry layers work with it.
//! - **`tokio`**: [`Timer`] on `tokio::time::Sleep` and [`IoStream`] on
//!   `tokio::net::TcpStream`, for keepwire-tokio.
//! - **`async-io`**: the `async_io` module (timer, stream and connect on
//!   async-io's reactor), shared by keepwire-smol and keepwire-async-std.
//!
//! # Tracing
//!
//! Every event has the target `keepwire` (`RUST_LOG=keepwire=debug`). Three spans, nested:
//! `keepwire_client` (`seed`), `keepwire_node` (`node`: the node's index, `addr`: its address or name) and
//! `keepwire_conn` (`conn`). The spans are at the ERROR level, so that whatever level you
//! filter at, an event still says which node and connection it is about. Nothing is formatted
//! when no subscriber records an event: fields are handed over by reference.
//!
//! | level | event |
//! |---|---|
//! | ERROR | the codec panicked |
//! | WARN | write timeout; heartbeat timeout; the peer broke the protocol; authentication failed; certificate rejected; the node's name does not exist; not writable (above the high watermark); node quarantined; panic mode entered; socket options not applied; handshake failed |
//! | INFO | connection failed (refused, reset, setup timeout, ...); probe of a quarantined node; node readmitted; writable again; connection evicted; panic mode over |
//! | DEBUG | connecting (a reconnect too), handshaking, ready, connection closed for a reason that is no failure (idle, evicted, removed, shutdown); node added or removed |
//! | TRACE | a connection opened with its setup deadline; a heartbeat ping; each request's end |
//!
//! A state change carries `from`, `to` and `reason` (printed as keepwire-proto prints them),
//! `state` (`disconnected`, `connecting`, `ready`, ...) and `kind`, a stable name for its
//! reason (`demand`, `probe`, `write_timeout`, `connect_failed`, `setup_timeout`, ...), as do
//! evictions, quarantines and readmissions (`kind` = `requested`, `connection_failures`,
//! `probe`, ...).
//!
//! # Metrics
//!
//! Through the `metrics` facade (install a recorder, e.g. `metrics-exporter-prometheus`,
//! *before* building the client: handles are registered when the client and its nodes are
//! made). The label `node` is the node's address or name (`"10.0.0.7:5432"`,
//! `"db.example:5432"`). Gauges move by
//! increments and decrements, so several clients in one process add up, and a client that
//! stops takes its share back out.
//!
//! Counters, pool-wide, one per [`Counters`] field, named `keepwire_<field>_total`:
//! `keepwire_write_timeouts_total`, `keepwire_unwritable_rejections_total`,
//! `keepwire_memory_budget_rejections_total`, `keepwire_in_flight_rejections_total`,
//! `keepwire_evictions_total`, `keepwire_eviction_retries_total`,
//! `keepwire_setup_timeouts_total`, `keepwire_request_timeouts_total`,
//! `keepwire_queued_deadline_drops_total`, `keepwire_connects_total`,
//! `keepwire_reconnects_total`, `keepwire_ready_total`, `keepwire_quarantines_total`,
//! `keepwire_readmissions_total`, `keepwire_probes_total`, `keepwire_idle_closes_total`,
//! `keepwire_protocol_violations_total`, `keepwire_submitted_total`,
//! `keepwire_responses_total`, `keepwire_late_responses_total`,
//! `keepwire_transparent_retries_total`, `keepwire_panics_total`,
//! `keepwire_heartbeats_sent_total`, `keepwire_heartbeat_timeouts_total`.
//!
//! Counters per node:
//!
//! | name | labels |
//! |---|---|
//! | `keepwire_node_connects_total` | `node` |
//! | `keepwire_node_closes_total` | `node`, `reason` (`write_timeout`, `setup_timeout`, `connect_failed`, `io`, `protocol`, `handshake_failed`, `auth_failed`, `certificate_rejected`, `heartbeat_timeout`, `evicted`, `quarantined`, `idle`, `node_removed`, `shutdown`) |
//! | `keepwire_node_write_timeouts_total` | `node` |
//! | `keepwire_node_evictions_total` | `node`, `reason` (`readmitted`, `epoch_changed`, `requested`) |
//! | `keepwire_node_quarantines_total` | `node`, `cause` (`connection_failures`, `request_timeouts`) |
//! | `keepwire_node_readmissions_total` | `node`, `via` (`probe`, `gave_up`, `application`, `answered`) |
//! | `keepwire_node_probes_total` | `node` |
//! | `keepwire_node_unwritable_total` | `node` (flips above the high watermark) |
//!
//! Gauges:
//!
//! | name | labels | value |
//! |---|---|---|
//! | `keepwire_node_pending_bytes` | `node` | bytes queued or being written |
//! | `keepwire_node_in_flight` | `node` | requests queued, being written or awaiting a response |
//! | `keepwire_node_writable` | `node` | 1 while below the watermarks |
//! | `keepwire_node_quarantined` | `node` | 1 while quarantined |
//! | `keepwire_node_state` | `node`, `state` | 1 for the current state |
//! | `keepwire_nodes` | `state` (`disconnected`, `connecting`, `handshaking`, `ready`, `closing`, `auth_failed`, `closed`) | nodes in that state |
//! | `keepwire_pending_bytes` | — | bytes pending across all nodes |
//! | `keepwire_panic_mode` | — | 1 while in panic mode |
//!
//! The driver updates them as it works: counters and the figures of every node it touched at
//! the end of each of its polls.
//!
//! # Writing an adapter for another runtime
//!
//! An adapter is a [`Runtime`]: four methods, usually on a cheap handle to the runtime.
//! keepwire-smol is the whole of one (about forty lines); the example
//! `adapters/driver/examples/thread_runtime.rs` builds one from scratch, a thread per task,
//! and runs a client on it (`cargo run -p keepwire-driver --example thread_runtime --features
//! async-io`).
//!
//! 1. **The clock**, [`Runtime::now`]: a monotonic `std::time::Instant`. It must be the
//!    clock the timers run on (a virtual clock, like tokio's paused time, moves keepwire's
//!    deadlines too). A coarse clock that reads a little behind its timers is fine.
//! 2. **Timers**, [`Runtime::new_timer`]: one [`Timer`] per driver, reset to each new
//!    deadline. `poll_fire` must be `Ready` once the deadline has passed, and a poll that
//!    returns `Pending` must have the waker it was given woken then (the driver polls a
//!    waiting timer again only once that waker woke); after it fired the timer may stay
//!    ready or stay pending until reset, because the driver resets it after every fire
//!    (edge-triggered timers, like async-io's, are fine). tokio's `Sleep` and
//!    async-io's `Timer` implement the trait already (features `tokio`, `async-io`).
//! 3. **Spawning**, [`Runtime::spawn`]: the driver is one `Send` future that runs until the
//!    client shuts down (or the last [`Client`] is dropped). It never blocks: it holds no
//!    lock across an await or a syscall.
//! 4. **Connecting**, [`Runtime::connect`]: the driver creates the socket, makes it
//!    non-blocking and applies the socket options; the runtime only connects it. Either hand
//!    it to the runtime's own connect ([`PreparedSocket::into_std`]) or start a non-blocking
//!    connect ([`PreparedSocket::begin_connect`]), register the stream with the reactor, wait
//!    until it is writable and call [`finish_connect`]. No timeout: the driver drops the
//!    future at the setup deadline. Return the stream as an [`IoStream`]: poll functions for
//!    reading, writing and vectored writing (implement `poll_write_vectored` natively: one
//!    `writev` per batch of frames, a plain write for a lone slice), each registering the
//!    waker when it returns `Pending`, and [`IoStream::socket`] ([`SocketRef::new`] on
//!    anything that owns a socket).
//!
//! Then a `client(config)` function returning a [`BoundClientBuilder`] makes the adapter as
//! convenient as the built-in ones. To test it, run keepwire's real-socket suite
//! (`tests/`) with it: `keepwire_tests::TestRuntime` is the one trait to implement.
//!
//! socket2 stays behind keepwire's [`PreparedSocket`] and [`SocketRef`] (as quinn keeps its
//! UDP socket behind its own type), so an adapter does not depend on socket2's version; a
//! [`SocketRef`] is `AsFd`, for an application that wants socket2 itself.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "async-io")]
pub mod async_io;
#[cfg(feature = "async-io-tls")]
pub mod async_io_tls;
mod client;
mod codec;
mod driver;
mod error;
mod handshake;
mod layer;
mod ready;
mod resolve;
mod runtime;
mod service;
mod socket;
mod sync;
mod telemetry;
#[cfg(feature = "tls")]
pub mod tls;

pub use client::{
    BoundClientBuilder, Client, ClientBuilder, ClientEvent, Events, NodeInfo, SocketInfo,
};
pub use codec::{Codec, Correlation, Decoded, Decoder, EncodeError, LengthPrefixed};
pub use error::{BuildError, CommandError, SendError, failure_of};
pub use handshake::{HandshakeError, HandshakeErrorKind, HandshakeHook, HandshakeIo};
/// keepwire's sans-IO core, re-exported whole so that one runtime crate is the only
/// dependency an application needs.
pub use keepwire_proto as proto;
pub use keepwire_proto::{
    CloseReason, Config, ConfigError, ConnId, Counters, Endpoint, EndpointError, Event,
    EvictReason, Failure, HandshakeFailure, Heartbeat, Keepalive, NodeId, NodeState, Outcome,
    Phase, QuarantineCause, Readmission, Reason, RequestId, SelectionRule, Sent, SocketOptions,
    SubmitError, Target, Unavailable, Violation,
};
pub use layer::{BufferedLayer, KernelAccounted};
pub use resolve::{ResolveError, Resolver, resolve_blocking};
pub use runtime::{BoxFuture, IoStream, Runtime, Timer, sleep_until};
pub use service::{Backpressure, ClientService};
pub use socket::{
    NotApplied, OptionReport, PreparedSocket, SocketOption, SocketReadback, SocketRef, Unapplied,
    apply_options, finish_connect,
};
