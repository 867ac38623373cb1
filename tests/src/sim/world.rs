//! The simulated world: the real `Pool`, driven through the calls an adapter makes, against
//! simulated kernels, links and servers on a virtual clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use keepwire_proto::{
    Action, CloseReason, Config, ConnId, Event, Failure, Instant, NodeId, NodeState, Outcome, Pool,
    Reason, RequestId, Sent, SubmitError, Target,
};

use super::arena::{Arena, Class, Req};
use super::kernel::{Conn, Kernel, Opts, Peer, Seg, Timer};
use super::report::{Lane, Tally, Timeline};
use super::server::{Answer, Fault, Restart, Server};

/// What the pool may hand out for one vectored write, at least: an adapter offers the
/// socket's free send-buffer space when that is more, as one `writev` can take it.
const TRANSMIT_MIN: usize = 64 * 1024;
/// How often a slow server reads.
const SLOW_READ_EVERY: Duration = Duration::from_millis(10);
/// A gap in a node's answers at least this long counts as an outage.
const GAP: Duration = Duration::from_secs(1);

/// An open-loop request stream: requests arrive at `rate` per second whatever happens to
/// earlier ones, like a query router's traffic.
#[derive(Clone, Debug)]
pub struct Stream {
    /// Where the requests go.
    pub target: Target,
    /// Requests per second.
    pub rate: f64,
    /// Frame length in bytes.
    pub size: usize,
    /// The application's deadline (query timeout).
    pub deadline: Duration,
    /// The deadline given to the pool, when it differs: a "before" run gives a far one, so
    /// queued frames are never dropped, and the application times its queries out itself.
    pub pool_deadline: Option<Duration>,
    /// Exponential gaps (a Poisson stream) instead of even ones.
    pub poisson: bool,
    /// When the first request arrives.
    pub start: Duration,
    /// Whether requests are sent (a routing layer pauses a stream to exclude its node).
    pub active: bool,
}

impl Stream {
    /// `rate` requests per second of `size` bytes to `target`, each with `deadline`.
    pub fn new(target: Target, rate: f64, size: usize, deadline: Duration) -> Self {
        Self {
            target,
            rate,
            size,
            deadline,
            pool_deadline: None,
            poisson: false,
            start: Duration::ZERO,
            active: true,
        }
    }
}

#[derive(Debug)]
struct StreamState {
    spec: Stream,
    /// Outstanding requests in deadline order: the application's own timeout sweep.
    fifo: VecDeque<(Instant, u32, RequestId)>,
    gap: Duration,
}

/// A scripted step: a fault, a routing change or an application call.
pub enum Act {
    /// A fault on a node (its end is scheduled with it).
    Fault(usize, Fault),
    /// The routing layer stops sending a stream's requests.
    Pause(usize),
    /// The routing layer sends a stream's requests again.
    Resume(usize),
    /// `Pool::disable_node`.
    Disable(usize),
    /// `Pool::enable_node`: the readmission signal.
    Enable(usize),
    /// `Pool::set_epoch`.
    SetEpoch(usize, u64),
    /// `Pool::evict`.
    Evict(usize),
    /// A labelled instant on the timeline.
    Mark(String),
    /// Anything else.
    Call(Box<dyn FnMut(&mut World)>),
    /// The end of a fault.
    #[doc(hidden)]
    Undo(usize, Fault),
}

impl std::fmt::Debug for Act {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Act::Fault(n, x) => write!(f, "Fault({n}, {x:?})"),
            Act::Pause(s) => write!(f, "Pause({s})"),
            Act::Resume(s) => write!(f, "Resume({s})"),
            Act::Disable(n) => write!(f, "Disable({n})"),
            Act::Enable(n) => write!(f, "Enable({n})"),
            Act::SetEpoch(n, e) => write!(f, "SetEpoch({n}, {e})"),
            Act::Evict(n) => write!(f, "Evict({n})"),
            Act::Mark(m) => write!(f, "Mark({m})"),
            Act::Call(_) => write!(f, "Call(..)"),
            Act::Undo(n, x) => write!(f, "Undo({n}, {x:?})"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    Conn(usize, ConnId, Timer),
    Script(usize),
    Sample,
    /// Only makes [`World::step`] return, so a caller's loop runs.
    Poke,
}

#[derive(Debug, PartialEq, Eq)]
struct Entry {
    at: Instant,
    seq: u64,
    wake: Wake,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What the checked invariants need (chaos runs).
#[derive(Clone, Debug)]
pub struct Checks {
    /// The pool's write timeout (zero: not checked).
    pub write_timeout: Duration,
    /// Slack allowed past it.
    pub tick: Duration,
    /// The most pending bytes one node may hold: the high watermark plus one frame.
    pub max_pending: u64,
}

/// Everything recorded for tests that look at single requests and events.
#[derive(Debug, Default)]
pub struct Record {
    /// Every event, stamped.
    pub events: Vec<(Instant, Event)>,
    /// Every request's end, stamped.
    pub outcomes: BTreeMap<RequestId, (Instant, Outcome)>,
    /// When each accepted request was submitted.
    pub submitted: BTreeMap<RequestId, Instant>,
    /// Requests each server executed: (request, when); a restart starts a new list.
    pub delivered: Vec<Vec<(RequestId, Instant)>>,
}

impl Record {
    /// The outcome of `id`, if it ended.
    pub fn outcome(&self, id: RequestId) -> Option<&Outcome> {
        self.outcomes.get(&id).map(|(_, o)| o)
    }

    /// How many outcomes `f` selects.
    pub fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.values().filter(|(_, o)| f(o)).count()
    }

    /// The longest time from submit to outcome.
    pub fn slowest_end(&self) -> Duration {
        self.outcomes
            .iter()
            .map(|(id, (at, _))| *at - self.submitted[id])
            .max()
            .unwrap_or_default()
    }

