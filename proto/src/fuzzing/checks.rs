//! The pool's own consistency checks, run by the interpreter after every step (and by any
//! test that wants them).
//!
//! They run after every step of every fuzzed session, under the fuzzer's instrumentation
//! (every comparison and memory access is a call), so the passing path does as little as it
//! can: no allocation, no map, and every message formatted only once a check has failed.

use alloc::format;
use alloc::string::String;

use crate::Pool;

/// Node slots counted on the stack; a pool with more (never the fuzzer's: at most four live
/// nodes, whose slots are reused) counts in a vector.
const SLOTS_ON_STACK: usize = 8;

impl Pool {
    /// Checks that the selection index picks what a linear scan of the rule picks, from every
    /// offset, at the pool's current time.
    pub fn check_selection(&mut self) -> Result<(), String> {
        let now = self.latest();
        for offset in 0..self.node_slots() {
            let (indexed, scanned) = (self.pick_from(now, offset), self.scan_from(now, offset));
            if indexed != scanned {
                return Err(format!(
                    "from offset {offset}: the index picks {indexed:?}, the scan {scanned:?}"
                ));
            }
        }
        Ok(())
    }

    /// Checks the pool's own accounting; `Err` names the first inconsistency.
    pub fn check_invariants(&self) -> Result<(), String> {
        let slots = self.node_slots();
        if slots <= SLOTS_ON_STACK {
            let mut counts = [[0; 2]; SLOTS_ON_STACK];
            self.check_accounting(&mut counts[..slots])
        } else {
            self.check_accounting(&mut alloc::vec![[0; 2]; slots])
        }
    }

    /// [`Pool::check_invariants`], counting each node's requests in `counts` (one per slot):
    /// those it holds, and those written whole and awaiting a response.
    fn check_accounting(&self, counts: &mut [[usize; 2]]) -> Result<(), String> {
        // The timer heap holds exactly the armed node timers and the deadlines of the requests
        // that have not ended: every entry is one of them, and there are as many as them.
        let mut scheduled = 0;
        for (id, r) in self.requests().iter() {
            scheduled += usize::from(r.awaited());
            let Ok(node) = self.node(r.node) else {
                return Err(format!("{id:?} belongs to a removed node"));
            };
            let [held, sent] = &mut counts[r.node.index()];
            *sent += usize::from(matches!(r.stage, crate::requests::Stage::Sent { .. }));
            if r.heartbeat {
                // Not one of the node's requests; held by its connection until it ends.
                if node.outstanding_heartbeat() != Some(id) {
                    return Err(format!("heartbeat {id:?} outlived its connection"));
                }
                continue;
            }
            *held += 1;
        }
        let mut total = 0;
        let mut census = crate::node::Census::default();
        for (at, key) in self.timer_heap().iter() {
            if !self.timer_valid(at, key) {
                return Err(format!("stale timer entry {key:?} at {at:?}"));
            }
        }
        for n in self.live_nodes() {
            scheduled += n.armed_timers();
            let [held, sent] = counts[n.id().index()];
            n.check_invariants(self.config(), held)?;
            // The awaited list holds exactly the node's requests written whole, every one
            // on its current connection.
            let generation = n.conn_id().map(|c| c.generation);
            let listed = self
                .requests()
                .check_awaited(n.awaiting(), n.id(), generation)?;
            if listed != sent {
                return Err(format!("{:?}: {listed} awaited of {sent} sent", n.id()));
            }
            total += n.outbound.pending();
            census.add(n.census());
        }
        if scheduled != self.timer_heap().len() {
            return Err(format!(
                "{} timer entries for {scheduled} armed timers and live deadlines",
                self.timer_heap().len()
            ));
        }
        if census != self.census() {
            return Err(format!("census {:?} != counted {census:?}", self.census()));
        }
        let panic = census.panics(self.config().panic_threshold) && !self.is_shut_down();
        if self.in_panic() != panic {
            return Err(format!("panic mode {} with {census:?}", self.in_panic()));
        }
        if total != self.total_pending_bytes() {
            return Err(format!(
                "total pending {} != sum over nodes {total}",
                self.total_pending_bytes()
            ));
        }
        Ok(())
    }
}
