//! The callers waiting for their requests' outcomes, in a table indexed by each request's slot
//! in the pool ([`RequestId::index`]) instead of a hash map: one array write to file a caller
//! and one read to find it.

use std::mem;

use keepwire_proto::RequestId;

use crate::sync::IdMap;

/// Each live request's waiting caller, by request slot.
#[derive(Debug)]
pub(super) struct Waiters<W> {
    slots: Vec<Option<(RequestId, W)>>,
    /// Callers whose slot a newer request took before their own request's end was seen. The
    /// pool reuses a slot once it is done with a request, and the driver settles every
    /// input's events before the next input, which should leave this empty; if it does not,
    /// nothing is lost.
    displaced: IdMap<RequestId, W>,
    len: usize,
}

impl<W> Default for Waiters<W> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            displaced: IdMap::default(),
            len: 0,
        }
    }
}

impl<W> Waiters<W> {
    /// Files `waiter` for the request `id`. Inlined into the submit (a call saved as many
    /// registers as the filing itself costs): the table's growth and a displaced caller are
    /// out of line.
    #[inline]
    pub(super) fn insert(&mut self, id: RequestId, waiter: W) {
        let index = id.index();
        if index >= self.slots.len() {
            self.grow(index);
        }
        if let Some((old, displaced)) = self.slots[index].replace((id, waiter)) {
            self.displace(old, displaced);
        }
        self.len += 1;
    }

    /// Makes room in the table for slot `index`.
    #[inline(never)]
    fn grow(&mut self, index: usize) {
        self.slots.resize_with(index + 1, || None);
    }

    /// Keeps aside the caller of `old`, whose slot a newer request took.
    #[inline(never)]
    fn displace(&mut self, old: RequestId, waiter: W) {
        self.displaced.insert(old, waiter);
    }

    /// Takes the caller waiting for `id`, if any.
    pub(super) fn remove(&mut self, id: RequestId) -> Option<W> {
        let slot = self.slots.get_mut(id.index())?;
        if slot.as_ref().is_some_and(|(held, _)| *held == id) {
            self.len -= 1;
            return slot.take().map(|(_, waiter)| waiter);
        }
        if self.displaced.is_empty() {
            return None;
        }
        let waiter = self.displaced.remove(&id)?;
        self.len -= 1;
        Some(waiter)
    }

    /// Callers waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Takes every waiting caller.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = W> + '_ {
        self.len = 0;
        let displaced = mem::take(&mut self.displaced).into_values();
        let filed = self.slots.iter_mut().filter_map(|slot| slot.take());
        filed.map(|(_, waiter)| waiter).chain(displaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(slot: u64, generation: u64) -> RequestId {
        RequestId::from_u64((generation << 32) | slot)
    }

    #[test]
    fn a_waiter_is_found_by_its_own_id_only() {
        let mut w = Waiters::default();
        w.insert(id(3, 0), "a");
        w.insert(id(0, 0), "b");
        assert_eq!(w.len(), 2);
        assert_eq!(w.remove(id(3, 1)), None, "another generation of the slot");
        assert_eq!(w.remove(id(7, 0)), None, "a slot beyond the table");
        assert_eq!(w.remove(id(3, 0)), Some("a"));
        assert_eq!(w.remove(id(3, 0)), None, "taken once");
        assert_eq!(w.len(), 1);
        assert_eq!(w.drain().collect::<Vec<_>>(), ["b"]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.remove(id(0, 0)), None);
    }

    #[test]
    fn a_waiter_whose_slot_is_taken_again_is_kept_aside() {
        let mut w = Waiters::default();
        w.insert(id(2, 0), "old");
        w.insert(id(2, 1), "new");
        assert_eq!(w.len(), 2);
        assert_eq!(w.remove(id(2, 0)), Some("old"));
        assert_eq!(w.remove(id(2, 1)), Some("new"));
        assert_eq!(w.len(), 0);
        w.insert(id(5, 0), "x");
        w.insert(id(5, 1), "y");
        let mut all: Vec<_> = w.drain().collect();
        all.sort_unstable();
        assert_eq!(all, ["x", "y"]);
        assert_eq!(
            (w.len(), w.remove(id(5, 0)), w.remove(id(5, 1))),
            (0, None, None)
        );
    }
}
