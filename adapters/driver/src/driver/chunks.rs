//! The byte chunks that requests are framed into and responses read into, recycled.
//!
//! Frames are split off the encoding buffer and responses off a connection's inbound buffer,
//! so a chunk stays allocated while any frame or response cut from it lives (in the pool,
//! or with a caller). Reserving a fresh chunk whenever the current one filled up churned the
//! allocator with 64 KiB blocks: with 16 KiB requests a third of an allocation per request,
//! and, as freed blocks were trimmed off the heap and fresh ones faulted back in, a tenth of
//! the driver's time in page faults. [`Chunks`] parks each full chunk instead and takes it
//! back, whole, once everything cut from it has been dropped, so steady traffic allocates no
//! buffer at all. It keeps at most 8 chunks (2 MiB), the working set of 64 requests of 16 KiB
//! and their responses: keeping fewer bytes, or freeing the reclaimable chunks beyond a few,
//! brought the churn back (several chunks come free together when a batch of frames is
//! written).

use std::collections::VecDeque;
use std::mem;

use bytes::BytesMut;

/// Bytes per chunk: what one read of a busy connection may take. 64 KiB chunks took three
/// 16 KiB responses per read where a hand-written client's 64 KiB reads of a growing buffer
/// took four; 256 KiB take up to fifteen (128 KiB measured between the two; BENCHMARKS.md,
/// "Larger writes and reads for large frames").
pub(super) const CHUNK: usize = 256 * 1024;
/// Full chunks kept for reuse. Beyond that the oldest is let go, to be freed once its last
/// piece is.
const PARKED: usize = 8;

/// Full chunks waiting for the pieces cut from them to be dropped.
#[derive(Debug, Default)]
pub(super) struct Chunks {
    parked: VecDeque<BytesMut>,
}

impl Chunks {
    /// Makes room for `additional` more bytes in `buf`. When its chunk is too full, `buf`
    /// moves (with the bytes it holds) to a parked chunk whose pieces are all gone, or else a
    /// new one, and its old chunk is parked. What does not fit a chunk grows `buf` as
    /// `BytesMut::reserve` does.
    pub(super) fn reserve(&mut self, buf: &mut BytesMut, additional: usize) {
        if buf.capacity() - buf.len() >= additional {
            return;
        }
        let needed = buf.len() + additional;
        if needed > CHUNK {
            buf.reserve(additional);
            return;
        }
        // The latest first: with one request at a time, the chunk its response was read into,
        // parked when the connection went idle, is free again by the next response. (Under
        // load a rotation comes once per chunk's worth of traffic, so the scan costs little.)
        let reclaimed = (0..self.parked.len())
            .rev()
            .find(|&i| self.parked[i].try_reclaim(CHUNK));
        let mut next = match reclaimed.and_then(|i| self.parked.remove(i)) {
            Some(chunk) => chunk,
            None => BytesMut::with_capacity(CHUNK),
        };
        next.extend_from_slice(buf);
        // A full chunk's handle has no room left, but still names the chunk.
        self.park(mem::replace(buf, next));
    }

    /// Takes back the chunk under `buf` (what it holds is dropped), to be reused once the
    /// pieces cut from it are gone: an idle connection need not keep one.
    pub(super) fn park(&mut self, mut buf: BytesMut) {
        if !names_a_chunk(&buf) {
            return;
        }
        buf.clear();
        if self.parked.len() == PARKED {
            self.parked.pop_front();
        }
        self.parked.push_back(buf);
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
        let mut chunks = Chunks::default();
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
        let mut chunks = Chunks::default();
        let mut buf = BytesMut::from(&[7u8; 10][..]);
        chunks.reserve(&mut buf, 3 * CHUNK);
        assert!(buf.capacity() >= 3 * CHUNK + 10);
        assert_eq!(&buf[..], &[7; 10]);
        let mut pieces = Vec::new();
        let mut buf = BytesMut::new();
        for _ in 0..3 * PARKED {
            chunks.reserve(&mut buf, CHUNK);
            buf.extend_from_slice(&[1; CHUNK]);
            pieces.push(buf.split().freeze());
        }
        assert_eq!(chunks.parked.len(), PARKED);
    }

    #[test]
    fn a_parked_buffer_chunk_is_reused_by_the_next_buffer_that_needs_one() {
        let mut chunks = Chunks::default();
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
