//! Socket I/O on the driver's open connections: writing what the pool hands out, one
//! vectored write per batch of a connection's queued frames, and reading, cutting responses
//! with the codec and telling the pool whether part of one is still buffered (the pool owns
//! the slow-drip deadline).
//!
//! A round hands the pool no more than a slice of a connection's responses
//! ([`answer_slice`]): a pipelining peer answers a whole batch at once, and answering it whole
//! kept every caller's next request back until the last answer was out, while the peer sat
//! idle. Answered a slice at a time, the first callers' next requests leave (the driver
//! yields to them, then writes) while the rest of the batch is still being answered.
//!
//! A stream that encodes what it writes (TLS) may hold part of a hand-out in its own buffer
//! ([`IoStream::held`]): the driver then leaves that hand-out open, unreported, and offers the
//! same frames again when the stream can move, so the pool counts a frame as written only once
//! its encoding is in the kernel and can never drop a frame whose bytes are already encoded.
//!
//! A child of the driver module (so the driver's state stays private to the two of them):
//! [`Driver::poll_io`] runs once per round.

use std::io::{self, IoSlice};
use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use keepwire_proto::{ConnId, Failure, Instant, Violation};

use super::chunks::{Pools, Sizing};
use super::wake::{ReadWake, Wakeups};
use super::{Conn, Driver, contain, round_now};
use crate::client::ClientEvent;
use crate::codec::{Decoded, Decoder};
use crate::error::failure_of;
use crate::handshake::refusal_of;
use crate::runtime::IoStream;
use crate::socket::OptionReport;

/// Most bytes handed to one vectored write (a single larger frame still goes whole): the cap
/// grows with the frames, to what one `writev` takes ([`WRITE_SLICES`] of the last hand-out's
/// average frame), between [`MIN_BATCH`] and this.
///
/// With 16 KiB frames a 64 KiB cap wrote three frames per `writev`, where a hand-written
/// client's `write_all` of everything queued made half the syscalls per request; 256 KiB
/// took A from ×0.84 to ×0.98–1.00 of that client at 16 KiB × 64 on current_thread, and 1 MiB
/// measured level with 256 KiB (BENCHMARKS.md, "Larger writes and reads for large frames").
/// On a plain socket frames are handed out only for the write itself: its report follows at
/// once, and what the kernel did not take goes back to the queue, droppable at its deadline
/// again. A failed write is reported too, as moving nothing (a failed `writev` moved no
/// byte), so however many frames a hand-out holds, a write error ends them `Sent::Nothing`,
/// safe to retry (`real_batching` and `real_memcached`'s killed server hold it). A hook's
/// stream may have pushed part of its encoding before failing, so its failed hand-out stays
/// unreported (`Sent::Unknown`), another reason it keeps the least cap.
const MAX_BATCH: usize = 256 * 1024;
/// The least cap, and the cap of a client with a handshake hook. 64 KiB is the largest TCP
/// segment the kernel builds with segmentation offload. A hook may install a stream that
/// holds part of what it is given (TLS, [`IoStream::held`]); such a stream keeps its whole
/// hand-out until it moves, so those frames could no longer be dropped unsent at their
/// deadlines: the cap bounds how many.
const MIN_BATCH: usize = 64 * 1024;
/// Slices one `writev` takes (Linux's `IOV_MAX`): the frames of a hand-out beyond them go back
/// to the queue unwritten, so a cap that let tiny frames overflow them would only hand out
/// frames to take them back.
const WRITE_SLICES: usize = 1024;
/// Vectored writes in one round, across connections, before the driver reads and yields.
const WRITE_BUDGET: usize = 64;
/// Reads on one connection in one round.
const READ_BUDGET: usize = 64;
/// The fewest bytes one read asks for.
const MIN_READ: usize = 16 * 1024;
/// Writes that pass without a read right after them once such a read found nothing
/// ([`ReadAfterWrite`]).
const SKIP_AFTER_EMPTY_READ: u8 = 7;
/// A round answers about this fraction (one in `ANSWER_SLICES`) of a connection's requests in
/// flight before it leaves the rest of the buffered responses to the next round.
const ANSWER_SLICES: usize = 2;
/// The fewest responses a round hands the pool per connection before it may pause.
const MIN_ANSWER_SLICE: usize = 4;

