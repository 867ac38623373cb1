//! [`Pool`], the state machine, and its public surface: commands from the application,
//! reports from the adapter, and the outputs drained after every input.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;

use bytes::Bytes;

use crate::config::{Config, ConfigError};
use crate::counters::Counters;
use crate::event::{
    Action, CloseReason, Event, EvictReason, Failure, HandleError, NodeState, Outcome, Readmission,
    Reason, SubmitError, Unavailable, Violation,
};
use crate::ids::{ConnId, NodeId, RequestId};
use crate::node::Node;
use crate::requests::{Request, Requests, Stage};
use crate::rng::Rng;
use crate::select::Selection;
use crate::time::{Clock, Instant};
use crate::timers::TimerHeap;

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
/// ```
/// use bytes::Bytes;
/// use core::time::Duration;
/// use keepwire_proto::{Action, Config, Event, Instant, Pool, Target};
///
/// let mut now = Instant::ZERO;
/// let mut pool = Pool::new(Config::default(), now).unwrap();
/// let node = pool.add_node(now, "127.0.0.1:9000".parse().unwrap());
/// let req = pool.submit(now, Target::Best, now + Duration::from_secs(1), Bytes::from_static(b"ping")).unwrap();
/// loop {
///     // 1. Actions for the adapter: open, handshake, close.
///     while let Some(action) = pool.poll_action() {
///         if let Action::Open { conn, .. } = action {
///             pool.handle_connected(now, conn).unwrap(); // the adapter connected
///         }
///     }
///     // 2. Bytes to write: write them, report what the kernel accepted.
///     let conn = pool.current_conn(node).unwrap();
///     while let Some(bytes) = pool.poll_transmit(conn) {
///         pool.handle_written(now, conn, bytes.len()).unwrap();
///         pool.handle_response(now, conn, req, Bytes::from_static(b"pong")).unwrap();
///     }
///     // 3. Events for the application: outcomes, state changes, writability.
///     while let Some(event) = pool.poll_event() {
///         if let Event::RequestDone { outcome, .. } = event { println!("{outcome:?}"); return; }
///     }
///     // 4. Sleep until the next deadline (or the next I/O), then tell the pool the time.
///     now = pool.poll_timeout().unwrap_or(now + Duration::from_millis(10));
///     pool.handle_timeout(now);
/// }
/// ```
///
/// Outputs sit in three queues, each in the order it was produced: drain
/// [`poll_action`](Self::poll_action) first (so a connection exists before its bytes), then
/// [`poll_transmit`](Self::poll_transmit) for each ready connection, then
/// [`poll_event`](Self::poll_event); last, ask [`poll_timeout`](Self::poll_timeout) when to call
/// [`handle_timeout`](Self::handle_timeout) (which is safe to call early or twice).
///
/// Within one input, the requests a close ends are reported before the node's state change.
#[derive(Debug)]
pub struct Pool {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) rng: Rng,
    pub(crate) nodes: Vec<NodeSlot>,
    free_nodes: Vec<u32>,
    pub(crate) requests: Requests,
    pub(crate) timers: TimerHeap,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) counters: Counters,
    /// Pending outbound bytes across all nodes (for the memory budget).
    pub(crate) total_pending: u64,
    pub(crate) shut_down: bool,
}

/// The live node `id` in `nodes`: a borrow of the node table alone, so the caller can hold it
/// alongside other fields of the pool.
pub(crate) fn node_in(nodes: &mut [NodeSlot], id: NodeId) -> Option<&mut Node> {
    nodes
        .get_mut(id.index())
        .and_then(|s| s.node.as_mut())
        .filter(|n| n.id == id)
}

#[derive(Debug)]
pub(crate) struct NodeSlot {
    generation: u32,
    pub(crate) node: Option<Node>,
}

