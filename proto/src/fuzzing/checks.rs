//! The pool's own consistency checks, run by the interpreter after every step (and by any
//! test that wants them).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;

use crate::{NodeId, Pool};

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
        let mut held: BTreeMap<NodeId, usize> = BTreeMap::new();
        for (id, r) in self.requests().iter() {
            let Ok(node) = self.node(r.node) else {
                return Err(format!("{id:?} belongs to a removed node"));
            };
            if r.heartbeat {
                // Not one of the node's requests; held by its connection until it ends.
                if node.outstanding_heartbeat() != Some(id) {
                    return Err(format!("heartbeat {id:?} outlived its connection"));
                }
                continue;
            }
            *held.entry(r.node).or_default() += 1;
        }
        let mut total = 0;
        let mut census = crate::node::Census::default();
        for n in self.live_nodes() {
            let count = held.get(&n.id()).copied().unwrap_or(0);
            n.check_invariants(self.config(), count)?;
            total += n.outbound.pending();
            census.add(n.census());
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
