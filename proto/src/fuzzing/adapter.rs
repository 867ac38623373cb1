//! The scripted adapter: it takes every hand-out, writes what the input says the socket
//! takes (reporting it exactly, or once in 16 first a byte too many), drains the pool's
//! outputs after every call into the model, and hands over most heartbeats' pings.

use alloc::vec::Vec;

use bytes::Bytes;

use super::{Session, frame, peer};
use crate::{Action, ConnId, Event, RequestId};

impl Session {
    /// Takes every hand-out the pool offers, through `poll_transmit` and `poll_hand_out` in
    /// turn; each is for a current connection that has no other hand-out outstanding, and
    /// `handed_out` reads its bytes in place. Hand-outs of connections that closed are
    /// forgotten.
    pub(super) fn stale_conns_transmit_nothing(&mut self) {
        let pool = &self.pool;
        self.handed
            .retain(|conn, _| pool.current_conn(conn.node()) == Some(*conn));
        let mut out = Vec::new();
        while let Some(conn) = self.next_hand_out(&mut out) {
            assert_eq!(
                self.pool.current_conn(conn.node()),
                Some(conn),
                "bytes handed out for stale {conn:?}"
            );
            assert!(!out.is_empty(), "an empty hand-out for {conn:?}");
            let first = out[0].len();
            let total: usize = out.iter().map(Bytes::len).sum();
            assert!(
                out.len() == 1 || total <= self.batch.max(first),
                "{conn:?}: {total} bytes handed out over a budget of {}",
                self.batch
            );
            // The first may be the rest of a frame its peer holds the start of.
            let held = self.streams.get(&conn).map_or(&[][..], |s| &s.buf[..]);
            let mut ids = alloc::vec![peer::frame_id(held, &out[0])];
            ids.extend(out[1..].iter().map(|b| peer::frame_id(&[], b)));
            let previous = self.handed.insert(conn, (core::mem::take(&mut out), ids));
            assert!(previous.is_none(), "{conn:?} handed out twice unreported");
        }
    }

    /// The next hand-out, its frames in `out`: through `poll_hand_out` (its bytes copied from
    /// where the pool keeps them) every other time, else through `poll_transmit`, whose
    /// `Bytes` must be what `handed_out` reads in place. (A copy of what `handed_out` read
    /// says nothing yet; it is checked against the pool again before its report.)
    fn next_hand_out(&mut self, out: &mut Vec<Bytes>) -> Option<ConnId> {
        self.hand_outs += 1;
        if self.hand_outs % 2 == 0 {
            let conn = self.pool.poll_hand_out(self.batch)?;
            let frames = self.pool.handed_out(conn).expect("the hand-out just made");
            out.clear();
            out.extend(frames.map(Bytes::copy_from_slice));
            Some(conn)
        } else {
            let conn = self.pool.poll_transmit(self.batch, out)?;
            self.assert_reads_in_place(conn, out);
            Some(conn)
        }
    }

    /// What `handed_out` reads for `conn` is `bytes`, the hand-out the adapter holds.
    fn assert_reads_in_place(&self, conn: ConnId, bytes: &[Bytes]) {
        let frames = self.pool.handed_out(conn).expect("an outstanding hand-out");
        assert_eq!(
            frames.bytes(),
            bytes.iter().map(Bytes::len).sum::<usize>(),
            "{conn:?}: the length of the hand-out read in place"
        );
        assert!(
            frames.eq(bytes.iter().map(|b| &b[..])),
            "{conn:?}: the hand-out read in place is not the one handed out"
        );
    }

