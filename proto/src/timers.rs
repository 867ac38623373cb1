//! The deadline index: 4-ary heaps of `(instant, timer)` entries indexed by key (one for the
//! nodes' timers, one for request deadlines), so scheduling, cancelling, firing and finding the
//! earliest deadline stay O(log n) however many nodes and requests there are, beside a FIFO
//! lane that takes request deadlines arriving in order (one timeout for every request) in O(1).
//! Due entries come out by instant; at one instant node timers first (see [`TimerHeap`] for the
//! whole order).
//!
//! A node's timers live in a [`TimerTable`] keyed by [`NodeTimer`] (as in quinn-proto). An
//! entry in the index is *valid* only while the table (or the request) still holds the same
//! instant. Re-arming a timer moves its entry; stopping a timer or ending a request cancels
//! its entry at once, so the index holds exactly the armed timers and the live deadlines (the
//! pool's consistency check says so) and [`Pool::poll_timeout`](crate::Pool::poll_timeout)
//! is a pure, exact peek.

use alloc::collections::VecDeque;
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

/// The index itself: two 4-ary min-heaps of `(instant, key)` entries indexed by key, one for
/// the nodes' timers and one for request deadlines, beside a FIFO *lane* for request
/// deadlines that arrive in order.
///
/// Four children per node halve the depth of a binary heap, so a sift moves an entry through
/// half as many levels. Each heap's entries are totally ordered (the key breaks ties), so they
/// come out in exactly the order any correct heap gives them. The node timers have a heap of
/// their own so that re-arming one (the write timer, on every request) sifts through the few
/// armed timers, not through every pending request's deadline.
///
/// The index knows where each key's entry is (one position per node timer slot and per request
/// slot), so it holds at most one entry per slot: [`schedule_node`](Self::schedule_node) and
/// [`schedule_request`](Self::schedule_request) move an existing entry (a re-armed timer, or a
/// slot reused by a newer generation) instead of adding another, and [`cancel`](Self::cancel)
/// takes a stopped timer or an ended request out at once. Its size is the number of armed
/// timers and live deadlines, whatever the traffic.
///
/// **The lane.** A client that gives its requests one timeout submits deadlines in rising
/// order and mostly ends them oldest first. A request deadline no earlier than the lane's last
/// entry goes to the back of the lane instead of the request heap, and the oldest comes off
/// its front in O(1) where the heap would sift a replacement down from the top. The lane is
/// sorted by instant (submit order among equal ones), its front is always live (ended entries
/// ahead of a live one are popped at once; one ended in the middle waits, dead, until it
/// reaches an end or the lane is compacted), and the earliest entry of the whole index is the
/// earliest of the node heap's top, the request heap's top and the lane's front, in that order
/// of preference on a tie.
///
/// **Order.** Entries come out by instant. At one instant the node timers come first, in key
/// order; then the request heap's deadlines, in key order; then the lane's, in the order they
/// were scheduled. (Node timers sort before request deadlines in [`TimerKey`]'s order too, so
/// this is the order one heap of both gave.) Every choice depends only on the calls made, so a
/// replay gives the same order.
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    /// The nodes' armed timers; positions at `node slot × timers + timer`.
    nodes: KeyedHeap<(NodeId, NodeTimer)>,
    /// Request deadlines that did not fit the lane. Its position table is per request slot
    /// and also records the lane's entries: a heap position, [`IN_LANE`] with the entry's lane
    /// sequence number, or [`ABSENT`].
    requests: KeyedHeap<RequestId>,
    /// Request deadlines by instant (submit order among equal ones), some of them dead (see
    /// [`Self::lane_live_at`]).
    lane: VecDeque<(Instant, RequestId)>,
    /// The sequence number of `lane[0]`; entry `k` has `lane_head + k`.
    lane_head: u64,
    /// Live entries in the lane.
    lane_live: usize,
}

/// Children per heap node.
const ARITY: usize = 4;

/// No entry for this slot.
const ABSENT: u64 = u64::MAX;

