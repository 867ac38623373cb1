//! The deadline index: 4-ary heaps of `(instant, timer)` entries indexed by key (one for the
//! nodes' timers, one for request deadlines), so scheduling, cancelling, firing and finding the
//! earliest deadline stay O(log n) however many nodes and requests there are, beside a FIFO
//! lane that takes request deadlines arriving in order (one timeout for every request) in O(1)
//! and a stack that takes, in O(1), one earlier than all others (a short timeout among long
//! ones), and beside the nodes' heap one timer armed from stopped (a request's write timer,
//! usually), which its write report stops again with no heap operation, and a lane for the
//! write timers of further connections, which their write reports stop in O(1) too.
//! Due entries come out by instant; at one instant node timers first (see [`TimerHeap`] for the
//! whole order).
//!
//! A node's timers live in a [`TimerTable`] keyed by [`NodeTimer`] (as in quinn-proto). An
//! entry in the index is *valid* only while the table (or the request) still holds the same
//! instant. Re-arming a timer moves its entry; stopping a timer or ending a request cancels
//! its entry at once, so the index holds exactly the armed timers and the live deadlines (the
//! pool's consistency check says so) and [`Pool::poll_timeout`](crate::Pool::poll_timeout)
//! is a pure, exact peek.

use alloc::vec::Vec;

use self::keyed::{HeapKey, KeyedHeap, cell_mut};
use self::lane::Lane;
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
/// slot), so it holds at most one entry per slot: [`schedule_node`](Self::schedule_node) moves
/// an existing entry (a re-armed timer) instead of adding another, and [`cancel`](Self::cancel)
/// takes a stopped timer or an ended request out at once, so a new request's slot holds none
/// ([`schedule_new_request`](Self::schedule_new_request); the test-only `schedule_request`
/// also moves the entry of a slot reused by a newer generation). Its size is the number of armed
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
/// **The early stack.** A deadline that does not fit the lane but is earlier than every other
/// request deadline goes on top of the early stack instead of the request heap: a short
/// timeout among long ones, which comes off the top again in O(1) where the heap would sift it
/// up to its top and a replacement down again. The stack holds
/// what the request heap would hold otherwise, and is merged with it in the same key order
/// (instant, then id): together they give exactly what one request heap gave. Its entries fall
/// strictly from the bottom to the top, its top is always live, and one ended below the top
/// waits, dead, as in the lane.
///
/// **The fresh entry.** A node timer armed from stopped while no other is held this way is
/// held beside the node heap, not pushed into it: the write timer, armed by a request on an
/// idle connection and stopped again by its write report, most of the time. Stopping it
/// again takes no heap operation. With it taken, the next ones go into the heap, so a round
/// that arms the write timers of many connections before their reports pays what it did
/// before, unless the write lane takes them. It and the heap's top are compared in key
/// order, as one heap's entries are.
///
/// **The write lane.** A round over many connections arms each one's write timer, and their
/// write reports stop them again, in the same order (the order the connections were handed
/// out). A write timer armed from stopped while the fresh entry is taken goes to the back of
/// the write lane if it is no earlier than the lane's last entry, which it always is when the
/// clock has moved on since, and is when a round arms its connections at one instant in any
/// order. The usual stop takes the lane's front in O(1), where the node heap sifted a
/// replacement down from its top (about 300 instructions per request over 64 connections,
/// 170 when the connections were armed out of node order). A write timer earlier than the
/// lane's last entry (a re-arm to an earlier instant) goes into the node heap. Its entries
/// are live or dead, compacted as the request lane's are ([`Lane`]).
///
/// The lane is sorted by instant; at one instant its entries are in the order they were
/// armed, which is key order (node, then timer) unless a round armed them out of node order:
/// the lane is then marked unsorted. Sorted, its front is its least entry in key order.
/// Marked unsorted, [`Self::pop`] sorts it in key order before taking an entry at its front's
/// instant (an O(n log n) cost, once, that a firing timer pays: a write timeout, which closes
/// its connection, or another timer due at that instant), and [`Self::peek`] finds its least
/// entry at its front's instant by a scan.
/// Either way its least entry is compared with the node heap's top and the fresh entry in key
/// order: the three give exactly what one node heap gave.
///
/// **Order.** Entries come out by instant. At one instant the node timers come first, in key
/// order, wherever they are held; then the request heap's and the early stack's deadlines, in
/// key order; then the lane's, in the order they were scheduled. (Node timers sort before
/// request deadlines in [`TimerKey`]'s order too, so this is the order one heap of both
/// gave.) Every choice depends only on the calls made, so a replay gives the same order.
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    /// A node timer armed from stopped while this was empty, held beside the node heap rather
    /// than in it (its slot's cell stays [`ABSENT`]): see **The fresh entry** above.
    fresh: Option<(Instant, (NodeId, NodeTimer))>,
    /// The nodes' other armed timers; positions at `node slot × timers + timer`.
    nodes: KeyedHeap<(NodeId, NodeTimer)>,
    /// Request deadlines that fit neither the lane nor the early stack. Its position table is
    /// per request slot and also records the lane's and the stack's entries: a heap position,
    /// [`IN_LANE`] with the entry's lane sequence number, [`IN_EARLY`] with its index in the
    /// stack, or [`ABSENT`].
    requests: KeyedHeap<RequestId>,
    /// Request deadlines by instant (submit order among equal ones), some of them dead.
    lane: Lane<RequestId>,
    /// Write timers armed from stopped beside a taken fresh entry, by instant, some of them
    /// dead: see **The write lane** above. Their cells are in the node heap's table.
    write_lane: Lane<(NodeId, NodeTimer)>,
    /// Whether two neighbours in the write lane may be out of key order (armed at one
    /// instant out of node order): its front is then not always its least entry, and
    /// [`Self::pop`] sorts it first. Only that sort clears it: an emptied lane keeps it, to
    /// spare the usual arm and stop a store, at the cost of one needless sort.
    write_lane_unsorted: bool,
    /// Request deadlines each earlier than every entry below it (the top, last, is the
    /// earliest), some of them dead (see [`Self::early_live_at`]).
    early: Vec<(Instant, RequestId)>,
    /// Live entries in the early stack.
    early_live: usize,
}

