//! The driver's connections by [`ConnId`]: a map with the semantics of a
//! `BTreeMap<ConnId, T>` (keyed by the whole id) that is cheaper to look up.
//!
//! The driver looks a connection up several times per request (to write, to read, to
//! decode), and a node normally has one connection in the driver at a time. So each entry
//! goes to a *slot* indexed by its node's index
//! ([`NodeId::index`](keepwire_proto::NodeId::index), dense: the pool reuses the indexes of
//! removed nodes): a lookup costs an index and one comparison of the whole id, where a
//! `BTreeMap` of one entry cost about 23 instructions.
//! An entry whose slot another id holds (a node's next connection before the driver dropped
//! the last, or a reused index while the removed node's connection is still here) goes to a
//! `BTreeMap` *aside*; lookups try it only when it holds anything, and when a slot empties,
//! an entry aside for the same index moves into it. Every index with an entry aside so has
//! its slot taken, which lets an insert into an empty slot skip the map.

use std::collections::BTreeMap;

use keepwire_proto::ConnId;

/// A map from [`ConnId`] to `T`: a slot per node index, and a map for the rest.
#[derive(Debug)]
pub(crate) struct ConnTable<T> {
    /// `slots[i]` holds an entry of a connection to the node of index `i`, if any.
    slots: Vec<Option<(ConnId, T)>>,
    /// Entries in `slots`.
    in_slots: usize,
    /// Entries whose slot holds another id; none for an index whose slot is empty.
    aside: BTreeMap<ConnId, T>,
}

impl<T> Default for ConnTable<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            in_slots: 0,
            aside: BTreeMap::new(),
        }
    }
}

impl<T> ConnTable<T> {
    /// The entry of `conn`, if there is one.
    pub(crate) fn get(&self, conn: &ConnId) -> Option<&T> {
        match self.slots.get(conn.node().index()) {
            Some(Some((id, value))) if id == conn => Some(value),
            _ if self.aside.is_empty() => None,
            _ => Self::get_aside(&self.aside, conn),
        }
    }

    /// The entry of `conn`, mutably, if there is one.
    pub(crate) fn get_mut(&mut self, conn: &ConnId) -> Option<&mut T> {
        match self.slots.get_mut(conn.node().index()) {
            Some(Some((id, value))) if id == conn => Some(value),
            _ if self.aside.is_empty() => None,
            _ => Self::get_aside_mut(&mut self.aside, conn),
        }
    }

    /// [`get`](Self::get) of an entry aside: out of line, so that the map's search is not
    /// inlined with every lookup into the driver's poll, whose request path it made spill
    /// registers (BENCHMARKS.md, "A hand-out read in place").
    #[cold]
    #[inline(never)]
    fn get_aside<'a>(aside: &'a BTreeMap<ConnId, T>, conn: &ConnId) -> Option<&'a T> {
        aside.get(conn)
    }

    /// [`get_mut`](Self::get_mut) of an entry aside, out of line as [`get_aside`](Self::get_aside).
    #[cold]
    #[inline(never)]
    fn get_aside_mut<'a>(aside: &'a mut BTreeMap<ConnId, T>, conn: &ConnId) -> Option<&'a mut T> {
        aside.get_mut(conn)
    }

    /// Files `value` under `conn`, returning what was filed under it before.
    pub(crate) fn insert(&mut self, conn: ConnId, value: T) -> Option<T> {
        let index = conn.node().index();
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, || None);
        }
        match &mut self.slots[index] {
            Some((id, old)) if *id == conn => Some(std::mem::replace(old, value)),
            Some(_) => self.aside.insert(conn, value),
            empty @ None => {
                *empty = Some((conn, value));
                self.in_slots += 1;
                None
            }
        }
    }

    /// Removes the entry of `conn` and returns it; an entry aside for the same node index
    /// takes the slot it leaves.
    pub(crate) fn remove(&mut self, conn: &ConnId) -> Option<T> {
        let index = conn.node().index();
        let slot = self.slots.get_mut(index)?;
        if !matches!(slot, Some((id, _)) if id == conn) {
            return if self.aside.is_empty() {
                None
            } else {
                self.aside.remove(conn)
            };
        }
        let (_, value) = slot.take()?;
        self.in_slots -= 1;
        if !self.aside.is_empty() {
            let next = self
                .aside
                .keys()
                .find(|id| id.node().index() == index)
                .copied();
            if let Some(next) = next
                && let Some(moved) = self.aside.remove(&next)
            {
                self.slots[index] = Some((next, moved));
                self.in_slots += 1;
            }
        }
        Some(value)
    }

    /// How many entries there are.
    pub(crate) fn len(&self) -> usize {
        self.in_slots + self.aside.len()
    }

    /// How many entries [`pick_into`](Self::pick_into) steps through at most: every slot, empty or
    /// not (one per node index up to the highest that had a connection), and those aside.
    pub(crate) fn span(&self) -> usize {
        self.slots.len() + self.aside.len()
    }

    /// Appends to `out` the id of every entry that `pick` chooses: those in slots first, in
    /// index order, then those aside. (An iterator that merged the two in id order cost about
    /// 67 instructions per wake of a lone connection, this 56, and 50 once the empty map's
    /// iteration is skipped: BENCHMARKS.md, "A read wake with few connections".)
    #[inline]
    pub(crate) fn pick_into(&self, out: &mut Vec<ConnId>, mut pick: impl FnMut(&T) -> bool) {
        for (id, value) in self.slots.iter().flatten() {
            if pick(value) {
                out.push(*id);
            }
        }
        if self.aside.is_empty() {
            // The usual case: setting up the map's iteration cost more than the slots' loop.
            return;
        }
        for (id, value) in &self.aside {
            if pick(value) {
                out.push(*id);
            }
        }
    }

    /// Removes every entry, dropping those in slots first (in index order), then those aside.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.in_slots = 0;
        self.aside.clear();
    }
}

