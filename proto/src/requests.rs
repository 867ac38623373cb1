//! The request table: a slab of live requests keyed by [`RequestId`] (slot + generation), so a
//! lookup is O(1) and a finished request's slot is reused without allocating; and each node's
//! list of the requests awaiting their responses ([`Awaited`]), linked through their slots.

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
    /// Fully written on connection generation `conn`; awaiting the response, in its node's
    /// [`Awaited`] list at `links`.
    Sent { conn: u32, links: Links },
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
    /// Whether the request is fully written on connection generation `conn`.
    pub(crate) fn sent_on(&self, conn: u32) -> bool {
        matches!(self.stage, Stage::Sent { conn: c, .. } if c == conn)
    }

    /// Whether the application still waits for this request: not ended, and not a heartbeat
    /// (which ends silently). Its response is then the application's.
    pub(crate) fn awaited(&self) -> bool {
        !self.ended && !self.heartbeat
    }
}

/// A node's requests fully written on its connection and awaiting their responses, oldest
/// first: the order an in-order protocol answers them, and the requests a close ends. The
/// list is linked through the requests' slots ([`Stage::Sent`]'s [`Links`]), so a request
/// answered anywhere in it, not only at the front, leaves at once: the list holds exactly the
/// node's requests in `Stage::Sent`, with nothing to skip or compact.
///
/// Every request in the list is live, so a slot must leave its list before it is freed
/// ([`Requests::leave`]), or the list be taken whole ([`Requests::take_awaited`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Awaited {
    /// The oldest request's slot, or [`NIL`].
    head: u32,
    /// The newest request's slot, or [`NIL`].
    tail: u32,
}

impl Awaited {
    pub(crate) const fn new() -> Self {
        Self {
            head: NIL,
            tail: NIL,
        }
    }
}

/// A request's neighbours in its node's [`Awaited`] list: the slots of the requests written
/// just before and just after it on the connection, or [`NIL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Links {
    prev: u32,
    next: u32,
}

