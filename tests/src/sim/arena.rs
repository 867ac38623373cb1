//! Frames whose identity the simulated kernel reads back from the pointer alone.
//!
//! A replay queues gigabytes of frames (story 2's 8.7 GB backlog), far more than this machine
//! could allocate, and the simulator never looks at a frame's bytes. So every frame is a slice
//! of one shared, zeroed chunk: frame `k` of a chunk starts at byte `k`, which is its identity.
//! Only a fresh frame (the pool hands out whole frames, except the unwritten rest of the one a
//! short write cut, which the connection remembers) is ever looked up.
//!
//! Each slot also holds the simulator's record of the request behind the frame. A slot is
//! reused only once that request has ended, no byte of it sits in a simulated kernel buffer,
//! and the pool can no longer hand out a rest of it.

use bytes::Bytes;
use keepwire_proto::{Instant, RequestId};

/// Slots per chunk.
const CHUNK_SLOTS: usize = 1 << 16;
/// The longest frame the simulator makes.
pub const MAX_FRAME: usize = 1 << 20;

/// How the application classed a request once it knew its fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Answered within its deadline.
    Ok,
    /// Its deadline passed first (the application gave up on it).
    TimedOut,
    /// Failed by the client (connection closed, evicted) before its deadline.
    Lost,
}

/// The simulator's record of one accepted request, kept in its frame's slot.
#[derive(Clone, Debug)]
pub(crate) struct Req {
    pub(crate) id: RequestId,
    /// The node it was written to (known for `Target::Node` at once, else once written).
    pub(crate) node: u32,
    pub(crate) len: u32,
    pub(crate) submitted: Instant,
    /// The application's deadline (the pool's may be later in a "before" run).
    pub(crate) deadline: Instant,
    /// Bytes the simulated kernel accepted.
    pub(crate) written: u32,
    /// The connection lost the unwritten rest of a partly written frame (it closed).
    pub(crate) abandoned: bool,
    /// Kernel segments (client send buffer, server receive buffer) that hold bytes of it.
    pub(crate) refs: u32,
    /// Times a server executed it.
    pub(crate) executed: u16,
    pub(crate) class: Option<Class>,
    pub(crate) ended: bool,
    /// It ended with not one byte sent (`Sent::Nothing`): no byte of it may ever be written.
    pub(crate) ended_unsent: bool,
    /// A byte of it was written into a connection whose peer is gone.
    pub(crate) into_dead: bool,
    /// Submitted to a given node (`Target::Node`).
    pub(crate) pinned: bool,
    /// No earlier than this its write timer may have started: for a request not pinned to a
    /// node, the last connection close before its first hand-out (a transparent retry
    /// requeues it on another node then, and its write timer starts there).
    pub(crate) requeued_by: Instant,
    /// Handed out at least once.
    pub(crate) handed_out: bool,
}

impl Req {
    fn vacant() -> Self {
        Self {
            id: RequestId::from_u64(u64::MAX),
            node: u32::MAX,
            len: 0,
            submitted: Instant::ZERO,
            deadline: Instant::ZERO,
            written: 0,
            abandoned: false,
            refs: 0,
            executed: 0,
            class: None,
            ended: true,
            ended_unsent: false,
            into_dead: false,
            pinned: false,
            requeued_by: Instant::ZERO,
            handed_out: false,
        }
    }

    /// Whether nothing can refer to this slot any more.
    fn releasable(&self) -> bool {
        self.ended
            && self.refs == 0
            && (self.written == 0 || self.written == self.len || self.abandoned)
    }
}

#[derive(Debug)]
struct Chunk {
    base: Bytes,
    start: usize,
}

/// The frame arena and request records.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    chunks: Vec<Chunk>,
    reqs: Vec<Req>,
    /// Whether a slot is on the free list.
    listed: Vec<bool>,
    /// Free slots, the most recently freed last: reusing it keeps the hot path in cache (a
    /// slot is only freed once nothing can refer to its frame any more).
    free: Vec<u32>,
}

impl Arena {
    /// A free slot (growing the arena by a chunk when none is left).
    pub(crate) fn alloc(&mut self) -> u32 {
        if self.free.is_empty() {
            let start = self.reqs.len();
            // A slice of a `Bytes` made from a `Vec` is of the shared kind: slicing it again
            // is one reference-count increment.
            let len = CHUNK_SLOTS + MAX_FRAME;
            let base = Bytes::from(vec![0u8; len]).slice(0..len);
            self.chunks.push(Chunk { base, start });
            self.reqs.resize(start + CHUNK_SLOTS, Req::vacant());
            self.listed.resize(start + CHUNK_SLOTS, true);
            self.free
                .extend((start..start + CHUNK_SLOTS).rev().map(|s| s as u32));
        }
        let slot = self.free.pop().expect("a free slot");
        self.listed[slot as usize] = false;
        slot
    }

    /// The frame of `len` bytes for `slot`.
    pub(crate) fn frame(&self, slot: u32, len: usize) -> Bytes {
        assert!(len <= MAX_FRAME, "frame of {len} bytes > {MAX_FRAME}");
        let chunk = &self.chunks[slot as usize / CHUNK_SLOTS];
        let k = slot as usize - chunk.start;
        chunk.base.slice(k..k + len)
    }

    /// Gives back a slot whose submit was refused.
    pub(crate) fn unalloc(&mut self, slot: u32) {
        self.reqs[slot as usize] = Req::vacant();
        self.listed[slot as usize] = true;
        self.free.push(slot);
    }

    /// The slot of a fresh frame the pool handed out.
    pub(crate) fn identify(&self, frame: &Bytes) -> u32 {
        let ptr = frame.as_ptr() as usize;
        for (i, chunk) in self.chunks.iter().enumerate() {
            let base = chunk.base.as_ptr() as usize;
            if ptr >= base && ptr < base + CHUNK_SLOTS {
                return (i * CHUNK_SLOTS + (ptr - base)) as u32;
            }
        }
        panic!("the pool handed out bytes that are no frame of this simulation");
    }

    pub(crate) fn get(&self, slot: u32) -> &Req {
        &self.reqs[slot as usize]
    }

    pub(crate) fn get_mut(&mut self, slot: u32) -> &mut Req {
        &mut self.reqs[slot as usize]
    }

    pub(crate) fn set(&mut self, slot: u32, req: Req) {
        self.reqs[slot as usize] = req;
    }

    /// Returns the slot to the free list if nothing refers to it any more.
    pub(crate) fn release(&mut self, slot: u32) {
        let s = slot as usize;
        if !self.listed[s] && self.reqs[s].releasable() {
            self.listed[s] = true;
            self.free.push(slot);
        }
    }
}