    /// When the pool closed an established or connecting connection for `reason`.
    pub fn closes(&self, reason: CloseReason) -> Vec<Instant> {
        self.events
            .iter()
            .filter_map(|(t, e)| match e {
                Event::StateChanged {
                    reason: Reason::Closed(r),
                    ..
                } if *r == reason => Some(*t),
                _ => None,
            })
            .collect()
    }
}

/// The simulated world around one real [`Pool`].
pub struct World {
    /// The pool under test.
    pub pool: Pool,
    /// The virtual clock.
    pub now: Instant,
    /// The pool's node handles; index `i` is server `i`.
    pub nodes: Vec<NodeId>,
    /// The servers.
    pub servers: Vec<Server>,
    /// Kernel settings of every host.
    pub kernel: Kernel,
    /// What happened, in figures.
    pub tally: Tally,
    /// Samples for the pictures, if asked for.
    pub timeline: Option<Timeline>,
    /// Per-request records, if asked for.
    pub record: Option<Record>,
    /// The application's out-of-memory handler: once the pool's pending bytes pass this, it
    /// closes every connection (the "before" broker of story 2).
    pub oom_limit: Option<u64>,
    /// Invariants checked after every step (chaos runs).
    pub checks: Option<Checks>,
    /// The first invariant broken, with the instant.
    pub violation: Option<String>,
    conns: Vec<Option<Conn>>,
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    arena: Arena,
    by_pool_slot: Vec<u32>,
    streams: Vec<StreamState>,
    script: Vec<Option<Act>>,
    bufs: Vec<Bytes>,
    rng: u64,
    sample_every: Duration,
    /// The hand-out size offered: the largest send buffer's free space.
    transmit_max: usize,
    scratch_executed: Vec<u32>,
    scratch_consumed: Vec<u32>,
    /// When a connection last closed (for the write-timeout check of retried requests).
    last_close: Instant,
    /// Each stream's next arrival (dense, for a cheap scan).
    arrivals: Vec<Instant>,
    /// Each node's next response (`Instant::MAX`: none).
    responses_due: Vec<Instant>,
    last_ok: Vec<Instant>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("servers", &self.servers)
            .field("tally", &self.tally)
            .finish_non_exhaustive()
    }
}

fn slot_of(id: RequestId) -> usize {
    (id.as_u64() & 0xFFFF_FFFF) as usize
}

impl World {
    /// A world of `servers` (node `i` is server `i`, at 10.0.0.1:9000+i) around a pool with
    /// `config`, starting at time zero.
    pub fn new(config: Config, kernel: Kernel, servers: Vec<Server>) -> Self {
        let now = Instant::ZERO;
        let seed = config.seed.unwrap_or(Config::FALLBACK_SEED);
        let mut pool = Pool::new(config, now).expect("a valid config");
        let nodes: Vec<NodeId> = (0..servers.len())
            .map(|i| {
                let addr = format!("10.0.0.1:{}", 9000 + i)
                    .parse::<std::net::SocketAddr>()
                    .expect("address");
                pool.add_node(now, addr)
            })
            .collect();
        let n = servers.len();
        let kernel_send_buffer = kernel.send_buffer as usize;
        let mut world = Self {
            pool,
            now,
            nodes,
            servers,
            kernel,
            tally: Tally::new(n),
            timeline: None,
            record: None,
            oom_limit: None,
            checks: None,
            violation: None,
            conns: (0..n).map(|_| None).collect(),
            heap: BinaryHeap::new(),
            seq: 0,
            arena: Arena::default(),
            by_pool_slot: Vec::new(),
            streams: Vec::new(),
            script: Vec::new(),
            bufs: Vec::new(),
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            sample_every: Duration::from_secs(1),
            transmit_max: TRANSMIT_MIN.max(kernel_send_buffer),
            arrivals: Vec::new(),
            last_close: Instant::ZERO,
            scratch_executed: Vec::new(),
            scratch_consumed: Vec::new(),
            responses_due: vec![Instant::MAX; n],
            last_ok: vec![Instant::ZERO; n],
        };
        world.push(now, Wake::Sample);
        world
    }

    /// Records every event and request (for tests that look at single ones).
    pub fn recording(mut self) -> Self {
        self.record = Some(Record {
            delivered: vec![Vec::new(); self.servers.len()],
            ..Record::default()
        });
        self
    }

    /// Samples a timeline every `every` (for the pictures).
    pub fn sampling(mut self, every: Duration) -> Self {
        self.timeline = Some(Timeline::new(every, self.servers.len()));
        self.sample_every = every;
        self
    }

    /// Adds an open-loop stream; returns its index.
    pub fn add_stream(&mut self, spec: Stream) -> usize {
        let i = self.streams.len();
        let gap = Duration::from_secs_f64(1.0 / spec.rate);
        let first = self.now + spec.start;
        self.streams.push(StreamState {
            spec,
            fifo: VecDeque::new(),
            gap,
        });
        self.arrivals.push(first);
        i
    }

    /// Schedules `act` at `at`.
    pub fn at(&mut self, at: Instant, act: Act) {
        let undo = match &act {
            Act::Fault(n, fault) => Some((at + fault.duration(), Act::Undo(*n, *fault))),
            _ => None,
        };
        self.script.push(Some(act));
        self.push(at, Wake::Script(self.script.len() - 1));
        // After the fault, even when it lasts no time at all.
        if let Some((end, undo)) = undo {
            self.script.push(Some(undo));
            self.push(end, Wake::Script(self.script.len() - 1));
        }
    }

    /// Does `act` now.
    pub fn apply(&mut self, act: Act) {
        self.at(self.now, act);
        self.run_until(self.now);
    }

    /// Runs until `until`, calling `f` every `every` from now on (a caller's own load).
    pub fn run_with(&mut self, until: Instant, every: Duration, f: &mut dyn FnMut(&mut World)) {
        let mut next = self.now;
        while self.violation.is_none() {
            if self.now >= next && self.now < until {
                f(self);
                next = self.now + every;
                self.poke_at(next);
            }
            if !self.step(until) {
                break;
            }
        }
    }

    /// Makes [`step`](Self::step) stop at `at` (for a caller's own timers).
    pub fn poke_at(&mut self, at: Instant) {
        self.push(at.max(self.now), Wake::Poke);
    }

    /// A stream's spec, to change it.
    pub fn stream_mut(&mut self, i: usize) -> &mut Stream {
        &mut self.streams[i].spec
    }

