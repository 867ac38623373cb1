//! An operation interpreter and a reference model, shared by the cargo-fuzz targets and the
//! property tests (enabled by the `fuzzing` feature).
//!
//! [`run`] plays the application and a scripted adapter against a [`Pool`] from a list of
//! [`Op`]s. The outputs of every pool call are drained into the model at once, and it checks:
//! - nothing panics, and the pool's own accounting is consistent ([`Pool::check_invariants`]);
//!   no bytes are handed out for a closed or stale connection;
//! - every accepted request ends exactly once, a refused one never; after a final shutdown
//!   every accepted request has ended;
//! - the peers (`peer.rs`) reassemble every frame: each arrives whole and once, and nothing
//!   that ended unsent ever reaches a peer; what each outcome says was sent is exactly what
//!   the kernel took (`wire.rs`);
//! - the failure detector (`model.rs`): consecutive connection failures and request timeouts
//!   per node against their thresholds, reset by a response, an answered heartbeat or a
//!   readmission; every `Quarantined` and `Readmitted` event is one the model predicted, and
//!   [`Pool::is_quarantined`] agrees;
//! - timers (`timing.rs`): each fires no earlier than its config allows and no later than the
//!   time step that passes its instant (setup timeout and backoffs within their jitter, write
//!   timeouts, request deadlines, heartbeats and their deadlines, idle closes);
//! - pending bytes per node from the model's own frames, and every writability flip: strictly
//!   above the high watermark, below the low one, once per crossing, on that node;
//! - results of commands and reports (`commands.rs`): `connect`, a submit to a named node, an
//!   adapter report in the wrong state, a write report of more than was handed out; and every
//!   field of [`Counters`](crate::Counters);
//! - selection's index picks what a linear scan of the rule picks, from every offset;
//!   state-change events chain; panic-mode events alternate and match the pool.
//!
//! With `KEEPWIRE_FUZZ_TRACE` set, a session prints its config and every op, action and event
//! (to replay a crash: `KEEPWIRE_FUZZ_TRACE=1 cargo fuzz run pool_ops <artifact>`).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;

mod adapter;
mod checks;
mod commands;
mod model;
mod peer;
mod timing;
mod wire;

use model::{Expected, NodeModel, Nodes, Req};
use peer::{Stream, frame};

use crate::{
    Config, ConnId, Failure, Instant, NodeId, NodeState, Pool, RequestId, Target, Violation,
};

/// One step of a fuzzed session. Small integers pick among the nodes, connections and requests
/// the session has seen (modulo their count), so every input is meaningful.
#[derive(Clone, Debug, Arbitrary)]
#[allow(missing_docs)]
pub enum Op {
    AddNode,
    RemoveNode(u8),
    Disable(u8),
    Enable(u8),
    SetEpoch(u8, u8),
    Evict(u8),
    Throttle(u8, u16),
    Connect(u8),
    Select,
    Submit {
        node: Option<u8>,
        len: u16,
        deadline_ms: u16,
    },
    Cancel(u16),
    Connected(u8),
    ConnectFailed(u8),
    HandshakeDone(u8),
    /// The handshake fails: `kind` picks an ordinary failure, a refused authentication or a
    /// rejected certificate.
    HandshakeFailed(u8, u8),
    /// The kernel accepts up to `accept` bytes on the node's connection.
    Write {
        node: u8,
        accept: u16,
    },
    Respond {
        node: u8,
        pick: u16,
    },
    RespondUnknown(u8, u64),
    /// The peer answers the oldest complete frame it received, as an in-order protocol does.
    RespondInOrder(u8),
    /// The peer answers the frame still arriving on the node's connection.
    RespondArriving(u8),
    /// A command on a node handle from before its removal: refused, nothing changes.
    StaleNode(u8, u8),
    /// A hard shutdown, on one value in 64 only: every request ends at once.
    Shutdown(u8),
    Closed(u8, u8),
    Violation(u8),
    /// A report on a connection from the list of every connection ever opened (mostly stale).
    StaleReport {
        conn: u16,
        kind: u8,
    },
    Advance {
        micros: u32,
    },
    AdvanceLong {
        secs: u16,
    },
    TimeGoesBack {
        micros: u32,
    },
    /// A graceful shutdown, on one value in 64 only: it ends the session's useful life.
    ShutdownGracefully(u8),
    /// A healthy peer's turn on the node: connect, handshake, accept every byte, answer all.
    Serve(u8),
    /// The peer stops reading in the middle of a frame: `3 + pile % 8` requests are queued on
    /// the node, the socket takes one byte (the oldest frame stays half-written and the
    /// connection blocked), then every piled request but the oldest, the newest and the
    /// `keep`-th (if any) ends unsent, one at a time, by cancel or at its deadline. Reaches
    /// the queue's compaction (tombstones behind a stuck frame) and, as `then` says, the
    /// eviction of a connection holding a half-written frame.
    Stall {
        node: u8,
        pile: u8,
        keep: Option<u8>,
        by_deadline: bool,
        then: StallEnd,
    },
    /// The adapter sleeps until the pool's next deadline ([`Pool::poll_timeout`]): exactly, or
    /// (odd `early`) one nanosecond before it, when nothing may fire yet.
    Sleep {
        early: u8,
    },
    /// `wait_us` microseconds on, one request to the node, which a healthy peer answers at
    /// once ([`Op::Serve`]): a ready connection busy for an instant, whose idle and heartbeat
    /// clocks restart. With `abandon`, the application cancels it once written, before its
    /// answer (which the peer still owes: a later response is a late one).
    Exchange {
        node: u8,
        len: u16,
        wait_us: u16,
        abandon: bool,
    },
}

