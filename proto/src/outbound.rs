//! A node's outbound queue: frames waiting for the kernel, with byte accounting through a
//! small checked type (after h2's `FlowControl`) and Netty's high/low watermark hysteresis.
//!
//! Pending bytes = sum over frames not yet fully accepted by the kernel of
//! `len + per_frame_overhead`. A frame counts in full until its last byte is accepted.

use alloc::vec::Vec;

use bytes::Bytes;

use crate::fifo::SLACK as READ_SLACK;
use crate::ids::RequestId;
use crate::time::Instant;

/// A count of pending outbound bytes (one connection's, or the pool's total). Every change
/// goes through [`ByteCount::add`] and [`ByteCount::release`], which neither wrap nor
/// saturate: a bookkeeping bug stops at the line that makes it (h2's flow control asserts the
/// same way), so the fuzzer finds it instead of a wrong watermark decision later. Submits
/// check [`ByteCount::fits`] first, so no input can make an `add` overflow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ByteCount(u64);

impl ByteCount {
    pub(crate) fn get(self) -> u64 {
        self.0
    }

    /// Whether `cost` more can be counted.
    pub(crate) fn fits(self, cost: u64) -> bool {
        self.0.checked_add(cost).is_some()
    }

    #[track_caller]
    pub(crate) fn add(&mut self, cost: u64) {
        self.0 = self
            .0
            .checked_add(cost)
            .expect("pending bytes overflow: a submit skipped ByteCount::fits");
    }

    #[track_caller]
    pub(crate) fn release(&mut self, cost: u64) {
        self.0 = self
            .0
            .checked_sub(cost)
            .expect("released more pending bytes than were counted");
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
    /// be writing it, so it can no longer be dropped unsent until the report says otherwise.
    pub(crate) handed_out: bool,
    /// Dropped unsent: no byte will ever be written.
    pub(crate) dropped: bool,
}

impl Frame {
    pub(crate) fn untouched(&self) -> bool {
        self.written == 0 && !self.handed_out
    }

    /// How much of it the kernel has accepted, as far as proto knows.
    pub(crate) fn sent(&self) -> crate::Sent {
        use crate::Sent;
        match (self.written, self.handed_out) {
            (0, false) => Sent::Nothing,
            (0, true) => Sent::Unknown,
            (w, _) if w == self.bytes.len() => Sent::Fully,
            _ => Sent::Partly,
        }
    }
}

/// What a writability change the caller must report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flip {
    BecameUnwritable,
    BecameWritable,
}

/// The frames of a connection's outstanding hand-out, read where the pool keeps them
/// ([`Pool::handed_out`](crate::Pool::handed_out)): the unwritten rest of each, in order, the
/// same bytes [`Pool::poll_transmit`](crate::Pool::poll_transmit) gives as a `Bytes` each.
/// An iterator of byte slices; [`bytes`](Self::bytes) is their total length.
#[derive(Clone, Debug)]
pub struct HandOut<'a> {
    /// The queue from its front: the handed-out frames are its first live ones marked so.
    frames: &'a [Frame],
    /// Their total length.
    bytes: usize,
}

impl HandOut<'_> {
    /// The bytes handed out: the total length of the slices.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<'a> Iterator for HandOut<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            let (frame, rest) = self.frames.split_first()?;
            if frame.dropped {
                // A tombstone between two handed-out frames: skipped, as the hand-out did.
                self.frames = rest;
                continue;
            }
            if !frame.handed_out {
                self.frames = &[];
                return None;
            }
            self.frames = rest;
            return Some(&frame.bytes[frame.written..]);
        }
    }
}

/// The outbound queue of one node.
///
/// Frames are never removed from the middle: a frame dropped unsent becomes a tombstone that
/// keeps its place, so a frame's sequence number locates it in O(1).
#[derive(Debug)]
pub(crate) struct Outbound {
    frames: Frames,
    /// Sequence number of the front frame.
    front_seq: u64,
    pending: ByteCount,
    /// Bytes handed out by the last [`Outbound::hand_out`], until it is reported.
    handed: Option<usize>,
    writable: bool,
    /// Live (not dropped) frames in `frames`.
    live: usize,
    /// Compactions so far: the fuzz model's evidence that its sessions reach them.
    #[cfg(any(test, feature = "fuzzing"))]
    compactions: u64,
}

