//! One node's machine: its connection state, current connection, outbound queue, timers,
//! failure counts and quarantine, as [quinn-proto] splits a `Connection` from its `Endpoint`.
//!
//! The machine owns everything about one node and nothing else. It writes what it produces
//! into a short-lived [`Sink`] borrowed from the [`Pool`](crate::Pool): the action, event and
//! transmit queues, the timer heap, the request table, the counters, the RNG and the config.
//! Every change of connection state goes through [`Node::apply`], and so through the one
//! transition table in [`table`].
//!
//! - `conn.rs`: opening under the setup timeout, becoming ready, closing, evicting.
//! - `io.rs`: handing out bytes, write reports, responses, ending requests.
//! - `detector.rs`: quarantine, probes, readmission.
//! - `mod.rs` (here): the machine's data, its queries, timers and the sink.
//!
//! [quinn-proto]: https://docs.rs/quinn-proto

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::net::SocketAddr;

use crate::config::Config;
use crate::counters::Counters;
use bytes::Bytes;

use crate::endpoint::Endpoint;
use crate::event::{Action, CloseReason, Event, NodeState, Outcome};
use crate::fifo::{Fifo, Queue};
use crate::ids::{ConnId, NodeId, RequestId};
use crate::outbound::{ByteCount, Outbound};
use crate::requests::{Awaited, Requests};
use crate::rng::Rng;
use crate::time::Instant;
use crate::timers::{NodeTimer, TimerHeap, TimerTable};

mod conn;
mod detector;
mod heartbeat;
mod io;
pub(crate) mod table;

use table::{Input, transition};

/// What a node's machine writes into while it handles one input: borrowed from the pool for
/// the length of the call.
///
/// A function out of line on the path of a usual input (its rare rest, called or not on
/// every request) takes the sink's parts, `now`, `config` and `pool`, and builds its own
/// sink from them: a sink lent to a call is built in memory by the caller, on its usual path
/// too, where the three stay in registers.
pub(crate) struct Sink<'a> {
    pub(crate) now: Instant,
    pub(crate) config: &'a Config,
    /// The pool's queues, tables, counters and state, lent whole (one pointer to pass, not
    /// nine, and no copy of the pool's state made for every input).
    pub(crate) pool: &'a mut Shared,
}

/// The parts of the pool every node's machine writes into (through its [`Sink`]).
#[derive(Debug)]
pub(crate) struct Shared {
    /// Requests to queue once more elsewhere, routed by the pool after this input.
    pub(crate) retry: Vec<Retry>,
    pub(crate) rng: Rng,
    pub(crate) timers: TimerHeap,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) events: Queue<Event>,
    /// Connections that have bytes to hand out (see [`Pool::poll_transmit`](crate::Pool)).
    pub(crate) transmit: Fifo<ConnId>,
    pub(crate) requests: Requests,
    pub(crate) counters: Counters,
    /// Pending outbound bytes across all nodes.
    pub(crate) total_pending: ByteCount,
    /// [`Config::write_timeout`] in nanoseconds, `None` when zero (no write timeout):
    /// converted once, not on every request's write timer.
    pub(crate) write_timeout: Option<u64>,
    /// [`Config::idle_timeout`] or [`Config::heartbeat`] is set: a ready connection that
    /// holds no request has a timer to arm. Without either (the default), a request's end
    /// has nothing to look at but a drain (see `Node::after_request_change`).
    pub(crate) idle_timers: bool,
    /// Admitted and healthy nodes, kept up to date by the pool after every node's input (for
    /// the panic threshold): a node's machine reads them as they were before its input.
    pub(crate) census: Census,
    /// In panic mode: quarantine is ignored.
    pub(crate) panic: bool,
    /// Shut down: no submit is accepted and nothing is selected.
    pub(crate) shut_down: bool,
}

/// Admitted (enabled, not closed) nodes, and how many of them are healthy (not
/// quarantined): the panic threshold's inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Census {
    pub(crate) admitted: usize,
    pub(crate) healthy: usize,
}

impl Census {
    /// Whether the healthy share is below `threshold` (zero disables panic mode). One
    /// comparison covers both edges: a threshold of zero (validated to lie in [0, 1]) and no
    /// admitted node (so none healthy either) each make the right side zero, which no count
    /// is below.
    pub(crate) fn panics(self, threshold: f64) -> bool {
        (self.healthy as f64) < threshold * self.admitted as f64
    }

    pub(crate) fn add(&mut self, other: Self) {
        self.admitted += other.admitted;
        self.healthy += other.healthy;
    }