impl Pool {
    /// A pool with no nodes, after validating `config`.
    pub fn new(config: Config, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            rng: Rng::new(config.seed.unwrap_or(Config::FALLBACK_SEED)),
            config,
            clock: Clock::new(now),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            requests: Requests::default(),
            timers: TimerHeap::default(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            total_pending: 0,
            shut_down: false,
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

    /// Adds a node, enabled, with restart epoch 0. No connection is opened until a request or
    /// [`connect`](Self::connect) needs one.
    pub fn add_node(&mut self, now: Instant, addr: SocketAddr) -> NodeId {
        self.clock.advance(now);
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
        let id = NodeId {
            index,
            generation: slot.generation,
        };
        slot.node = Some(Node::new(id, addr));
        id
    }

    /// Removes a node: its connection is closed, every request on it ends with
    /// [`CloseReason::NodeRemoved`], and its handle becomes stale.
    pub fn remove_node(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        self.node(node)?;
        self.close(node, now, CloseReason::NodeRemoved, true);
        let slot = &mut self.nodes[node.index()];
        slot.node = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free_nodes.push(node.index);
        self.finish();
        Ok(())
    }

    /// Takes a node out of the enabled set: it is no longer selected and new requests to it are
    /// refused. Its connection stays cached and its requests go on; if it is enabled again,
    /// that cached connection is evicted.
    pub fn disable_node(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        self.clock.advance(now);
        self.node_mut(node)?.enabled = false;
        Ok(())
    }

    /// Puts a node back in the enabled set. If it had left it, every cached connection to it is
    /// evicted (flagged, then closed; queued requests move once to a fresh connection) and a
    /// quarantine is lifted. Enabling a node that never left does nothing.
    pub fn enable_node(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        let n = self.node_mut(node)?;
        if n.enabled {
            return Ok(());
        }
        n.enabled = true;
        self.readmit(node, now, Readmission::Application);
        self.evict_conn(node, now, EvictReason::Readmitted);
        self.finish();
        Ok(())
    }

    /// Records the node's restart epoch (e.g. a server start time or incarnation number). A
    /// changed epoch means the server is a new process: its cached connection is evicted, a
    /// quarantine is lifted and its backoff starts afresh. The same epoch again does nothing.
    pub fn set_epoch(&mut self, now: Instant, node: NodeId, epoch: u64) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        let n = self.node_mut(node)?;
        if n.epoch == epoch {
            return Ok(());
        }
        n.epoch = epoch;
        n.setup_failures = 0;
        n.disconnects = 0;
        n.failed_attempts = 0;
        if let NodeState::Disconnected { reconnect_at } = &mut n.state {
            *reconnect_at = (*reconnect_at).min(now);
        }
        self.readmit(node, now, Readmission::Application);
        self.evict_conn(node, now, EvictReason::EpochChanged);
        self.finish();
        Ok(())
    }

    /// Evicts the node's cached connection now (flagged, then closed; queued requests move once
    /// to a fresh connection).
    pub fn evict(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        self.node(node)?;
        self.evict_conn(node, now, EvictReason::Requested);
        self.finish();
        Ok(())
    }

    /// The server asked for backpressure: the node is not selected and refuses new requests
    /// until `until`. A throttle is never shortened by a later, earlier `until`.
    pub fn throttle(
        &mut self,
        now: Instant,
        node: NodeId,
        until: Instant,
    ) -> Result<(), HandleError> {
        self.clock.advance(now);
        let n = self.node_mut(node)?;
        n.throttled_until = n.throttled_until.max(until);
        Ok(())
    }

    /// Opens a connection to the node now, or as soon as its reconnect backoff allows, without
    /// waiting for a request. Refused for a quarantined node (the failure detector probes it)
    /// and after shutdown.
    pub fn connect(&mut self, now: Instant, node: NodeId) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        let n = self.node(node)?;
        if n.quarantine.is_some() || self.shut_down {
            return Err(HandleError::WrongState);
        }
        self.demand_connection(node, now);
        self.finish();
        Ok(())
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
    /// in the frame as its correlation id.
    pub fn next_request_id(&self) -> RequestId {
        self.requests.next_id()
    }

    /// Queues `frame` as a request to `target`, to be answered by `deadline`.
    ///
    /// Fails fast, queuing nothing, when the connection is not writable (above its high
    /// watermark), the memory budget is exhausted, the node is at its in-flight limit or
    /// unavailable, or no node can take it. Otherwise the request ends later with exactly one
    /// [`Event::RequestDone`]. A connection is opened if the node needs one.
    pub fn submit(
        &mut self,
        now: Instant,
        target: Target,
        deadline: Instant,
        frame: Bytes,
    ) -> Result<RequestId, SubmitError> {
        let now = self.clock.advance(now);
        let result = self.enqueue(now, target, deadline, frame);
        self.finish();
        result
    }

    /// Cancels a request. A queued one is dropped unsent; one already (partly) written ends
    /// now, and its late response is ignored. Ends with [`Outcome::Cancelled`].
    pub fn cancel(&mut self, now: Instant, id: RequestId) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        let request = self
            .requests
            .get(id)
            .filter(|r| !r.ended)
            .ok_or(HandleError::UnknownRequest)?;
        let node = request.node;
        self.abandon(id, now, Outcome::Cancelled);
        self.after_request_change(node, now);
        self.finish();
        Ok(())
    }

