//! The selection index: node selection's answer in O(log n), the same one a linear scan of
//! the rule gives (a property test holds it to the scan in `select.rs`).
//!
//! Every node has one [`Placement`], recomputed before a pick for each node an input touched
//! since the last one (so a client that names its nodes never pays for the index). The index
//! keeps, per placement class and for healthy and quarantined nodes apart, a segment tree over
//! node slots holding each node's rank (in-flight load for ready nodes, failed attempts and last
//! attempt for disconnected ones past their backoff). The rule's tie-break, "the first from a
//! random offset", is a descent for the first slot at or after the offset holding the minimum.
//! What depends on time waits in ordered sets and is moved into the trees when `pick` sees the
//! time pass: a node in its reconnect backoff, and a throttled node.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use crate::time::Instant;

/// Where a node stands for selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) class: Class,
    /// Quarantined: a candidate only in panic mode.
    pub(crate) quarantined: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Never chosen: disabled, closed, or a slot without a node.
    Out,
    /// Not chosen until `until`.
    Throttled { until: Instant, then: Standing },
    /// Chosen by its standing.
    In(Standing),
}

/// A selectable node's standing, by its connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Ready: its requests in flight, and whether its outbound buffer takes more.
    Ready { load: usize, writable: bool },
    /// Connecting or handshaking.
    Connecting,
    /// Between connections, reconnecting from `reconnect_at`, ranked by the selection rule.
    Disconnected { reconnect_at: Instant, rank: Rank },
    /// A state selection never picks from (draining).
    Other,
}

/// A disconnected node's rank: lower is better (failed attempts, then last attempt; never
/// attempted counts as least recent).
pub(crate) type Rank = (u32, Option<Instant>);

const HEALTHY: usize = 0;
const QUARANTINED: usize = 1;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct SelectIndex {
    placements: Vec<Placement>,
    /// Slots touched since the index last looked, whose placement may have changed: the
    /// first `touched_len`. As long as `placements` (a slot is listed once), so listing one
    /// never grows it: no call, and no register saved for one, in every input's touch.
    touched: Vec<u32>,
    touched_len: usize,
    /// Per slot (as long as `placements`): listed in `touched`.
    is_touched: Vec<bool>,
    /// The latest time `pick` has seen (backoffs and throttles before it have passed).
    now: Instant,
    ready: [SegTree<usize>; 2],
    /// Ready nodes whose outbound buffer is full (they count for "every ready node is full").
    unwritable: [usize; 2],
    connecting: [SegTree<()>; 2],
    /// Disconnected nodes past their backoff, by rank.
    reconnectable: [SegTree<Rank>; 2],
    /// Disconnected nodes still in their backoff, by its end.
    backoff: BTreeSet<(Instant, u32)>,
    /// Throttled nodes, by the end of the throttle.
    throttled: BTreeSet<(Instant, u32)>,
}

impl Placement {
    /// A slot without a node, or a node never chosen.
    pub(crate) const OUT: Self = Self {
        class: Class::Out,
        quarantined: false,
    };
}

impl SelectIndex {
    /// Notes that `slot`'s placement may have changed; [`SelectIndex::refresh`] places it.
    /// The slot was placed once already (every node is, when it is added).
    #[inline]
    pub(crate) fn touch(&mut self, slot: u32) {
        let i = slot as usize;
        if !self.is_touched[i] {
            self.is_touched[i] = true;
            self.touched[self.touched_len] = slot;
            self.touched_len += 1;
        }
    }

    /// Whether `slot` is listed as touched (for the debug check of a node's own mark).
    pub(crate) fn is_touched(&self, slot: u32) -> bool {
        self.is_touched.get(slot as usize).copied().unwrap_or(false)
    }

    /// Places every touched slot where `placement` says it now stands.
    pub(crate) fn refresh(&mut self, mut placement: impl FnMut(u32) -> Placement) {
        // Last listed first, as a stack.
        while self.touched_len > 0 {
            self.touched_len -= 1;
            let slot = self.touched[self.touched_len];
            self.is_touched[slot as usize] = false;
            self.place(slot, placement(slot));
        }
    }

