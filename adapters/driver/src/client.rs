//! The application's side: [`ClientBuilder`], the cloneable [`Client`] handle and the
//! [`Events`] stream. Every call is a command to the driver that owns the pool and the
//! sockets; results come back through a per-call reply. A send that finds the driver idle runs
//! its round itself, in its own poll (the runtime permitting: [`Runtime::drive_here`]).

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use keepwire_proto::{
    Config, ConnId, Counters, Endpoint, Event, HandleError, Heartbeat, Instant, NodeId, NodeState,
    Target,
};

use crate::codec::{Codec, LengthPrefixed};
use crate::driver::{Command, Driver, DriverChannels, NodeOp, Shared};
use crate::error::{BuildError, CommandError, SendError};
use crate::handshake::{HandshakeError, HandshakeHook};
use crate::ready::Readiness;
use crate::resolve::{Resolver, RuntimeResolver};
use crate::runtime::Runtime;
use crate::service::ClientService;
use crate::socket::{OptionReport, SocketReadback};
use crate::sync::{
    Hub, HubHandle, Next, Outbox, ReplyReceiver, ReplySender, Spares, Subscription, local_spares,
    reply,
};

/// Builds a [`Client`]: a keepwire [`Config`], driver options and the initial nodes.
pub struct ClientBuilder {
    config: Config,
    nodes: Vec<Endpoint>,
    codec: Arc<dyn Codec>,
    hook: Option<Arc<dyn HandshakeHook>>,
    resolver: Option<Arc<dyn Resolver>>,
    event_capacity: usize,
}

