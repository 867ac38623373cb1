//! Lazy adapters: run loops that do only the minimum the [`Pool`] run-loop docs allow, driven
//! through the public API against a scripted world. A rule of the sans-IO contract must hold for
//! any adapter, not only a diligent one: our own driver once masked a missing write timer.
//!
//! - [`Style::Sleeper`] wakes only at `poll_timeout()`, exactly then, and between wakes does
//!   nothing at all: it never writes, reads or reports until a timer wakes it.
//! - [`Style::OneByte`] also wakes on every [`TICK`]; at every wake it says each open socket is
//!   writable, takes one hand-out per socket and reports exactly one byte written.
//! - [`Style::Late`] also wakes on every [`TICK`], but reports what it observed at one wake only
//!   at the next (with that later `now`), and drains events only every [`LATE_EVENTS`] wakes.
//!
//! At a wake every loop keeps the documented order: `handle_timeout(now)`, then actions, its
//! reports, writes, reads and events. After an application command it drains actions, as the
//! docs require after every input: an `Open` starts a connect, whose outcome the scripted server
//! gives on the spot (accepted, refused, or never).
//!
//! Every input is checked to leave nothing due at or before `now`; every report the pool refuses
//! must be about a connection it already closed; every test ends by checking that each submitted
//! request ended exactly once, and that none dropped unsent had a byte on a wire.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;

use bytes::Bytes;

use super::{exact, ms, secs};
use crate::{
    Action, AfterLastProbe, CloseReason, Config, ConnId, Event, Failure, HandleError, Instant,
    NodeId, NodeState, Outcome, Phase, Pool, Readmission, RequestId, Target, Violation,
};
use Style::{Late, OneByte, Sleeper};

/// The period of the one-byte writer's and the late reporter's own wakes.
const TICK: Duration = Duration::from_secs(1);
/// The late reporter drains events at every this many wakes.
const LATE_EVENTS: usize = 3;
const NS: Duration = Duration::from_nanos(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Sleeper,
    OneByte,
    Late,
}

const STYLES: [Style; 3] = [Sleeper, OneByte, Late];

// --- The scripted world -----------------------------------------------------------------------

/// How a connect to the server ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Connect {
    Accept,
    Hang,
    Refuse,
}

/// How many bytes the kernel takes per wake on a connection to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    All,
    OneByte,
    Nothing,
}

/// What the server does with a request it has received in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Yes,
    Never,
    /// Starts a response that never completes.
    Drip,
}

/// A node's server.
#[derive(Clone, Copy, Debug)]
struct Server(Connect, Kernel, Answer);

const GOOD: Server = Server(Connect::Accept, Kernel::All, Answer::Yes);
const HANG: Server = Server(Connect::Hang, Kernel::All, Answer::Yes);
const REFUSE: Server = Server(Connect::Refuse, Kernel::All, Answer::Yes);
/// Accepts, then its kernel takes nothing.
const STALLED: Server = Server(Connect::Accept, Kernel::Nothing, Answer::Yes);
/// Accepts, then its kernel takes one byte per wake.
const SLOW: Server = Server(Connect::Accept, Kernel::OneByte, Answer::Yes);
const SILENT: Server = Server(Connect::Accept, Kernel::All, Answer::Never);
const DRIP: Server = Server(Connect::Accept, Kernel::All, Answer::Drip);

/// What an adapter tells the pool about a connection's I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Io {
    Connected,
    Refused,
    Written(usize),
    Response(RequestId),
    Received { partial: bool },
}

/// The adapter's side of one connection, and what its server received on it.
#[derive(Debug)]
struct Socket {
    conn: ConnId,
    server: Server,
    /// The pool accepted the report that the connect completed.
    up: bool,
    /// Closed by an `Action::Close`, or reported refused.
    closed: bool,
    /// A short write parked it until the adapter says it is writable.
    parked: bool,
    /// Bytes the server received.
    bytes: usize,
    /// Requests the server received in full and has not yet answered.
    arrived: Vec<RequestId>,
    /// The server's response has started and will never complete.
    dripping: bool,
}

// --- The loops --------------------------------------------------------------------------------

