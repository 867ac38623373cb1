//! The simulated world's adapter loop: what an adapter does with the pool's actions, its
//! hand-outs and its events.

use super::*;

impl World {
    /// Drains the pool's outputs: actions, writes, events (call it after calling the pool
    /// directly).
    pub fn pump(&mut self) {
        loop {
            // Only the adapter's calls (for actions and writes) can make new output; the
            // events, which the simulator merely records, cannot.
            let mut called = false;
            while let Some(action) = self.pool.poll_action() {
                called = true;
                self.perform(&action);
            }
            let mut bufs = std::mem::take(&mut self.bufs);
            while let Some(conn) = self.pool.poll_transmit(self.transmit_max, &mut bufs) {
                called = true;
                self.write(conn, &bufs);
            }
            self.bufs = bufs;
            while let Some(event) = self.pool.poll_event() {
                self.on_event(event);
            }
            if !called {
                break;
            }
        }
    }

    fn perform(&mut self, action: &Action) {
        match *action {
            Action::Open { conn, options, .. } => {
                let n = conn.node().index();
                if self.conns[n].is_some() {
                    self.fail(format!("{conn:?} opened while node {n} has a connection"));
                    self.drop_conn(n);
                }
                let opts = Opts::new(&options, &self.kernel);
                self.conns[n] = Some(Conn::new(conn, opts, self.now));
                self.tally.connects += 1;
                self.syn(n, true);
            }
            Action::Handshake { conn } => {
                let _ = self.pool.handle_handshake_done(self.now, conn);
            }
            Action::Close { conn, reason } => {
                self.last_close = self.now;
                let n = conn.node().index();
                let Some(c) = self.conns[n].as_ref().filter(|c| c.id == conn) else {
                    return;
                };
                let counted = !matches!(
                    reason,
                    CloseReason::Evicted(_)
                        | CloseReason::Idle
                        | CloseReason::Shutdown
                        | CloseReason::NodeRemoved
                );
                if c.established && counted && self.servers[n].healthy() && c.peer == Peer::Alive {
                    self.tally.healthy_closed += 1;
                }
                self.drop_conn(n);
            }
            _ => {}
        }
    }

    /// The client kernel takes what fits its send buffer of one hand-out.
    fn write(&mut self, conn: ConnId, bufs: &[Bytes]) {
        let n = conn.node().index();
        let now = self.now;
        let Some(c) = self.conns[n].as_mut().filter(|c| c.id == conn) else {
            self.fail(format!("bytes handed out for {conn:?}, which is not open"));
            return;
        };
        if !c.established {
            self.fail(format!("bytes handed out for {conn:?} before it connected"));
            return;
        }
        let mut room = c.send_room();
        let mut taken = 0usize;
        let total: usize = bufs.iter().map(Bytes::len).sum();
        c.handed.clear();
        for (i, b) in bufs.iter().enumerate() {
            let (slot, before) = match c.partial.filter(|_| i == 0) {
                Some(p) => p,
                None => (self.arena.identify(b), 0),
            };
            let r = self.arena.get_mut(slot);
            if !r.handed_out {
                r.handed_out = true;
                if !r.pinned {
                    r.requeued_by = self.last_close;
                }
            }
            if (r.len - before) as usize != b.len() {
                let msg = format!(
                    "{conn:?}: handed out {} bytes of {:?}, expected its {} unwritten",
                    b.len(),
                    r.id,
                    r.len - before
                );
                self.violation.get_or_insert(msg);
            }
            let take = (b.len() as u64).min(room) as u32;
            if take > 0 && r.ended_unsent {
                let msg = format!("at {now:?}: {:?} written after it ended unsent", r.id);
                self.violation.get_or_insert(msg);
            }
            if take > 0 {
                if before == 0 {
                    if now > r.deadline {
                        self.tally.stale_sent += 1;
                    }
                    if c.peer == Peer::Gone && !r.into_dead {
                        r.into_dead = true;
                        self.tally.into_dead.push(now);
                    }
                    r.node = n as u32;
                }
                r.written += take;
                r.refs += 1;
                c.snd.push(Seg {
                    slot,
                    len: take,
                    end: r.written == r.len,
                });
                room -= u64::from(take);
                taken += take as usize;
            }
            let whole = take as usize == b.len();
            c.handed.push((slot, whole));
            if whole {
                c.partial = None;
            } else {
                c.partial = (before + take > 0).then_some((slot, before + take));
                break;
            }
        }
        c.blocked = taken < total;
        if let Err(e) = self.pool.handle_written(now, conn, taken) {
            self.fail(format!("handle_written({conn:?}, {taken}): {e}"));
        }
        self.flow(n);
    }