    pub(crate) fn remove(&mut self, other: Self) {
        self.admitted -= other.admitted;
        self.healthy -= other.healthy;
    }
}

/// A request whose first connection failed with not one byte of it sent: to be queued once
/// more (transparent retry), or ended with `outcome` if nothing can take it.
#[derive(Debug)]
pub(crate) struct Retry {
    pub(crate) id: RequestId,
    pub(crate) frame: Bytes,
    pub(crate) cost: u64,
    pub(crate) outcome: Outcome,
}

/// The connection a node currently has (from `Connecting` to `Closing`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conn {
    pub(crate) generation: u32,
    /// When it became `Ready`; frames' write deadlines start no earlier than this.
    pub(crate) ready_at: Option<Instant>,
    /// Opened by the failure detector to probe a quarantined node.
    pub(crate) probe: bool,
    /// In the pool's transmit queue.
    pub(crate) scheduled: bool,
    /// A short write left the socket full: nothing is handed out until the adapter reports
    /// it writable again.
    pub(crate) blocked: bool,
    /// Since when a partly received response has been arriving (the frame timeout).
    pub(crate) partial_since: Option<Instant>,
    /// The outstanding heartbeat, if any (its request is in the pool's table, flagged as one).
    pub(crate) heartbeat: Option<RequestId>,
}

/// Whether the application and the failure detector let the node take requests.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    pub(crate) enabled: bool,
    pub(crate) quarantine: Option<Quarantine>,
    pub(crate) throttled_until: Instant,
}

/// A quarantined node's probe schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quarantine {
    pub(crate) probes_failed: u32,
    /// Every probe failed: the node stays excluded, or waits one more probe delay to be
    /// readmitted ([`AfterLastProbe`](crate::AfterLastProbe)).
    pub(crate) exhausted: bool,
}

/// The last connect failed for a final reason: the node backs off until `until`, and submits
/// to it fail at once meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FinalFailure {
    pub(crate) reason: CloseReason,
    pub(crate) until: Instant,
}

#[derive(Debug)]
pub(crate) struct Node {
    id: NodeId,
    endpoint: Endpoint,
    /// The address the adapter last reported reaching (`handle_connected_to`).
    reached: Option<SocketAddr>,
    /// The last final connect failure, kept until the node next reaches `Ready`, is readmitted
    /// or re-enabled, or its epoch changes.
    final_failure: Option<FinalFailure>,
    /// Written only by [`Node::apply`].
    state: NodeState,
    conn: Option<Conn>,
    /// The generation of the newest connection ever opened (current or closed).
    conn_generation: u32,
    pub(crate) outbound: Outbound,
    /// Requests fully written and awaiting a response, in the order they were written (the
    /// order an in-order protocol answers them), linked through the request table.
    awaiting: Awaited,
    /// Requests holding a slot for this node: queued, being written, awaiting a response, or
    /// ended by a deadline while in flight (the server may still be working on them).
    requests: usize,
    pub(crate) admission: Admission,
    epoch: u64,
    /// `m`: consecutive attempts that failed while still connecting (the setup timeout grows
    /// with it; reset when an attempt gets past the TCP connect).
    setup_failures: u32,
    /// `k`: disconnects since the node was last `Ready` (the reconnect backoff grows with it).
    disconnects: u32,
    /// Consecutive attempts that never reached `Ready` (for selection).
    failed_attempts: u32,
    last_attempt: Option<Instant>,
    /// Consecutive connection failures (for quarantine; reset by a response or readmission).
    pub(crate) failures: u32,
    /// Consecutive request timeouts (for quarantine; reset by a response or readmission).
    timeouts: u32,
    /// A connection should be opened as soon as the reconnect backoff allows.
    want_connection: bool,
    /// Listed in the selection index's touched slots since the index last placed the node
    /// ([`Node::touch`]): a touch then tests this byte where the index tested its own table.
    listed: bool,
    timers: TimerTable,
}

