//! A node's requests on the wire: queuing, handing bytes out, write reports under the write
//! timeout, responses under the frame timeout, and ending requests exactly once.

use bytes::Bytes;

use super::{Node, Shared, Sink};
use crate::config::Config;
use crate::event::{
    CloseReason, Event, HandleError, Outcome, Phase, QuarantineCause, Readmission, Sent, Violation,
};
use crate::ids::{ConnId, RequestId};
use crate::outbound::{Flip, Frame, HandOut};
use crate::requests::{Request, Stage};
use crate::time::Instant;
use crate::timers::NodeTimer;

impl Sink<'_> {
    /// Emits the request's one and only [`Event::RequestDone`].
    pub(crate) fn end_request(&mut self, id: RequestId, outcome: Outcome, sent: Sent) {
        let Some(r) = self.pool.requests.get_mut(id) else {
            return;
        };
        if r.ended {
            return;
        }
        r.ended = true;
        let r = *r;
        self.request_done(id, &r, outcome, sent);
    }

    /// The event of `r` (request `id`), which ends now: its deadline stops. Inlined into a
    /// response, as it was while the event queue's push was an out-of-line call (`#[inline]`
    /// alone was not taken once the deadline's usual cancel was inlined into it).
    #[inline(always)]
    fn request_done(&mut self, id: RequestId, r: &Request, outcome: Outcome, sent: Sent) {
        self.pool.timers.cancel_request(id);
        self.pool.events.push_back(Event::RequestDone {
            id,
            node: r.node,
            outcome,
            sent,
            retried: r.retried,
        });
    }

    /// Announces a writability flip, if any. `#[inline(always)]`: a submit's enqueue and a
    /// write report inlined into the pool's made it a call otherwise.
    #[inline(always)]
    fn writability(&mut self, node: crate::NodeId, flip: Option<Flip>, pending: u64) {
        if let Some(flip) = flip {
            self.pool.events.push_back(Event::Writability {
                node,
                writable: flip == Flip::BecameWritable,
                pending,
            });
        }
    }
}

impl Node {
    // ---------------------------------------------------------------------------------------
    // Queuing.

    /// Queues an accepted request's frame (the pool checked writability, the in-flight cap
    /// and the memory budget). Arms the write timer at once on a ready connection: an adapter
    /// that only wakes for [`Pool::poll_timeout`](crate::Pool::poll_timeout) still sees it.
    ///
    /// `#[inline(always)]` into `Pool::submit`, its one caller, which then passes it nothing
    /// through memory (the sink and the frame were built on the stack for the call) and
    /// saves its registers once. That pays only with the helpers it calls inlined in it too
    /// (`Requests::insert`, `Sink::writability` and [`Node::schedule_transmit`] `#[inline]`,
    /// [`Node::demand_connection`] `#[inline(always)]`): in the larger function the compiler
    /// made them calls, and the request was built on the stack for its insert.
    #[inline(always)]
    pub(crate) fn enqueue(
        &mut self,
        sink: &mut Sink<'_>,
        deadline: Instant,
        frame: Bytes,
        cost: u64,
        pinned: bool,
    ) -> RequestId {
        let id = sink.pool.requests.insert(Request {
            node: self.id,
            deadline,
            stage: Stage::Queued {
                seq: self.outbound.next_seq(),
            },
            retried: false,
            pinned,
            heartbeat: false,
            ended: false,
        });
        sink.pool.counters.submitted += 1;
        let at = deadline.expiry_after(core::time::Duration::ZERO);
        sink.pool.timers.schedule_new_request(at, id);
        self.queue_frame(sink, id, frame, cost, true);
        id
    }

    /// Takes over a live request whose first connection (of this node or another) failed
    /// with not one byte sent: a transparent retry.
    pub(crate) fn requeue(&mut self, sink: &mut Sink<'_>, id: RequestId, frame: Bytes, cost: u64) {
        if let Some(r) = sink.pool.requests.get_mut(id) {
            debug_assert!(!r.retried, "{id:?} retried twice");
            r.node = self.id;
            r.retried = true;
        }
        sink.pool.counters.transparent_retries += 1;
        self.queue(sink, id, frame, cost);
    }

    /// Puts the frame of `id` in the outbound queue. A heartbeat's frame is queued like any
    /// other but not counted among the node's requests.
    pub(super) fn queue(&mut self, sink: &mut Sink<'_>, id: RequestId, frame: Bytes, cost: u64) {
        let seq = self.outbound.next_seq();
        let counted = match sink.pool.requests.get_mut(id) {
            Some(r) => {
                r.stage = Stage::Queued { seq };
                !r.heartbeat
            }
            None => true,
        };
        self.queue_frame(sink, id, frame, cost, counted);
    }

