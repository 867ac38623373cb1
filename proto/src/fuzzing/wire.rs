//! What is on the wire, as the model tracks it: every frame not yet fully taken by the kernel
//! (a request's or a ping's) and its cost in pending bytes, the writability flips those cause,
//! what each request's outcome must say was sent, and the heartbeats the peers answer.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use super::Session;
use super::model::{Frame, Ping};
use crate::{ConnId, Instant, NodeId, NodeState, RequestId, Sent};

/// The frames not yet fully taken by the kernel, by request, and in the order each node's
/// were queued: the oldest frame of a node (its write timeout's start) is one lookup, not a
/// walk over every frame after every time step.
#[derive(Default)]
pub(super) struct Frames {
    by_id: BTreeMap<RequestId, Frame>,
    /// `(node, enqueued, id)` of every frame in `by_id`.
    queued: BTreeSet<(NodeId, Instant, RequestId)>,
}

impl Frames {
    pub(super) fn insert(&mut self, id: RequestId, f: Frame) {
        if let Some(old) = self.by_id.insert(id, f) {
            self.queued.remove(&(old.node, old.enqueued, id));
        }
        self.queued.insert((f.node, f.enqueued, id));
    }

    pub(super) fn remove(&mut self, id: &RequestId) -> Option<Frame> {
        let f = self.by_id.remove(id)?;
        self.queued.remove(&(f.node, f.enqueued, *id));
        Some(f)
    }

    pub(super) fn get(&self, id: &RequestId) -> Option<&Frame> {
        self.by_id.get(id)
    }

    pub(super) fn contains_key(&self, id: &RequestId) -> bool {
        self.by_id.contains_key(id)
    }

    /// The request (or ping) of frame `id` ended: its frame is dropped if a write report
    /// finds it unwritten.
    pub(super) fn mark_ended(&mut self, id: &RequestId) {
        if let Some(f) = self.by_id.get_mut(id) {
            f.ended = true;
        }
    }

    /// Keeps the frames `keep` says to keep.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&RequestId, &Frame) -> bool) {
        let queued = &mut self.queued;
        self.by_id.retain(|id, f| {
            let kept = keep(id, f);
            if !kept {
                queued.remove(&(f.node, f.enqueued, *id));
            }
            kept
        });
    }

    /// The node's frames, in the order they were queued.
    fn of(&self, node: NodeId) -> impl Iterator<Item = RequestId> + '_ {
        let from = (node, Instant::ZERO, RequestId::from_u64(0));
        self.queued
            .range(from..)
            .take_while(move |(n, ..)| *n == node)
            .map(|&(.., id)| id)
    }

    /// Removes every frame of the node.
    pub(super) fn clear(&mut self, node: NodeId) {
        let ids: Vec<RequestId> = self.of(node).collect();
        for id in ids {
            self.remove(&id);
        }
    }

    /// When the node's oldest frame was queued.
    pub(super) fn oldest(&self, node: NodeId) -> Option<Instant> {
        let from = (node, Instant::ZERO, RequestId::from_u64(0));
        let &(n, at, _) = self.queued.range(from..).next()?;
        (n == node).then_some(at)
    }
}

impl Session {
    /// Takes the latest count of each node's requests ([`Pool::in_flight`](crate::Pool)): a
    /// node holding any at `now` was busy at `now`.
    pub(super) fn look_at_requests(&mut self) {
        let now = self.now;
        for (&node, n) in self.model.iter_mut() {
            // A node being removed is gone from the pool before it is from the model.
            n.held = self.pool.in_flight(node).unwrap_or(0);
            if n.held > 0 {
                n.last_busy = now;
            }
        }
    }

    /// A frame joins its node's queue: pending bytes grow, past the high watermark once.
    pub(super) fn frame_queued(&mut self, id: RequestId, node: NodeId, cost: u64) {
        let now = self.now;
        self.frames.insert(
            id,
            Frame {
                node,
                cost,
                enqueued: now,
                ended: false,
            },
        );
        let high = self.config.high_watermark;
        let n = self.node_mut(node);
        n.pending += cost;
        if n.writable && n.pending > high {
            n.writable = false;
            let pending = n.pending;
            n.flips.push_back((false, pending));
        }
    }

    /// A frame leaves the queue (last byte accepted, or dropped unsent): its cost is released.
    pub(super) fn frame_released(&mut self, id: RequestId) {
        if let Some(f) = self.frames.remove(&id) {
            self.node_mut(f.node).pending -= f.cost;
        }
    }

    /// After a release: back below the low watermark, the node becomes writable (once).
    pub(super) fn writability_checked(&mut self, node: NodeId) {
        let low = self.config.low_watermark;
        let n = self.node_mut(node);
        if !n.writable && n.pending < low {
            n.writable = true;
            let pending = n.pending;
            n.flips.push_back((true, pending));
        }
    }