    /// Closes every connection at once, ends every request with [`CloseReason::Shutdown`] and
    /// refuses all further submits. Every node ends `Closed`. May follow
    /// [`shutdown_gracefully`](Self::shutdown_gracefully) to cut a drain short.
    pub fn shutdown(&mut self, now: Instant) {
        let now = self.clock.advance(now);
        self.shut_down = true;
        let ids: Vec<NodeId> = self.nodes().collect();
        for node in ids {
            self.close(node, now, CloseReason::Shutdown, true);
        }
        self.finish();
    }

    /// Refuses all further submits and lets every ready connection drain: it enters `Closing`,
    /// its requests are still written and answered (or reach their deadlines), and it closes
    /// once it holds none. A node without a ready connection closes at once, ending whatever it
    /// had queued with [`CloseReason::Shutdown`]. Every node ends `Closed`.
    pub fn shutdown_gracefully(&mut self, now: Instant) {
        let now = self.clock.advance(now);
        self.shut_down = true;
        let ids: Vec<NodeId> = self.nodes().collect();
        for node in ids {
            let Ok(n) = self.node_mut(node) else { continue };
            if n.is_ready() && n.requests > 0 {
                self.set_state(node, now, NodeState::Closing, Reason::Draining);
            } else if n.state != NodeState::Closing {
                self.close(node, now, CloseReason::Shutdown, true);
            }
        }
        self.finish();
    }

    // ---------------------------------------------------------------------------------------
    // Reports from the adapter. A report about a stale or unknown handle returns an error and
    // changes nothing.