/// What a session reached, so tests can see which mechanisms a corpus exercises.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reached {
    /// The pool's counters at the end of the session.
    pub counters: crate::Counters,
    /// Compactions of an outbound queue (frames dropped behind a stuck one).
    pub compactions: u64,
    /// Evictions of a connection whose peer had received part of a frame.
    pub evicted_half_written: u64,
}

/// How an [`Op::Stall`] ends.
#[derive(Clone, Copy, Debug, Arbitrary)]
pub enum StallEnd {
    /// The frame stays stuck: later operations meet it.
    Stuck,
    /// The application evicts the stalled connection.
    Evicted,
    /// The stalled connection is evicted and a healthy peer serves the fresh one, which
    /// carries the requests the eviction kept ([`Op::Serve`]).
    EvictedThenServed,
}

/// Runs the operations encoded in `data`; panics on the first broken invariant. Returns what
/// the session reached.
pub fn run(data: &[u8]) -> Reached {
    let mut u = Unstructured::new(data);
    let Ok(config) = config(&mut u) else {
        return Reached::default();
    };
    let mut ops: Vec<Op> = Vec::new();
    while ops.len() < 1024 {
        match u.arbitrary() {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    let batch = u.int_in_range(1..=2048).unwrap_or(1);
    let mut session = Session::new(config, batch);
    for op in &ops {
        session.step(op);
        session
            .check()
            .unwrap_or_else(|e| panic!("after {op:?}: {e}"));
    }
    let reached = Reached {
        counters: session.pool.counters(),
        compactions: session.compactions(),
        evicted_half_written: session.evicted_half_written,
    };
    session
        .finish()
        .unwrap_or_else(|e| panic!("at shutdown: {e}"));
    reached
}

/// A small config drawn from the input: tight watermarks and short timeouts so every mechanism
/// fires within a few operations.
fn config(u: &mut Unstructured<'_>) -> arbitrary::Result<Config> {
    let mut c = Config::default();
    c.seed = Some(u.arbitrary()?);
    c.setup_timeout = Duration::from_millis(u.int_in_range(1..=200)?);
    // Jitter from none to nearly all of the value: the draws' extremes matter most there.
    let jitter = [0.0, 0.2, 0.5, 0.999][u.int_in_range(0..=3usize)?];
    c.setup_timeout_jitter = jitter;
    c.reconnect_jitter = jitter;
    c.setup_timeout_max = c.setup_timeout * u.int_in_range(1..=4)?;
    c.reconnect_backoff = Duration::from_millis(u.int_in_range(1..=50)?);
    c.reconnect_backoff_max = c.reconnect_backoff * u.int_in_range(1..=8)?;
    c.write_timeout = Duration::from_millis(u.int_in_range(0..=300)?);
    c.high_watermark = u.int_in_range(1..=4096)?;
    c.low_watermark = u.int_in_range(0..=c.high_watermark)?;
    c.per_frame_overhead = u.int_in_range(0..=96)?;
    c.max_in_flight = if u.arbitrary()? {
        u.int_in_range(1..=8)?
    } else {
        1_000
    };
    c.handshake = u.arbitrary()?;
    c.quarantine_after_failures = u.int_in_range(1..=4)?;
    c.quarantine_after_timeouts = u.int_in_range(1..=6)?;
    c.panic_threshold = f64::from(u.int_in_range(0..=4u8)?) / 4.0;
    c.retry_unsent = u.arbitrary()?;
    c.frame_timeout = Duration::from_millis(u.int_in_range(0..=300)?);
    c.probe_backoff = Duration::from_millis(u.int_in_range(1..=500)?);
    c.probe_retries = u.int_in_range(0..=3)?;
    if u.arbitrary()? {
        c.after_last_probe = crate::AfterLastProbe::Readmit;
    }
    if u.arbitrary()? {
        c.selection = crate::SelectionRule::LeastRecentlyAttempted;
    }
    c.memory_budget = if u.arbitrary()? {
        Some(u.int_in_range(1..=8192)?)
    } else {
        None
    };
    c.idle_timeout = Duration::from_millis(u.int_in_range(0..=500)?);
    // Drawn from values already drawn, so that every corpus input keeps its meaning: a final
    // failure's backoff within reach of the time steps, and heartbeats.
    c.final_failure_backoff = c.reconnect_backoff_max * 4;
    // Heartbeats on one seed in two; in half of those without the idle timeout, which would
    // otherwise close most idle connections within the time step that asks for their ping.
    let seed = c.seed.unwrap_or(0);
    if seed % 2 == 0 {
        c.heartbeat = Some(crate::Heartbeat {
            interval: c.reconnect_backoff,
            timeout: c.probe_backoff,
        });
        if seed % 4 == 0 {
            c.idle_timeout = Duration::ZERO;
        }
    }
    Ok(c)
}

/// The session: the pool, the scripted world around it, and the reference model.
struct Session {
    pool: Pool,
    /// The pool's config, as the model reads it.
    config: Config,
    now: Instant,
    nodes: Vec<NodeId>,
    /// Every connection ever opened.
    conns: Vec<ConnId>,
    /// Bytes each connection's peer received, parsed into complete frames.
    streams: BTreeMap<ConnId, Stream>,
    /// Accepted requests not yet ended, as the model knows them.
    reqs: BTreeMap<RequestId, Req>,
    /// The open requests by deadline.
    deadlines: BTreeSet<(Instant, RequestId)>,
    /// Requests that ended.
    ended: BTreeSet<RequestId>,
    /// Requests that ended with not one byte sent: none may ever reach a peer.
    never_sent: BTreeSet<RequestId>,
    /// Requests some peer received a frame header of.
    on_wire: BTreeSet<RequestId>,
    /// Requests and pings the kernel took a byte of.
    touched: BTreeSet<RequestId>,
    /// Hand-outs the adapter holds and has not reported yet, with the requests whose frames
    /// (or their rest) they carry.
    handed: BTreeMap<ConnId, (Vec<Bytes>, Vec<RequestId>)>,
    /// Hand-outs taken so far: every other one through `poll_hand_out` and read in place,
    /// the others through `poll_transmit`.
    hand_outs: u64,
    /// The byte budget of each `poll_transmit`.
    batch: usize,
    trace: bool,
    /// Panic mode, as the events said.
    panic: bool,
    /// The pool was shut down (gracefully or not).
    shut_down: bool,
    /// Handles of removed nodes.
    removed: Vec<NodeId>,
    /// A request just cancelled, until its `Cancelled` outcome is seen.
    cancelled: Option<RequestId>,
    /// Heartbeats the pool asked for.
    pings: BTreeSet<RequestId>,
    /// The model of each live node.
    model: Nodes,
    /// Frames not yet fully taken by the kernel (requests' and pings').
    frames: wire::Frames,
    /// Events the current input must produce.
    expected: Vec<Expected>,
    /// Connections opened by the current input, until their node's state change.
    opens: Vec<(ConnId, Instant)>,
    /// The current input moved requests by transparent retry.
    retry_batch: bool,
    /// The model's own counts of what the pool's counters count.
    counts: crate::Counters,
    /// Outbound compactions of the nodes removed so far (live nodes count their own).
    removed_compactions: u64,
    /// Evictions of a connection whose peer had received part of a frame.
    evicted_half_written: u64,
}

impl Session {
    fn new(config: Config, batch: usize) -> Self {
        let now = Instant::from_secs(1);
        let trace = std::env::var("KEEPWIRE_FUZZ_TRACE").is_ok();
        if trace {
            std::eprintln!("{config:?}, batch {batch}");
        }
        Self {
            pool: Pool::new(config.clone(), now).expect("valid by construction"),
            config,
            now,
            nodes: Vec::new(),
            conns: Vec::new(),
            streams: BTreeMap::new(),
            reqs: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            ended: BTreeSet::new(),
            never_sent: BTreeSet::new(),
            on_wire: BTreeSet::new(),
            touched: BTreeSet::new(),
            handed: BTreeMap::new(),
            hand_outs: 0,
            batch,
            trace,
            panic: false,
            shut_down: false,
            removed: Vec::new(),
            cancelled: None,
            pings: BTreeSet::new(),
            model: Nodes::default(),
            frames: wire::Frames::default(),
            expected: Vec::new(),
            opens: Vec::new(),
            retry_batch: false,
            counts: crate::Counters::default(),
            removed_compactions: 0,
            evicted_half_written: 0,
        }
    }

    fn node(&self, i: u8) -> Option<NodeId> {
        (!self.nodes.is_empty()).then(|| self.nodes[i as usize % self.nodes.len()])
    }

    fn conn(&self, i: u8) -> Option<ConnId> {
        self.node(i).and_then(|n| self.pool.current_conn(n))
    }

    fn step(&mut self, op: &Op) {
        let now = self.now;
        if self.trace {
            std::eprintln!("--- {now:?} {op:?}");
        }
        let connecting = |s: NodeState| s == NodeState::Connecting;
        let handshaking = |s: NodeState| s == NodeState::Handshaking;
        match *op {
            Op::AddNode if self.nodes.len() < 4 => {
                let port = 9000 + self.nodes.len() as u16;
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let node = self.pool.add_node(now, addr);
                self.nodes.push(node);
                self.model.insert(node, NodeModel::new());
            }
            Op::AddNode => {}
            Op::RemoveNode(i) => {
                if let Some(n) = self.node(i) {
                    let compactions = self.pool.node(n).map(|n| n.outbound.compactions());
                    self.removed_compactions += compactions.expect("a live node");
                    self.pool.remove_node(now, n).unwrap();
                    self.drain();
                    self.nodes.retain(|&m| m != n);
                    self.model.remove(&n);
                    self.removed.push(n);
                }
            }
            Op::Disable(i) => self.with_node(i, op, |p, n| p.disable_node(now, n)),
            Op::Enable(i) => self.with_node(i, op, |p, n| p.enable_node(now, n)),
            Op::SetEpoch(i, e) => {
                self.with_node(i, op, |p, n| p.set_epoch(now, n, u64::from(e % 3)))
            }
            Op::Evict(i) => self.with_node(i, op, |p, n| p.evict(now, n)),
            Op::Throttle(i, ms) => {
                let until = now + Duration::from_millis(u64::from(ms));
                self.with_node(i, op, |p, n| p.throttle(now, n, until));
            }
            Op::Connect(i) => self.connect(i),
            Op::Select => {
                self.pool.select(now);
                self.pool
                    .check_selection()
                    .unwrap_or_else(|e| panic!("selection: {e}"));
            }
            Op::Submit {
                node,
                len,
                deadline_ms,
            } => self.submit(node, len, deadline_ms),
            Op::Cancel(i) => {
                let open = self.reqs.len().max(1);
                if let Some(&id) = self.reqs.keys().nth(i as usize % open) {
                    self.cancel(id);
                }
            }
            Op::Stall {
                node,
                pile,
                keep,
                by_deadline,
                then,
            } => self.stall(node, pile, keep, by_deadline, then),
            Op::Connected(i) => self.report(i, connecting, |p, c| p.handle_connected(now, c)),
            Op::ConnectFailed(i) => self.report(i, connecting, |p, c| {
                p.handle_connect_failed(now, c, Failure::Refused)
            }),
            Op::HandshakeDone(i) => {
                self.report(i, handshaking, |p, c| p.handle_handshake_done(now, c))
            }
            Op::HandshakeFailed(i, kind) => {
                let failure = match kind % 3 {
                    0 => crate::HandshakeFailure::Failed,
                    1 => crate::HandshakeFailure::AuthRefused,
                    _ => crate::HandshakeFailure::CertificateRejected,
                };
                // Taken on a ready connection too (a TLS 1.3 server refuses a client
                // certificate after the client's side of the handshake is done).
                let failing = |s: NodeState| s == NodeState::Handshaking || s.is_established();
                self.report(i, failing, |p, c| {
                    p.handle_handshake_failed(now, c, failure)
                })
            }
            Op::Write { node, accept } => self.write(node, usize::from(accept)),
            Op::Respond { node, pick } => self.respond(node, pick),
            Op::RespondInOrder(i) => self.respond_in_order(i),
            Op::RespondArriving(i) => self.respond_arriving(i),
            Op::StaleNode(i, kind) => self.stale_node(i, kind),
            Op::Shutdown(n) => {
                if n % 64 == 0 {
                    self.shut_down = true;
                    self.pool.shutdown(now);
                    self.drain();
                    assert!(self.reqs.is_empty(), "a hard shutdown ends every request");
                }
            }
            Op::RespondUnknown(i, raw) => self.respond_unknown(i, raw),
            Op::Closed(i, kind) => {
                self.report(i, |_| true, |p, c| p.handle_closed(now, c, failure(kind)))
            }
            Op::Violation(i) => self.report(
                i,
                |_| true,
                |p, c| p.handle_violation(now, c, Violation::MalformedHeader),
            ),
            Op::StaleReport { conn, kind } => self.stale_report(conn, kind),
            Op::Advance { micros } => {
                self.advance(Duration::from_micros(u64::from(micros % 2_000_000)))
            }
            Op::AdvanceLong { secs } => self.advance(Duration::from_secs(u64::from(secs % 10_000))),
            Op::ShutdownGracefully(n) => {
                if n % 64 == 0 {
                    self.shutting_down_gracefully();
                    self.pool.shutdown_gracefully(now);
                }
            }
            Op::Serve(i) => self.serve(i, None),
            Op::Exchange {
                node,
                len,
                wait_us,
                abandon,
            } => self.exchange(node, len, wait_us, abandon),
            Op::Sleep { early } => {
                if let Some(at) = self.pool.poll_timeout() {
                    let at = at - Duration::from_nanos(u64::from(early % 2));
                    self.advance(at - now);
                }
            }
            Op::TimeGoesBack { micros } => {
                let earlier =
                    Instant::from_nanos(now.as_nanos().saturating_sub(u64::from(micros) * 1000));
                self.pool.handle_timeout(earlier);
            }
        }
        self.drain();
        self.stale_conns_transmit_nothing();
    }

    /// Outbound compactions so far, on every node the session had.
    fn compactions(&self) -> u64 {
        let live: u64 = self
            .pool
            .live_nodes()
            .map(|n| n.outbound.compactions())
            .sum();
        self.removed_compactions + live
    }

    /// An application command on a live node: accepted; the model hears of it first.
    fn with_node(
        &mut self,
        i: u8,
        op: &Op,
        f: impl FnOnce(&mut Pool, NodeId) -> Result<(), crate::HandleError>,
    ) {
        let Some(n) = self.node(i) else { return };
        self.commanded(n, op);
        f(&mut self.pool, n).expect("a current node handle is accepted");
        self.drain();
    }

    /// A report on the node's current connection: accepted in the states `accepts` names
    /// (the model's), refused as in the wrong state otherwise.
    fn report(
        &mut self,
        i: u8,
        accepts: impl Fn(NodeState) -> bool,
        f: impl FnOnce(&mut Pool, ConnId) -> Result<(), crate::HandleError>,
    ) {
        let Some(c) = self.conn(i) else { return };
        let expected = if accepts(self.state_of(c.node())) {
            Ok(())
        } else {
            Err(crate::HandleError::WrongState)
        };
        assert_eq!(f(&mut self.pool, c), expected, "a report on {c:?}");
        self.drain();
    }

    /// Cancels an open request: it ends `Cancelled` at once.
    fn cancel(&mut self, id: RequestId) {
        self.pool.cancel(self.now, id).unwrap();
        self.cancelled = Some(id);
        self.drain();
        assert!(self.cancelled.is_none(), "{id:?} ended at its cancel");
    }

    /// See [`Op::Stall`].
    fn stall(&mut self, i: u8, pile: u8, keep: Option<u8>, by_deadline: bool, then: StallEnd) {
        let Some(node) = self.node(i) else { return };
        let count = 3 + usize::from(pile % 8);
        let keep = keep.map(|k| usize::from(k) % count);
        let mut doomed = Vec::new();
        for k in 0..count {
            let doom = k > 0 && k + 1 < count && Some(k) != keep;
            // The doomed expire one microsecond apart, so each drop is a step of its own.
            let deadline = if doom && by_deadline {
                Duration::from_micros(doomed.len() as u64)
            } else {
                Duration::from_secs(60)
            };
            if let Some(id) = self.submit_frame(Target::Node(node), 16, deadline) {
                if doom {
                    doomed.push(id);
                }
            }
        }
        self.write(i, 1);
        for id in doomed {
            if by_deadline {
                self.advance(Duration::from_micros(1));
            } else if self.reqs.contains_key(&id) {
                self.cancel(id);
            }
        }
        if matches!(then, StallEnd::Evicted | StallEnd::EvictedThenServed) {
            let now = self.now;
            self.with_node(i, &Op::Evict(i), |p, n| p.evict(now, n));
        }
        if matches!(then, StallEnd::EvictedThenServed) {
            self.serve(i, None);
        }
    }

    /// See [`Op::Exchange`].
    fn exchange(&mut self, i: u8, len: u16, wait_us: u16, abandon: bool) {
        let Some(node) = self.node(i) else { return };
        self.advance(Duration::from_micros(u64::from(wait_us)));
        let deadline = Duration::from_secs(60);
        let id = self.submit_frame(Target::Node(node), len % 512, deadline);
        let abandoned = id.filter(|_| abandon);
        self.serve(i, abandoned);
        if let Some(id) = abandoned.filter(|id| self.reqs.contains_key(id)) {
            self.cancel(id);
        }
    }

    /// A healthy peer's turn on the node: connect, handshake, accept every byte, answer all
    /// but `owed`.
    fn serve(&mut self, i: u8, owed: Option<RequestId>) {
        let now = self.now;
        let connecting = |s: NodeState| s == NodeState::Connecting;
        self.report(i, connecting, |p, c| p.handle_connected(now, c));
        let handshaking = |s: NodeState| s == NodeState::Handshaking;
        self.report(i, handshaking, |p, c| p.handle_handshake_done(now, c));
        self.write(i, usize::MAX);
        while let Some(at) = self
            .conn(i)
            .and_then(|c| self.streams.get(&c))
            .and_then(|s| s.unanswered.iter().position(|&id| Some(id) != owed))
        {
            self.respond(i, at as u16);
        }
        // Liveness: a ready connection whose socket took everything holds nothing.
        if let Some(n) = self.node(i) {
            if self.pool.node_state(n) == Some(NodeState::Ready) {
                assert_eq!(
                    self.pool.pending_bytes(n),
                    Some(0),
                    "{n:?}: frames left behind on a ready connection that took all"
                );
            }
        }
    }

    fn stale_node(&mut self, i: u8, kind: u8) {
        let Some(&node) = self.removed.get(i as usize % self.removed.len().max(1)) else {
            return;
        };
        if self.pool.is_shut_down() {
            return; // a shut-down pool refuses everything for that reason first
        }
        let now = self.now;
        let stale = Err(crate::HandleError::StaleNode);
        match kind % 4 {
            0 => assert_eq!(self.pool.connect(now, node), stale),
            1 => assert_eq!(self.pool.disable_node(now, node), stale),
            2 => assert_eq!(self.pool.set_epoch(now, node, 9), stale),
            _ => {
                let frame = Bytes::from_static(b"stale");
                let refused = self.pool.submit(now, Target::Node(node), now, frame);
                assert_eq!(refused, Err(crate::SubmitError::StaleHandle));
            }
        }
        assert_eq!(self.pool.node_state(node), None);
    }

    /// A report on a connection from the list of every connection ever opened: refused when
    /// stale; on the current connection, accepted or refused as its state says.
    fn stale_report(&mut self, i: u16, kind: u8) {
        use crate::HandleError::{Overwritten, StaleConn, WrongState};
        if self.conns.is_empty() {
            return;
        }
        let conn = self.conns[i as usize % self.conns.len()];
        let current = self.pool.current_conn(conn.node()) == Some(conn);
        if current && self.handed.contains_key(&conn) {
            return; // a report about a hand-out the adapter holds is the adapter's to make
        }
        let state = self.model.get(&conn.node()).map(|n| n.state);
        let connecting = state == Some(NodeState::Connecting);
        let now = self.now;
        let (result, expected) = match kind % 5 {
            0 => (self.pool.handle_closed(now, conn, Failure::Reset), Ok(())),
            1 => {
                // Nothing is handed out: any byte reported is more than was.
                let established = state.is_some_and(NodeState::is_established);
                let expected = if established { Overwritten } else { WrongState };
                (self.pool.handle_written(now, conn, 1), Err(expected))
            }
            2 => {
                let expected = if connecting { Ok(()) } else { Err(WrongState) };
                (self.pool.handle_connected(now, conn), expected)
            }
            3 => {
                let violation = Violation::MalformedHeader;
                (self.pool.handle_violation(now, conn, violation), Ok(()))
            }
            _ => {
                let expected = if connecting { Ok(()) } else { Err(WrongState) };
                let failure = Failure::TimedOut;
                (
                    self.pool.handle_connect_failed(now, conn, failure),
                    expected,
                )
            }
        };
        let expected = if current { expected } else { Err(StaleConn) };
        assert_eq!(
            result, expected,
            "a report on {conn:?} (current: {current})"
        );
        self.drain();
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        // What the nodes hold at the new instant, before its timers fire.
        self.look_at_requests();
        self.pool.handle_timeout(self.now);
        self.drain();
        if let Some(next) = self.pool.poll_timeout() {
            assert!(
                next > self.now,
                "timer at {next:?} still due at {:?}",
                self.now
            );
        }
        self.check_due();
    }

    fn check(&self) -> Result<(), String> {
        self.pool.check_invariants()?;
        if self.panic != self.pool.in_panic() {
            return Err(panic_differs(self.panic));
        }
        self.check_nodes()
    }

    fn finish(mut self) -> Result<(), String> {
        self.shut_down = true;
        self.pool.shutdown(self.now);
        self.drain();
        self.check()?;
        if let Some(id) = self.reqs.keys().next() {
            return Err(format!("{id:?} never ended"));
        }
        if self.pool.poll_timeout().is_some() {
            return Err(String::from("timers left after shutdown"));
        }
        Ok(())
    }
}

#[cold]
#[inline(never)]
fn panic_differs(events: bool) -> String {
    format!("events say panic {events}, the pool {}", !events)
}

/// A socket failure (while connecting, a connect failure: a name that does not resolve is a
/// final one).
fn failure(kind: u8) -> Failure {
    match kind % 7 {
        0 => Failure::Reset,
        1 => Failure::PeerClosed,
        2 => Failure::TimedOut,
        3 => Failure::Refused,
        4 => Failure::NameNotFound,
        5 => Failure::ResolveFailed,
        _ => Failure::Other { errno: Some(5) },
    }
}
