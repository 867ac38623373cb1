//! A node's connection lifecycle: opening under the setup timeout, becoming ready, draining,
//! closing with a reason and backing off, and eviction.

use alloc::vec::Vec;

use super::table::Input;
use super::{Conn, FinalFailure, Node, Retry, Shared, Sink};
use crate::config::Config;
use crate::event::{
    Action, CloseReason, Event, EvictReason, NodeState, Outcome, QuarantineCause, Readmission, Sent,
};
use crate::ids::RequestId;
use crate::outbound::Frame;
use crate::time::Instant;
use crate::timers::NodeTimer;

impl Node {
    // ---------------------------------------------------------------------------------------
    // Opening.

    /// A request or the application wants a connection: open one now if the node is between
    /// connections and its backoff allows, else as soon as it does.
    ///
    /// `#[inline(always)]`, as the other helpers of a submit's enqueue are inlined (see
    /// [`Node::enqueue`]; a mere hint was not always taken): on a connected node it is one
    /// test.
    #[inline(always)]
    pub(crate) fn demand_connection(&mut self, sink: &mut Sink<'_>) {
        let Some(reconnect_at) = self.reconnect_at() else {
            return;
        };
        self.connect_at(sink.now, sink.config, sink.pool, reconnect_at);
    }

    /// The rest of [`Node::demand_connection`], for a node between connections, which may
    /// open one at `reconnect_at`. Out of line, taking the sink's parts (see [`Sink`]).
    #[inline(never)]
    fn connect_at(
        &mut self,
        now: Instant,
        config: &Config,
        pool: &mut Shared,
        reconnect_at: Instant,
    ) {
        let sink = &mut Sink { now, config, pool };
        if sink.now >= reconnect_at {
            self.open(sink, false);
        } else {
            self.want_connection = true;
            self.arm(sink, NodeTimer::Reconnect, reconnect_at);
        }
    }

    /// Opens a fresh connection: a new generation, a setup deadline `S(m)` with jitter drawn
    /// once for this attempt, and an [`Action::Open`].
    pub(super) fn open(&mut self, sink: &mut Sink<'_>, probe: bool) {
        let now = sink.now;
        let setup = sink
            .config
            .setup_backoff()
            .delay(self.setup_failures, sink.pool.rng.next_unit());
        let reconnect = self.conn_generation > 0;
        self.conn_generation = self.conn_generation.wrapping_add(1);
        self.conn = Some(Conn {
            generation: self.conn_generation,
            ready_at: None,
            probe,
            scheduled: false,
            blocked: false,
            partial_since: None,
            heartbeat: None,
        });
        self.want_connection = false;
        self.last_attempt = Some(now);
        self.disarm(sink, NodeTimer::Reconnect);
        sink.pool.counters.connects += 1;
        if reconnect {
            sink.pool.counters.reconnects += 1;
        }
        self.arm(sink, NodeTimer::Setup, now.expiry_after(setup));
        sink.pool.actions.push_back(Action::Open {
            conn: self.conn_handle(self.conn_generation),
            endpoint: self.endpoint.clone(),
            options: sink.config.socket,
            deadline: now + setup,
        });
        self.apply(sink, Input::Open { probe });
    }

    /// A wanted connection opens now if its backoff was cut short (a new epoch), instead of
    /// at the reconnect timer armed for the old backoff.
    pub(crate) fn resume(&mut self, sink: &mut Sink<'_>) {
        let admitted = sink.pool.panic || self.admission.quarantine.is_none();
        if self.want_connection && admitted && !sink.pool.shut_down {
            self.demand_connection(sink);
        }
    }

    /// The TCP connect completed: the attempt got further than connecting, so the setup
    /// timeout resets to `S(0)` for the next one.
    pub(crate) fn connected(&mut self, sink: &mut Sink<'_>) {
        self.setup_failures = 0;
        let handshake = sink.config.handshake;
        if handshake {
            if let Some(conn) = self.conn_id() {
                sink.pool.actions.push_back(Action::Handshake { conn });
            }
            self.apply(sink, Input::Connected { handshake });
        } else {
            self.apply(sink, Input::Connected { handshake });
            self.became_ready(sink);
        }
    }