    /// Moves bytes from the client's send buffer to the server's receive buffer as far as the
    /// path, the peer and the window allow, lets the server read, and wakes a blocked writer.
    pub(super) fn flow(&mut self, n: usize) {
        let now = self.now;
        loop {
            let Some(c) = self.conns[n].as_mut() else {
                return;
            };
            if !c.established {
                return;
            }
            if c.snd.bytes > 0 {
                if self.servers[n].reachable() && c.peer == Peer::Alive {
                    let window = self.kernel.recv_buffer.saturating_sub(c.rcv.bytes);
                    let moved = c.snd.bytes.min(window);
                    if moved > 0 {
                        let (snd, rcv) = (&mut c.snd, &mut c.rcv);
                        let arena = &mut self.arena;
                        snd.take(moved, |seg, split| {
                            if split {
                                arena.get_mut(seg.slot).refs += 1;
                            }
                            rcv.push(seg);
                        });
                        heard(c, now);
                    }
                    c.retrans_stamp = None;
                    c.retransmits = 0;
                    c.timers[Timer::Rto as usize] = None;
                    if c.snd.bytes > 0 {
                        // A zero window; progress (an ACK of new data) restarts the persist
                        // timer, its backoff and its probe clock, as Linux does.
                        if c.zero_window.is_none() || moved > 0 {
                            c.zero_window = Some(now);
                            c.probes_stamp = None;
                            c.probes_out = 0;
                            c.persist_backoff = 0;
                            let at = c.next_probe(&self.kernel, now);
                            self.arm(n, Timer::Persist, at);
                        }
                    } else {
                        c.zero_window = None;
                        c.probes_stamp = None;
                        c.timers[Timer::Persist as usize] = None;
                    }
                } else if c.retrans_stamp.is_none() {
                    // Sent into the void: the retransmission timer runs from here.
                    c.retrans_stamp = Some(now);
                    c.retransmits = 0;
                    let at = c.next_rto(&self.kernel, now);
                    self.arm(n, Timer::Rto, at);
                }
            }
            let read = self.serve(n);
            let Some(c) = self.conns[n].as_mut() else {
                return;
            };
            if c.blocked && c.writable() {
                c.blocked = false;
                let id = c.id;
                if let Err(e) = self.pool.handle_writable(now, id) {
                    self.fail(format!("handle_writable({id:?}): {e}"));
                }
                return;
            }
            if read == 0 || c.snd.bytes == 0 {
                return;
            }
        }
    }

    /// The server process reads from its receive buffer and executes every whole frame.
    fn serve(&mut self, n: usize) -> u64 {
        let now = self.now;
        let server = &self.servers[n];
        if !server.reads() {
            return 0;
        }
        let latency = server.latency();
        let slow = server.slow.map(|(rate, _)| rate);
        let Some(c) = self.conns[n].as_mut() else {
            return 0;
        };
        if c.peer != Peer::Alive || c.rcv.bytes == 0 {
            c.read_at = now;
            return 0;
        }
        let can = match slow {
            None => c.rcv.bytes,
            Some(rate) => {
                let credit = rate as f64 * (now - c.read_at).as_secs_f64();
                let credit = (credit as u64).min(rate);
                if credit == 0 {
                    if c.timers[Timer::Read as usize].is_none() {
                        self.arm(n, Timer::Read, now + SLOW_READ_EVERY);
                    }
                    return 0;
                }
                c.read_at = now;
                credit.min(c.rcv.bytes)
            }
        };
        let was_idle = c.responses.is_empty();
        let mut executed = std::mem::take(&mut self.scratch_executed);
        let arena = &mut self.arena;
        let mut consumed = std::mem::take(&mut self.scratch_consumed);
        c.rcv.take(can, |seg, split| {
            if seg.end {
                executed.push(seg.slot); // its reference now holds the response
            } else if !split {
                consumed.push(seg.slot);
            }
        });
        for slot in consumed.drain(..) {
            arena.get_mut(slot).refs -= 1;
            arena.release(slot);
        }
        self.scratch_consumed = consumed;
        for slot in executed.drain(..) {
            // The segment's reference now holds the response.
            c.responses.push_back((now + latency, slot));
            let r = self.arena.get_mut(slot);
            r.executed += 1;
            if r.executed > 1 {
                let msg = format!("at {now:?}: {:?} executed twice", r.id);
                self.violation.get_or_insert(msg);
            }
            if r.ended_unsent {
                let msg = format!("at {now:?}: {:?} executed after it ended unsent", r.id);
                self.violation.get_or_insert(msg);
            }
            if now > r.deadline {
                self.tally.stale_executed += 1;
            }
            if let Some(rec) = self.record.as_mut() {
                rec.delivered[n].push((r.id, now));
            }
        }
        self.scratch_executed = executed;
        let more = slow.is_some() && c.rcv.bytes > 0;
        let first = c.responses.front().map(|r| r.0);
        if was_idle {
            if let Some(at) = first {
                self.arm(n, Timer::Response, at);
            }
        }
        if more {
            self.arm(n, Timer::Read, now + SLOW_READ_EVERY);
        }
        can
    }