/// Marks a request slot's cell as holding a lane sequence number, not a heap position.
const IN_LANE: u64 = 1 << 63;

/// Dead entries the lane may hold beyond as many as its live ones before it is compacted.
const LANE_SLACK: usize = 64;

/// A key of a [`KeyedHeap`]: it names the slot whose one entry it is.
trait HeapKey: Copy + Ord {
    /// The slot's cell in the heap's position table.
    fn cell(self) -> usize;
}

impl HeapKey for (NodeId, NodeTimer) {
    fn cell(self) -> usize {
        self.0.index as usize * NodeTimer::ALL.len() + self.1 as usize
    }
}

impl HeapKey for RequestId {
    fn cell(self) -> usize {
        self.slot()
    }
}

/// A 4-ary min-heap of `(instant, key)` entries that records where each slot's entry is.
#[derive(Debug)]
struct KeyedHeap<K> {
    entries: Vec<(Instant, K)>,
    /// Position of each slot's entry, [`ABSENT`] if none (the request heap's also holds the
    /// lane's [`IN_LANE`] places).
    at: Vec<u64>,
}

impl<K> Default for KeyedHeap<K> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            at: Vec::new(),
        }
    }
}

impl<K: HeapKey> KeyedHeap<K> {
    /// The cell recorded for `key`'s slot (of any generation), if the table has one.
    fn cell_of(&self, key: K) -> Option<u64> {
        self.at.get(key.cell()).copied()
    }

    /// Grows the position table until `key`'s slot has a cell.
    fn make_room(&mut self, key: K) {
        let i = key.cell();
        if i >= self.at.len() {
            self.at.resize(i + 1, ABSENT);
        }
    }

