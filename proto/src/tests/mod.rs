//! Scenario tests with a hand-driven clock: a [`Harness`] owns a pool and the time, plays the
//! adapter's part on request, and collects what the pool emits.

mod availability;
mod checks;
mod connections;
mod counters;
mod deadlines;
mod detection;
mod final_failures;
mod health;
mod heartbeat;
mod in_order;
mod lazy;
mod lifecycle;
mod limits;
mod names;
mod pool;
mod props;
mod queue;
mod select_index;
mod shutdown;
mod transmit;

use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;

use bytes::Bytes;

use crate::{
    Action, Config, ConnId, Event, Instant, NodeId, NodeState, Outcome, Pool, RequestId, Target,
};

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Moves `x` to the next number of a xorshift64 sequence: the randomized tests' cheap,
/// reproducible source of choices (each seeds its own).
pub(crate) fn xorshift(x: &mut u64) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
}

/// Slides windows of 20 and 4 items through a queue read from a moving start (one push, one
/// pop at a time), as [`Fifo`](crate::fifo::Fifo) and the queues built on its pattern are:
/// after every pop, the item it gave and the queue's read position and buffer length, which
/// `places` reports. A window of 20 keeps what it read until that is three quarters of the
/// buffer (60 read, 80 held), then drops it, every 60 reads; a window of 4 keeps it until the
/// slack (32 read) is reached, even past three quarters. Returns the two queues slid.
pub(crate) fn assert_slides_as_a_fifo<Q: Default>(
    mut push: impl FnMut(&mut Q, u32),
    mut pop: impl FnMut(&mut Q) -> Option<u32>,
    places: impl Fn(&Q) -> (usize, usize),
) -> [Q; 2] {
    [(20u32, 60), (4, 32)].map(|(window, every)| {
        let mut queue = Q::default();
        for item in 0..window {
            push(&mut queue, item);
        }
        let mut drops = 0;
        for item in window..window + 10 * every {
            push(&mut queue, item);
            assert_eq!(pop(&mut queue), Some(item - window), "window {window}");
            let read = (item - window + 1) % every;
            let expected = (read as usize, (window + read) as usize);
            assert_eq!(places(&queue), expected, "window {window}, item {item}");
            drops += usize::from(read == 0);
        }
        assert_eq!(drops, 10, "window {window}");
        queue
    })
}

/// A config without jitter, so every timeout in a test is exact, and without quarantine, so a
/// lifecycle test can fail a node as often as it likes.
pub(crate) fn exact() -> Config {
    let mut c = Config::default();
    c.setup_timeout_jitter = 0.0;
    c.reconnect_jitter = 0.0;
    c.quarantine_after_failures = u32::MAX;
    c.quarantine_after_timeouts = u32::MAX;
    c
}

pub(crate) struct Harness {
    pub(crate) pool: Pool,
    pub(crate) now: Instant,
    pub(crate) events: Vec<Event>,
    pub(crate) actions: Vec<Action>,
    /// Hand-outs taken off the transmit queue while looking for another connection's.
    held: Vec<(ConnId, Bytes)>,
}

impl Harness {
    pub(crate) fn new(config: Config) -> Self {
        // Start away from zero so "time going backwards" has room.
        let now = Instant::from_secs(1_000);
        Self {
            pool: Pool::new(config, now).unwrap(),
            now,
            events: Vec::new(),
            actions: Vec::new(),
            held: Vec::new(),
        }
    }

    pub(crate) fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    pub(crate) fn add(&mut self) -> NodeId {
        let port = 9000 + self.pool.nodes().count() as u16;
        self.pool.add_node(self.now, Self::addr(port))
    }