    /// Moves `slot` to `placement`.
    pub(crate) fn place(&mut self, slot: u32, placement: Placement) {
        let i = slot as usize;
        if i >= self.placements.len() {
            self.placements.resize(i + 1, Placement::OUT);
            self.is_touched.resize(i + 1, false);
            self.touched.resize(i + 1, 0);
        }
        let old = self.placements[i];
        // The common change, a ready node's load moving by one: one leaf update. Looked at
        // before the whole placements are compared, which takes a match on both classes.
        if let (
            Class::In(Standing::Ready {
                load: was,
                writable: true,
            }),
            Class::In(Standing::Ready {
                load,
                writable: true,
            }),
        ) = (old.class, placement.class)
        {
            if old.quarantined == placement.quarantined {
                if load != was {
                    self.placements[i] = placement;
                    self.ready[usize::from(placement.quarantined)].set(slot, Some(load));
                }
                return;
            }
        }
        if old == placement {
            return;
        }
        self.remove(slot, old);
        self.placements[i] = placement;
        self.insert(slot, placement);
    }

    /// Lets time pass: backoffs and throttles that ended by `now` make their nodes
    /// candidates.
    pub(crate) fn advance(&mut self, now: Instant) {
        if now <= self.now {
            return;
        }
        self.now = now;
        while let Some(&(until, slot)) = self.throttled.first().filter(|(t, _)| *t <= now) {
            self.throttled.remove(&(until, slot));
            let p = self.placements[slot as usize];
            if let Class::Throttled { then, .. } = p.class {
                self.insert_standing(slot, p.quarantined, then);
            }
        }
        while let Some(&(at, slot)) = self.backoff.first().filter(|(t, _)| *t <= now) {
            self.backoff.remove(&(at, slot));
            let p = self.placements[slot as usize];
            // A throttled node waits here only once its throttle ended (the loop above, or
            // `insert`), while its placement still reads `Throttled`: its backoff ends the same.
            if let Class::In(Standing::Disconnected { rank, .. })
            | Class::Throttled {
                then: Standing::Disconnected { rank, .. },
                ..
            } = p.class
            {
                self.reconnectable[usize::from(p.quarantined)].set(slot, Some(rank));
            }
        }
    }

    /// The ready node with the fewest in flight (under `cap`), the first from `offset`; or
    /// whether there is none only because every ready node is full.
    pub(crate) fn ready(&self, offset: u32, cap: usize, panic: bool) -> Result<u32, bool> {
        match first_min(&self.ready, panic, offset) {
            Some((load, slot)) if load < cap => Ok(slot),
            found => {
                let classes = self.classes(panic);
                let unwritable: usize = classes.iter().map(|&c| self.unwritable[c]).sum();
                Err(found.is_some() && unwritable == 0)
            }
        }
    }

    /// The first connecting node from `offset`.
    pub(crate) fn connecting(&self, offset: u32, panic: bool) -> Option<u32> {
        first_min(&self.connecting, panic, offset).map(|(_, slot)| slot)
    }

    /// The best-ranked disconnected node past its backoff, the first from `offset`.
    pub(crate) fn reconnectable(&self, offset: u32, panic: bool) -> Option<u32> {
        first_min(&self.reconnectable, panic, offset).map(|(_, slot)| slot)
    }