    /// Moves the entry at `i` to `entry` (of the same slot), sifting it either way.
    fn replace(&mut self, i: usize, entry: (Instant, K)) {
        let old = self.entries[i];
        self.entries[i] = entry;
        if entry < old {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    /// Takes out the entry at `i`, filling its place with the last entry (whose sift records
    /// where it lands).
    fn remove_at(&mut self, i: usize) -> (Instant, K) {
        let removed = self.entries.swap_remove(i);
        self.at[removed.1.cell()] = ABSENT;
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

    /// Adds `entry` (whose slot has a cell) to the heap.
    fn push(&mut self, entry: (Instant, K)) {
        let i = self.entries.len();
        self.entries.push(entry);
        // Most often it stays at the end (the first entry, or one no earlier than its parent).
        if i == 0 || self.entries[(i - 1) / ARITY] <= entry {
            self.at[entry.1.cell()] = i as u64;
        } else {
            self.sift_up(i);
        }
    }

    /// Puts `entry` (already in the heap) at `i` and records its position.
    fn put(&mut self, i: usize, entry: (Instant, K)) {
        self.entries[i] = entry;
        self.at[entry.1.cell()] = i as u64;
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

    /// Whether every recorded heap position points at its entry and every entry's is
    /// recorded (lane places aside).
    #[cfg(test)]
    fn positions_agree(&self) -> bool {
        let in_heap = self.at.iter().filter(|&&c| c != ABSENT && c & IN_LANE == 0);
        in_heap.count() == self.entries.len()
            && (0..self.entries.len()).all(|i| self.cell_of(self.entries[i].1) == Some(i as u64))
    }
}

/// Which part of the index holds its earliest entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Nodes,
    Requests,
    Lane,
}

impl TimerHeap {
    /// Schedules `key` at `at`, replacing the entry its slot holds (of this key or of an older
    /// generation of the slot). The pool's callers name the part: [`Self::schedule_node`],
    /// [`Self::schedule_request`].
    #[cfg(test)]
    pub(crate) fn schedule(&mut self, at: Instant, key: TimerKey) {
        match key {
            TimerKey::Node(node, timer) => self.schedule_node(at, node, timer),
            TimerKey::Request(id) => self.schedule_request(at, id),
        }
    }

    /// Schedules `node`'s `timer` at `at`, moving the entry its slot holds.
    pub(crate) fn schedule_node(&mut self, at: Instant, node: NodeId, timer: NodeTimer) {
        let key = (node, timer);
        match self.nodes.cell_of(key) {
            Some(cell) if cell != ABSENT => self.nodes.replace(cell as usize, (at, key)),
            _ => {
                self.nodes.make_room(key);
                self.nodes.push((at, key));
            }
        }
    }

    /// Schedules request `id`'s deadline at `at`: at the back of the lane if no earlier than
    /// its last entry, else in the request heap.
    pub(crate) fn schedule_request(&mut self, at: Instant, id: RequestId) {
        match self.requests.cell_of(id) {
            None => self.requests.make_room(id),
            Some(ABSENT) => {}
            Some(cell) if cell & IN_LANE != 0 => self.lane_remove(self.lane_index(cell)),
            Some(cell) => drop(self.requests.remove_at(cell as usize)),
        }
        if self.lane.back().is_none_or(|&(last, _)| at >= last) {
            let seq = self.lane_head + self.lane.len() as u64;
            self.lane.push_back((at, id));
            self.lane_live += 1;
            self.requests.at[id.slot()] = IN_LANE | seq;
            return;
        }
        self.requests.push((at, id));
    }

    /// Takes `key`'s entry out, if the index holds one for exactly this key.
    pub(crate) fn cancel(&mut self, key: TimerKey) {
        match key {
            TimerKey::Request(id) => self.cancel_request(id),
            TimerKey::Node(node, timer) => self.cancel_node(node, timer),
        }
    }

    /// Takes the entry of `node`'s `timer` out, if the index holds one for exactly this node.
    pub(crate) fn cancel_node(&mut self, node: NodeId, timer: NodeTimer) {
        let key = (node, timer);
        if let Some(cell) = self.nodes.cell_of(key).filter(|&c| c != ABSENT) {
            if self.nodes.entries[cell as usize].1 == key {
                self.nodes.remove_at(cell as usize);
            }
        }
    }

    /// Takes request `id`'s deadline out, if the index holds one for exactly this id: the
    /// lane's front most of the time (a request answered oldest first).
    pub(crate) fn cancel_request(&mut self, id: RequestId) {
        let Some(cell) = self.requests.cell_of(id) else {
            return;
        };
        // Checked first: `ABSENT` has the lane bit set too.
        if cell == ABSENT {
            return;
        }
        if cell & IN_LANE != 0 {
            let k = self.lane_index(cell);
            if self.lane[k].1 == id {
                self.lane_remove(k);
            }
        } else if self.requests.entries[cell as usize].1 == id {
            self.requests.remove_at(cell as usize);
        }
    }

    /// The earliest entry and where it is.
    fn earliest(&self) -> Option<(Source, (Instant, TimerKey))> {
        let mut best = self
            .nodes
            .entries
            .first()
            .map(|&(at, (node, timer))| (Source::Nodes, (at, TimerKey::Node(node, timer))));
        let others = [
            self.requests
                .entries
                .first()
                .map(|&(at, id)| (Source::Requests, (at, TimerKey::Request(id)))),
            self.lane
                .front()
                .map(|&(at, id)| (Source::Lane, (at, TimerKey::Request(id)))),
        ];
        // Strictly earlier only: on a tie the part named first wins.
        for other in others.into_iter().flatten() {
            if best.is_none_or(|b| other.1.0 < b.1.0) {
                best = Some(other);
            }
        }
        best
    }

    pub(crate) fn peek(&self) -> Option<(Instant, TimerKey)> {
        self.earliest().map(|(_, entry)| entry)
    }

    pub(crate) fn pop(&mut self) -> Option<(Instant, TimerKey)> {
        let (source, entry) = self.earliest()?;
        match source {
            Source::Nodes => drop(self.nodes.remove_at(0)),
            Source::Requests => drop(self.requests.remove_at(0)),
            Source::Lane => self.lane_remove(0),
        }
        Some(entry)
    }

    /// Entries in the index (for the pool's consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn len(&self) -> usize {
        self.nodes.entries.len() + self.requests.entries.len() + self.lane_live
    }

    /// Every entry: the node heap's and the request heap's in heap order, then the lane's live
    /// ones in order (for the pool's consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Instant, TimerKey)> + '_ {
        let nodes = self
            .nodes
            .entries
            .iter()
            .map(|&(at, (node, timer))| (at, TimerKey::Node(node, timer)));
        let requests = self
            .requests
            .entries
            .iter()
            .map(|&(at, id)| (at, TimerKey::Request(id)));
        let lane = (0..self.lane.len())
            .filter(|&k| self.lane_live_at(k))
            .map(|k| (self.lane[k].0, TimerKey::Request(self.lane[k].1)));
        nodes.chain(requests).chain(lane)
    }

    /// The lane index of the entry whose cell is `cell` (an [`IN_LANE`] one).
    fn lane_index(&self, cell: u64) -> usize {
        ((cell & !IN_LANE) - self.lane_head) as usize
    }

    /// Whether `lane[k]` is live: its slot's cell still names its sequence number (an ended
    /// request's cell was cleared, a reused slot's names another place).
    fn lane_live_at(&self, k: usize) -> bool {
        let cell = self.requests.at[self.lane[k].1.slot()];
        cell == IN_LANE | (self.lane_head + k as u64)
    }

    /// Takes the live entry `lane[k]` out by clearing its cell, which makes it dead: off an
    /// end at once (with the dead entries behind it), from the middle when compaction comes,
    /// once dead entries outnumber the live ones by [`LANE_SLACK`].
    fn lane_remove(&mut self, k: usize) {
        self.requests.at[self.lane[k].1.slot()] = ABSENT;
        self.lane_live -= 1;
        // With no dead entry left (the usual case: answers oldest first), the new end is live.
        let all_live = self.lane.len() - 1 == self.lane_live;
        if k == 0 {
            // It is dead now; the pop saves looking at it again.
            self.lane.pop_front();
            self.lane_head += 1;
            while !all_live && !self.lane.is_empty() && !self.lane_live_at(0) {
                self.lane.pop_front();
                self.lane_head += 1;
            }
        } else if k + 1 == self.lane.len() {
            self.lane.pop_back();
            // The front is live (k > 0): this stops there at the latest.
            while !all_live && !self.lane_live_at(self.lane.len() - 1) {
                self.lane.pop_back();
            }
        } else if self.lane.len() > 2 * self.lane_live + LANE_SLACK {
            self.compact_lane();
        }
    }

    /// Drops the lane's dead entries, renumbering the live ones from the head.
    fn compact_lane(&mut self) {
        let mut kept = 0;
        for k in 0..self.lane.len() {
            if self.lane_live_at(k) {
                self.lane.swap(kept, k);
                kept += 1;
            }
        }
        self.lane.truncate(kept);
        for k in 0..kept {
            self.requests.at[self.lane[k].1.slot()] = IN_LANE | (self.lane_head + k as u64);
        }
    }

    /// Whether every recorded position points at its entry and every entry's is recorded,
    /// and the lane is sorted with a live front and back and its live count right.
    #[cfg(test)]
    fn positions_agree(&self) -> bool {
        let live = (0..self.lane.len()).filter(|&k| self.lane_live_at(k));
        let sorted = self
            .lane
            .iter()
            .zip(self.lane.iter().skip(1))
            .all(|(a, b)| a.0 <= b.0);
        let ends_live = self.lane.is_empty()
            || (self.lane_live_at(0) && self.lane_live_at(self.lane.len() - 1));
        self.nodes.positions_agree()
            && self.requests.positions_agree()
            && live.count() == self.lane_live
            && sorted
            && ends_live
    }
}

#[cfg(test)]
mod tests {
    use alloc::format;

