//! The deadline index: a 4-ary heap of `(instant, timer)` entries indexed by key, so
//! scheduling, cancelling, firing and finding the earliest deadline stay O(log n) however many
//! nodes and requests there are.
//!
//! A node's timers live in a [`TimerTable`] keyed by [`NodeTimer`] (as in quinn-proto). An
//! entry in the heap is *valid* only while the table (or the request) still holds the same
//! instant. Re-arming a timer moves its entry; stopping a timer or ending a request cancels
//! its entry at once, so the heap holds exactly the armed timers and the live deadlines (the
//! pool's consistency check says so) and [`Pool::poll_timeout`](crate::Pool::poll_timeout)
//! is a pure, exact peek.

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

    /// How many timers are armed.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn armed(&self) -> usize {
        self.0.iter().filter(|t| t.is_some()).count()
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

/// The heap itself: a 4-ary min-heap of `(instant, key)` entries, indexed by key.
///
/// Four children per node halve the depth of a binary heap, so a sift moves an entry through
/// half as many levels. Entries are totally ordered (the key breaks ties), so they come out in
/// exactly the order any correct heap gives them.
///
/// The heap knows where each key's entry is (one position per node timer slot and per request
/// slot), so it holds at most one entry per slot: [`schedule`](Self::schedule) moves an
/// existing entry (a re-armed timer, or a slot reused by a newer generation) instead of adding
/// another, and [`cancel`](Self::cancel) takes a stopped timer or an ended request out at
/// once. Its size is the number of armed timers and live deadlines, whatever the traffic.
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    entries: Vec<(Instant, TimerKey)>,
    /// Position of each node timer's entry, at `node slot × timers + timer`; [`ABSENT`] if none.
    node_at: Vec<u32>,
    /// Position of each request slot's entry; [`ABSENT`] if none.
    request_at: Vec<u32>,
}

/// Children per heap node.
const ARITY: usize = 4;

/// No entry for this slot.
const ABSENT: u32 = u32::MAX;

/// Where in `node_at` the position of `node`'s `timer` is.
fn node_cell(node: NodeId, timer: NodeTimer) -> usize {
    node.index as usize * NodeTimer::ALL.len() + timer as usize
}

impl TimerHeap {
    /// Schedules `key` at `at`, replacing the entry its slot holds (of this key or of an older
    /// generation of the slot).
    pub(crate) fn schedule(&mut self, at: Instant, key: TimerKey) {
        let entry = (at, key);
        match self.position(key) {
            Some(i) => {
                let old = self.entries[i];
                self.entries[i] = entry;
                if entry < old {
                    self.sift_up(i);
                } else {
                    self.sift_down(i);
                }
            }
            None => {
                self.make_room(key);
                self.entries.push(entry);
                self.sift_up(self.entries.len() - 1);
            }
        }
    }

    /// Takes `key`'s entry out, if the heap holds one for exactly this key.
    pub(crate) fn cancel(&mut self, key: TimerKey) {
        if let Some(i) = self.position(key).filter(|&i| self.entries[i].1 == key) {
            self.remove_at(i);
        }
    }

    pub(crate) fn peek(&self) -> Option<(Instant, TimerKey)> {
        self.entries.first().copied()
    }

    pub(crate) fn pop(&mut self) -> Option<(Instant, TimerKey)> {
        if self.entries.is_empty() {
            return None;
        }
        Some(self.remove_at(0))
    }