/// A pool, the world around it and one lazy loop driving it, with a log of what it saw.
struct Lazy {
    pool: Pool,
    style: Style,
    now: Instant,
    /// By node index.
    servers: Vec<Server>,
    sockets: Vec<Socket>,
    /// Observed, to be reported at the next wake (the late reporter only).
    late: Vec<(ConnId, Io)>,
    /// Every frame submitted: a hand-out is a slice of one of them.
    frames: BTreeMap<RequestId, Bytes>,
    submitted: Vec<RequestId>,
    /// Requests some byte of which reached a server.
    on_wire: BTreeSet<RequestId>,
    /// Nodes the application asks a connection for whenever they have none.
    keep: Vec<NodeId>,
    wakes: Vec<Instant>,
    /// `(when, conn, setup deadline)` of every `Action::Open`.
    opens: Vec<(Instant, ConnId, Instant)>,
    closes: Vec<(Instant, ConnId, CloseReason)>,
    /// Reports the pool accepted, with the `now` they carried.
    reports: Vec<(Instant, Io)>,
    /// Events, with the instant they were drained.
    events: Vec<(Instant, Event)>,
}

impl Lazy {
    /// A loop of `style` around a pool with no nodes. It names itself on stderr, which the test
    /// runner shows for a failing test only.
    fn new(config: Config, style: Style) -> Self {
        std::eprintln!("lazy loop: {style:?}");
        let now = Instant::from_secs(1_000); // on the tick grid
        Self {
            pool: Pool::new(config, now).unwrap(),
            style,
            now,
            servers: Vec::new(),
            sockets: Vec::new(),
            late: Vec::new(),
            frames: BTreeMap::new(),
            submitted: Vec::new(),
            on_wire: BTreeSet::new(),
            keep: Vec::new(),
            wakes: Vec::new(),
            opens: Vec::new(),
            closes: Vec::new(),
            reports: Vec::new(),
            events: Vec::new(),
        }
    }

    /// A loop of `style` around a pool of one node, served by `server`.
    fn with(config: Config, style: Style, server: Server) -> (Self, NodeId) {
        let mut l = Self::new(config, style);
        let node = l.node(server);
        (l, node)
    }

    fn node(&mut self, server: Server) -> NodeId {
        let port = 9000 + self.servers.len() as u16;
        self.servers.push(server);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        self.pool.add_node(self.now, addr)
    }

    // --- The application's commands, each followed by the loop's reaction to an input.

    fn connect(&mut self, node: NodeId) {
        self.pool.connect(self.now, node).unwrap();
        self.after_input();
    }

    /// Connects, and asks again whenever the node is left without a connection.
    fn keep(&mut self, node: NodeId) {
        self.keep.push(node);
        self.connect(node);
    }

    fn submit(&mut self, node: NodeId, len: usize, deadline: Duration) -> RequestId {
        self.try_submit(node, len, deadline).unwrap()
    }

    fn try_submit(&mut self, node: NodeId, len: usize, deadline: Duration) -> Option<RequestId> {
        let frame = Bytes::from(vec![0xAB; len]);
        let (now, target) = (self.now, Target::Node(node));
        let submitted = self.pool.submit(now, target, now + deadline, frame.clone());
        if let Ok(id) = submitted {
            self.frames.insert(id, frame);
            self.submitted.push(id);
        }
        self.after_input();
        submitted.ok()
    }

    fn after_input(&mut self) {
        self.actions();
        self.keep_connected();
        if self.style != Late {
            self.drain_events();
        }
        self.assert_nothing_due("an input");
    }

    // --- Sleeping and waking.

    /// When the loop next wakes: at `poll_timeout()`, or (for all but the sleeper) at the next
    /// tick if that comes first.
    fn next_wake(&self) -> Option<Instant> {
        let timer = self.pool.poll_timeout();
        if self.style == Sleeper {
            return timer;
        }
        let tick = TICK.as_nanos() as u64;
        let grid = Instant::from_nanos((self.now.as_nanos() / tick + 1) * tick);
        Some(timer.map_or(grid, |t| t.min(grid)))
    }

