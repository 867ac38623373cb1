//! The application's side: commands and submits, each with the result the model predicts,
//! and the checks of the pool's state against the model after every step.

use alloc::format;
use alloc::string::String;
use core::time::Duration;

use super::model::{Expected, Req, reconnect_at};
use super::{Op, Session, peer};
use crate::{
    HandleError, NodeId, NodeState, Readmission, RequestId, SubmitError, Target, Unavailable,
};

impl Session {
    /// The model hears of an application command on a live node before the pool does.
    pub(super) fn commanded(&mut self, node: NodeId, op: &Op) {
        let now = self.now;
        let n = self.model.get_mut(&node).expect("a live node");
        let readmits = match *op {
            Op::Disable(_) => {
                n.enabled = false;
                false
            }
            Op::Enable(_) if !n.enabled => {
                n.enabled = true;
                n.final_failure = None;
                true
            }
            Op::SetEpoch(_, e) if n.epoch != u64::from(e % 3) => {
                // A new server process: a clean backoff.
                n.epoch = u64::from(e % 3);
                n.final_failure = None;
                n.setup_failures = 0;
                n.disconnects = 0;
                true
            }
            Op::Throttle(_, ms) => {
                let until = now + Duration::from_millis(u64::from(ms));
                n.throttled_until = n.throttled_until.max(until);
                false
            }
            _ => false,
        };
        if readmits && n.quarantine.is_some() {
            let readmitted = Expected::Readmitted(node, Readmission::Application);
            self.expected.push(readmitted);
        }
    }

    /// `connect` is refused after shutdown and for a quarantined node outside panic mode;
    /// otherwise a node between connections opens one at once if its backoff allows.
    pub(super) fn connect(&mut self, i: u8) {
        let Some(node) = self.node(i) else { return };
        let n = &self.model[&node];
        let refused = self.shut_down || (n.quarantine.is_some() && !self.panic);
        let expected = if refused {
            Err(HandleError::WrongState)
        } else {
            Ok(())
        };
        let opens_now = !refused && reconnect_at(n.state).is_some_and(|at| self.now >= at);
        // (A quarantined node's wanted connection waits for its readmission: not predicted.)
        if !refused
            && n.quarantine.is_none()
            && reconnect_at(n.state).is_some_and(|at| self.now < at)
        {
            self.model.get_mut(&node).expect("live").want = true;
        }
        assert_eq!(
            self.pool.connect(self.now, node),
            expected,
            "connect {node:?}"
        );
        self.drain();
        if opens_now {
            assert_eq!(
                self.state_of(node),
                NodeState::Connecting,
                "connect {node:?}"
            );
        }
    }

    pub(super) fn submit(&mut self, node: Option<u8>, len: u16, deadline_ms: u16) {
        let target = match node.and_then(|i| self.node(i)) {
            Some(n) => Target::Node(n),
            None => Target::Best,
        };
        let deadline = Duration::from_millis(u64::from(deadline_ms));
        self.submit_frame(target, len % 512, deadline);
    }

