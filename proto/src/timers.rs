//! The deadline index: a 4-ary heap of `(instant, timer)` entries with lazy invalidation, so
//! scheduling, firing and finding the earliest deadline stay O(log n) however many nodes and
//! requests there are.
//!
//! A node's timers live in a [`TimerTable`] keyed by [`NodeTimer`] (as in quinn-proto). An
//! entry in the heap is *valid* only while the table (or the request) still holds the same
//! instant; rescheduling pushes a new entry and leaves the old one to be discarded when it
//! reaches the top. The pool prunes invalid entries off the top after every input, so
//! [`Pool::poll_timeout`](crate::Pool::poll_timeout) can be a pure peek.

use alloc::vec::Vec;

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

/// The heap itself: a 4-ary min-heap of `(instant, key)` entries.
///
/// Four children per node halve the depth of a binary heap, so a push or a pop moves an
/// entry through half as many levels. Entries are totally ordered (the key breaks ties), so
/// they come out in exactly the order any correct heap gives them.
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    entries: Vec<(Instant, TimerKey)>,
}

/// Children per heap node.
const ARITY: usize = 4;

impl TimerHeap {
    pub(crate) fn push(&mut self, at: Instant, key: TimerKey) {
        self.entries.push((at, key));
        self.sift_up(self.entries.len() - 1);
    }

    pub(crate) fn peek(&self) -> Option<(Instant, TimerKey)> {
        self.entries.first().copied()
    }

    pub(crate) fn pop(&mut self) -> Option<(Instant, TimerKey)> {
        if self.entries.is_empty() {
            return None;
        }
        let top = self.entries.swap_remove(0);
        if !self.entries.is_empty() {
            self.sift_down(0);
        }
        Some(top)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drops every entry `valid` rejects (when stale entries pile up far from the top).
    pub(crate) fn retain(&mut self, mut valid: impl FnMut(Instant, TimerKey) -> bool) {
        self.entries.retain(|(at, key)| valid(*at, *key));
        for i in (0..self.entries.len() / ARITY + 1).rev() {
            if i < self.entries.len() {
                self.sift_down(i);
            }
        }
    }

    /// Moves the entry at `i` up to where its parent is earlier.
    fn sift_up(&mut self, mut i: usize) {
        let entry = self.entries[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.entries[parent] <= entry {
                break;
            }
            self.entries[i] = self.entries[parent];
            i = parent;
        }
        self.entries[i] = entry;
    }

    /// Moves the entry at `i` down to where its children are later.
    fn sift_down(&mut self, mut i: usize) {
        let entry = self.entries[i];
        let len = self.entries.len();
        loop {
            let first = ARITY * i + 1;
            if first >= len {
                break;
            }
            let mut earliest = first;
            for child in first + 1..(first + ARITY).min(len) {
                if self.entries[child] < self.entries[earliest] {
                    earliest = child;
                }
            }
            if entry <= self.entries[earliest] {
                break;
            }
            self.entries[i] = self.entries[earliest];
            i = earliest;
        }
        self.entries[i] = entry;
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
        let order: Vec<_> = core::iter::from_fn(|| h.pop()).map(|e| e.0).collect();
        assert_eq!(order, [1, 2, 3].map(Instant::from_secs));
    }

    #[test]
    fn the_heap_gives_what_a_sorted_list_gives_through_pushes_pops_and_retains() {
        let key = |i: u64| TimerKey::Request(RequestId::new(i as u32, 0));
        let mut heap = TimerHeap::default();
        let mut model: Vec<(Instant, TimerKey)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 7 {
                0..=3 => {
                    // Few distinct instants, so ties between keys are common.
                    let entry = (Instant::from_secs(x % 50), key(step % 300));
                    heap.push(entry.0, entry.1);
                    model.push(entry);
                }
                4 | 5 => {
                    model.sort();
                    let expected = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(heap.pop(), expected, "step {step}");
                }
                _ => {
                    let cut = Instant::from_secs(x % 50);
                    heap.retain(|at, _| at != cut);
                    model.retain(|(at, _)| *at != cut);
                }
            }
            model.sort();
            assert_eq!(heap.peek(), model.first().copied(), "step {step}");
            assert_eq!(heap.len(), model.len());
        }
    }

    #[test]
    fn a_retain_may_empty_the_heap_and_the_heap_keeps_working() {
        let key = |i: u32| TimerKey::Request(RequestId::new(i, 0));
        let mut heap = TimerHeap::default();
        heap.retain(|_, _| false);
        assert_eq!(heap.pop(), None);
        for i in 0..9 {
            heap.push(Instant::from_secs(u64::from(i % 3)), key(i));
        }
        heap.retain(|_, _| false);
        assert_eq!((heap.len(), heap.peek()), (0, None));
        heap.push(Instant::from_secs(5), key(1));
        heap.push(Instant::from_secs(4), key(2));
        assert_eq!(heap.pop(), Some((Instant::from_secs(4), key(2))));
    }

    #[test]
    fn deep_heaps_pop_in_order_through_growing_and_shrinking_phases() {
        // Many distinct instants and thousands of entries, so sifts run several levels deep
        // between siblings' and cousins' subtrees.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..4u32 {
            let mut heap = TimerHeap::default();
            let mut model: Vec<(Instant, TimerKey)> = Vec::new();
            for step in 0..6_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Grow for the first half, then mostly shrink.
                let push = if step < 3_000 { x % 4 != 0 } else { x % 4 == 0 };
                if push {
                    let entry = (
                        Instant::from_nanos(x % 1_000_000),
                        TimerKey::Request(RequestId::new(step, round)),
                    );
                    heap.push(entry.0, entry.1);
                    model.push(entry);
                } else {
                    model.sort();
                    let expected = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(heap.pop(), expected, "round {round} step {step}");
                }
            }
        }
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
