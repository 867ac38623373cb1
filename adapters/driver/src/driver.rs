//! The driver: what owns the keepwire [`Pool`] and every socket, run by one task spawned on
//! the runtime, or, while that task is idle, by a sending caller in its own poll ([`task`]).
//! Client handles reach it only through the command inbox; whoever runs a round holds the
//! driver alone (behind a lock that is only ever tried, never waited on, and never held across
//! an await), so handing bytes out cannot race a deadline dropping them.
//!
//! Each poll repeats, until nothing moves: take commands (if the inbox woke the driver) → run
//! the pool's actions → poll the connect and handshake futures → write what the pool hands
//! out, read the open connections whose sockets woke the driver ([`wake`]) → deliver events →
//! fire the timer armed at the pool's next deadline (the only clock the driver waits on: the
//! pool owns every deadline, the slow-drip one included). After the last round it refreshes
//! what services read ([`ready`]) and what operators see (telemetry).
//!
//! The timer is reset after every fire, even to the same deadline: the [`Timer`] contract
//! lets a fired timer stay pending until it is reset (async-io's does), and a coarse clock may
//! still read before the deadline when the timer fires, so the pool offers it again. Between
//! fires it is moved only to an earlier deadline: one that fires early is simply re-armed. It
//! is polled with a waker of its own ([`wake`]): right after it is armed, and after that only
//! once that waker woke the driver, not on every round.
//!
//! The clock is read once per round and every input of the round carries that time: a round
//! never waits, and a clock read per input was a tenth of the driver's time.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keepwire_proto::{
    Action, CloseReason, Config, ConnId, Endpoint, Event, Instant, NodeId, Outcome, Pool,
    RequestId, Sent,
};

use crate::client::ClientEvent;
use crate::codec::{Codec, Correlation, Decoder, EncodeError};
use crate::error::{BuildError, SendError};
use crate::handshake::{HandshakeError, HandshakeHook, HandshakeIo};
use crate::ready::Readiness;
use crate::resolve::Resolver;
use crate::runtime::{BoxFuture, Runtime, Timer};
use crate::socket::OptionReport;
use crate::sync::{Hub, Inbox, Outbox, ReplySender, answer, command_queue};
use crate::telemetry::Telemetry;

// Child modules (not siblings) so that the driver's fields stay private to the driver.
mod chunks;
mod commands;
mod conn_io;
mod conn_table;
mod ids;
mod ready;
mod setup;
mod task;
mod waiters;
mod wake;

use chunks::{Pools, Sizing};
pub(crate) use commands::{Command, NodeOp};
use conn_io::{OpenConn, WriteBufs};
use conn_table::ConnTable;
use ids::Ids;
use setup::Connecting;
pub(crate) use task::Shared;
use waiters::Waiters;
use wake::{TimerWake, Wakeups};

/// Bytes reserved for a frame beyond its payload (headers, ids, delimiters).
const FRAME_HEADROOM: usize = 64;
/// Rounds of work in one poll before the driver yields to other tasks.
const ROUNDS_PER_POLL: usize = 32;
/// Commands run in one round, at most (four batches of 256, when they were taken in
/// batches): the rest wait for the next round.
const COMMANDS_PER_ROUND: usize = 1024;
/// Bytes read from a socket at a time, at most: a large chunk's worth
/// ([`chunks::LARGE_CHUNK`]).
const READ_CHUNK: usize = chunks::LARGE_CHUNK;