    /// The node's socket takes up to `accept` bytes: the adapter writes what it holds for
    /// that connection, then what the pool hands out next, until the socket is full. One
    /// report in 16 first claims a byte more than was handed out: refused, changing nothing.
    pub(super) fn write(&mut self, i: u8, accept: usize) {
        let Some(conn) = self.conn(i) else { return };
        let now = self.now;
        let established = self.state_of(conn.node()).is_established();
        let writable = self.pool.handle_writable(now, conn);
        assert_eq!(writable.is_ok(), established, "{conn:?} writable");
        let mut budget = accept;
        loop {
            self.stale_conns_transmit_nothing();
            let Some((bufs, ids)) = self.handed.remove(&conn) else {
                break;
            };
            // Whatever happened since the hand-out, the pool still offers the same bytes.
            self.assert_reads_in_place(conn, &bufs);
            let total: usize = bufs.iter().map(Bytes::len).sum();
            if accept % 16 == 15 {
                let pending = self.pool.pending_bytes(conn.node());
                let over = self.pool.handle_written(now, conn, total + 1);
                assert_eq!(over, Err(crate::HandleError::Overwritten), "{conn:?}");
                assert_eq!(self.pool.pending_bytes(conn.node()), pending);
                assert_eq!(
                    self.pool.poll_event(),
                    None,
                    "a refused report changed nothing"
                );
            }
            let n = total.min(budget);
            let stream = self.streams.entry(conn).or_default();
            let mut left = n;
            let mut unwritten = Vec::new();
            for (buf, &id) in bufs.iter().zip(&ids) {
                let take = buf.len().min(left);
                stream.buf.extend_from_slice(&buf[..take]);
                left -= take;
                if take > 0 {
                    assert!(
                        !self.never_sent.contains(&id),
                        "{id:?} ended unsent, then sent"
                    );
                    self.touched.insert(id);
                } else {
                    unwritten.push(id);
                }
            }
            self.pool
                .handle_written(now, conn, n)
                .expect("reporting what was handed out");
            assert!(
                self.pool.handed_out(conn).is_none(),
                "{conn:?}: a hand-out left after its report"
            );
            self.parse(conn);
            self.write_reported(conn, &unwritten);
            self.drain();
            budget -= n;
            if n < total || budget == 0 {
                break;
            }
        }
    }

    /// Drains actions and events into the model, one input's worth at a time. Three
    /// heartbeats in four get their ping.
    pub(super) fn drain(&mut self) {
        loop {
            let mut asked = Vec::new();
            let mut any = false;
            while let Some(action) = self.pool.poll_action() {
                any = true;
                if self.trace {
                    std::eprintln!("    {action:?}");
                }
                match action {
                    Action::Open { conn, deadline, .. } => {
                        assert!(
                            !self.conns.contains(&conn),
                            "connection handles are never reused"
                        );
                        self.conns.push(conn);
                        self.opens.push((conn, deadline));
                    }
                    Action::Heartbeat { conn, id } => {
                        self.ping_asked(conn, id);
                        asked.push((conn, id));
                    }
                    _ => {}
                }
            }
            self.retry_batch =
                self.pool.counters().transparent_retries != self.counts.transparent_retries;
            while let Some(event) = self.pool.poll_event() {
                any = true;
                if self.trace {
                    std::eprintln!("    {event:?}");
                }
                if let Event::Evicted { conn, .. } = event {
                    let partial = self.streams.get(&conn).is_some_and(|s| !s.buf.is_empty());
                    self.evicted_half_written += u64::from(partial);
                }
                self.on_event(event);
            }
            self.outputs_drained();
            if !any || asked.is_empty() {
                break;
            }
            // Their frames' outputs are the next input's.
            for (conn, id) in asked {
                self.ping(conn, id);
            }
        }
        assert!(
            self.opens.is_empty(),
            "an Action::Open with no state change"
        );
    }

    /// The adapter hands over the ping of `id` (for three heartbeats in four: slot and
    /// generation mixed, so a reused slot gives a fresh decision).
    pub(super) fn ping(&mut self, conn: ConnId, id: RequestId) {
        let raw = id.as_u64();
        if (raw ^ (raw >> 32)) % 4 == 0 {
            return;
        }
        // The same input may have closed its connection since (another timer).
        let current = self.pool.current_conn(conn.node()) == Some(conn);
        let frame = frame(id, 0);
        let cost = frame.len() as u64 + self.config.per_frame_overhead;
        let result = self.pool.submit_heartbeat(self.now, id, frame);
        if current {
            assert_eq!(result, Ok(()), "the ping of {id:?} on {conn:?}");
            self.frame_queued(id, conn.node(), cost);
        } else {
            assert_eq!(result, Err(crate::HandleError::UnknownRequest));
        }
    }
}