/// How many responses a round hands the pool from a connection of a node with `in_flight`
/// requests before it pauses: a half, rounded up (64 in flight: 32 and 32).
///
/// The best slice depends on what a sleeping core costs to wake, which differs between
/// machines (and between hours on the same VM). Where a wake cost about 50 µs, answering whole
/// batches left the peer idle through each of the client's turns and was slowest by far, and a
/// third beat a half (BENCHMARKS.md, "Answering a batch a slice at a time"); where a wake is
/// cheap, every extra slice is one more write and one more round per batch, and a third was
/// the slowest of the three, whole batches and halves level (BENCHMARKS.md, "Halves, not
/// thirds"). Each extreme loses a lot in one of the two (whole batches about 40 % where a
/// wake is slow, thirds 10–15 % where it is cheap); a half loses at most about a tenth in
/// either.
fn answer_slice(in_flight: usize) -> usize {
    in_flight.div_ceil(ANSWER_SLICES).max(MIN_ANSWER_SLICE)
}

/// The most one read into a connection's chunk asks for: `limit`, or, when that would fill the
/// chunk (`room` bytes left after the `held` bytes of a partial response), up to the last
/// point where a whole number of responses of `response_len` bytes (the last one's) would end.
///
/// A response the chunk's end cuts in two moves to the next chunk, copied; reads that fill the
/// chunk to its last byte made that happen on every chunk whenever the responses do not
/// divide it (16 KiB payloads in 64 KiB chunks: three responses and all but 48 bytes of a
/// fourth, 16,348 bytes copied for every three responses). Stopping at a boundary leaves the
/// end of the chunk unused instead, and the next read starts a fresh chunk with nothing to
/// move. Reads that do not reach the chunk's end, and responses longer than what is left, read
/// as much as they can.
fn read_limit(held: usize, room: usize, limit: usize, response_len: usize) -> usize {
    if limit < room || response_len == 0 {
        return limit.min(room);
    }
    let end = (held + room) / response_len * response_len;
    if end > held { end - held } else { room }
}

/// Makes room in a connection's buffer for a read (a fresh chunk, or a larger buffer, once
/// less than [`MIN_READ`] is left: `Pools::reserve`) and returns how much the read may ask
/// for: at most `max`, and no further than where a response ends if it would fill the chunk
/// ([`read_limit`]).
fn room_for_read(
    inbound: &mut BytesMut,
    sizing: &mut Sizing,
    chunks: &mut Pools,
    max: usize,
) -> usize {
    if inbound.capacity() - inbound.len() < MIN_READ {
        chunks.reserve(inbound, sizing, MIN_READ);
    }
    read_limit(
        inbound.len(),
        inbound.capacity() - inbound.len(),
        max,
        sizing.piece,
    )
}

/// How a pass of [`Driver::decode`] over a connection's buffer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decoding {
    /// Every complete response went to the pool; what is left is part of one, or nothing.
    Drained,
    /// The round's slice is answered; complete responses may still be buffered.
    Paused,
    /// The connection was closed (a violation, or the pool closed it).
    Closed,
}

/// An open connection: its stream, its socket-option report, and the bytes read but not yet
/// decoded.
pub(super) struct OpenConn {
    pub(super) stream: Box<dyn IoStream>,
    pub(super) report: OptionReport,
    inbound: BytesMut,
    /// The codec's decoder for this connection's byte stream.
    decoder: Box<dyn Decoder>,
    /// Decoding paused with the round's slice answered: the next round decodes what is
    /// buffered before it reads.
    paused: bool,
    /// Whether the pool was last told that part of a response is buffered. While it was not,
    /// telling it so again would change nothing (no frame timer runs), and is skipped.
    partial: bool,
    /// `inbound`'s chunk pool, and the bytes the last response decoded took off it (0 before
    /// the first): where the read that fills the chunk stops ([`read_limit`]), and which pool
    /// its next chunk comes from.
    sizing: Sizing,
    /// The waker its stream is read with, and whether it woke since the last read.
    read_wake: ReadWake,
    /// Whether the next write is followed by a read ([`Driver::read_after_write`]).
    read_after_write: ReadAfterWrite,
}