    /// Moves time forward and fires due timers.
    pub(crate) fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        self.pool.handle_timeout(self.now);
        self.collect();
    }

    /// Moves time to `at` (if later) and fires due timers.
    pub(crate) fn advance_to(&mut self, at: Instant) {
        self.now = self.now.max(at);
        self.pool.handle_timeout(self.now);
        self.collect();
    }

    /// Drains the pool's actions and events into the harness.
    pub(crate) fn collect(&mut self) {
        while let Some(a) = self.pool.poll_action() {
            self.actions.push(a);
        }
        while let Some(e) = self.pool.poll_event() {
            self.events.push(e);
        }
    }

    pub(crate) fn take_actions(&mut self) -> Vec<Action> {
        self.collect();
        core::mem::take(&mut self.actions)
    }

    pub(crate) fn take_events(&mut self) -> Vec<Event> {
        self.collect();
        core::mem::take(&mut self.events)
    }

    /// The connection of the last `Open` action, with its setup deadline.
    pub(crate) fn expect_open(&mut self) -> (ConnId, Instant) {
        let opens: Vec<_> = self
            .take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Open { conn, deadline, .. } => Some((conn, deadline)),
                _ => None,
            })
            .collect();
        assert_eq!(opens.len(), 1, "expected exactly one Open, got {opens:?}");
        opens[0]
    }

    /// Asks for a connection, waiting out the reconnect backoff if there is one; returns the
    /// new connection and its setup deadline.
    pub(crate) fn open(&mut self, node: NodeId) -> (ConnId, Instant) {
        self.pool.connect(self.now, node).unwrap();
        self.collect();
        if !self
            .actions
            .iter()
            .any(|a| matches!(a, Action::Open { .. }))
        {
            let at = self.reconnect_at(node);
            self.advance_to(at);
        }
        self.expect_open()
    }

    /// Fails one connect attempt of `node` (waiting out its backoff first).
    pub(crate) fn refuse(&mut self, node: NodeId) {
        let (conn, _) = self.open(node);
        self.pool
            .handle_connect_failed(self.now, conn, crate::Failure::Refused)
            .unwrap();
        self.collect();
    }

    /// Asks for a connection and completes it: returns the ready connection.
    pub(crate) fn ready(&mut self, node: NodeId) -> ConnId {
        self.pool.connect(self.now, node).unwrap();
        let (conn, _) = self.expect_open();
        self.pool.handle_connected(self.now, conn).unwrap();
        assert_eq!(self.pool.node_state(node), Some(NodeState::Ready));
        self.collect();
        conn
    }

    pub(crate) fn submit(&mut self, node: NodeId, len: usize, deadline: Duration) -> RequestId {
        let frame = Bytes::from(alloc::vec![0xAB; len]);
        let id = self
            .pool
            .submit(self.now, Target::Node(node), self.now + deadline, frame)
            .unwrap();
        self.collect();
        id
    }

    /// Plays an adapter's write side for `conn`, one frame at a time: says the socket is
    /// writable, then returns the unwritten rest of its oldest frame (handed out: it must be
    /// reported with `handle_written`). Hand-outs of other connections met on the way wait
    /// for their own turn.
    pub(crate) fn transmit(&mut self, conn: ConnId) -> Option<Bytes> {
        if let Some(i) = self.held.iter().position(|(c, _)| *c == conn) {
            return Some(self.held.remove(i).1);
        }
        let _ = self.pool.handle_writable(self.now, conn);
        let mut out = Vec::new();
        while let Some(c) = self.pool.poll_transmit(1, &mut out) {
            assert_eq!(out.len(), 1, "a 1-byte budget hands out one frame");
            let bytes = out[0].clone();
            if c == conn {
                return Some(bytes);
            }
            self.held.push((c, bytes));
        }
        None
    }

    /// Plays a kernel that accepts everything: writes every frame queued on `conn`.
    pub(crate) fn flush(&mut self, conn: ConnId) -> usize {
        let mut total = 0;
        while let Some(bytes) = self.transmit(conn) {
            total += bytes.len();
            self.pool
                .handle_written(self.now, conn, bytes.len())
                .unwrap();
        }
        self.collect();
        total
    }

    pub(crate) fn respond(&mut self, conn: ConnId, id: RequestId) {
        self.pool
            .handle_response(self.now, conn, id, Bytes::from_static(b"ok"))
            .unwrap();
        self.collect();
    }

    /// Every `RequestDone` seen so far, in order.
    pub(crate) fn outcomes(&self) -> Vec<(RequestId, Outcome)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::RequestDone { id, outcome, .. } => Some((*id, outcome.clone())),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn outcome(&self, id: RequestId) -> Option<Outcome> {
        let all: Vec<_> = self
            .outcomes()
            .into_iter()
            .filter(|(r, _)| *r == id)
            .collect();
        assert!(all.len() <= 1, "{id:?} ended more than once: {all:?}");
        all.into_iter().next().map(|(_, o)| o)
    }

    /// How much of the request's frame its `RequestDone` said was sent, if it ended.
    pub(crate) fn sent(&self, id: RequestId) -> Option<crate::Sent> {
        let all: Vec<_> = self
            .events
            .iter()
            .filter_map(|e| match e {
                Event::RequestDone { id: r, sent, .. } if *r == id => Some(*sent),
                _ => None,
            })
            .collect();
        assert!(all.len() <= 1, "{id:?} ended more than once: {all:?}");
        all.first().copied()
    }

    /// The one `RequestDone` of `id`: its outcome, what was sent, whether it was retried.
    pub(crate) fn ended(&self, id: RequestId) -> (Outcome, crate::Sent, bool) {
        let all: Vec<_> = self
            .events
            .iter()
            .filter_map(|e| match e {
                Event::RequestDone {
                    id: r,
                    outcome,
                    sent,
                    retried,
                    ..
                } if *r == id => Some((outcome.clone(), *sent, *retried)),
                _ => None,
            })
            .collect();
        assert_eq!(all.len(), 1, "{id:?} ends exactly once: {all:?}");
        all[0].clone()
    }

    pub(crate) fn writability(&self) -> Vec<bool> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Writability { writable, .. } => Some(*writable),
                _ => None,
            })
            .collect()
    }

    /// The node's `reconnect_at`, if it is between connections.
    pub(crate) fn reconnect_at(&self, node: NodeId) -> Instant {
        match self.pool.node_state(node) {
            Some(
                NodeState::Disconnected { reconnect_at } | NodeState::AuthFailed { reconnect_at },
            ) => reconnect_at,
            other => panic!("not disconnected: {other:?}"),
        }
    }
}
