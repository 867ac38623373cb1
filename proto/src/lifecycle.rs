//! One node's connection lifecycle: opening under the setup timeout, becoming ready, writing
//! under the write timeout, answering, closing with a reason, backing off, evicting, and the
//! failure detector's quarantine and probes. Methods of [`Pool`] because each transition also
//! touches the request table, the timers and the output queues.

use alloc::vec::Vec;
use bytes::Bytes;
use core::time::Duration;

use crate::config::AfterLastProbe;
use crate::event::{
    Action, CloseReason, Event, EvictReason, HandleError, NodeState, Outcome, Phase,
    QuarantineCause, Readmission, Reason, Violation,
};
use crate::ids::{ConnId, NodeId, RequestId};
use crate::node::{Conn, Quarantine};
use crate::outbound::Flip;
use crate::pool::{Pool, node_in};
use crate::requests::Stage;
use crate::time::Instant;
use crate::timers::{NodeTimer, TimerKey};

impl Pool {
    // ---------------------------------------------------------------------------------------
    // Opening.

    /// A request or the application wants a connection: open one now if the node is between
    /// connections and its backoff allows, else as soon as it does.
    pub(crate) fn demand_connection(&mut self, node: NodeId, now: Instant) {
        let Ok(n) = self.node_mut(node) else { return };
        let Some(reconnect_at) = n.reconnect_at() else {
            return;
        };
        if now >= reconnect_at {
            self.open(node, now, Reason::Demand);
        } else {
            n.want_connection = true;
            self.arm(node, NodeTimer::Reconnect, reconnect_at);
        }
    }

    /// Opens a fresh connection: a new generation, a setup deadline `S(m)` with jitter drawn
    /// once for this attempt, and an [`Action::Open`].
    fn open(&mut self, node: NodeId, now: Instant, reason: Reason) {
        let draw = self.rng.next_unit();
        let options = self.config.socket;
        let backoff = self.config.setup_backoff();
        let Ok(n) = self.node_mut(node) else { return };
        let setup = backoff.delay(n.setup_failures, draw);
        let reconnect = n.conn_generation > 0;
        n.conn_generation = n.conn_generation.wrapping_add(1);
        n.conn = Some(Conn {
            generation: n.conn_generation,
            ready_at: None,
            probe: reason == Reason::Probe,
        });
        n.want_connection = false;
        n.last_attempt = Some(now);
        n.timers.stop(NodeTimer::Reconnect);
        let conn = ConnId {
            node,
            generation: n.conn_generation,
        };
        let addr = n.addr;
        self.counters.connects += 1;
        if reconnect {
            self.counters.reconnects += 1;
        }
        self.arm(node, NodeTimer::Setup, now.expiry_after(setup));
        self.actions.push_back(Action::Open {
            conn,
            addr,
            options,
            deadline: now + setup,
        });
        self.set_state(node, now, NodeState::Connecting, reason);
    }

    /// The TCP connect completed: the attempt got further than connecting, so the setup
    /// timeout resets to `S(0)` for the next one.
    pub(crate) fn connected(&mut self, node: NodeId, now: Instant) {
        let handshake = self.config.handshake;
        let Ok(n) = self.node_mut(node) else { return };
        n.setup_failures = 0;
        if handshake {
            let conn = n.conn_id().expect("connected implies a connection");
            self.actions.push_back(Action::Handshake { conn });
            self.set_state(node, now, NodeState::Handshaking, Reason::Connected);
        } else {
            self.ready(node, now, Reason::Connected);
        }
    }

    /// The connection is usable: the reconnect backoff resets, a probe readmits its node.
    pub(crate) fn ready(&mut self, node: NodeId, now: Instant, reason: Reason) {
        let Ok(n) = self.node_mut(node) else { return };
        let Some(conn) = n.conn.as_mut() else { return };
        conn.ready_at = Some(now);
        // Once ready, a probe's connection is an ordinary one: its later failures are not
        // probe failures.
        let probe = core::mem::take(&mut conn.probe);
        n.disconnects = 0;
        n.failed_attempts = 0;
        n.timers.stop(NodeTimer::Setup);
        self.counters.ready += 1;
        self.set_state(node, now, NodeState::Ready, reason);
        if probe {
            self.readmit(node, now, Readmission::Probe);
        }
        self.rearm_write_timer(node);
        self.after_request_change(node, now);
    }

    // ---------------------------------------------------------------------------------------
    // Writing and answering.