    /// Submits a frame with a `body`-byte filler, due `deadline` from now: its id, if
    /// accepted. The result is the one the model predicts (for a request to a named node;
    /// for [`Target::Best`], the node picked must have had room).
    pub(super) fn submit_frame(
        &mut self,
        target: Target,
        body: u16,
        deadline: Duration,
    ) -> Option<RequestId> {
        let (now, deadline) = (self.now, self.now + deadline);
        let id = self.pool.next_request_id();
        let frame = peer::frame(id, body);
        let cost = frame.len() as u64 + self.config.per_frame_overhead;
        let predicted = match target {
            Target::Node(node) => Some(self.admission(node, cost)),
            _ if self.shut_down => Some(Err(SubmitError::NodeUnavailable(Unavailable::Shutdown))),
            _ => None,
        };
        // Where selection may put it: a node with room (at most four nodes: no allocation).
        let mut rooms = [None; 4];
        if target == Target::Best {
            for (room, &n) in rooms.iter_mut().zip(self.model.keys()) {
                *room = self.room(n, cost).is_ok().then_some(n);
            }
            debug_assert!(self.model.keys().count() <= rooms.len());
        }
        let result = self.pool.submit(now, target, deadline, frame);
        match result {
            Err(SubmitError::NotWritable) => self.counts.unwritable_rejections += 1,
            Err(SubmitError::InFlightLimit) => self.counts.in_flight_rejections += 1,
            Err(SubmitError::MemoryBudget) => self.counts.memory_budget_rejections += 1,
            _ => {}
        }
        if let Some(predicted) = predicted {
            assert_eq!(result.map(|_| ()), predicted, "a submit to {target:?}");
        }
        let Ok(got) = result else {
            self.drain();
            return None;
        };
        assert_eq!(got, id, "next_request_id predicts the id");
        let node = self.pool.requests().get(id).expect("accepted").node;
        assert!(
            target != Target::Best || rooms.contains(&Some(node)),
            "{id:?} went to {node:?}, which had no room"
        );
        assert!(
            !self.reqs.contains_key(&id) && !self.ended.contains(&id),
            "fresh id {id:?}"
        );
        let req = Req {
            node,
            deadline,
            cost,
            retried: false,
            complete: false,
        };
        self.reqs.insert(id, req);
        self.deadlines.insert((deadline, id));
        self.counts.submitted += 1;
        let n = self.model.get_mut(&node).expect("live");
        if n.quarantine.is_none() && reconnect_at(n.state).is_some_and(|at| now < at) {
            n.want = true;
        }
        self.frame_queued(id, node, cost);
        self.drain();
        Some(id)
    }

    /// What a submit to `node` gets (DESIGN, "Semantics"): refused after shutdown, for a
    /// disabled node, in a final failure's backoff, quarantined outside panic mode,
    /// throttled, or without room.
    fn admission(&self, node: NodeId, cost: u64) -> Result<(), SubmitError> {
        let refuse = |why| Err(SubmitError::NodeUnavailable(why));
        let n = &self.model[&node];
        if self.shut_down {
            return refuse(Unavailable::Shutdown);
        }
        if !n.enabled {
            return refuse(Unavailable::Disabled);
        }
        if let Some((reason, until)) = n.final_failure {
            if self.now < until && n.conn.is_none() {
                return refuse(Unavailable::Failed(reason));
            }
        }
        if n.quarantine.is_some() && !self.panic {
            return refuse(Unavailable::Quarantined);
        }
        if self.now < n.throttled_until {
            let until = n.throttled_until;
            return refuse(Unavailable::Throttled { until });
        }
        self.room(node, cost)
    }

    /// Whether `node` has room for a frame costing `cost`: writable, under its in-flight cap,
    /// and within its share of the memory budget once the budget would be exceeded.
    fn room(&self, node: NodeId, cost: u64) -> Result<(), SubmitError> {
        let n = &self.model[&node];
        if !n.writable {
            return Err(SubmitError::NotWritable);
        }
        if n.held >= self.config.max_in_flight as usize {
            return Err(SubmitError::InFlightLimit);
        }
        if let Some(budget) = self.config.memory_budget {
            let total: u64 = self.model.values().map(|m| m.pending).sum();
            let holders = self
                .model
                .iter()
                .filter(|&(&m, n)| n.pending > 0 || m == node)
                .count() as u64;
            if total + cost > budget && n.pending + cost > budget / holders {
                return Err(SubmitError::MemoryBudget);
            }
        }
        Ok(())
    }

