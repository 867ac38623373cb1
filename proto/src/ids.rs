//! Generation-tagged handles. A handle from before a removal, an eviction or a reconnect is
//! *stale*: every operation on it is refused with a typed error, and no late report about it
//! touches whatever replaced it.

use core::fmt;

/// A node (one server) in a [`Pool`](crate::Pool). Stale once the node is removed.
///
/// One 64-bit word, the slot above the generation (so the derived order is the slot's, then
/// the generation's), packed to 4-byte alignment so that a [`ConnId`] stays 12 bytes. A
/// handle is written and read as that one word: a caller that copies a returned
/// `Option<ConnId>` reads the node back whole, as the pool wrote it, where two 4-byte stores
/// read back as one 8-byte load would stall the core until the stores drained (a failed
/// store-to-load forward, about 5 ns on the development machine).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(C, packed(4))]
pub struct NodeId(u64);

impl NodeId {
    pub(crate) const fn new(slot: u32, generation: u32) -> Self {
        Self(((slot as u64) << 32) | generation as u64)
    }

    /// The slot of this node in the pool's node table (reused after removal, with a new
    /// generation). Useful for indexing the adapter's own per-node tables.
    pub fn index(self) -> usize {
        self.slot() as usize
    }

    /// [`index`](Self::index) as the pool stores it.
    pub(crate) const fn slot(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Which node of those that held the slot.
    pub(crate) const fn generation(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}.{}", self.slot(), self.generation())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.slot())
    }
}

/// One connection attempt to a node. Every connect attempt gets a new generation, so a
/// handle is stale as soon as its connection is closed, evicted or replaced.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId {
    pub(crate) node: NodeId,
    pub(crate) generation: u32,
}

impl ConnId {
    /// The node this connection belongs to.
    pub fn node(self) -> NodeId {
        self.node
    }
}

impl fmt::Debug for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conn{}.{}/{}",
            self.node.slot(),
            self.node.generation(),
            self.generation
        )
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connection {} of node {}",
            self.generation,
            self.node.slot()
        )
    }
}

/// A submitted request. Unique within a pool for its lifetime; the 64 bits are a slot and a
/// generation, so a codec can carry them on the wire as a correlation id and turn a response's
/// id back with [`RequestId::from_u64`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub(crate) u64);

impl RequestId {
    /// The id as 64 bits, for a wire correlation id.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The id a peer echoed back. An id the pool never issued is simply unknown to it.
    pub fn from_u64(raw: u64) -> Self {
        Self(raw)
    }

    /// The request's slot in the pool's request table. Slots are dense and reused (under a
    /// new generation) once a request is done with, so an adapter can keep what it holds per
    /// request in a table indexed by this instead of a map; two requests the pool holds at
    /// once never share a slot.
    pub fn index(self) -> usize {
        self.slot()
    }

    pub(crate) fn new(slot: u32, generation: u32) -> Self {
        Self((u64::from(generation) << 32) | u64::from(slot))
    }

    pub(crate) fn slot(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }

    pub(crate) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req{}.{}", self.slot(), self.generation())
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request {}.{}", self.slot(), self.generation())
    }
}

#[cfg(test)]
mod tests {
    use alloc::format;
    use core::mem::{align_of, size_of};

    use super::*;

    #[test]
    fn a_node_handle_is_its_slot_then_its_generation() {
        let id = NodeId::new(7, u32::MAX);
        // One word, which the pool stores and a caller loads whole (see `NodeId`).
        assert_eq!({ id.0 }, (7 << 32) | u64::from(u32::MAX));
        assert_eq!((id.index(), id.slot(), id.generation()), (7, 7, u32::MAX));
        assert_eq!(format!("{id:?} / {id}"), "node7.4294967295 / node 7");
        // The order the derive gave the two fields before they shared a word: slot first.
        assert!(NodeId::new(1, 0) > NodeId::new(0, u32::MAX));
        assert!(NodeId::new(1, 2) > NodeId::new(1, 1));
        assert_ne!(NodeId::new(1, 2), NodeId::new(2, 1));
    }

    #[test]
    fn a_request_id_is_its_generation_above_its_slot() {
        let id = RequestId::new(3, 7);
        assert_eq!((id.slot(), id.index(), id.generation()), (3, 3, 7));
        assert_eq!(id.as_u64(), (7 << 32) | 3);
        assert_eq!(RequestId::from_u64(id.as_u64()), id);
        assert_eq!(format!("{id:?} / {id}"), "req3.7 / request 3.7");
    }

    #[test]
    fn a_connection_handle_stays_twelve_bytes() {
        // What `poll_transmit` and `poll_hand_out` return: the node as one word (the test
        // above) did not grow the handle or its option. That the word is stored and loaded
        // whole is the compiler's doing: `scripts/forwarding.sh lifecycle` shows it.
        assert_eq!(align_of::<NodeId>(), 4);
        assert_eq!(size_of::<ConnId>(), 12);
        assert_eq!(size_of::<Option<ConnId>>(), 16);
        let conn = ConnId {
            node: NodeId::new(3, 1),
            generation: 9,
        };
        assert_eq!(
            format!("{conn:?} / {conn}"),
            "conn3.1/9 / connection 9 of node 3"
        );
    }
}
