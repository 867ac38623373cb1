//! The byte chunks that requests are framed into and responses read into, recycled.
//!
//! Frames are split off the encoding buffer and responses off a connection's inbound buffer,
//! so a chunk stays allocated while any frame or response cut from it lives (in the pool,
//! or with a caller). Reserving a fresh chunk whenever the current one filled up churned the
//! allocator with 64 KiB blocks: with 16 KiB requests a third of an allocation per request,
//! and, as freed blocks were trimmed off the heap and fresh ones faulted back in, a tenth of
//! the driver's time in page faults. [`Chunks`] parks each full chunk instead and takes it
//! back, whole, once everything cut from it has been dropped, so steady traffic allocates no
//! buffer at all.
//!
//! There are two pools. Frames, and the responses of a connection whose responses are small,
//! go in 64 KiB chunks, of which 32 are kept (2 MiB): the working set of 64 requests of 16 KiB.
//! Keeping fewer, or freeing the reclaimable chunks beyond a few, brought the churn back
//! (several chunks come free together when a batch of frames is written). A connection whose
//! responses are larger than an eighth of that ([`LARGE_RESPONSE`]) reads them into 256 KiB
//! chunks, 8 kept (2 MiB): one read then takes up to fifteen 16 KiB responses where a 64 KiB
//! chunk took three (BENCHMARKS.md, "Larger writes and reads for large frames"), while a
//! connection of small responses keeps, and a small response kept by its caller pins, no
//! more than 64 KiB.

use std::collections::VecDeque;
use std::mem;

use bytes::BytesMut;

/// Bytes per chunk of the small pool ([`Chunks::small`]).
pub(super) const CHUNK: usize = 64 * 1024;
/// Bytes per chunk of the large pool ([`Chunks::large`]).
pub(super) const LARGE_CHUNK: usize = 256 * 1024;
/// Responses longer than this (fewer than eight to a small chunk) are read into large chunks.
pub(super) const LARGE_RESPONSE: usize = CHUNK / 8;

/// Full chunks of one size waiting for the pieces cut from them to be dropped.
#[derive(Debug)]
pub(super) struct Chunks {
    /// Bytes per chunk.
    size: usize,
    /// Parked chunks kept at most; beyond that the oldest is let go, to be freed once its
    /// last piece is.
    keep: usize,
    parked: VecDeque<BytesMut>,
}

impl Chunks {
    /// The pool of 64 KiB chunks: frames, and responses up to [`LARGE_RESPONSE`].
    pub(super) fn small() -> Self {
        Self::new(CHUNK, 32)
    }

    /// The pool of 256 KiB chunks: the responses of connections whose responses are larger.
    pub(super) fn large() -> Self {
        Self::new(LARGE_CHUNK, 8)
    }

    fn new(size: usize, keep: usize) -> Self {
        Self {
            size,
            keep,
            parked: VecDeque::new(),
        }
    }

    /// Makes room for `additional` more bytes in `buf`. When its chunk is too full, `buf`
    /// moves (with the bytes it holds) to a parked chunk whose pieces are all gone, or else a
    /// new one, and its old chunk is parked. What does not fit a chunk grows `buf` as
    /// `BytesMut::reserve` does.
    pub(super) fn reserve(&mut self, buf: &mut BytesMut, additional: usize) {
        if buf.capacity() - buf.len() >= additional {
            return;
        }
        self.move_to_chunk(buf, additional, None);
    }

    /// Moves `buf` (with the bytes it holds) to a chunk of this pool with room for
    /// `additional` more, and parks its old chunk in `from`, the pool it came from.
    pub(super) fn take_over(&mut self, buf: &mut BytesMut, additional: usize, from: &mut Self) {
        self.move_to_chunk(buf, additional, Some(from));
    }

    fn move_to_chunk(&mut self, buf: &mut BytesMut, additional: usize, from: Option<&mut Self>) {
        let needed = buf.len() + additional;
        if needed > self.size {
            buf.reserve(additional);
            return;
        }
        // The latest first: with one request at a time, the chunk its response was read into,
        // parked when the connection went idle, is free again by the next response. (Under
        // load a rotation comes once per chunk's worth of traffic, so the scan costs little.)
        let size = self.size;
        let reclaimed = (0..self.parked.len())
            .rev()
            .find(|&i| self.parked[i].try_reclaim(size));
        let mut next = match reclaimed.and_then(|i| self.parked.remove(i)) {
            Some(chunk) => chunk,
            None => BytesMut::with_capacity(size),
        };
        next.extend_from_slice(buf);
        // A full chunk's handle has no room left, but still names the chunk.
        let old = mem::replace(buf, next);
        from.unwrap_or(self).park(old);
    }

