//! The simulated world's kernels: each connection's TCP timers (SYN, retransmission,
//! persist, keepalive), what its link delivers, and its end.

use super::*;

impl World {
    pub(super) fn arm(&mut self, n: usize, timer: Timer, at: Instant) {
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        c.timers[timer as usize] = Some(at);
        if timer == Timer::Response {
            self.responses_due[n] = at;
        } else {
            let id = c.id;
            self.push(at, Wake::Conn(n, id, timer));
        }
    }

    /// A SYN goes out (`first`), or its timer fired.
    pub(super) fn syn(&mut self, n: usize, first: bool) {
        let now = self.now;
        let answer = self.servers[n].answer();
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        if !first {
            let elapsed = now - c.syn_sent;
            let limit = c
                .opts
                .user_timeout
                .unwrap_or_else(|| self.kernel.syn_give_up());
            if c.syn_retries > 0 && elapsed >= limit {
                let id = c.id;
                self.drop_conn(n);
                let _ = self.pool.handle_connect_failed(now, id, Failure::TimedOut);
                return;
            }
            c.syn_retries += 1;
        }
        match answer {
            Answer::Accept | Answer::Refuse => {
                // Answered one round trip later; the Syn timer delivers the answer.
                c.syn_retries = u32::MAX;
                let at = now + self.kernel.rtt;
                self.arm(n, Timer::Syn, at);
            }
            Answer::Nothing => {
                let at = c.next_syn(&self.kernel);
                self.arm(n, Timer::Syn, at);
            }
        }
    }

    pub(super) fn syn_timer(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        if c.syn_retries != u32::MAX {
            self.syn(n, false);
            return;
        }
        let id = c.id;
        match self.servers[n].answer() {
            Answer::Accept => {
                c.established = true;
                heard(c, now);
                if let Some(ka) = c.opts.keepalive {
                    self.arm(n, Timer::Keepalive, now + ka.idle);
                }
                if let Err(e) = self.pool.handle_connected(now, id) {
                    self.fail(format!("handle_connected({id:?}): {e}"));
                }
            }
            Answer::Refuse => {
                self.drop_conn(n);
                let _ = self.pool.handle_connect_failed(now, id, Failure::Refused);
            }
            Answer::Nothing => {
                // The SYN-ACK was lost on the way back: retransmit as if unanswered.
                c.syn_retries = 0;
                self.syn(n, false);
            }
        }
    }

    pub(super) fn rto(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        let Some(stamp) = c.retrans_stamp.filter(|_| c.snd.bytes > 0) else {
            c.retrans_stamp = None;
            return;
        };
        if self.servers[n].reachable() && c.peer == Peer::Alive {
            self.flow(n); // the retransmission gets through
            return;
        }
        if c.retransmits > 0 {
            let limit = c
                .opts
                .user_timeout
                .unwrap_or_else(|| self.kernel.retransmission_give_up());
            if now - stamp >= limit {
                self.abort(n, Failure::TimedOut);
                return;
            }
        }
        c.retransmits += 1;
        let at = c.next_rto(&self.kernel, now);
        self.arm(n, Timer::Rto, at);
    }

    pub(super) fn persist(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        if c.snd.bytes == 0 || c.zero_window.is_none() {
            c.zero_window = None;
            return;
        }
        if self.servers[n].reachable() && c.peer == Peer::Alive {
            if c.rcv.bytes < self.kernel.recv_buffer {
                self.flow(n); // the window opened
                return;
            }
            heard(c, now);
            c.probes_out = 0;
        } else {
            c.probes_out += 1;
        }
        let stamp = *c.probes_stamp.get_or_insert(now);
        let give_up = match c.opts.user_timeout {
            Some(ut) => now - stamp >= ut,
            None => c.probes_out >= self.kernel.tcp_retries2,
        };
        if give_up {
            self.abort(n, Failure::TimedOut);
            return;
        }
        c.persist_backoff += 1;
        let at = c.next_probe(&self.kernel, now);
        self.arm(n, Timer::Persist, at);
    }

    pub(super) fn keepalive(&mut self, n: usize) {
        let now = self.now;
        let Some(c) = self.conns[n].as_mut() else {
            return;
        };
        let Some(ka) = c.opts.keepalive else {
            return;
        };
        if c.snd.bytes > 0 {
            // Keepalive never probes while data is outstanding.
            self.arm(n, Timer::Keepalive, now + ka.idle);
            return;
        }
        let elapsed = now - c.last_heard;
        if elapsed < ka.idle {
            let at = c.last_heard + ka.idle;
            self.arm(n, Timer::Keepalive, at);
            return;
        }
        let give_up = match c.opts.user_timeout {
            Some(ut) => elapsed >= ut && c.keepalive_probes > 0,
            None => c.keepalive_probes >= ka.retries,
        };
        if give_up {
            self.abort(n, Failure::TimedOut);
            return;
        }
        if self.servers[n].reachable() && c.peer == Peer::Alive {
            heard(c, now);
            self.arm(n, Timer::Keepalive, now + ka.idle);
        } else {
            c.keepalive_probes += 1;
            self.arm(n, Timer::Keepalive, now + ka.interval);
        }
    }

    pub(super) fn respond(&mut self, n: usize) {
        let now = self.now;
        if !self.servers[n].reachable() {
            return; // held until the path is back
        }
        loop {
            let Some(c) = self.conns[n].as_mut() else {
                return;
            };
            if c.peer != Peer::Alive {
                return;
            }
            match c.responses.front() {
                Some(&(at, slot)) if at <= now => {
                    c.responses.pop_front();
                    heard(c, now);
                    let conn = c.id;
                    let r = self.arena.get_mut(slot);
                    r.refs -= 1;
                    let id = r.id;
                    self.arena.release(slot);
                    let ok = Bytes::from_static(b"ok");
                    if let Err(e) = self.pool.handle_response(now, conn, id, ok) {
                        self.fail(format!("handle_response({conn:?}, {id:?}): {e}"));
                    }
                }
                Some(&(at, _)) => {
                    self.arm(n, Timer::Response, at);
                    return;
                }
                None => return,
            }
        }
    }

    /// The kernel gives up on a connection: it is gone, and the adapter reports why.
    pub(super) fn abort(&mut self, n: usize, failure: Failure) {
        let Some(c) = self.conns[n].as_ref() else {
            return;
        };
        let id = c.id;
        self.drop_conn(n);
        if let Err(e) = self.pool.handle_closed(self.now, id, failure) {
            self.fail(format!("handle_closed({id:?}): {e}"));
        }
    }

    /// Forgets a connection at both ends (an abortive close: the server discards what it
    /// had not read).
    pub(super) fn drop_conn(&mut self, n: usize) {
        let Some(mut c) = self.conns[n].take() else {
            return;
        };
        self.last_close = self.now;
        self.responses_due[n] = Instant::MAX;
        for seg in c.snd.segs.drain(..).chain(c.rcv.segs.drain(..)) {
            self.arena.get_mut(seg.slot).refs -= 1;
            self.arena.release(seg.slot);
        }
        for (_, slot) in c.responses.drain(..) {
            self.arena.get_mut(slot).refs -= 1;
            self.arena.release(slot);
        }
        if let Some((slot, _)) = c.partial {
            self.arena.get_mut(slot).abandoned = true;
            self.arena.release(slot);
        }
    }
}