#[cfg(test)]
mod tests {
    use keepwire_proto::{Config, Failure, Instant, NodeId, Pool};

    use super::*;

    /// Connection ids from a pool (nothing else makes them).
    struct Ids {
        pool: Pool,
        now: Instant,
        port: u16,
    }

    impl Ids {
        fn new() -> Self {
            let now = Instant::from_secs(1);
            let pool = Pool::new(Config::default(), now).unwrap();
            Self { pool, now, port: 1 }
        }

        fn node(&mut self) -> NodeId {
            self.port += 1;
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
            self.pool.add_node(self.now, addr)
        }

        /// A new connection of `node` (its connect fails at once, to leave room for the next).
        fn conn(&mut self, node: NodeId) -> ConnId {
            for _ in 0..1000 {
                self.now = self.now + std::time::Duration::from_secs(60);
                self.pool.handle_timeout(self.now);
                let _ = self.pool.connect(self.now, node);
                if let Some(conn) = self.pool.current_conn(node) {
                    let _ = self
                        .pool
                        .handle_connect_failed(self.now, conn, Failure::Unreachable);
                    return conn;
                }
            }
            panic!("no connection to {node:?}");
        }
    }

    /// Two ids of one node's connections, and one of a node at the same index after the
    /// first node was removed; `others` more nodes are added first, one connection each.
    fn same_index(others: usize) -> ((ConnId, ConnId, ConnId), Vec<ConnId>) {
        let mut ids = Ids::new();
        let node = ids.node();
        let nodes: Vec<_> = (0..others).map(|_| ids.node()).collect();
        let others: Vec<_> = nodes.into_iter().map(|node| ids.conn(node)).collect();
        let (a, b) = (ids.conn(node), ids.conn(node));
        ids.pool.remove_node(ids.now, node).unwrap();
        let reused = ids.node();
        let c = ids.conn(reused);
        assert_eq!(a.node(), b.node());
        assert_eq!(c.node().index(), a.node().index());
        let mut all: Vec<_> = [a, b, c]
            .into_iter()
            .chain(others.iter().copied())
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 3 + others.len(), "distinct ids");
        ((a, b, c), others)
    }

    /// Every entry, in id order (picked, then sorted).
    fn entries(table: &ConnTable<&'static str>) -> Vec<(ConnId, &'static str)> {
        let mut ids = Vec::new();
        table.pick_into(&mut ids, |_| true);
        ids.sort();
        ids.into_iter()
            .map(|id| (id, *table.get(&id).unwrap()))
            .collect()
    }

    #[test]
    fn two_connections_of_one_node_are_kept_apart() {
        let ((a, b, _), _) = same_index(0);
        let mut table = ConnTable::default();
        assert_eq!(table.insert(a, "a"), None);
        assert_eq!(table.insert(b, "b"), None);
        assert_eq!(table.len(), 2);
        assert_eq!((table.get(&a), table.get(&b)), (Some(&"a"), Some(&"b")));
        *table.get_mut(&b).unwrap() = "b2";
        assert_eq!(table.insert(a, "a2"), Some("a"), "replaced, not added");
        assert_eq!(table.len(), 2);
        assert_eq!((table.get(&a), table.get(&b)), (Some(&"a2"), Some(&"b2")));

        assert_eq!(table.remove(&a), Some("a2"));
        assert_eq!(table.remove(&a), None);
        assert_eq!((table.get(&a), table.get(&b)), (None, Some(&"b2")));
        assert_eq!(table.len(), 1);
        assert!(table.aside.is_empty(), "b moved into the slot a left");
        assert_eq!(table.remove(&b), Some("b2"));
        assert_eq!(table.len(), 0);
        assert_eq!(table.get(&b), None);
    }

    #[test]
    fn removing_an_entry_aside_leaves_the_slot_alone() {
        let ((a, b, c), _) = same_index(0);
        let mut table = ConnTable::default();
        table.insert(a, "a");
        table.insert(b, "b");
        table.insert(c, "c");
        assert_eq!(table.remove(&b), Some("b"));
        assert_eq!(table.remove(&c), Some("c"));
        assert_eq!(table.len(), 1);
        assert_eq!(table.get(&a), Some(&"a"));
        assert_eq!((table.get(&b), table.get(&c)), (None, None));
    }

    #[test]
    fn stale_ids_are_not_found() {
        let ((a, b, c), _) = same_index(0);
        let mut table = ConnTable::default();
        table.insert(b, "b");
        assert_eq!(table.get(&a), None, "an older connection of the node");
        assert_eq!(
            table.get(&c),
            None,
            "a connection of the node now at the index"
        );
        assert_eq!(table.get_mut(&a), None);
        assert_eq!(table.remove(&a), None);
        assert_eq!(table.remove(&c), None);
        assert_eq!(table.len(), 1);
        // The same with an entry aside, and an index past the slots.
        table.insert(c, "c");
        assert_eq!(table.get(&a), None);
        assert_eq!(table.remove(&a), None);
        let mut ids = Ids::new();
        let (first, second) = (ids.node(), ids.node());
        let (first, second) = (ids.conn(first), ids.conn(second));
        let mut small = ConnTable::default();
        small.insert(first, "first");
        assert_eq!(small.get(&second), None);
        assert_eq!(small.remove(&second), None);
    }

    #[test]
    fn picking_covers_every_entry_once() {
        let ((a, b, c), others) = same_index(4);
        let mut table = ConnTable::default();
        let mut map = BTreeMap::new();
        // Out of order, and the reused node's connection first: it takes the slot, and the
        // removed node's two, which come before it, go aside.
        let (o0, o1, o2, o3) = (others[0], others[1], others[2], others[3]);
        let inserts = [(o3, "o3"), (c, "c"), (o1, "o1"), (b, "b"), (a, "a")];
        for (id, name) in inserts.into_iter().chain([(o0, "o0"), (o2, "o2")]) {
            table.insert(id, name);
            map.insert(id, name);
            let expected: Vec<_> = map.iter().map(|(id, value)| (*id, *value)).collect();
            assert_eq!(entries(&table), expected);
            assert_eq!(table.len(), map.len());
        }
        assert_eq!(table.aside.len(), 2, "the picking covered entries aside");
        for id in [b, o2, c, a, o3] {
            assert_eq!(table.remove(&id), map.remove(&id));
            let expected: Vec<_> = map.iter().map(|(id, value)| (*id, *value)).collect();
            assert_eq!(entries(&table), expected);
            assert_eq!(table.len(), map.len());
        }
    }

    #[test]
    fn picking_covers_the_slots_and_those_aside_and_span_counts_both() {
        let ((a, b, c), others) = same_index(2);
        let mut table = ConnTable::default();
        assert_eq!(table.span(), 0);
        // `c` takes index 0's slot, `a` and `b` go aside; `others` take slots of their own.
        for (id, n) in [(c, 3), (a, 1), (b, 2), (others[0], 4), (others[1], 5)] {
            table.insert(id, n);
        }
        assert_eq!(table.aside.len(), 2);
        assert_eq!(table.span(), table.slots.len() + 2);
        let mut picked = Vec::new();
        table.pick_into(&mut picked, |n| n % 2 == 1);
        picked.sort();
        let mut odd = vec![a, c, others[1]];
        odd.sort();
        assert_eq!(picked, odd);
        // An emptied slot still counts: the picking steps over it.
        let span = table.span();
        table.remove(&others[1]);
        assert_eq!(table.span(), span);
    }

    #[test]
    fn clear_empties_the_table() {
        let ((a, b, c), _) = same_index(0);
        let mut table = ConnTable::default();
        for (id, name) in [(a, "a"), (b, "b"), (c, "c")] {
            table.insert(id, name);
        }
        table.clear();
        assert_eq!(table.len(), 0);
        assert_eq!(entries(&table), []);
        assert_eq!(
            (table.get(&a), table.get(&b), table.get(&c)),
            (None, None, None)
        );
        assert_eq!(table.insert(b, "b"), None);
        assert_eq!(table.len(), 1);
        assert_eq!(entries(&table), [(b, "b")]);
    }
}
