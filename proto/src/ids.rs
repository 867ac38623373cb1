//! Generation-tagged handles. A handle from before a removal, an eviction or a reconnect is
//! *stale*: every operation on it is refused with a typed error, and no late report about it
//! touches whatever replaced it.

use core::fmt;

/// A node (one server) in a [`Pool`](crate::Pool). Stale once the node is removed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl NodeId {
    /// The slot of this node in the pool's node table (reused after removal, with a new
    /// generation). Useful for indexing the adapter's own per-node tables.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}.{}", self.index, self.generation)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.index)
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
            self.node.index, self.node.generation, self.generation
        )
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connection {} of node {}",
            self.generation, self.node.index
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