    /// Takes back the chunk under `buf` (what it holds is dropped), to be reused once the
    /// pieces cut from it are gone: an idle connection need not keep one.
    pub(super) fn park(&mut self, mut buf: BytesMut) {
        if !names_a_chunk(&buf) {
            return;
        }
        buf.clear();
        if self.parked.len() == self.keep {
            self.parked.pop_front();
        }
        self.parked.push_back(buf);
    }
}

/// The two pools, and which one a buffer draws from: the large one once the pieces cut from
/// it (frames, or a connection's responses) are longer than [`LARGE_RESPONSE`].
#[derive(Debug)]
pub(super) struct Pools {
    small: Chunks,
    large: Chunks,
}

/// A buffer's chunk pool, and the length of the pieces last cut from it, which choose the pool
/// of its next chunk.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sizing {
    /// Whether the buffer's chunk is one of the large pool's.
    large: bool,
    /// The length of the last piece cut from the buffer (0 before the first).
    pub(super) piece: usize,
}

impl Pools {
    pub(super) fn new() -> Self {
        Self {
            small: Chunks::small(),
            large: Chunks::large(),
        }
    }

    /// Makes room for `additional` more bytes in `buf`, as [`Chunks::reserve`] does, in a
    /// chunk of the pool its pieces' length calls for. A buffer changes pools only when it
    /// moves to another chunk anyway.
    pub(super) fn reserve(&mut self, buf: &mut BytesMut, sizing: &mut Sizing, additional: usize) {
        let wants_large = sizing.piece > LARGE_RESPONSE;
        let room = buf.capacity() - buf.len();
        match (sizing.large, wants_large) {
            (false, false) => self.small.reserve(buf, additional),
            (true, true) => self.large.reserve(buf, additional),
            _ if room >= additional => {}
            (false, true) => {
                self.large.take_over(buf, additional, &mut self.small);
                sizing.large = true;
            }
            (true, false) => {
                self.small.take_over(buf, additional, &mut self.large);
                sizing.large = false;
            }
        }
    }

    /// Takes back the chunk under `buf` into its pool ([`Chunks::park`]); the buffer left in
    /// its place names none.
    pub(super) fn park(&mut self, buf: &mut BytesMut, sizing: &mut Sizing) {
        let pool = if sizing.large {
            &mut self.large
        } else {
            &mut self.small
        };
        pool.park(mem::take(buf));
        sizing.large = false;
    }
}