    fn classes(&self, panic: bool) -> &'static [usize] {
        if panic {
            &[HEALTHY, QUARANTINED]
        } else {
            &[HEALTHY]
        }
    }

    fn insert(&mut self, slot: u32, p: Placement) {
        match p.class {
            Class::Out => {}
            Class::Throttled { until, then } => {
                if until <= self.now {
                    self.insert_standing(slot, p.quarantined, then);
                } else {
                    self.throttled.insert((until, slot));
                }
            }
            Class::In(standing) => self.insert_standing(slot, p.quarantined, standing),
        }
    }

    fn insert_standing(&mut self, slot: u32, quarantined: bool, standing: Standing) {
        let q = usize::from(quarantined);
        match standing {
            Standing::Ready { load, writable } => {
                if writable {
                    self.ready[q].set(slot, Some(load));
                } else {
                    self.unwritable[q] += 1;
                }
            }
            Standing::Connecting => self.connecting[q].set(slot, Some(())),
            Standing::Disconnected { reconnect_at, rank } => {
                if reconnect_at <= self.now {
                    self.reconnectable[q].set(slot, Some(rank));
                } else {
                    self.backoff.insert((reconnect_at, slot));
                }
            }
            Standing::Other => {}
        }
    }

    fn remove(&mut self, slot: u32, p: Placement) {
        let q = usize::from(p.quarantined);
        let standing = match p.class {
            Class::Out => return,
            Class::Throttled { until, then } => {
                if self.throttled.remove(&(until, slot)) {
                    return; // still throttled: in no tree
                }
                then
            }
            Class::In(standing) => standing,
        };
        match standing {
            Standing::Ready { writable, .. } => {
                if writable {
                    self.ready[q].set(slot, None);
                } else {
                    self.unwritable[q] -= 1;
                }
            }
            Standing::Connecting => self.connecting[q].set(slot, None),
            Standing::Disconnected { reconnect_at, .. } => {
                self.backoff.remove(&(reconnect_at, slot));
                self.reconnectable[q].set(slot, None);
            }
            Standing::Other => {}
        }
    }
}

/// The minimum value of the healthy tree, or in panic mode of both, and the first slot
/// holding it from `offset` on, wrapping around.
fn first_min<K: Leaf>(trees: &[SegTree<K>; 2], panic: bool, offset: u32) -> Option<(K, u32)> {
    let from = offset as usize;
    if !panic {
        // The usual pick reads one tree, with no iterator over the classes.
        let tree = &trees[HEALTHY];
        let min = tree.min()?;
        let slot = tree
            .first_with(min, from)
            .or_else(|| tree.first_with(min, 0))?;
        return Some((min, slot as u32));
    }
    let min = trees.iter().filter_map(SegTree::min).min()?;
    let first = |from| trees.iter().filter_map(|t| t.first_with(min, from)).min();
    let slot = first(from).or_else(|| first(0))?;
    Some((min, slot as u32))
}

/// A segment tree over node slots: each leaf holds a value or nothing; every inner node the
/// minimum below it. Setting a leaf is O(log n); so is finding the first leaf at or after an
/// index that holds a given value.
#[derive(Debug)]
pub(crate) struct SegTree<K: Leaf> {
    /// `tree[1]` is the root; leaves start at `width`. Each holds its value's stored form,
    /// [`Leaf::NONE`] for nothing.
    tree: Vec<K::Stored>,
    width: usize,
}

/// A value a [`SegTree`] holds, kept in a form where "nothing" is one more value that sorts
/// after every other: an inner node's minimum is then one `min`, and a leaf's test for a value
/// one comparison. A load is stored as itself, with its type's largest value for nothing (an
/// `Option<usize>` took a tag and twice the room, and compared both words).
pub(crate) trait Leaf: Copy + Ord {
    /// The stored form.
    type Stored: Copy + Ord + core::fmt::Debug;
    /// Nothing, after every stored value.
    const NONE: Self::Stored;
    /// The stored form of `value`.
    fn store(value: Option<Self>) -> Self::Stored;
    /// The value of a stored form.
    fn load(stored: Self::Stored) -> Option<Self>;
}

