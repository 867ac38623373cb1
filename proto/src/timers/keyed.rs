//! The keyed heap under the deadline index: a 4-ary min-heap of `(instant, key)` entries
//! that records in a position table where each slot's one entry is, so an entry is found,
//! moved or taken out in O(log n) by its key. [`TimerHeap`](super::TimerHeap) keeps one for
//! the nodes' timers and one for request deadlines, whose table also records the lane's and
//! the early stack's places.

use alloc::vec::Vec;

use super::{ABSENT, NodeTimer};
#[cfg(test)]
use super::{IN_EARLY, IN_LANE};
use crate::ids::{NodeId, RequestId};
use crate::time::Instant;

/// Children per heap node.
const ARITY: usize = 4;

/// A key of a [`KeyedHeap`]: it names the slot whose one entry it is.
pub(super) trait HeapKey: Copy + Ord + core::fmt::Debug {
    /// The slot's cell in the heap's position table.
    fn cell(self) -> usize;
}

impl HeapKey for (NodeId, NodeTimer) {
    fn cell(self) -> usize {
        self.0.index() * NodeTimer::ALL.len() + self.1 as usize
    }
}

impl HeapKey for RequestId {
    fn cell(self) -> usize {
        self.slot()
    }
}

/// A 4-ary min-heap of `(instant, key)` entries that records where each slot's entry is.
#[derive(Debug)]
pub(super) struct KeyedHeap<K> {
    pub(super) entries: Vec<(Instant, K)>,
    /// Position of each slot's entry, [`ABSENT`] if none (the request heap's also holds the
    /// lane's [`IN_LANE`](super::IN_LANE) places and the early stack's
    /// [`IN_EARLY`](super::IN_EARLY) ones).
    pub(super) at: Vec<u64>,
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
    pub(super) fn cell_of(&self, key: K) -> Option<u64> {
        self.at.get(key.cell()).copied()
    }

    /// Grows the position table until `key`'s slot has a cell.
    pub(super) fn make_room(&mut self, key: K) {
        cell_mut(&mut self.at, key.cell());
    }

    /// Moves the entry at `i` to `entry` (of the same slot), sifting it either way.
    pub(super) fn replace(&mut self, i: usize, entry: (Instant, K)) {
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
    pub(super) fn remove_at(&mut self, i: usize) {
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
    }

    /// Takes out the entry at `i`, whose slot's cell is `cell`: the last one at once (no other
    /// entry moves), any other through [`Self::remove_at`].
    #[inline]
    pub(super) fn take_out(&mut self, i: usize, cell: usize) {
        if i + 1 == self.entries.len() {
            self.entries.pop();
            self.at[cell] = ABSENT;
        } else {
            self.remove_at(i);
        }
    }

    /// Adds `entry` (whose slot has a cell) to the heap.
    pub(super) fn push(&mut self, entry: (Instant, K)) {
        let i = self.entries.len();
        self.entries.push(entry);
        // Most often it stays at the end (the first entry, or one no earlier than its parent).
        if i == 0 || self.entries[(i - 1) / ARITY] <= entry {
            self.at[entry.1.cell()] = i as u64;
        } else {
            self.sift_up(i);
        }
    }

    /// Pushes `entry` (whose slot has no entry) if that needs no growth of either table and
    /// it stays at the end (as [`Self::push`] most often finds): whether it did.
    #[inline(always)]
    pub(super) fn push_in_place(&mut self, entry: (Instant, K)) -> bool {
        let i = self.entries.len();
        let Some(cell) = self.at.get_mut(entry.1.cell()) else {
            return false;
        };
        let fits =
            i < self.entries.capacity() && (i == 0 || self.entries[(i - 1) / ARITY] <= entry);
        if fits {
            self.entries.push(entry);
            *cell = i as u64;
        }
        fits
    }

    /// Puts `entry` (already in the heap) at `i` and records its position.
    pub(super) fn put(&mut self, i: usize, entry: (Instant, K)) {
        self.entries[i] = entry;
        self.at[entry.1.cell()] = i as u64;
    }

    /// Moves the entry at `i` up to where its parent is earlier, recording every position it
    /// changes (its own included).
    pub(super) fn sift_up(&mut self, mut i: usize) {
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
    pub(super) fn sift_down(&mut self, mut i: usize) {
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
    pub(super) fn positions_agree(&self) -> bool {
        let in_heap = self
            .at
            .iter()
            .filter(|&&c| c != ABSENT && c & (IN_LANE | IN_EARLY) == 0);
        in_heap.count() == self.entries.len()
            && (0..self.entries.len()).all(|i| self.cell_of(self.entries[i].1) == Some(i as u64))
    }

    /// Whether every entry is no earlier than its parent: the heap's own order, which a pop
    /// alone may not show (a misplaced entry moved to the root by a later pop is sifted
    /// right again).
    #[cfg(test)]
    pub(super) fn ordered(&self) -> bool {
        (1..self.entries.len()).all(|i| self.entries[(i - 1) / ARITY] <= self.entries[i])
    }
}

/// The cell of `slot` in a position table, which grows to hold it if it is too short (a new
/// slot; rare, and out of line).
#[inline(always)]
pub(super) fn cell_mut(cells: &mut Vec<u64>, slot: usize) -> &mut u64 {
    if slot < cells.len() {
        &mut cells[slot]
    } else {
        grow_to_cell(cells, slot)
    }
}

/// [`cell_mut`] for a slot beyond the table.
#[cold]
#[inline(never)]
fn grow_to_cell(cells: &mut Vec<u64>, slot: usize) -> &mut u64 {
    cells.resize(slot + 1, ABSENT);
    &mut cells[slot]
}
