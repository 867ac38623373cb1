//! [`Pool`], the state machine, and its public surface: commands from the application, the
//! outputs drained after every input and the queries (the adapter's reports are in
//! [`reports`]).

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;

use bytes::Bytes;

use crate::config::{Config, ConfigError};
use crate::counters::Counters;
use crate::endpoint::Endpoint;
use crate::event::{
    Action, CloseReason, Event, EvictReason, HandleError, NodeState, Outcome, Readmission,
    SubmitError,
};
use crate::fifo::{Fifo, Queue};
use crate::ids::{ConnId, NodeId, RequestId};
use crate::node::{Census, Node, Shared};
use crate::outbound::{ByteCount, HandOut};
use crate::requests::Requests;
use crate::rng::Rng;
use crate::select::{Placement, SelectIndex, Selection};
use crate::time::{Clock, Instant};
use crate::timers::TimerHeap;

mod reports;
mod routing;

/// Where a request should go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// This node, whatever its load.
    Node(NodeId),
    /// The node [`Pool::select`] picks.
    Best,
}

/// The sans-IO state machine for a client's connections to a set of servers ("nodes").
///
/// It is fed time and I/O events and answers with actions, events and its next deadline. It
/// never reads a clock (every input takes `now`; a `now` earlier than one already seen is
/// clamped), never draws ambient randomness (jitter and selection come from
/// [`Config::seed`]), never sleeps and never touches a socket.
///
/// # The run loop
///
/// An adapter owns the sockets and does what the pool asks, in this order, after every input:
///
/// ```
/// use bytes::Bytes;
/// use core::time::Duration;
/// use keepwire_proto::{Action, Config, Event, Instant, Pool, Target};
///
/// let mut now = Instant::ZERO;
/// let mut pool = Pool::new(Config::default(), now).unwrap();
/// pool.add_node(now, "127.0.0.1:9000".parse::<core::net::SocketAddr>().unwrap());
/// let frame = Bytes::from_static(b"ping");
/// let req = pool.submit(now, Target::Best, now + Duration::from_secs(1), frame).unwrap();
/// let mut bufs = Vec::new();
/// loop {
///     // 1. Actions: open a socket (resolving a name first; report handle_connected_to /
///     //    handle_connect_failed later), run a handshake, send a heartbeat, close a socket.
///     while let Some(action) = pool.poll_action() {
///         if let Action::Open { conn, .. } = action {
///             pool.handle_connected(now, conn).unwrap(); // here: connected at once
///         }
///     }
///     // 2. Writes: only connections with bytes to send come out, each with its queued
///     //    frames for one vectored write. Report exactly what the kernel took; a short
///     //    write (0 if it would block) parks the connection until handle_writable.
///     while let Some(conn) = pool.poll_transmit(64 * 1024, &mut bufs) {
///         let taken: usize = bufs.iter().map(Bytes::len).sum(); // here: the kernel takes all
///         pool.handle_written(now, conn, taken).unwrap();
///         // ... later the socket is readable: each decoded response is reported.
///         pool.handle_response(now, conn, req, Bytes::from_static(b"pong")).unwrap();
///         pool.handle_received(now, conn, false).unwrap(); // no partial response buffered
///     }
///     // 3. Events for the application: outcomes, state changes, writability.
///     while let Some(event) = pool.poll_event() {
///         if let Event::RequestDone { outcome, .. } = event {
///             println!("{outcome:?}");
///             return;
///         }
///     }
///     // 4. Sleep until the pool's deadline or the next I/O, then say what time it is.
///     now = pool.poll_timeout().unwrap_or(now + Duration::from_millis(10));
///     pool.handle_timeout(now);
/// }
/// ```
///
/// Outputs sit in queues, each in the order it was produced: drain
/// [`poll_action`](Self::poll_action) first (so a connection exists before its bytes), then
/// [`poll_transmit`](Self::poll_transmit) (or [`poll_hand_out`](Self::poll_hand_out), which
/// lends the frames in place instead of a `Bytes` of each), then
/// [`poll_event`](Self::poll_event); last, ask
/// [`poll_timeout`](Self::poll_timeout) when to call [`handle_timeout`](Self::handle_timeout)
/// (which is safe to call early or twice). `poll_timeout` is the only clock an adapter waits
/// on: setup, write, frame and idle timeouts, backoffs, probes, heartbeats and request
/// deadlines are all in it, and every one of them fires for an adapter that does nothing but
/// sleep until it.
///
/// Within one input, the requests a close ends are reported before the node's state change.
///
/// # Names and heartbeats
///
/// A node added as [`Endpoint::Name`] is never resolved by the pool: every [`Action::Open`] carries
/// the name, and the adapter resolves it afresh for that attempt (never from an earlier attempt's
/// answer), within the action's setup deadline. It tries the addresses in turn, reports the first
/// that connects with [`handle_connected_to`](Self::handle_connected_to) (so
/// [`node_addr`](Self::node_addr) says where the node is now), or, when every address failed, the
/// last failure with [`handle_connect_failed`](Self::handle_connect_failed). A name that does not
/// exist is [`Failure::NameNotFound`](crate::Failure::NameNotFound), a final failure (see
/// [`CloseReason::is_final`]); any other resolver failure is
/// [`Failure::ResolveFailed`](crate::Failure::ResolveFailed), retried like a refused connect.
///
/// With [`Config::heartbeat`], an [`Action::Heartbeat`] asks for a ping on an idle
/// connection: the adapter encodes its protocol's ping for the given [`RequestId`] and hands
/// it over with [`submit_heartbeat`](Self::submit_heartbeat); from then on it is written and
/// answered like any request's frame, but the pool consumes its response (no
/// [`Event::RequestDone`]). An adapter with no ping may ignore the action: the connection is
/// then closed with [`CloseReason::HeartbeatTimeout`] at the ping's deadline.
#[derive(Debug)]
pub struct Pool {
    config: Config,
    clock: Clock,
    nodes: Vec<NodeSlot>,
    free_nodes: Vec<u32>,
    /// What the nodes' machines write into: the RNG, the request table, the timers, the
    /// action, event and transmit queues (connections with bytes to hand out, oldest first;
    /// entries for connections that closed meanwhile are skipped), the counters, the pending
    /// bytes across all nodes (for the memory budget) and the transparent retries a node
    /// handed back, routed before the input returns. Also what the machines read of the pool's
    /// state (the census, panic mode, shutdown), so that no copy of it is made for each input.
    shared: Shared,
    /// Where each node stands for selection, kept up to date by every input.
    index: SelectIndex,
}