/// A count (a ready node's load): its type's largest value stands for nothing, which no
/// count reaches.
macro_rules! count_leaf {
    ($($t:ty),*) => {$(
        impl Leaf for $t {
            type Stored = $t;
            const NONE: $t = <$t>::MAX;
            #[inline]
            fn store(value: Option<$t>) -> $t {
                debug_assert_ne!(value, Some(<$t>::MAX), "a count that stands for nothing");
                value.unwrap_or(<$t>::MAX)
            }
            #[inline]
            fn load(stored: $t) -> Option<$t> {
                (stored != <$t>::MAX).then_some(stored)
            }
        }
    )*};
}

count_leaf!(usize);
// The loads of the unit tests below.
#[cfg(test)]
count_leaf!(u64, i32);

/// A connecting node: present (`false`) or not (`true`).
impl Leaf for () {
    type Stored = bool;
    const NONE: bool = true;
    fn store(value: Option<()>) -> bool {
        value.is_none()
    }
    fn load(stored: bool) -> Option<()> {
        (!stored).then_some(())
    }
}

/// A disconnected node's rank, behind a flag that is set for nothing.
impl Leaf for Rank {
    type Stored = (bool, Rank);
    const NONE: (bool, Rank) = (true, (0, None));
    fn store(value: Option<Rank>) -> (bool, Rank) {
        value.map_or(Self::NONE, |rank| (false, rank))
    }
    fn load(stored: (bool, Rank)) -> Option<Rank> {
        (!stored.0).then_some(stored.1)
    }
}

impl<K: Leaf> Default for SegTree<K> {
    fn default() -> Self {
        Self {
            tree: Vec::new(),
            width: 0,
        }
    }
}

impl<K: Leaf> SegTree<K> {
    fn set(&mut self, slot: u32, value: Option<K>) {
        let i = slot as usize;
        if i >= self.width {
            self.grow(i + 1);
        }
        let mut at = self.width + i;
        self.tree[at] = K::store(value);
        while at > 1 {
            at /= 2;
            let merged = self.tree[2 * at].min(self.tree[2 * at + 1]);
            if self.tree[at] == merged {
                break;
            }
            self.tree[at] = merged;
        }
    }

    fn grow(&mut self, leaves: usize) {
        let width = leaves.next_power_of_two().max(4);
        let mut tree = alloc::vec![K::NONE; 2 * width];
        tree[width..width + self.width].copy_from_slice(&self.tree[self.width..]);
        for at in (1..width).rev() {
            tree[at] = tree[2 * at].min(tree[2 * at + 1]);
        }
        self.tree = tree;
        self.width = width;
    }

    fn min(&self) -> Option<K> {
        K::load(*self.tree.get(1)?)
    }