impl ClientBuilder {
    /// Starts from `config`, the built-in [`LengthPrefixed`] codec and no handshake.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            nodes: Vec::new(),
            codec: Arc::new(LengthPrefixed::default()),
            hook: None,
            resolver: None,
            event_capacity: 1024,
        }
    }

    /// Adds a node to connect to: an address (`SocketAddr`), or a name
    /// ([`Endpoint::name`], or `"db.example:5432".parse::<Endpoint>()`) that is resolved again
    /// on every connect attempt, with every address it has tried in turn (see
    /// [`resolver`](Self::resolver)).
    pub fn node(mut self, endpoint: impl Into<Endpoint>) -> Self {
        self.nodes.push(endpoint.into());
        self
    }

    /// Adds several nodes (addresses or names).
    pub fn nodes<E: Into<Endpoint>>(mut self, endpoints: impl IntoIterator<Item = E>) -> Self {
        self.nodes.extend(endpoints.into_iter().map(Into::into));
        self
    }

    /// Resolves the names of nodes added by name with `resolver` instead of the runtime's
    /// own ([`Runtime::resolve`]: std's resolver on the runtime's blocking pool). Tests use it
    /// to answer what they need without touching the system's hosts file.
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Turns heartbeats on: a connection idle (no request on it) for longer than `interval`
    /// gets the codec's ping ([`Codec::heartbeat`]), which must be answered within `timeout`,
    /// or the connection closes as a failure
    /// ([`CloseReason::HeartbeatTimeout`](keepwire_proto::CloseReason::HeartbeatTimeout)),
    /// before any request pays for it. Sets [`Config::heartbeat`]; off by default. Building
    /// fails with [`BuildError::NoHeartbeatPing`] if the codec has no ping.
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> Self {
        self.config.heartbeat = Some(Heartbeat { interval, timeout });
        self
    }

    /// Uses `codec` to frame requests and cut responses.
    pub fn codec(mut self, codec: impl Codec) -> Self {
        self.codec = Arc::new(codec);
        self
    }

    /// Uses the built-in codec with responses of at most `max_payload` bytes; a longer one is
    /// a protocol violation that closes its connection.
    pub fn max_frame(self, max_payload: u32) -> Self {
        self.codec(LengthPrefixed::new(max_payload))
    }

    /// The slow-drip defence: a response that started arriving but is not complete within
    /// `timeout` closes its connection with `Violation::TooSlow`. Zero disables it. Sets
    /// [`Config::frame_timeout`] (default 10 s), which the pool enforces.
    pub fn frame_timeout(mut self, timeout: Duration) -> Self {
        self.config.frame_timeout = timeout;
        self
    }

    /// Runs `hook` on every new connection before it carries requests (and turns on
    /// [`Config::handshake`]).
    pub fn handshake(mut self, hook: impl HandshakeHook) -> Self {
        self.hook = Some(Arc::new(hook));
        self.config.handshake = true;
        self
    }

    /// Changes the keepwire [`Config`] in place (timeouts, watermarks, thresholds, ...).
    pub fn config(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(&mut self.config);
        self
    }

    /// How many events each [`Events`] subscriber may have unread before the oldest are
    /// dropped (and counted in [`ClientEvent::Missed`]), rounded up to a power of two.
    /// Default 1024.
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity;
        self
    }

    /// Validates the configuration, spawns the driver on `runtime` and returns the client.
    ///
    /// When [`Config::seed`] is `None` the pool is seeded from OS entropy; [`Client::seed`]
    /// tells the seed in use.
    pub fn build(self, runtime: Arc<dyn Runtime>) -> Result<Client, BuildError> {
        if self.config.handshake && self.hook.is_none() {
            return Err(BuildError::MissingHandshakeHook);
        }
        if self.config.heartbeat.is_some() && !has_ping(&*self.codec) {
            return Err(BuildError::NoHeartbeatPing);
        }
        let resolver = self
            .resolver
            .unwrap_or_else(|| Arc::new(RuntimeResolver(Arc::clone(&runtime))));
        let (hub, events) = Hub::new(self.event_capacity);
        let readiness = Arc::new(Readiness::default());
        let mut config = self.config;
        config.seed.get_or_insert_with(entropy_seed);
        let (channels, outbox) = DriverChannels::new(hub, Arc::clone(&readiness));
        let (driver, initial_nodes) = Driver::new(
            runtime,
            config,
            &self.nodes,
            channels,
            self.codec,
            self.hook,
            resolver,
        )?;
        let runtime = driver.runtime();
        let seed = driver.seed();
        let (driver, task) = Shared::new(driver);
        runtime.spawn(Box::pin(task));
        Ok(Client {
            handle: Arc::new(Handle {
                driver,
                outbox,
                events,
                readiness,
                replies: Spares::new(),
                initial_nodes,
                seed,
            }),
        })
    }
}

/// A [`ClientBuilder`] with its runtime chosen, as each runtime crate's `client()` returns it:
/// [`build`](Self::build) needs no runtime argument, and [`builder`](Self::builder) reaches
/// every other option.
#[derive(Debug)]
pub struct BoundClientBuilder<R> {
    builder: ClientBuilder,
    runtime: R,
}

impl<R: Runtime> BoundClientBuilder<R> {
    /// A builder for `config` whose driver will run on `runtime`.
    pub fn new(config: Config, runtime: R) -> Self {
        Self {
            builder: ClientBuilder::new(config),
            runtime,
        }
    }

    /// Adds a node to connect to: an address, or a name resolved again on every connect
    /// attempt ([`ClientBuilder::node`]).
    pub fn node(mut self, endpoint: impl Into<Endpoint>) -> Self {
        self.builder = self.builder.node(endpoint);
        self
    }

    /// Adds several nodes (addresses or names).
    pub fn nodes<E: Into<Endpoint>>(mut self, endpoints: impl IntoIterator<Item = E>) -> Self {
        self.builder = self.builder.nodes(endpoints);
        self
    }