pub(crate) struct Driver {
    runtime: Arc<dyn Runtime>,
    origin: std::time::Instant,
    pool: Pool,
    inbox: Inbox<Command>,
    hub: Hub<ClientEvent>,
    readiness: Arc<Readiness>,
    /// Nodes the application disabled (the pool does not say), for readiness.
    disabled: HashSet<NodeId>,
    /// When a readiness a service waits on may change with no input (a node's backoff ends).
    ready_recheck: Option<Instant>,
    telemetry: Telemetry,
    /// The time of the current round, once read ([`Driver::now`]).
    clock: Cell<Option<Instant>>,
    codec: Arc<dyn Codec>,
    correlation: Correlation,
    /// With [`Correlation::ById`]: the request each protocol id names.
    ids: Ids<RequestId>,
    /// Requests are framed into this buffer and split off it, so a frame shared with the
    /// pool is never copied.
    encoded: BytesMut,
    /// `encoded`'s chunk pool, and the length of the last frame.
    encoded_sizing: Sizing,
    /// The chunks `encoded` and the connections' inbound buffers are cut from, recycled.
    chunks: Pools,
    hook: Option<Arc<dyn HandshakeHook>>,
    /// Resolves the names of nodes added by name, on every connect attempt.
    resolver: Arc<dyn Resolver>,
    conns: ConnTable<Conn>,
    waiting: Waiters<Waiting>,
    timer: Option<Armed>,
    read_buf: Box<[u8]>,
    writes: WriteBufs,
    conn_ids: Vec<ConnId>,
    shutdown_replies: Vec<ReplySender<()>>,
    /// A graceful shutdown is under way: stop once every node is `Closed`.
    draining: bool,
    stopping: bool,
    /// Callers answered, ever: a round's share of it says whether the driver yields after it
    /// ([`Driver::poll_rounds`]).
    answered: u64,
    /// What the current round left for a round after it ([`Driver::round`]).
    follow_up: FollowUp,
    /// What the connections' read wakers share with the driver ([`wake`]).
    wakeups: Arc<Wakeups>,
    /// The timer's waker ([`TimerWake`]: it marks the timer and wakes the task), for polling
    /// the timer.
    timer_waker: Waker,
    /// Connections whose decoding paused, to resume in the next round (one left at the end
    /// of a round is a reason for another: [`Driver::round`]).
    paused: Vec<ConnId>,
    /// Connections being set up (connecting or handshaking), to poll in the next round; a
    /// round visits these and the open connections that woke, never the whole map.
    setups: Vec<ConnId>,
    /// The rounds under way run in a caller's poll ([`task`]): a write is followed by a read.
    in_place: bool,
    /// Whether the driver's task reads right after a write ([`Runtime::read_after_write`]).
    task_reads_after_write: bool,
}

/// What a round left undone that no waker will bring back: a reason for another round before
/// the driver returns `Pending`. Everything else a round leaves has registered the driver's
/// waker (a source that returned `Pending`) or woken it (a budget that ran out).
#[derive(Clone, Copy, Debug, Default)]
struct FollowUp {
    /// The inbox still had commands after the round's last batch.
    commands: bool,
    /// A connect started that nothing has polled yet.
    setup: bool,
    /// A write was cut short or interrupted: the next round offers the rest again.
    write: bool,
}

impl FollowUp {
    /// Whether any reason is set (destructured whole, so that a reason added later cannot be
    /// left out here).
    fn any(self) -> bool {
        let Self {
            commands,
            setup,
            write,
        } = self;
        commands || setup || write
    }
}

/// The driver's timer and the deadline it is armed at; `None` once it fired (it must be reset
/// before it is polled again).
struct Armed {
    timer: Pin<Box<dyn Timer>>,
    at: Option<Instant>,
}

/// A caller waiting for its request's outcome.
#[derive(Debug)]
struct Waiting {
    reply: ReplySender<Result<Bytes, SendError>>,
    /// The protocol id the request was framed with ([`Correlation::ById`]).
    protocol_id: Option<u64>,
}

/// One connection's socket, through its lifecycle.
enum Conn {
    Connecting(Connecting),
    Handshaking {
        handshake: BoxFuture<'static, Result<HandshakeIo, HandshakeError>>,
        report: OptionReport,
    },
    Open(OpenConn),
}

impl Driver {
    pub(crate) fn new(
        runtime: Arc<dyn Runtime>,
        config: Config,
        nodes: &[Endpoint],
        channels: DriverChannels,
        codec: Arc<dyn Codec>,
        hook: Option<Arc<dyn HandshakeHook>>,
        resolver: Arc<dyn Resolver>,
    ) -> Result<(Self, Vec<NodeId>), BuildError> {
        let origin = runtime.now();
        let mut pool = Pool::new(config, Instant::ZERO)?;
        let mut telemetry = Telemetry::new(&pool);
        let ids = nodes
            .iter()
            .map(|endpoint| {
                let node = pool.add_node(Instant::ZERO, endpoint.clone());
                telemetry.node_added(&pool, node);
                node
            })
            .collect();
        let DriverChannels {
            inbox,
            wakeups,
            hub,
            readiness,
        } = channels;
        let task_reads_after_write = runtime.read_after_write();
        let driver = Self {
            runtime,
            origin,
            pool,
            inbox,
            hub,
            readiness,
            disabled: HashSet::new(),
            ready_recheck: None,
            telemetry,
            clock: Cell::new(None),
            correlation: codec.correlation(),
            codec,
            ids: Ids::default(),
            encoded: BytesMut::new(),
            encoded_sizing: Sizing::default(),
            chunks: Pools::new(),
            hook,
            resolver,
            conns: ConnTable::default(),
            waiting: Waiters::default(),
            timer: None,
            read_buf: vec![0; READ_CHUNK].into_boxed_slice(),
            writes: WriteBufs::default(),
            conn_ids: Vec::new(),
            shutdown_replies: Vec::new(),
            draining: false,
            stopping: false,
            answered: 0,
            follow_up: FollowUp::default(),
            timer_waker: TimerWake::waker(&wakeups),
            wakeups,
            paused: Vec::new(),
            setups: Vec::new(),
            in_place: false,
            task_reads_after_write,
        };
        Ok((driver, ids))
    }