    /// The first leaf at or after `from` holding `value`, which no leaf undercuts (the
    /// minimum of this tree or of several). Bottom-up, with no recursion: from the leaf at
    /// `from`, it climbs to the next subtree to the right until one holds `value` (an inner
    /// node holds its subtree's minimum), then descends to that subtree's first leaf holding
    /// it. Each level is a comparison or two, where a recursive descent from the root called
    /// itself for the subtrees before `from` as well.
    fn first_with(&self, value: K, from: usize) -> Option<usize> {
        if from >= self.width {
            return None;
        }
        debug_assert!(
            self.min().is_none_or(|m| m >= value),
            "a leaf undercuts the value"
        );
        let stored = K::store(Some(value));
        let holds = |at: usize| self.tree[at] == stored;
        let mut at = self.width + from;
        while !holds(at) {
            // The next subtree to the right: a left child's right sibling (a right child
            // first climbs to the nearest ancestor that is a left child).
            while at % 2 == 1 {
                if at == 1 {
                    return None; // the root's: nothing right of the last leaf
                }
                at /= 2;
            }
            at += 1;
        }
        while at < self.width {
            at = if holds(2 * at) { 2 * at } else { 2 * at + 1 };
        }
        Some(at - self.width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_node_quarantined_at_the_same_load_leaves_the_healthy_tree() {
        let ready = |load, quarantined| Placement {
            class: Class::In(Standing::Ready {
                load,
                writable: true,
            }),
            quarantined,
        };
        let mut index = SelectIndex::default();
        index.place(0, ready(1, false));
        index.place(1, ready(2, false));
        assert_eq!(index.ready(0, usize::MAX, false), Ok(0));
        // Quarantined with its load unchanged (its connection stays up when a request's
        // deadline passes in flight), it is a candidate in panic mode only.
        index.place(0, ready(1, true));
        assert_eq!(index.ready(0, usize::MAX, false), Ok(1));
        assert_eq!(index.ready(0, usize::MAX, true), Ok(0));
        // Readmitted with a load that moved meanwhile, it is a healthy candidate again.
        index.place(0, ready(0, false));
        assert_eq!(index.ready(1, usize::MAX, false), Ok(0));
        assert_eq!(index.ready(1, usize::MAX, true), Ok(0));
    }

    /// Each kind of leaf gives back what it stored, sorts nothing after every value, and a
    /// tree whose leaves were all emptied again has no minimum.
    #[test]
    fn every_kind_of_leaf_keeps_nothing_apart_from_its_values() {
        fn check<K: Leaf + core::fmt::Debug>(values: [K; 2]) {
            for value in values {
                assert_eq!(K::load(K::store(Some(value))), Some(value));
                assert!(K::store(Some(value)) < K::NONE);
            }
            assert_eq!(K::load(K::NONE), None);
            assert_eq!(K::store(None), K::NONE);
            let mut t = SegTree::default();
            assert_eq!(t.min(), None);
            t.set(3, Some(values[1]));
            t.set(1, Some(values[0]));
            assert_eq!(
                (t.min(), t.first_with(values[0], 0)),
                (Some(values[0]), Some(1))
            );
            t.set(1, None);
            t.set(3, None);
            assert_eq!(t.min(), None);
        }
        check::<usize>([0, 7]);
        check::<()>([(), ()]);
        check::<Rank>([(0, None), (2, Some(Instant::from_secs(1)))]);
    }

    #[test]
    fn the_tree_finds_the_first_minimum_from_an_offset_wrapping_around() {
        let mut t = SegTree::default();
        for (slot, load) in [(0, 3), (2, 1), (5, 1), (7, 2)] {
            t.set(slot, Some(load));
        }
        assert_eq!(t.min(), Some(1));
        assert_eq!(t.first_with(1, 0), Some(2));
        assert_eq!(t.first_with(1, 3), Some(5));
        assert_eq!(t.first_with(1, 6), None, "the caller wraps around");
        t.set(2, None);
        t.set(5, Some(4));
        assert_eq!(t.min(), Some(2));
        assert_eq!(t.first_with(2, 0), Some(7));
        t.set(40, Some(0)); // grows
        assert_eq!((t.min(), t.first_with(0, 8)), (Some(0), Some(40)));
    }

    /// The first leaf holding the minimum from every offset, against a scan of the leaves,
    /// over random trees of every size up to 70 leaves (past three powers of two).
    #[test]
    fn the_first_minimum_from_any_offset_is_what_a_scan_of_the_leaves_finds() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..2_000u32 {
            crate::tests::xorshift(&mut x);
            let len = 1 + (x % 70) as usize;
            let mut t = SegTree::default();
            let mut leaves = alloc::vec![None; len];
            for (slot, leaf) in leaves.iter_mut().enumerate() {
                crate::tests::xorshift(&mut x);
                // Few distinct loads and many empty slots, so minima repeat and gaps are long.
                *leaf = (x % 3 != 0).then_some((x >> 8) % 4);
                t.set(slot as u32, *leaf);
            }
            let min = leaves.iter().flatten().min().copied();
            assert_eq!(t.min(), min, "round {round}");
            let Some(min) = min else { continue };
            for from in 0..len + 2 {
                let scanned = (from..len).find(|&i| leaves[i] == Some(min));
                assert_eq!(
                    t.first_with(min, from),
                    scanned,
                    "round {round} from {from}"
                );
            }
        }
    }
}