    /// Hands out the rest of the oldest frame; from now on it cannot be dropped unsent.
    pub(crate) fn transmit(&mut self, node: NodeId) -> Option<Bytes> {
        let n = self.node_mut(node).ok()?;
        let frame = n.outbound.front_live()?;
        frame.handed_out = true;
        let (id, bytes) = (frame.id, frame.bytes.slice(frame.written..));
        if let Some(r) = self.requests.get_mut(id) {
            if let Stage::Queued { seq } = r.stage {
                r.stage = Stage::Writing { seq };
            }
        }
        Some(bytes)
    }

    pub(crate) fn written(
        &mut self,
        node: NodeId,
        conn: ConnId,
        now: Instant,
        n: usize,
    ) -> Result<(), HandleError> {
        let low = self.config.low_watermark;
        let node_ref = self.node_mut(node)?;
        let Some(frame) = node_ref.outbound.front_live() else {
            return if n == 0 {
                Ok(())
            } else {
                Err(HandleError::Overwritten)
            };
        };
        if n > 0 && (!frame.handed_out || n > frame.bytes.len() - frame.written) {
            return Err(HandleError::Overwritten);
        }
        frame.handed_out = false;
        frame.written += n;
        let id = frame.id;
        let untouched = frame.written == 0;
        if frame.written < frame.bytes.len() {
            if untouched {
                self.returned_unwritten(node, id, now);
            }
            self.rearm_write_timer(node);
            return Ok(());
        }
        let (frame, flip) = node_ref.outbound.pop_written(low);
        let cost = frame.map_or(0, |f| f.cost);
        let pending = node_ref.outbound.pending();
        self.total_pending -= cost;
        if flip == Some(Flip::BecameWritable) {
            self.events.push_back(Event::Writability {
                node,
                writable: true,
                pending,
            });
        }
        if let Some(r) = self.requests.get_mut(id) {
            r.stage = Stage::Sent {
                conn: conn.generation,
            };
            self.track_awaiting(node, id);
        }
        self.rearm_write_timer(node);
        Ok(())
    }

    /// A frame handed out came back with no byte written: it is queued again, or dropped
    /// unsent now if its request ended meanwhile.
    fn returned_unwritten(&mut self, node: NodeId, id: RequestId, now: Instant) {
        let Some(r) = self.requests.get_mut(id) else {
            return;
        };
        let Stage::Writing { seq } = r.stage else {
            return;
        };
        r.stage = Stage::Queued { seq };
        if r.ended {
            self.drop_unsent(node, id, seq);
            self.free_request(id, now);
        }
    }

    fn track_awaiting(&mut self, node: NodeId, id: RequestId) {
        let Ok(n) = self.node_mut(node) else { return };
        n.awaiting.push(id);
        if n.awaiting.len() > 2 * n.requests + 16 {
            let mut awaiting = core::mem::take(&mut n.awaiting);
            awaiting.retain(|&a| {
                self.requests
                    .get(a)
                    .is_some_and(|r| matches!(r.stage, Stage::Sent { .. }))
            });
            if let Ok(n) = self.node_mut(node) {
                n.awaiting = awaiting;
            }
        }
    }

