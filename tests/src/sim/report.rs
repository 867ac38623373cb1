//! What a run produced: its figures ([`Tally`]) and its samples over time ([`Timeline`]).

use std::time::Duration;

use keepwire_proto::{CloseReason, Instant, NodeState, SubmitError};

use super::arena::Class;

/// The figures of one run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Requests the pool accepted.
    pub accepted: u64,
    /// Answered within their deadline.
    pub ok: u64,
    /// Refused at submit (the caller knew at once).
    pub failed_fast: u64,
    /// Not answered by their deadline.
    pub timed_out: u64,
    /// Failed by the client (a connection closed or evicted) before their deadline.
    pub lost: u64,
    /// Refusals by reason.
    pub rejected: Vec<(String, u64)>,
    /// Answers that came after the application had given up.
    pub late_responses: u64,
    /// The longest any request's outcome came after its (application) deadline.
    pub max_overrun: Duration,
    /// Requests whose first byte was written after their deadline: a stale backlog sent.
    pub stale_sent: u64,
    /// Requests a server executed after their deadline.
    pub stale_executed: u64,
    /// When each request was queued on or written into a connection whose peer was gone.
    pub into_dead: Vec<Instant>,
    /// Peak pending bytes per node (one connection each).
    pub peak_pending: Vec<u64>,
    /// Peak pending bytes across all nodes.
    pub peak_total: u64,
    /// Established connections closed while their server was healthy.
    pub healthy_closed: u64,
    /// Out-of-memory events of the application's handler.
    pub ooms: u64,
    /// Connection attempts.
    pub connects: u64,
    /// Connection closes: node, when, the state left, why.
    pub closes: Vec<(usize, Instant, NodeState, CloseReason)>,
    /// When a node became ready.
    pub ready: Vec<(usize, Instant)>,
    /// Evictions: node, when.
    pub evictions: Vec<(usize, Instant)>,
    /// Answers resuming after a gap of a second or more: node, last answer before, first after.
    pub resumed: Vec<(usize, Instant, Instant)>,
}

impl Tally {
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            peak_pending: vec![0; nodes],
            ..Self::default()
        }
    }

    pub(crate) fn reject(&mut self, e: SubmitError) {
        self.failed_fast += 1;
        let name = match e {
            SubmitError::NotWritable => "not writable",
            SubmitError::MemoryBudget => "memory budget",
            SubmitError::InFlightLimit => "in-flight limit",
            SubmitError::NodeUnavailable(_) => "node unavailable",
            SubmitError::NoNode { .. } => "no node",
            SubmitError::DeadlinePassed => "deadline passed",
            _ => "other",
        };
        match self.rejected.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => self.rejected.push((name.to_string(), 1)),
        }
    }

    pub(crate) fn class(&mut self, class: Class) {
        match class {
            Class::Ok => self.ok += 1,
            Class::TimedOut => self.timed_out += 1,
            Class::Lost => self.lost += 1,
        }
    }

    /// Requests classed so far (accepted ones).
    pub fn ended(&self) -> u64 {
        self.ok + self.timed_out + self.lost
    }

    /// The first close of a connection of `node` at or after `from` (established connections
    /// only when `established`).
    pub fn first_close(&self, node: usize, from: Instant, established: bool) -> Option<Instant> {
        self.closes
            .iter()
            .find(|(n, at, s, _)| *n == node && *at >= from && (!established || s.is_established()))
            .map(|c| c.1)
    }

    /// The first answer of `node` after a gap that ended at or after `from`.
    pub fn resumed_after(&self, node: usize, from: Instant) -> Option<Instant> {
        self.resumed
            .iter()
            .find(|(n, _, at)| *n == node && *at >= from)
            .map(|r| r.2)
    }

    /// The first time any node became ready.
    pub fn first_ready(&self) -> Option<Instant> {
        self.ready.first().map(|r| r.1)
    }
}

/// A node's lane in the timeline picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// No connection.
    Down,
    /// Connecting.
    Connecting,
    /// Ready.
    Ready,
    /// Ready but above its high watermark.
    Unwritable,
    /// Quarantined by the failure detector.
    Quarantined,
}

/// Samples of one run, for the pictures.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// Sampling period.
    pub every: Duration,
    /// When each sample was taken.
    pub at: Vec<Instant>,
    /// Pending bytes across all nodes.
    pub total: Vec<u64>,
    /// Pending bytes per node: `pending[node][sample]`.
    pub pending: Vec<Vec<u64>>,
    /// Lane per node and whether a fault was active: `lanes[node][sample]`.
    pub lanes: Vec<Vec<(Lane, bool)>>,
    /// Outcomes per period: ok, failed fast, timed out, lost.
    pub outcomes: Vec<[u32; 4]>,
    /// Labelled instants.
    pub marks: Vec<(Instant, String)>,
    /// When the run ended.
    pub end: Instant,
    every_ns: u64,
}

impl Timeline {
    pub(crate) fn new(every: Duration, nodes: usize) -> Self {
        Self {
            every,
            at: Vec::new(),
            total: Vec::new(),
            pending: vec![Vec::new(); nodes],
            lanes: vec![Vec::new(); nodes],
            outcomes: Vec::new(),
            marks: Vec::new(),
            end: Instant::ZERO,
            every_ns: every.as_nanos().max(1) as u64,
        }
    }

    /// Counts one outcome of kind `k` (0 ok, 1 failed fast, 2 timed out, 3 lost) at `at`.
    pub(crate) fn count(&mut self, at: Instant, k: usize) {
        let i = (at.as_nanos() / self.every_ns) as usize;
        if self.outcomes.len() <= i {
            self.outcomes.resize(i + 1, [0; 4]);
        }
        self.outcomes[i][k] += 1;
    }

    pub(crate) fn sample(
        &mut self,
        now: Instant,
        total: u64,
        pending: Vec<u64>,
        lanes: Vec<(Lane, bool)>,
    ) {
        self.at.push(now);
        self.total.push(total);
        for (n, p) in pending.into_iter().enumerate() {
            self.pending[n].push(p);
        }
        for (n, l) in lanes.into_iter().enumerate() {
            self.lanes[n].push(l);
        }
        self.end = now;
    }
}