/// The frames of an [`Outbound`] queue, oldest first: one `Vec` read from a moving start, as a
/// [`Fifo`](crate::fifo::Fifo) is (a `VecDeque`'s push was an out-of-line call, and its pops
/// and iteration wrap-around arithmetic, on every request). A frame taken off the front gives
/// up its bytes at once; its emptied place goes when the queue empties (the usual case: the
/// last frame is taken off with it), or with the others read once they are three quarters of
/// the buffer.
#[derive(Debug, Default)]
struct Frames {
    items: Vec<Frame>,
    /// Where the queue starts in `items`: those before it were taken off (their bytes freed).
    start: usize,
}

impl Frames {
    #[inline]
    fn len(&self) -> usize {
        self.items.len() - self.start
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn push_back(&mut self, frame: Frame) {
        crate::hint::push(&mut self.items, frame);
    }

    /// The frame `index` places behind the front.
    #[inline]
    fn get(&self, index: usize) -> Option<&Frame> {
        self.items[self.start..].get(index)
    }

    #[inline]
    fn get_mut(&mut self, index: usize) -> Option<&mut Frame> {
        self.items[self.start..].get_mut(index)
    }

    #[inline]
    fn front(&self) -> Option<&Frame> {
        self.items.get(self.start)
    }

    #[inline]
    fn front_mut(&mut self) -> Option<&mut Frame> {
        self.items.get_mut(self.start)
    }

    #[inline]
    fn back(&self) -> Option<&Frame> {
        if self.is_empty() {
            None
        } else {
            self.items.last()
        }
    }

    /// Drops the front frame. (`#[inline]` alone was not taken: a write report called it.)
    #[inline(always)]
    fn pop_front(&mut self) {
        if self.len() <= 1 {
            self.items.clear();
            self.start = 0;
            return;
        }
        self.items[self.start].bytes = Bytes::new();
        self.start += 1;
        if self.start >= READ_SLACK && self.start >= 3 * self.len() {
            self.drop_read();
        }
    }

    /// Takes off the lone frame of a queue that holds one: a pop off the buffer's end, where
    /// [`Self::pop_front`]'s clear loops over the buffer to drop it.
    #[inline(always)]
    fn take_lone(&mut self) -> Frame {
        debug_assert_eq!(self.len(), 1);
        let frame = self.items.pop().expect("the lone frame");
        if self.start != 0 {
            // The places of frames taken off before it (their bytes freed already).
            crate::hint::cold_path();
            self.items.clear();
            self.start = 0;
        }
        frame
    }

    /// Drops the back frame.
    fn pop_back(&mut self) {
        if self.len() <= 1 {
            self.items.clear();
            self.start = 0;
            return;
        }
        self.items.pop();
    }

    #[inline]
    fn iter(&self) -> core::slice::Iter<'_, Frame> {
        self.items[self.start..].iter()
    }

    #[inline]
    fn iter_mut(&mut self) -> core::slice::IterMut<'_, Frame> {
        self.items[self.start..].iter_mut()
    }

    /// Keeps only the frames `keep` says to, in order.
    fn retain(&mut self, keep: impl FnMut(&Frame) -> bool) {
        self.drop_read();
        self.items.retain(keep);
    }

    /// Takes every frame out, front first, leaving the queue empty.
    fn drain(&mut self) -> impl Iterator<Item = Frame> + '_ {
        let start = core::mem::take(&mut self.start);
        self.items.drain(..).skip(start)
    }

    /// Drops the places of the frames taken off the front (rare in a pop: only a queue that
    /// never empties).
    #[cold]
    fn drop_read(&mut self) {
        self.items.drain(..self.start);
        self.start = 0;
    }
}

impl Outbound {
    pub(crate) fn new() -> Self {
        Self {
            frames: Frames::default(),
            front_seq: 0,
            pending: ByteCount::default(),
            handed: None,
            writable: true,
            live: 0,
            #[cfg(any(test, feature = "fuzzing"))]
            compactions: 0,
        }
    }

    pub(crate) fn pending(&self) -> u64 {
        self.pending.get()
    }

    pub(crate) fn is_writable(&self) -> bool {
        self.writable
    }

    /// The sequence number the next [`Outbound::push`] gives its frame.
    pub(crate) fn next_seq(&self) -> u64 {
        self.front_seq + self.frames.len() as u64
    }