    pub(crate) fn runtime(&self) -> Arc<dyn Runtime> {
        Arc::clone(&self.runtime)
    }

    /// The seed the pool draws its jitter and selection offsets from.
    pub(crate) fn seed(&self) -> u64 {
        self.pool.seed()
    }

    /// The time of this round: the clock is read once per round, at its first use, and every
    /// input of the round is stamped with it (a round takes microseconds: it never waits).
    fn now(&self) -> Instant {
        round_now(&self.clock, &*self.runtime, self.origin)
    }

    /// Forgets the time read: the next [`now`](Self::now) reads the clock again.
    fn tick(&self) {
        self.clock.set(None);
    }

    /// One round of work; whether another must follow before the driver may wait.
    ///
    /// Not after every round that moved: one that took commands until the inbox was empty,
    /// wrote what the pool handed out and read until its sockets would block has registered
    /// the waker with every source, and a round after it would find nothing (at one request
    /// in flight those empty rounds cost about 1,700 of a request's 13,500 instructions;
    /// BENCHMARKS.md, "A round only when one is needed"). Another round follows a connect that
    /// finished or started (a handshake starts only when one finishes), a timer that fired, a
    /// write that was cut short or interrupted, decoding that paused, frames the pool has to
    /// hand out, and commands beyond the round's batches.
    fn round(&mut self, cx: &mut Context<'_>) -> bool {
        self.tick();
        self.follow_up = FollowUp::default();
        self.take_commands();
        let mut again = self.poll_setups(cx);
        self.poll_io(cx);
        again |= self.poll_timer();
        self.settle();
        again || self.follow_up.any() || !self.paused.is_empty() || self.pool.has_transmit()
    }

    /// Runs the pool's actions and delivers its events: after every input.
    #[inline]
    fn settle(&mut self) {
        if self.pool.has_output() {
            self.settle_output();
        }
    }

    /// [`settle`](Self::settle) once the pool has something to give.
    fn settle_output(&mut self) {
        while let Some(action) = self.pool.poll_action() {
            #[cfg(feature = "tracing")]
            self.telemetry.action(&action);
            self.perform(self.now(), &action);
        }
        while let Some(event) = self.pool.poll_event() {
            match event {
                // The usual case, taken apart at once: the event's address is never taken.
                Event::RequestDone {
                    id,
                    node,
                    outcome,
                    sent,
                    retried,
                    ..
                } if !self.telemetry.traces_requests() => {
                    self.telemetry.request_done(node);
                    self.request_done(id, outcome, sent, retried);
                }
                event => self.told_event(event),
            }
        }
    }

    /// [`settle_output`](Self::settle_output) for an event told whole to telemetry: any but a
    /// request's end, or that too when it is traced.
    #[cold]
    #[inline(never)]
    fn told_event(&mut self, event: Event) {
        self.telemetry.event(&event);
        match event {
            Event::RequestDone {
                id,
                outcome,
                sent,
                retried,
                ..
            } => self.request_done(id, outcome, sent, retried),
            other => self.hub.publish(ClientEvent::Pool(other)),
        }
    }

    /// Answers the caller of a request that ended, if it still waits. Inlined into the
    /// usual case, although [`told_event`](Self::told_event) calls it too: out of line, its
    /// call cost more than the copy of the event the usual case saves.
    #[inline(always)]
    fn request_done(&mut self, id: RequestId, outcome: Outcome, sent: Sent, retried: bool) {
        if let Some(waiting) = self.waiting.remove(id) {
            // A response, the usual end, without the match over every other.
            let (result, responded) = match outcome {
                Outcome::Response(payload) => (Ok(payload), true),
                other => (result_of(other, sent, retried), false),
            };
            answer(waiting.reply, result);
            self.answered += 1;
            self.forget_id(id, waiting.protocol_id, responded);
        }
    }

