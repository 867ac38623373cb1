//! The deadline index: a binary heap of `(instant, timer)` entries with lazy invalidation, so
//! scheduling, firing and finding the earliest deadline stay O(log n) however many nodes and
//! requests there are.
//!
//! A node's timers live in a [`TimerTable`] keyed by [`NodeTimer`] (as in quinn-proto). An
//! entry in the heap is *valid* only while the table (or the request) still holds the same
//! instant; rescheduling pushes a new entry and leaves the old one to be discarded when it
//! reaches the top. The pool prunes invalid entries off the top after every input, so
//! [`Pool::poll_timeout`](crate::Pool::poll_timeout) can be a pure peek.

use alloc::collections::BinaryHeap;
use core::cmp::Reverse;

use crate::ids::{NodeId, RequestId};
use crate::time::Instant;

/// Declares [`NodeTimer`] and sizes [`TimerTable`] from its variants, so adding a timer is one
/// line here and cannot leave the table too small.
macro_rules! node_timers {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The timers a node can have armed.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub(crate) enum NodeTimer {
            $($(#[doc = $doc])* $name,)*
        }

        impl NodeTimer {
            /// Every timer, in declaration order (`ALL[t as usize] == t`).
            pub(crate) const ALL: &'static [NodeTimer] = &[$(NodeTimer::$name,)*];
        }
    };
}

node_timers! {
    /// The connection setup deadline (connect plus handshake).
    Setup,
    /// The reconnect backoff ends and a connection is wanted.
    Reconnect,
    /// The oldest unaccepted frame misses its write deadline.
    WriteTimeout,
    /// The next probe of a quarantined node (or, after the last one, the readmission).
    Probe,
    /// A ready connection with no request expires.
    Idle,
    /// A partly received response has been arriving for longer than the frame timeout.
    Frame,
    /// A ready connection has been idle for longer than the heartbeat interval (a ping is
    /// due), or, while a ping is outstanding, its deadline.
    Heartbeat,
}

/// A node's armed timers, one slot per [`NodeTimer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerTable([Option<Instant>; NodeTimer::ALL.len()]);

impl Default for TimerTable {
    fn default() -> Self {
        Self([None; NodeTimer::ALL.len()])
    }
}

impl TimerTable {
    pub(crate) fn get(&self, timer: NodeTimer) -> Option<Instant> {
        self.0[timer as usize]
    }

    pub(crate) fn set(&mut self, timer: NodeTimer, at: Instant) {
        self.0[timer as usize] = Some(at);
    }

    pub(crate) fn stop(&mut self, timer: NodeTimer) {
        self.0[timer as usize] = None;
    }

    pub(crate) fn stop_all(&mut self) {
        *self = Self::default();
    }
}

/// What a heap entry wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A node timer.
    Node(NodeId, NodeTimer),
    /// A request's deadline.
    Request(RequestId),
}

/// The heap itself.
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<(Instant, TimerKey)>>,
}

impl TimerHeap {
    pub(crate) fn push(&mut self, at: Instant, key: TimerKey) {
        self.heap.push(Reverse((at, key)));
    }

    pub(crate) fn peek(&self) -> Option<(Instant, TimerKey)> {
        self.heap.peek().map(|Reverse(e)| *e)
    }

    pub(crate) fn pop(&mut self) -> Option<(Instant, TimerKey)> {
        self.heap.pop().map(|Reverse(e)| e)
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Drops every entry `valid` rejects (when stale entries pile up far from the top).
    pub(crate) fn retain(&mut self, mut valid: impl FnMut(Instant, TimerKey) -> bool) {
        self.heap.retain(|Reverse((at, key))| valid(*at, *key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_pops_earliest_first() {
        let node = NodeId {
            index: 0,
            generation: 0,
        };
        let mut h = TimerHeap::default();
        h.push(
            Instant::from_secs(3),
            TimerKey::Node(node, NodeTimer::Setup),
        );
        h.push(
            Instant::from_secs(1),
            TimerKey::Request(RequestId::new(0, 0)),
        );
        h.push(Instant::from_secs(2), TimerKey::Node(node, NodeTimer::Idle));
        assert_eq!(h.peek().unwrap().0, Instant::from_secs(1));
        let order: alloc::vec::Vec<_> = core::iter::from_fn(|| h.pop()).map(|e| e.0).collect();
        assert_eq!(order, [1, 2, 3].map(Instant::from_secs));
    }

    #[test]
    fn the_table_has_a_slot_for_every_timer() {
        let mut t = TimerTable::default();
        for (i, &timer) in NodeTimer::ALL.iter().enumerate() {
            assert_eq!(timer as usize, i);
            t.set(timer, Instant::from_secs(i as u64));
        }
        for (i, &timer) in NodeTimer::ALL.iter().enumerate() {
            assert_eq!(t.get(timer), Some(Instant::from_secs(i as u64)));
        }
    }

    #[test]
    fn table_arms_and_stops() {
        let mut t = TimerTable::default();
        t.set(NodeTimer::Probe, Instant::from_secs(5));
        assert_eq!(t.get(NodeTimer::Probe), Some(Instant::from_secs(5)));
        t.stop(NodeTimer::Probe);
        assert_eq!(t.get(NodeTimer::Probe), None);
    }
}