    /// A frame's last byte reached its peer: the kernel took it all.
    pub(super) fn frame_completed(&mut self, id: RequestId) {
        if let Some(r) = self.reqs.get_mut(&id) {
            r.complete = true;
        }
        self.frame_released(id);
    }

    /// After a write report on `conn` that took no byte of the frames of `unwritten` (handed
    /// out): each whose request ended meanwhile is dropped now, unless an earlier write took
    /// part of it. A frame the peer holds the start of cannot be recalled: it stays queued
    /// (and counted) until its rest is written or the connection closes.
    pub(super) fn write_reported(&mut self, conn: ConnId, unwritten: &[RequestId]) {
        for id in unwritten {
            if self.frames.get(id).is_some_and(|f| f.ended) && !self.touched.contains(id) {
                self.frame_released(*id);
            }
        }
        self.writability_checked(conn.node());
    }

    /// Every frame of the node goes (a close): no writability event.
    pub(super) fn frames_cleared(&mut self, node: NodeId) {
        self.frames.clear(node);
        let n = self.node_mut(node);
        n.pending = 0;
        n.writable = true;
        n.announced = true;
    }

    fn handed_out(&self, id: RequestId) -> bool {
        self.handed.values().any(|(_, ids)| ids.contains(&id))
    }

    /// What an outcome must say was sent of a request's frame: all of it (`complete`), a byte
    /// of it, none but it is handed out (the adapter has not said how much went), or nothing.
    pub(super) fn sent_of(&self, id: RequestId, complete: bool) -> Sent {
        if complete {
            Sent::Fully
        } else if self.touched.contains(&id) {
            Sent::Partly
        } else if self.handed_out(id) {
            Sent::Unknown
        } else {
            Sent::Nothing
        }
    }

    /// The peer on `conn` is about to answer `id`: a heartbeat's answer resets the node's
    /// failure count and restarts its idle clock; an ended request's is a late response.
    pub(super) fn answered(&mut self, conn: ConnId, id: RequestId) {
        let now = self.now;
        if self.pings.contains(&id) {
            let n = self.node_mut(conn.node());
            n.failures = 0;
            let c = n.conn();
            if c.ping.is_some_and(|p| p.id == id) {
                c.ping = None;
                c.answered_at = Some(now);
            }
        } else if !self.reqs.contains_key(&id) {
            self.counts.late_responses += 1;
        }
    }

    /// The pool asked for a ping on `conn`: only on a ready connection without one, more than
    /// the heartbeat interval after it last held a request (or became ready, or had its last
    /// ping answered).
    pub(super) fn ping_asked(&mut self, conn: ConnId, id: RequestId) {
        assert!(self.pings.insert(id), "heartbeat {id:?} asked for twice");
        assert!(!self.reqs.contains_key(&id) && !self.ended.contains(&id));
        self.counts.heartbeats_sent += 1;
        let now = self.now;
        let heartbeat = self
            .config
            .heartbeat
            .expect("a heartbeat needs Config::heartbeat");
        let state = self.state_of(conn.node());
        assert_eq!(state, NodeState::Ready, "{conn:?}: a ping while not ready");
        let idle_since = self.idle_since(conn.node(), true);
        let c = self.node_mut(conn.node()).conn();
        assert_eq!(c.id, conn, "a ping on a connection that is not current");
        assert!(
            c.ping.is_none(),
            "{conn:?}: a second ping while one is outstanding"
        );
        assert!(
            now > idle_since + heartbeat.interval,
            "{conn:?}: a ping at {now:?}, idle only since {idle_since:?}"
        );
        c.ping = Some(Ping {
            id,
            asked_at: now,
            timed: true,
        });
    }

    /// A graceful shutdown drains each ready node holding requests: its outstanding ping ends
    /// silently, dropped if none of it went out.
    pub(super) fn shutting_down_gracefully(&mut self) {
        self.shut_down = true;
        let nodes: Vec<NodeId> = self.model.keys().copied().collect();
        for node in nodes {
            let n = &self.model[&node];
            if n.state != NodeState::Ready || n.held == 0 {
                continue;
            }
            let Some(ping) = n.conn.and_then(|c| c.ping) else {
                continue;
            };
            let queued = self.frames.contains_key(&ping.id);
            let untouched = !self.touched.contains(&ping.id) && !self.handed_out(ping.id);
            let c = self.node_mut(node).conn();
            if untouched {
                c.ping = None;
                if queued {
                    self.frame_released(ping.id);
                    self.writability_checked(node);
                }
            } else {
                c.ping = Some(Ping {
                    timed: false,
                    ..ping
                });
                self.frames.mark_ended(&ping.id);
            }
        }
    }
}