impl OpenConn {
    pub(super) fn new(
        stream: Box<dyn IoStream>,
        report: OptionReport,
        decoder: Box<dyn Decoder>,
        wakeups: &Arc<Wakeups>,
        conn: ConnId,
    ) -> Self {
        Self {
            stream,
            report,
            inbound: BytesMut::new(),
            decoder,
            paused: false,
            partial: false,
            sizing: Sizing::default(),
            read_wake: ReadWake::new(wakeups, conn),
            read_after_write: ReadAfterWrite(Some(0)),
        }
    }
}

/// A connection's reads right after its writes (in a round a caller runs in place, and in the
/// task's if [`Runtime::read_after_write`] says so): `None` if its stream cannot read now,
/// else how many more such writes pass before the next read (none after a read that found
/// bytes, [`SKIP_AFTER_EMPTY_READ`] after one that found nothing).
///
/// [`Runtime::read_after_write`]: crate::Runtime::read_after_write
#[derive(Clone, Copy, Debug)]
struct ReadAfterWrite(Option<u8>);

impl ReadAfterWrite {
    /// Whether this write is followed by a read (counting it off if not).
    fn due(&mut self) -> bool {
        match &mut self.0 {
            Some(0) => true,
            Some(skip) => {
                *skip -= 1;
                false
            }
            None => false,
        }
    }

    /// The stream cannot read now ([`IoStream::read_now`] said `None`): no read right after
    /// any later write either.
    ///
    /// [`IoStream::read_now`]: crate::IoStream::read_now
    fn cannot(&mut self) {
        self.0 = None;
    }

    /// What the read found: bytes, or nothing.
    fn found(&mut self, bytes: bool) {
        if let Some(skip) = &mut self.0 {
            *skip = if bytes { 0 } else { SKIP_AFTER_EMPTY_READ };
        }
    }
}

/// The write path's buffers, kept between rounds so that writing allocates nothing.
#[derive(Debug, Default)]
pub(super) struct WriteBufs {
    /// Slices over a hand-out's frames, read where the pool keeps them
    /// ([`Pool::handed_out`](keepwire_proto::Pool::handed_out)), for the vectored write;
    /// empty between writes (it cannot hold borrows across them), only its allocation is
    /// kept.
    slices: Vec<IoSlice<'static>>,
    /// Connections whose last write was cut short or would block: the pool hands them out
    /// again only after [`Pool::handle_writable`](keepwire_proto::Pool::handle_writable).
    blocked: Vec<ConnId>,
    /// Connections whose stream holds part of an unreported hand-out ([`IoStream::held`]).
    holding: Vec<ConnId>,
    /// `holding` as it was at the start of a flush (swapped, to keep both allocations).
    retry: Vec<ConnId>,
    /// The average frame length of the last hand-out, which sets the next one's cap.
    frame_bytes: usize,
    /// Copies of a hand-out's small frames, side by side ([`gather`]).
    joined: Vec<u8>,
}

impl Driver {
    /// Writes what the pool hands out, then reads what peers sent on the open connections
    /// whose streams woke the driver (or that a round left part-way: [`wake`](super::wake)).
    pub(super) fn poll_io(&mut self, cx: &mut Context<'_>) {
        self.flush(cx);
        self.conn_ids.clear();
        self.conn_ids.append(&mut self.paused);
        self.wakeups
            .set_few(self.conns.span() <= super::wake::SCAN_AT_MOST);
        if self.wakeups.take(&mut self.conn_ids) {
            // The list overflowed, or the driver has few connections and nothing was listed:
            // every open connection that woke, by its mark.
            self.conns.pick_into(
                &mut self.conn_ids,
                |conn| matches!(conn, Conn::Open(open) if open.read_wake.is_marked()),
            );
        }
        for i in 0..self.conn_ids.len() {
            let conn = self.conn_ids[i];
            if self.fill(conn) {
                self.settle();
            }
        }
    }