    /// Puts the frame of `id`, whose request (if any) already says it is queued as the next
    /// frame, in the outbound queue; `counted` says whether it counts among the node's
    /// requests (a heartbeat's does not).
    #[inline(always)]
    fn queue_frame(
        &mut self,
        sink: &mut Sink<'_>,
        id: RequestId,
        frame: Bytes,
        cost: u64,
        counted: bool,
    ) {
        // The write timeout follows the oldest live frame: a frame queued behind one leaves it
        // where it is.
        let behind_a_live_frame = self.outbound.has_live();
        let (seq, flip) = self.outbound.push(
            Frame {
                id,
                bytes: frame,
                written: 0,
                cost,
                enqueued_at: sink.now,
                handed_out: false,
                dropped: false,
            },
            sink.config.high_watermark,
        );
        debug_assert!(
            sink.pool
                .requests
                .get(id)
                .is_none_or(|r| r.stage == Stage::Queued { seq }),
            "{id:?} queued as frame {seq} with another stage"
        );
        if counted {
            self.requests += 1;
        }
        sink.pool.total_pending.add(cost);
        sink.writability(self.id, flip, self.outbound.pending());
        if !behind_a_live_frame {
            // This frame is the oldest live one now (with no live frame the queue holds no
            // tombstone either): its write deadline is the node's.
            debug_assert_eq!(self.outbound.live_ids().next(), Some(id));
            self.arm_write_timer_now(sink);
        }
        self.schedule_transmit(sink);
        self.after_request_change(sink);
        self.demand_connection(sink);
    }

    /// How much of the request's frame the kernel has accepted, from where it is.
    /// (`#[inline(always)]`: a response inlined into the pool's report made it a call.)
    #[inline(always)]
    pub(super) fn sent(&self, stage: Stage) -> Sent {
        match stage {
            Stage::Reserved => Sent::Nothing,
            Stage::Sent { .. } => Sent::Fully,
            Stage::Queued { seq } => self.outbound.get(seq).map_or(Sent::Unknown, Frame::sent),
        }
    }

    /// The sequence number of the request's frame if it is queued and untouched (not handed
    /// out, not one byte written): a frame that can still be dropped unsent.
    pub(super) fn untouched_seq(&self, stage: Stage) -> Option<u64> {
        match stage {
            Stage::Queued { seq } if self.outbound.get(seq).is_some_and(Frame::untouched) => {
                Some(seq)
            }
            _ => None,
        }
    }

    // ---------------------------------------------------------------------------------------
    // Handing bytes out and write reports.

    /// Puts the connection in the pool's transmit queue if it has bytes to hand out and the
    /// adapter can take them. `#[inline]`: see [`Node::enqueue`].
    #[inline]
    pub(super) fn schedule_transmit(&mut self, sink: &mut Sink<'_>) {
        let established = self.state.is_established();
        let has_bytes = self.outbound.has_unhanded();
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if established && has_bytes && !conn.scheduled && !conn.blocked {
            conn.scheduled = true;
            let handle = ConnId {
                node: self.id,
                generation: conn.generation,
            };
            sink.pool.transmit.push_back(handle);
        }
    }

    /// Hands out the queued frames of the connection of generation `generation` (taken off
    /// the transmit queue): from now on they cannot be dropped unsent until the write report
    /// says none of their bytes went out.
    ///
    /// This and the other reports on one connection take its generation, all they read of
    /// its [`ConnId`]: a `u32` is passed in a register, a `ConnId` (three fields) through
    /// memory, copied there by the caller.
    ///
    /// Inlined into `Pool::poll_transmit`, which has saved its registers already. A plain
    /// hint does it: `#[inline(always)]`, needed when `Outbound::hand_out`'s usual case was
    /// first inlined here, now gives the same code (`scripts/instructions.sh` 910 / 939 /
    /// 979 / 984 with either; BENCHMARKS.md, "The code a request runs through").
    #[inline]
    pub(crate) fn hand_out(
        &mut self,
        generation: u32,
        max_bytes: usize,
        take: impl FnMut(&Bytes, usize),
    ) -> bool {
        let Some(c) = self.conn.as_mut().filter(|c| c.generation == generation) else {
            return false;
        };
        if !core::mem::take(&mut c.scheduled) || !self.outbound.has_unhanded() {
            return false;
        }
        self.outbound.hand_out(max_bytes, take);
        true
    }

