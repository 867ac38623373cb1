//! The reference model: what the pool must do, predicted from the session's own inputs and
//! checked against every event the pool emits.
//!
//! Per node it keeps the connection state (from the events, each checked to chain), the
//! failure detector's counts (consecutive connection failures and request timeouts, reset by a
//! response, an answered heartbeat or a readmission) and so when a quarantine or a readmission
//! must follow, the backoff steps, the live frames and their pending bytes (and so every
//! writability flip), and when the node last held a request. Per request it keeps how much of
//! its frame reached a peer, so each outcome's [`Sent`] is predicted exactly. It counts what the
//! pool's [`Counters`](crate::Counters) count.
//!
//! What it takes from the pool rather than predicting: where a request went when the pool
//! chose (selection, checked against a linear scan elsewhere, and transparent retries), and how
//! many requests a node holds ([`Pool::in_flight`](crate::Pool::in_flight), which the pool's own
//! invariants check against its request table), for when a node was last busy.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::Session;
use crate::{
    CloseReason, ConnId, Event, Instant, NodeId, NodeState, Outcome, Phase, QuarantineCause,
    Readmission, Reason, RequestId, Sent,
};

/// What the model knows of one node.
#[derive(Debug)]
pub(super) struct NodeModel {
    pub(super) state: NodeState,
    pub(super) enabled: bool,
    pub(super) epoch: u64,
    pub(super) throttled_until: Instant,
    /// Consecutive connection failures and consecutive request timeouts (quarantine's counts).
    pub(super) failures: u32,
    pub(super) timeouts: u32,
    pub(super) quarantine: Option<Quarantine>,
    /// `m`: consecutive attempts that failed while still connecting (the setup timeout's step).
    pub(super) setup_failures: u32,
    /// `k`: disconnects since the node was last ready (the reconnect backoff's step).
    pub(super) disconnects: u32,
    pub(super) opened_before: bool,
    /// A connection was asked for while the backoff ran: it opens when the backoff ends.
    pub(super) want: bool,
    /// The last final failure, and when its backoff ends.
    pub(super) final_failure: Option<(CloseReason, Instant)>,
    pub(super) conn: Option<ConnModel>,
    /// Requests the node held at the last look, and the last instant it held any.
    pub(super) held: usize,
    pub(super) last_busy: Instant,
    /// The cost of every live frame (`len + per_frame_overhead`, until its last byte is taken).
    pub(super) pending: u64,
    /// Writability as the model predicts it, and as the events (and silent resets) said.
    pub(super) writable: bool,
    pub(super) announced: bool,
    /// Writability events predicted and not yet seen, in order.
    pub(super) flips: VecDeque<(bool, u64)>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Quarantine {
    pub(super) probes_failed: u32,
    /// When the last probe failed (or the quarantine began, with no probes configured).
    pub(super) exhausted_at: Option<Instant>,
}

/// The node's current connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConnModel {
    pub(super) id: ConnId,
    pub(super) probe: bool,
    /// The setup deadline its `Action::Open` carried.
    pub(super) setup_deadline: Instant,
    pub(super) ready_at: Option<Instant>,
    pub(super) ping: Option<Ping>,
    pub(super) answered_at: Option<Instant>,
}

/// An outstanding heartbeat.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ping {
    pub(super) id: RequestId,
    pub(super) asked_at: Instant,
    /// Its deadline still runs (a graceful shutdown stops it).
    pub(super) timed: bool,
}

/// An accepted request that has not ended.
#[derive(Clone, Copy, Debug)]
pub(super) struct Req {
    pub(super) node: NodeId,
    pub(super) deadline: Instant,
    pub(super) cost: u64,
    pub(super) retried: bool,
    /// The kernel took its frame's last byte.
    pub(super) complete: bool,
}

/// A frame not yet fully accepted (a request's or a ping's).
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub(super) node: NodeId,
    pub(super) cost: u64,
    pub(super) enqueued: Instant,
    /// Its request (or ping) ended: dropped if a write report finds it unwritten.
    pub(super) ended: bool,
}