    fn push(&mut self, at: Instant, wake: Wake) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq: self.seq,
            wake,
        }));
    }

    // -------------------------------------------------------------------------------------
    // The clock.

    /// Advances to the next thing that happens, at or before `until`, and handles everything
    /// due then; `false` when nothing is due by `until` (the clock then stands at `until`).
    pub fn step(&mut self, until: Instant) -> bool {
        if self.violation.is_some() {
            return false;
        }
        let t_pool = self.pool.poll_timeout();
        let mut next = Instant::MAX;
        if let Some(e) = self.heap.peek() {
            next = e.0.at;
        }
        if let Some(t) = t_pool {
            next = next.min(t);
        }
        if let Some((t, _)) = self.next_arrival() {
            next = next.min(t);
        }
        if let Some((t, _)) = self.next_response() {
            next = next.min(t);
        }
        let Some(next) = Some(next).filter(|&t| t <= until && t != Instant::MAX) else {
            self.now = self.now.max(until);
            return false;
        };
        self.now = self.now.max(next);
        if t_pool.is_some_and(|t| t <= self.now) {
            self.pool.handle_timeout(self.now);
            if let Some(t) = self.pool.poll_timeout().filter(|&t| t <= self.now) {
                self.fail(format!("handle_timeout left a timer due at {t:?}"));
            }
            self.pump();
        }
        // Everything due now, in a fixed order: scripted and kernel timers, arrivals,
        // responses.
        loop {
            if self.heap.peek().is_some_and(|e| e.0.at <= self.now) {
                let Reverse(entry) = self.heap.pop().expect("peeked");
                self.dispatch(entry.at, entry.wake);
            } else if let Some((_, i)) = self.next_arrival().filter(|a| a.0 <= self.now) {
                self.arrive(i);
            } else if let Some((_, n)) = self.next_response().filter(|r| r.0 <= self.now) {
                self.responses_due[n] = Instant::MAX;
                if let Some(c) = self.conns[n].as_mut() {
                    c.timers[Timer::Response as usize] = None;
                }
                self.respond(n);
            } else {
                break;
            }
            self.pump();
        }
        if self.checks.is_some() {
            self.check();
        }
        true
    }

    fn next_arrival(&self) -> Option<(Instant, usize)> {
        earliest(&self.arrivals)
    }

    fn next_response(&self) -> Option<(Instant, usize)> {
        earliest(&self.responses_due)
    }

    /// Runs until `until`.
    pub fn run_until(&mut self, until: Instant) {
        while self.step(until) {}
    }

    /// Runs for `d`.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Ends the run: every request still open past its deadline is classed timed out.
    pub fn finish(&mut self) {
        self.sweep();
        if let Some(tl) = self.timeline.as_mut() {
            tl.end = self.now;
        }
    }

    // -------------------------------------------------------------------------------------
    // The application.

    /// Submits one request now (besides the streams): `len` bytes, `deadline`.
    pub fn submit(
        &mut self,
        target: Target,
        len: usize,
        deadline: Duration,
    ) -> Result<RequestId, SubmitError> {
        let r = self.submit_frame(u32::MAX, target, len, deadline, deadline);
        self.pump();
        r
    }

    fn arrive(&mut self, i: usize) {
        let (poisson, rate, gap) = {
            let s = &self.streams[i];
            (s.spec.poisson, s.spec.rate, s.gap)
        };
        let gap = if poisson {
            let u = self.next_unit().max(1e-12);
            Duration::from_secs_f64(-u.ln() / rate)
        } else {
            gap
        };
        self.arrivals[i] = self.now + gap.max(Duration::from_nanos(1));
        let s = &self.streams[i].spec;
        if !s.active {
            return;
        }
        let (target, size, deadline) = (s.target, s.size, s.deadline);
        let pool_deadline = s.pool_deadline.unwrap_or(deadline);
        let _ = self.submit_frame(i as u32, target, size, deadline, pool_deadline);
    }

    fn next_unit(&mut self) -> f64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn submit_frame(
        &mut self,
        stream: u32,
        target: Target,
        len: usize,
        deadline: Duration,
        pool_deadline: Duration,
    ) -> Result<RequestId, SubmitError> {
        let now = self.now;
        let slot = self.arena.alloc();
        let frame = self.arena.frame(slot, len);
        match self.pool.submit(now, target, now + pool_deadline, frame) {
            Ok(id) => {
                let node = match target {
                    Target::Node(n) => n.index() as u32,
                    _ => u32::MAX,
                };
                self.arena.set(
                    slot,
                    Req {
                        id,
                        node,
                        len: len as u32,
                        submitted: now,
                        deadline: now + deadline,
                        written: 0,
                        abandoned: false,
                        refs: 0,
                        executed: 0,
                        class: None,
                        ended: false,
                        ended_unsent: false,
                        into_dead: false,
                        pinned: node != u32::MAX,
                        requeued_by: Instant::ZERO,
                        handed_out: false,
                    },
                );
                let ps = slot_of(id);
                if self.by_pool_slot.len() <= ps {
                    self.by_pool_slot.resize(ps + 1, u32::MAX);
                }
                self.by_pool_slot[ps] = slot;
                if pool_deadline != deadline {
                    // The pool will not end it at its deadline: the application's sweep will.
                    if let Some(s) = self.streams.get_mut(stream as usize) {
                        s.fifo.push_back((now + deadline, slot, id));
                    }
                }
                self.tally.accepted += 1;
                if node != u32::MAX
                    && self.conns[node as usize]
                        .as_ref()
                        .is_some_and(|c| c.peer == Peer::Gone)
                {
                    // Queued on a connection whose peer is gone: lost to it.
                    self.arena.get_mut(slot).into_dead = true;
                    self.tally.into_dead.push(now);
                }
                if let Some(r) = self.record.as_mut() {
                    r.submitted.insert(id, now);
                }
                if node != u32::MAX {
                    self.note_pending(node as usize);
                } else {
                    for n in 0..self.nodes.len() {
                        self.note_pending(n);
                    }
                }
                let total = self.pool.total_pending_bytes();
                self.tally.peak_total = self.tally.peak_total.max(total);
                if self.oom_limit.is_some_and(|limit| total > limit) {
                    self.out_of_memory();
                }
                Ok(id)
            }
            Err(e) => {
                self.arena.unalloc(slot);
                self.tally.reject(e);
                if let Some(tl) = self.timeline.as_mut() {
                    tl.count(now, 1);
                }
                Err(e)
            }
        }
    }

    fn note_pending(&mut self, n: usize) {
        let p = self.pool.pending_bytes(self.nodes[n]).unwrap_or(0);
        let peak = &mut self.tally.peak_pending[n];
        *peak = (*peak).max(p);
    }

    /// Story 2's "before" broker: direct memory is exhausted, and the handler closes every
    /// connection, healthy ones included.
    fn out_of_memory(&mut self) {
        self.tally.ooms += 1;
        self.mark("out of memory: all closed".to_string());
        for n in 0..self.conns.len() {
            let Some(c) = self.conns[n].as_ref() else {
                continue;
            };
            if !c.established {
                continue;
            }
            if self.servers[n].healthy() && c.peer == Peer::Alive {
                self.tally.healthy_closed += 1;
            }
            let id = c.id;
            self.drop_conn(n);
            let enomem = Failure::Other { errno: Some(12) };
            let _ = self.pool.handle_closed(self.now, id, enomem);
        }
    }

    /// Labels the current instant on the timeline.
    pub fn mark(&mut self, what: String) {
        if let Some(tl) = self.timeline.as_mut() {
            tl.marks.push((self.now, what));
        }
    }

    /// The application's timeout sweep: requests past their deadline with no outcome yet are
    /// timed out from its point of view.
    fn sweep(&mut self) {
        let now = self.now;
        for s in 0..self.streams.len() {
            while let Some(&(deadline, slot, id)) = self.streams[s].fifo.front() {
                if deadline >= now {
                    break;
                }
                self.streams[s].fifo.pop_front();
                let r = self.arena.get(slot);
                if r.id == id && r.class.is_none() {
                    self.classify(slot, Class::TimedOut);
                }
            }
        }
    }

    fn classify(&mut self, slot: u32, class: Class) {
        let r = self.arena.get_mut(slot);
        r.class = Some(class);
        let at = match class {
            Class::TimedOut => r.deadline,
            _ => self.now,
        };
        self.tally.class(class);
        if let Some(tl) = self.timeline.as_mut() {
            let k = match class {
                Class::Ok => 0,
                Class::TimedOut => 2,
                Class::Lost => 3,
            };
            tl.count(at, k);
        }
    }

    // -------------------------------------------------------------------------------------
    // The adapter's loop.

    /// Drains the pool's outputs: actions, writes, events (call it after calling the pool
    /// directly).
    pub fn pump(&mut self) {
        loop {
            // Only the adapter's calls (for actions and writes) can make new output; the
            // events, which the simulator merely records, cannot.
            let mut called = false;
            while let Some(action) = self.pool.poll_action() {
                called = true;
                self.perform(&action);
            }
            let mut bufs = std::mem::take(&mut self.bufs);
            while let Some(conn) = self.pool.poll_transmit(self.transmit_max, &mut bufs) {
                called = true;
                self.write(conn, &bufs);
            }
            self.bufs = bufs;
            while let Some(event) = self.pool.poll_event() {
                self.on_event(event);
            }
            if !called {
                break;
            }
        }
    }

    fn perform(&mut self, action: &Action) {
        match *action {
            Action::Open { conn, options, .. } => {
                let n = conn.node().index();
                if self.conns[n].is_some() {
                    self.fail(format!("{conn:?} opened while node {n} has a connection"));
                    self.drop_conn(n);
                }
                let opts = Opts::new(&options, &self.kernel);
                self.conns[n] = Some(Conn::new(conn, opts, self.now));
                self.tally.connects += 1;
                self.syn(n, true);
            }
            Action::Handshake { conn } => {
                let _ = self.pool.handle_handshake_done(self.now, conn);
            }
            Action::Close { conn, reason } => {
                self.last_close = self.now;
                let n = conn.node().index();
                let Some(c) = self.conns[n].as_ref().filter(|c| c.id == conn) else {
                    return;
                };
                let counted = !matches!(
                    reason,
                    CloseReason::Evicted(_)
                        | CloseReason::Idle
                        | CloseReason::Shutdown
                        | CloseReason::NodeRemoved
                );
                if c.established && counted && self.servers[n].healthy() && c.peer == Peer::Alive {
                    self.tally.healthy_closed += 1;
                }
                self.drop_conn(n);
            }
            _ => {}
        }
    }

    /// The client kernel takes what fits its send buffer of one hand-out.
    fn write(&mut self, conn: ConnId, bufs: &[Bytes]) {
        let n = conn.node().index();
        let now = self.now;
        let Some(c) = self.conns[n].as_mut().filter(|c| c.id == conn) else {
            self.fail(format!("bytes handed out for {conn:?}, which is not open"));
            return;
        };
        if !c.established {
            self.fail(format!("bytes handed out for {conn:?} before it connected"));
            return;
        }
        let mut room = c.send_room();
        let mut taken = 0usize;
        let total: usize = bufs.iter().map(Bytes::len).sum();
        c.handed.clear();
        for (i, b) in bufs.iter().enumerate() {
            let (slot, before) = match c.partial.filter(|_| i == 0) {
                Some(p) => p,
                None => (self.arena.identify(b), 0),
            };
            let r = self.arena.get_mut(slot);
            if !r.handed_out {
                r.handed_out = true;
                if !r.pinned {
                    r.requeued_by = self.last_close;
                }
            }
            if (r.len - before) as usize != b.len() {
                let msg = format!(
                    "{conn:?}: handed out {} bytes of {:?}, expected its {} unwritten",
                    b.len(),
                    r.id,
                    r.len - before
                );
                self.violation.get_or_insert(msg);
            }
            let take = (b.len() as u64).min(room) as u32;
            if take > 0 && r.ended_unsent {
                let msg = format!("at {now:?}: {:?} written after it ended unsent", r.id);
                self.violation.get_or_insert(msg);
            }
            if take > 0 {
                if before == 0 {
                    if now > r.deadline {
                        self.tally.stale_sent += 1;
                    }
                    if c.peer == Peer::Gone && !r.into_dead {
                        r.into_dead = true;
                        self.tally.into_dead.push(now);
                    }
                    r.node = n as u32;
                }
                r.written += take;
                r.refs += 1;
                c.snd.push(Seg {
                    slot,
                    len: take,
                    end: r.written == r.len,
                });
                room -= u64::from(take);
                taken += take as usize;
            }
            let whole = take as usize == b.len();
            c.handed.push((slot, whole));
            if whole {
                c.partial = None;
            } else {
                c.partial = (before + take > 0).then_some((slot, before + take));
                break;
            }
        }
        c.blocked = taken < total;
        if let Err(e) = self.pool.handle_written(now, conn, taken) {
            self.fail(format!("handle_written({conn:?}, {taken}): {e}"));
        }
        self.flow(n);
    }

    /// Moves bytes from the client's send buffer to the server's receive buffer as far as the
    /// path, the peer and the window allow, lets the server read, and wakes a blocked writer.
    fn flow(&mut self, n: usize) {
        let now = self.now;
        loop {
            let Some(c) = self.conns[n].as_mut() else {
                return;
            };
            if !c.established {
                return;
            }
            if c.snd.bytes > 0 {
                if self.servers[n].reachable() && c.peer == Peer::Alive {
                    let window = self.kernel.recv_buffer.saturating_sub(c.rcv.bytes);
                    let moved = c.snd.bytes.min(window);
                    if moved > 0 {
                        let (snd, rcv) = (&mut c.snd, &mut c.rcv);
                        let arena = &mut self.arena;
                        snd.take(moved, |seg, split| {
                            if split {
                                arena.get_mut(seg.slot).refs += 1;
                            }
                            rcv.push(seg);
                        });
                        heard(c, now);
                    }
                    c.retrans_stamp = None;
                    c.retransmits = 0;
                    c.timers[Timer::Rto as usize] = None;
                    if c.snd.bytes > 0 {
                        // A zero window; progress (an ACK of new data) restarts the persist
                        // timer, its backoff and its probe clock, as Linux does.
                        if c.zero_window.is_none() || moved > 0 {
                            c.zero_window = Some(now);
                            c.probes_stamp = None;
                            c.probes_out = 0;
                            c.persist_backoff = 0;
                            let at = c.next_probe(&self.kernel, now);
                            self.arm(n, Timer::Persist, at);
                        }
                    } else {
                        c.zero_window = None;
                        c.probes_stamp = None;
                        c.timers[Timer::Persist as usize] = None;
                    }
                } else if c.retrans_stamp.is_none() {
                    // Sent into the void: the retransmission timer runs from here.
                    c.retrans_stamp = Some(now);
                    c.retransmits = 0;
                    let at = c.next_rto(&self.kernel, now);
                    self.arm(n, Timer::Rto, at);
                }
            }
            let read = self.serve(n);
            let Some(c) = self.conns[n].as_mut() else {
                return;
            };
            if c.blocked && c.writable() {
                c.blocked = false;
                let id = c.id;
                if let Err(e) = self.pool.handle_writable(now, id) {
                    self.fail(format!("handle_writable({id:?}): {e}"));
                }
                return;
            }
            if read == 0 || c.snd.bytes == 0 {
                return;
            }
        }
    }

    /// The server process reads from its receive buffer and executes every whole frame.
    fn serve(&mut self, n: usize) -> u64 {
        let now = self.now;
        let server = &self.servers[n];
        if !server.reads() {
            return 0;
        }
        let latency = server.latency();
        let slow = server.slow.map(|(rate, _)| rate);
        let Some(c) = self.conns[n].as_mut() else {
            return 0;
        };
        if c.peer != Peer::Alive || c.rcv.bytes == 0 {
            c.read_at = now;
            return 0;
        }
        let can = match slow {
            None => c.rcv.bytes,
            Some(rate) => {
                let credit = rate as f64 * (now - c.read_at).as_secs_f64();
                let credit = (credit as u64).min(rate);
                if credit == 0 {
                    if c.timers[Timer::Read as usize].is_none() {
                        self.arm(n, Timer::Read, now + SLOW_READ_EVERY);
                    }
                    return 0;
                }
                c.read_at = now;
                credit.min(c.rcv.bytes)
            }
        };
        let was_idle = c.responses.is_empty();
        let mut executed = std::mem::take(&mut self.scratch_executed);
        let arena = &mut self.arena;
        let mut consumed = std::mem::take(&mut self.scratch_consumed);
        c.rcv.take(can, |seg, split| {
            if seg.end {
                executed.push(seg.slot); // its reference now holds the response
            } else if !split {
                consumed.push(seg.slot);
            }
        });
        for slot in consumed.drain(..) {
            arena.get_mut(slot).refs -= 1;
            arena.release(slot);
        }
        self.scratch_consumed = consumed;
        for slot in executed.drain(..) {
            // The segment's reference now holds the response.
            c.responses.push_back((now + latency, slot));
            let r = self.arena.get_mut(slot);
            r.executed += 1;
            if r.executed > 1 {
                let msg = format!("at {now:?}: {:?} executed twice", r.id);
                self.violation.get_or_insert(msg);
            }
            if r.ended_unsent {
                let msg = format!("at {now:?}: {:?} executed after it ended unsent", r.id);
                self.violation.get_or_insert(msg);
            }
            if now > r.deadline {
                self.tally.stale_executed += 1;
            }
            if let Some(rec) = self.record.as_mut() {
                rec.delivered[n].push((r.id, now));
            }
        }
        self.scratch_executed = executed;
        let more = slow.is_some() && c.rcv.bytes > 0;
        let first = c.responses.front().map(|r| r.0);
        if was_idle {
            if let Some(at) = first {
                self.arm(n, Timer::Response, at);
            }
        }
        if more {
            self.arm(n, Timer::Read, now + SLOW_READ_EVERY);
        }
        can
    }

    fn on_event(&mut self, event: Event) {
        let now = self.now;
        match &event {
            Event::RequestDone {
                id,
                node,
                outcome,
                sent,
                ..
            } => {
                let ps = slot_of(*id);
                let slot = self.by_pool_slot.get(ps).copied().unwrap_or(u32::MAX);
                if slot == u32::MAX || self.arena.get(slot).id != *id {
                    self.fail(format!("{id:?} ended, but it is not a live request"));
                    return;
                }
                self.by_pool_slot[ps] = u32::MAX;
                let r = self.arena.get_mut(slot);
                if r.ended {
                    self.fail(format!("{id:?} ended twice"));
                    return;
                }
                r.ended = true;
                r.ended_unsent = *sent == Sent::Nothing;
                let consistent = match sent {
                    Sent::Nothing => r.written == 0,
                    Sent::Partly => r.written > 0 && r.written < r.len,
                    Sent::Fully => r.written == r.len,
                    _ => false,
                };
                if !consistent {
                    let msg = format!(
                        "at {now:?}: {id:?} ended saying {sent:?}, but the kernel took {} of \
                         its {} bytes",
                        r.written, r.len
                    );
                    self.violation.get_or_insert(msg);
                }
                let deadline = r.deadline;
                let overrun = now - deadline;
                self.tally.max_overrun = self.tally.max_overrun.max(overrun);
                let before = r.class;
                let class = match outcome {
                    Outcome::Response(_) if now <= deadline => Class::Ok,
                    Outcome::DeadlineExceeded { .. } => Class::TimedOut,
                    _ if now <= deadline => Class::Lost,
                    _ => Class::TimedOut,
                };
                if before.is_none() {
                    self.classify(slot, class);
                }
                if matches!(outcome, Outcome::Response(_)) {
                    if class != Class::Ok {
                        self.tally.late_responses += 1;
                    } else {
                        let n = node.index();
                        if self.last_ok[n] + GAP <= now {
                            self.tally.resumed.push((n, self.last_ok[n], now));
                        }
                        self.last_ok[n] = now;
                    }
                }
                self.arena.release(slot);
                if let Some(rec) = self.record.as_mut() {
                    if rec.outcomes.insert(*id, (now, outcome.clone())).is_some() {
                        self.violation.get_or_insert(format!("{id:?} ended twice"));
                    }
                }
            }
            Event::StateChanged {
                node,
                from,
                to,
                reason,
                ..
            } => {
                let n = node.index();
                if *to == NodeState::Ready {
                    if let Some(c) = self.conns[n].as_mut() {
                        c.ready_at = Some(now);
                    }
                    self.tally.ready.push((n, now));
                }
                if let Reason::Closed(r) = reason {
                    self.tally.closes.push((n, now, *from, *r));
                    self.last_close = now;
                }
            }
            Event::Evicted { conn, .. } => self.tally.evictions.push((conn.node().index(), now)),
            _ => {}
        }
        if let Some(rec) = self.record.as_mut() {
            rec.events.push((now, event));
        }
    }

    // -------------------------------------------------------------------------------------
    // Kernels.

    fn arm(&mut self, n: usize, timer: Timer, at: Instant) {
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        c.timers[timer as usize] = Some(at);
        if timer == Timer::Response {
            self.responses_due[n] = at;
        } else {
            let id = c.id;
            self.push(at, Wake::Conn(n, id, timer));
        }
    }

    /// A SYN goes out (`first`), or its timer fired.
    fn syn(&mut self, n: usize, first: bool) {
        let now = self.now;
        let answer = self.servers[n].answer();
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        if !first {
            let elapsed = now - c.syn_sent;
            let limit = c
                .opts
                .user_timeout
                .unwrap_or_else(|| self.kernel.syn_give_up());
            if c.syn_retries > 0 && elapsed >= limit {
                let id = c.id;
                self.drop_conn(n);
                let _ = self.pool.handle_connect_failed(now, id, Failure::TimedOut);
                return;
            }
            c.syn_retries += 1;
        }
        match answer {
            Answer::Accept | Answer::Refuse => {
                // Answered one round trip later; the Syn timer delivers the answer.
                c.syn_retries = u32::MAX;
                let at = now + self.kernel.rtt;
                self.arm(n, Timer::Syn, at);
            }
            Answer::Nothing => {
                let at = c.next_syn(&self.kernel);
                self.arm(n, Timer::Syn, at);
            }
        }
    }

    fn syn_timer(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        if c.syn_retries != u32::MAX {
            self.syn(n, false);
            return;
        }
        let id = c.id;
        match self.servers[n].answer() {
            Answer::Accept => {
                c.established = true;
                heard(c, now);
                if let Some(ka) = c.opts.keepalive {
                    self.arm(n, Timer::Keepalive, now + ka.idle);
                }
                if let Err(e) = self.pool.handle_connected(now, id) {
                    self.fail(format!("handle_connected({id:?}): {e}"));
                }
            }
            Answer::Refuse => {
                self.drop_conn(n);
                let _ = self.pool.handle_connect_failed(now, id, Failure::Refused);
            }
            Answer::Nothing => {
                // The SYN-ACK was lost on the way back: retransmit as if unanswered.
                c.syn_retries = 0;
                self.syn(n, false);
            }
        }
    }

    fn rto(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        let Some(stamp) = c.retrans_stamp.filter(|_| c.snd.bytes > 0) else {
            c.retrans_stamp = None;
            return;
        };
        if self.servers[n].reachable() && c.peer == Peer::Alive {
            self.flow(n); // the retransmission gets through
            return;
        }
        if c.retransmits > 0 {
            let limit = c
                .opts
                .user_timeout
                .unwrap_or_else(|| self.kernel.retransmission_give_up());
            if now - stamp >= limit {
                self.abort(n, Failure::TimedOut);
                return;
            }
        }
        c.retransmits += 1;
        let at = c.next_rto(&self.kernel, now);
        self.arm(n, Timer::Rto, at);
    }

    fn persist(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        if c.snd.bytes == 0 || c.zero_window.is_none() {
            c.zero_window = None;
            return;
        }
        if self.servers[n].reachable() && c.peer == Peer::Alive {
            if c.rcv.bytes < self.kernel.recv_buffer {
                self.flow(n); // the window opened
                return;
            }
            heard(c, now);
            c.probes_out = 0;
        } else {
            c.probes_out += 1;
        }
        let stamp = *c.probes_stamp.get_or_insert(now);
        let give_up = match c.opts.user_timeout {
            Some(ut) => now - stamp >= ut,
            None => c.probes_out >= self.kernel.tcp_retries2,
        };
        if give_up {
            self.abort(n, Failure::TimedOut);
            return;
        }
        c.persist_backoff += 1;
        let at = c.next_probe(&self.kernel, now);
        self.arm(n, Timer::Persist, at);
    }

    fn keepalive(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        let Some(ka) = c.opts.keepalive else {
            return;
        };
        if c.snd.bytes > 0 {
            // Keepalive never probes while data is outstanding.
            self.arm(n, Timer::Keepalive, now + ka.idle);
            return;
        }
        let elapsed = now - c.last_heard;
        if elapsed < ka.idle {
            let at = c.last_heard + ka.idle;
            self.arm(n, Timer::Keepalive, at);
            return;
        }
        let give_up = match c.opts.user_timeout {
            Some(ut) => elapsed >= ut && c.keepalive_probes > 0,
            None => c.keepalive_probes >= ka.retries,
        };
        if give_up {
            self.abort(n, Failure::TimedOut);
            return;
        }
        if self.servers[n].reachable() && c.peer == Peer::Alive {
            heard(c, now);
            self.arm(n, Timer::Keepalive, now + ka.idle);
        } else {
            c.keepalive_probes += 1;
            self.arm(n, Timer::Keepalive, now + ka.interval);
        }
    }

    fn respond(&mut self, n: usize) {
        let now = self.now;
        if !self.servers[n].reachable() {
            return; // held until the path is back
        }
        loop {
            let Some(c) = self.conns[n].as_mut() else {
                return;
            };
            if c.peer != Peer::Alive {
                return;
            }
            match c.responses.front() {
                Some(&(at, slot)) if at <= now => {
                    c.responses.pop_front();
                    heard(c, now);
                    let conn = c.id;
                    let r = self.arena.get_mut(slot);
                    r.refs -= 1;
                    let id = r.id;
                    self.arena.release(slot);
                    let ok = Bytes::from_static(b"ok");
                    if let Err(e) = self.pool.handle_response(now, conn, id, ok) {
                        self.fail(format!("handle_response({conn:?}, {id:?}): {e}"));
                    }
                }
                Some(&(at, _)) => {
                    self.arm(n, Timer::Response, at);
                    return;
                }
                None => return,
            }
        }
    }

    /// The kernel gives up on a connection: it is gone, and the adapter reports why.
    fn abort(&mut self, n: usize, failure: Failure) {
        let Some(c) = self.conns[n].as_ref() else {
            return;
        };
        let id = c.id;
        self.drop_conn(n);
        if let Err(e) = self.pool.handle_closed(self.now, id, failure) {
            self.fail(format!("handle_closed({id:?}): {e}"));
        }
    }

    /// Forgets a connection at both ends (an abortive close: the server discards what it
    /// had not read).
    fn drop_conn(&mut self, n: usize) {
        let Some(mut c) = self.conns[n].take() else {
            return;
        };
        self.last_close = self.now;
        self.responses_due[n] = Instant::MAX;
        for seg in c.snd.segs.drain(..).chain(c.rcv.segs.drain(..)) {
            self.arena.get_mut(seg.slot).refs -= 1;
            self.arena.release(seg.slot);
        }
        for (_, slot) in c.responses.drain(..) {
            self.arena.get_mut(slot).refs -= 1;
            self.arena.release(slot);
        }
        if let Some((slot, _)) = c.partial {
            self.arena.get_mut(slot).abandoned = true;
            self.arena.release(slot);
        }
    }

    // -------------------------------------------------------------------------------------
    // Faults and script.

    fn dispatch(&mut self, at: Instant, wake: Wake) {
        match wake {
            Wake::Conn(n, id, timer) => {
                let due = self.conns[n]
                    .as_mut()
                    .filter(|c| c.id == id && c.timers[timer as usize] == Some(at));
                let Some(c) = due else {
                    return;
                };
                c.timers[timer as usize] = None;
                match timer {
                    Timer::Syn => self.syn_timer(n),
                    Timer::Rto => self.rto(n),
                    Timer::Persist => self.persist(n),
                    Timer::Keepalive => self.keepalive(n),
                    Timer::Response => {}
                    Timer::Read => self.flow(n),
                }
            }
            Wake::Script(i) => {
                if let Some(act) = self.script[i].take() {
                    self.act(act);
                }
            }
            Wake::Sample => self.sample(),
            Wake::Poke => {}
        }
    }

    fn act(&mut self, act: Act) {
        let now = self.now;
        match act {
            Act::Fault(n, fault) => self.fault(n, fault),
            Act::Undo(n, fault) => self.undo(n, fault),
            Act::Pause(s) => self.streams[s].spec.active = false,
            Act::Resume(s) => self.streams[s].spec.active = true,
            Act::Disable(n) => {
                let _ = self.pool.disable_node(now, self.nodes[n]);
            }
            Act::Enable(n) => {
                let _ = self.pool.enable_node(now, self.nodes[n]);
            }
            Act::SetEpoch(n, e) => {
                let _ = self.pool.set_epoch(now, self.nodes[n], e);
            }
            Act::Evict(n) => {
                let _ = self.pool.evict(now, self.nodes[n]);
            }
            Act::Mark(m) => self.mark(m),
            Act::Call(mut f) => f(self),
        }
    }

    fn fault(&mut self, n: usize, fault: Fault) {
        let now = self.now;
        let s = &mut self.servers[n];
        match fault {
            Fault::Hang { .. } => s.hung += 1,
            Fault::PathDrop { .. } => s.path_down += 1,
            Fault::SynBlackhole { .. } => s.syn_blackhole += 1,
            Fault::Slow {
                bytes_per_sec,
                latency,
                ..
            } => {
                s.slow = Some((bytes_per_sec, latency));
                s.slow_depth += 1;
            }
            Fault::Restart { how, .. } => {
                s.down = Some(how);
                s.down_depth += 1;
                s.epoch += 1;
                if let Some(rec) = self.record.as_mut() {
                    rec.delivered[n].clear();
                }
                let Some(c) = self.conns[n].as_mut() else {
                    return;
                };
                if !c.established {
                    return; // its SYN is answered (refused or not) by the new state
                }
                match how {
                    Restart::Silent => {
                        c.peer = Peer::Gone;
                        // The server's side vanished with what it held.
                        let segs: Vec<Seg> = c.rcv.segs.drain(..).collect();
                        c.rcv.bytes = 0;
                        let responses: Vec<u32> = c.responses.drain(..).map(|r| r.1).collect();
                        for slot in segs.iter().map(|s| s.slot).chain(responses) {
                            self.arena.get_mut(slot).refs -= 1;
                            self.arena.release(slot);
                        }
                    }
                    Restart::Fin => self.abort(n, Failure::PeerClosed),
                    Restart::Rst => self.abort(n, Failure::Reset),
                }
                let _ = now;
            }
        }
    }

    fn undo(&mut self, n: usize, fault: Fault) {
        let s = &mut self.servers[n];
        match fault {
            Fault::Hang { .. } => s.hung -= 1,
            Fault::PathDrop { .. } => s.path_down -= 1,
            Fault::SynBlackhole { .. } => s.syn_blackhole -= 1,
            Fault::Slow { .. } => {
                s.slow_depth -= 1;
                if s.slow_depth == 0 {
                    s.slow = None;
                }
            }
            Fault::Restart { .. } => {
                s.down_depth -= 1;
                if s.down_depth == 0 {
                    s.down = None;
                }
            }
        }
        // Whatever waited on the fault moves again.
        self.flow(n);
        if let Some(c) = self.conns[n].as_ref() {
            if let Some(&(at, _)) = c.responses.front() {
                let at = at.max(self.now);
                self.arm(n, Timer::Response, at);
            }
        }
    }

    fn sample(&mut self) {
        self.sweep();
        let now = self.now;
        self.push(now + self.sample_every, Wake::Sample);
        if self.timeline.is_none() {
            return;
        }
        let mut lanes = Vec::with_capacity(self.nodes.len());
        let mut pending = Vec::with_capacity(self.nodes.len());
        for (n, &node) in self.nodes.iter().enumerate() {
            let state = self.pool.node_state(node);
            let lane = if self.pool.is_quarantined(node) == Some(true) {
                Lane::Quarantined
            } else {
                match state {
                    Some(NodeState::Ready) if self.pool.is_writable(node) == Some(false) => {
                        Lane::Unwritable
                    }
                    Some(NodeState::Ready | NodeState::Closing) => Lane::Ready,
                    Some(NodeState::Connecting | NodeState::Handshaking) => Lane::Connecting,
                    _ => Lane::Down,
                }
            };
            lanes.push((lane, !self.servers[n].healthy()));
            pending.push(self.pool.pending_bytes(node).unwrap_or(0));
        }
        let total = self.pool.total_pending_bytes();
        if let Some(tl) = self.timeline.as_mut() {
            tl.sample(now, total, pending, lanes);
        }
    }

    // -------------------------------------------------------------------------------------
    // Invariants.

    fn fail(&mut self, what: impl std::fmt::Display) {
        if self.violation.is_none() {
            self.violation = Some(format!("at {:?}: {what}", self.now));
        }
    }

    /// After every step of a checked run: pending bytes are bounded, and no write stalls past
    /// the write timeout plus one tick.
    fn check(&mut self) {
        let Some(checks) = self.checks.clone() else {
            return;
        };
        let now = self.now;
        for n in 0..self.nodes.len() {
            let pending = self.pool.pending_bytes(self.nodes[n]).unwrap_or(0);
            if pending > checks.max_pending {
                self.fail(format!(
                    "node {n} holds {pending} pending bytes > {}",
                    checks.max_pending
                ));
            }
            if checks.write_timeout.is_zero() {
                continue;
            }
            let Some(c) = self.conns[n].as_ref() else {
                continue;
            };
            let (Some(ready_at), true) = (c.ready_at, c.blocked) else {
                continue;
            };
            let head = c.handed.iter().find(|&&(slot, whole)| {
                let r = self.arena.get(slot);
                let dropped_unsent = r.ended && r.written == 0;
                !whole && !dropped_unsent
            });
            if let Some(&(slot, _)) = head {
                let r = self.arena.get(slot);
                let armed = r.submitted.max(ready_at).max(r.requeued_by);
                let due = armed + checks.write_timeout + checks.tick;
                if now > due {
                    let id = r.id;
                    self.fail(format!(
                        "{id:?} on {:?} not accepted by the kernel since {:?}, and the \
                         connection is still open past write_timeout + tick",
                        c.id, armed
                    ));
                }
            }
        }
    }

    /// A connection's simulated state, for debugging a failed run.
    pub fn describe_conn(&self, n: usize) -> String {
        let Some(c) = self.conns[n].as_ref() else {
            return "no connection".into();
        };
        let handed: Vec<String> = c
            .handed
            .iter()
            .map(|&(slot, whole)| {
                let r = self.arena.get(slot);
                format!(
                    "{:?}(slot {slot}, whole {whole}, written {}/{}, submitted {:?}, ended {})",
                    r.id, r.written, r.len, r.submitted, r.ended
                )
            })
            .collect();
        format!(
            "{:?} established {} blocked {} partial {:?} snd {} rcv {} ready_at {:?} handed {:?}",
            c.id, c.established, c.blocked, c.partial, c.snd.bytes, c.rcv.bytes, c.ready_at, handed
        )
    }

    /// Every request submitted has ended (call once the world has run past every deadline).
    pub fn check_all_ended(&mut self) {
        let live = self.by_pool_slot.iter().filter(|&&s| s != u32::MAX).count();
        if live > 0 {
            self.fail(format!("{live} requests never ended"));
        }
    }
}

/// The earliest instant in `times` (`Instant::MAX` is none) and its index.
fn earliest(times: &[Instant]) -> Option<(Instant, usize)> {
    let mut best = (Instant::MAX, 0);
    for (i, &t) in times.iter().enumerate() {
        if t < best.0 {
            best = (t, i);
        }
    }
    (best.0 != Instant::MAX).then_some(best)
}

fn heard(c: &mut Conn, now: Instant) {
    c.last_heard = now;
    c.keepalive_probes = 0;
}
