//! Heartbeats on idle connections ([`Config::heartbeat`](crate::Config::heartbeat)): a ping
//! on a ready connection that has held no request for longer than the interval, with its own
//! deadline.
//!
//! A heartbeat is a request in the pool's table, flagged as one and pinned to its connection
//! ([`Conn::heartbeat`]), so its response is routed like any other: by id, or in order, keeping
//! its place. It is never counted among the node's requests (so never against
//! `max_in_flight`, selection's load, the idle timeout or a drain) and never ends with an
//! [`Event::RequestDone`](crate::Event::RequestDone). One node timer,
//! [`NodeTimer::Heartbeat`], holds the moment the next ping is due while none is outstanding,
//! and the outstanding ping's deadline otherwise.

use core::time::Duration;

use bytes::Bytes;

use super::{Conn, Node, Shared, Sink};
use crate::config::Config;
use crate::event::{Action, CloseReason, HandleError};
use crate::ids::RequestId;
use crate::requests::{Request, Stage};
use crate::time::Instant;
use crate::timers::NodeTimer;

impl Node {
    /// Keeps the heartbeat timer in step (from `after_request_change`): armed `interval` after
    /// a ready connection last held a request, stopped while it holds any, left alone while a
    /// ping is outstanding (it holds the ping's deadline).
    pub(super) fn rearm_heartbeat(&mut self, sink: &mut Sink<'_>) {
        let Some(heartbeat) = sink.config.heartbeat else {
            return;
        };
        if self.conn.is_none_or(|c| c.heartbeat.is_some()) {
            return;
        }
        if !self.is_ready() || self.requests > 0 {
            self.disarm(sink, NodeTimer::Heartbeat);
        } else if self.timers.get(NodeTimer::Heartbeat).is_none() {
            let at = sink.now.expiry_after(heartbeat.interval);
            self.arm(sink, NodeTimer::Heartbeat, at);
        }
    }

    /// The heartbeat timer fired: an outstanding ping missed its deadline (the connection
    /// closes as a failure), or an idle connection is due a ping.
    pub(super) fn heartbeat_due(&mut self, sink: &mut Sink<'_>) {
        let (Some(heartbeat), Some(conn)) = (sink.config.heartbeat, self.conn) else {
            return;
        };
        if conn.heartbeat.is_some() {
            sink.pool.counters.heartbeat_timeouts += 1;
            self.close(sink, CloseReason::HeartbeatTimeout, true);
            return;
        }
        if !self.is_ready() || self.requests > 0 {
            return;
        }
        let deadline = sink.now + heartbeat.timeout;
        let id = sink.pool.requests.insert(Request {
            node: self.id,
            deadline,
            stage: Stage::Reserved,
            retried: false,
            pinned: true,
            heartbeat: true,
            ended: false,
        });
        if let Some(c) = self.conn.as_mut() {
            c.heartbeat = Some(id);
        }
        sink.pool.counters.heartbeats_sent += 1;
        // Missed once more than `timeout` has passed, as a request's deadline is.
        self.arm(
            sink,
            NodeTimer::Heartbeat,
            deadline.expiry_after(Duration::ZERO),
        );
        let conn = self.conn_handle(conn.generation);
        sink.pool.actions.push_back(Action::Heartbeat { conn, id });
    }

    /// The adapter handed over the ping frame of heartbeat `id` (the pool checked that it is
    /// one of this node's, and live): queued like any frame.
    pub(crate) fn submit_heartbeat(
        &mut self,
        sink: &mut Sink<'_>,
        id: RequestId,
        frame: Bytes,
    ) -> Result<(), HandleError> {
        if self.conn.and_then(|c| c.heartbeat) != Some(id) {
            return Err(HandleError::UnknownRequest);
        }
        if sink.pool.requests.get(id).map(|r| r.stage) != Some(Stage::Reserved) {
            return Err(HandleError::WrongState);
        }
        let cost = (frame.len() as u64).saturating_add(sink.config.per_frame_overhead);
        self.queue(sink, id, frame, cost);
        Ok(())
    }

    /// The ping's response arrived: consumed, and the connection's idle clock restarts. An
    /// answer proves the connection works, so the consecutive connection failures reset.
    /// Out of line, taking the sink's parts (see [`Sink`]); `#[cold]`, as heartbeats are
    /// rare beside requests.
    #[cold]
    #[inline(never)]
    pub(super) fn heartbeat_answered(
        &mut self,
        now: Instant,
        config: &Config,
        pool: &mut Shared,
        id: RequestId,
    ) {
        let sink = &mut Sink { now, config, pool };
        sink.pool.requests.remove(id);
        if let Some(c) = self.conn.as_mut().filter(|c| c.heartbeat == Some(id)) {
            c.heartbeat = None;
            self.disarm(sink, NodeTimer::Heartbeat);
        }
        self.failures = 0;
        self.after_request_change(sink);
    }

    /// A graceful shutdown began: the outstanding ping (if any) ends silently. Not yet written,
    /// it is dropped; (partly) written, it keeps its place until its response is consumed or
    /// the connection closes, but its deadline no longer closes anything.
    pub(super) fn end_heartbeat(&mut self, sink: &mut Sink<'_>) {
        let Some(id) = self.conn.and_then(|c| c.heartbeat) else {
            return;
        };
        self.disarm(sink, NodeTimer::Heartbeat);
        let Some(stage) = sink.pool.requests.get(id).map(|r| r.stage) else {
            return;
        };
        let untouched = self.untouched_seq(stage);
        if stage == Stage::Reserved || untouched.is_some() {
            if let Some(seq) = untouched {
                self.drop_unsent(sink, id, seq);
            }
            sink.pool.requests.remove(id);
            if let Some(c) = self.conn.as_mut() {
                c.heartbeat = None;
            }
        } else if let Some(r) = sink.pool.requests.get_mut(id) {
            r.ended = true;
        }
    }

    /// A connection is going: its outstanding heartbeat ends silently, its slot freed (its
    /// frame, if queued, goes with the connection's other frames; written, it leaves the
    /// awaited list first).
    pub(super) fn forget_heartbeat(&mut self, sink: &mut Sink<'_>, conn: Option<Conn>) {
        let Some(id) = conn.and_then(|c| c.heartbeat) else {
            return;
        };
        let requests = &mut sink.pool.requests;
        if let Some(Stage::Sent { links, .. }) = requests.get(id).map(|r| r.stage) {
            requests.leave(&mut self.awaiting, links);
        }
        requests.remove(id);
    }
}