    /// The outstanding hand-out of the connection of generation `generation`, if that is the
    /// node's connection and it has one.
    pub(crate) fn handed_out(&self, generation: u32) -> Option<HandOut<'_>> {
        self.conn.as_ref().filter(|c| c.generation == generation)?;
        self.outbound.handed_frames()
    }

    /// The kernel accepted `n` bytes of the last hand-out on the connection of generation
    /// `generation`. Completed frames await their responses; the rest go back to the queue
    /// (dropped now if their request ended and no byte went out). A short write blocks the
    /// connection until it is writable again.
    ///
    /// Inlined, with the usual report's whole path ([`Node::written_lone`]), into the pool's
    /// report on a ready connection: one function saving one set of registers and no call
    /// passing the sink through memory. Any other report goes out of line.
    #[inline(always)]
    pub(crate) fn written(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        n: usize,
    ) -> Result<(), HandleError> {
        if let Some((id, cost, flip)) = self
            .outbound
            .report_lone_written(n, sink.config.low_watermark)
        {
            self.written_lone(sink, generation, id, cost, flip);
            return Ok(());
        }
        self.written_frames(sink.now, sink.config, sink.pool, generation, n)
    }

    /// [`Node::written`] for any hand-out, taking the sink's parts (see [`Sink`]): the usual
    /// report inlines the rest.
    #[inline(never)]
    fn written_frames(
        &mut self,
        now: Instant,
        config: &Config,
        pool: &mut Shared,
        generation: u32,
        n: usize,
    ) -> Result<(), HandleError> {
        let sink = &mut Sink { now, config, pool };
        let Some(handed) = self.outbound.handed() else {
            return if n == 0 {
                Ok(())
            } else {
                Err(HandleError::Overwritten)
            };
        };
        // More than was handed out: `report_written` refuses it, changing nothing.
        let mut freed = 0usize;
        let requests = &mut sink.pool.requests;
        let awaiting = &mut self.awaiting;
        let report = self
            .outbound
            .report_written(n, sink.config.low_watermark, |id, done| {
                if done {
                    requests.await_response(awaiting, id, generation);
                    return false;
                }
                let Some(r) = requests.get(id) else {
                    return false;
                };
                // Handed out, not one byte written: back in the queue, or dropped unsent now if
                // its request ended meanwhile.
                let (ended, heartbeat) = (r.ended, r.heartbeat);
                if ended {
                    requests.remove(id);
                    freed += usize::from(!heartbeat);
                }
                ended
            });
        let Ok((released, flip)) = report else {
            return Err(HandleError::Overwritten);
        };
        sink.pool.total_pending.release(released);
        sink.writability(self.id, flip, self.outbound.pending());
        if let Some(c) = self.conn.as_mut() {
            c.blocked = n < handed;
        }
        self.requests -= freed;
        if self.outbound.has_live() {
            self.compact_outbound(sink);
            self.rearm_write_timer(sink);
            self.schedule_transmit(sink);
        } else {
            // Usually every frame was written whole: with no live frame the queue holds no
            // tombstone either, so nothing is left to compact, time or hand out.
            self.disarm(sink, NodeTimer::WriteTimeout);
        }
        self.after_request_change(sink);
        Ok(())
    }

    /// The rest of a write report that took the lone queued frame, all of it, off the queue
    /// ([`Outbound::report_lone_written`](crate::outbound::Outbound::report_lone_written)):
    /// what [`Node::written`] does after such a report, with no frame left behind it.
    #[inline(always)]
    fn written_lone(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        id: RequestId,
        cost: u64,
        flip: Option<Flip>,
    ) {
        debug_assert!(
            !self.outbound.has_live(),
            "a frame left behind the lone one"
        );
        sink.pool.total_pending.release(cost);
        sink.writability(self.id, flip, self.outbound.pending());
        sink.pool
            .requests
            .await_response(&mut self.awaiting, id, generation);
        // Every byte handed out was taken: the write was not short.
        if let Some(c) = self.conn.as_mut() {
            c.blocked = false;
        }
        // No live frame left: nothing to compact, time or hand out. The write timer stops,
        // with the index's part inlined too.
        self.disarm_with(sink, NodeTimer::WriteTimeout, true);
        // Nothing `after_request_change` follows has changed (the node's requests and state,
        // its connection and its heartbeat; a draining node's frame went on to await its
        // response, which leaves it as drained as it was): the input that last changed any of
        // them kept the idle and heartbeat timers in step, so the usual write report skips
        // its look at them. Debug builds still look, and check that nothing moves.
        #[cfg(debug_assertions)]
        {
            let (timers, state) = (self.timers, self.state);
            self.after_request_change(sink);
            debug_assert!(
                self.timers == timers && self.state == state,
                "a lone write moved the idle timers or the state"
            );
        }
    }

    /// The socket can take bytes again after a short write.
    pub(crate) fn writable(&mut self, sink: &mut Sink<'_>) {
        if let Some(c) = self.conn.as_mut() {
            c.blocked = false;
        }
        self.schedule_transmit(sink);
    }

    /// Arms the write timeout for the oldest unaccepted frame of a ready connection:
    /// `max(enqueued, ready) + write_timeout`, firing one nanosecond past it.
    pub(super) fn rearm_write_timer(&mut self, sink: &mut Sink<'_>) {
        match self.outbound.front_live().map(|f| f.enqueued_at) {
            Some(enqueued_at) => self.arm_write_timer_from(sink, enqueued_at),
            None => self.disarm(sink, NodeTimer::WriteTimeout),
        }
    }

    /// Arms the write timeout for the oldest unaccepted frame, queued at `enqueued_at`, if the
    /// connection is ready (else stops it).
    #[inline]
    fn arm_write_timer_from(&mut self, sink: &mut Sink<'_>, enqueued_at: Instant) {
        match self.write_due(sink, enqueued_at) {
            Some(at) => self.arm(sink, NodeTimer::WriteTimeout, at),
            None => self.disarm(sink, NodeTimer::WriteTimeout),
        }
    }

    /// [`Node::arm_write_timer_from`] for a frame queued now as the oldest live one (a submit
    /// on an idle connection, the usual case), with the arming inlined whole
    /// ([`Node::arm_with`]).
    #[inline(always)]
    fn arm_write_timer_now(&mut self, sink: &mut Sink<'_>) {
        match self.write_due(sink, sink.now) {
            Some(at) => self.arm_with(sink, NodeTimer::WriteTimeout, at, true),
            None => self.disarm(sink, NodeTimer::WriteTimeout),
        }
    }

    /// When the write timeout of the oldest unaccepted frame, queued at `enqueued_at`, fires:
    /// `max(enqueued, ready) + write_timeout`, one nanosecond past it; `None` if the
    /// connection is not ready or there is no write timeout.
    #[inline(always)]
    fn write_due(&self, sink: &Sink<'_>, enqueued_at: Instant) -> Option<Instant> {
        let ready_at = self.conn.and_then(|c| c.ready_at)?;
        let limit = sink.pool.write_timeout?;
        Some(enqueued_at.max(ready_at).expiry_after_nanos(limit))
    }

    pub(super) fn write_timed_out(&mut self, sink: &mut Sink<'_>) {
        sink.pool.counters.write_timeouts += 1;
        self.close(sink, CloseReason::WriteTimeout, true);
    }

    // ---------------------------------------------------------------------------------------
    // Responses.

    /// A response to `id` arrived on the connection of generation `generation`. One for a
    /// request not in flight on that connection closes it as a protocol violation.
    ///
    /// Out of line: the reports other than the usual one call it here, while the usual one
    /// (`Pool::report_answer`) inlines [`Node::respond`] alone.
    #[inline(never)]
    pub(crate) fn response(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        id: RequestId,
        payload: Bytes,
    ) -> Result<(), HandleError> {
        self.respond(sink, generation, id, payload)
    }

    /// [`Node::response`], inlined into the pool's usual response report: one function, with
    /// one set of saved registers, and no call passing the sink and the payload through
    /// memory.
    #[inline(always)]
    pub(crate) fn respond(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        id: RequestId,
        payload: Bytes,
    ) -> Result<(), HandleError> {
        // In flight on this connection: fully written on it, or partly written (a frame only
        // handed out has not reached the peer).
        let outbound = &self.outbound;
        let found = sink
            .pool
            .requests
            .get(id)
            .filter(|r| r.node == self.id)
            .filter(|r| match r.stage {
                Stage::Sent { conn, .. } => conn == generation,
                Stage::Queued { seq } => outbound.get(seq).is_some_and(|f| f.written > 0),
                Stage::Reserved => false,
            })
            .copied();
        let Some(r) = found else {
            self.unknown_response(sink.now, sink.config, sink.pool, id);
            return Err(HandleError::UnknownRequest);
        };
        self.answered(sink, id, r, payload);
        Ok(())
    }

    /// The response to `r` (request `id`), found in flight on this connection: the request
    /// ends with it (or its late response is dropped), and it leaves the awaited list and
    /// its slot.
    #[inline(always)]
    fn answered(&mut self, sink: &mut Sink<'_>, id: RequestId, r: Request, payload: Bytes) {
        if let Stage::Sent { links, .. } = r.stage {
            sink.pool.requests.leave(&mut self.awaiting, links);
        }
        if let Some(c) = self.conn.as_mut() {
            c.partial_since = None;
            self.disarm(sink, NodeTimer::Frame);
        }
        if r.heartbeat {
            self.heartbeat_answered(sink.now, sink.config, sink.pool, id);
            return;
        }
        // Nothing more can arrive for it: its slot goes now, its event (if it has not ended
        // yet) with what the slot said.
        let sent = self.sent(r.stage);
        sink.pool.requests.free_found(id);
        if r.ended {
            sink.pool.counters.late_responses += 1;
        } else {
            sink.pool.counters.responses += 1;
            sink.request_done(id, &r, Outcome::Response(payload), sent);
            self.timeouts = 0;
            self.failures = 0;
            // In panic mode a quarantined node still serves; an answer is the best proof.
            self.readmit(sink, Readmission::Answered);
        }
        self.requests -= 1;
        self.after_request_change(sink);
    }

    /// A response to `id`, not in flight on the connection, closes it as a protocol
    /// violation. Out of line, taking the sink's parts (see [`Sink`]).
    #[cold]
    #[inline(never)]
    fn unknown_response(
        &mut self,
        now: Instant,
        config: &Config,
        pool: &mut Shared,
        id: RequestId,
    ) {
        let sink = &mut Sink { now, config, pool };
        sink.pool.counters.protocol_violations += 1;
        let violation = Violation::UnknownRequest(id);
        self.close(sink, CloseReason::Protocol(violation), true);
    }

    /// A response arrived on the connection of generation `generation` for an in-order
    /// protocol: it answers the oldest request written on that connection and not yet
    /// answered. A request that ended early (deadline, cancel) after a byte of it was written
    /// keeps its place: its late response is consumed here and dropped (`Ok(None)`), never
    /// handed to the request behind it. A response with nothing in flight closes the
    /// connection as a violation.
    ///
    /// Out of line: the reports other than the usual one call it here, while the usual one
    /// (`Pool::report_answer`) inlines [`Node::respond_next`] alone.
    #[inline(never)]
    pub(crate) fn next_response(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        payload: Bytes,
    ) -> Result<Option<RequestId>, HandleError> {
        self.respond_next(sink, generation, payload)
    }

    /// [`Node::next_response`], inlined into the pool's usual response report as
    /// [`Node::respond`] is: the oldest awaited request is found and answered with one look
    /// at the request table.
    #[inline(always)]
    pub(crate) fn respond_next(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        payload: Bytes,
    ) -> Result<Option<RequestId>, HandleError> {
        // The list holds only this connection's requests: a connection that goes takes its
        // list along (`Node::fail_all`, `Node::evict`).
        if let Some((id, &r)) = sink.pool.requests.front(&self.awaiting) {
            debug_assert!(
                r.sent_on(generation),
                "{id:?} awaited from another connection"
            );
            self.answered(sink, id, r, payload);
            return Ok(r.awaited().then_some(id));
        }
        self.respond_to_partly_written(sink, generation, payload)
    }

    /// [`Node::respond_next`] with nothing written whole awaiting an answer: a frame partly
    /// written is the oldest in flight, else the response is a violation.
    #[inline(never)]
    fn respond_to_partly_written(
        &mut self,
        sink: &mut Sink<'_>,
        generation: u32,
        payload: Bytes,
    ) -> Result<Option<RequestId>, HandleError> {
        let oldest = self.outbound.front_live().filter(|f| f.written > 0);
        let Some(id) = oldest.map(|f| f.id) else {
            sink.pool.counters.protocol_violations += 1;
            let violation = Violation::UnexpectedResponse;
            self.close(sink, CloseReason::Protocol(violation), true);
            return Err(HandleError::UnknownRequest);
        };
        let live = sink.pool.requests.get(id).is_some_and(Request::awaited);
        self.response(sink, generation, id, payload)?;
        Ok(live.then_some(id))
    }

    /// The adapter decoded what it could: whether part of a response is still buffered. The
    /// frame timeout runs from the first byte of a response (or the end of the previous one)
    /// until it is complete.
    pub(crate) fn received(&mut self, sink: &mut Sink<'_>, partial: bool) {
        let limit = sink.config.frame_timeout;
        let Some(c) = self.conn.as_mut() else { return };
        if !partial || limit.is_zero() {
            c.partial_since = None;
            self.disarm(sink, NodeTimer::Frame);
            return;
        }
        if c.partial_since.is_none() {
            c.partial_since = Some(sink.now);
            self.arm(sink, NodeTimer::Frame, sink.now.expiry_after(limit));
        }
    }

    pub(super) fn frame_timed_out(&mut self, sink: &mut Sink<'_>) {
        let Some(since) = self.conn.and_then(|c| c.partial_since) else {
            return;
        };
        let elapsed = sink.now - since;
        sink.pool.counters.protocol_violations += 1;
        let violation = Violation::TooSlow { elapsed };
        self.close(sink, CloseReason::Protocol(violation), true);
    }

    // ---------------------------------------------------------------------------------------
    // Ending requests.

    /// Releases the request's slot (after it ended and nothing more can arrive for it).
    pub(crate) fn free_request(&mut self, sink: &mut Sink<'_>, id: RequestId) {
        let Some(r) = sink.pool.requests.remove(id) else {
            return;
        };
        debug_assert!(r.ended);
        self.requests -= 1;
        self.after_request_change(sink);
    }

    /// Drops the still untouched frame `seq` of `id` unsent.
    pub(super) fn drop_unsent(&mut self, sink: &mut Sink<'_>, id: RequestId, seq: u64) {
        let cost = self
            .outbound
            .get(seq)
            .filter(|f| f.id == id)
            .map_or(0, |f| f.cost);
        let flip = self.outbound.drop_unsent(seq, sink.config.low_watermark);
        sink.pool.total_pending.release(cost);
        self.compact_outbound(sink);
        sink.writability(self.id, flip, self.outbound.pending());
        self.rearm_write_timer(sink);
    }

    /// Compacts the queue when dropped frames pile up behind a stuck one, renumbering the
    /// requests whose frames moved.
    pub(super) fn compact_outbound(&mut self, sink: &mut Sink<'_>) {
        if !self.outbound.needs_compaction() {
            return;
        }
        let requests = &mut sink.pool.requests;
        self.outbound.compact(|id, new_seq| {
            if let Some(r) = requests.get_mut(id) {
                match &mut r.stage {
                    Stage::Queued { seq } => *seq = new_seq,
                    Stage::Sent { .. } | Stage::Reserved => {}
                }
            }
        });
    }

    /// Ends a live request with `outcome` because of the application or its deadline: a
    /// queued frame is dropped unsent and the slot freed; a (partly) written or handed-out one
    /// keeps its slot until its frame is written and its late response arrives or the
    /// connection closes.
    pub(crate) fn abandon(&mut self, sink: &mut Sink<'_>, id: RequestId, outcome: Outcome) {
        let Some(stage) = sink.pool.requests.get(id).map(|r| r.stage) else {
            return;
        };
        sink.end_request(id, outcome, self.sent(stage));
        if let Some(seq) = self.untouched_seq(stage) {
            self.drop_unsent(sink, id, seq);
            self.free_request(sink, id);
        }
        self.after_request_change(sink);
    }

    /// The request's deadline passed: dropped unsent if still queued, else a request timeout
    /// that counts towards quarantine.
    pub(crate) fn request_deadline(&mut self, sink: &mut Sink<'_>, id: RequestId) {
        let Some(stage) = sink.pool.requests.get(id).map(|r| r.stage) else {
            return;
        };
        if self.untouched_seq(stage).is_some() {
            sink.pool.counters.queued_deadline_drops += 1;
            let phase = Phase::Queued;
            self.abandon(sink, id, Outcome::DeadlineExceeded { phase });
            return;
        }
        sink.pool.counters.request_timeouts += 1;
        let phase = Phase::InFlight;
        // Only a request the server may have had counts against the node: a frame handed out
        // whose write was never reported may yet turn out never to have left.
        let reached = self.sent(stage) != Sent::Unknown;
        self.abandon(sink, id, Outcome::DeadlineExceeded { phase });
        if !reached {
            return;
        }
        self.timeouts += 1;
        let threshold = sink.config.quarantine_after_timeouts;
        if self.timeouts >= threshold && self.admission.quarantine.is_none() {
            self.quarantine(sink, QuarantineCause::RequestTimeouts);
        }
    }
}