/// An event the model requires before the current input's outputs are drained.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Expected {
    Quarantined(NodeId, QuarantineCause),
    Readmitted(NodeId, Readmission),
}

impl NodeModel {
    pub(super) fn new() -> Self {
        Self {
            state: NodeState::Disconnected {
                reconnect_at: Instant::ZERO,
            },
            enabled: true,
            epoch: 0,
            throttled_until: Instant::ZERO,
            failures: 0,
            timeouts: 0,
            quarantine: None,
            setup_failures: 0,
            disconnects: 0,
            opened_before: false,
            want: false,
            final_failure: None,
            conn: None,
            held: 0,
            last_busy: Instant::ZERO,
            pending: 0,
            writable: true,
            announced: true,
            flips: VecDeque::new(),
        }
    }

    pub(super) fn conn(&mut self) -> &mut ConnModel {
        let state = self.state;
        self.conn
            .as_mut()
            .unwrap_or_else(|| panic!("no connection in {state:?}"))
    }
}

/// The model of each live node: a short list (at most four nodes), cheaper to walk under the
/// fuzzer's instrumentation than a map.
#[derive(Default)]
pub(super) struct Nodes(Vec<(NodeId, NodeModel)>);

impl Nodes {
    pub(super) fn insert(&mut self, node: NodeId, model: NodeModel) {
        self.0.push((node, model));
    }

    pub(super) fn remove(&mut self, node: &NodeId) {
        self.0.retain(|(n, _)| n != node);
    }

    pub(super) fn get(&self, node: &NodeId) -> Option<&NodeModel> {
        self.0.iter().find(|(n, _)| n == node).map(|(_, m)| m)
    }