    /// After a step: the pool's view of every node and its counters are the model's.
    pub(super) fn check_nodes(&self) -> Result<(), String> {
        for (&node, n) in self.model.iter() {
            let pool = &self.pool;
            let seen = (
                pool.pending_bytes(node),
                pool.is_writable(node),
                pool.is_quarantined(node),
                pool.node_state(node),
            );
            // The same comparison as `seen == (Some(n.pending), ..)`, with the fields'
            // differences folded into one test (see `counters_differ`).
            let same = match seen {
                (Some(pending), Some(writable), Some(quarantined), Some(state)) => {
                    let folded = (pending ^ n.pending)
                        | u64::from(writable ^ n.writable)
                        | u64::from(quarantined ^ n.quarantine.is_some())
                        | u64::from(n.writable ^ n.announced);
                    core::hint::black_box(folded) == 0 && state == n.state
                }
                _ => false,
            };
            if !same {
                let predicted = (
                    Some(n.pending),
                    Some(n.writable),
                    Some(n.quarantine.is_some()),
                    Some(n.state),
                );
                return Err(node_differs(node, seen, predicted, n.announced));
            }
        }
        let counters = self.pool.counters();
        if counters_differ(&counters, &self.counts) {
            return Err(format!(
                "counters {counters:?}, the model counted {:?}",
                self.counts
            ));
        }
        Ok(())
    }
}

type NodeView = (Option<u64>, Option<bool>, Option<bool>, Option<NodeState>);

#[cold]
#[inline(never)]
fn node_differs(node: NodeId, seen: NodeView, predicted: NodeView, announced: bool) -> String {
    format!(
        "{node:?}: (pending, writable, quarantined, state) {seen:?}, the model {predicted:?} (announced writable {announced})"
    )
}

/// Whether two sets of counters differ in any field: one comparison of the fields' folded
/// differences instead of one per field (each an instrumented call under the fuzzer). Every
/// field is named, so a new one cannot be left out.
fn counters_differ(a: &crate::Counters, b: &crate::Counters) -> bool {
    let crate::Counters {
        write_timeouts: a0,
        unwritable_rejections: a1,
        memory_budget_rejections: a2,
        in_flight_rejections: a3,
        evictions: a4,
        eviction_retries: a5,
        setup_timeouts: a6,
        request_timeouts: a7,
        queued_deadline_drops: a8,
        connects: a9,
        reconnects: a10,
        ready: a11,
        quarantines: a12,
        readmissions: a13,
        probes: a14,
        idle_closes: a15,
        protocol_violations: a16,
        submitted: a17,
        responses: a18,
        late_responses: a19,
        transparent_retries: a20,
        panics: a21,
        heartbeats_sent: a22,
        heartbeat_timeouts: a23,
    } = *a;
    let crate::Counters {
        write_timeouts: b0,
        unwritable_rejections: b1,
        memory_budget_rejections: b2,
        in_flight_rejections: b3,
        evictions: b4,
        eviction_retries: b5,
        setup_timeouts: b6,
        request_timeouts: b7,
        queued_deadline_drops: b8,
        connects: b9,
        reconnects: b10,
        ready: b11,
        quarantines: b12,
        readmissions: b13,
        probes: b14,
        idle_closes: b15,
        protocol_violations: b16,
        submitted: b17,
        responses: b18,
        late_responses: b19,
        transparent_retries: b20,
        panics: b21,
        heartbeats_sent: b22,
        heartbeat_timeouts: b23,
    } = *b;
    let folded = (a0 ^ b0)
        | (a1 ^ b1)
        | (a2 ^ b2)
        | (a3 ^ b3)
        | (a4 ^ b4)
        | (a5 ^ b5)
        | (a6 ^ b6)
        | (a7 ^ b7)
        | (a8 ^ b8)
        | (a9 ^ b9)
        | (a10 ^ b10)
        | (a11 ^ b11)
        | (a12 ^ b12)
        | (a13 ^ b13)
        | (a14 ^ b14)
        | (a15 ^ b15)
        | (a16 ^ b16)
        | (a17 ^ b17)
        | (a18 ^ b18)
        | (a19 ^ b19)
        | (a20 ^ b20)
        | (a21 ^ b21)
        | (a22 ^ b22)
        | (a23 ^ b23);
    // Opaque to the optimiser, which would otherwise split the fold back into 24 comparisons.
    core::hint::black_box(folded) != 0
}