    /// The application handshake succeeded.
    pub(crate) fn handshake_done(&mut self, sink: &mut Sink<'_>) {
        self.apply(sink, Input::HandshakeDone);
        self.became_ready(sink);
    }

    /// The connection is usable: the reconnect backoff resets, a probe readmits its node, and
    /// frames queued before now start their write-timeout clocks.
    fn became_ready(&mut self, sink: &mut Sink<'_>) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.ready_at = Some(sink.now);
        // Once ready, a probe's connection is an ordinary one: its later failures are not
        // probe failures.
        let probe = core::mem::take(&mut conn.probe);
        self.final_failure = None;
        self.disconnects = 0;
        self.failed_attempts = 0;
        self.disarm(sink, NodeTimer::Setup);
        sink.pool.counters.ready += 1;
        if probe {
            self.readmit(sink, Readmission::Probe);
        }
        self.rearm_write_timer(sink);
        self.schedule_transmit(sink);
        self.after_request_change(sink);
    }

    pub(super) fn setup_timed_out(&mut self, sink: &mut Sink<'_>) {
        if self.conn.is_some() && self.state.is_connecting() {
            sink.pool.counters.setup_timeouts += 1;
            self.close(sink, CloseReason::SetupTimeout, true);
        }
    }

    pub(super) fn idle_expired(&mut self, sink: &mut Sink<'_>) {
        if self.is_ready() && self.requests == 0 {
            sink.pool.counters.idle_closes += 1;
            self.close(sink, CloseReason::Idle, true);
        }
    }

    /// Keeps the idle and heartbeat timers in step with the node's requests (armed from the
    /// moment a ready connection holds none, stopped while it holds any), and closes a drained
    /// `Closing` connection.
    #[inline]
    pub(crate) fn after_request_change(&mut self, sink: &mut Sink<'_>) {
        // The common case, a request more or less on a busy ready connection, changes nothing:
        // both timers stay stopped.
        let busy = self.requests > 0 && self.state == NodeState::Ready;
        if busy
            && self.timers.get(NodeTimer::Idle).is_none()
            && self.timers.get(NodeTimer::Heartbeat).is_none()
        {
            return;
        }
        self.keep_idle_timers(sink.now, sink.config, sink.pool);
    }

    /// The slow path of [`Node::after_request_change`], taking the sink's parts (see
    /// [`Sink`]).
    #[inline(never)]
    fn keep_idle_timers(&mut self, now: Instant, config: &Config, pool: &mut Shared) {
        // With neither timer configured (the default), a ready connection whose last request
        // ended has nothing to arm, and the idle timer nothing to stop (never armed without a
        // timeout); only a drain has something left to do. Checked here, in a call with no
        // register to save, not inline on the busy path (which grew) nor in the rest; one
        // flag set from the config once says whether either timer is configured.
        if !pool.idle_timers
            && self.state != NodeState::Closing
            && self.timers.get(NodeTimer::Idle).is_none()
        {
            return;
        }
        self.update_idle_timers(&mut Sink { now, config, pool });
    }

    /// The rest of [`Node::keep_idle_timers`].
    #[inline(never)]
    fn update_idle_timers(&mut self, sink: &mut Sink<'_>) {
        if self.state == NodeState::Closing && self.conn.is_some() {
            if self.drained(sink) {
                self.close(sink, CloseReason::Shutdown, true);
            }
            return;
        }
        let idle = sink.config.idle_timeout;
        // A closing connection's requests end while the state still reads `Ready` but the
        // connection is already gone: no idle timer may outlive it into the next one.
        if idle.is_zero() || !self.is_ready() || self.conn.is_none() || self.requests > 0 {
            self.disarm(sink, NodeTimer::Idle);
        } else if self.timers.get(NodeTimer::Idle).is_none() {
            self.arm(sink, NodeTimer::Idle, sink.now.expiry_after(idle));
        }
        self.rearm_heartbeat(sink);
    }