    /// Announces a driver event (not the pool's) to subscribers and operators.
    fn publish(&mut self, event: ClientEvent) {
        self.telemetry.client_event(&event);
        self.hub.publish(event);
    }

    /// Frames one message into the shared chunk with `encode`: with a fresh protocol id for a
    /// by-id codec, room for `len` bytes and a header reserved (a codec that writes more grows
    /// the buffer), and the codec's panic contained. Returns the frame and its protocol id (not
    /// yet mapped); on an error nothing is kept.
    fn frame(
        &mut self,
        len: usize,
        encode: impl FnOnce(&dyn Codec, Option<u64>, &mut BytesMut) -> Result<(), EncodeError>,
    ) -> Result<(Bytes, Option<u64>), EncodeError> {
        let protocol_id = match self.correlation {
            Correlation::ById { bits } => Some(self.ids.next_free(bits).ok_or_else(|| {
                let every = "every protocol id is in use by a request that may be answered";
                EncodeError::Invalid(every.into())
            })?),
            _ => None,
        };
        // The frame's own length chooses its chunk's pool.
        self.encoded_sizing.piece = len;
        self.chunks.reserve(
            &mut self.encoded,
            &mut self.encoded_sizing,
            len + FRAME_HEADROOM,
        );
        let (codec, encoded) = (&*self.codec, &mut self.encoded);
        match contain(|| encode(codec, protocol_id, encoded)) {
            Ok(Ok(())) => Ok((self.encoded.split().freeze(), protocol_id)),
            Ok(Err(e)) => {
                self.encoded.clear();
                Err(e)
            }
            Err(_) => {
                self.encoded.clear();
                Err(EncodeError::Panicked)
            }
        }
    }

    /// Sends the codec's ping on `conn` for the heartbeat `id` the pool reserved. A ping the
    /// codec cannot frame (or no protocol id free) is not sent: its deadline then closes the
    /// connection as a heartbeat timeout, as for a ping that gets no answer.
    fn heartbeat(&mut self, now: Instant, conn: ConnId, id: RequestId) {
        self.sweep_ids();
        let framed = self.frame(0, |codec, protocol_id, dst| {
            let none = || Err(EncodeError::Invalid("the codec has no ping".into()));
            codec.heartbeat(protocol_id, dst).unwrap_or_else(none)
        });
        let Ok((frame, protocol_id)) = framed else {
            return;
        };
        if let Some(protocol_id) = protocol_id {
            self.ids.insert(protocol_id, id);
        }
        if self.pool.submit_heartbeat(now, id, frame).is_err() {
            // The connection closed meanwhile: nothing was queued.
            if let Some(protocol_id) = protocol_id {
                self.ids.remove(protocol_id);
            }
        }
        self.telemetry.touched(conn.node());
    }

    /// A fresh decoder for `conn`; `None` if the codec panicked making one, which closes the
    /// connection (nothing it receives could be trusted).
    fn decoder_for(&mut self, now: Instant, conn: ConnId) -> Option<Box<dyn Decoder>> {
        match contain(|| self.codec.decoder()) {
            Ok(decoder) => Some(decoder),
            Err(message) => {
                self.publish(ClientEvent::CodecPanicked { conn, message });
                let _ =
                    self.pool
                        .handle_violation(now, conn, keepwire_proto::Violation::Undecodable);
                None
            }
        }
    }

    /// A request ended: its protocol id is free again unless a late response may still come
    /// (the pool holds the request); such ids are swept once they pile up. One that ended
    /// with its response (`responded`) was forgotten already, when the response was read
    /// (`Ids::answer` in `decode`, once the pool no longer held the request): only the sweep
    /// is left.
    fn forget_id(&mut self, request: RequestId, protocol_id: Option<u64>, responded: bool) {
        let Some(protocol_id) = protocol_id else {
            return;
        };
        if !responded && !self.pool.holds(request) {
            self.ids.remove(protocol_id);
        }
        debug_assert!(
            !responded || self.ids.get(protocol_id) != Some(&request),
            "the protocol id of a request that ended with its response is still filed"
        );
        self.sweep_ids();
    }

    /// Frees the protocol ids of requests and heartbeats that can no longer be answered, once
    /// they pile up (a heartbeat ends without an event when its connection closes).
    fn sweep_ids(&mut self) {
        if self.ids.len() > 2 * self.waiting.len() + 64 {
            let pool = &self.pool;
            self.ids.retain(|request| pool.holds(*request));
        }
    }