    /// Resolves node names with `resolver` instead of the runtime's own
    /// ([`ClientBuilder::resolver`]).
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.builder = self.builder.resolver(resolver);
        self
    }

    /// Turns heartbeats on ([`ClientBuilder::heartbeat`]).
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> Self {
        self.builder = self.builder.heartbeat(interval, timeout);
        self
    }

    /// Uses `codec` to frame requests and decode responses; its
    /// [`correlation`](Codec::correlation) says whether responses come in order or by id.
    /// Default: the built-in [`LengthPrefixed`].
    pub fn codec(mut self, codec: impl Codec) -> Self {
        self.builder = self.builder.codec(codec);
        self
    }

    /// Runs `hook` on every new connection before it carries requests (authentication, TLS,
    /// an API-version exchange), under the setup deadline.
    pub fn handshake(mut self, hook: impl HandshakeHook) -> Self {
        self.builder = self.builder.handshake(hook);
        self
    }

    /// The built-in codec with responses of at most `max_payload` bytes.
    pub fn max_frame(mut self, max_payload: u32) -> Self {
        self.builder = self.builder.max_frame(max_payload);
        self
    }

    /// The slow-drip defence ([`Config::frame_timeout`]).
    pub fn frame_timeout(mut self, timeout: Duration) -> Self {
        self.builder = self.builder.frame_timeout(timeout);
        self
    }

    /// How many events each subscriber may have unread before the oldest are dropped
    /// (rounded up to a power of two).
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.builder = self.builder.event_capacity(capacity);
        self
    }

    /// Changes the keepwire [`Config`] in place (timeouts, watermarks, thresholds, ...).
    pub fn config(mut self, change: impl FnOnce(&mut Config)) -> Self {
        self.builder = self.builder.config(change);
        self
    }

    /// Changes the underlying [`ClientBuilder`] as a whole.
    pub fn builder(mut self, change: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Self {
        self.builder = change(self.builder);
        self
    }

    /// Runs the driver on `runtime` instead (e.g. smol on an executor of your own).
    pub fn runtime(mut self, runtime: R) -> Self {
        self.runtime = runtime;
        self
    }

    /// Spawns the driver.
    pub fn build(self) -> Result<Client, BuildError> {
        self.builder.build(Arc::new(self.runtime))
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .field("nodes", &self.nodes)
            .field("codec", &self.codec)
            .field("handshake_hook", &self.hook.is_some())
            .field("resolver", &self.resolver.is_some())
            .finish()
    }
}

/// A handle to a running keepwire driver. Cheap to clone; `Send + Sync`; every clone talks to
/// the same driver. The driver shuts down when [`Client::shutdown`] is called or the last
/// clone is dropped.
#[derive(Clone, Debug)]
pub struct Client {
    handle: Arc<Handle>,
}

#[derive(Debug)]
struct Handle {
    /// The only strong sender of the driver's command queue.
    outbox: Outbox<Command>,
    /// The driver, for a send to run its round in place.
    driver: Arc<Shared>,
    events: HubHandle<ClientEvent>,
    readiness: Arc<Readiness>,
    /// The reply slots of sends that are over, for the next sends.
    replies: Spares<Result<Bytes, SendError>>,
    initial_nodes: Vec<NodeId>,
    seed: u64,
}

impl Handle {
    /// Queues `command` for the driver; hands it back if the driver has stopped. Inlined
    /// into the send, which then builds its command where the queue's push reads it.
    #[inline]
    fn push(&self, command: Command) -> Result<(), Command> {
        self.outbox.send(command)
    }
}

