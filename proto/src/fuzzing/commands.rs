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
        // Where selection may put it: a node with room.
        let rooms: alloc::vec::Vec<_> = match target {
            Target::Best => self
                .model
                .keys()
                .map(|&n| (n, self.room(n, cost)))
                .collect(),
            _ => alloc::vec::Vec::new(),
        };
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
            target != Target::Best || rooms.contains(&(node, Ok(()))),
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
            let predicted = (
                Some(n.pending),
                Some(n.writable),
                Some(n.quarantine.is_some()),
                Some(n.state),
            );
            if seen != predicted || n.writable != n.announced {
                return Err(format!(
                    "{node:?}: (pending, writable, quarantined, state) {seen:?}, the model {predicted:?} (announced writable {})",
                    n.announced
                ));
            }
        }
        if self.pool.counters() != self.counts {
            return Err(format!(
                "counters {:?}, the model counted {:?}",
                self.pool.counters(),
                self.counts
            ));
        }
        Ok(())
    }
}
