//! The driver's side of readiness: what a send to a target would meet right now, computed
//! from the pool's queries alone (never `Pool::select`, which draws from the pool's random
//! sequence and would change the jitter of a seeded run).

use keepwire_proto::{Instant, NodeId, NodeState, Target};

use super::Driver;
use crate::ready::TargetState;
use crate::service::Backpressure;

impl Driver {
    /// A service starts watching `target`: publishes its state now, and returns it.
    pub(super) fn watch(&mut self, now: Instant, target: Target) -> TargetState {
        let (state, recheck) = self.state_of(now, target);
        self.readiness.set(target, state);
        self.ready_recheck = super::earliest(self.ready_recheck, recheck);
        state
    }

    /// Publishes every watched target's state, after each poll while a service is alive.
    /// Inlined: after most polls of most clients no service is, and only that is checked.
    #[inline]
    pub(super) fn refresh_readiness(&mut self) {
        if self.readiness.watched() {
            self.publish_readiness();
        } else {
            self.ready_recheck = None;
        }
    }

    /// [`refresh_readiness`](Self::refresh_readiness) while a service is alive.
    fn publish_readiness(&mut self) {
        let now = self.now();
        let mut recheck = None;
        let readiness = std::sync::Arc::clone(&self.readiness);
        readiness.update(|target| {
            let (state, at) = self.state_of(now, target);
            recheck = super::earliest(recheck, at);
            state
        });
        self.ready_recheck = recheck;
    }

    /// What a send to `target` would meet at `now`, and when that may change with no input
    /// (a node's reconnect backoff ends).
    fn state_of(&self, now: Instant, target: Target) -> (TargetState, Option<Instant>) {
        match target {
            // Refused at once until the final failure's backoff ends: look again then.
            Target::Node(node) => match self.pool.final_failure(now, node) {
                Some((_, until)) if self.admitted(node) => {
                    (TargetState::Blocked(Backpressure::NoNode), Some(until))
                }
                _ => (self.node_state_of(node), None),
            },
            _ => self.best_state(now),
        }
    }

    /// Whether the application and the failure detector let `node` take requests.
    fn admitted(&self, node: NodeId) -> bool {
        !self.disabled.contains(&node)
            && (self.pool.in_panic() || self.pool.is_quarantined(node) != Some(true))
    }

    /// Whether `node`'s connection has room for one more request.
    fn room(&self, node: NodeId) -> Result<(), Backpressure> {
        if self.pool.is_writable(node) != Some(true) {
            return Err(Backpressure::NotWritable);
        }
        let cap = self.pool.config().max_in_flight as usize;
        if self.pool.in_flight(node).unwrap_or(0) >= cap {
            return Err(Backpressure::InFlightLimit);
        }
        Ok(())
    }

    /// A send pinned to `node` (`Target::Node`) is queued whatever the node's connection state,
    /// unless the node is gone, out of selection, or its connection has no room.
    fn node_state_of(&self, node: NodeId) -> TargetState {
        match self.pool.node_state(node) {
            None | Some(NodeState::Closed) => TargetState::Gone,
            Some(_) if !self.admitted(node) => TargetState::Blocked(Backpressure::NoNode),
            Some(_) => match self.room(node) {
                Ok(()) => TargetState::Ready,
                Err(why) => TargetState::Blocked(why),
            },
        }
    }

    /// `Target::Best` takes a request if selection finds a node in its first tier that can
    /// (ready, writable, below its in-flight limit), or a connecting node, or one whose
    /// reconnect backoff has passed, with room. Otherwise it says why: every ready node is
    /// full, one is not writable, or no node can take requests.
    fn best_state(&self, now: Instant) -> (TargetState, Option<Instant>) {
        let (mut ready_seen, mut ready_full, mut unwritable) = (0usize, 0usize, false);
        let mut fallback = false;
        let mut recheck: Option<Instant> = None;
        for node in self.pool.nodes() {
            if !self.admitted(node) {
                continue;
            }
            let Some(state) = self.pool.node_state(node) else {
                continue;
            };
            let room = self.room(node);
            match state {
                NodeState::Ready => {
                    ready_seen += 1;
                    match room {
                        Ok(()) => return (TargetState::Ready, None),
                        Err(Backpressure::InFlightLimit) => ready_full += 1,
                        Err(_) => unwritable = true,
                    }
                }
                NodeState::Connecting | NodeState::Handshaking => fallback |= room.is_ok(),
                NodeState::Disconnected { reconnect_at }
                | NodeState::AuthFailed { reconnect_at } => {
                    if reconnect_at <= now {
                        fallback |= room.is_ok();
                    } else {
                        recheck = super::earliest(recheck, Some(reconnect_at));
                    }
                }
                _ => {}
            }
        }
        let state = if fallback {
            TargetState::Ready
        } else if ready_seen > 0 && ready_full == ready_seen {
            TargetState::Blocked(Backpressure::InFlightLimit)
        } else if unwritable {
            TargetState::Blocked(Backpressure::NotWritable)
        } else {
            TargetState::Blocked(Backpressure::NoNode)
        };
        (state, recheck.filter(|_| state != TargetState::Ready))
    }
}