    use super::*;

    /// Whether `got` may come out next of an index holding `model`: an entry of the earliest
    /// instant and, if a node timer is due then, the least of them (the heap's key order puts
    /// node timers first); which request deadline of one instant comes first depends on where
    /// each was put (see `equal_instants_fire_node_timers_first_then_requests_as_scheduled`).
    fn may_come_next(model: &[(Instant, TimerKey)], got: Option<(Instant, TimerKey)>) -> bool {
        let Some(earliest) = model.iter().map(|e| e.0).min() else {
            return got.is_none();
        };
        let least_node = model
            .iter()
            .filter(|e| e.0 == earliest && matches!(e.1, TimerKey::Node(..)))
            .min();
        got.is_some_and(|got| {
            model.contains(&got) && got.0 == earliest && least_node.is_none_or(|&n| n == got)
        })
    }

    /// Pops the index, checks the entry against the model (and against the peek before it)
    /// and takes it out of the model.
    fn pop_checked(heap: &mut TimerHeap, model: &mut Vec<(Instant, TimerKey)>, at: &str) {
        let peeked = heap.peek();
        let got = heap.pop();
        assert_eq!(
            peeked, got,
            "{at}: the peek named another entry than the pop"
        );
        assert!(may_come_next(model, got), "{at}: {got:?}");
        model.retain(|&e| Some(e) != got);
    }

