//! The simulated world's script and checks: scheduled wakes and acts, faults and their
//! undoing, timeline samples, and the invariants checked after every step.

use super::*;

impl World {
    pub(super) fn dispatch(&mut self, at: Instant, wake: Wake) {
        match wake {
            Wake::Conn(n, id, timer) => {
                let due = self.conns[n]
                    .as_mut()
                    .filter(|c| c.id == id && c.timers[timer as usize] == Some(at));
                let Some(c) = due else {
                    return;
                };
                c.timers[timer as usize] = None;
                match timer {
                    Timer::Syn => self.syn_timer(n),
                    Timer::Rto => self.rto(n),
                    Timer::Persist => self.persist(n),
                    Timer::Keepalive => self.keepalive(n),
                    Timer::Response => {}
                    Timer::Read => self.flow(n),
                }
            }
            Wake::Script(i) => {
                if let Some(act) = self.script[i].take() {
                    self.act(act);
                }
            }
            Wake::Sample => self.sample(),
            Wake::Poke => {}
        }
    }

    fn act(&mut self, act: Act) {
        let now = self.now;
        match act {
            Act::Fault(n, fault) => self.fault(n, fault),
            Act::Undo(n, fault) => self.undo(n, fault),
            Act::Pause(s) => self.streams[s].spec.active = false,
            Act::Resume(s) => self.streams[s].spec.active = true,
            Act::Disable(n) => {
                let _ = self.pool.disable_node(now, self.nodes[n]);
            }
            Act::Enable(n) => {
                let _ = self.pool.enable_node(now, self.nodes[n]);
            }
            Act::SetEpoch(n, e) => {
                let _ = self.pool.set_epoch(now, self.nodes[n], e);
            }
            Act::Evict(n) => {
                let _ = self.pool.evict(now, self.nodes[n]);
            }
            Act::Mark(m) => self.mark(m),
            Act::Call(mut f) => f(self),
        }
    }

    pub(super) fn fault(&mut self, n: usize, fault: Fault) {
        let now = self.now;
        let s = &mut self.servers[n];
        match fault {
            Fault::Hang { .. } => s.hung += 1,
            Fault::PathDrop { .. } => s.path_down += 1,
            Fault::SynBlackhole { .. } => s.syn_blackhole += 1,
            Fault::Slow {
                bytes_per_sec,
                latency,
                ..
            } => {
                s.slow = Some((bytes_per_sec, latency));
                s.slow_depth += 1;
            }
            Fault::Restart { how, .. } => {
                s.down = Some(how);
                s.down_depth += 1;
                s.epoch += 1;
                if let Some(rec) = self.record.as_mut() {
                    rec.delivered[n].clear();
                }
                let Some(c) = self.conns[n].as_mut() else {
                    return;
                };
                if !c.established {
                    return; // its SYN is answered (refused or not) by the new state
                }
                match how {
                    Restart::Silent => {
                        c.peer = Peer::Gone;
                        // The server's side vanished with what it held.
                        let segs: Vec<Seg> = c.rcv.segs.drain(..).collect();
                        c.rcv.bytes = 0;
                        let responses: Vec<u32> = c.responses.drain(..).map(|r| r.1).collect();
                        for slot in segs.iter().map(|s| s.slot).chain(responses) {
                            self.arena.get_mut(slot).refs -= 1;
                            self.arena.release(slot);
                        }
                    }
                    Restart::Fin => self.abort(n, Failure::PeerClosed),
                    Restart::Rst => self.abort(n, Failure::Reset),
                }
                let _ = now;
            }
        }
    }

    fn undo(&mut self, n: usize, fault: Fault) {
        let s = &mut self.servers[n];
        match fault {
            Fault::Hang { .. } => s.hung -= 1,
            Fault::PathDrop { .. } => s.path_down -= 1,
            Fault::SynBlackhole { .. } => s.syn_blackhole -= 1,
            Fault::Slow { .. } => {
                s.slow_depth -= 1;
                if s.slow_depth == 0 {
                    s.slow = None;
                }
            }
            Fault::Restart { .. } => {
                s.down_depth -= 1;
                if s.down_depth == 0 {
                    s.down = None;
                }
            }
        }
        // Whatever waited on the fault moves again.
        self.flow(n);
        if let Some(c) = self.conns[n].as_ref() {
            if let Some(&(at, _)) = c.responses.front() {
                let at = at.max(self.now);
                self.arm(n, Timer::Response, at);
            }
        }
    }

