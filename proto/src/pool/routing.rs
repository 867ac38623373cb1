//! The pool's internals: routing every input to its node's machine with a borrowed sink,
//! the checks a submit passes, panic mode and transparent retries.

use core::time::Duration;

use bytes::Bytes;

use super::{Pool, Target};
use crate::event::{CloseReason, Event, HandleError, NodeState, Sent, SubmitError, Unavailable};
use crate::hint::cold_path;
use crate::ids::{ConnId, NodeId};
use crate::node::{Census, Node, Retry, Sink};
use crate::select::{Placement, SelectIndex, Selection};
use crate::time::Instant;
use crate::timers::TimerKey;

impl Pool {
    pub(crate) fn node(&self, id: NodeId) -> Result<&Node, HandleError> {
        self.nodes
            .get(id.index())
            .and_then(|s| s.node.as_ref())
            .filter(|n| n.id() == id)
            .ok_or(HandleError::StaleNode)
    }

    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn requests(&self) -> &crate::requests::Requests {
        &self.shared.requests
    }

    #[cfg(test)]
    pub(crate) fn requests_mut(&mut self) -> &mut crate::requests::Requests {
        &mut self.shared.requests
    }

    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shared.shut_down
    }

    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn census(&self) -> Census {
        self.shared.census
    }

    /// The timer heap, to break it in tests of the consistency checks.
    #[cfg(test)]
    pub(crate) fn timer_heap_mut(&mut self) -> &mut crate::timers::TimerHeap {
        &mut self.shared.timers
    }

    /// The timer heap (for the consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn timer_heap(&self) -> &crate::timers::TimerHeap {
        &self.shared.timers
    }

    /// Slots in the node table (live or free), for selection's offset.
    pub(crate) fn node_slots(&self) -> usize {
        self.nodes.len()
    }

    /// The live node in slot `index`.
    pub(crate) fn node_at(&self, index: usize) -> Option<&Node> {
        self.nodes.get(index).and_then(|s| s.node.as_ref())
    }

    /// The latest time the pool has seen.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn latest(&mut self) -> Instant {
        self.clock.advance(Instant::ZERO)
    }

    /// The selection index, with every node an input touched placed anew and time moved on
    /// to `now`.
    pub(crate) fn select_index(&mut self, now: Instant) -> &SelectIndex {
        let (nodes, rule) = (&mut self.nodes, self.config.selection);
        self.index.refresh(|slot| {
            nodes[slot as usize]
                .node
                .as_mut()
                .map_or(Placement::OUT, |n| {
                    n.placed();
                    n.placement(now, rule)
                })
        });
        self.index.advance(now);
        &self.index
    }

    /// A uniform draw in `0..n` from the pool's seeded PRNG.
    pub(crate) fn draw_below(&mut self, n: usize) -> usize {
        self.shared.rng.below(n)
    }

    pub(crate) fn live_nodes(&self) -> impl Iterator<Item = &Node> + '_ {
        self.nodes.iter().filter_map(|s| s.node.as_ref())
    }

    /// Runs `f` on the node's machine with a sink borrowed from the pool, then routes any
    /// transparent retries it handed back and updates panic mode. The one place a node is
    /// looked up by its handle for a change.
    pub(super) fn with_node<R>(
        &mut self,
        now: Instant,
        id: NodeId,
        f: impl FnOnce(&mut Node, &mut Sink<'_>) -> R,
    ) -> Result<R, HandleError> {
        let census = self.shared.census;
        let (result, census_changed) = self.run_node(now, id, f)?;
        self.route_and_update_panic(now, census, census_changed);
        Ok(result)
    }

    /// The end of [`Pool::with_node`]: routes any transparent retries handed back and updates
    /// panic mode if the census changed from `census` (`census_changed` says whether the
    /// call itself moved it).
    #[inline]
    fn route_and_update_panic(&mut self, now: Instant, census: Census, mut census_changed: bool) {
        if !self.shared.retry.is_empty() {
            self.route_retries(now);
            // The retries may have moved it too (or moved it back).
            census_changed = self.shared.census != census;
        }
        if census_changed {
            self.update_panic(now);
        }
    }

    /// The live node `id`, and a sink that lends it the pool's parts for one call.
    #[inline]
    fn node_and_sink(
        &mut self,
        now: Instant,
        id: NodeId,
    ) -> Option<(&mut Node, Sink<'_>, &mut SelectIndex)> {
        let node = self
            .nodes
            .get_mut(id.index())
            .and_then(|s| s.node.as_mut())
            .filter(|n| n.id() == id)?;
        let sink = Sink {
            now,
            config: &self.config,
            pool: &mut self.shared,
        };
        Some((node, sink, &mut self.index))
    }

    /// Runs `f` on the node's machine with a sink borrowed from the pool and keeps the census
    /// and the selection index up to date: `f`'s result, and whether the census changed.
    pub(super) fn run_node<R>(
        &mut self,
        now: Instant,
        id: NodeId,
        f: impl FnOnce(&mut Node, &mut Sink<'_>) -> R,
    ) -> Result<(R, bool), HandleError> {
        let (node, mut sink, index) = self.node_and_sink(now, id).ok_or(HandleError::StaleNode)?;
        let before = node.census();
        let result = f(node, &mut sink);
        let after = node.census();
        node.touch(index);
        Ok((result, self.recount(before, after)))
    }

    /// Moves a node in the census from `before` to `after`: whether the census changed.
    #[inline]
    fn recount(&mut self, before: Census, after: Census) -> bool {
        let census_changed = after != before;
        if census_changed {
            self.shared.census.remove(before);
            self.shared.census.add(after);
        }
        census_changed
    }

    /// A response report, by id ([`Pool::handle_response`]) or in order
    /// ([`Pool::handle_next_response`]): `usual` runs it on the node on the usual path below
    /// (the node's part inlined), `other` on the rest (called out of line). Both are given the
    /// `payload` rather than capturing it: a closure holding it made every response copy it
    /// first, 6 instructions (`scripts/instructions.sh`, the lifecycle by id).
    ///
    /// On a `Ready` connection of a node not in quarantine (the usual case) only a failed
    /// report, a violation that closes the connection, can move the node in the census or
    /// hand back a retry: a successful one could only move it by a readmission, which lifts a
    /// quarantine it does not have. So [`Pool::with_node`]'s census, retry and panic
    /// bookkeeping is done after a failure only.
    #[inline(always)]
    pub(super) fn report_answer<R>(
        &mut self,
        now: Instant,
        conn: ConnId,
        payload: Bytes,
        usual: impl FnOnce(&mut Node, &mut Sink<'_>, Bytes) -> Result<R, HandleError>,
        other: impl FnOnce(&mut Node, &mut Sink<'_>, Bytes) -> Result<R, HandleError>,
    ) -> Result<R, HandleError> {
        let is_usual = self.node(conn.node).is_ok_and(|n| {
            n.is_current(conn) && n.state() == NodeState::Ready && n.admission.quarantine.is_none()
        });
        if !is_usual {
            cold_path();
            return self.report(now, conn, NodeState::is_established, |n, sink| {
                other(n, sink, payload)
            });
        }
        let now = self.clock.advance(now);
        let (node, mut sink, index) = self
            .node_and_sink(now, conn.node)
            .ok_or(HandleError::StaleNode)?;
        #[cfg(debug_assertions)]
        let census = node.census();
        let result = usual(node, &mut sink, payload);
        node.touch(index);
        // Each arm builds its own result. Handed back whole, an in-order answer
        // (`Ok(Some(id))`, stored as two words) was copied out with one 16-byte load, which the
        // store buffer cannot forward (`scripts/forwarding.sh in-order` finds it): about 3.5 ns
        // of thread CPU per in-order response in the lifecycle bench's in-order pipeline
        // (BENCHMARKS.md, "An in-order answer copied word by word").
        match result {
            Ok(answer) => {
                #[cfg(debug_assertions)]
                debug_assert_eq!(node.census(), census, "a response moved the census");
                debug_assert!(
                    self.shared.retry.is_empty(),
                    "a response handed back a retry"
                );
                Ok(answer)
            }
            Err(e) => {
                // Before, the node was Ready and not quarantined, so it counted as admitted and
                // healthy if enabled, which a response leaves as it was: worked out here, after a
                // failure, not read for every response.
                let enabled = usize::from(node.admission.enabled);
                let before = Census {
                    admitted: enabled,
                    healthy: enabled,
                };
                #[cfg(debug_assertions)]
                debug_assert_eq!(before, census, "the census before a response");
                let after = node.census();
                self.after_failed_response(now, before, after);
                Err(e)
            }
        }
    }

    /// [`Pool::with_node`]'s bookkeeping after a failed [`Pool::report_answer`], out of
    /// line: the census moves from `before` to `after` (the node's own, before and after it).
    #[cold]
    #[inline(never)]
    fn after_failed_response(&mut self, now: Instant, before: Census, after: Census) {
        let census = self.shared.census;
        let census_changed = self.recount(before, after);
        self.route_and_update_panic(now, census, census_changed);
    }

    /// Runs `f` on the node's machine (time already moved on to `now`) like
    /// [`Pool::with_node`], but without comparing the census before and after, for the calls
    /// that cannot move the node in it or hand back a retry (no close, no quarantine, no
    /// readmission), so panic mode cannot change either: a submit's enqueue on a node that
    /// passed [`Pool::admit`], and a write report on a `Ready` connection.
    ///
    /// Both callers have just checked that `id` is live, so only its slot is read here: the
    /// second comparison of its generation cost a submit 4 instructions (the compiler kept
    /// both look-ups; `scripts/instructions.sh`, 864 → 860 per lifecycle). The look-up and
    /// the sink repeat [`Pool::node_and_sink`]'s, without its check: a helper shared by both,
    /// returning the node, sink and index, cost a submit 5 more (843 → 848).
    pub(super) fn with_node_in_census<R>(
        &mut self,
        now: Instant,
        id: NodeId,
        f: impl FnOnce(&mut Node, &mut Sink<'_>) -> R,
    ) -> Result<R, HandleError> {
        let Some(node) = self.nodes.get_mut(id.index()).and_then(|s| s.node.as_mut()) else {
            cold_path();
            return Err(HandleError::StaleNode);
        };
        debug_assert_eq!(node.id(), id, "the caller checked the node's generation");
        let mut sink = Sink {
            now,
            config: &self.config,
            pool: &mut self.shared,
        };
        let index = &mut self.index;
        let census = node.census();
        let result = f(node, &mut sink);
        node.touch(index);
        debug_assert_eq!(node.census(), census, "the call moved the census");
        debug_assert!(self.shared.retry.is_empty(), "the call handed back a retry");
        Ok(result)
    }

    /// Hands out the queued frames of `conn` (see [`Node::hand_out`]): whether it had any.
    /// Unlike [`Pool::with_node`], it lends the node none of the pool's parts and leaves the
    /// census, panic mode and the selection index alone: a hand-out changes nothing they read
    /// (the node's state, admission, requests and writability), nor any request, timer, event
    /// or action.
    pub(super) fn hand_out(
        &mut self,
        conn: ConnId,
        max_bytes: usize,
        take: impl FnMut(&Bytes, usize),
    ) -> bool {
        #[cfg(debug_assertions)]
        let (now, selection) = (self.clock.advance(Instant::ZERO), self.config.selection);
        let Some(node) = self
            .nodes
            .get_mut(conn.node.index())
            .and_then(|s| s.node.as_mut())
            .filter(|n| n.id() == conn.node)
        else {
            return false;
        };
        #[cfg(debug_assertions)]
        let placement = node.placement(now, selection);
        let census = node.census();
        let handed = node.hand_out(conn.generation, max_bytes, take);
        debug_assert_eq!(node.census(), census, "a hand-out moved the census");
        #[cfg(debug_assertions)]
        debug_assert_eq!(
            node.placement(now, selection),
            placement,
            "a hand-out moved the node in the selection index"
        );
        handed
    }

    /// Queues each transparent retry once more: on its own node if it was submitted to that
    /// node, else where selection says, within its deadline; ends it with its first outcome
    /// when nothing can take it.
    pub(super) fn route_retries(&mut self, now: Instant) {
        while let Some(retry) = self.shared.retry.pop() {
            let Some(r) = self.shared.requests.get(retry.id) else {
                continue;
            };
            let (pinned, node, deadline) = (r.pinned, r.node, r.deadline);
            let target = if pinned {
                Some(node)
            } else {
                match self.pick(now) {
                    Selection::Ready(id) | Selection::Connecting(id) | Selection::Connect(id) => {
                        Some(id)
                    }
                    Selection::None { .. } => None,
                }
            };
            let fits = deadline >= now
                && target.is_some_and(|t| {
                    self.node(t).is_ok_and(|n| {
                        n.selectable(now, self.shared.panic) && self.room(n, retry.cost).is_ok()
                    })
                });
            match target {
                Some(t) if fits => {
                    let Retry {
                        id, frame, cost, ..
                    } = retry;
                    let _ = self.run_node(now, t, |n, sink| n.requeue(sink, id, frame, cost));
                }
                _ => {
                    self.shared.timers.cancel(TimerKey::Request(retry.id));
                    let r = self.shared.requests.remove(retry.id);
                    if let Some(r) = r {
                        self.shared.events.push_back(Event::RequestDone {
                            id: retry.id,
                            node: r.node,
                            outcome: retry.outcome,
                            sent: Sent::Nothing,
                            retried: r.retried,
                        });
                    }
                }
            }
        }
    }

    /// Enters or leaves panic mode as the census says, announcing the change.
    pub(super) fn update_panic(&mut self, now: Instant) {
        // Once shut down the pool selects nothing: it leaves panic mode (once), and nodes
        // closing one by one say nothing more about health.
        let panic =
            !self.shared.shut_down && self.shared.census.panics(self.config.panic_threshold);
        if panic == self.shared.panic {
            return;
        }
        self.shared.panic = panic;
        if panic {
            self.shared.counters.panics += 1;
        }
        self.shared.events.push_back(Event::PanicMode {
            entered: panic,
            healthy: self.shared.census.healthy,
            admitted: self.shared.census.admitted,
            at: now,
        });
    }

    /// An application command on one node: clamps `now`, runs it.
    pub(super) fn command<R>(
        &mut self,
        now: Instant,
        node: NodeId,
        f: impl FnOnce(&mut Node, &mut Sink<'_>) -> R,
    ) -> Result<R, HandleError> {
        let now = self.clock.advance(now);
        self.with_node(now, node, f)
    }

    /// Runs `f` on every node's machine (in slot order).
    pub(super) fn every_node(&mut self, now: Instant, mut f: impl FnMut(&mut Node, &mut Sink<'_>)) {
        let now = self.clock.advance(now);
        for index in 0..self.nodes.len() {
            let Some(id) = self.nodes[index].node.as_ref().map(Node::id) else {
                continue;
            };
            let _ = self.with_node(now, id, &mut f);
        }
    }

    /// A write report on a `Closing` connection, which may end its drain and so move the
    /// census: out of line, so that the usual report on a ready one saves only the registers
    /// it needs (not those of this path's census and retry bookkeeping).
    #[inline(never)]
    pub(super) fn written_while_closing(
        &mut self,
        now: Instant,
        conn: ConnId,
        n: usize,
    ) -> Result<(), HandleError> {
        self.command(now, conn.node, |node, sink| {
            node.written(sink, conn.generation, n)
        })?
    }

    /// Every adapter report: clamps `now`, checks that `conn` is current and in a state
    /// `state_ok` accepts (else nothing changes), applies `apply`.
    pub(super) fn report<R>(
        &mut self,
        now: Instant,
        conn: ConnId,
        state_ok: impl Fn(NodeState) -> bool,
        apply: impl FnOnce(&mut Node, &mut Sink<'_>) -> Result<R, HandleError>,
    ) -> Result<R, HandleError> {
        let node = self.node(conn.node).map_err(|_| HandleError::StaleConn)?;
        if !node.is_current(conn) {
            return Err(HandleError::StaleConn);
        }
        if !state_ok(node.state()) {
            return Err(HandleError::WrongState);
        }
        self.command(now, conn.node, apply)?
    }

    /// Checks a submit against the pool's rules and picks its node: the node and the frame's
    /// cost in pending bytes, or why it is refused.
    pub(super) fn admit(
        &mut self,
        now: Instant,
        target: Target,
        deadline: Instant,
        len: usize,
    ) -> Result<(NodeId, u64), SubmitError> {
        if self.shared.shut_down {
            cold_path();
            return Err(SubmitError::NodeUnavailable(Unavailable::Shutdown));
        }
        if deadline < now {
            cold_path();
            return Err(SubmitError::DeadlinePassed);
        }
        let (node, n) = match target {
            Target::Node(id) => {
                let Ok(n) = self.node(id) else {
                    cold_path();
                    return Err(SubmitError::StaleHandle);
                };
                let a = n.admission;
                if !a.enabled {
                    cold_path();
                    return Err(SubmitError::NodeUnavailable(Unavailable::Disabled));
                }
                if let Some(last) = n.final_failure(now) {
                    cold_path();
                    let reason = Unavailable::Failed(last.reason);
                    return Err(SubmitError::NodeUnavailable(reason));
                }
                if a.quarantine.is_some() && !self.shared.panic {
                    cold_path();
                    return Err(SubmitError::NodeUnavailable(Unavailable::Quarantined));
                }
                if now < a.throttled_until {
                    cold_path();
                    let until = a.throttled_until;
                    return Err(SubmitError::NodeUnavailable(Unavailable::Throttled {
                        until,
                    }));
                }
                (id, n)
            }
            Target::Best => match self.pick(now) {
                Selection::Ready(id) | Selection::Connecting(id) | Selection::Connect(id) => {
                    (id, self.node(id).map_err(|_| SubmitError::StaleHandle)?)
                }
                Selection::None { all_full } => {
                    return Err(match self.every_node_failed(now) {
                        Some(reason) => SubmitError::NodeUnavailable(Unavailable::Failed(reason)),
                        None => SubmitError::NoNode { all_full },
                    });
                }
            },
        };
        let cost = (len as u64).saturating_add(self.config.per_frame_overhead);
        match self.room(n, cost) {
            Ok(()) => Ok((node, cost)),
            Err(e) => {
                let counter = match e {
                    SubmitError::NotWritable => &mut self.shared.counters.unwritable_rejections,
                    SubmitError::InFlightLimit => &mut self.shared.counters.in_flight_rejections,
                    _ => &mut self.shared.counters.memory_budget_rejections,
                };
                *counter += 1;
                Err(e)
            }
        }
    }

    /// When every admitted node (enabled, not closed) is in a final failure's backoff: the
    /// first one's reason, in slot order. Only asked when selection found no node, and stops
    /// at the first node that is not.
    fn every_node_failed(&self, now: Instant) -> Option<CloseReason> {
        let mut first = None;
        for n in self.live_nodes().filter(|n| n.census().admitted > 0) {
            let last = n.final_failure(now)?;
            first.get_or_insert(last.reason);
        }
        first
    }

    /// Whether the node can queue a frame costing `cost` now: writable, under its in-flight
    /// cap, and within the memory budget (and the byte count's range).
    pub(super) fn room(&self, n: &Node, cost: u64) -> Result<(), SubmitError> {
        if !n.outbound.is_writable() {
            cold_path();
            return Err(SubmitError::NotWritable);
        }
        if n.requests() >= self.config.max_in_flight as usize {
            cold_path();
            return Err(SubmitError::InFlightLimit);
        }
        let overflows = cost == u64::MAX || !self.shared.total_pending.fits(cost);
        if overflows || self.over_budget(n, cost) {
            cold_path();
            return Err(SubmitError::MemoryBudget);
        }
        Ok(())
    }

    /// The global memory budget: once queuing `cost` more would exceed it, a connection may
    /// only grow while it holds less than its fair share (the budget split over the nodes that
    /// hold pending bytes), so the ones holding the most are refused first and nothing is
    /// closed to free memory.
    pub(super) fn over_budget(&self, node: &Node, cost: u64) -> bool {
        let Some(budget) = self.config.memory_budget else {
            return false;
        };
        if self.shared.total_pending.get().saturating_add(cost) <= budget {
            return false;
        }
        let holders = self
            .live_nodes()
            .filter(|m| m.outbound.pending() > 0 || m.id() == node.id())
            .count() as u64;
        let share = budget / holders.max(1);
        node.outbound.pending().saturating_add(cost) > share
    }

    /// Whether the heap entry `(at, key)` is what its owner holds: the node's timer armed at
    /// `at`, or a live request's deadline. Every entry is (the owners cancel what they stop),
    /// which the test and fuzzing builds check (`Pool::check_invariants`).
    pub(crate) fn timer_valid(&self, at: Instant, key: TimerKey) -> bool {
        match key {
            TimerKey::Node(node, timer) => self.node(node).is_ok_and(|n| n.timer_armed(timer, at)),
            TimerKey::Request(id) => self
                .shared
                .requests
                .get(id)
                .is_some_and(|r| !r.ended && r.deadline.expiry_after(Duration::ZERO) == at),
        }
    }
}