impl Client {
    /// Sends `payload` to `target` (a node, or the best node by keepwire's selection rule)
    /// and waits for the response payload, for at most `timeout` from now on the runtime's
    /// clock.
    ///
    /// Dropping the returned future cancels the request.
    ///
    /// An error says whether the request was refused before it started
    /// ([`SendError::sent`] is `None`) or how much of it the kernel had accepted when it
    /// ended; [`SendError::is_retryable`] tells whether sending it again is safe.
    ///
    /// A send that finds the driver idle (its task not woken, no other caller waiting) runs
    /// the driver's round in its own poll, when the runtime allows it
    /// ([`Runtime::drive_here`]; keepwire's runtime crates do): the request is written with no
    /// switch to the driver's task, and a peer that answers within the write is read in the
    /// same poll. Sends beside waiting callers leave their round to the task, which writes
    /// them in batches.
    ///
    /// In steady state a send allocates nothing beyond the caller's payload: the reply slot
    /// of a call that is over serves a later call on the same thread (of any client), or of
    /// any clone of this client on another (`tests/tests/real_allocations.rs`).
    ///
    /// Responses are read in place: with a codec that cuts them out of the read buffer (the
    /// built-in ones do), the returned `Bytes` is a slice of the chunk its connection read it
    /// into (64 KiB, or 256 KiB on a connection whose responses are over 8 KiB, shared with
    /// the responses read beside it; a response larger than that gets a buffer of its own),
    /// and that chunk stays allocated while any slice of it lives. Copy a small response you
    /// keep for long (`Bytes::copy_from_slice`) rather than keep a whole chunk for it.
    pub async fn send(
        &self,
        target: Target,
        payload: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<Bytes, SendError> {
        let (reply, receiver) = self.handle.replies.reply();
        let command = Command::Send {
            target,
            payload: payload.into(),
            timeout: nanos_of(timeout),
            reply,
        };
        if self.handle.outbox.push(command).is_err() {
            return Err(SendError::Shutdown);
        }
        self.handle.driver.deliver();
        CancelOnDrop {
            receiver,
            handle: &self.handle,
        }
        .await
    }

    /// A [`ClientService`] that sends to `target` with `timeout`, and whose readiness is
    /// keepwire's back-pressure for that target (not writable, in-flight limit, no node); with
    /// the `tower` feature, a `tower::Service`. Its first readiness is computed by the driver
    /// before this returns.
    pub async fn service(
        &self,
        target: Target,
        timeout: Duration,
    ) -> Result<ClientService, CommandError> {
        // The service exists (and is registered) first, so that dropping this future
        // unregisters it; the driver then publishes its state before answering.
        let service = ClientService::new(
            self.clone(),
            Arc::clone(&self.handle.readiness),
            target,
            timeout,
        );
        self.call(|reply| Command::Watch(target, reply)).await?;
        Ok(service)
    }

    /// The nodes given to the builder, in order.
    pub fn initial_nodes(&self) -> &[NodeId] {
        &self.handle.initial_nodes
    }

    /// The seed of this client's pool: [`Config::seed`] if it was set, else the one drawn
    /// from OS entropy when the client was built (so clients never share jitter). To replay a
    /// trace, build a client with `Config::seed` set to this value.
    pub fn seed(&self) -> u64 {
        self.handle.seed
    }

    /// Adds a node: an address, or a name resolved again on every connect attempt.
    pub async fn add_node(&self, endpoint: impl Into<Endpoint>) -> Result<NodeId, CommandError> {
        let endpoint = endpoint.into();
        self.call(|reply| Command::AddNode(endpoint, reply)).await
    }

    /// Removes a node: its connection closes and its requests end.
    pub async fn remove_node(&self, node: NodeId) -> Result<(), CommandError> {
        self.node_op(node, NodeOp::Remove).await
    }

    /// Takes a node out of selection.
    pub async fn disable_node(&self, node: NodeId) -> Result<(), CommandError> {
        self.node_op(node, NodeOp::Disable).await
    }

    /// Puts a node back into selection; its cached connections are evicted.
    pub async fn enable_node(&self, node: NodeId) -> Result<(), CommandError> {
        self.node_op(node, NodeOp::Enable).await
    }

    /// Records the node's restart epoch; a change evicts its connections.
    pub async fn set_epoch(&self, node: NodeId, epoch: u64) -> Result<(), CommandError> {
        self.node_op(node, NodeOp::SetEpoch(epoch)).await
    }

    /// Evicts the node's connection now; the next request opens a fresh one.
    pub async fn evict(&self, node: NodeId) -> Result<(), CommandError> {
        self.node_op(node, NodeOp::Evict).await
    }

    /// Opens a connection to the node now (once its reconnect backoff has passed) instead of
    /// waiting for a request. Refused with [`CommandError::WrongState`] while the node is
    /// quarantined.
    pub async fn connect(&self, node: NodeId) -> Result<(), CommandError> {
        self.node_op(node, NodeOp::Connect).await
    }

    /// A snapshot of keepwire's counters.
    pub async fn counters(&self) -> Result<Counters, CommandError> {
        self.call(Command::Counters).await
    }

    /// The node's state, its connection and, when connected, its socket options read back.
    pub async fn node_info(&self, node: NodeId) -> Result<NodeInfo, CommandError> {
        self.call(|reply| Command::NodeInfo(node, reply))
            .await?
            .ok_or(CommandError::StaleNode(node))
    }

    /// Subscribes to state changes, writability flips, evictions, quarantines and socket
    /// option reports, from now on. After shutdown the stream ends at once.
    pub fn subscribe(&self) -> Events {
        Events {
            subscription: self.handle.events.subscribe(),
        }
    }

    /// Stops gracefully: new sends fail with [`SendError::Shutdown`] at once, while every
    /// request already sent is still written and answered (or reaches its deadline); each
    /// connection closes once it holds none, and this returns when all are closed. Calling
    /// [`shutdown`](Self::shutdown) meanwhile cuts the drain short.
    pub async fn shutdown_gracefully(&self) {
        let (reply, receiver) = reply();
        if self.handle.push(Command::Drain(reply)).is_ok() {
            let _ = receiver.await;
        }
    }

    /// Closes every connection and ends every pending request with
    /// [`SendError::ConnectionLost`] whose cause is
    /// [`CloseReason::Shutdown`](keepwire_proto::CloseReason::Shutdown) and whose `sent`
    /// says whether the server may have it; returns once the driver has stopped. Later sends
    /// fail with [`SendError::Shutdown`], other calls with [`CommandError::Shutdown`].
    pub async fn shutdown(&self) {
        let (reply, receiver) = reply();
        if self.handle.push(Command::Shutdown(Some(reply))).is_ok() {
            let _ = receiver.await;
        }
    }

    async fn node_op(&self, node: NodeId, op: NodeOp) -> Result<(), CommandError> {
        self.call(|reply| Command::Node { node, op, reply })
            .await?
            .map_err(|e| match e {
                HandleError::WrongState => CommandError::WrongState(node),
                HandleError::StaleNode => CommandError::StaleNode(node),
                other => CommandError::Refused(node, other),
            })
    }

    async fn call<T>(
        &self,
        command: impl FnOnce(ReplySender<T>) -> Command,
    ) -> Result<T, CommandError> {
        let (reply, receiver) = reply();
        if self.handle.push(command(reply)).is_err() {
            return Err(CommandError::Shutdown);
        }
        receiver.await.map_err(|_| CommandError::Shutdown)
    }
}

/// Whether `codec` has a heartbeat ping: it frames one for a trial id.
fn has_ping(codec: &dyn Codec) -> bool {
    codec
        .heartbeat(Some(0), &mut bytes::BytesMut::new())
        .is_some()
}

/// A seed from OS entropy, without a dependency: std seeds every [`RandomState`] from the OS
/// (once per thread, then varied per instance), and hashing a process-wide counter keeps two
/// draws on one thread distinct even if the keys ever repeated.
///
/// [`RandomState`]: std::collections::hash_map::RandomState
fn entropy_seed() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(DRAWS.fetch_add(1, Ordering::Relaxed))
}

