//! One node's state: its current connection, outbound queue, counters of consecutive failures
//! and its timers. The transitions live in `lifecycle.rs`, as methods of the pool, because
//! they also touch the request table, the timer heap and the output queues.

use alloc::vec::Vec;
use core::net::SocketAddr;

use crate::event::NodeState;
use crate::ids::{ConnId, NodeId, RequestId};
use crate::outbound::Outbound;
use crate::time::Instant;
use crate::timers::TimerTable;

/// The connection a node currently has (from `Connecting` to `Ready`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conn {
    pub(crate) generation: u32,
    /// When it became `Ready`; frames' write deadlines start no earlier than this.
    pub(crate) ready_at: Option<Instant>,
    /// Opened by the failure detector to probe a quarantined node.
    pub(crate) probe: bool,
}

/// A quarantined node's probe schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quarantine {
    pub(crate) probes_failed: u32,
    /// Every probe failed and the node stays excluded.
    pub(crate) exhausted: bool,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: NodeId,
    pub(crate) addr: SocketAddr,
    pub(crate) state: NodeState,
    pub(crate) conn: Option<Conn>,
    /// The generation of the newest connection ever opened (current or closed).
    pub(crate) conn_generation: u32,
    pub(crate) outbound: Outbound,
    /// Requests fully written and awaiting a response. Removal is lazy: an entry whose request
    /// has gone is skipped, and the list is compacted when it outgrows the live requests.
    pub(crate) awaiting: Vec<RequestId>,
    /// Requests holding a slot for this node: queued, being written, awaiting a response, or
    /// ended by a deadline while in flight (the server may still be working on them).
    pub(crate) requests: usize,
    pub(crate) enabled: bool,
    pub(crate) epoch: u64,
    pub(crate) quarantine: Option<Quarantine>,
    pub(crate) throttled_until: Instant,
    /// `m`: consecutive attempts that failed while still connecting (the setup timeout grows
    /// with it; reset when an attempt gets past the TCP connect).
    pub(crate) setup_failures: u32,
    /// `k`: disconnects since the node was last `Ready` (the reconnect backoff grows with it).
    pub(crate) disconnects: u32,
    /// Consecutive attempts that never reached `Ready` (for selection).
    pub(crate) failed_attempts: u32,
    pub(crate) last_attempt: Option<Instant>,
    /// Consecutive connection failures (for quarantine; reset by a response or readmission).
    pub(crate) failures: u32,
    /// Consecutive request timeouts (for quarantine; reset by a response or readmission).
    pub(crate) timeouts: u32,
    /// A connection should be opened as soon as the reconnect backoff allows.
    pub(crate) want_connection: bool,
    pub(crate) timers: TimerTable,
}

impl Node {
    pub(crate) fn new(id: NodeId, addr: SocketAddr) -> Self {
        Self {
            id,
            addr,
            state: NodeState::Disconnected {
                reconnect_at: Instant::ZERO,
            },
            conn: None,
            conn_generation: 0,
            outbound: Outbound::new(),
            awaiting: Vec::new(),
            requests: 0,
            enabled: true,
            epoch: 0,
            quarantine: None,
            throttled_until: Instant::ZERO,
            setup_failures: 0,
            disconnects: 0,
            failed_attempts: 0,
            last_attempt: None,
            failures: 0,
            timeouts: 0,
            want_connection: false,
            timers: TimerTable::default(),
        }
    }

    pub(crate) fn conn_id(&self) -> Option<ConnId> {
        self.conn.map(|c| ConnId {
            node: self.id,
            generation: c.generation,
        })
    }

    /// Whether `conn` names this node's current connection.
    pub(crate) fn is_current(&self, conn: ConnId) -> bool {
        conn.node == self.id && self.conn.is_some_and(|c| c.generation == conn.generation)
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.state == NodeState::Ready
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

    /// Whether the application and the failure detector allow new requests and probes.
    pub(crate) fn admitted(&self, now: Instant) -> bool {
        self.enabled
            && self.quarantine.is_none()
            && now >= self.throttled_until
            && self.state != NodeState::Closed
    }
}