    /// Offers the blocked connections again (a write that would still block registers the
    /// waker, one that can go makes progress), then writes batches while the pool has any.
    fn flush(&mut self, cx: &mut Context<'_>) {
        if !self.writes.blocked.is_empty() {
            let now = self.now();
            for conn in self.writes.blocked.drain(..) {
                // Stale is fine: the connection closed meanwhile, nothing is left to write.
                let _ = self.pool.handle_writable(now, conn);
            }
        }
        // Hand-outs a stream holds part of: the same frames again, still unreported.
        mem::swap(&mut self.writes.holding, &mut self.writes.retry);
        for i in 0..self.writes.retry.len() {
            let conn = self.writes.retry[i];
            self.write(cx, conn, true);
            self.settle();
        }
        self.writes.retry.clear();
        for _ in 0..WRITE_BUDGET {
            // Asked first (pure, and inlined): at one request in flight two of every three
            // hand-outs asked for find nothing (the one after the write and the one in the
            // round that reads the answer), and the call cost about 35 instructions for it.
            if !self.pool.has_transmit() {
                return;
            }
            let cap = if self.hook.is_some() {
                MIN_BATCH
            } else {
                (self.writes.frame_bytes * WRITE_SLICES).clamp(MIN_BATCH, MAX_BATCH)
            };
            let Some(conn) = self.pool.poll_hand_out(cap) else {
                return;
            };
            self.write(cx, conn, false);
            self.settle();
        }
        // More may be waiting: let the reads of this round run, then continue.
        cx.waker().wake_by_ref();
    }

    /// One vectored write of the frames handed out for `conn` (`again`: of the hand-out its
    /// stream holds part of), reported to the pool unless the stream still holds some of it.
    /// The frames are read where the pool keeps them: a stream that holds part of them is
    /// offered the same bytes again, since the pool changes nothing of a hand-out before its
    /// report.
    fn write(&mut self, cx: &mut Context<'_>, conn: ConnId, again: bool) {
        self.telemetry.touched(conn.node());
        let (Some(Conn::Open(open)), Some(frames)) =
            (self.conns.get_mut(&conn), self.pool.handed_out(conn))
        else {
            if again {
                // Closed meanwhile: the pool ended the hand-out with the connection.
                return;
            }
            // The pool hands out only established connections, and those are open here, with
            // the hand-out just made. Should one not be, report nothing written: it stays
            // blocked until it closes.
            debug_assert!(false, "no hand-out to write on {conn:?}, or it is closed");
            let _ = self.pool.handle_written(self.now(), conn, 0);
            return;
        };
        let mut slices: Vec<IoSlice<'_>> = mem::take(&mut self.writes.slices);
        // The pool counted the hand-out's bytes as it made it.
        let total = frames.bytes();
        let count = gather(frames, &mut self.writes.joined, &mut slices);
        self.writes.frame_bytes = total / count.max(1);
        // A failed write of the runtime's own stream, a socket, moved nothing (`writev`
        // returns a count whenever it moved any byte). A stream a handshake hook installed may
        // encode: its failed write may have pushed part of the encoding first (tokio-rustls
        // does, then returns the error), and one that holds bytes has sent some of them.
        let plain = self.hook.is_none() && open.stream.held() == 0;
        let written = open.stream.poll_write_vectored(cx, &slices);
        self.writes.slices = recycle(slices);
        if open.stream.held() > 0 {
            match written {
                Poll::Pending => {
                    // The stream registered the waker; the frames stay handed out.
                    self.writes.holding.push(conn);
                    return;
                }
                Poll::Ready(Err(ref e)) if e.kind() == io::ErrorKind::Interrupted => {
                    self.writes.holding.push(conn);
                    self.follow_up.write = true;
                    return;
                }
                // An error closes the connection; a count is reported (a stream holding
                // bytes after returning one breaks its contract: it is believed all the same).
                _ => debug_assert!(
                    matches!(written, Poll::Ready(Err(_))),
                    "a stream returned a count while holding bytes"
                ),
            }
        }
        // Counted off only for a write the stream took whole (holding none of it, above).
        let read_after = matches!(written, Poll::Ready(Ok(n)) if n == total && n > 0)
            && (self.in_place || self.task_reads_after_write)
            && open.read_after_write.due();
        let now = self.now();
        match written {
            Poll::Ready(Ok(0)) if total > 0 => self.lost(now, conn, Failure::PeerClosed),
            Poll::Ready(Ok(n)) => {
                let _ = self.pool.handle_written(now, conn, n);
                if read_after {
                    self.read_after_write(now, conn);
                }
                if n < total {
                    // Most likely the socket buffer is full (or the batch had more slices than
                    // one writev takes): the next round tries again.
                    self.writes.blocked.push(conn);
                    self.follow_up.write = true;
                }
            }
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {
                let _ = self.pool.handle_written(now, conn, 0);
                self.writes.blocked.push(conn);
                self.follow_up.write = true; // the next round retries at once
            }
            Poll::Ready(Err(e)) => {
                if plain {
                    // Not one byte of the hand-out reached the kernel: reported as such, its
                    // frames go back to the queue and their requests end `Sent::Nothing`
                    // (safe to retry) instead of `Unknown`.
                    let _ = self.pool.handle_written(now, conn, 0);
                }
                self.failed(now, conn, &e);
            }
            Poll::Pending => {
                // The stream registered the waker: the driver runs again once it is writable.
                let _ = self.pool.handle_written(now, conn, 0);
                self.writes.blocked.push(conn);
            }
        }
    }