/// `timeout` in nanoseconds, saturated at `u64::MAX`: what `Instant` adds for it.
fn nanos_of(timeout: Duration) -> u64 {
    (Instant::ZERO + timeout).as_nanos()
}

/// Cancels the request if the caller stops waiting before the response: sends the id of the
/// request the driver bound to the reply back to it (before the bind, the closed reply tells
/// the driver instead).
struct CancelOnDrop<'a> {
    receiver: ReplyReceiver<Result<Bytes, SendError>>,
    handle: &'a Handle,
}

/// The answer, or [`SendError::Shutdown`] if the driver stopped without one. Awaited by
/// value, not through `&mut`: the send's state machine then polls it directly, and both its
/// polls (once to wait, once to take the answer) are inlined there.
impl Future for CancelOnDrop<'_> {
    type Output = Result<Bytes, SendError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().receiver)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(SendError::Shutdown)))
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(request) = self.receiver.abandon() {
            let _ = self.handle.push(Command::Abandon(request));
        }
        self.handle.replies.recycle(&mut self.receiver);
    }
}

// A send's reply slots are kept on the thread that ran the call first.
local_spares!(Result<Bytes, SendError>);

/// A node as the driver sees it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's connection state.
    pub state: NodeState,
    /// Where the node is: the address or the name it was added with.
    pub endpoint: Endpoint,
    /// The node's address: for a node added by address, that address; for one added by
    /// name, the address its last connection reached (`None` before the first).
    pub addr: Option<SocketAddr>,
    /// Its current connection, if any.
    pub conn: Option<ConnId>,
    /// Bytes queued or being written on it (frames plus per-frame overhead).
    pub pending_bytes: u64,
    /// Whether a request may be queued on it (below the watermarks).
    pub writable: bool,
    /// Requests queued, being written or awaiting a response.
    pub in_flight: usize,
    /// Bytes the connection's stream has taken but not yet delivered to the kernel whole
    /// ([`IoStream::held`](crate::IoStream::held)): a TLS layer's buffer. Zero on a plain
    /// socket. Not part of `pending_bytes`' frames' count: the frames they belong to are still
    /// counted there, in full.
    pub stream_held: usize,
    /// The connected socket, if the connection is past the TCP connect.
    pub socket: Option<SocketInfo>,
}