/// Whether `buf` names an allocation: it has room, or (full) it does not point where an empty
/// `BytesMut::new()` points, since a full chunk's handle points at the chunk's end.
fn names_a_chunk(buf: &BytesMut) -> bool {
    buf.capacity() > 0 || buf.as_ptr() != BytesMut::new().as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_reused_once_every_piece_cut_from_it_is_dropped() {
        let mut chunks = Chunks::small();
        let mut buf = BytesMut::new();
        chunks.reserve(&mut buf, 100);
        let first = buf.as_ptr();
        buf.extend_from_slice(&[1; 100]);
        let piece = buf.split().freeze();
        buf.extend_from_slice(&[2; 10]); // the start of the next piece
        chunks.reserve(&mut buf, CHUNK - 10);
        assert_ne!(
            buf.as_ptr(),
            first,
            "a new chunk: the old one still has a live piece"
        );
        assert_eq!(&buf[..], &[2; 10], "the bytes held move along");
        let second = buf.as_ptr();
        let _ = buf.split();
        drop(piece);
        chunks.reserve(&mut buf, CHUNK);
        assert_eq!(
            buf.as_ptr(),
            first,
            "the first chunk is back, from its start"
        );
        assert_eq!(buf.capacity(), CHUNK);
        chunks.reserve(&mut buf, CHUNK);
        assert_eq!(buf.as_ptr(), first, "enough room: nothing moves");
        buf.extend_from_slice(&[3; CHUNK - 20]);
        let _live = buf.split().freeze();
        buf.extend_from_slice(&[4; 5]);
        chunks.reserve(&mut buf, 20);
        assert_eq!(
            buf.as_ptr(),
            second,
            "the second one, whose pieces are gone too"
        );
        assert_eq!(&buf[..], &[4; 5]);
    }

    #[test]
    fn more_than_a_chunk_grows_the_buffer_and_few_chunks_are_kept() {
        let mut chunks = Chunks::small();
        let mut buf = BytesMut::from(&[7u8; 10][..]);
        chunks.reserve(&mut buf, 3 * CHUNK);
        assert!(buf.capacity() >= 3 * CHUNK + 10);
        assert_eq!(&buf[..], &[7; 10]);
        let mut pieces = Vec::new();
        let mut buf = BytesMut::new();
        for _ in 0..3 * chunks.keep {
            chunks.reserve(&mut buf, CHUNK);
            buf.extend_from_slice(&[1; CHUNK]);
            pieces.push(buf.split().freeze());
        }
        assert_eq!(chunks.parked.len(), chunks.keep);
    }

    #[test]
    fn large_pieces_come_from_large_chunks_and_small_ones_from_small() {
        const READ: usize = 16 * 1024;
        let mut pools = Pools::new();
        let (mut buf, mut sizing) = (BytesMut::new(), Sizing::default());
        // Nothing cut yet, then small pieces: a small chunk.
        pools.reserve(&mut buf, &mut sizing, READ);
        assert_eq!((buf.capacity(), sizing.large), (CHUNK, false));
        let first = buf.as_ptr();
        sizing.piece = 100;
        pools.reserve(&mut buf, &mut sizing, READ);
        assert_eq!((buf.capacity(), sizing.large), (CHUNK, false));
        // Large pieces, with room left in the small chunk: it stays until it must move.
        buf.extend_from_slice(&[1; CHUNK - READ]);
        let first_cut = buf.split_to(CHUNK - READ - 10).freeze();
        sizing.piece = LARGE_RESPONSE + 1;
        pools.reserve(&mut buf, &mut sizing, READ);
        assert_eq!((buf.capacity(), sizing.large), (READ + 10, false));
        // It must move: to a large chunk, with what it holds; the small one goes home.
        buf.extend_from_slice(&[2; 1]);
        pools.reserve(&mut buf, &mut sizing, READ);
        assert_eq!((buf.capacity(), sizing.large), (LARGE_CHUNK, true));
        assert_eq!(&buf[..], &[&[1u8; 10][..], &[2]].concat()[..]);
        assert_eq!((pools.small.parked.len(), pools.large.parked.len()), (1, 0));
        // Small pieces again: back to a small chunk when the large one is full, the first
        // one, free again.
        drop(first_cut);
        buf.extend_from_slice(&vec![3; LARGE_CHUNK - 11 - 100]);
        let _second_cut = buf.split().freeze();
        buf.extend_from_slice(&[4; 100]);
        sizing.piece = 100;
        pools.reserve(&mut buf, &mut sizing, READ);
        assert_eq!(
            (buf.as_ptr(), buf.capacity(), sizing.large),
            (first, CHUNK, false)
        );
        assert_eq!(&buf[..], &[4; 100][..]);
        assert_eq!((pools.small.parked.len(), pools.large.parked.len()), (0, 1));
        // Parked: into its own pool, and the buffer names none.
        pools.park(&mut buf, &mut sizing);
        assert_eq!((pools.small.parked.len(), pools.large.parked.len()), (1, 1));
        assert!(!names_a_chunk(&buf) && !sizing.large);
    }

    /// The pools part at eight pieces to a small chunk: pieces of up to 8 KiB are read into
    /// small chunks, longer ones (the benchmark's 16 KiB responses) into large ones.
    #[test]
    fn pieces_longer_than_an_eighth_of_a_small_chunk_go_to_large_chunks() {
        for (piece, large) in [
            (100, false),
            (8 * 1024, false),
            (8 * 1024 + 1, true),
            (16 * 1024, true),
        ] {
            let mut pools = Pools::new();
            let (mut buf, mut sizing) = (BytesMut::new(), Sizing::default());
            sizing.piece = piece;
            pools.reserve(&mut buf, &mut sizing, 1024);
            assert_eq!(sizing.large, large, "pieces of {piece} bytes");
            let chunk = if large { LARGE_CHUNK } else { CHUNK };
            assert_eq!(buf.capacity(), chunk, "pieces of {piece} bytes");
        }
    }

    #[test]
    fn a_parked_buffer_chunk_is_reused_by_the_next_buffer_that_needs_one() {
        let mut chunks = Chunks::small();
        let mut idle = BytesMut::new();
        chunks.reserve(&mut idle, 10);
        let chunk = idle.as_ptr();
        idle.extend_from_slice(b"part");
        chunks.park(idle);
        let mut busy = BytesMut::new();
        chunks.reserve(&mut busy, 10);
        assert_eq!(busy.as_ptr(), chunk);
        assert!(busy.is_empty(), "what the parked buffer held is gone");
        assert!(
            chunks.parked.is_empty(),
            "an empty buffer names no chunk to park"
        );
        busy.extend_from_slice(&[1; CHUNK]);
        let full = busy.split().freeze();
        assert!(names_a_chunk(&busy), "a full chunk's handle still names it");
        chunks.park(busy);
        assert_eq!(chunks.parked.len(), 1);
        drop(full);
    }
}