impl Node {
    pub(crate) fn new(id: NodeId, endpoint: Endpoint) -> Self {
        Self {
            id,
            endpoint,
            reached: None,
            final_failure: None,
            state: NodeState::Disconnected {
                reconnect_at: Instant::ZERO,
            },
            conn: None,
            conn_generation: 0,
            outbound: Outbound::new(),
            awaiting: Awaited::new(),
            requests: 0,
            admission: Admission {
                enabled: true,
                quarantine: None,
                throttled_until: Instant::ZERO,
            },
            epoch: 0,
            setup_failures: 0,
            disconnects: 0,
            failed_attempts: 0,
            last_attempt: None,
            failures: 0,
            timeouts: 0,
            want_connection: false,
            listed: false,
            timers: TimerTable::default(),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Queries.

    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The address: an `Addr` node's own, a `Name` node's last reached.
    pub(crate) fn addr(&self) -> Option<SocketAddr> {
        match self.endpoint {
            Endpoint::Addr(addr) => Some(addr),
            _ => self.reached,
        }
    }

    /// The final failure whose backoff is still running at `now`, if any: the node has no
    /// connection and may not open one before the backoff ends.
    pub(crate) fn final_failure(&self, now: Instant) -> Option<FinalFailure> {
        self.final_failure
            .filter(|f| now < f.until && self.conn.is_none())
    }

    pub(crate) fn state(&self) -> NodeState {
        self.state
    }

    pub(crate) fn conn_id(&self) -> Option<ConnId> {
        self.conn.map(|c| self.conn_handle(c.generation))
    }

    fn conn_handle(&self, generation: u32) -> ConnId {
        ConnId {
            node: self.id,
            generation,
        }
    }

    /// Whether `conn` names this node's current connection.
    pub(crate) fn is_current(&self, conn: ConnId) -> bool {
        conn.node == self.id && self.conn.is_some_and(|c| c.generation == conn.generation)
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.state == NodeState::Ready
    }

    /// Requests holding a slot for this node.
    pub(crate) fn requests(&self) -> usize {
        self.requests
    }

    pub(crate) fn is_quarantined(&self) -> bool {
        self.admission.quarantine.is_some()
    }

    /// When a new connection may be opened, if the node is between connections.
    pub(crate) fn reconnect_at(&self) -> Option<Instant> {
        match self.state {
            NodeState::Disconnected { reconnect_at } | NodeState::AuthFailed { reconnect_at } => {
                Some(reconnect_at)
            }
            _ => None,
        }
    }

    /// Consecutive attempts that never reached `Ready`, and when the last one started.
    pub(crate) fn attempts(&self) -> (u32, Option<Instant>) {
        (self.failed_attempts, self.last_attempt)
    }

    /// Whether the application and the failure detector allow new requests (in panic mode,
    /// quarantine is ignored).
    pub(crate) fn selectable(&self, now: Instant, panic: bool) -> bool {
        self.admission.enabled
            && (panic || self.admission.quarantine.is_none())
            && now >= self.admission.throttled_until
            && self.state != NodeState::Closed
    }

    /// This node's part of the pool's [`Census`].
    pub(crate) fn census(&self) -> Census {
        let admitted = self.admission.enabled && self.state != NodeState::Closed;
        Census {
            admitted: usize::from(admitted),
            healthy: usize::from(admitted && self.admission.quarantine.is_none()),
        }
    }

    /// Notes in the selection index that the node's placement may have changed, once until
    /// the index next places it ([`Node::placed`]). Every input on a node touches it (three
    /// times a request): the usual touch, of a node listed already, tests one byte of the
    /// node at hand instead of the index's table (a bounds check and a load further).
    #[inline(always)]
    pub(crate) fn touch(&mut self, index: &mut crate::select::SelectIndex) {
        // The mark is a copy of the index's own, kept here for speed: the two must agree.
        debug_assert!(
            !self.listed || index.is_touched(self.id.slot()),
            "{:?} marked as listed but not in the index's touched slots",
            self.id
        );
        if !self.listed {
            self.listed = true;
            index.touch(self.id.slot());
        }
    }

    /// The selection index placed the node (it is no longer listed as touched).
    pub(crate) fn placed(&mut self) {
        self.listed = false;
    }

    /// Whether the heap entry `(at, timer)` is still armed.
    pub(crate) fn timer_armed(&self, timer: NodeTimer, at: Instant) -> bool {
        self.timers.get(timer) == Some(at)
    }

    // ---------------------------------------------------------------------------------------
    // The one place the connection state changes.

    /// Moves the connection state as the transition table says for `input`, announcing the
    /// change. An input the table refuses changes nothing; callers only feed inputs that fit
    /// (a debug assertion, exercised by the fuzzer, holds them to it).
    fn apply(&mut self, sink: &mut Sink<'_>, input: Input) {
        let from = self.state;
        let Ok((to, reason)) = transition(from, input) else {
            debug_assert!(false, "{:?}: {input:?} does not apply in {from:?}", self.id);
            return;
        };
        if to == from {
            return;
        }
        self.state = to;
        sink.pool.events.push_back(Event::StateChanged {
            node: self.id,
            from,
            to,
            reason,
            at: sink.now,
        });
    }

    // ---------------------------------------------------------------------------------------
    // Commands the pool routes here.

    /// The application took the node out of the enabled set (its connection stays cached).
    pub(crate) fn disable(&mut self) {
        self.admission.enabled = false;
    }

    /// The application put the node back: whether it had left (and must be evicted). A node
    /// that had left forgets its last final failure (its backoff still runs).
    pub(crate) fn enable(&mut self) -> bool {
        let had_left = !core::mem::replace(&mut self.admission.enabled, true);
        if had_left {
            self.final_failure = None;
        }
        had_left
    }

    /// The adapter reported the address a connection reached.
    pub(crate) fn reached(&mut self, peer: SocketAddr) {
        self.reached = Some(peer);
    }

    /// A new restart epoch: whether it changed. A new server process starts with a clean
    /// backoff.
    pub(crate) fn set_epoch(&mut self, sink: &mut Sink<'_>, epoch: u64) -> bool {
        if self.epoch == epoch {
            return false;
        }
        self.epoch = epoch;
        self.final_failure = None;
        self.setup_failures = 0;
        self.disconnects = 0;
        self.failed_attempts = 0;
        if matches!(
            self.state,
            NodeState::Disconnected { .. } | NodeState::AuthFailed { .. }
        ) {
            self.apply(sink, Input::BackoffReset { at: sink.now });
        }
        true
    }

    /// Backpressure from the server until `until`; never shortened.
    pub(crate) fn throttle(&mut self, until: Instant) {
        self.admission.throttled_until = self.admission.throttled_until.max(until);
    }

    // ---------------------------------------------------------------------------------------
    // Timers.

    fn arm(&mut self, sink: &mut Sink<'_>, timer: NodeTimer, at: Instant) {
        self.arm_with(sink, timer, at, false);
    }

    /// [`Node::arm`]; with `inline`, the index's usual part for a stopped timer (the fresh
    /// entry's store) is inlined too, for a caller that has saved its registers already (a
    /// submit's write timer: as a call, with the entry built on the stack for the index's
    /// out-of-line rest, it cost 15 instructions per request).
    #[inline(always)]
    fn arm_with(&mut self, sink: &mut Sink<'_>, timer: NodeTimer, at: Instant, inline: bool) {
        let armed = self.timers.get(timer);
        if armed == Some(at) {
            return;
        }
        self.timers.set(timer, at);
        let (timers, node) = (&mut sink.pool.timers, self.id);
        match armed {
            Some(_) => {
                if inline {
                    crate::hint::cold_path(); // a re-arm where a stopped timer is usual
                }
                timers.schedule_node(at, node, timer);
            }
            // Stopped in the node's table, so the index holds no entry for it to move (the
            // write timer, armed by a request on an idle connection, is the usual case).
            None if inline => timers.schedule_stopped_node_inline(at, node, timer),
            None => timers.schedule_stopped_node(at, node, timer),
        }
    }

    /// Stops `timer`, taking its entry out of the pool's heap. (`#[inline(always)]`: a
    /// response inlined into the pool's report made it a call; the heap's part is out of
    /// line.)
    #[inline(always)]
    fn disarm(&mut self, sink: &mut Sink<'_>, timer: NodeTimer) {
        self.disarm_with(sink, timer, false);
    }

    /// [`Node::disarm`]; with `inline`, the heap's part is inlined too (the usual write
    /// report stopping its write timer).
    #[inline(always)]
    fn disarm_with(&mut self, sink: &mut Sink<'_>, timer: NodeTimer, inline: bool) {
        if self.timers.get(timer).is_some() {
            self.timers.stop(timer);
            if inline {
                sink.pool.timers.cancel_armed_node_inline(self.id, timer);
            } else {
                sink.pool.timers.cancel_armed_node(self.id, timer);
            }
        }
    }

    /// A node timer came due.
    pub(crate) fn on_timer(&mut self, sink: &mut Sink<'_>, timer: NodeTimer) {
        self.timers.stop(timer);
        match timer {
            NodeTimer::Setup => self.setup_timed_out(sink),
            NodeTimer::Reconnect => self.resume(sink),
            NodeTimer::WriteTimeout => self.write_timed_out(sink),
            NodeTimer::Probe => self.probe_due(sink),
            NodeTimer::Idle => self.idle_expired(sink),
            NodeTimer::Frame => self.frame_timed_out(sink),
            NodeTimer::Heartbeat => self.heartbeat_due(sink),
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
impl Node {
    /// The list of requests awaiting a response (for checks against the request table).
    pub(crate) fn awaiting(&self) -> &Awaited {
        &self.awaiting
    }

    /// How many of its timers are armed (each has its one entry in the pool's heap).
    pub(crate) fn armed_timers(&self) -> usize {
        self.timers.armed()
    }

    /// Checks the machine's own accounting against the request table.
    pub(crate) fn check_invariants(
        &self,
        config: &Config,
        held: usize,
    ) -> Result<(), alloc::string::String> {
        use alloc::format;
        let (high, low) = (config.high_watermark, config.low_watermark);
        let pending = self.outbound.pending();
        if pending != self.outbound.recount() {
            return Err(format!(
                "{:?}: pending {pending} != sum of frames {}",
                self.id,
                self.outbound.recount()
            ));
        }
        if pending > high && self.outbound.is_writable() {
            return Err(format!("{:?}: writable above the high watermark", self.id));
        }
        if pending < low && !self.outbound.is_writable() {
            return Err(format!("{:?}: unwritable below the low watermark", self.id));
        }
        if held != self.requests {
            return Err(format!(
                "{:?}: holds {held} requests, counted {}",
                self.id, self.requests
            ));
        }
        let has_conn = matches!(
            self.state,
            NodeState::Connecting | NodeState::Handshaking | NodeState::Ready | NodeState::Closing
        );
        if self.conn.is_some() != has_conn {
            return Err(format!(
                "{:?}: connection {:?} in state {:?}",
                self.id, self.conn, self.state
            ));
        }
        if self.conn.is_some_and(|c| c.scheduled && c.blocked) {
            return Err(format!("{:?}: scheduled while blocked", self.id));
        }
        // An idle ready connection always has a heartbeat due, and an outstanding ping always
        // has its deadline: an adapter that only sleeps until `poll_timeout` sees both.
        let idle = self.requests == 0 || self.outstanding_heartbeat().is_some();
        if config.heartbeat.is_some()
            && self.state == NodeState::Ready
            && idle
            && self.timers.get(NodeTimer::Heartbeat).is_none()
        {
            return Err(format!("{:?}: idle and ready, no heartbeat timer", self.id));
        }
        Ok(())
    }

    /// The connection's outstanding heartbeat.
    pub(crate) fn outstanding_heartbeat(&self) -> Option<RequestId> {
        self.conn.and_then(|c| c.heartbeat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Heartbeat;
    use core::time::Duration;

    /// A node with a ready connection, built by hand so a check can be shown a broken state.
    fn ready_node(requests: usize, heartbeat: Option<RequestId>) -> Node {
        let id = NodeId::new(0, 0);
        let mut node = Node::new(id, SocketAddr::from(([127, 0, 0, 1], 9000)).into());
        node.state = NodeState::Ready;
        node.conn = Some(Conn {
            generation: 1,
            ready_at: Some(Instant::from_secs(1)),
            probe: false,
            scheduled: false,
            blocked: false,
            partial_since: None,
            heartbeat,
        });
        node.requests = requests;
        node
    }

    #[test]
    fn an_idle_ready_connection_without_a_heartbeat_timer_fails_its_check() {
        let mut config = Config::default();
        config.heartbeat = Some(Heartbeat {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        });
        let ping = RequestId::new(7, 0);
        // Idle (no request), or busy only with its outstanding ping: a timer must be armed.
        for (requests, heartbeat) in [(0, None), (1, Some(ping))] {
            let mut node = ready_node(requests, heartbeat);
            let err = node.check_invariants(&config, requests).unwrap_err();
            assert!(err.contains("no heartbeat timer"), "{err}");
            node.timers.set(NodeTimer::Heartbeat, Instant::from_secs(2));
            assert_eq!(node.check_invariants(&config, requests), Ok(()));
        }
        // Busy with a request and no ping out: no heartbeat is due.
        assert_eq!(ready_node(1, None).check_invariants(&config, 1), Ok(()));
        config.heartbeat = None;
        assert_eq!(ready_node(0, None).check_invariants(&config, 0), Ok(()));
    }

    #[test]
    fn the_pool_panics_only_below_the_healthy_share() {
        let census = |admitted, healthy| Census { admitted, healthy };
        // Strictly below: half of four healthy is not below a threshold of a half.
        assert!(!census(4, 2).panics(0.5));
        assert!(census(4, 1).panics(0.5));
        assert!(census(4, 3).panics(1.0));
        assert!(!census(4, 4).panics(1.0));
        // A threshold of zero never panics, not even with every node quarantined; nor does a
        // pool with no admitted node, whatever the threshold.
        assert!(!census(4, 0).panics(0.0));
        assert!(!census(0, 0).panics(1.0));
        assert!(census(1, 0).panics(f64::MIN_POSITIVE));
    }
}