    /// The TCP connect of `conn` completed.
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Connecting,
            |pool, node, now| {
                pool.connected(node, now);
                Ok(())
            },
        )
    }

    /// The TCP connect of `conn` failed.
    pub fn handle_connect_failed(
        &mut self,
        now: Instant,
        conn: ConnId,
        failure: Failure,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Connecting,
            |pool, node, now| {
                pool.close(node, now, CloseReason::ConnectFailed(failure), false);
                Ok(())
            },
        )
    }

    /// The application handshake on `conn` succeeded: the connection is `Ready`.
    pub fn handle_handshake_done(&mut self, now: Instant, conn: ConnId) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Handshaking,
            |pool, node, now| {
                pool.ready(node, now, Reason::HandshakeDone);
                Ok(())
            },
        )
    }

    /// The application handshake on `conn` failed; `auth` if it was refused authentication
    /// (the node enters `AuthFailed`). proto closes the connection.
    pub fn handle_handshake_failed(
        &mut self,
        now: Instant,
        conn: ConnId,
        auth: bool,
    ) -> Result<(), HandleError> {
        let reason = if auth {
            CloseReason::AuthFailed
        } else {
            CloseReason::HandshakeFailed
        };
        self.report(
            now,
            conn,
            |s| s == NodeState::Handshaking,
            |pool, node, now| {
                pool.close(node, now, reason, true);
                Ok(())
            },
        )
    }

    /// The kernel accepted `n` bytes of what [`poll_transmit`](Self::poll_transmit) last
    /// handed out for `conn` (0 if the write would block). More than was handed out is refused.
    pub fn handle_written(
        &mut self,
        now: Instant,
        conn: ConnId,
        n: usize,
    ) -> Result<(), HandleError> {
        self.report(now, conn, NodeState::is_established, |pool, node, now| {
            pool.written(node, conn, now, n)
        })
    }

    /// A response to `id` arrived on `conn`. A response for a request that is not in flight on
    /// that connection is a protocol violation: proto closes the connection (an
    /// [`Action::Close`] follows) and returns [`HandleError::UnknownRequest`]. A late response
    /// to a request that already ended (deadline, cancel) is dropped quietly.
    pub fn handle_response(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: RequestId,
        payload: Bytes,
    ) -> Result<(), HandleError> {
        self.report(now, conn, NodeState::is_established, |pool, node, now| {
            pool.response(node, conn, now, id, payload)
        })
    }

    /// `conn` failed or the peer closed it. Everything on it ends with
    /// [`CloseReason::Io`] (or [`CloseReason::ConnectFailed`] while connecting).
    pub fn handle_closed(
        &mut self,
        now: Instant,
        conn: ConnId,
        failure: Failure,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |_| true,
            |pool, node, now| {
                let reason = if pool.node(node)?.state == NodeState::Connecting {
                    CloseReason::ConnectFailed(failure)
                } else {
                    CloseReason::Io(failure)
                };
                pool.close(node, now, reason, false);
                Ok(())
            },
        )
    }

    /// The peer on `conn` broke the protocol. proto closes that connection only (an
    /// [`Action::Close`] follows); every request on it ends with [`CloseReason::Protocol`].
    pub fn handle_violation(
        &mut self,
        now: Instant,
        conn: ConnId,
        violation: Violation,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |_| true,
            |pool, node, now| {
                pool.counters.protocol_violations += 1;
                pool.close(node, now, CloseReason::Protocol(violation), true);
                Ok(())
            },
        )
    }

    /// Fires every timer due at `now`. Safe to call early (nothing happens) or twice.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock.advance(now);
        self.fire_timers(now);
        self.finish();
    }

    // ---------------------------------------------------------------------------------------
    // Outputs.

    /// The next action for the adapter.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next bytes to write on `conn`: the unwritten rest of its oldest frame. `None` when
    /// there is nothing to write or `conn` is not a ready, current connection.
    ///
    /// Write them (without blocking) and report how many the kernel accepted with
    /// [`handle_written`](Self::handle_written) before polling `conn` again; until then the
    /// same bytes are returned again. Bytes handed out can no longer be dropped unsent.
    pub fn poll_transmit(&mut self, conn: ConnId) -> Option<Bytes> {
        let node = self.current(conn, NodeState::is_established).ok()?;
        self.transmit(node)
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called; `None` when nothing
    /// is scheduled. Pure: calling it changes nothing.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|(at, _)| at)
    }

    // ---------------------------------------------------------------------------------------
    // Queries.

    /// Every node's handle, in slot order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .filter_map(|s| s.node.as_ref().map(|n| n.id))
    }

    /// The node's connection state.
    pub fn node_state(&self, node: NodeId) -> Option<NodeState> {
        self.node(node).ok().map(|n| n.state)
    }

    /// The node's address.
    pub fn node_addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.node(node).ok().map(|n| n.addr)
    }

    /// The node's current connection, from `Connecting` to `Ready`.
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
        self.node(node).ok().map(|n| n.requests)
    }

    /// Whether the failure detector has the node quarantined.
    pub fn is_quarantined(&self, node: NodeId) -> Option<bool> {
        self.node(node).ok().map(|n| n.quarantine.is_some())
    }

    /// Pending outbound bytes across all nodes.
    pub fn total_pending_bytes(&self) -> u64 {
        self.total_pending
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    // ---------------------------------------------------------------------------------------
    // Internals shared by the lifecycle modules.

    pub(crate) fn node(&self, id: NodeId) -> Result<&Node, HandleError> {
        self.nodes
            .get(id.index())
            .and_then(|s| s.node.as_ref())
            .filter(|n| n.id == id)
            .ok_or(HandleError::StaleNode)
    }

    pub(crate) fn node_mut(&mut self, id: NodeId) -> Result<&mut Node, HandleError> {
        node_in(&mut self.nodes, id).ok_or(HandleError::StaleNode)
    }

    /// The node of `conn` if `conn` is its current connection and its state passes `state_ok`.
    fn current(
        &self,
        conn: ConnId,
        state_ok: impl Fn(NodeState) -> bool,
    ) -> Result<NodeId, HandleError> {
        let node = self.node(conn.node).map_err(|_| HandleError::StaleConn)?;
        if !node.is_current(conn) {
            return Err(HandleError::StaleConn);
        }
        if !state_ok(node.state) {
            return Err(HandleError::WrongState);
        }
        Ok(node.id)
    }

    /// Every adapter report: clamps `now`, checks that `conn` is current and in a state
    /// `state_ok` accepts (else nothing changes), applies `apply`, then tidies the timers.
    fn report(
        &mut self,
        now: Instant,
        conn: ConnId,
        state_ok: impl Fn(NodeState) -> bool,
        apply: impl FnOnce(&mut Self, NodeId, Instant) -> Result<(), HandleError>,
    ) -> Result<(), HandleError> {
        let now = self.clock.advance(now);
        let node = self.current(conn, state_ok)?;
        let result = apply(self, node, now);
        self.finish();
        result
    }

    fn enqueue(
        &mut self,
        now: Instant,
        target: Target,
        deadline: Instant,
        frame: Bytes,
    ) -> Result<RequestId, SubmitError> {
        if self.shut_down {
            return Err(SubmitError::NodeUnavailable(Unavailable::Shutdown));
        }
        if deadline < now {
            return Err(SubmitError::DeadlinePassed);
        }
        let node = match target {
            Target::Node(id) => {
                let n = self.node(id).map_err(|_| SubmitError::StaleHandle)?;
                if !n.enabled {
                    return Err(SubmitError::NodeUnavailable(Unavailable::Disabled));
                }
                if n.quarantine.is_some() {
                    return Err(SubmitError::NodeUnavailable(Unavailable::Quarantined));
                }
                if now < n.throttled_until {
                    let until = n.throttled_until;
                    return Err(SubmitError::NodeUnavailable(Unavailable::Throttled {
                        until,
                    }));
                }
                id
            }
            Target::Best => match self.pick(now) {
                Selection::Ready(id) | Selection::Connecting(id) | Selection::Connect(id) => id,
                Selection::None { all_full } => return Err(SubmitError::NoNode { all_full }),
            },
        };
        let cost = (frame.len() as u64).saturating_add(self.config.per_frame_overhead);
        let n = self.node(node).map_err(|_| SubmitError::StaleHandle)?;
        if !n.outbound.is_writable() {
            self.counters.unwritable_rejections += 1;
            return Err(SubmitError::NotWritable);
        }
        if n.requests >= self.config.max_in_flight as usize {
            self.counters.in_flight_rejections += 1;
            return Err(SubmitError::InFlightLimit);
        }
        if self.over_budget(node, cost) {
            self.counters.memory_budget_rejections += 1;
            return Err(SubmitError::MemoryBudget);
        }
        Ok(self.accept(node, now, deadline, frame, cost))
    }

    /// The global memory budget: once queuing `cost` more would exceed it, a connection may
    /// only grow while it holds less than its fair share (the budget split over the nodes that
    /// hold pending bytes), so the ones holding the most are refused first and nothing is
    /// closed to free memory.
    fn over_budget(&self, node: NodeId, cost: u64) -> bool {
        let Some(budget) = self.config.memory_budget else {
            return false;
        };
        if self.total_pending.saturating_add(cost) <= budget {
            return false;
        }
        let Ok(n) = self.node(node) else { return true };
        let holders = self
            .nodes
            .iter()
            .filter_map(|s| s.node.as_ref())
            .filter(|m| m.outbound.pending() > 0 || m.id == node)
            .count() as u64;
        let share = budget / holders.max(1);
        n.outbound.pending().saturating_add(cost) > share
    }

    fn accept(
        &mut self,
        node: NodeId,
        now: Instant,
        deadline: Instant,
        frame: Bytes,
        cost: u64,
    ) -> RequestId {
        let id = self.requests.next_id();
        let high = self.config.high_watermark;
        let n = self.node_mut(node).expect("checked by the caller");
        let (seq, flip) = n.outbound.push(
            crate::outbound::Frame {
                id,
                bytes: frame,
                written: 0,
                cost,
                enqueued_at: now,
                handed_out: false,
                dropped: false,
            },
            high,
        );
        n.requests += 1;
        let pending = n.outbound.pending();
        let inserted = self.requests.insert(Request {
            node,
            deadline,
            stage: Stage::Queued { seq },
            retried: false,
            ended: false,
        });
        debug_assert_eq!(inserted, id);
        self.total_pending += cost;
        self.counters.submitted += 1;
        self.timers.push(
            deadline.expiry_after(core::time::Duration::ZERO),
            crate::timers::TimerKey::Request(id),
        );
        if flip.is_some() {
            self.events.push_back(Event::Writability {
                node,
                writable: false,
                pending,
            });
        }
        self.after_request_change(node, now);
        self.demand_connection(node, now);
        id
    }
}