    /// Queues a frame and returns its sequence number. The caller has checked writability: a
    /// frame is accepted whole even if it crosses the high watermark, and the flip is returned.
    #[inline]
    pub(crate) fn push(&mut self, frame: Frame, high: u64) -> (u64, Option<Flip>) {
        let seq = self.next_seq();
        self.pending.add(frame.cost);
        self.frames.push_back(frame);
        self.live += 1;
        // `&`, not `&&`: no jump for the usual answer, a writable queue under its mark.
        if self.writable & (self.pending.get() > high) {
            crate::hint::cold_path();
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

    /// Whether the queue holds a live frame (handed out or not).
    pub(crate) fn has_live(&self) -> bool {
        self.live > 0
    }

    /// Whether a live frame waits that has not been handed out.
    pub(crate) fn has_unhanded(&self) -> bool {
        self.handed.is_none() && self.has_live()
    }

    /// Bytes handed out and not yet reported, if a hand-out is outstanding.
    pub(crate) fn handed(&self) -> Option<usize> {
        self.handed
    }

    /// Hands out the unwritten rest of the queued frames, oldest first: at least one, then
    /// whole frames while the total stays within `max_bytes`, passing each frame's bytes and
    /// how much of them was written to `take`. Returns the bytes handed out; the frames
    /// handed out are then the ones [`Outbound::handed_frames`] reads.
    ///
    /// `#[inline]`: its usual case is inlined into `Pool::poll_transmit` (and
    /// `Pool::poll_hand_out`), which has saved its registers already, where a call of its own
    /// saved four more and passed its arguments again.
    #[inline]
    pub(crate) fn hand_out(
        &mut self,
        max_bytes: usize,
        mut take: impl FnMut(&Bytes, usize),
    ) -> usize {
        debug_assert_eq!(self.handed, None, "one hand-out at a time");
        // The usual case, one live frame queued (one request at a time on the connection), is
        // handed out here as the loop would; the loop, out of line, saves every register.
        if self.frames.len() == 1 {
            if let Some(frame) = self.frames.front_mut().filter(|f| !f.dropped) {
                let rest = frame.bytes.len() - frame.written;
                frame.handed_out = true;
                self.handed = Some(rest);
                take(&frame.bytes, frame.written);
                return rest;
            }
        }
        self.hand_out_frames(max_bytes, take)
    }

    /// [`Self::hand_out`] for any number of frames.
    #[inline(never)]
    fn hand_out_frames(&mut self, max_bytes: usize, mut take: impl FnMut(&Bytes, usize)) -> usize {
        let mut total = 0usize;
        for frame in self.frames.iter_mut().filter(|f| !f.dropped) {
            let rest = frame.bytes.len() - frame.written;
            if total > 0 && total.saturating_add(rest) > max_bytes {
                break;
            }
            take(&frame.bytes, frame.written);
            frame.handed_out = true;
            total += rest;
        }
        self.handed = Some(total);
        total
    }

    /// The frames of the outstanding hand-out, if any, where the queue keeps them: the live
    /// frames at the front that are marked handed out (a hand-out marks a run of them, and
    /// until its report nothing but a close or an eviction, which forget it, takes one off or
    /// drops it).
    pub(crate) fn handed_frames(&self) -> Option<HandOut<'_>> {
        let bytes = self.handed?;
        Some(HandOut {
            frames: self.frames.iter().as_slice(),
            bytes,
        })
    }

    /// [`Self::report_written`] in the usual case: the lone queued frame was handed out and
    /// the kernel took all of it (all that was handed out). Returns the frame's request, its
    /// cost (released) and any writability flip, as the report would (the request is the one
    /// `settle(id, true)` would see); `None`, changing nothing, in any other case. Its few
    /// checks take the place of the report's loop, accumulators and calls.
    #[inline(always)]
    pub(crate) fn report_lone_written(
        &mut self,
        n: usize,
        low: u64,
    ) -> Option<(RequestId, u64, Option<Flip>)> {
        if self.handed != Some(n) || self.frames.len() != 1 {
            return None;
        }
        // A hand-out takes at least one live frame, and until its report nothing but a close
        // or an eviction (which forget it) takes a handed-out frame off or drops it: the lone
        // frame is the one handed out, whole, and all of it was written.
        debug_assert!(
            self.frames
                .front()
                .is_some_and(|f| !f.dropped && f.handed_out && n == f.bytes.len() - f.written),
            "the lone frame is not the hand-out"
        );
        self.handed = None;
        let Frame { id, cost, .. } = self.frames.take_lone();
        self.front_seq += 1;
        self.release(cost);
        Some((id, cost, self.check_writable(low)))
    }

    /// Ends the hand-out after the kernel took `n` of its bytes. `settle(id, true)` sees each
    /// frame completed (removed from the queue); `settle(id, false)` each frame handed out with
    /// no byte written, back in the queue, and drops it unsent by returning `true`. Returns the
    /// bytes released and any writability flip; `Err` if `n` exceeds what was handed out
    /// (nothing changes).
    #[inline]
    pub(crate) fn report_written(
        &mut self,
        n: usize,
        low: u64,
        mut settle: impl FnMut(RequestId, bool) -> bool,
    ) -> Result<(u64, Option<Flip>), ()> {
        if n > self.handed.unwrap_or(0) {
            return Err(());
        }
        self.handed = None;
        let mut left = n;
        let mut released = 0;
        // The handed-out frames are the live ones at the front: complete them in order (and
        // discard the tombstones among them) until the bytes run out.
        while let Some(frame) = self.frames.front_mut() {
            if frame.dropped {
                self.frames.pop_front();
                self.front_seq += 1;
                continue;
            }
            if !frame.handed_out {
                break;
            }
            let rest = frame.bytes.len() - frame.written;
            if left < rest {
                frame.written += left;
                left = 0;
                break;
            }
            left -= rest;
            let (id, cost) = (frame.id, frame.cost);
            self.frames.pop_front();
            self.front_seq += 1;
            released += cost;
            self.release(cost);
            settle(id, true);
        }
        debug_assert_eq!(left, 0, "reported bytes beyond the frames handed out");
        // Usually every frame handed out was written whole and the queue is empty now.
        if self.frames.is_empty() {
            return Ok((released, self.check_writable(low)));
        }
        for frame in self.frames.iter_mut().filter(|f| !f.dropped) {
            // A hand-out is a prefix of the live frames: stop at the first live frame after it.
            if !frame.handed_out {
                break;
            }
            frame.handed_out = false;
            if frame.written == 0 && settle(frame.id, false) {
                frame.dropped = true;
                frame.bytes = Bytes::new();
                released += frame.cost;
                self.pending.release(frame.cost);
                self.live -= 1;
            }
        }
        self.trim_back();
        Ok((released, self.check_writable(low)))
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
        // Small under test and fuzzing, so that random sessions reach compaction often.
        const SLACK: usize = if cfg!(any(test, feature = "fuzzing")) {
            2
        } else {
            64
        };
        self.frames.len() > 2 * self.live + SLACK
    }

    /// Removes every tombstone; live frames get new sequence numbers, reported to `renumber`.
    pub(crate) fn compact(&mut self, mut renumber: impl FnMut(RequestId, u64)) {
        self.frames.retain(|f| !f.dropped);
        for (i, frame) in self.frames.iter().enumerate() {
            renumber(frame.id, self.front_seq + i as u64);
        }
        #[cfg(any(test, feature = "fuzzing"))]
        {
            self.compactions += 1;
        }
    }

    /// The requests of the live frames, oldest first.
    pub(crate) fn live_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.frames.iter().filter(|f| !f.dropped).map(|f| f.id)
    }