    /// Out of line. Inlined into [`settle_output`](Self::settle_output), which every
    /// request's outcome runs through, its locals (a connection's setup, its close) made that
    /// frame 2 KiB and spread the outcome's path over more lines of stack: a round trip at
    /// one in flight touched 237 lines of data, against 225–231 since
    /// (`scripts/working-set.sh`, whose count moves by a few lines from run to run). A
    /// request's own path performs no action.
    #[inline(never)]
    fn perform(&mut self, now: Instant, action: &Action) {
        match action {
            Action::Open {
                conn,
                endpoint,
                options,
                deadline,
            } => self.open(now, *conn, endpoint, options, *deadline),
            Action::Handshake { conn } => self.handshake(now, *conn),
            Action::Heartbeat { conn, id } => self.heartbeat(now, *conn, *id),
            Action::Close { conn, .. } => {
                // Dropping the socket closes it; a pending connect or handshake is abandoned.
                self.conns.remove(conn);
            }
            _ => {}
        }
    }

    /// Arms the timer at the next deadline (the pool's, or a readiness recheck) and fires what
    /// is due.
    fn poll_timer(&mut self) -> bool {
        let due = self.pool.poll_timeout();
        let Some(next) = earliest(due, self.ready_recheck) else {
            return false;
        };
        // Armed at or before the next deadline already (the usual case: the earliest deadline
        // mostly moves later, with every answered request): nothing is due until the timer
        // fires, and the round need not read the clock to know it; nor poll the timer before
        // its waker woke (below). A deadline the clock has passed but the timer has not (a
        // timer wheel rounds up to its tick) waits for it. Otherwise the clock says whether
        // the deadline has passed, and if not the timer moves to it.
        let covered = self
            .timer
            .as_ref()
            .is_some_and(|armed| armed.at.is_some_and(|at| at <= next));
        if covered || next > self.now() {
            let armed = match &mut self.timer {
                Some(armed) if covered => {
                    // Polled since it was armed (right after, below) and still pending then, it
                    // holds the timer's waker: until that woke, it cannot have fired.
                    if !self.wakeups.take_timer() {
                        return false;
                    }
                    armed
                }
                timer => {
                    let Some(deadline) = self
                        .origin
                        .checked_add(Duration::from_nanos(next.as_nanos()))
                    else {
                        return false; // beyond the clock's range: never
                    };
                    if let Some(armed) = timer {
                        armed.timer.as_mut().reset(deadline);
                        armed.at = Some(next);
                        armed
                    } else {
                        timer.insert(Armed {
                            timer: self.runtime.new_timer(deadline),
                            at: Some(next),
                        })
                    }
                }
            };
            let cx = &mut Context::from_waker(&self.timer_waker);
            if armed.timer.as_mut().poll_fire(cx).is_pending() {
                return false;
            }
            // Fired: reset before the next poll, even to this same deadline.
            armed.at = None;
            self.tick();
        }
        let now = self.now();
        if due.is_some_and(|due| due <= now) {
            self.pool.handle_timeout(now);
        }
        if self.ready_recheck.is_some_and(|at| at <= now) {
            self.ready_recheck = None; // the refresh after this poll's rounds sets the next
        }
        // Moved, even if nothing was due yet (the clock reads behind the timer): the next
        // round re-arms and polls again.
        true
    }

    /// Whether a graceful shutdown has closed every node.
    fn drained(&self) -> bool {
        self.pool
            .nodes()
            .all(|n| self.pool.node_state(n) == Some(keepwire_proto::NodeState::Closed))
    }

    /// Ends what the pool could not: every command still queued, every subscriber.
    fn finish(&mut self) {
        self.tick();
        let now = self.now();
        self.pool.shutdown(now);
        self.settle();
        for waiting in self.waiting.drain() {
            answer(waiting.reply, Err(SendError::Shutdown));
        }
        self.conns.clear();
        // Dropping the leftover commands drops their replies: callers read `Shutdown`.
        self.inbox.close();
        self.inbox.clear();
        self.readiness.stop();
        self.telemetry.finish(&self.pool);
        // Every subscription ends once read, and a later one at once.
        self.hub.close();
        for reply in self.shutdown_replies.drain(..) {
            answer(reply, ());
        }
    }
}

