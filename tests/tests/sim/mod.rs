//! A deterministic network simulator around the real `keepwire_proto::Pool`: a virtual clock,
//! simulated kernels (a bounded send buffer per connection) and scripted servers that fail the
//! ways real ones do: accept and never read, SYN blackhole, reset, restart on the same
//! address, killed (connections closed, connects refused), drain slowly, or sit behind a
//! stalled path.
//!
//! The loop is the one an adapter runs, so these scenarios exercise the same call sequence as
//! the real drivers, with time moved by hand.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use keepwire_proto::{
    Action, Config, ConnId, Event, Failure, Instant, NodeId, Outcome, Pool, RequestId, SubmitError,
    Target,
};

/// How a simulated server behaves.
#[derive(Clone, Debug)]
pub(crate) enum Server {
    /// Reads everything and answers after `latency`.
    Healthy { latency: Duration },
    /// Accepts connections, never reads: the client's send buffer fills and stays full.
    NeverRead,
    /// SYNs vanish: a connect never completes.
    Blackhole,
    /// Reads at most `bytes_per_sec`, answers each request once read.
    SlowDrain { bytes_per_sec: u64 },
    /// Not running: nothing listens, every connect is refused at once.
    Refusing,
}

/// One simulated node: its behaviour and the windows during which the path drops everything.
pub(crate) struct Peer {
    pub(crate) server: Server,
    pub(crate) stalls: Vec<Range<Instant>>,
}

struct SimConn {
    node: usize,
    /// When the TCP connect completes (None: never).
    connected_at: Option<Instant>,
    /// The connect is refused (nothing listens).
    refused: bool,
    reported: bool,
    /// Bytes in the client kernel's send buffer, not yet read by the server.
    in_kernel: VecDeque<u8>,
    /// The last write was cut short: the pool waits for `handle_writable`.
    blocked: bool,
    /// Bytes the server has read, not yet parsed into frames.
    read: Vec<u8>,
    /// Responses the server will send: (when, request).
    answers: VecDeque<(Instant, RequestId)>,
    /// Bytes a slow server may still read, and when that was last topped up.
    drain_credit: f64,
    credited_at: Instant,
    /// The server side is gone without a trace (a silent restart): nothing is read or answered.
    dead: bool,
}

pub(crate) const SEND_BUFFER: usize = 64 * 1024;
const RTT: Duration = Duration::from_millis(1);
const TICK: Duration = Duration::from_millis(1);

/// A load generator and its period.
pub(crate) type Load<'a> = (Duration, &'a mut dyn FnMut(&mut World));

/// The simulated world.
pub(crate) struct World {
    pub(crate) pool: Pool,
    pub(crate) now: Instant,
    pub(crate) nodes: Vec<NodeId>,
    pub(crate) peers: Vec<Peer>,
    conns: BTreeMap<ConnId, SimConn>,
    /// Every event, stamped.
    pub(crate) events: Vec<(Instant, Event)>,
    /// Every request's end, stamped.
    pub(crate) outcomes: BTreeMap<RequestId, (Instant, Outcome)>,
    /// When each accepted request was submitted.
    pub(crate) submitted: BTreeMap<RequestId, Instant>,
    /// Requests each server received in full, per node (a restart starts a new list).
    pub(crate) delivered: Vec<Vec<(RequestId, Instant)>>,
}

impl World {
    pub(crate) fn new(config: Config, peers: Vec<Peer>) -> Self {
        let now = Instant::ZERO;
        let mut pool = Pool::new(config, now).expect("valid config");
        let nodes = (0..peers.len())
            .map(|i| {
                pool.add_node(
                    now,
                    format!("127.0.0.1:{}", 9000 + i)
                        .parse::<std::net::SocketAddr>()
                        .unwrap(),
                )
            })
            .collect();
        let delivered = vec![Vec::new(); peers.len()];
        Self {
            pool,
            now,
            nodes,
            peers,
            conns: BTreeMap::new(),
            events: Vec::new(),
            outcomes: BTreeMap::new(),
            submitted: BTreeMap::new(),
            delivered,
        }
    }

    /// Submits a request whose frame is `id | len | payload`, as the built-in codec frames it.
    pub(crate) fn submit(
        &mut self,
        target: Target,
        len: usize,
        deadline: Duration,
    ) -> Result<RequestId, SubmitError> {
        let id = self.pool.next_request_id();
        let mut frame = Vec::with_capacity(12 + len);
        frame.extend_from_slice(&id.as_u64().to_be_bytes());
        frame.extend_from_slice(&(len as u32).to_be_bytes());
        frame.resize(12 + len, 0x42);
        let result = self
            .pool
            .submit(self.now, target, self.now + deadline, Bytes::from(frame));
        if let Ok(id) = result {
            self.submitted.insert(id, self.now);
        }
        self.pump();
        result
    }

