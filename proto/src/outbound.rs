//! A node's outbound queue: frames waiting for the kernel, with byte accounting through a
//! small checked type (after h2's `FlowControl`) and Netty's high/low watermark hysteresis.
//!
//! Pending bytes = sum over frames not yet fully accepted by the kernel of
//! `len + per_frame_overhead`. A frame counts in full until its last byte is accepted.

use alloc::collections::VecDeque;

use bytes::Bytes;

use crate::ids::RequestId;
use crate::time::Instant;

/// Pending outbound bytes. Every change goes through [`Pending::add`] and
/// [`Pending::release`], which refuse to overflow or go below zero: a bookkeeping bug shows up
/// as a failed debug assertion at the point it happens, not as a wrapped counter later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pending(u64);

impl Pending {
    pub(crate) fn get(self) -> u64 {
        self.0
    }

    pub(crate) fn add(&mut self, cost: u64) {
        debug_assert!(self.0.checked_add(cost).is_some(), "pending bytes overflow");
        self.0 = self.0.saturating_add(cost);
    }

    pub(crate) fn release(&mut self, cost: u64) {
        debug_assert!(
            cost <= self.0,
            "releasing {cost} of {} pending bytes",
            self.0
        );
        self.0 = self.0.saturating_sub(cost);
    }
}

/// A frame waiting for the kernel.
#[derive(Debug)]
pub(crate) struct Frame {
    /// The request this frame carries.
    pub(crate) id: RequestId,
    /// The bytes; emptied when the frame is dropped unsent (a tombstone keeps its place).
    pub(crate) bytes: Bytes,
    /// Bytes the kernel has accepted.
    pub(crate) written: usize,
    /// `len + per_frame_overhead`, counted in pending bytes while the frame is live.
    pub(crate) cost: u64,
    /// When it was queued: its write-timeout clock starts here (or when the connection became
    /// ready, if later).
    pub(crate) enqueued_at: Instant,
    /// Handed to the adapter by `poll_transmit` and not yet reported written: the adapter may
    /// be writing it, so it can no longer be dropped unsent.
    pub(crate) handed_out: bool,
    /// Dropped unsent: no byte will ever be written.
    pub(crate) dropped: bool,
}

impl Frame {
    pub(crate) fn untouched(&self) -> bool {
        self.written == 0 && !self.handed_out
    }
}

/// What a writability change the caller must report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flip {
    BecameUnwritable,
    BecameWritable,
}

/// The outbound queue of one node.
///
/// Frames are never removed from the middle: a frame dropped unsent becomes a tombstone that
/// keeps its place, so a frame's sequence number locates it in O(1).
#[derive(Debug)]
pub(crate) struct Outbound {
    frames: VecDeque<Frame>,
    /// Sequence number of `frames[0]`.
    front_seq: u64,
    pending: Pending,
    writable: bool,
    /// Live (not dropped) frames in `frames`.
    live: usize,
}

impl Outbound {
    pub(crate) fn new() -> Self {
        Self {
            frames: VecDeque::new(),
            front_seq: 0,
            pending: Pending::default(),
            writable: true,
            live: 0,
        }
    }

    pub(crate) fn pending(&self) -> u64 {
        self.pending.get()
    }

    pub(crate) fn is_writable(&self) -> bool {
        self.writable
    }

    /// Queues a frame and returns its sequence number. The caller has checked writability: a
    /// frame is accepted whole even if it crosses the high watermark, and the flip is returned.
    pub(crate) fn push(&mut self, frame: Frame, high: u64) -> (u64, Option<Flip>) {
        let seq = self.front_seq + self.frames.len() as u64;
        self.pending.add(frame.cost);
        self.frames.push_back(frame);
        self.live += 1;
        if self.writable && self.pending.get() > high {
            self.writable = false;
            return (seq, Some(Flip::BecameUnwritable));
        }
        (seq, None)
    }

    /// The frame with sequence number `seq`, if it is still queued and live.
    pub(crate) fn get(&self, seq: u64) -> Option<&Frame> {
        let index = usize::try_from(seq.checked_sub(self.front_seq)?).ok()?;
        self.frames.get(index).filter(|f| !f.dropped)
    }