    /// Reads `conn` right after a write that its stream took whole, before the stream wakes
    /// the driver ([`Runtime::read_after_write`]): a peer on the same machine may have
    /// answered already. What it reads is decoded at once, as [`fill`](Self::fill) would;
    /// nothing read leaves the connection to its wake, as before. A connection whose decoding
    /// paused is left to the next round, which resumes it first.
    ///
    /// [`Runtime::read_after_write`]: crate::Runtime::read_after_write
    fn read_after_write(&mut self, now: Instant, conn: ConnId) {
        let Some(Conn::Open(open)) = self.conns.get_mut(&conn) else {
            return;
        };
        if open.paused {
            return;
        }
        let limit = room_for_read(
            &mut open.inbound,
            &mut open.sizing,
            &mut self.chunks,
            self.read_buf.len(),
        );
        let Some(read) = open.stream.read_now(&mut self.read_buf[..limit]) else {
            open.read_after_write.cannot();
            return;
        };
        match read {
            Ok(0) => self.lost(now, conn, Failure::PeerClosed),
            Ok(n) => {
                open.read_after_write.found(true);
                open.inbound.extend_from_slice(&self.read_buf[..n]);
                if open.report.quickack() {
                    open.stream.socket().rearm_quickack();
                }
                self.telemetry.touched(conn.node());
                let mut slice = answer_slice(self.pool.in_flight(conn.node()).unwrap_or(0));
                let _ = self.decode(now, conn, &mut slice);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                open.read_after_write.found(false);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => self.failed(now, conn, &e),
        }
    }

    /// If `conn` woke the driver or paused decoding: resumes a paused decode, then reads until
    /// the socket would block (registering the connection's read waker), decoding after each
    /// read, unless decoding pauses or the connection ends. Returns whether it did any of it.
    ///
    /// The connection is looked up once, and again only after a decode (which may close it).
    fn fill(&mut self, conn: ConnId) -> bool {
        let mut open = match self.conns.get_mut(&conn) {
            Some(Conn::Open(open)) => open,
            _ => return false,
        };
        // Both taken. A paused connection is read once its buffer is drained, woken or not:
        // the read before the pause did not run the socket dry, so no wake may come.
        let woken = open.read_wake.take();
        let paused = mem::take(&mut open.paused);
        if !woken && !paused {
            return false;
        }
        let mut slice = answer_slice(self.pool.in_flight(conn.node()).unwrap_or(0));
        if paused {
            let now = round_now(&self.clock, &*self.runtime, self.origin);
            if self.decode(now, conn, &mut slice) != Decoding::Drained {
                return true;
            }
            let Some(Conn::Open(drained)) = self.conns.get_mut(&conn) else {
                return true;
            };
            open = drained;
        }
        for _ in 0..READ_BUDGET {
            let cx = &mut Context::from_waker(open.read_wake.waker());
            // A connection that awaits responses reads them in place, into its chunk (64 KiB,
            // or 256 KiB once its responses are large: `Pools::reserve`), which moves (with
            // what it holds) to a recycled one when it has less room than a read's worth (a
            // read that would fill it stops where a response ends, so that little moves:
            // `read_limit`); a larger partial response grows its buffer instead. One that
            // awaits none holds no chunk (an idle connection need not keep one): what it
            // reads, the end of the stream or bytes nothing asked for, goes through the
            // scratch buffer.
            let room = open.inbound.capacity() - open.inbound.len();
            let read = if room >= MIN_READ || self.pool.in_flight(conn.node()) != Some(0) {
                let limit = room_for_read(
                    &mut open.inbound,
                    &mut open.sizing,
                    &mut self.chunks,
                    self.read_buf.len(),
                );
                open.stream
                    .poll_read_buf(cx, &mut open.inbound, limit, &mut self.read_buf)
            } else {
                let read = open.stream.poll_read(cx, &mut self.read_buf[..MIN_READ]);
                if let Poll::Ready(Ok(n)) = read {
                    self.chunks.reserve(&mut open.inbound, &mut open.sizing, n);
                    open.inbound.extend_from_slice(&self.read_buf[..n]);
                }
                read
            };
            let Poll::Ready(read) = read else {
                return true;
            };
            let now = round_now(&self.clock, &*self.runtime, self.origin);
            match read {
                Ok(0) => {
                    self.lost(now, conn, Failure::PeerClosed);
                    return true;
                }
                Ok(_) => {
                    if open.report.quickack() {
                        open.stream.socket().rearm_quickack();
                    }
                    self.telemetry.touched(conn.node());
                    if self.decode(now, conn, &mut slice) != Decoding::Drained {
                        return true;
                    }
                    let Some(Conn::Open(drained)) = self.conns.get_mut(&conn) else {
                        return true;
                    };
                    open = drained;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed(now, conn, &e);
                    return true;
                }
            }
        }
        // The budget ran out with bytes perhaps still to read: marked, for the next round.
        open.read_wake.waker().wake_by_ref();
        true
    }

    /// Hands complete responses to the pool, `slice` of them at most (counted down), and once
    /// no whole one is left tells it whether part of another is buffered. When the slice runs
    /// out first, the rest waits for the next round (`paused`).
    fn decode(&mut self, now: Instant, conn: ConnId, slice: &mut usize) -> Decoding {
        let shared = self.conns.len() > 1;
        // Looked up once, not per response: only the exits that close the connection change
        // the map.
        let Some(Conn::Open(open)) = self.conns.get_mut(&conn) else {
            return Decoding::Closed;
        };
        loop {
            if *slice == 0 && !open.inbound.is_empty() {
                open.paused = true;
                self.paused.push(conn);
                return Decoding::Paused;
            }
            let held = open.inbound.len();
            let decoded = match contain(|| open.decoder.decode(&mut open.inbound)) {
                Ok(decoded) => decoded,
                Err(message) => {
                    // The buffer's state is unknown: only closing the connection is safe.
                    self.publish(ClientEvent::CodecPanicked { conn, message });
                    self.violated(now, conn, Violation::Undecodable);
                    return Decoding::Closed;
                }
            };
            if let Ok(Some(_)) = decoded {
                *slice = slice.saturating_sub(1);
                open.sizing.piece = held - open.inbound.len();
            }
            match decoded {
                Ok(Some(Decoded::Next(payload))) => {
                    if self.pool.handle_next_response(now, conn, payload).is_err() {
                        // Nothing in flight: the pool closed the connection (a Close follows).
                        self.conns.remove(&conn);
                        return Decoding::Closed;
                    }
                }
                Ok(Some(Decoded::Tagged { id, payload })) => {
                    // The id is forgotten once the pool no longer holds its request.
                    let pool = &mut self.pool;
                    let answered = self.ids.answer(id, |&request| {
                        let answered = pool.handle_response(now, conn, request, payload);
                        (answered, !pool.holds(request))
                    });
                    let Some(answered) = answered else {
                        self.violated(now, conn, Violation::UnknownId(id));
                        return Decoding::Closed;
                    };
                    if answered.is_err() {
                        // Not in flight on this connection: the pool closed it.
                        self.conns.remove(&conn);
                        return Decoding::Closed;
                    }
                }
                Ok(None) => {
                    let partial = !open.inbound.is_empty();
                    // Nothing more is expected: the buffer's chunk goes back for the other
                    // connections. A lone connection keeps it: parked, it would be taken back
                    // by its own next read (about 300 instructions per request at one in
                    // flight) and hold the same memory meanwhile.
                    if !partial && shared && self.pool.in_flight(conn.node()) == Some(0) {
                        self.chunks.park(&mut open.inbound, &mut open.sizing);
                    }
                    if partial || open.partial {
                        open.partial = partial;
                        let _ = self.pool.handle_received(now, conn, partial);
                    }
                    return Decoding::Drained;
                }
                Err(violation) => {
                    self.violated(now, conn, violation);
                    return Decoding::Closed;
                }
            }
        }
    }

    /// Ends `conn` for a read or write `error`: as the handshake failure it stands for, if
    /// any ([`refusal_of`]: a server refusing our certificate after the handshake), else as
    /// lost.
    #[cold]
    fn failed(&mut self, now: Instant, conn: ConnId, error: &io::Error) {
        match refusal_of(error) {
            Some(refusal) => {
                self.handshake_failed(now, conn, refusal);
                self.conns.remove(&conn);
            }
            None => self.lost(now, conn, failure_of(error)),
        }
    }

    fn lost(&mut self, now: Instant, conn: ConnId, failure: Failure) {
        let _ = self.pool.handle_closed(now, conn, failure);
        self.conns.remove(&conn);
    }

    fn violated(&mut self, now: Instant, conn: ConnId, violation: Violation) {
        let _ = self.pool.handle_violation(now, conn, violation);
        self.conns.remove(&conn);
    }
}

/// Frames up to this long are copied into one slice when every frame of a hand-out is
/// ([`gather`]). Up to it joining paid in every run (1 KiB frames saved 25–99 ns each); at
/// 2 KiB it came out about even (−11 to +47 ns), and 4 KiB frames lost 41–129 ns each
/// (`cargo bench -p keepwire-benches --bench writev`, four runs).
const JOIN_AT_MOST: usize = 1024;

/// Fills `slices` with the frames of a hand-out, in order, for one vectored write, and
/// returns how many frames there were: when there are several and none is
/// longer than [`JOIN_AT_MOST`], one slice of their copies side by side in `joined` (one
/// buffer for the driver, which keeps the size of the largest such hand-out: about the write
/// cap, [`MAX_BATCH`], at most); otherwise a slice per frame.
///
/// The kernel copies a `writev`'s slices in one by one, at a cost per slice: 32 frames of 76
/// bytes took 0.4–1.3 µs more as 32 slices than as one slice of their copies, 12–42 ns per
/// frame in four runs (`cargo bench -p keepwire-benches --bench writev`; BENCHMARKS.md, "One
/// slice for small frames").
fn gather<'a>(
    frames: impl Iterator<Item = &'a [u8]> + Clone,
    joined: &'a mut Vec<u8>,
    slices: &mut Vec<IoSlice<'a>>,
) -> usize {
    // One pass over the frames, copying as it goes, in the usual case (small frames); a lone
    // frame or a long one sends the hand-out back to a slice per frame.
    let mut rest = frames.clone();
    let (first, second) = match (rest.next(), rest.next()) {
        (Some(first), Some(second))
            if first.len() <= JOIN_AT_MOST && second.len() <= JOIN_AT_MOST =>
        {
            (first, second)
        }
        // The usual hand-out at one request in flight: its lone frame is its own slice.
        (Some(lone), None) => {
            slices.push(IoSlice::new(lone));
            return 1;
        }
        _ => return slice_each(frames, slices),
    };
    joined.clear();
    joined.extend_from_slice(first);
    joined.extend_from_slice(second);
    let mut count = 2;
    for frame in rest {
        if frame.len() > JOIN_AT_MOST {
            return slice_each(frames, slices);
        }
        joined.extend_from_slice(frame);
        count += 1;
    }
    slices.push(IoSlice::new(joined));
    count
}