    /// Runs the world until `until`, calling `load` once per `every` (if given).
    pub(crate) fn run_until(&mut self, until: Instant, mut load: Option<Load<'_>>) {
        let mut next_load = self.now;
        while self.now < until {
            if let Some((every, f)) = load.as_mut() {
                if self.now >= next_load {
                    f(self);
                    next_load = self.now + *every;
                }
            }
            let mut next = (self.now + TICK).min(until);
            if let Some(deadline) = self.pool.poll_timeout().filter(|&d| d > self.now) {
                next = next.min(deadline);
            }
            // Answers and connects land at their own instants, not on the next tick.
            if let Some(arrival) = self.next_arrival() {
                next = next.min(arrival);
            }
            self.now = next;
            self.pool.handle_timeout(self.now);
            self.pump();
        }
    }

    pub(crate) fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until, None);
    }

    /// The server of `node` restarts on the same address: every connection to it is reset.
    pub(crate) fn restart(&mut self, node: usize) {
        let victims: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.node == node)
            .map(|(id, _)| *id)
            .collect();
        for conn in victims {
            self.conns.remove(&conn);
            let _ = self.pool.handle_closed(self.now, conn, Failure::Reset);
        }
        self.delivered[node].clear();
        self.pump();
    }

    /// The server of `node` is killed: its connections close (the client reads end of stream)
    /// and, until [`World::revive`], every connect to it is refused.
    pub(crate) fn kill(&mut self, node: usize) {
        let victims: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.node == node)
            .map(|(id, _)| *id)
            .collect();
        for conn in victims {
            self.conns.remove(&conn);
            let _ = self.pool.handle_closed(self.now, conn, Failure::PeerClosed);
        }
        self.peers[node].server = Server::Refusing;
        self.delivered[node].clear();
        self.pump();
    }

    /// The killed server of `node` listens again on the same address, as `server`.
    pub(crate) fn revive(&mut self, node: usize, server: Server) {
        self.peers[node].server = server;
        self.pump();
    }

    /// The server of `node` restarts silently: its old connections stay open on our side but
    /// nothing on them is ever read or answered again (no FIN, no RST reaches us).
    pub(crate) fn restart_silently(&mut self, node: usize) {
        for sim in self.conns.values_mut().filter(|c| c.node == node) {
            sim.dead = true;
        }
        self.delivered[node].clear();
    }

    /// The earliest pending answer or connect completion after now.
    fn next_arrival(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|c| {
                let connect = c.connected_at.filter(|_| !c.reported);
                let answer = c.answers.front().map(|(at, _)| *at);
                connect.into_iter().chain(answer).min()
            })
            .filter(|&t| t > self.now)
            .min()
    }

    fn stalled(&self, node: usize) -> bool {
        self.peers[node]
            .stalls
            .iter()
            .any(|r| r.contains(&self.now))
    }

    /// One round of the adapter's loop: actions, connects, the server side, answers, writes,
    /// events.
    pub(crate) fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(action) = self.pool.poll_action() {
                progressed = true;
                self.perform(&action);
            }
            let conns: Vec<ConnId> = self.conns.keys().copied().collect();
            for conn in conns {
                progressed |= self.step_conn(conn);
            }
            progressed |= self.transmit();
            while let Some(event) = self.pool.poll_event() {
                progressed = true;
                if let Event::RequestDone { id, outcome, .. } = &event {
                    assert!(
                        self.outcomes
                            .insert(*id, (self.now, outcome.clone()))
                            .is_none(),
                        "{id:?} ended twice"
                    );
                }
                self.events.push((self.now, event));
            }
            if !progressed {
                break;
            }
        }
    }

    fn perform(&mut self, action: &Action) {
        match *action {
            Action::Open { conn, .. } => {
                let node = self
                    .nodes
                    .iter()
                    .position(|&n| n == conn.node())
                    .expect("known node");
                let refused = matches!(self.peers[node].server, Server::Refusing);
                let connected_at = match self.peers[node].server {
                    Server::Blackhole | Server::Refusing => None,
                    _ if self.stalled(node) => None,
                    _ => Some(self.now + RTT),
                };
                let sim = SimConn {
                    node,
                    connected_at,
                    refused,
                    reported: false,
                    in_kernel: VecDeque::new(),
                    blocked: false,
                    read: Vec::new(),
                    answers: VecDeque::new(),
                    drain_credit: 0.0,
                    credited_at: self.now,
                    dead: false,
                };
                self.conns.insert(conn, sim);
            }
            Action::Handshake { conn } => {
                let _ = self.pool.handle_handshake_done(self.now, conn);
            }
            Action::Close { conn, .. } => {
                self.conns.remove(&conn);
            }
            _ => {}
        }
    }

    /// The client kernel takes what fits in each send buffer, for every connection the pool
    /// hands bytes out for; returns whether any byte moved.
    fn transmit(&mut self) -> bool {
        let mut progressed = false;
        let mut frames = Vec::new();
        while let Some(conn) = self.pool.poll_transmit(SEND_BUFFER, &mut frames) {
            let sim = self
                .conns
                .get_mut(&conn)
                .expect("bytes handed out for an open conn");
            let total: usize = frames.iter().map(Bytes::len).sum();
            let mut n = 0;
            for frame in &frames {
                let take = frame.len().min(SEND_BUFFER - sim.in_kernel.len());
                sim.in_kernel.extend(&frame[..take]);
                n += take;
            }
            sim.blocked = n < total;
            self.pool
                .handle_written(self.now, conn, n)
                .expect("reporting what was handed out");
            progressed |= n > 0;
        }
        progressed
    }

    /// Advances one connection; returns whether anything happened.
    fn step_conn(&mut self, conn: ConnId) -> bool {
        let now = self.now;
        let Some(sim) = self.conns.get_mut(&conn) else {
            return false;
        };
        let node = sim.node;
        let stalled = sim.dead || self.peers[node].stalls.iter().any(|r| r.contains(&now));
        let server = self.peers[node].server.clone();
        if !sim.reported && sim.refused {
            self.conns.remove(&conn);
            let _ = self.pool.handle_connect_failed(now, conn, Failure::Refused);
            return true;
        }
        if !sim.reported {
            match sim.connected_at {
                Some(at) if at <= now => {
                    sim.reported = true;
                    let _ = self.pool.handle_connected(now, conn);
                    return true;
                }
                _ => return false,
            }
        }
        let mut progressed = false;
        // The server reads (unless the path is stalled).
        if !stalled {
            let can_read = match server {
                Server::Healthy { .. } => sim.in_kernel.len(),
                Server::SlowDrain { bytes_per_sec } => {
                    let elapsed = now - sim.credited_at;
                    sim.credited_at = now;
                    sim.drain_credit += bytes_per_sec as f64 * elapsed.as_secs_f64();
                    let n = (sim.drain_credit as usize).min(sim.in_kernel.len());
                    sim.drain_credit -= n as f64;
                    sim.drain_credit = sim.drain_credit.min(bytes_per_sec as f64);
                    n
                }
                _ => 0,
            };
            if can_read > 0 {
                sim.read.extend(sim.in_kernel.drain(..can_read));
            }
            let latency = match server {
                Server::Healthy { latency } => latency,
                _ => Duration::ZERO,
            };
            while sim.read.len() >= 12 {
                let len = u32::from_be_bytes(sim.read[8..12].try_into().unwrap()) as usize;
                if sim.read.len() < 12 + len {
                    break;
                }
                let id = RequestId::from_u64(u64::from_be_bytes(sim.read[..8].try_into().unwrap()));
                sim.read.drain(..12 + len);
                sim.answers.push_back((now + latency, id));
                self.delivered[node].push((id, now));
            }
        }
        // A socket whose write was cut short takes bytes again once the server read some.
        if let Some(sim) = self.conns.get_mut(&conn) {
            if sim.blocked && sim.in_kernel.len() < SEND_BUFFER {
                sim.blocked = false;
                progressed = true;
                self.pool
                    .handle_writable(now, conn)
                    .expect("the connection is open");
            }
        }
        // Answers arrive (unless the path is stalled).
        while let Some(sim) = self.conns.get_mut(&conn).filter(|_| !stalled) {
            match sim.answers.front() {
                Some(&(at, id)) if at <= now => {
                    sim.answers.pop_front();
                    progressed = true;
                    let _ = self
                        .pool
                        .handle_response(now, conn, id, Bytes::from_static(b"ok"));
                }
                _ => break,
            }
        }
        progressed
    }

    /// Outcomes of the given requests, in order.
    pub(crate) fn outcome(&self, id: RequestId) -> Option<&Outcome> {
        self.outcomes.get(&id).map(|(_, o)| o)
    }

    /// Counts outcomes by a classifier.
    pub(crate) fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.values().filter(|(_, o)| f(o)).count()
    }

    /// Requests whose outcome took longer than `limit` after submission.
    pub(crate) fn slowest_end(&self) -> Duration {
        self.outcomes
            .iter()
            .map(|(id, (at, _))| *at - self.submitted[id])
            .max()
            .unwrap_or_default()
    }
}

pub(crate) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn at(d: Duration) -> Instant {
    Instant::ZERO + d
}