    pub(super) fn get_mut(&mut self, node: &NodeId) -> Option<&mut NodeModel> {
        self.0.iter_mut().find(|(n, _)| n == node).map(|(_, m)| m)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&NodeId, &NodeModel)> {
        self.0.iter().map(|(n, m)| (n, m))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&NodeId, &mut NodeModel)> {
        self.0.iter_mut().map(|(n, m)| (&*n, m))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &NodeId> {
        self.0.iter().map(|(n, _)| n)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &NodeModel> {
        self.0.iter().map(|(_, m)| m)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut NodeModel> {
        self.0.iter_mut().map(|(_, m)| m)
    }
}

impl core::ops::Index<&NodeId> for Nodes {
    type Output = NodeModel;

    fn index(&self, node: &NodeId) -> &NodeModel {
        self.get(node)
            .unwrap_or_else(|| panic!("{node:?} is not a live node"))
    }
}

/// When a node between connections may open the next one.
pub(super) fn reconnect_at(state: NodeState) -> Option<Instant> {
    match state {
        NodeState::Disconnected { reconnect_at } | NodeState::AuthFailed { reconnect_at } => {
            Some(reconnect_at)
        }
        _ => None,
    }
}

impl Session {
    pub(super) fn state_of(&self, node: NodeId) -> NodeState {
        self.model[&node].state
    }

    pub(super) fn node_mut(&mut self, node: NodeId) -> &mut NodeModel {
        self.model
            .get_mut(&node)
            .unwrap_or_else(|| panic!("an output names {node:?}, which the model does not know"))
    }

    // -----------------------------------------------------------------------------------------
    // Events.

    pub(super) fn on_event(&mut self, event: Event) {
        match event {
            Event::RequestDone {
                id,
                node,
                outcome,
                sent,
                retried,
            } => self.request_done(id, node, &outcome, sent, retried),
            Event::StateChanged {
                node,
                from,
                to,
                reason,
                at,
            } => {
                assert_eq!(at, self.now, "{node:?}: a state change stamped {at:?}");
                assert!(from != to, "{node:?}: a state change to the same state");
                let n = self.node_mut(node);
                assert_eq!(n.state, from, "{node:?}: events skipped a state change");
                n.state = to;
                self.state_changed(node, from, to, reason);
            }
            Event::Writability {
                node,
                writable,
                pending,
            } => self.writability(node, writable, pending),
            Event::Evicted { conn, .. } => self.evicted(conn),
            Event::Quarantined { node, cause, at } => {
                assert_eq!(at, self.now);
                self.expected_seen(Expected::Quarantined(node, cause));
                self.counts.quarantines += 1;
                let (now, retries) = (self.now, self.config.probe_retries);
                let n = self.node_mut(node);
                assert!(n.quarantine.is_none(), "{node:?} quarantined twice");
                n.quarantine = Some(Quarantine {
                    probes_failed: 0,
                    exhausted_at: (retries == 0).then_some(now),
                });
                n.want = false;
            }
            Event::Readmitted { node, via, at } => {
                assert_eq!(at, self.now);
                self.readmitted(node, via);
            }
            Event::PanicMode { entered, .. } => {
                assert_ne!(entered, self.panic, "panic-mode events alternate");
                self.panic = entered;
                self.counts.panics += u64::from(entered);
            }
        }
    }

    fn expected_seen(&mut self, seen: Expected) {
        let Some(at) = self.expected.iter().position(|&e| e == seen) else {
            panic!(
                "{seen:?} without cause (the model expected {:?})",
                self.expected
            )
        };
        self.expected.remove(at);
    }

    fn request_done(
        &mut self,
        id: RequestId,
        node: NodeId,
        outcome: &Outcome,
        sent: Sent,
        retried: bool,
    ) {
        let now = self.now;
        let Some(req) = self.reqs.remove(&id) else {
            panic!("{id:?} ended twice or was never accepted")
        };
        self.deadlines.remove(&(req.deadline, id));
        if retried && !req.retried {
            // Moved by a transparent retry within this very input (its node's connection
            // failed with not one byte of it sent), and ended since.
            assert!(self.retry_batch, "{id:?} ended as retried, never retried");
            assert_eq!(sent, Sent::Nothing, "{id:?} retried after a byte was sent");
            self.counts.transparent_retries += 1;
        } else {
            assert_eq!(retried, req.retried, "{id:?}: whether it was retried");
            assert_eq!(
                node, req.node,
                "{id:?} ended on another node than it was on"
            );
        }
        assert_eq!(
            sent,
            self.sent_of(id, req.complete),
            "{id:?} ended ({outcome:?}): what was sent"
        );
        if self.cancelled == Some(id) {
            assert_eq!(*outcome, Outcome::Cancelled, "{id:?} was cancelled");
            self.cancelled = None;
        }
        self.ended.insert(id);
        if sent == Sent::Nothing {
            self.never_sent.insert(id);
        }
        self.frames.mark_ended(&id);
        match outcome {
            Outcome::Response(_) => {
                assert!(
                    matches!(sent, Sent::Partly | Sent::Fully),
                    "{id:?} answered with {sent:?}"
                );
                self.counts.responses += 1;
                let n = self.node_mut(node);
                n.failures = 0;
                n.timeouts = 0;
                if n.quarantine.is_some() {
                    self.expected
                        .push(Expected::Readmitted(node, Readmission::Answered));
                }
            }
            &Outcome::DeadlineExceeded { phase } => {
                assert!(
                    now > req.deadline,
                    "{id:?} timed out at {now:?}, its deadline is {:?}",
                    req.deadline
                );
                assert_eq!(
                    phase == Phase::Queued,
                    sent == Sent::Nothing,
                    "{id:?}: {phase:?} with {sent:?}"
                );
                if phase == Phase::Queued {
                    self.counts.queued_deadline_drops += 1;
                    self.frame_released(id);
                    self.writability_checked(node);
                } else {
                    self.counts.request_timeouts += 1;
                    if self.touched.contains(&id) {
                        self.timed_out(node);
                    }
                }
            }
            Outcome::Cancelled if sent == Sent::Nothing => {
                self.frame_released(id);
                self.writability_checked(node);
            }
            // A (partly) written frame stays until written; a close takes every frame.
            _ => {}
        }
    }

    /// A request that reached its peer timed out: one more consecutive timeout.
    fn timed_out(&mut self, node: NodeId) {
        let (threshold, shut_down) = (self.config.quarantine_after_timeouts, self.shut_down);
        let n = self.node_mut(node);
        n.timeouts += 1;
        if n.timeouts >= threshold && n.quarantine.is_none() && !shut_down {
            let cause = QuarantineCause::RequestTimeouts;
            self.expected.push(Expected::Quarantined(node, cause));
        }
    }

    fn state_changed(&mut self, node: NodeId, from: NodeState, to: NodeState, reason: Reason) {
        let now = self.now;
        match reason {
            Reason::Demand | Reason::Probe => self.opened(node, from, reason == Reason::Probe),
            Reason::Connected => {
                self.node_mut(node).setup_failures = 0;
                if to == NodeState::Ready {
                    self.became_ready(node);
                }
            }
            Reason::HandshakeDone => self.became_ready(node),
            Reason::Closed(CloseReason::Evicted(_)) => {
                let n = self.node_mut(node);
                assert_eq!(to, NodeState::Disconnected { reconnect_at: now });
                n.conn = None;
                n.want = false;
            }
            Reason::Closed(reason) => self.closed(node, from, to, reason),
            Reason::BackoffReset => {
                let at = reconnect_at(from).map(|at| at.min(now));
                assert_eq!(reconnect_at(to), at, "{node:?}: a backoff reset");
            }
            Reason::Draining => assert_eq!(to, NodeState::Closing),
        }
    }

    pub(super) fn opened(&mut self, node: NodeId, from: NodeState, probe: bool) {
        let now = self.now;
        let at = self.opens.iter().position(|(c, _)| c.node() == node);
        let (conn, deadline) = self.opens.remove(at.expect("an Action::Open per attempt"));
        let after = reconnect_at(from).expect("opened between connections");
        assert!(
            probe || now >= after,
            "{node:?} reconnected at {now:?}, its backoff ends at {after:?}"
        );
        let c = &self.config;
        let setup = (c.setup_timeout, c.setup_timeout_max, c.setup_timeout_jitter);
        let m = self.model[&node].setup_failures;
        super::timing::check_backoff("setup timeout", setup, m, deadline - now);
        self.counts.connects += 1;
        self.counts.probes += u64::from(probe);
        let n = self.node_mut(node);
        let reconnect = core::mem::replace(&mut n.opened_before, true);
        n.want = false;
        n.conn = Some(ConnModel {
            id: conn,
            probe,
            setup_deadline: deadline,
            ready_at: None,
            ping: None,
            answered_at: None,
        });
        self.counts.reconnects += u64::from(reconnect);
    }

    fn became_ready(&mut self, node: NodeId) {
        let now = self.now;
        self.counts.ready += 1;
        let n = self.node_mut(node);
        n.disconnects = 0;
        n.final_failure = None;
        let quarantined = n.quarantine.is_some();
        let c = n.conn();
        c.ready_at = Some(now);
        if core::mem::take(&mut c.probe) && quarantined {
            self.expected
                .push(Expected::Readmitted(node, Readmission::Probe));
        }
    }

    /// The node's connection (if any) closed for `reason`: the requests on it have ended,
    /// its frames are gone, the failure may count towards quarantine, and it backs off.
    pub(super) fn closed(
        &mut self,
        node: NodeId,
        from: NodeState,
        to: NodeState,
        reason: CloseReason,
    ) {
        let now = self.now;
        let had_conn = matches!(
            from,
            NodeState::Connecting | NodeState::Handshaking | NodeState::Ready | NodeState::Closing
        );
        match reason {
            CloseReason::SetupTimeout => {
                self.counts.setup_timeouts += 1;
                let deadline = self.node_mut(node).conn().setup_deadline;
                assert!(
                    now > deadline,
                    "{node:?}: setup timeout at {now:?}, due {deadline:?}"
                );
            }
            CloseReason::WriteTimeout => {
                self.counts.write_timeouts += 1;
                self.check_write_timeout(node);
            }
            CloseReason::Idle => {
                self.counts.idle_closes += 1;
                self.check_idle_close(node);
            }
            CloseReason::HeartbeatTimeout => {
                self.counts.heartbeat_timeouts += 1;
                self.check_heartbeat_timeout(node);
            }
            CloseReason::Protocol(_) => self.counts.protocol_violations += 1,
            _ => {}
        }
        self.frames_cleared(node);
        let c = &self.config;
        let (threshold, probe_retries) = (c.quarantine_after_failures, c.probe_retries);
        let reconnect = (
            c.reconnect_backoff,
            c.reconnect_backoff_max,
            c.reconnect_jitter,
        );
        let last = (
            c.final_failure_backoff,
            crate::MAX_DURATION,
            c.reconnect_jitter,
        );
        let n = self.node_mut(node);
        let conn = n.conn.take();
        n.want = false;
        if had_conn && from == NodeState::Connecting {
            n.setup_failures += 1;
        }
        // A failure counts when it happened before `Ready`, cost requests, or was a stall, a
        // missed heartbeat or a broken protocol: a server closing an idle connection is not a
        // failing server.
        let counts = reason.is_failure()
            && (!from.is_established()
                || n.held > 0
                || matches!(
                    reason,
                    CloseReason::WriteTimeout
                        | CloseReason::HeartbeatTimeout
                        | CloseReason::Protocol(_)
                ));
        if counts {
            n.failures += 1;
        }
        let final_auth = matches!(
            reason,
            CloseReason::AuthFailed | CloseReason::CertificateRejected
        );
        let until = match to {
            NodeState::Closed => {
                n.quarantine = None;
                return;
            }
            NodeState::Disconnected { reconnect_at } if !final_auth => reconnect_at,
            NodeState::AuthFailed { reconnect_at } if final_auth => reconnect_at,
            _ => panic!("{node:?}: closed for {reason:?} into {to:?}"),
        };
        let (backoff, step) = if reason.is_final() {
            n.final_failure = Some((reason, until));
            (last, 0)
        } else {
            (reconnect, n.disconnects)
        };
        n.disconnects += 1;
        super::timing::check_backoff("reconnect backoff", backoff, step, until - now);
        let probe = conn.is_some_and(|c| c.probe);
        match n.quarantine.as_mut() {
            Some(q) if probe => {
                q.probes_failed += 1;
                if q.probes_failed >= probe_retries {
                    q.exhausted_at.get_or_insert(now);
                }
            }
            None if counts && n.failures >= threshold => {
                let cause = QuarantineCause::ConnectionFailures(reason);
                self.expected.push(Expected::Quarantined(node, cause));
            }
            _ => {}
        }
    }

    pub(super) fn readmitted(&mut self, node: NodeId, via: Readmission) {
        let now = self.now;
        if via == Readmission::GaveUp {
            let q = self.model[&node]
                .quarantine
                .expect("readmitted while not quarantined");
            let exhausted = q
                .exhausted_at
                .expect("gave up before the last probe failed");
            let due = exhausted + self.config.probe_delay(q.probes_failed);
            assert_eq!(self.config.after_last_probe, crate::AfterLastProbe::Readmit);
            assert!(now >= due, "{node:?} readmitted at {now:?}, due {due:?}");
        } else {
            self.expected_seen(Expected::Readmitted(node, via));
        }
        self.counts.readmissions += 1;
        let n = self.node_mut(node);
        assert!(
            n.quarantine.take().is_some(),
            "{node:?} readmitted, never quarantined"
        );
        n.failures = 0;
        n.timeouts = 0;
    }

    pub(super) fn writability(&mut self, node: NodeId, writable: bool, pending: u64) {
        let (high, low) = (self.config.high_watermark, self.config.low_watermark);
        let retry_batch = self.retry_batch;
        let n = self.node_mut(node);
        assert_ne!(
            writable, n.announced,
            "{node:?}: writability events alternate"
        );
        if writable {
            assert!(
                pending < low,
                "{node:?} writable at {pending} (low watermark {low})"
            );
        } else {
            assert!(
                pending > high,
                "{node:?} unwritable at {pending} (high {high})"
            );
        }
        n.announced = writable;
        if !retry_batch {
            let predicted = n.flips.pop_front();
            assert_eq!(
                predicted,
                Some((writable, pending)),
                "{node:?}: a writability event the model did not predict"
            );
        }
    }

    /// The node's connection is evicted: untouched frames of requests not yet retried stay for
    /// a fresh connection (retried once), every other frame goes.
    pub(super) fn evicted(&mut self, conn: ConnId) {
        self.counts.evictions += 1;
        let node = conn.node();
        let low = self.config.low_watermark;
        let handed: Vec<RequestId> = self
            .handed
            .get(&conn)
            .map(|(_, ids)| ids.clone())
            .unwrap_or_default();
        let (reqs, touched) = (&mut self.reqs, &self.touched);
        let (mut kept, mut pending) = (0, 0);
        self.frames.retain(|id, f| {
            if f.node != node {
                return true;
            }
            let untouched = !touched.contains(id) && !handed.contains(id);
            match reqs.get_mut(id).filter(|r| !r.retried && untouched) {
                Some(r) => {
                    r.retried = true;
                    kept += 1;
                    pending += f.cost;
                    true
                }
                None => false,
            }
        });
        self.counts.eviction_retries += kept;
        let n = self.node_mut(node);
        assert_eq!(
            n.conn.map(|c| c.id),
            Some(conn),
            "evicted a stale connection"
        );
        n.conn().ping = None;
        n.pending = pending;
        if pending < low {
            n.writable = true;
            n.announced = true;
        }
    }

    /// After the outputs of one input: every required event came; a transparent retry's
    /// frame is where the pool put it.
    pub(super) fn outputs_drained(&mut self) {
        assert!(
            self.expected.is_empty(),
            "expected {:?}, never seen",
            self.expected
        );
        if self.retry_batch {
            self.retries_found();
        } else if let Some((node, n)) = self.model.iter().find(|(_, n)| !n.flips.is_empty()) {
            panic!(
                "{node:?}: predicted writability events {:?} never came",
                n.flips
            );
        }
        self.look_at_requests();
    }

    /// An input moved requests of a failed connection, with not one byte sent, to a node the
    /// pool picked (transparent retries): they are queued there now, once.
    fn retries_found(&mut self) {
        let now = self.now;
        let mut moved = Vec::new();
        for (&id, r) in self.reqs.iter_mut().filter(|(_, r)| !r.retried) {
            let p = self
                .pool
                .requests()
                .get(id)
                .expect("an open request holds its slot");
            if p.retried {
                r.retried = true;
                r.node = p.node;
                moved.push((id, p.node, r.cost));
            }
        }
        self.counts.transparent_retries += moved.len() as u64;
        for (id, node, cost) in moved {
            let n = self.node_mut(node);
            n.pending += cost;
            if n.quarantine.is_none() && reconnect_at(n.state).is_some_and(|at| now < at) {
                n.want = true;
            }
            let f = Frame {
                node,
                cost,
                enqueued: now,
                ended: false,
            };
            self.frames.insert(id, f);
        }
        // Which of those crossed a watermark is not known: take the events' word.
        for n in self.model.values_mut() {
            n.flips.clear();
            n.writable = n.announced;
        }
    }
}