/// [`gather`]'s slice per frame: how many there were.
fn slice_each<'a>(frames: impl Iterator<Item = &'a [u8]>, slices: &mut Vec<IoSlice<'a>>) -> usize {
    let before = slices.len();
    slices.extend(frames.map(IoSlice::new));
    slices.len() - before
}

/// Empties `slices` and returns its allocation for the next write. Only an empty vector can
/// outlive the frames its slices borrowed; collecting the emptied vector's iterator into a
/// vector of the same layout reuses the allocation (std's in-place collection, checked by a
/// test below: should it ever stop, each write allocates once, nothing worse).
fn recycle(mut slices: Vec<IoSlice<'_>>) -> Vec<IoSlice<'static>> {
    slices.clear();
    slices.into_iter().map(|_| IoSlice::new(&[])).collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn a_read_that_would_fill_the_chunk_stops_where_a_response_ends() {
        const RESPONSE: usize = 16 * 1024 + 12; // a 16 KiB payload, length-prefixed
        let chunk = 64 * 1024;
        // An empty chunk takes three whole responses, not three and all but 48 bytes of a
        // fourth; after a partial one, what completes it and two more.
        assert_eq!(read_limit(0, chunk, chunk, RESPONSE), 3 * RESPONSE);
        assert_eq!(
            read_limit(100, chunk - 100, chunk, RESPONSE),
            3 * RESPONSE - 100
        );
        // A read that cannot fill the chunk, a response longer than what is left, and a
        // connection that has decoded nothing yet: as much as fits.
        assert_eq!(read_limit(0, 4 * chunk, chunk, RESPONSE), chunk);
        assert_eq!(read_limit(100, 1000, chunk, RESPONSE), 1000);
        assert_eq!(read_limit(0, chunk, chunk, 0), chunk);
        assert_eq!(read_limit(0, 1000, chunk, 0), 1000);
    }

    /// The slices `gather` makes of `frames`: their bytes, and whether each is a frame's own.
    fn gathered(frames: &[Bytes]) -> Vec<(Vec<u8>, bool)> {
        let (mut joined, mut slices) = (Vec::new(), Vec::new());
        let count = gather(frames.iter().map(|f| &f[..]), &mut joined, &mut slices);
        let total: usize = slices.iter().map(|slice| slice.len()).sum();
        assert_eq!(total, frames.iter().map(Bytes::len).sum::<usize>());
        assert_eq!(count, frames.len());
        slices
            .iter()
            .map(|slice| {
                let own = frames.iter().any(|f| f.as_ptr() == slice.as_ptr());
                (slice.to_vec(), own)
            })
            .collect()
    }

    /// Four short frames, the one at `at` replaced by one `len` bytes long.
    fn four_frames_with(at: usize, len: usize) -> Vec<Bytes> {
        let mut frames: Vec<Bytes> = [&b"one"[..], b"two", b"three", b"four"]
            .into_iter()
            .map(Bytes::from_static)
            .collect();
        frames[at] = Bytes::from(vec![2; len]);
        frames
    }

    #[test]
    fn small_frames_are_written_as_one_slice_of_their_copies() {
        // A frame of the limit's length is small enough, wherever it stands.
        for at in 0..4 {
            let frames = four_frames_with(at, JOIN_AT_MOST);
            let joined: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
            assert_eq!(gathered(&frames), [(joined, false)], "the longest at {at}");
        }
        // A lone frame needs no copy to be one slice.
        let lone = [Bytes::from_static(b"lone")];
        assert_eq!(gathered(&lone), [(b"lone".to_vec(), true)]);
    }

    #[test]
    fn a_frame_longer_than_the_join_limit_keeps_every_frame_its_own_slice() {
        // Wherever the long frame stands: first, second, or after copying has begun.
        for at in 0..4 {
            let frames = four_frames_with(at, JOIN_AT_MOST + 1);
            let own: Vec<(Vec<u8>, bool)> = frames.iter().map(|f| (f.to_vec(), true)).collect();
            assert_eq!(gathered(&frames), own, "the long frame at {at}");
        }
        assert_eq!(gathered(&[]), [], "an empty hand-out");
    }

    #[test]
    fn recycling_the_slices_keeps_their_allocation() {
        let frames = vec![Bytes::from_static(b"one"); 100];
        let mut slices: Vec<IoSlice<'_>> = Vec::new();
        slices.extend(frames.iter().map(|f| IoSlice::new(f)));
        let (ptr, capacity) = (slices.as_ptr().cast::<u8>(), slices.capacity());
        let recycled = recycle(slices);
        assert!(recycled.is_empty());
        assert_eq!(recycled.capacity(), capacity);
        assert_eq!(recycled.as_ptr().cast::<u8>(), ptr);
    }
}