impl Driver {
    /// Rounds until one leaves nothing for another (every source has the waker then; see
    /// [`Driver::round`]), or until one that answered more than one caller. Then the driver
    /// yields (wakes itself and returns): the callers it answered run before its next round,
    /// their sends find it already woken, and what they send leaves in one batch. Looping on
    /// instead, the answered callers waited behind the driver, and on tokio's multi-thread
    /// runtime (which runs a just-woken task next) the first one's send woke it into a round
    /// for that one request, then the next: 2.5 requests per `writev` at 64 B × 64 in flight
    /// against 49 with the yield, and half the throughput (BENCHMARKS.md,
    /// `tests/tests/real_batching.rs`). A lone answer does not yield: that would cost a poll
    /// and, on tokio, a wake of a parked worker (two `futex` calls per request at 1 in flight)
    /// for no batch. A round answers at most a slice of what a connection has buffered (about
    /// half of its requests in flight; `conn_io`), so a batch of answers is answered over
    /// several polls, and the first callers' next requests are written before the last
    /// callers are answered.
    fn poll_rounds(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..ROUNDS_PER_POLL {
            let answered = self.answered;
            let again = self.round(cx);
            if self.draining && self.drained() {
                self.stopping = true;
            }
            if self.stopping {
                self.finish();
                return Poll::Ready(());
            }
            if self.answered - answered > 1 {
                break;
            }
            if !again {
                self.after_rounds();
                return Poll::Pending;
            }
        }
        // Still busy, or callers to let run first: yield, then continue.
        self.after_rounds();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Driver {
    /// What the rounds of one poll changed, made visible: services' readiness, counters and
    /// gauges.
    fn after_rounds(&mut self) {
        self.tick();
        self.refresh_readiness();
        self.telemetry.flush(&self.pool);
    }
}

/// [`Driver::now`] on the driver's fields, for a caller that holds a borrow of another one.
fn round_now(
    clock: &Cell<Option<Instant>>,
    runtime: &dyn Runtime,
    origin: std::time::Instant,
) -> Instant {
    if let Some(now) = clock.get() {
        return now;
    }
    let elapsed = runtime.now_in_task().saturating_duration_since(origin);
    let now = Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    clock.set(Some(now));
    now
}

/// The earlier of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The driver's ends of its channels with the client handles.
#[derive(Debug)]
pub(crate) struct DriverChannels {
    inbox: Inbox<Command>,
    wakeups: Arc<Wakeups>,
    hub: Hub<ClientEvent>,
    readiness: Arc<Readiness>,
}

impl DriverChannels {
    /// The driver's ends, and the client handles' end of the command queue: each command
    /// queued marks the inbox and wakes the driver ([`Wakeups`]).
    pub(crate) fn new(hub: Hub<ClientEvent>, readiness: Arc<Readiness>) -> (Self, Outbox<Command>) {
        let wakeups = Arc::<Wakeups>::default();
        let (outbox, inbox) = command_queue(Waker::from(Arc::clone(&wakeups)));
        let channels = Self {
            inbox,
            wakeups,
            hub,
            readiness,
        };
        (channels, outbox)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.stopping {
            // The runtime dropped the driver (it is shutting down): callers must not wait.
            self.stopping = true;
            self.finish();
        }
    }
}

/// Runs user code (the codec, the handshake hook) so that a panic in it ends only the request
/// or connection it concerns: unwinding through the driver would drop it, ending every
/// connection and request of the client with a misleading `Shutdown`. `Err` is the panic's
/// message (the panic hook has already printed it).
fn contain<T>(user_code: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(user_code)).map_err(|payload| panic_message(&*payload))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The caller's result for a request that ended: the response, or the error that says how it
/// ended, how much of it reached the kernel and whether it had been retried.
#[cold]
#[inline(never)]
fn result_of(outcome: Outcome, sent: Sent, retried: bool) -> Result<Bytes, SendError> {
    Err(match outcome {
        Outcome::Response(payload) => return Ok(payload),
        Outcome::DeadlineExceeded { phase } => SendError::DeadlineExceeded {
            phase,
            sent,
            retried,
        },
        Outcome::ConnectionLost(CloseReason::Protocol(violation)) => SendError::Protocol {
            violation,
            sent,
            retried,
        },
        Outcome::ConnectionLost(cause) => SendError::ConnectionLost {
            cause,
            sent,
            retried,
        },
        Outcome::Evicted(reason) => SendError::Evicted {
            reason,
            sent,
            retried,
        },
        Outcome::Cancelled => SendError::Cancelled,
        other => SendError::Other {
            outcome: other.to_string(),
            sent,
            retried,
        },
    })
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("conns", &self.conns.len())
            .field("waiting", &self.waiting.len())
            .finish()
    }
}