    pub(crate) fn response(
        &mut self,
        node: NodeId,
        conn: ConnId,
        now: Instant,
        id: RequestId,
        payload: Bytes,
    ) -> Result<(), HandleError> {
        // In flight on this connection: fully written on it, or partly written (a frame only
        // handed out has not reached the peer).
        let outbound = &self.node(node)?.outbound;
        let on_this_conn =
            self.requests
                .get(id)
                .filter(|r| r.node == node)
                .map(|r| match r.stage {
                    Stage::Sent { conn: generation } => generation == conn.generation,
                    Stage::Writing { seq } => outbound.get(seq).is_some_and(|f| f.written > 0),
                    Stage::Queued { .. } => false,
                });
        if on_this_conn != Some(true) {
            self.counters.protocol_violations += 1;
            let violation = Violation::UnknownRequest(id);
            self.close(node, now, CloseReason::Protocol(violation), true);
            return Err(HandleError::UnknownRequest);
        }
        let ended = self.requests.get(id).is_some_and(|r| r.ended);
        if !ended {
            self.counters.responses += 1;
            self.end_request(id, Outcome::Response(payload));
            if let Ok(n) = self.node_mut(node) {
                n.timeouts = 0;
                n.failures = 0;
            }
        }
        self.free_request(id, now);
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Ending requests.

    /// Emits the request's one and only [`Event::RequestDone`].
    pub(crate) fn end_request(&mut self, id: RequestId, outcome: Outcome) {
        let Some(r) = self.requests.get_mut(id) else {
            return;
        };
        if r.ended {
            return;
        }
        r.ended = true;
        let (node, retried) = (r.node, r.retried);
        self.events.push_back(Event::RequestDone {
            id,
            node,
            outcome,
            retried,
        });
    }

    /// Releases the request's slot (after it ended and nothing more can arrive for it).
    pub(crate) fn free_request(&mut self, id: RequestId, now: Instant) {
        let Some(r) = self.requests.remove(id) else {
            return;
        };
        debug_assert!(r.ended);
        if let Ok(n) = self.node_mut(r.node) {
            n.requests -= 1;
        }
        self.after_request_change(r.node, now);
    }

    /// Drops the still untouched frame `seq` of `id` unsent.
    fn drop_unsent(&mut self, node: NodeId, id: RequestId, seq: u64) {
        let low = self.config.low_watermark;
        let Ok(n) = self.node_mut(node) else { return };
        let cost = n
            .outbound
            .get(seq)
            .filter(|f| f.id == id)
            .map_or(0, |f| f.cost);
        let flip = n.outbound.drop_unsent(seq, low);
        let pending = n.outbound.pending();
        self.total_pending -= cost;
        self.compact_outbound(node);
        if flip == Some(Flip::BecameWritable) {
            self.events.push_back(Event::Writability {
                node,
                writable: true,
                pending,
            });
        }
        self.rearm_write_timer(node);
    }

    /// Whether every request the node holds has ended (a request that timed out in flight may
    /// still hold its slot for a late response; a drain does not wait for that).
    fn drained(&self, node: NodeId) -> bool {
        let Ok(n) = self.node(node) else { return true };
        let ended = |id: &RequestId| self.requests.get(*id).is_none_or(|r| r.ended);
        n.outbound.live_ids().all(|id| ended(&id)) && n.awaiting.iter().all(ended)
    }

    /// Compacts the node's queue when dropped frames pile up behind a stuck one, renumbering the
    /// requests whose frames moved.
    fn compact_outbound(&mut self, node: NodeId) {
        let Some(n) = node_in(&mut self.nodes, node) else {
            return;
        };
        if !n.outbound.needs_compaction() {
            return;
        }
        let requests = &mut self.requests;
        n.outbound.compact(|id, new_seq| {
            if let Some(r) = requests.get_mut(id) {
                match &mut r.stage {
                    Stage::Queued { seq } | Stage::Writing { seq } => *seq = new_seq,
                    Stage::Sent { .. } => {}
                }
            }
        });
    }

    /// Ends a live request with `outcome` because of the application or its deadline: a
    /// queued frame is dropped unsent and the slot freed; a (partly) written one keeps its slot
    /// until its frame is written and its late response arrives or the connection closes.
    pub(crate) fn abandon(&mut self, id: RequestId, now: Instant, outcome: Outcome) {
        let Some(r) = self.requests.get(id) else {
            return;
        };
        let (node, stage) = (r.node, r.stage);
        self.end_request(id, outcome);
        if let Stage::Queued { seq } = stage {
            self.drop_unsent(node, id, seq);
            self.free_request(id, now);
        }
    }

    fn request_deadline(&mut self, id: RequestId, now: Instant) {
        let Some(r) = self.requests.get(id) else {
            return;
        };
        let node = r.node;
        if let Stage::Queued { .. } = r.stage {
            self.counters.queued_deadline_drops += 1;
            self.abandon(
                id,
                now,
                Outcome::DeadlineExceeded {
                    phase: Phase::Queued,
                },
            );
            return;
        }
        self.counters.request_timeouts += 1;
        self.abandon(
            id,
            now,
            Outcome::DeadlineExceeded {
                phase: Phase::InFlight,
            },
        );
        self.after_request_change(node, now);
        let threshold = self.config.quarantine_after;
        let Ok(n) = self.node_mut(node) else { return };
        n.timeouts += 1;
        if n.timeouts >= threshold && n.quarantine.is_none() {
            self.quarantine(node, now, QuarantineCause::RequestTimeouts);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Closing.

    /// Ends the node's current connection (if any) and every request it holds with
    /// `reason`, releases its pending bytes without a writability event, counts the failure,
    /// and moves the node to `Disconnected` with its backoff (or `AuthFailed`, or `Closed`).
    /// `tell_adapter` emits [`Action::Close`] (not needed when the adapter reported the close).
    pub(crate) fn close(
        &mut self,
        node: NodeId,
        now: Instant,
        reason: CloseReason,
        tell_adapter: bool,
    ) {
        let Ok(n) = self.node_mut(node) else { return };
        let prev = n.state;
        let conn = n.conn.take();
        let conn_id = conn.map(|c| ConnId {
            node,
            generation: c.generation,
        });
        let had_requests = n.requests > 0;
        n.timers.stop(NodeTimer::Setup);
        n.timers.stop(NodeTimer::WriteTimeout);
        n.timers.stop(NodeTimer::Idle);
        n.want_connection = false;
        if let (Some(conn), true) = (conn_id, tell_adapter) {
            self.actions.push_back(Action::Close { conn, reason });
        }
        self.fail_all(node, now, &Outcome::ConnectionLost(reason));

        let draw = self.rng.next_unit();
        let backoff = self.config.reconnect_backoff();
        let threshold = self.config.quarantine_after;
        let shut_down = self.shut_down;
        let Ok(n) = self.node_mut(node) else { return };
        if conn.is_some() {
            if prev == NodeState::Connecting {
                n.setup_failures = n.setup_failures.saturating_add(1);
            }
            if !prev.is_established() {
                n.failed_attempts = n.failed_attempts.saturating_add(1);
            }
        }
        // A failure is counted for quarantine when it happened before `Ready`, or cost requests,
        // or the connection stalled or broke the protocol: a server closing an idle connection
        // is not a failing server.
        let counts = reason.is_failure()
            && (!prev.is_established()
                || had_requests
                || matches!(reason, CloseReason::WriteTimeout | CloseReason::Protocol(_)));
        if counts {
            n.failures = n.failures.saturating_add(1);
        }
        let next = match reason {
            _ if shut_down => NodeState::Closed,
            CloseReason::NodeRemoved | CloseReason::Shutdown => NodeState::Closed,
            _ if conn.is_none() => prev,
            _ => {
                let delay = backoff.delay(n.disconnects, draw);
                n.disconnects = n.disconnects.saturating_add(1);
                let reconnect_at = now + delay;
                if reason == CloseReason::AuthFailed {
                    NodeState::AuthFailed { reconnect_at }
                } else {
                    NodeState::Disconnected { reconnect_at }
                }
            }
        };
        let probe_failed = conn.is_some_and(|c| c.probe) && n.quarantine.is_some();
        let quarantine_now = counts && n.quarantine.is_none() && n.failures >= threshold;
        if next == NodeState::Closed {
            n.timers.stop_all();
            n.quarantine = None;
            self.set_state(node, now, next, Reason::Closed(reason));
            return;
        }
        self.set_state(node, now, next, Reason::Closed(reason));
        if probe_failed {
            self.probe_failed(node, now);
        } else if quarantine_now {
            self.quarantine(node, now, QuarantineCause::ConnectionFailures(reason));
        }
    }

    /// Ends every request the node holds with `outcome` and frees them; its pending bytes
    /// leave the global total.
    fn fail_all(&mut self, node: NodeId, now: Instant, outcome: &Outcome) {
        let Ok(n) = self.node_mut(node) else { return };
        let released = n.outbound.pending();
        let mut ids: Vec<RequestId> = n.outbound.drain().map(|f| f.id).collect();
        ids.append(&mut n.awaiting);
        self.total_pending -= released;
        for id in ids {
            if self.requests.get(id).is_some_and(|r| r.node == node) {
                self.end_request(id, outcome.clone());
                self.free_request(id, now);
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Eviction and the failure detector.

    /// Evicts the node's cached connection: flagged ([`Event::Evicted`]) then closed. Requests
    /// already (partly) written end [`Outcome::Evicted`]; untouched queued ones move once to
    /// a fresh connection (a second eviction ends them). The sender never writes to nor
    /// reconnects the evicted handle: it is stale at once.
    pub(crate) fn evict_conn(&mut self, node: NodeId, now: Instant, reason: EvictReason) {
        let low = self.config.low_watermark;
        let Ok(n) = self.node_mut(node) else { return };
        let Some(conn) = n.conn_id() else { return };
        n.conn = None;
        n.want_connection = false;
        n.timers.stop(NodeTimer::Setup);
        n.timers.stop(NodeTimer::WriteTimeout);
        n.timers.stop(NodeTimer::Idle);
        self.counters.evictions += 1;
        self.events.push_back(Event::Evicted { conn, reason });
        self.actions.push_back(Action::Close {
            conn,
            reason: CloseReason::Evicted(reason),
        });

        let Some(n) = node_in(&mut self.nodes, node) else {
            return;
        };
        let before = n.outbound.pending();
        let mut gone = core::mem::take(&mut n.awaiting);
        let requests = &self.requests;
        n.outbound.keep_for_retry(
            |f| requests.get(f.id).is_some_and(|r| !r.retried && !r.ended),
            |f| gone.push(f.id),
            low,
        );
        let kept: Vec<RequestId> = n.outbound.live_ids().collect();
        self.total_pending -= before - n.outbound.pending();
        self.compact_outbound(node);
        for id in gone {
            if self.requests.get(id).is_some_and(|r| r.node == node) {
                self.end_request(id, Outcome::Evicted(reason));
                self.free_request(id, now);
            }
        }
        for &id in &kept {
            if let Some(r) = self.requests.get_mut(id) {
                r.retried = true;
            }
        }
        self.counters.eviction_retries += kept.len() as u64;
        let reason = Reason::Closed(CloseReason::Evicted(reason));
        self.set_state(
            node,
            now,
            NodeState::Disconnected { reconnect_at: now },
            reason,
        );
        let admitted = self.node(node).is_ok_and(|n| n.quarantine.is_none());
        if !kept.is_empty() && admitted && !self.shut_down {
            self.open(node, now, Reason::Demand);
        }
    }

    /// Consecutive failures crossed the threshold: exclude the node, close its cached
    /// connection (it is never trusted for readmission), and schedule the first probe.
    pub(crate) fn quarantine(&mut self, node: NodeId, now: Instant, cause: QuarantineCause) {
        if self.shut_down {
            return;
        }
        let Ok(n) = self.node_mut(node) else { return };
        n.quarantine = Some(Quarantine {
            probes_failed: 0,
            exhausted: false,
        });
        let busy = n.conn.is_some() || n.requests > 0;
        self.counters.quarantines += 1;
        self.events.push_back(Event::Quarantined {
            node,
            cause,
            at: now,
        });
        if busy {
            self.close(node, now, CloseReason::Quarantined, true);
        }
        self.schedule_probe(node, now);
    }

    /// Schedules the next probe after `probe_backoff · 2^failed`, or applies
    /// [`AfterLastProbe`] when every probe has failed.
    fn schedule_probe(&mut self, node: NodeId, now: Instant) {
        let (retries, after) = (self.config.probe_retries, self.config.after_last_probe);
        let Ok(n) = self.node_mut(node) else { return };
        let Some(q) = n.quarantine.as_mut() else {
            return;
        };
        if q.probes_failed >= retries {
            match after {
                AfterLastProbe::Readmit => self.readmit(node, now, Readmission::GaveUp),
                _ => q.exhausted = true,
            }
            return;
        }
        let failed = q.probes_failed;
        let delay = self.config.probe_delay(failed);
        self.arm(node, NodeTimer::Probe, now + delay);
    }

    fn probe_failed(&mut self, node: NodeId, now: Instant) {
        let Ok(n) = self.node_mut(node) else { return };
        if let Some(q) = n.quarantine.as_mut() {
            q.probes_failed += 1;
        }
        self.schedule_probe(node, now);
    }

    /// Lifts a quarantine (if any) and clears the consecutive-failure counts.
    pub(crate) fn readmit(&mut self, node: NodeId, now: Instant, via: Readmission) {
        let Ok(n) = self.node_mut(node) else { return };
        if n.quarantine.take().is_none() {
            return;
        }
        n.failures = 0;
        n.timeouts = 0;
        n.timers.stop(NodeTimer::Probe);
        self.counters.readmissions += 1;
        self.events
            .push_back(Event::Readmitted { node, via, at: now });
    }

    // ---------------------------------------------------------------------------------------
    // Timers.

    pub(crate) fn arm(&mut self, node: NodeId, timer: NodeTimer, at: Instant) {
        let Ok(n) = self.node_mut(node) else { return };
        if n.timers.get(timer) == Some(at) {
            return;
        }
        n.timers.set(timer, at);
        self.timers.push(at, TimerKey::Node(node, timer));
    }

    /// Arms the write timeout for the oldest unaccepted frame of a ready connection:
    /// `max(enqueued, ready) + write_timeout`, firing one nanosecond past it.
    fn rearm_write_timer(&mut self, node: NodeId) {
        let write_timeout = self.config.write_timeout;
        let Ok(n) = self.node_mut(node) else { return };
        let ready_at = n.conn.and_then(|c| c.ready_at);
        let due = match (ready_at, n.outbound.front_live()) {
            (Some(ready_at), Some(front)) if !write_timeout.is_zero() => {
                Some(front.enqueued_at.max(ready_at).expiry_after(write_timeout))
            }
            _ => None,
        };
        match due {
            Some(at) => self.arm(node, NodeTimer::WriteTimeout, at),
            None => n.timers.stop(NodeTimer::WriteTimeout),
        }
    }

    /// Keeps the idle timer in step with the node's requests: armed from the moment a ready
    /// connection holds none, stopped while it holds any.
    pub(crate) fn after_request_change(&mut self, node: NodeId, now: Instant) {
        let idle = self.config.idle_timeout;
        let Ok(n) = self.node_mut(node) else { return };
        if n.state == NodeState::Closing && n.conn.is_some() {
            if self.drained(node) {
                self.close(node, now, CloseReason::Shutdown, true);
            }
            return;
        }
        if idle.is_zero() || !n.is_ready() || n.requests > 0 {
            n.timers.stop(NodeTimer::Idle);
        } else if n.timers.get(NodeTimer::Idle).is_none() {
            self.arm(node, NodeTimer::Idle, now.expiry_after(idle));
        }
    }

    pub(crate) fn fire_timers(&mut self, now: Instant) {
        while let Some((at, key)) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if !self.timer_valid(at, key) {
                continue;
            }
            match key {
                TimerKey::Request(id) => self.request_deadline(id, now),
                TimerKey::Node(node, timer) => {
                    if let Ok(n) = self.node_mut(node) {
                        n.timers.stop(timer);
                    }
                    self.fire_node_timer(node, timer, now);
                }
            }
        }
    }

    fn fire_node_timer(&mut self, node: NodeId, timer: NodeTimer, now: Instant) {
        let Ok(n) = self.node(node) else { return };
        match timer {
            NodeTimer::Setup => {
                if n.conn.is_some() && n.state.is_connecting() {
                    self.counters.setup_timeouts += 1;
                    self.close(node, now, CloseReason::SetupTimeout, true);
                }
            }
            NodeTimer::Reconnect => {
                if n.want_connection && n.quarantine.is_none() && !self.shut_down {
                    self.demand_connection(node, now);
                }
            }
            NodeTimer::WriteTimeout => {
                self.counters.write_timeouts += 1;
                self.close(node, now, CloseReason::WriteTimeout, true);
            }
            NodeTimer::Probe => {
                if n.quarantine.is_some_and(|q| !q.exhausted) && n.conn.is_none() {
                    self.counters.probes += 1;
                    self.open(node, now, Reason::Probe);
                }
            }
            NodeTimer::Idle => {
                if n.is_ready() && n.requests == 0 {
                    self.counters.idle_closes += 1;
                    self.close(node, now, CloseReason::Idle, true);
                }
            }
        }
    }

    fn timer_valid(&self, at: Instant, key: TimerKey) -> bool {
        match key {
            TimerKey::Node(node, timer) => self
                .node(node)
                .is_ok_and(|n| n.timers.get(timer) == Some(at)),
            TimerKey::Request(id) => self
                .requests
                .get(id)
                .is_some_and(|r| !r.ended && r.deadline.expiry_after(Duration::ZERO) == at),
        }
    }

    /// Ends every public call: discards stale timer entries off the top of the heap, so
    /// [`Pool::poll_timeout`] is exact, and compacts the heap when stale entries pile up.
    pub(crate) fn finish(&mut self) {
        while let Some((at, key)) = self.timers.peek() {
            if self.timer_valid(at, key) {
                break;
            }
            self.timers.pop();
        }
        let live = self.requests.len() + 5 * self.nodes.len();
        if self.timers.len() > 4 * live + 64 {
            let mut heap = core::mem::take(&mut self.timers);
            heap.retain(|at, key| self.timer_valid(at, key));
            self.timers = heap;
        }
    }

    /// Moves the node to `to`, announcing it if it changed.
    pub(crate) fn set_state(&mut self, node: NodeId, now: Instant, to: NodeState, reason: Reason) {
        let Ok(n) = self.node_mut(node) else { return };
        let from = n.state;
        if from == to {
            return;
        }
        n.state = to;
        self.events.push_back(Event::StateChanged {
            node,
            from,
            to,
            reason,
            at: now,
        });
    }
}