    fn on_event(&mut self, event: Event) {
        let now = self.now;
        match &event {
            Event::RequestDone {
                id,
                node,
                outcome,
                sent,
                ..
            } => {
                let ps = slot_of(*id);
                let slot = self.by_pool_slot.get(ps).copied().unwrap_or(u32::MAX);
                if slot == u32::MAX || self.arena.get(slot).id != *id {
                    self.fail(format!("{id:?} ended, but it is not a live request"));
                    return;
                }
                self.by_pool_slot[ps] = u32::MAX;
                let r = self.arena.get_mut(slot);
                if r.ended {
                    self.fail(format!("{id:?} ended twice"));
                    return;
                }
                r.ended = true;
                r.ended_unsent = *sent == Sent::Nothing;
                let consistent = match sent {
                    Sent::Nothing => r.written == 0,
                    Sent::Partly => r.written > 0 && r.written < r.len,
                    Sent::Fully => r.written == r.len,
                    _ => false,
                };
                if !consistent {
                    let msg = format!(
                        "at {now:?}: {id:?} ended saying {sent:?}, but the kernel took {} of \
                         its {} bytes",
                        r.written, r.len
                    );
                    self.violation.get_or_insert(msg);
                }
                let deadline = r.deadline;
                let overrun = now - deadline;
                self.tally.max_overrun = self.tally.max_overrun.max(overrun);
                let before = r.class;
                let class = match outcome {
                    Outcome::Response(_) if now <= deadline => Class::Ok,
                    Outcome::DeadlineExceeded { .. } => Class::TimedOut,
                    _ if now <= deadline => Class::Lost,
                    _ => Class::TimedOut,
                };
                if before.is_none() {
                    self.classify(slot, class);
                }
                if matches!(outcome, Outcome::Response(_)) {
                    if class != Class::Ok {
                        self.tally.late_responses += 1;
                    } else {
                        let n = node.index();
                        if self.last_ok[n] + GAP <= now {
                            self.tally.resumed.push((n, self.last_ok[n], now));
                        }
                        self.last_ok[n] = now;
                    }
                }
                self.arena.release(slot);
                if let Some(rec) = self.record.as_mut() {
                    if rec.outcomes.insert(*id, (now, outcome.clone())).is_some() {
                        self.violation.get_or_insert(format!("{id:?} ended twice"));
                    }
                }
            }
            Event::StateChanged {
                node,
                from,
                to,
                reason,
                ..
            } => {
                let n = node.index();
                if *to == NodeState::Ready {
                    if let Some(c) = self.conns[n].as_mut() {
                        c.ready_at = Some(now);
                    }
                    self.tally.ready.push((n, now));
                }
                if let Reason::Closed(r) = reason {
                    self.tally.closes.push((n, now, *from, *r));
                    self.last_close = now;
                }
            }
            Event::Evicted { conn, .. } => self.tally.evictions.push((conn.node().index(), now)),
            _ => {}
        }
        if let Some(rec) = self.record.as_mut() {
            rec.events.push((now, event));
        }
    }
}