    /// Empties the queue without any writability event (a close releases everything).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Frame> + '_ {
        self.front_seq += self.frames.len() as u64;
        self.pending = ByteCount::default();
        self.handed = None;
        self.writable = true;
        self.live = 0;
        self.frames.drain().filter(|f| !f.dropped)
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
        // Whatever was handed out is gone with the evicted connection (handed-out frames are
        // never kept), so no hand-out is outstanding for the fresh one.
        self.handed = None;
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

    /// Takes a live frame's `cost` out of the pending bytes. (`#[inline(always)]`: the usual
    /// write report, inlined into the pool's, made it a call.)
    #[inline(always)]
    fn release(&mut self, cost: u64) {
        self.pending.release(cost);
        self.live -= 1;
    }

    fn check_writable(&mut self, low: u64) -> Option<Flip> {
        if !self.writable & (self.pending.get() < low) {
            crate::hint::cold_path();
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

    /// Compactions so far.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn compactions(&self) -> u64 {
        self.compactions
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{assert_slides_as_a_fifo, xorshift};
    use alloc::collections::VecDeque;

    fn frame(n: u32) -> Frame {
        Frame {
            id: RequestId::new(n, 0),
            bytes: Bytes::from(alloc::vec![0u8; 8]),
            written: 0,
            cost: u64::from(n),
            enqueued_at: Instant::ZERO,
            handed_out: false,
            dropped: false,
        }
    }

    /// [`Frames`] pushes, pops at both ends, finds, retains and drains as a `VecDeque` does;
    /// a frame taken off the front gives up its bytes at once, and the buffer stays within
    /// four times the frames plus the slack.
    #[test]
    fn frames_queue_as_a_vec_deque_does() {
        let mut frames = Frames::default();
        let mut model = VecDeque::new();
        let mut x = 0x0123_4567_89ab_cdefu64;
        let ids = |f: &Frame| f.cost;
        let mut most_read = 0;
        for step in 0..50_000u32 {
            xorshift(&mut x);
            // Long runs that mostly push, then mostly pop, so the queue both empties and slides.
            let pushing = (step / 700) % 2 == 0;
            match x % 32 {
                0..=14 if pushing => {
                    frames.push_back(frame(step));
                    model.push_back(step);
                }
                0..=8 => {
                    frames.push_back(frame(step));
                    model.push_back(step);
                }
                _ if x % 32 < 28 => {
                    frames.pop_front();
                    model.pop_front();
                }
                28 | 29 => {
                    frames.pop_back();
                    model.pop_back();
                }
                30 => {
                    let odd = x % 64 < 32;
                    frames.retain(|f| (f.cost % 2 == 1) == odd);
                    model.retain(|&i| (i % 2 == 1) == odd);
                }
                _ if x % 256 == 31 => {
                    assert!(
                        frames
                            .drain()
                            .map(|f| f.cost)
                            .eq(model.drain(..).map(u64::from))
                    );
                }
                _ => {}
            }
            let model_ids = || model.iter().map(|&i| u64::from(i));
            assert_eq!(frames.len(), model.len(), "step {step}");
            assert_eq!(frames.is_empty(), model.is_empty());
            assert_eq!(
                frames.front().map(ids),
                model.front().map(|&i| u64::from(i))
            );
            assert_eq!(frames.back().map(ids), model.back().map(|&i| u64::from(i)));
            assert!(frames.iter().map(ids).eq(model_ids()), "step {step}");
            let k = (x as usize >> 8) % (model.len() + 1);
            assert_eq!(frames.get(k).map(ids), model.get(k).map(|&i| u64::from(i)));
            assert!(
                frames.items[..frames.start]
                    .iter()
                    .all(|f| f.bytes.is_empty())
            );
            assert!(frames.start < frames.items.len() || frames.items.is_empty());
            assert!(
                frames.items.len() <= 4 * frames.len() + READ_SLACK,
                "step {step}"
            );
            most_read = most_read.max(frames.start);
        }
        // The queue slid past the slack without emptying (the bound above then needs drops).
        assert!(most_read >= READ_SLACK, "{most_read}");
    }

    /// A sliding queue of frames drops the places of those taken off at the same points as
    /// a [`Fifo`](crate::fifo::Fifo): every 60 pops sliding 20 frames, every 32 sliding 4.
    #[test]
    fn a_sliding_frame_queue_drops_what_it_took_off_at_three_quarters_of_its_buffer_and_the_slack()
    {
        assert_slides_as_a_fifo(
            |frames: &mut Frames, n| frames.push_back(frame(n)),
            |frames| {
                let front = frames.front().map(|f| f.cost as u32);
                frames.pop_front();
                front
            },
            |frames| (frames.start, frames.items.len()),
        );
    }

    /// Taking off the lone frame of a queue that slid leaves its buffer empty, with no places
    /// of frames taken off before it.
    #[test]
    fn taking_the_lone_frame_off_a_slid_queue_empties_its_buffer() {
        let mut frames = Frames::default();
        for n in 0..3 {
            frames.push_back(frame(n));
        }
        frames.pop_front();
        frames.pop_front();
        assert_eq!((frames.start, frames.len()), (2, 1));
        assert_eq!(frames.take_lone().cost, 2);
        assert_eq!((frames.start, frames.items.len()), (0, 0));
        frames.push_back(frame(3));
        assert_eq!(frames.take_lone().cost, 3, "from the start of the buffer");
        assert_eq!((frames.start, frames.items.len()), (0, 0));
    }

    #[test]
    fn byte_counts_neither_wrap_nor_saturate() {
        let mut c = ByteCount::default();
        c.add(10);
        c.release(4);
        assert_eq!(c.get(), 6);
        assert!(c.fits(u64::MAX - 6));
        assert!(!c.fits(u64::MAX - 5), "a submit checks this before adding");
        let over = std::panic::catch_unwind(move || {
            let mut c = c;
            c.release(7);
        });
        assert!(
            over.is_err(),
            "releasing more than was counted stops at once"
        );
        let overflow = std::panic::catch_unwind(move || {
            let mut c = ByteCount(u64::MAX);
            c.add(1);
        });
        assert!(overflow.is_err(), "an overflow stops at once");
    }
}