    /// Sleeps and wakes for `d`; the time between wakes passes with no call at all.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(at) = self.next_wake().filter(|&at| at <= end) {
            self.wake(at);
        }
        self.now = end;
    }

    fn wake(&mut self, at: Instant) {
        assert!(at > self.now, "woke at {at:?} after {:?}", self.now);
        self.now = at;
        self.wakes.push(at);
        self.pool.handle_timeout(at);
        self.assert_nothing_due("handle_timeout");
        self.actions();
        for (conn, io) in core::mem::take(&mut self.late) {
            self.tell(conn, io);
        }
        self.actions();
        self.write();
        self.read();
        self.actions();
        self.keep_connected();
        if self.style != Late || self.wakes.len() % LATE_EVENTS == 0 {
            self.drain_events();
        }
        self.assert_nothing_due("a wake");
    }

    /// Nothing due at or before `now` may be left behind: a loop that sleeps until
    /// `poll_timeout()` would otherwise wake in the past, or never fire it.
    fn assert_nothing_due(&self, after: &str) {
        let (now, next) = (self.now, self.pool.poll_timeout());
        let msg = "poll_timeout() at or before now";
        assert!(
            next.is_none_or(|t| t > now),
            "{msg} after {after}: {next:?}, {now:?}"
        );
    }

    // --- What the loop does at a wake.

    /// The application asks for a connection to every kept node that has none.
    fn keep_connected(&mut self) {
        for node in self.keep.clone() {
            if let Some(NodeState::Disconnected { .. } | NodeState::AuthFailed { .. }) =
                self.pool.node_state(node)
            {
                let _ = self.pool.connect(self.now, node); // refused while quarantined
                self.actions();
            }
        }
    }

    /// Drains the actions; then the connects started among them end as scripted (refused or
    /// accepted on the spot, or never), which may queue more actions.
    fn actions(&mut self) {
        loop {
            let mut connects = Vec::new();
            while let Some(action) = self.pool.poll_action() {
                match action {
                    Action::Open { conn, deadline, .. } => {
                        self.opens.push((self.now, conn, deadline));
                        let server = self.servers[conn.node().index()];
                        self.sockets.push(Socket {
                            conn,
                            server,
                            up: false,
                            closed: false,
                            parked: false,
                            bytes: 0,
                            arrived: Vec::new(),
                            dripping: false,
                        });
                        match server.0 {
                            Connect::Accept => connects.push((conn, Io::Connected)),
                            Connect::Refuse => connects.push((conn, Io::Refused)),
                            Connect::Hang => {}
                        }
                    }
                    Action::Close { conn, reason } => {
                        self.closes.push((self.now, conn, reason));
                        self.socket(conn).closed = true;
                    }
                    other => panic!("no handshake is configured: {other:?}"),
                }
            }
            if connects.is_empty() {
                return;
            }
            for (conn, io) in connects {
                self.observe(conn, io);
            }
        }
    }

    /// Writes what the pool hands out, as much as each server's kernel takes at this wake (one
    /// byte for the one-byte writer); a short write parks the socket until it says writable.
    fn write(&mut self) {
        let (now, style) = (self.now, self.style);
        let mut room = BTreeMap::new();
        for s in self.sockets.iter_mut().filter(|s| s.up && !s.closed) {
            let take = match (style, s.server.1) {
                (_, Kernel::Nothing) => 0,
                (OneByte, _) | (_, Kernel::OneByte) => 1,
                _ => usize::MAX,
            };
            room.insert(s.conn, take);
            if take > 0 && (s.parked || style == OneByte) {
                s.parked = false;
                self.pool.handle_writable(now, s.conn).unwrap();
            }
        }
        let mut bufs = Vec::new();
        while let Some(conn) = self.pool.poll_transmit(64 * 1024, &mut bufs) {
            let handed: usize = bufs.iter().map(Bytes::len).sum();
            let left = room.get_mut(&conn).expect("handed out for an open socket");
            let n = handed.min(*left);
            *left -= n;
            // Each buffer is the unwritten rest of one frame.
            let (mut taken, mut arrived) = (n, Vec::new());
            for buf in &bufs {
                let id = self.frame_of(buf);
                if taken > 0 {
                    self.on_wire.insert(id);
                }
                if taken >= buf.len() {
                    arrived.push(id);
                }
                taken = taken.saturating_sub(buf.len());
            }
            let s = self.socket(conn);
            (s.parked, s.bytes) = (n < handed, s.bytes + n);
            s.arrived.extend(arrived);
            self.observe(conn, Io::Written(n));
        }
    }

    /// The request whose frame `buf` is a slice of: a hand-out shares the submitted memory.
    fn frame_of(&self, buf: &Bytes) -> RequestId {
        let within = |f: &Bytes| f.as_ptr_range().contains(&buf.as_ptr());
        let found = self.frames.iter().find(|(_, f)| within(f));
        *found.expect("a hand-out is a slice of a submitted frame").0
    }

    /// Each server answers the requests it has received in full, as scripted; a dripping
    /// response is reported partial at every wake.
    fn read(&mut self) {
        let mut seen = Vec::new();
        for s in self.sockets.iter_mut().filter(|s| s.up && !s.closed) {
            for id in s.arrived.drain(..) {
                match s.server.2 {
                    Answer::Yes => seen.extend([
                        (s.conn, Io::Response(id)),
                        (s.conn, Io::Received { partial: false }),
                    ]),
                    Answer::Never => {}
                    Answer::Drip => s.dripping = true,
                }
            }
            if s.dripping {
                seen.push((s.conn, Io::Received { partial: true }));
            }
        }
        for (conn, io) in seen {
            self.observe(conn, io);
        }
    }

    fn drain_events(&mut self) {
        while let Some(event) = self.pool.poll_event() {
            self.events.push((self.now, event));
        }
    }

    /// I/O the loop observed: reported now, or at the next wake by the late reporter.
    fn observe(&mut self, conn: ConnId, io: Io) {
        if self.style == Late {
            self.late.push((conn, io));
        } else {
            self.tell(conn, io);
        }
    }

    fn tell(&mut self, conn: ConnId, io: Io) {
        let now = self.now;
        let result = match io {
            Io::Connected => self.pool.handle_connected(now, conn),
            Io::Refused => self.pool.handle_connect_failed(now, conn, Failure::Refused),
            Io::Written(n) => self.pool.handle_written(now, conn, n),
            Io::Response(id) => {
                let payload = Bytes::from_static(b"ok");
                self.pool.handle_response(now, conn, id, payload)
            }
            Io::Received { partial } => self.pool.handle_received(now, conn, partial),
        };
        let socket = self.socket(conn);
        match result {
            Ok(()) => {
                socket.up |= io == Io::Connected;
                socket.closed |= io == Io::Refused;
                self.reports.push((now, io));
            }
            Err(HandleError::StaleConn) if socket.closed => {} // late, and harmless
            Err(e) => panic!("{io:?} on {conn:?} at {now:?} refused: {e}"),
        }
    }

    fn socket(&mut self, conn: ConnId) -> &mut Socket {
        let found = self.sockets.iter_mut().rev().find(|s| s.conn == conn);
        found.expect("a socket for every opened connection")
    }

    // --- What the log says.

    /// The instants of the accepted reports `pick` selects.
    fn reported(&self, pick: impl Fn(&Io) -> bool) -> Vec<Instant> {
        let picked = self.reports.iter().filter(|(_, io)| pick(io));
        picked.map(|&(at, _)| at).collect()
    }

    fn open_times(&self) -> Vec<Instant> {
        self.opens.iter().map(|o| o.0).collect()
    }

    fn event_at(&self, pick: impl Fn(&Event) -> Option<Instant>) -> Vec<Instant> {
        self.events.iter().filter_map(|(_, e)| pick(e)).collect()
    }

    /// How the request ended, and when that was drained; it must have ended exactly once.
    fn ended(&self, id: RequestId) -> (Instant, Outcome) {
        let dones: Vec<_> = (self.events.iter())
            .filter_map(|(at, e)| match e {
                Event::RequestDone { id: i, outcome, .. } if *i == id => Some((*at, outcome)),
                _ => None,
            })
            .collect();
        assert_eq!(dones.len(), 1, "{id:?} ended {dones:?}");
        (dones[0].0, dones[0].1.clone())
    }

    /// `id` ended with `outcome` at `at`: exactly, for the loops that drain events at every
    /// wake; for the late reporter, `at` was one of its wakes and the event came no earlier.
    fn assert_ended(&self, id: RequestId, outcome: &Outcome, at: Instant) {
        let (drained, got) = self.ended(id);
        assert_eq!(&got, outcome, "{id:?}");
        if self.style == Late {
            assert!(
                drained >= at && self.wakes.contains(&at),
                "{drained:?}, {at:?}"
            );
        } else {
            assert_eq!(drained, at, "{id:?} ended at");
        }
    }

    /// Shuts the pool down and checks that every submitted request ended exactly once, and that
    /// none dropped unsent had a byte on a wire.
    fn finish(mut self) {
        self.pool.shutdown(self.now);
        self.actions();
        self.drain_events();
        for &id in &self.submitted {
            if self.ended(id).1 == deadline_exceeded(Phase::Queued) {
                assert!(!self.on_wire.contains(&id), "{id:?} was dropped unsent");
            }
        }
        let done = |(_, e): &&(Instant, Event)| matches!(e, Event::RequestDone { .. });
        assert_eq!(
            self.events.iter().filter(done).count(),
            self.submitted.len()
        );
    }
}

/// The loop's first connection to `node`, made ready (the late reporter needs one wake for it),
/// with time then on the tick grid.
fn ready(l: &mut Lazy, node: NodeId) -> ConnId {
    l.connect(node);
    l.run_for(secs(3));
    assert_eq!(l.pool.node_state(node), Some(NodeState::Ready));
    l.pool.current_conn(node).unwrap()
}

fn ok() -> Outcome {
    Outcome::Response(Bytes::from_static(b"ok"))
}

fn deadline_exceeded(phase: Phase) -> Outcome {
    Outcome::DeadlineExceeded { phase }
}

/// `to[i] - from[i]`, pair by pair.
fn gaps(from: &[Instant], to: &[Instant]) -> Vec<Duration> {
    from.iter().zip(to).map(|(a, b)| *b - *a).collect()
}

mod cases;
