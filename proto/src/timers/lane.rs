//! A lane of the deadline index: a FIFO of `(instant, key)` entries that arrive in rising
//! order, so the oldest comes off the front in O(1) where a heap would sift a replacement
//! down from its top. [`TimerHeap`](super::TimerHeap) keeps one for request deadlines (one
//! timeout for every request) and one for the nodes' write timers (one write timeout for every
//! connection).
//!
//! Each entry's slot records, in its heap's position table, [`IN_LANE`] with the entry's
//! sequence number. An entry whose slot's cell no longer names it is *dead*: taken out from
//! the middle, it waits until it reaches an end or the lane is compacted, once dead entries
//! outnumber the live ones by [`LANE_SLACK`]. The front and the back are always live.

use super::keyed::{HeapKey, KeyedHeap};
use super::{ABSENT, IN_LANE, LANE_SLACK, renumber, still_placed};
use crate::fifo::Fifo;
use crate::time::Instant;

#[derive(Debug)]
pub(super) struct Lane<K> {
    entries: Fifo<(Instant, K)>,
    /// The sequence number of `entries[0]`; entry `k` has `head + k`.
    head: u64,
    /// Live entries.
    live: usize,
}

impl<K> Default for Lane<K> {
    fn default() -> Self {
        Self {
            entries: Fifo::new(),
            head: 0,
            live: 0,
        }
    }
}

impl<K: HeapKey> Lane<K> {
    /// Entries, the dead ones included.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Live entries.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn live(&self) -> usize {
        self.live
    }

    /// The first entry, live (or none).
    #[inline]
    pub(super) fn front(&self) -> Option<&(Instant, K)> {
        self.entries.front()
    }

    /// The last entry, live (or none).
    #[inline]
    pub(super) fn back(&self) -> Option<&(Instant, K)> {
        self.entries.back()
    }

    /// Adds `entry`, no earlier than the last, at the back; `cell` is its slot's.
    #[inline(always)]
    pub(super) fn push(&mut self, cell: &mut u64, entry: (Instant, K)) {
        *cell = IN_LANE | (self.head + self.entries.len() as u64);
        self.entries.push_back(entry);
        self.live += 1;
    }

    /// Takes the front out if it is `key`'s entry and no entry is dead: O(1), with nothing
    /// behind it to look at. Whether it did.
    #[inline(always)]
    pub(super) fn take_front(&mut self, heap: &mut KeyedHeap<K>, key: K) -> bool {
        let taken =
            self.entries.front().is_some_and(|&(_, front)| front == key) && self.len() == self.live;
        if taken {
            debug_assert_eq!(
                heap.at[key.cell()],
                IN_LANE | self.head,
                "the lane's front is {key:?}'s entry but its cell says otherwise"
            );
            heap.at[key.cell()] = ABSENT;
            self.live -= 1;
            self.entries.skip_front();
            self.head += 1;
            debug_assert!(
                self.is_empty() || self.live_at(&heap.at, 0),
                "a dead lane front"
            );
        }
        taken
    }

    /// The index of the entry whose cell is `cell` (an [`IN_LANE`] one).
    #[inline]
    pub(super) fn index(&self, cell: u64) -> usize {
        ((cell & !IN_LANE) - self.head) as usize
    }

    /// Whether entry `k` is live: its slot's cell still names its sequence number (an ended
    /// entry's cell was cleared, a reused slot's names another place).
    pub(super) fn live_at(&self, cells: &[u64], k: usize) -> bool {
        cells[self.entries[k].1.cell()] == IN_LANE | (self.head + k as u64)
    }

    /// Takes out `key`'s entry, whose slot's cell is `cell` (an [`IN_LANE`] one), if it is
    /// exactly `key`'s (not another generation's of the slot): whether it was.
    pub(super) fn cancel(&mut self, heap: &mut KeyedHeap<K>, cell: u64, key: K) -> bool {
        let k = self.index(cell);
        let found = self.entries[k].1 == key;
        if found {
            self.remove(heap, k);
        }
        found
    }

    /// Takes the live entry `k` out by clearing its cell, which makes it dead: off an end at
    /// once (with the dead entries behind it), from the middle when compaction comes.
    pub(super) fn remove(&mut self, heap: &mut KeyedHeap<K>, k: usize) {
        let cells = &mut heap.at;
        cells[self.entries[k].1.cell()] = ABSENT;
        self.live -= 1;
        // With no dead entry left (the usual case: oldest first), the new end is live.
        let all_live = self.len() - 1 == self.live;
        if k == 0 {
            // It is dead now; the pop saves looking at it again.
            self.entries.skip_front();
            self.head += 1;
            while !all_live && !self.is_empty() && !self.live_at(cells, 0) {
                self.entries.skip_front();
                self.head += 1;
            }
        } else if k + 1 == self.len() {
            self.entries.pop_back();
            // The front is live (k > 0): this stops there at the latest.
            while !all_live && !self.live_at(cells, self.len() - 1) {
                self.entries.pop_back();
            }
        } else if self.len() > 2 * self.live + LANE_SLACK {
            self.compact(cells);
        }
    }

    /// Drops the dead entries, renumbering the live ones from the head.
    fn compact(&mut self, cells: &mut [u64]) {
        self.drop_dead(cells);
        renumber(self.entries.iter(), cells, IN_LANE, self.head);
    }

    /// Drops the dead entries and sorts the live ones in key order (instant, then key),
    /// renumbering them from the head: for a lane sorted by instant alone, whose entries of
    /// one instant must come out in key order.
    pub(super) fn sort(&mut self, cells: &mut [u64]) {
        self.drop_dead(cells);
        self.entries.sort_unstable();
        renumber(self.entries.iter(), cells, IN_LANE, self.head);
    }

    /// Drops the dead entries; the live ones' cells still name their old places.
    fn drop_dead(&mut self, cells: &[u64]) {
        self.entries.retain(still_placed(cells, IN_LANE, self.head));
    }

    /// The least live entry in key order among those at the front's instant (the least of the
    /// lane, when it is sorted by instant): a scan of them.
    pub(super) fn least_at_front(&self, cells: &[u64]) -> Option<(Instant, K)> {
        let &(first, _) = self.front()?;
        (0..self.len())
            .take_while(|&k| self.entries[k].0 == first)
            .filter(|&k| self.live_at(cells, k))
            .map(|k| self.entries[k])
            .min()
    }

    /// The live entries, in order.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn iter_live<'a>(
        &'a self,
        cells: &'a [u64],
    ) -> impl Iterator<Item = (Instant, K)> + 'a {
        (0..self.len())
            .filter(move |&k| self.live_at(cells, k))
            .map(|k| self.entries[k])
    }

    /// Whether the lane is in order (`in_order` holds for every two neighbours), its ends are
    /// live and its live count is right.
    #[cfg(test)]
    pub(super) fn agrees(
        &self,
        cells: &[u64],
        in_order: impl Fn(&(Instant, K), &(Instant, K)) -> bool,
    ) -> bool {
        let sorted = self
            .entries
            .iter()
            .zip(self.entries.iter().skip(1))
            .all(|(a, b)| in_order(a, b));
        let ends_live =
            self.is_empty() || (self.live_at(cells, 0) && self.live_at(cells, self.len() - 1));
        sorted && ends_live && self.iter_live(cells).count() == self.live
    }
}
