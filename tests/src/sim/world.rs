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

// The rest of the world's work, by who does it.
mod adapter;
mod kernels;
mod script;

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