/// A connected socket: addresses, options read back with `getsockopt`, and the options that
/// could not be applied.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SocketInfo {
    /// The connection.
    pub conn: ConnId,
    /// The local address.
    pub local_addr: Option<SocketAddr>,
    /// The peer's address.
    pub peer_addr: Option<SocketAddr>,
    /// The options as the kernel reports them now.
    pub readback: SocketReadback,
    /// The options that were not applied when the socket was created.
    pub report: OptionReport,
}

/// Something the application may want to know about its nodes.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// An event from the keepwire pool: a state change with its reason, a writability flip,
    /// an eviction, a quarantine or a readmission (request outcomes go to their callers).
    /// Its instants are nanoseconds since the client was built, on the runtime's clock.
    Pool(Event),
    /// Some socket options could not be applied to a new connection.
    SocketOptions {
        /// The connection.
        conn: ConnId,
        /// What was not applied, and why.
        report: OptionReport,
    },
    /// A handshake hook failed.
    HandshakeFailed {
        /// The connection.
        conn: ConnId,
        /// The hook's error.
        error: HandshakeError,
    },
    /// The codec panicked while decoding what the peer sent on `conn`. The driver closed that
    /// connection (`Violation::Undecodable`); the others carry on.
    CodecPanicked {
        /// The connection.
        conn: ConnId,
        /// The panic's message.
        message: String,
    },
    /// This subscriber fell behind and this many events were dropped.
    Missed(u64),
}

/// A stream of [`ClientEvent`]s, from [`Client::subscribe`].
#[derive(Debug)]
pub struct Events {
    subscription: Subscription<ClientEvent>,
}

