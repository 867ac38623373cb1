//! The request table: a slab of live requests keyed by [`RequestId`] (slot + generation), so a
//! lookup is O(1) and a finished request's slot is reused without allocating.

use alloc::vec::Vec;

use crate::ids::{NodeId, RequestId};
use crate::time::Instant;

/// Where a live request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// In its node's outbound queue as frame `seq`, not yet written whole: untouched, handed
    /// to the adapter or partly written, which the frame itself says
    /// ([`Frame::sent`](crate::outbound::Frame::sent)).
    Queued { seq: u64 },
    /// Fully written on connection generation `conn`; awaiting the response.
    Sent { conn: u32 },
    /// A heartbeat whose frame the adapter has not handed over yet.
    Reserved,
}

/// A live request. A request that has *ended* (its [`Event::RequestDone`] was emitted) may
/// still hold its slot while its frame finishes writing or a late response may arrive:
/// `ended` says so.
///
/// [`Event::RequestDone`]: crate::Event::RequestDone
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) node: NodeId,
    pub(crate) deadline: Instant,
    pub(crate) stage: Stage,
    /// Queued once more after its first connection failed or was evicted unsent.
    pub(crate) retried: bool,
    /// Submitted to a named node (a transparent retry stays on it).
    pub(crate) pinned: bool,
    /// A heartbeat: not counted in its node's requests, never reported with
    /// [`Event::RequestDone`](crate::Event::RequestDone); `ended` once it ends silently.
    pub(crate) heartbeat: bool,
    pub(crate) ended: bool,
}

impl Request {
    /// Whether the application still waits for this request: not ended, and not a heartbeat
    /// (which ends silently). Its response is then the application's.
    pub(crate) fn awaited(&self) -> bool {
        !self.ended && !self.heartbeat
    }
}

/// A slot of the table. A freed slot keeps its last request's fields (its `key` says it is
/// free), so taking a request out moves nothing.
#[derive(Debug)]
struct Slot {
    /// The id of the slot's request while it is live. Once it is freed, the id its next
    /// request will have with the slot's bits flipped ([`FREED`]): an id's slot bits are its
    /// slot's, so no id matches a free slot. A look-up compares one word with the id, where a
    /// live flag and a generation took two tests.
    key: u64,
    request: Request,
}

/// Flips the slot bits of a freed slot's key (see [`Slot::key`]).
const FREED: u64 = 0xFFFF_FFFF;

#[derive(Debug, Default)]
pub(crate) struct Requests {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Requests {
    /// The id the next [`Requests::insert`] returns.
    pub(crate) fn next_id(&self) -> RequestId {
        match self.free.last() {
            Some(&slot) => RequestId(self.slots[slot as usize].key ^ FREED),
            None => RequestId::new(self.slots.len() as u32, 0),
        }
    }

    /// Puts `request` in a free slot (a freed one first): its id. `#[inline]`: a submit's
    /// enqueue, inlined into `Pool::submit`, made it a call with the request on the stack.
    #[inline]
    pub(crate) fn insert(&mut self, request: Request) -> RequestId {
        if let Some(slot) = self.free.pop() {
            let entry = &mut self.slots[slot as usize];
            entry.request = request;
            entry.key ^= FREED;
            return RequestId(entry.key);
        }
        let id = RequestId::new(self.slots.len() as u32, 0);
        self.slots.push(Slot { key: id.0, request });
        id
    }

    pub(crate) fn get(&self, id: RequestId) -> Option<&Request> {
        let slot = self.slots.get(id.slot())?;
        (slot.key == id.0).then_some(&slot.request)
    }

    pub(crate) fn get_mut(&mut self, id: RequestId) -> Option<&mut Request> {
        let slot = self.slots.get_mut(id.slot())?;
        (slot.key == id.0).then_some(&mut slot.request)
    }

    /// Frees the slot of `id`; the id is never valid again.
    pub(crate) fn remove(&mut self, id: RequestId) -> Option<Request> {
        let slot = self.slots.get_mut(id.slot())?;
        if slot.key != id.0 {
            return None;
        }
        slot.key = Self::freed_key(id);
        self.free.push(id.slot() as u32);
        Some(slot.request)
    }

    /// Frees the slot of `id`, which [`Requests::get`] has just found live: what
    /// [`Requests::remove`] does without looking again. Inlined into a response, its one
    /// caller on the request path, where the slot was just read.
    #[inline]
    pub(crate) fn free_found(&mut self, id: RequestId) {
        let slot = &mut self.slots[id.slot()];
        debug_assert_eq!(slot.key, id.0, "{id:?} is not live");
        slot.key = Self::freed_key(id);
        self.free.push(id.slot() as u32);
    }

    /// The key of the slot of `id` once freed: the next id of the slot (a new generation),
    /// marked free.
    #[inline]
    fn freed_key(id: RequestId) -> u64 {
        RequestId::new(id.slot() as u32, id.generation().wrapping_add(1)).0 ^ FREED
    }

    /// Every live request, for invariant checks.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (RequestId, &Request)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, s)| RequestId(s.key).slot() == *i)
            .map(|(_, s)| (RequestId(s.key), &s.request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            node: NodeId::new(0, 0),
            deadline: Instant::ZERO,
            stage: Stage::Queued { seq: 0 },
            retried: false,
            pinned: false,
            heartbeat: false,
            ended: false,
        }
    }

    #[test]
    fn ids_are_predicted_unique_and_never_reused() {
        let mut t = Requests::default();
        let predicted = t.next_id();
        let a = t.insert(request());
        assert_eq!(a, predicted);
        let b = t.insert(request());
        assert_ne!(a, b);
        t.remove(a).unwrap();
        assert!(t.get(a).is_none());
        let predicted = t.next_id();
        let c = t.insert(request());
        assert_eq!(c, predicted);
        assert_ne!(a, c, "a reused slot gets a new generation");
        assert!(t.remove(a).is_none(), "a stale id frees nothing");
        assert_eq!(t.iter().count(), 2);
    }

    #[test]
    fn a_stale_id_or_a_freed_slot_finds_nothing() {
        let mut t = Requests::default();
        let a = t.insert(request());
        t.remove(a).unwrap();
        // The freed slot still holds the fields of its last request, and the next id for it
        // is predicted: neither makes it findable before it is filled again.
        let next = t.next_id();
        assert_eq!(next.slot(), a.slot());
        assert!(t.get(next).is_none() && t.get_mut(next).is_none());
        assert!(t.remove(next).is_none());
        let c = t.insert(request());
        assert_eq!(c, next);
        // The slot is live again, under its new generation only.
        assert!(t.get(a).is_none() && t.get_mut(a).is_none());
        assert!(t.get(c).is_some() && t.get_mut(c).is_some());
        assert_eq!(t.iter().map(|(id, _)| id).collect::<Vec<_>>(), [c]);
    }
}