    /// The first live frame, discarding tombstones ahead of it.
    pub(crate) fn front_live(&mut self) -> Option<&mut Frame> {
        while self.frames.front().is_some_and(|f| f.dropped) {
            self.frames.pop_front();
            self.front_seq += 1;
        }
        self.frames.front_mut()
    }

    /// Removes the fully written front frame, releasing its bytes.
    pub(crate) fn pop_written(&mut self, low: u64) -> (Option<Frame>, Option<Flip>) {
        if self.front_live().is_none() {
            return (None, None);
        }
        let frame = self.frames.pop_front();
        self.front_seq += 1;
        if let Some(f) = &frame {
            debug_assert_eq!(f.written, f.bytes.len());
            self.release(f.cost);
        }
        (frame, self.check_writable(low))
    }

    /// Drops frame `seq` unsent, keeping a tombstone in its place; its bytes are freed now.
    pub(crate) fn drop_unsent(&mut self, seq: u64, low: u64) -> Option<Flip> {
        let index = usize::try_from(seq.checked_sub(self.front_seq)?).ok()?;
        let frame = self.frames.get_mut(index).filter(|f| !f.dropped)?;
        debug_assert!(frame.untouched());
        frame.dropped = true;
        frame.bytes = Bytes::new();
        let cost = frame.cost;
        self.release(cost);
        self.trim_back();
        self.check_writable(low)
    }

    /// Discards tombstones at the back, where nothing needs their places kept.
    fn trim_back(&mut self) {
        while self.frames.back().is_some_and(|f| f.dropped) {
            self.frames.pop_back();
        }
    }

    /// Whether tombstones outnumber live frames enough to be worth a [`Outbound::compact`]
    /// (a stuck front frame with many frames dropped behind it).
    pub(crate) fn needs_compaction(&self) -> bool {
        self.frames.len() > 2 * self.live + 64
    }

    /// Removes every tombstone; live frames get new sequence numbers, reported to `renumber`.
    pub(crate) fn compact(&mut self, mut renumber: impl FnMut(RequestId, u64)) {
        self.frames.retain(|f| !f.dropped);
        for (i, frame) in self.frames.iter().enumerate() {
            renumber(frame.id, self.front_seq + i as u64);
        }
    }

    /// The requests of the live frames, oldest first.
    pub(crate) fn live_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.frames.iter().filter(|f| !f.dropped).map(|f| f.id)
    }

    /// Empties the queue without any writability event (a close releases everything).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Frame> + '_ {
        self.front_seq += self.frames.len() as u64;
        self.pending = Pending::default();
        self.writable = true;
        self.live = 0;
        self.frames.drain(..).filter(|f| !f.dropped)
    }

    /// For a retry on a fresh connection: keeps the untouched frames that `keep` accepts and
    /// turns every other live frame into a tombstone, calling `gone` with it. Writability follows
    /// the released bytes without an event (as on a close).
    pub(crate) fn keep_for_retry(
        &mut self,
        mut keep: impl FnMut(&Frame) -> bool,
        mut gone: impl FnMut(&Frame),
        low: u64,
    ) {
        for frame in self.frames.iter_mut().filter(|f| !f.dropped) {
            if frame.untouched() && keep(frame) {
                continue;
            }
            gone(frame);
            frame.dropped = true;
            frame.bytes = Bytes::new();
            self.pending.release(frame.cost);
            self.live -= 1;
        }
        self.trim_back();
        if self.pending.get() < low {
            self.writable = true;
        }
    }

    fn release(&mut self, cost: u64) {
        self.pending.release(cost);
        self.live -= 1;
    }

    fn check_writable(&mut self, low: u64) -> Option<Flip> {
        if !self.writable && self.pending.get() < low {
            self.writable = true;
            return Some(Flip::BecameWritable);
        }
        None
    }

    /// Entries in the queue, tombstones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    /// Sum of live frames' costs, recomputed (for invariant checks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn recount(&self) -> u64 {
        self.frames
            .iter()
            .filter(|f| !f.dropped)
            .map(|f| f.cost)
            .sum()
    }
}