/// No entry for this slot.
const ABSENT: u64 = u64::MAX;

/// Marks a request slot's cell as holding a lane sequence number, not a heap position.
const IN_LANE: u64 = 1 << 63;

/// Marks a request slot's cell as holding an index in the early stack. Lane sequence numbers
/// stay below it, so no lane cell has this bit.
const IN_EARLY: u64 = 1 << 62;

/// Dead entries the lane (or the early stack) may hold beyond as many as its live ones before
/// it is compacted.
const LANE_SLACK: usize = 64;

/// Which part of the index holds its earliest entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Fresh,
    Nodes,
    Requests,
    Early,
    Lane,
    WriteLane,
}

impl TimerHeap {
    /// Schedules `key` at `at`, replacing the entry its slot holds (of this key or of an older
    /// generation of the slot). The pool's callers name the part: [`Self::schedule_node`],
    /// [`Self::schedule_stopped_node`], [`Self::schedule_new_request`].
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
        if let Some(fresh) = self.fresh.as_mut().filter(|f| f.1.cell() == key.cell()) {
            *fresh = (at, key);
            return;
        }
        match self.nodes.cell_of(key) {
            None | Some(ABSENT) => {}
            Some(cell) if cell & IN_LANE != 0 => {
                self.write_lane
                    .remove(&mut self.nodes, self.write_lane.index(cell));
            }
            Some(cell) => return self.nodes.replace(cell as usize, (at, key)),
        }
        self.place_node(at, node, timer);
    }

    /// Schedules `node`'s `timer`, which the node's own table says is stopped, at `at`: the
    /// index holds no entry for it then (as [`Self::cancel_armed_node`] relies on the other
    /// way round), so none is looked for, only checked by a debug assertion
    /// ([`Self::schedule_node`] looks). It becomes the fresh entry if there is none, else goes
    /// to the write lane or the node heap ([`Self::place_node`]). A submit's write timer takes
    /// it inlined ([`Self::schedule_stopped_node_inline`]).
    pub(crate) fn schedule_stopped_node(&mut self, at: Instant, node: NodeId, timer: NodeTimer) {
        self.schedule_stopped_node_inline(at, node, timer);
    }

    /// [`Self::schedule_stopped_node`], inlined: for a submit's write timer, in a caller that
    /// has saved its registers already. Only the fresh entry's store is inlined; the rest
    /// out of line takes the entry's parts in registers (an entry passed to it was built on
    /// the stack first).
    #[inline(always)]
    pub(crate) fn schedule_stopped_node_inline(
        &mut self,
        at: Instant,
        node: NodeId,
        timer: NodeTimer,
    ) {
        let key = (node, timer);
        debug_assert!(
            self.nodes.cell_of(key).is_none_or(|cell| cell == ABSENT)
                && self.fresh.is_none_or(|f| f.1.cell() != key.cell()),
            "{key:?} is stopped but in the index"
        );
        if self.fresh.is_none() {
            self.fresh = Some((at, key));
        } else {
            self.place_node(at, node, timer);
        }
    }

    /// Places the entry of `node`'s `timer`, whose slot holds none: at the back of the write
    /// lane if it is a write timer no earlier than the lane's last entry (noting when it comes
    /// before that entry in key order, at the same instant), else in the node heap (whose
    /// usual push, an entry that stays at the end, is inlined). Out of line, taking the
    /// entry's parts in registers.
    #[inline(never)]
    fn place_node(&mut self, at: Instant, node: NodeId, timer: NodeTimer) {
        let key = (node, timer);
        let laned = key.1 == NodeTimer::WriteTimeout
            && match self.write_lane.back() {
                None => true,
                Some(&(last, _)) if last < at => true,
                Some(&(last, last_key)) if last == at => {
                    self.write_lane_unsorted |= key < last_key;
                    true
                }
                Some(_) => false,
            };
        if laned {
            let cell = cell_mut(&mut self.nodes.at, key.cell());
            self.write_lane.push(cell, (at, key));
        } else if !self.nodes.push_in_place((at, key)) {
            self.nodes.make_room(key);
            self.nodes.push((at, key));
        }
    }

    /// Schedules request `id`'s deadline at `at`: at the back of the lane if no earlier than
    /// its last entry, else on top of the early stack if earlier than every other request
    /// deadline, else in the request heap. Moves the entry the slot holds, if any (the pool
    /// schedules only new requests, whose slots hold none: [`Self::schedule_new_request`]).
    #[cfg(test)]
    pub(crate) fn schedule_request(&mut self, at: Instant, id: RequestId) {
        match self.requests.cell_of(id) {
            None | Some(ABSENT) => {}
            Some(cell) if cell & IN_LANE != 0 => {
                self.lane.remove(&mut self.requests, self.lane.index(cell));
            }
            Some(cell) if cell & IN_EARLY != 0 => self.early_remove((cell & !IN_EARLY) as usize),
            Some(cell) => self.requests.remove_at(cell as usize),
        }
        self.schedule_new_request(at, id);
    }

    /// Schedules the deadline of request `id`, just inserted, at `at`: its slot holds no
    /// entry (the slot's last request's deadline was cancelled when it ended), so none is
    /// looked for, only checked by a debug assertion. The slot's cell is found (the table
    /// grown for a new slot) once, before the entry is placed: one bounds check, not one to
    /// grow the table and another to record the place.
    #[inline(always)]
    pub(crate) fn schedule_new_request(&mut self, at: Instant, id: RequestId) {
        let cell = cell_mut(&mut self.requests.at, id.slot());
        debug_assert_eq!(*cell, ABSENT, "{id:?} is new but scheduled");
        if self.lane.back().is_none_or(|&(last, _)| at >= last) {
            self.lane.push(cell, (at, id));
            return;
        }
        // Earlier than every request deadline in the index (the early stack's top, the request
        // heap's and the lane's fronts).
        let earlier = |top: Option<&(Instant, RequestId)>| top.is_none_or(|&(first, _)| at < first);
        if earlier(self.early.last())
            && earlier(self.requests.entries.first())
            && earlier(self.lane.front())
        {
            *cell = IN_EARLY | self.early.len() as u64;
            self.early.push((at, id));
            self.early_live += 1;
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
        if self.take_fresh(key) {
            return;
        }
        if let Some(cell) = self.nodes.cell_of(key).filter(|&c| c != ABSENT) {
            if cell & IN_LANE != 0 {
                self.write_lane.cancel(&mut self.nodes, cell, key);
            } else if self.nodes.entries[cell as usize].1 == key {
                self.nodes.take_out(cell as usize, key.cell());
            }
        }
    }

    /// Takes out the entry of `node`'s `timer`, which the node's own table says is armed: the
    /// index holds it then (a node arms and stops its timers only through the index, and a
    /// fired entry is stopped in the table as it comes off), so the slot's entry needs no
    /// check that it is this node's, only a debug assertion ([`Self::cancel_node`] checks).
    /// A write report stops the write timer this way on every request, inlined
    /// ([`Self::cancel_armed_node_inline`]).
    pub(crate) fn cancel_armed_node(&mut self, node: NodeId, timer: NodeTimer) {
        self.cancel_armed_node_inline(node, timer);
    }

    /// [`Self::cancel_armed_node`], inlined into the usual write report (the other callers
    /// call it out of line: inlined everywhere, it made a submit call out for its write
    /// timer).
    #[inline(always)]
    pub(crate) fn cancel_armed_node_inline(&mut self, node: NodeId, timer: NodeTimer) {
        let key = (node, timer);
        if self.take_fresh(key) {
            return;
        }
        let cell = self.nodes.at[key.cell()];
        debug_assert!(cell != ABSENT, "{key:?} is armed but not in the index");
        if cell & IN_LANE != 0 {
            return self.cancel_laned_node(cell, node, timer);
        }
        debug_assert!(
            self.nodes.entries[cell as usize].1 == key,
            "{key:?} is armed but its slot's heap entry is another's"
        );
        self.nodes.take_out(cell as usize, key.cell());
    }

    /// Takes out `key`'s entry in the write lane, whose cell is `cell`: the lane's front, in
    /// O(1), when write reports come in the order the timers were armed. (Through
    /// [`Lane::cancel`] alone, which finds it by its cell and trims behind it, a round over 64
    /// connections cost 33 instructions more per request.)
    #[inline(never)]
    fn cancel_laned_node(&mut self, cell: u64, node: NodeId, timer: NodeTimer) {
        let key = (node, timer);
        if !self.write_lane.take_front(&mut self.nodes, key) {
            let found = self.write_lane.cancel(&mut self.nodes, cell, key);
            debug_assert!(found, "{key:?} is armed but its lane cell is another's");
        }
    }

    /// Empties the fresh entry if it is exactly `key`'s: whether it was.
    #[inline(always)]
    fn take_fresh(&mut self, key: (NodeId, NodeTimer)) -> bool {
        let taken = self.fresh.is_some_and(|f| f.1 == key);
        if taken {
            self.fresh = None;
        }
        taken
    }

    /// Takes request `id`'s deadline out, if the index holds one for exactly this id: the
    /// lane's front (answered oldest first) or the early stack's top (a short timeout among
    /// long ones) most of the time.
    ///
    /// `#[inline(always)]`: those usual cases, inlined, take no call and save no register (a
    /// response pays one on every request; `#[inline]` alone was not taken); the rest is out
    /// of line.
    #[inline(always)]
    pub(crate) fn cancel_request(&mut self, id: RequestId) {
        // The usual cases first, ending what comes off in O(1) with only live entries behind
        // it: the lane's front or the early stack's top. A live entry of `id` (the whole id,
        // its generation too) is the one its slot's cell records, so the cell needs no
        // reading: the lane's front has `IN_LANE` with its head's number, the stack's top
        // `IN_EARLY | (len - 1)` (debug builds check).
        if self.lane.take_front(&mut self.requests, id) {
            return;
        }
        if self.early.last().is_some_and(|&(_, top)| top == id)
            && self.early.len() == self.early_live
        {
            debug_assert_eq!(
                self.requests.cell_of(id),
                Some(IN_EARLY | (self.early.len() - 1) as u64),
                "the early stack's top is {id:?}'s entry but its cell says otherwise"
            );
            // The pop first: the cell's store could alias the stack's length for all the
            // compiler knows, which then read it again (3 instructions per request).
            self.early.pop();
            self.early_live -= 1;
            self.requests.at[id.slot()] = ABSENT;
            debug_assert!(
                self.early.is_empty() || self.early_live_at(self.early.len() - 1),
                "a dead early top"
            );
            return;
        }
        self.cancel_request_elsewhere(id);
    }

    /// The rest of [`Self::cancel_request`]: an entry in the middle of the lane or the early
    /// stack, or in the request heap, found by the cell of `id`'s slot.
    #[inline(never)]
    fn cancel_request_elsewhere(&mut self, id: RequestId) {
        // Checked first: `ABSENT` has the lane bit set too.
        let Some(cell) = self.requests.cell_of(id).filter(|&c| c != ABSENT) else {
            return;
        };
        if cell & IN_LANE != 0 {
            self.lane.cancel(&mut self.requests, cell, id);
        } else if cell & IN_EARLY != 0 {
            let i = (cell & !IN_EARLY) as usize;
            if self.early[i].1 == id {
                self.early_remove(i);
            }
        } else if self.requests.entries[cell as usize].1 == id {
            self.requests.take_out(cell as usize, id.slot());
        }
    }

    /// The earliest entry and where it is.
    fn earliest(&self) -> Option<(Source, (Instant, TimerKey))> {
        // The node heap and the fresh entry hold what one node heap would, and the request
        // heap and the early stack what one request heap would: each pair's top is the
        // earlier of its two in key order.
        let nodes = top_of_both(
            top_of_both(
                self.nodes.entries.first().map(|&e| (Source::Nodes, e)),
                self.fresh.map(|e| (Source::Fresh, e)),
            ),
            self.write_lane_first().map(|e| (Source::WriteLane, e)),
        );
        let mut best =
            nodes.map(|(source, (at, (node, timer)))| (source, (at, TimerKey::Node(node, timer))));
        let request = top_of_both(
            self.requests
                .entries
                .first()
                .map(|&e| (Source::Requests, e)),
            self.early.last().map(|&e| (Source::Early, e)),
        );
        let others = [
            request.map(|(source, (at, id))| (source, (at, TimerKey::Request(id)))),
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

    /// The write lane's entry to compare with the other parts' first ones: its least in key
    /// order. That is its front, unless the lane is unsorted and due first: then the least
    /// live entry at its front's instant, found by a scan that only [`Self::peek`] pays
    /// ([`Self::pop`] sorts such a lane first). Due later than another part's first entry,
    /// its front's instant alone decides.
    fn write_lane_first(&self) -> Option<(Instant, (NodeId, NodeTimer))> {
        if self.write_lane_unsorted && self.write_lane_due_first() {
            self.write_lane.least_at_front(&self.nodes.at)
        } else {
            self.write_lane.front().copied()
        }
    }

    /// The earliest entry, without taking it out. The pool takes due entries with
    /// [`Self::pop_due`] alone, which costs no scan of the write lane.
    pub(crate) fn peek(&self) -> Option<(Instant, TimerKey)> {
        self.earliest().map(|(_, entry)| entry)
    }

    /// The earliest entry's instant: [`Self::peek`]'s, without choosing among the entries of
    /// that instant (every part's first entry is live, so the least of them is the answer).
    #[inline]
    pub(crate) fn next_instant(&self) -> Option<Instant> {
        let next = self.first_instant();
        debug_assert_eq!(next, self.peek().map(|(at, _)| at));
        next
    }

    /// [`Self::next_instant`], without its debug check against [`Self::peek`] (which asks
    /// this itself when the write lane is unsorted).
    #[inline(always)]
    fn first_instant(&self) -> Option<Instant> {
        // An empty part counts as the latest instant, so the least of the parts' first entries
        // is an entry's instant unless it is the latest: then whether a part holds an entry at
        // all decides. Only the fresh entry, the node heap and the two lanes can hold one at
        // the latest instant: the request heap and the early stack take a deadline only when
        // it is earlier than the lane's last. Six loads and five `min`s on the usual path,
        // where an iterator over the options copied them through the stack, and computing the
        // emptiness beside them took more registers to save (an adapter asks this after every
        // round).
        let at = |first: Option<Instant>| first.map_or(u64::MAX, Instant::as_nanos);
        let least = at(self.fresh.map(|e| e.0))
            .min(at(self.nodes.entries.first().map(|e| e.0)))
            .min(at(self.write_lane.front().map(|e| e.0)))
            .min(at(self.requests.entries.first().map(|e| e.0)))
            .min(at(self.early.last().map(|e| e.0)))
            .min(at(self.lane.front().map(|e| e.0)));
        let any = least != u64::MAX
            || self.fresh.is_some()
            || !self.nodes.entries.is_empty()
            || !self.write_lane.is_empty()
            || !self.lane.is_empty();
        any.then_some(Instant::from_nanos(least))
    }

    /// Whether the write lane's front is due no later than every other part's first entry:
    /// whether the lane may hold the index's earliest entry.
    fn write_lane_due_first(&self) -> bool {
        self.write_lane
            .front()
            .is_some_and(|&(first, _)| Some(first) == self.first_instant())
    }

    /// Takes the earliest entry out if it is due at `now`. Its instant is looked at first:
    /// [`Self::peek`] would scan an unsorted write lane, which [`Self::pop`] sorts instead.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, TimerKey)> {
        if self.next_instant()? > now {
            return None;
        }
        self.pop()
    }

    /// Takes the earliest entry out. An unsorted write lane that may hold it (its front is
    /// due first) is sorted first, once, in O(n log n): a write timeout that fires (its
    /// connection then closes) pays it, or a timer due at the same instant, never a request
    /// on its usual path.
    pub(crate) fn pop(&mut self) -> Option<(Instant, TimerKey)> {
        if self.write_lane_unsorted && self.write_lane_due_first() {
            self.write_lane.sort(&mut self.nodes.at);
            self.write_lane_unsorted = false;
        }
        let (source, entry) = self.earliest()?;
        match source {
            Source::Fresh => self.fresh = None,
            Source::Nodes => self.nodes.remove_at(0),
            Source::Requests => self.requests.remove_at(0),
            Source::Early => self.early_remove(self.early.len() - 1),
            Source::Lane => self.lane.remove(&mut self.requests, 0),
            Source::WriteLane => self.write_lane.remove(&mut self.nodes, 0),
        }
        Some(entry)
    }

    /// Entries in the index (for the pool's consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.fresh.is_some())
            + self.nodes.entries.len()
            + self.requests.entries.len()
            + self.write_lane.live()
            + self.early_live
            + self.lane.live()
    }

    /// Every entry: the fresh one, the node heap's in heap order and the write lane's live ones
    /// in order, the request heap's in heap order, then the early stack's and the lane's live
    /// ones in order (for the pool's consistency checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Instant, TimerKey)> + '_ {
        let nodes = self
            .fresh
            .into_iter()
            .chain(self.nodes.entries.iter().copied())
            .chain(self.write_lane.iter_live(&self.nodes.at))
            .map(|(at, (node, timer))| (at, TimerKey::Node(node, timer)));
        let requests = self
            .requests
            .entries
            .iter()
            .map(|&(at, id)| (at, TimerKey::Request(id)));
        let early = (0..self.early.len())
            .filter(|&i| self.early_live_at(i))
            .map(|i| (self.early[i].0, TimerKey::Request(self.early[i].1)));
        let lane = self
            .lane
            .iter_live(&self.requests.at)
            .map(|(at, id)| (at, TimerKey::Request(id)));
        nodes.chain(requests).chain(early).chain(lane)
    }

    /// Whether `early[i]` is live: its slot's cell still names its index.
    fn early_live_at(&self, i: usize) -> bool {
        self.requests.at[self.early[i].1.slot()] == IN_EARLY | i as u64
    }

    /// Takes the live entry `early[i]` out by clearing its cell: off the top at once (with the
    /// dead entries under it), from below when compaction comes, as in the lane.
    fn early_remove(&mut self, i: usize) {
        self.requests.at[self.early[i].1.slot()] = ABSENT;
        self.early_live -= 1;
        if i + 1 == self.early.len() {
            self.early.pop();
            while !self.early.is_empty() && !self.early_live_at(self.early.len() - 1) {
                self.early.pop();
            }
        } else if self.early.len() > 2 * self.early_live + LANE_SLACK {
            self.early
                .retain(still_placed(&self.requests.at, IN_EARLY, 0));
            renumber(self.early.iter(), &mut self.requests.at, IN_EARLY, 0);
        }
    }

    /// Whether both heaps are in heap order, every recorded position points at its entry and
    /// every entry's is recorded, both lanes are sorted by instant and the write lane in key
    /// order too unless it is marked unsorted, each with a live front and back and its live
    /// count right, the early stack falls strictly to a live top with its live count right,
    /// and the fresh entry's slot has no other entry.
    #[cfg(test)]
    fn positions_agree(&self) -> bool {
        let early_live = (0..self.early.len()).filter(|&i| self.early_live_at(i));
        let early_falls = self.early.windows(2).all(|w| w[0].0 > w[1].0);
        let top_live = self.early.is_empty() || self.early_live_at(self.early.len() - 1);
        self.nodes.positions_agree()
            && self.requests.positions_agree()
            && self.nodes.ordered()
            && self.requests.ordered()
            && self.lane.agrees(&self.requests.at, |a, b| a.0 <= b.0)
            && self.write_lane.agrees(&self.nodes.at, |a, b| {
                a.0 <= b.0 && (self.write_lane_unsorted || a < b)
            })
            && early_live.count() == self.early_live
            && early_falls
            && top_live
            && self
                .fresh
                .is_none_or(|f| self.nodes.cell_of(f.1).is_none_or(|cell| cell == ABSENT))
    }
}