#[derive(Debug)]
struct NodeSlot {
    generation: u32,
    node: Option<Node>,
}

impl Pool {
    /// A pool with no nodes, after validating `config`.
    pub fn new(config: Config, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            shared: Shared {
                retry: Vec::new(),
                rng: Rng::new(config.seed.unwrap_or(Config::FALLBACK_SEED)),
                timers: TimerHeap::default(),
                actions: VecDeque::new(),
                events: Queue::default(),
                transmit: Fifo::new(),
                requests: Requests::default(),
                counters: Counters::default(),
                total_pending: ByteCount::default(),
                write_timeout: (!config.write_timeout.is_zero())
                    .then(|| (Instant::ZERO + config.write_timeout).as_nanos()),
                idle_timers: !config.idle_timeout.is_zero() || config.heartbeat.is_some(),
                census: Census::default(),
                panic: false,
                shut_down: false,
            },
            config,
            clock: Clock::new(now),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            index: SelectIndex::default(),
        })
    }

    /// The seed behind every jitter draw and selection offset: [`Config::seed`], or
    /// [`Config::FALLBACK_SEED`] when that is `None`. Set it as `Config::seed` to replay a trace.
    pub fn seed(&self) -> u64 {
        self.config.seed.unwrap_or(Config::FALLBACK_SEED)
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    // ---------------------------------------------------------------------------------------
    // Commands from the application.

    /// Adds a node, enabled, with restart epoch 0: a [`SocketAddr`], or an [`Endpoint`] (a
    /// name is resolved by the adapter on every connect attempt). No connection is opened
    /// until a request or [`connect`](Self::connect) needs one.
    pub fn add_node(&mut self, now: Instant, endpoint: impl Into<Endpoint>) -> NodeId {
        let endpoint = endpoint.into();
        let now = self.clock.advance(now);
        let index = match self.free_nodes.pop() {
            Some(index) => index,
            None => {
                self.nodes.push(NodeSlot {
                    generation: 0,
                    node: None,
                });
                (self.nodes.len() - 1) as u32
            }
        };
        let slot = &mut self.nodes[index as usize];
        let id = NodeId::new(index, slot.generation);
        let node = Node::new(id, endpoint);
        self.shared.census.add(node.census());
        self.index
            .place(index, node.placement(now, self.config.selection));
        slot.node = Some(node);
        self.update_panic(now);
        id
    }

    /// Removes a node: its connection is closed, every request on it ends with
    /// [`CloseReason::NodeRemoved`], and its handle becomes stale.
    pub fn remove_node(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        self.command(now, node, |n, sink| {
            n.close(sink, CloseReason::NodeRemoved, true);
        })?;
        let slot = &mut self.nodes[node.index()];
        slot.node = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free_nodes.push(node.slot());
        self.index.place(node.slot(), Placement::OUT);
        Ok(())
    }

    /// Takes a node out of the enabled set: it is no longer selected and new requests to it are
    /// refused. Its connection stays cached and its requests go on; if it is enabled again,
    /// that cached connection is evicted.
    pub fn disable_node(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        self.command(now, node, |n, _| n.disable())
    }

    /// Puts a node back in the enabled set. If it had left it, every cached connection to it is
    /// evicted (flagged, then closed; queued requests move once to a fresh connection) and a
    /// quarantine is lifted. Enabling a node that never left does nothing.
    pub fn enable_node(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        self.command(now, node, |n, sink| {
            if n.enable() {
                n.readmit(sink, Readmission::Application);
                n.evict(sink, EvictReason::Readmitted);
            }
        })
    }

    /// Records the node's restart epoch (e.g. a server start time or incarnation number). A
    /// changed epoch means the server is a new process: its cached connection is evicted, a
    /// quarantine is lifted and its backoff starts afresh. The same epoch again does nothing.
    pub fn set_epoch(&mut self, now: Instant, node: NodeId, epoch: u64) -> Result<(), HandleError> {
        self.command(now, node, |n, sink| {
            if n.set_epoch(sink, epoch) {
                n.readmit(sink, Readmission::Application);
                n.evict(sink, EvictReason::EpochChanged);
                n.resume(sink);
            }
        })
    }

    /// Evicts the node's cached connection now (flagged, then closed; queued requests move once
    /// to a fresh connection).
    pub fn evict(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        self.command(now, node, |n, sink| n.evict(sink, EvictReason::Requested))
    }

    /// The server asked for backpressure: the node is not selected and refuses new requests
    /// until `until`. A throttle is never shortened by a later, earlier `until`.
    pub fn throttle(
        &mut self,
        now: Instant,
        node: NodeId,
        until: Instant,
    ) -> Result<(), HandleError> {
        self.command(now, node, |n, _| n.throttle(until))
    }

    /// Opens a connection to the node now, or as soon as its reconnect backoff allows, without
    /// waiting for a request. Refused for a quarantined node (the failure detector probes it)
    /// and after shutdown.
    pub fn connect(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        if self.shared.shut_down || (self.node(node)?.is_quarantined() && !self.shared.panic) {
            return Err(HandleError::WrongState);
        }
        self.command(now, node, Node::demand_connection)
    }

    /// Picks the node the next request should go to (KIP-601): from a random offset, a ready,
    /// writable node with free capacity and the fewest requests in flight; else a connecting
    /// one; else a disconnected one whose backoff has elapsed, ranked by
    /// [`Config::selection`]. Disabled, quarantined and throttled nodes are never chosen.
    pub fn select(&mut self, now: Instant) -> Selection {
        let now = self.clock.advance(now);
        self.pick(now)
    }

    /// The id the next successful [`submit`](Self::submit) will return, so a codec can put it
    /// in the frame as its correlation id (when no other input comes between: a heartbeat
    /// reserves an id too).
    pub fn next_request_id(&self) -> RequestId {
        self.shared.requests.next_id()
    }

    /// Queues `frame` as a request to `target`, to be answered by `deadline`.
    ///
    /// Fails fast, queuing nothing, when the connection is not writable (above its high
    /// watermark), the memory budget is exhausted, the node is at its in-flight limit or
    /// unavailable (disabled, quarantined, throttled, or backing off after a final connect
    /// failure: [`Unavailable::Failed`](crate::Unavailable::Failed)), or no node can take it
    /// ([`Target::Best`] fails with `Unavailable::Failed` when every admitted node is backing
    /// off after a final failure). Otherwise the request ends later with exactly one
    /// [`Event::RequestDone`]. A connection is opened if the node needs one.
    pub fn submit(
        &mut self,
        now: Instant,
        target: Target,
        deadline: Instant,
        frame: Bytes,
    ) -> Result<RequestId, SubmitError> {
        let now = self.clock.advance(now);
        let (node, cost) = self.admit(now, target, deadline, frame.len())?;
        let pinned = matches!(target, Target::Node(_));
        let id = self
            .with_node_in_census(now, node, |n, sink| {
                n.enqueue(sink, deadline, frame, cost, pinned)
            })
            .map_err(|_| SubmitError::StaleHandle)?;
        Ok(id)
    }

    /// Hands over the ping frame for the heartbeat `id` that an [`Action::Heartbeat`] asked
    /// for: it is queued on that connection like any frame (write timeout, watermarks, its
    /// place in an in-order protocol's response order). Refused, changing nothing, when `id`
    /// is not an outstanding heartbeat (its connection closed meanwhile:
    /// [`HandleError::UnknownRequest`]) or its frame was already handed over
    /// ([`HandleError::WrongState`]).
    pub fn submit_heartbeat(
        &mut self,
        now: Instant,
        id: RequestId,
        frame: Bytes,
    ) -> Result<(), HandleError> {
        let node = self
            .shared
            .requests
            .get(id)
            .filter(|r| r.heartbeat)
            .ok_or(HandleError::UnknownRequest)?
            .node;
        // The node refuses a heartbeat that is no longer its connection's outstanding one
        // (ended with its connection, or answered).
        self.command(now, node, |n, sink| n.submit_heartbeat(sink, id, frame))?
    }

    /// Cancels a request. A queued one is dropped unsent; one already (partly) written ends
    /// now, and its late response is ignored. Ends with [`Outcome::Cancelled`].
    pub fn cancel(&mut self, now: Instant, id: RequestId) -> Result<(), HandleError> {
        let node = self
            .shared
            .requests
            .get(id)
            .filter(|r| r.awaited())
            .ok_or(HandleError::UnknownRequest)?
            .node;
        self.command(now, node, |n, sink| {
            n.abandon(sink, id, Outcome::Cancelled);
        })
    }

    /// Closes every connection at once, ends every request with [`CloseReason::Shutdown`] and
    /// refuses all further submits. Every node ends `Closed`. May follow
    /// [`shutdown_gracefully`](Self::shutdown_gracefully) to cut a drain short.
    pub fn shutdown(&mut self, now: Instant) {
        self.shared.shut_down = true;
        self.update_panic(now); // a shut-down pool selects nothing: it leaves panic mode
        self.every_node(now, |n, sink| n.close(sink, CloseReason::Shutdown, true));
    }

    /// Refuses all further submits and lets every ready connection drain: it enters `Closing`,
    /// its requests are still written and answered (or reach their deadlines), and it closes
    /// once it holds none. A node without a ready connection closes at once, ending whatever it
    /// had queued with [`CloseReason::Shutdown`]. Every node ends `Closed`.
    pub fn shutdown_gracefully(&mut self, now: Instant) {
        self.shared.shut_down = true;
        self.update_panic(now); // a shut-down pool selects nothing: it leaves panic mode
        self.every_node(now, Node::shut_down_gracefully);
    }

    // ---------------------------------------------------------------------------------------
    // Outputs.

    /// The next action for the adapter.
    #[must_use]
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.shared.actions.pop_front()
    }

    /// The next connection with bytes to write, oldest first, with `out` (cleared first)
    /// filled with the unwritten rest of its queued frames in order: at least one frame, then
    /// further whole frames while the total stays within `max_bytes`, ready for one vectored
    /// write. `None` when no connection has anything to write: an adapter never visits an
    /// idle connection.
    ///
    /// Report what the kernel accepted with one [`handle_written`](Self::handle_written) for
    /// `conn` before it is handed out again; bytes handed out can no longer be dropped unsent
    /// until that report says none of a frame went out.
    #[must_use]
    pub fn poll_transmit(&mut self, max_bytes: usize, out: &mut Vec<Bytes>) -> Option<ConnId> {
        out.clear();
        // The usual case, a live connection at the front, straight through; the loop that
        // skips the entries of connections closed since is out of line. Each takes a closure
        // of its own: one shared as `&mut F` was called, not inlined (853 → 862
        // instructions per lifecycle).
        let conn = self.shared.transmit.pop_front()?;
        if self.hand_out(conn, max_bytes, |bytes, written| {
            take_rest(out, bytes, written)
        }) {
            return Some(conn);
        }
        self.hand_out_past_stale(max_bytes, |bytes, written| take_rest(out, bytes, written))
    }

    /// [`poll_transmit`](Self::poll_transmit) for an adapter that reads the frames where the
    /// pool keeps them: the same hand-out (the same connection, the same frames), with no
    /// `Bytes` taken of each. Read its bytes with [`handed_out`](Self::handed_out); report
    /// them with [`handle_written`](Self::handle_written) as after `poll_transmit`.
    #[must_use]
    pub fn poll_hand_out(&mut self, max_bytes: usize) -> Option<ConnId> {
        // As `poll_transmit`: the usual case straight through, the rest out of line.
        let conn = self.shared.transmit.pop_front()?;
        if self.hand_out(conn, max_bytes, |_, _| {}) {
            return Some(conn);
        }
        self.hand_out_past_stale(max_bytes, |_, _| {})
    }

    /// The rest of [`poll_transmit`](Self::poll_transmit) and
    /// [`poll_hand_out`](Self::poll_hand_out) after a stale entry at the transmit queue's
    /// front: the first connection after it with bytes to hand out, handed out to `take`.
    #[cold]
    #[inline(never)]
    fn hand_out_past_stale(
        &mut self,
        max_bytes: usize,
        mut take: impl FnMut(&Bytes, usize),
    ) -> Option<ConnId> {
        while let Some(conn) = self.shared.transmit.pop_front() {
            if self.hand_out(conn, max_bytes, &mut take) {
                return Some(conn);
            }
        }
        None
    }

    /// The outstanding hand-out of `conn` ([`poll_hand_out`](Self::poll_hand_out) or
    /// [`poll_transmit`](Self::poll_transmit)) where the pool keeps its frames: the
    /// unwritten rest of each, in order, until [`handle_written`](Self::handle_written)
    /// reports it. `None` when `conn` has none: never handed out, already reported, stale,
    /// or closed (a close ends its hand-out). Pure: an adapter may read it again, for a write
    /// that must be offered the same bytes once more.
    #[must_use]
    pub fn handed_out(&self, conn: ConnId) -> Option<HandOut<'_>> {
        self.node(conn.node).ok()?.handed_out(conn.generation)
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) may hand something out: `false` means it
    /// would return `None`; `true` may still be a connection that has nothing left by then.
    /// Pure: an adapter asks it to know whether its run loop must go round again.
    #[must_use]
    #[inline]
    pub fn has_transmit(&self) -> bool {
        !self.shared.transmit.is_empty()
    }

    /// Whether [`poll_action`](Self::poll_action) or [`poll_event`](Self::poll_event) has
    /// something to give: `false` means both would return `None`. Pure: an adapter asks it to
    /// skip draining both after an input that produced nothing.
    #[must_use]
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.shared.actions.is_empty() || !self.shared.events.is_empty()
    }

    /// The next event for the application.
    #[must_use]
    #[inline]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.shared.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called; `None` when nothing
    /// is scheduled. Pure: calling it changes nothing.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.shared.timers.next_instant()
    }

    // ---------------------------------------------------------------------------------------
    // Queries.

    /// Every node's handle, in slot order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.live_nodes().map(Node::id)
    }

    /// The node's connection state.
    pub fn node_state(&self, node: NodeId) -> Option<NodeState> {
        self.node(node).ok().map(Node::state)
    }

    /// Where the node is, as it was added.
    pub fn node_endpoint(&self, node: NodeId) -> Option<&Endpoint> {
        self.node(node).ok().map(Node::endpoint)
    }

    /// The node's address: an [`Endpoint::Addr`] node's own; for an [`Endpoint::Name`] node,
    /// the address the adapter last reported reaching
    /// ([`handle_connected_to`](Self::handle_connected_to)), `None` before the first.
    pub fn node_addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.node(node).ok().and_then(Node::addr)
    }

    /// The node's current connection, from `Connecting` to `Closing`.
    pub fn current_conn(&self, node: NodeId) -> Option<ConnId> {
        self.node(node).ok().and_then(Node::conn_id)
    }

    /// Pending outbound bytes of the node (frames plus per-frame overhead).
    pub fn pending_bytes(&self, node: NodeId) -> Option<u64> {
        self.node(node).ok().map(|n| n.outbound.pending())
    }

    /// Whether the node's outbound buffer accepts new requests (watermark hysteresis).
    pub fn is_writable(&self, node: NodeId) -> Option<bool> {
        self.node(node).ok().map(|n| n.outbound.is_writable())
    }

    /// Requests the node holds: queued, being written, awaiting a response, or timed out in
    /// flight and still awaited.
    pub fn in_flight(&self, node: NodeId) -> Option<usize> {
        self.node(node).ok().map(Node::requests)
    }

    /// The final failure ([`CloseReason::is_final`]) `node` is backing off from at `now`, and
    /// when that backoff ends: until then a request sent to the node fails at once with
    /// [`Unavailable::Failed`](crate::Unavailable::Failed). `None` when the node is not in a
    /// final backoff, or the handle is stale.
    pub fn final_failure(&self, now: Instant, node: NodeId) -> Option<(CloseReason, Instant)> {
        let failure = self.node(node).ok()?.final_failure(now)?;
        Some((failure.reason, failure.until))
    }

    /// Whether the failure detector has the node quarantined.
    pub fn is_quarantined(&self, node: NodeId) -> Option<bool> {
        self.node(node).ok().map(Node::is_quarantined)
    }

    /// Whether request `id` still holds its slot: live, or ended (deadline, cancel) after a
    /// byte of it was written and still awaiting its late response or its connection's close.
    /// An adapter that maps a protocol's own correlation ids to requests keeps each mapping
    /// while this is true, so a late response is recognised (and dropped by the pool) rather
    /// than taken for a stranger. A heartbeat's id ([`Action::Heartbeat`]) holds its slot the
    /// same way until its response is consumed or its connection closes.
    #[inline]
    pub fn holds(&self, id: RequestId) -> bool {
        self.shared.requests.get(id).is_some()
    }

    /// Whether the pool is in panic mode: too few admitted nodes are healthy, so quarantine
    /// is ignored ([`Config::panic_threshold`]).
    pub fn in_panic(&self) -> bool {
        self.shared.panic
    }

    /// Pending outbound bytes across all nodes.
    pub fn total_pending_bytes(&self) -> u64 {
        self.shared.total_pending.get()
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.shared.counters
    }
}

/// Adds to a hand-out what is left to write of `frame`, of which `written` bytes are out.
#[inline(always)]
fn take_rest(out: &mut Vec<Bytes>, frame: &Bytes, written: usize) {
    let rest = if written == 0 {
        frame.clone()
    } else {
        crate::hint::cold_path(); // the rest of a frame written in part
        frame.slice(written..)
    };
    crate::hint::push(out, rest);
}