    fn sample(&mut self) {
        self.sweep();
        let now = self.now;
        self.push(now + self.sample_every, Wake::Sample);
        if self.timeline.is_none() {
            return;
        }
        let mut lanes = Vec::with_capacity(self.nodes.len());
        let mut pending = Vec::with_capacity(self.nodes.len());
        for (n, &node) in self.nodes.iter().enumerate() {
            let state = self.pool.node_state(node);
            let lane = if self.pool.is_quarantined(node) == Some(true) {
                Lane::Quarantined
            } else {
                match state {
                    Some(NodeState::Ready) if self.pool.is_writable(node) == Some(false) => {
                        Lane::Unwritable
                    }
                    Some(NodeState::Ready | NodeState::Closing) => Lane::Ready,
                    Some(NodeState::Connecting | NodeState::Handshaking) => Lane::Connecting,
                    _ => Lane::Down,
                }
            };
            lanes.push((lane, !self.servers[n].healthy()));
            pending.push(self.pool.pending_bytes(node).unwrap_or(0));
        }
        let total = self.pool.total_pending_bytes();
        if let Some(tl) = self.timeline.as_mut() {
            tl.sample(now, total, pending, lanes);
        }
    }

    // -------------------------------------------------------------------------------------
    // Invariants.

    pub(super) fn fail(&mut self, what: impl std::fmt::Display) {
        if self.violation.is_none() {
            self.violation = Some(format!("at {:?}: {what}", self.now));
        }
    }

    /// After every step of a checked run: pending bytes are bounded, and no write stalls past
    /// the write timeout plus one tick.
    pub(super) fn check(&mut self) {
        let Some(checks) = self.checks.clone() else {
            return;
        };
        let now = self.now;
        for n in 0..self.nodes.len() {
            let pending = self.pool.pending_bytes(self.nodes[n]).unwrap_or(0);
            if pending > checks.max_pending {
                self.fail(format!(
                    "node {n} holds {pending} pending bytes > {}",
                    checks.max_pending
                ));
            }
            if checks.write_timeout.is_zero() {
                continue;
            }
            let Some(c) = self.conns[n].as_ref() else {
                continue;
            };
            let (Some(ready_at), true) = (c.ready_at, c.blocked) else {
                continue;
            };
            let head = c.handed.iter().find(|&&(slot, whole)| {
                let r = self.arena.get(slot);
                let dropped_unsent = r.ended && r.written == 0;
                !whole && !dropped_unsent
            });
            if let Some(&(slot, _)) = head {
                let r = self.arena.get(slot);
                let armed = r.submitted.max(ready_at).max(r.requeued_by);
                let due = armed + checks.write_timeout + checks.tick;
                if now > due {
                    let id = r.id;
                    self.fail(format!(
                        "{id:?} on {:?} not accepted by the kernel since {:?}, and the \
                         connection is still open past write_timeout + tick",
                        c.id, armed
                    ));
                }
            }
        }
    }

    /// A connection's simulated state, for debugging a failed run.
    pub fn describe_conn(&self, n: usize) -> String {
        let Some(c) = self.conns[n].as_ref() else {
            return "no connection".into();
        };
        let handed: Vec<String> = c
            .handed
            .iter()
            .map(|&(slot, whole)| {
                let r = self.arena.get(slot);
                format!(
                    "{:?}(slot {slot}, whole {whole}, written {}/{}, submitted {:?}, ended {})",
                    r.id, r.written, r.len, r.submitted, r.ended
                )
            })
            .collect();
        format!(
            "{:?} established {} blocked {} partial {:?} snd {} rcv {} ready_at {:?} handed {:?}",
            c.id, c.established, c.blocked, c.partial, c.snd.bytes, c.rcv.bytes, c.ready_at, handed
        )
    }

    /// Every request submitted has ended (call once the world has run past every deadline).
    pub fn check_all_ended(&mut self) {
        let live = self.by_pool_slot.iter().filter(|&&s| s != u32::MAX).count();
        if live > 0 {
            self.fail(format!("{live} requests never ended"));
        }
    }
}