    /// Entries in the heap (for the pool's consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry, in heap order (for the pool's consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Instant, TimerKey)> + '_ {
        self.entries.iter().copied()
    }

    /// Where the entry of `key`'s slot is (of any generation).
    fn position(&self, key: TimerKey) -> Option<usize> {
        let at = match key {
            TimerKey::Node(node, timer) => self.node_at.get(node_cell(node, timer)),
            TimerKey::Request(id) => self.request_at.get(id.slot()),
        };
        at.copied().filter(|&i| i != ABSENT).map(|i| i as usize)
    }

    /// Grows the position tables until `key`'s slot has a cell.
    fn make_room(&mut self, key: TimerKey) {
        let (table, i) = match key {
            TimerKey::Node(node, timer) => (&mut self.node_at, node_cell(node, timer)),
            TimerKey::Request(id) => (&mut self.request_at, id.slot()),
        };
        if i >= table.len() {
            table.resize(i + 1, ABSENT);
        }
    }

    /// The position cell of an entry in the heap (its slot has one).
    fn cell(&mut self, key: TimerKey) -> &mut u32 {
        match key {
            TimerKey::Node(node, timer) => &mut self.node_at[node_cell(node, timer)],
            TimerKey::Request(id) => &mut self.request_at[id.slot()],
        }
    }

    /// Takes out the entry at `i`, filling its place with the last entry (whose sift records
    /// where it lands).
    fn remove_at(&mut self, i: usize) -> (Instant, TimerKey) {
        let removed = self.entries.swap_remove(i);
        *self.cell(removed.1) = ABSENT;
        if i < self.entries.len() {
            let moved = self.entries[i];
            if moved < removed {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
        removed
    }

    /// Puts `entry` (already in the heap) at `i` and records its position.
    fn put(&mut self, i: usize, entry: (Instant, TimerKey)) {
        self.entries[i] = entry;
        *self.cell(entry.1) = i as u32;
    }

    /// Moves the entry at `i` up to where its parent is earlier, recording every position it
    /// changes (its own included).
    fn sift_up(&mut self, mut i: usize) {
        let entry = self.entries[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.entries[parent] <= entry {
                break;
            }
            self.put(i, self.entries[parent]);
            i = parent;
        }
        self.put(i, entry);
    }

    /// Moves the entry at `i` down to where its children are later, recording every position
    /// it changes (its own included).
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
            self.put(i, self.entries[earliest]);
            i = earliest;
        }
        self.put(i, entry);
    }

    /// Whether every recorded position points at its entry and every entry's is recorded.
    #[cfg(test)]
    fn positions_agree(&self) -> bool {
        let recorded = self.node_at.iter().chain(&self.request_at);
        recorded.filter(|&&i| i != ABSENT).count() == self.entries.len()
            && (0..self.entries.len()).all(|i| self.position(self.entries[i].1) == Some(i))
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
        h.schedule(
            Instant::from_secs(3),
            TimerKey::Node(node, NodeTimer::Setup),
        );
        h.schedule(
            Instant::from_secs(1),
            TimerKey::Request(RequestId::new(0, 0)),
        );
        h.schedule(Instant::from_secs(2), TimerKey::Node(node, NodeTimer::Idle));
        assert_eq!(h.peek().unwrap().0, Instant::from_secs(1));
        let order: Vec<_> = core::iter::from_fn(|| h.pop()).map(|e| e.0).collect();
        assert_eq!(order, [1, 2, 3].map(Instant::from_secs));
    }

    /// The slot a key's entry occupies: one entry per node timer and per request slot.
    fn slot(key: TimerKey) -> (u8, u32, u8) {
        match key {
            TimerKey::Node(node, timer) => (0, node.index, timer as u8),
            TimerKey::Request(id) => (1, id.slot() as u32, 0),
        }
    }

    /// A random key over a few node and request slots, of two generations each, so
    /// rescheduling, slot reuse and exact-key cancels are all common.
    fn some_key(x: u64) -> TimerKey {
        let generation = (x >> 8) as u32 % 2;
        if x % 3 == 0 {
            let node = NodeId {
                index: (x >> 16) as u32 % 5,
                generation,
            };
            TimerKey::Node(
                node,
                NodeTimer::ALL[(x >> 24) as usize % NodeTimer::ALL.len()],
            )
        } else {
            TimerKey::Request(RequestId::new((x >> 16) as u32 % 40, generation))
        }
    }

    #[test]
    fn the_heap_gives_what_a_sorted_list_of_one_entry_per_slot_gives() {
        let mut heap = TimerHeap::default();
        let mut model: Vec<(Instant, TimerKey)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 10 {
                0..=4 => {
                    // Few distinct instants, so ties between keys are common.
                    let entry = (Instant::from_secs((x >> 32) % 50), some_key(x));
                    heap.schedule(entry.0, entry.1);
                    model.retain(|e| slot(e.1) != slot(entry.1));
                    model.push(entry);
                }
                5 | 6 => {
                    let key = some_key(x);
                    heap.cancel(key);
                    model.retain(|e| e.1 != key);
                }
                7 | 8 => {
                    model.sort();
                    let expected = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(heap.pop(), expected, "step {step}");
                }
                _ => {
                    // Cancel what is there, so exact-key cancels hit as often as they miss.
                    if let Some(&(_, key)) = model.get((x >> 32) as usize % model.len().max(1)) {
                        heap.cancel(key);
                        model.retain(|e| e.1 != key);
                    }
                }
            }
            model.sort();
            assert_eq!(heap.peek(), model.first().copied(), "step {step}");
            assert_eq!(heap.len(), model.len(), "step {step}");
            assert!(heap.positions_agree(), "step {step}");
        }
    }

    #[test]
    fn a_cancel_of_another_generation_leaves_the_slot_alone() {
        let mut heap = TimerHeap::default();
        let (old, new) = (RequestId::new(3, 0), RequestId::new(3, 1));
        heap.schedule(Instant::from_secs(2), TimerKey::Request(old));
        heap.schedule(Instant::from_secs(5), TimerKey::Request(new));
        assert_eq!(heap.len(), 1, "the newer generation took the slot's entry");
        heap.cancel(TimerKey::Request(old));
        assert_eq!(
            heap.pop(),
            Some((Instant::from_secs(5), TimerKey::Request(new)))
        );
        heap.cancel(TimerKey::Request(new));
        assert_eq!(heap.peek(), None);
    }

    #[test]
    fn an_emptied_heap_keeps_working() {
        let key = |i: u32| TimerKey::Request(RequestId::new(i, 0));
        let mut heap = TimerHeap::default();
        assert_eq!(heap.pop(), None);
        for i in 0..9 {
            heap.schedule(Instant::from_secs(u64::from(i % 3)), key(i));
        }
        for i in 0..9 {
            heap.cancel(key(i));
        }
        assert_eq!((heap.len(), heap.peek()), (0, None));
        heap.schedule(Instant::from_secs(5), key(1));
        heap.schedule(Instant::from_secs(4), key(2));
        assert!(heap.positions_agree());
        assert_eq!(heap.pop(), Some((Instant::from_secs(4), key(2))));
    }

    #[test]
    fn deep_heaps_pop_in_order_through_growing_and_shrinking_phases() {
        // Many distinct instants and thousands of entries, so sifts run several levels deep
        // between siblings' and cousins' subtrees; cancels take entries from the middle.
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
                    heap.schedule(entry.0, entry.1);
                    model.push(entry);
                } else if x % 3 == 0 && !model.is_empty() {
                    let (_, key) = model.swap_remove((x >> 8) as usize % model.len());
                    heap.cancel(key);
                } else {
                    model.sort();
                    let expected = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(heap.pop(), expected, "round {round} step {step}");
                }
            }
            assert!(heap.positions_agree());
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