/// No slot: the end of an [`Awaited`] list.
const NIL: u32 = u32::MAX;

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
        crate::hint::cold_path(); // a new slot: only while the table grows
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
        crate::hint::push(&mut self.free, id.slot() as u32);
    }

    /// The key of the slot of `id` once freed: the next id of the slot (a new generation),
    /// marked free.
    #[inline]
    fn freed_key(id: RequestId) -> u64 {
        RequestId::new(id.slot() as u32, id.generation().wrapping_add(1)).0 ^ FREED
    }

    /// Marks the live request `id` fully written on connection generation `conn` and puts it
    /// at the back of `list`; nothing if `id` is not live.
    #[inline]
    pub(crate) fn await_response(&mut self, list: &mut Awaited, id: RequestId, conn: u32) {
        let Some(slot) = self.slots.get_mut(id.slot()).filter(|s| s.key == id.0) else {
            return;
        };
        let links = Links {
            prev: list.tail,
            next: NIL,
        };
        slot.request.stage = Stage::Sent { conn, links };
        let at = id.slot() as u32;
        match list.tail {
            NIL => list.head = at,
            tail => {
                if let Some(links) = self.links_mut(tail) {
                    links.next = at;
                }
            }
        }
        list.tail = at;
    }

    /// Takes the request at `links` out of `list` (the [`Links`] its [`Stage::Sent`] holds);
    /// its slot keeps them, stale, until it is freed.
    #[inline]
    pub(crate) fn leave(&mut self, list: &mut Awaited, links: Links) {
        match links.prev {
            NIL => list.head = links.next,
            prev => {
                // Not the oldest: answered out of order, the unusual case in either kind of
                // protocol.
                crate::hint::cold_path();
                if let Some(p) = self.links_mut(prev) {
                    p.next = links.next;
                }
            }
        }
        match links.next {
            NIL => list.tail = links.prev,
            next => {
                if let Some(n) = self.links_mut(next) {
                    n.prev = links.prev;
                }
            }
        }
    }

    /// The oldest request of `list`.
    #[inline]
    pub(crate) fn front(&self, list: &Awaited) -> Option<(RequestId, &Request)> {
        let slot = self.slots.get(list.head as usize)?;
        Some((RequestId(slot.key), &slot.request))
    }

    /// The requests of `list`, oldest first.
    pub(crate) fn awaited(&self, list: &Awaited) -> impl Iterator<Item = RequestId> + '_ {
        let mut at = list.head;
        core::iter::from_fn(move || {
            let slot = self.slots.get(at as usize)?;
            at = match slot.request.stage {
                Stage::Sent { links, .. } => links.next,
                _ => NIL,
            };
            Some(RequestId(slot.key))
        })
    }

    /// Empties `list`: its requests, oldest first, still live and `Stage::Sent` (for the
    /// caller to end and free).
    pub(crate) fn take_awaited(&mut self, list: &mut Awaited) -> Vec<RequestId> {
        let ids = self.awaited(list).collect();
        *list = Awaited::new();
        ids
    }

    /// The links of the request in `slot`, which an [`Awaited`] list holds (so it is
    /// `Stage::Sent`: `None` only if the list were broken).
    #[inline(always)]
    fn links_mut(&mut self, slot: u32) -> Option<&mut Links> {
        let stage = &mut self.slots.get_mut(slot as usize)?.request.stage;
        debug_assert!(matches!(stage, Stage::Sent { .. }), "awaited: {stage:?}");
        match stage {
            Stage::Sent { links, .. } => Some(links),
            _ => None,
        }
    }

    /// Checks `list` against the table: every request in it is live, `Stage::Sent` on
    /// connection generation `conn` and `node`'s, linked both ways. Its length.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn check_awaited(
        &self,
        list: &Awaited,
        node: NodeId,
        conn: Option<u32>,
    ) -> Result<usize, alloc::string::String> {
        use alloc::format;
        let (mut len, mut prev, mut at) = (0usize, NIL, list.head);
        while at != NIL {
            let Some(slot) = self.slots.get(at as usize) else {
                return Err(format!("{node:?}: awaited slot {at} out of the table"));
            };
            let id = RequestId(slot.key);
            if id.slot() != at as usize || slot.request.node != node {
                return Err(format!(
                    "{node:?}: awaited slot {at} is free or not its own"
                ));
            }
            let Stage::Sent { conn: on, links } = slot.request.stage else {
                return Err(format!("{node:?}: awaited {id:?} is not sent"));
            };
            if Some(on) != conn || links.prev != prev {
                return Err(format!("{node:?}: awaited {id:?} on {on}, links {links:?}"));
            }
            // Each request names the one before it: a walk that came back to one it had
            // passed would arrive from another, so it ends.
            len += 1;
            (prev, at) = (at, links.next);
        }
        if list.tail != prev {
            return Err(format!("{node:?}: awaited tail {} != {prev}", list.tail));
        }
        Ok(len)
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

    /// Writes, answers anywhere in the list, in-order answers and takes, against a
    /// `VecDeque` doing the same: the list holds the same requests in the same order, and
    /// passes its check, after every step.
    #[test]
    fn an_awaited_list_keeps_the_written_requests_in_order_as_a_vec_deque_does() {
        use crate::tests::xorshift;
        use alloc::collections::VecDeque;
        let node = NodeId::new(0, 0);
        let mut t = Requests::default();
        let mut list = Awaited::new();
        let mut model = VecDeque::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u32 {
            xorshift(&mut x);
            match x % 8 {
                0..=3 => {
                    let id = t.insert(request());
                    assert!(t.get(id).is_some_and(|r| !r.sent_on(7)));
                    t.await_response(&mut list, id, 7);
                    assert!(t.get(id).is_some_and(|r| r.sent_on(7) && !r.sent_on(8)));
                    model.push_back(id);
                }
                4 | 5 if !model.is_empty() => {
                    let id = model.remove((x >> 8) as usize % model.len()).unwrap();
                    let Stage::Sent { links, .. } = t.get(id).unwrap().stage else {
                        panic!("step {step}: {id:?} not sent");
                    };
                    t.leave(&mut list, links);
                    t.remove(id).unwrap();
                }
                6 => {
                    let front = t.front(&list).map(|(id, r)| (id, r.stage));
                    assert_eq!(front.map(|(id, _)| id), model.pop_front(), "step {step}");
                    if let Some((id, Stage::Sent { links, .. })) = front {
                        t.leave(&mut list, links);
                        t.remove(id).unwrap();
                    }
                }
                7 if x % 64 == 7 => {
                    let taken = t.take_awaited(&mut list);
                    assert!(taken.iter().eq(model.iter()), "step {step}");
                    for id in taken {
                        t.remove(id).unwrap();
                    }
                    model.clear();
                }
                _ => {}
            }
            assert!(t.awaited(&list).eq(model.iter().copied()), "step {step}");
            assert_eq!(t.check_awaited(&list, node, Some(7)), Ok(model.len()));
        }
    }

    /// The links fit in the room `Stage` had: linking the list grew no slot, and a node's
    /// list is two slot numbers (BENCHMARKS.md, "The awaited list, linked through the request
    /// table").
    #[test]
    fn the_links_cost_a_slot_nothing_and_a_node_two_slot_numbers() {
        assert_eq!(size_of::<Stage>(), 16);
        assert_eq!(size_of::<Slot>(), 48);
        assert_eq!(size_of::<Awaited>(), 8);
    }

    /// The list's check notices each way a list can be broken.
    #[test]
    fn a_broken_awaited_list_fails_its_check() {
        let node = NodeId::new(0, 0);
        let written = |t: &mut Requests, list: &mut Awaited| {
            let id = t.insert(request());
            t.await_response(list, id, 3);
            id
        };
        let mut t = Requests::default();
        let mut list = Awaited::new();
        let [a, b, _] = [0; 3].map(|_| written(&mut t, &mut list));
        assert_eq!(t.check_awaited(&list, node, Some(3)), Ok(3));
        let fails = |t: &Requests, list: &Awaited, conn: Option<u32>, what: &str| {
            let err = t.check_awaited(list, node, conn).unwrap_err();
            assert!(err.contains(what), "{err}");
        };
        // Another connection's, or another node's.
        fails(&t, &list, Some(4), "on 3");
        fails(&t, &list, None, "on 3");
        let other = t
            .check_awaited(&list, NodeId::new(1, 0), Some(3))
            .unwrap_err();
        assert!(other.contains("not its own"), "{other}");
        // A tail that is not the last one linked.
        let short = Awaited {
            tail: b.slot() as u32,
            ..list
        };
        fails(&t, &short, Some(3), "tail");
        // A request freed without leaving the list.
        t.remove(b).unwrap();
        fails(&t, &list, Some(3), "free");
        let b = t.insert(request());
        fails(&t, &list, Some(3), "not sent");
        // Links that disagree: a loop back to the front says it comes after its last.
        t.get_mut(b).unwrap().stage = Stage::Sent {
            conn: 3,
            links: Links {
                prev: a.slot() as u32,
                next: a.slot() as u32,
            },
        };
        fails(&t, &list, Some(3), "links");
        // Out of the table.
        let beyond = Awaited { head: 99, tail: 99 };
        fails(&t, &beyond, Some(3), "out of the table");
    }
}