/// The earlier in key order (instant, then key) of the tops of two parts that together hold
/// what one heap would: that heap's top. Two entries of the index are never equal.
fn top_of_both<E: Ord>(
    heap: Option<(Source, E)>,
    beside: Option<(Source, E)>,
) -> Option<(Source, E)> {
    match (heap, beside) {
        (Some(h), Some(b)) => Some(if b.1 < h.1 { b } else { h }),
        (h, b) => h.or(b),
    }
}

/// For a compaction of the lane or the early stack (`tag` [`IN_LANE`] or [`IN_EARLY`]), whose
/// entry `k` is numbered `first + k`: whether each entry, taken in order, is still where its
/// slot's cell says it is (a live one).
fn still_placed<K: HeapKey>(
    cells: &[u64],
    tag: u64,
    first: u64,
) -> impl FnMut(&(Instant, K)) -> bool + '_ {
    let mut number = first;
    move |&(_, key)| {
        let live = cells[key.cell()] == tag | number;
        number += 1;
        live
    }
}

/// Records the kept entries' new numbers, from `first`, in their slots' cells.
fn renumber<'a, K: HeapKey + 'a>(
    kept: impl Iterator<Item = &'a (Instant, K)>,
    cells: &mut [u64],
    tag: u64,
    first: u64,
) {
    for (k, &(_, key)) in kept.enumerate() {
        cells[key.cell()] = tag | (first + k as u64);
    }
}

mod keyed;
mod lane;
#[cfg(test)]
mod tests;