    /// Whether every request the node holds has ended (a request that timed out in flight may
    /// still hold its slot for a late response; a drain does not wait for that).
    fn drained(&self, sink: &Sink<'_>) -> bool {
        let ended = |id: &RequestId| sink.pool.requests.get(*id).is_none_or(|r| r.ended);
        self.outbound.live_ids().all(|id| ended(&id))
            && sink
                .pool
                .requests
                .awaited(&self.awaiting)
                .all(|id| ended(&id))
    }

    // ---------------------------------------------------------------------------------------
    // Shutting down.

    /// A graceful shutdown: a ready connection with requests drains through `Closing`; any
    /// other node closes at once.
    pub(crate) fn shut_down_gracefully(&mut self, sink: &mut Sink<'_>) {
        if self.is_ready() && self.requests > 0 {
            self.end_heartbeat(sink);
            self.apply(sink, Input::Drain);
            self.after_request_change(sink);
        } else if self.state != NodeState::Closing {
            self.close(sink, CloseReason::Shutdown, true);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Closing.

    /// Ends the node's current connection (if any) and every request it holds with
    /// `reason`, releases its pending bytes without a writability event, counts the failure,
    /// and moves the node to `Disconnected` with its backoff (or `AuthFailed`, or `Closed`).
    /// A final `reason` ([`CloseReason::is_final`]) backs off for `final_failure_backoff`
    /// instead, and is remembered so that submits fail fast meanwhile.
    /// `tell_adapter` emits [`Action::Close`] (not needed when the adapter reported the close).
    pub(crate) fn close(&mut self, sink: &mut Sink<'_>, reason: CloseReason, tell_adapter: bool) {
        let prev = self.state;
        let conn = self.conn.take();
        self.forget_heartbeat(sink, conn);
        let had_requests = self.requests > 0;
        self.stop_connection_timers(sink);
        self.want_connection = false;
        if let (Some(c), true) = (conn, tell_adapter) {
            let conn = self.conn_handle(c.generation);
            sink.pool.actions.push_back(Action::Close { conn, reason });
        }
        self.fail_all(sink, reason);

        let draw = sink.pool.rng.next_unit();
        if conn.is_some() {
            if prev == NodeState::Connecting {
                self.setup_failures = self.setup_failures.saturating_add(1);
            }
            if !prev.is_established() {
                self.failed_attempts = self.failed_attempts.saturating_add(1);
            }
        }
        // A failure is counted for quarantine when it happened before `Ready`, or cost requests,
        // or the connection stalled, missed a heartbeat or broke the protocol: a server closing
        // an idle connection is not a failing server.
        let counts = reason.is_failure()
            && (!prev.is_established()
                || had_requests
                || matches!(
                    reason,
                    CloseReason::WriteTimeout
                        | CloseReason::HeartbeatTimeout
                        | CloseReason::Protocol(_)
                ));
        if counts {
            self.failures = self.failures.saturating_add(1);
        }
        let retire = sink.pool.shut_down
            || matches!(reason, CloseReason::NodeRemoved | CloseReason::Shutdown);
        if retire {
            for &timer in NodeTimer::ALL {
                self.disarm(sink, timer);
            }
            self.admission.quarantine = None;
            if prev != NodeState::Closed {
                self.apply(sink, Input::Retire(reason));
            }
            return;
        }
        let Some(conn) = conn else { return };
        let delay = if reason.is_final() {
            sink.config.final_backoff().delay(0, draw)
        } else {
            sink.config
                .reconnect_backoff()
                .delay(self.disconnects, draw)
        };
        self.disconnects = self.disconnects.saturating_add(1);
        let reconnect_at = sink.now + delay;
        if reason.is_final() {
            self.final_failure = Some(FinalFailure {
                reason,
                until: reconnect_at,
            });
        }
        self.apply(
            sink,
            Input::Lost {
                reason,
                reconnect_at,
            },
        );
        if conn.probe && self.admission.quarantine.is_some() {
            self.probe_failed(sink);
        } else if counts
            && self.admission.quarantine.is_none()
            && self.failures >= sink.config.quarantine_after_failures
        {
            self.quarantine(sink, QuarantineCause::ConnectionFailures(reason));
        }
    }

    fn stop_connection_timers(&mut self, sink: &mut Sink<'_>) {
        for timer in [
            NodeTimer::Setup,
            NodeTimer::WriteTimeout,
            NodeTimer::Idle,
            NodeTimer::Frame,
            NodeTimer::Heartbeat,
        ] {
            self.disarm(sink, timer);
        }
    }

    /// Ends every request the node holds with "connection lost" and frees them; its pending
    /// bytes leave the global total. With [`Config::retry_unsent`](crate::Config), a request
    /// of which not one byte was handed out goes to the pool for one more try instead.
    fn fail_all(&mut self, sink: &mut Sink<'_>, reason: CloseReason) {
        let outcome = Outcome::ConnectionLost(reason);
        // A final failure (refused authentication or certificate, a name that does not exist)
        // ends its requests at once: retrying would only meet the same refusal.
        let retry = sink.config.retry_unsent
            && !sink.pool.shut_down
            && !reason.is_final()
            && !matches!(reason, CloseReason::NodeRemoved | CloseReason::Shutdown);
        sink.pool.total_pending.release(self.outbound.pending());
        let frames: Vec<Frame> = self.outbound.drain().collect();
        for frame in frames {
            let id = frame.id;
            let Some(r) = sink.pool.requests.get(id).filter(|r| r.node == self.id) else {
                continue;
            };
            if retry && frame.untouched() && !r.retried && !r.ended {
                self.requests -= 1;
                sink.pool.retry.push(Retry {
                    id,
                    frame: frame.bytes,
                    cost: frame.cost,
                    outcome: outcome.clone(),
                });
                continue;
            }
            sink.end_request(id, outcome.clone(), frame.sent());
            self.free_request(sink, id);
        }
        for id in sink.pool.requests.take_awaited(&mut self.awaiting) {
            sink.end_request(id, outcome.clone(), Sent::Fully);
            self.free_request(sink, id);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Eviction.

    /// Evicts the node's cached connection: flagged ([`Event::Evicted`]) then closed. Requests
    /// already (partly) written, or handed out, end [`Outcome::Evicted`]; untouched queued ones
    /// move once to a fresh connection (a second eviction ends them). The sender never writes
    /// to nor reconnects the evicted handle: it is stale at once.
    pub(crate) fn evict(&mut self, sink: &mut Sink<'_>, reason: EvictReason) {
        let Some(conn) = self.conn_id() else { return };
        let gone = self.conn.take();
        self.forget_heartbeat(sink, gone);
        self.want_connection = false;
        self.stop_connection_timers(sink);
        sink.pool.counters.evictions += 1;
        sink.pool.events.push_back(Event::Evicted { conn, reason });
        sink.pool.actions.push_back(Action::Close {
            conn,
            reason: CloseReason::Evicted(reason),
        });

        let before = self.outbound.pending();
        let mut gone: Vec<(RequestId, Sent)> = sink
            .pool
            .requests
            .take_awaited(&mut self.awaiting)
            .into_iter()
            .map(|id| (id, Sent::Fully))
            .collect();
        let requests = &sink.pool.requests;
        self.outbound.keep_for_retry(
            |f| requests.get(f.id).is_some_and(|r| !r.retried && !r.ended),
            |f| gone.push((f.id, f.sent())),
            sink.config.low_watermark,
        );
        sink.pool
            .total_pending
            .release(before - self.outbound.pending());
        self.compact_outbound(sink);
        for (id, sent) in gone {
            if sink
                .pool
                .requests
                .get(id)
                .is_some_and(|r| r.node == self.id)
            {
                sink.end_request(id, Outcome::Evicted(reason), sent);
                self.free_request(sink, id);
            }
        }
        let mut kept = 0;
        for id in self.outbound.live_ids() {
            if let Some(r) = sink.pool.requests.get_mut(id) {
                r.retried = true;
                kept += 1;
            }
        }
        sink.pool.counters.eviction_retries += kept;
        let at = sink.now;
        self.apply(sink, Input::Evicted { reason, at });
        let admitted = sink.pool.panic || self.admission.quarantine.is_none();
        if kept > 0 && admitted && !sink.pool.shut_down {
            self.open(sink, false);
        }
    }
}