    #[test]
    fn equal_instants_fire_node_timers_first_then_requests_as_scheduled() {
        let node = NodeId {
            index: 0,
            generation: 0,
        };
        let request = |slot: u32| TimerKey::Request(RequestId::new(slot, 0));
        let mut heap = TimerHeap::default();
        let at = Instant::from_secs(5);
        for slot in [5, 2, 9] {
            heap.schedule(at, request(slot));
        }
        // Earlier than the lane's last: into the heap, and out first.
        heap.schedule(Instant::from_secs(4), request(7));
        // Once a later deadline joins the lane, one at the earlier instant goes to the heap,
        // and at that instant the heap's entries come first.
        heap.schedule(Instant::from_secs(6), request(3));
        heap.schedule(at, request(1));
        heap.schedule(at, TimerKey::Node(node, NodeTimer::Idle));
        heap.schedule(at, TimerKey::Node(node, NodeTimer::Setup));
        let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
        let expected = [
            (Instant::from_secs(4), request(7)),
            (at, TimerKey::Node(node, NodeTimer::Setup)),
            (at, TimerKey::Node(node, NodeTimer::Idle)),
            (at, request(1)),
            (at, request(5)),
            (at, request(2)),
            (at, request(9)),
            (Instant::from_secs(6), request(3)),
        ];
        assert_eq!(order, expected);
    }

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
    fn the_index_gives_what_a_list_of_one_entry_per_slot_gives() {
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
                    pop_checked(&mut heap, &mut model, &format!("step {step}"));
                }
                _ => {
                    // Cancel what is there, so exact-key cancels hit as often as they miss.
                    if let Some(&(_, key)) = model.get((x >> 32) as usize % model.len().max(1)) {
                        heap.cancel(key);
                        model.retain(|e| e.1 != key);
                    }
                }
            }
            assert!(may_come_next(&model, heap.peek()), "step {step}");
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
                    pop_checked(&mut heap, &mut model, &format!("round {round} step {step}"));
                }
            }
            assert!(heap.positions_agree());
        }
    }

    #[test]
    fn rising_deadlines_ended_in_any_order_come_out_by_instant() {
        // Mostly rising instants (one timeout per request, some shorter), ended oldest first,
        // from the middle or by popping, with slots reused by newer generations: the lane
        // takes most entries, the heap the rest, and together they give the model's order.
        let mut x = 0x853c_49e6_748f_ea9bu64;
        for round in 0..4u32 {
            let mut heap = TimerHeap::default();
            let mut model: Vec<(Instant, TimerKey)> = Vec::new();
            let mut generation = [0u32; 300];
            let mut now = 0u64;
            let mut laned = 0;
            for step in 0..8_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                now += x % 3; // sometimes the same instant as the last
                match x % 8 {
                    0..=3 => {
                        let slot = (x >> 16) as usize % generation.len();
                        generation[slot] += 1;
                        let key = TimerKey::Request(RequestId::new(slot as u32, generation[slot]));
                        let timeout = if x % 16 < 14 {
                            1_000
                        } else {
                            (x >> 40) % 1_000
                        };
                        let at = Instant::from_nanos(now + timeout);
                        let live_before = heap.lane_live;
                        heap.schedule(at, key);
                        laned += usize::from(heap.lane_live > live_before);
                        model.retain(|e| slot_of(e.1) != slot);
                        model.push((at, key));
                    }
                    4 | 5 => {
                        model.sort();
                        if !model.is_empty() {
                            // Mostly the oldest, sometimes one from the middle.
                            let i = if x % 4 == 0 {
                                (x >> 8) as usize % model.len()
                            } else {
                                0
                            };
                            let (_, key) = model.remove(i);
                            heap.cancel(key);
                        }
                    }
                    6 => {
                        // A cancel of a key whose slot moved on changes nothing.
                        let slot = (x >> 16) as usize % generation.len();
                        let stale = RequestId::new(slot as u32, generation[slot].wrapping_sub(1));
                        heap.cancel(TimerKey::Request(stale));
                    }
                    _ => {
                        let at = format!("round {round} step {step}");
                        pop_checked(&mut heap, &mut model, &at);
                    }
                }
                assert!(
                    may_come_next(&model, heap.peek()),
                    "round {round} step {step}"
                );
                assert_eq!(heap.len(), model.len(), "round {round} step {step}");
                assert!(heap.positions_agree(), "round {round} step {step}");
                assert!(
                    heap.lane.len() <= 2 * heap.lane_live + LANE_SLACK,
                    "round {round} step {step}: the lane outgrew its live entries"
                );
            }
            assert!(
                laned > 2_000,
                "round {round}: only {laned} entries went to the lane"
            );
        }

        fn slot_of(key: TimerKey) -> usize {
            match key {
                TimerKey::Request(id) => id.slot(),
                TimerKey::Node(..) => unreachable!("requests only"),
            }
        }
    }

    #[test]
    fn a_lane_ended_from_the_middle_is_compacted_and_keeps_its_order() {
        let key = |i: u32| TimerKey::Request(RequestId::new(i, 0));
        let mut heap = TimerHeap::default();
        for i in 0..500 {
            heap.schedule(Instant::from_secs(u64::from(i)), key(i));
        }
        assert_eq!(
            (heap.lane_live, heap.requests.entries.len()),
            (500, 0),
            "all in the lane"
        );
        // End everything but the first and the last: the ends stay live, so the dead ones
        // wait in the middle until they outnumber the live ones by more than the slack, and
        // compaction takes them out (rarely: each one costs a pass over the lane).
        let mut compactions = 0;
        for i in 1..499 {
            let before = heap.lane.len();
            heap.cancel(key(i));
            assert!(heap.lane.len() <= 2 * heap.lane_live + LANE_SLACK, "at {i}");
            compactions += usize::from(heap.lane.len() < before);
        }
        assert!(heap.positions_agree());
        assert_eq!(heap.len(), 2);
        // Compacted at 217 live (500 > 2 x 217 + 64), at 76 (217 > 2 x 76 + 64) and at 5
        // (76 > 2 x 5 + 64), leaving those 2 live and the 3 ended since.
        assert_eq!((compactions, heap.lane.len()), (3, 5));
        // An earlier deadline than the lane's last goes to the heap, and still comes first.
        heap.schedule(Instant::from_secs(3), key(7));
        assert_eq!(heap.requests.entries.len(), 1);
        let order: Vec<_> = core::iter::from_fn(|| heap.pop()).collect();
        let expected = [(0, 0), (3, 7), (499, 499)].map(|(at, i)| (Instant::from_secs(at), key(i)));
        assert_eq!(order, expected);
        assert!(heap.positions_agree());
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