impl Events {
    /// The next event, or `None` once the client has shut down and every event was read.
    pub async fn recv(&mut self) -> Option<ClientEvent> {
        into_event(self.subscription.next().await)
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<ClientEvent> {
        self.subscription.try_next().and_then(into_event)
    }
}

fn into_event(next: Next<ClientEvent>) -> Option<ClientEvent> {
    match next {
        Next::Event(event) => Some(event),
        Next::Missed(n) => Some(ClientEvent::Missed(n)),
        Next::Closed => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EncodeError;
    use crate::codec::Correlation;
    use crate::runtime::DriverNeverRuns;

    fn build(builder: ClientBuilder) -> Result<Client, BuildError> {
        builder.build(Arc::new(DriverNeverRuns))
    }

    /// A codec without a heartbeat ping: the built-in one, with the trait's default
    /// `heartbeat`.
    #[derive(Debug)]
    struct NoPing;

    impl Codec for NoPing {
        fn correlation(&self) -> Correlation {
            LengthPrefixed::default().correlation()
        }

        fn encode(
            &self,
            payload: &[u8],
            id: Option<u64>,
            dst: &mut bytes::BytesMut,
        ) -> Result<(), EncodeError> {
            LengthPrefixed::default().encode(payload, id, dst)
        }

        fn decoder(&self) -> Box<dyn crate::Decoder> {
            LengthPrefixed::default().decoder()
        }
    }

    /// A handshake needs a hook, and heartbeats a codec with a ping: building says so. A
    /// codec without a ping builds when no heartbeat is asked for.
    #[test]
    fn a_build_needs_a_hook_for_a_handshake_and_a_ping_for_heartbeats() {
        let handshake = ClientBuilder::new(Config::default()).config(|c| c.handshake = true);
        assert_eq!(
            build(handshake).err(),
            Some(BuildError::MissingHandshakeHook)
        );
        let hooked = ClientBuilder::new(Config::default()).handshake(|io| async { Ok(io) });
        assert!(build(hooked).is_ok());

        let second = Duration::from_secs(1);
        let heartbeats = ClientBuilder::new(Config::default()).heartbeat(second, second);
        assert_eq!(
            build(heartbeats.codec(NoPing)).err(),
            Some(BuildError::NoHeartbeatPing)
        );
        assert!(build(ClientBuilder::new(Config::default()).codec(NoPing)).is_ok());
        let built_in = ClientBuilder::new(Config::default()).heartbeat(second, second);
        assert!(build(built_in).is_ok());
        assert!(has_ping(&LengthPrefixed::default()));
        assert!(!has_ping(&NoPing));
    }

    /// Clients never share jitter: each one built without a seed draws its own, and one
    /// built with a seed tells that one.
    #[test]
    fn each_client_without_a_seed_draws_its_own() {
        let seeds: std::collections::HashSet<u64> = (0..8)
            .map(|_| build(ClientBuilder::new(Config::default())).unwrap().seed())
            .collect();
        assert_eq!(seeds.len(), 8, "{seeds:?}");
        let mut config = Config::default();
        config.seed = Some(0x5eed);
        assert_eq!(build(ClientBuilder::new(config)).unwrap().seed(), 0x5eed);
    }

    #[test]
    fn a_builder_shows_its_settings_but_not_its_hooks() {
        let builder = ClientBuilder::new(Config::default())
            .node(SocketAddr::from(([127, 0, 0, 1], 11211)))
            .handshake(|io| async { Ok(io) });
        let shown = format!("{builder:?}");
        for part in ["ClientBuilder", "127.0.0.1:11211", "handshake_hook: true"] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
    }

    #[test]
    fn a_timeout_in_nanoseconds_saturates_as_duration_as_nanos_would() {
        let cases = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(1_500),
            Duration::from_nanos(u64::MAX),
            Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
            Duration::new(u64::MAX / 1_000_000_000, 999_999_999),
            Duration::from_secs(u64::MAX / 1_000_000_000 + 1),
            Duration::MAX,
        ];
        for timeout in cases {
            let expected = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
            assert_eq!(nanos_of(timeout), expected, "{timeout:?}");
        }
    }
}
