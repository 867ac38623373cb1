//! The peers: what each connection's peer received, parsed into frames, and how it answers
//! (by id, in order, or before a frame has finished arriving).

use alloc::vec::Vec;

use bytes::Bytes;

use super::Session;
use crate::{ConnId, RequestId};

/// What a peer received on one connection: frames are `id (8 bytes) | len (2) | filler`.
#[derive(Default)]
pub(super) struct Stream {
    pub(super) buf: Vec<u8>,
    /// Complete frames not yet answered.
    pub(super) unanswered: Vec<RequestId>,
    /// The frame whose header has arrived and whose body has not, if any.
    pub(super) arriving: Option<RequestId>,
    /// Frames answered while still arriving: not answered again once complete.
    pub(super) answered_early: Vec<RequestId>,
}

const HEADER: usize = 10;
const FILLER: u8 = 0x5A;

/// A frame as the peers parse it: `id (8 bytes) | len (2) | len filler bytes`.
pub(super) fn frame(id: RequestId, len: u16) -> Bytes {
    let len = len % 512;
    let mut frame = Vec::with_capacity(HEADER + usize::from(len));
    frame.extend_from_slice(&id.as_u64().to_be_bytes());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.resize(HEADER + usize::from(len), FILLER);
    Bytes::from(frame)
}

/// The request a frame (or the rest of one) names: `prefix` is what its peer already holds
/// of it.
pub(super) fn frame_id(prefix: &[u8], rest: &[u8]) -> RequestId {
    let mut id = [0; 8];
    for (i, b) in prefix.iter().chain(rest).take(8).enumerate() {
        id[i] = *b;
    }
    RequestId::from_u64(u64::from_be_bytes(id))
}

impl Session {
    /// Splits the peer's received bytes into frames: each arrives whole (its body untouched),
    /// and no request's bytes ever reach a peer twice, on any connection. The model hears of
    /// each frame's first byte and of each frame completed (its bytes no longer pending).
    pub(super) fn parse(&mut self, conn: ConnId) {
        let Some(stream) = self.streams.get_mut(&conn) else {
            return;
        };
        let mut completed = Vec::new();
        while stream.buf.len() >= 8 {
            let id = RequestId::from_u64(u64::from_be_bytes(stream.buf[..8].try_into().unwrap()));
            if stream.arriving != Some(id) {
                assert!(
                    self.reqs.contains_key(&id)
                        || self.ended.contains(&id)
                        || self.pings.contains(&id),
                    "{conn:?}: a frame header names no request: the stream lost its alignment"
                );
                assert!(
                    self.on_wire.insert(id),
                    "{id:?} reached a peer a second time (on {conn:?})"
                );
                assert!(
                    !self.never_sent.contains(&id),
                    "{id:?} ended as never sent but reached a peer"
                );
                stream.arriving = Some(id);
            }
            if stream.buf.len() < HEADER {
                break;
            }
            let len = usize::from(u16::from_be_bytes([stream.buf[8], stream.buf[9]]));
            if stream.buf.len() < HEADER + len {
                break;
            }
            assert!(
                stream.buf[HEADER..HEADER + len]
                    .iter()
                    .all(|&b| b == FILLER),
                "{id:?} arrived corrupted"
            );
            stream.buf.drain(..HEADER + len);
            if !stream.answered_early.contains(&id) {
                stream.unanswered.push(id);
            }
            stream.arriving = None;
            completed.push(id);
        }
        for id in completed {
            self.frame_completed(id);
        }
    }

    /// The peer answers the request whose frame is still arriving (a response to a
    /// half-written frame, which the pool accepts).
    pub(super) fn respond_arriving(&mut self, i: u8) {
        let Some(conn) = self.conn(i) else { return };
        let Some(stream) = self.streams.get_mut(&conn) else {
            return;
        };
        // A peer answers each request once: not again while the rest of it is arriving.
        let Some(id) = stream
            .arriving
            .filter(|id| !stream.answered_early.contains(id))
        else {
            return;
        };
        // Its bytes still count as arriving; the frame is finished later and then unanswered.
        stream.answered_early.push(id);
        self.answered(conn, id);
        let result = self
            .pool
            .handle_response(self.now, conn, id, Bytes::from_static(b"early"));
        assert_eq!(
            result,
            Ok(()),
            "a response to a half-written frame is accepted"
        );
        self.drain();
    }

    pub(super) fn respond(&mut self, i: u8, pick: u16) {
        let Some(conn) = self.conn(i) else { return };
        let Some(stream) = self.streams.get_mut(&conn) else {
            return;
        };
        if stream.unanswered.is_empty() {
            return;
        }
        let id = stream
            .unanswered
            .remove(pick as usize % stream.unanswered.len());
        self.answered(conn, id);
        let result = self
            .pool
            .handle_response(self.now, conn, id, Bytes::from_static(b"ok"));
        assert_eq!(
            result,
            Ok(()),
            "a response to a request the peer received is accepted"
        );
        self.drain();
    }

    pub(super) fn respond_in_order(&mut self, i: u8) {
        let Some(conn) = self.conn(i) else { return };
        let Some(stream) = self.streams.get_mut(&conn) else {
            return;
        };
        if stream.unanswered.is_empty() {
            return;
        }
        let oldest = stream.unanswered.remove(0);
        let live = self.reqs.contains_key(&oldest);
        self.answered(conn, oldest);
        let result = self
            .pool
            .handle_next_response(self.now, conn, Bytes::from_static(b"ok"));
        assert_eq!(
            result,
            Ok(live.then_some(oldest)),
            "an in-order response answers the oldest request the peer received"
        );
        self.drain();
    }

    /// A response with an id of the input's choosing: refused as a violation (the connection
    /// closes) unless it names a request the peer has and has not answered.
    pub(super) fn respond_unknown(&mut self, i: u8, raw: u64) {
        let Some(conn) = self.conn(i) else { return };
        let id = RequestId::from_u64(raw);
        if let Some(stream) = self.streams.get(&conn) {
            if let Some(at) = stream.unanswered.iter().position(|&u| u == id) {
                return self.respond(i, at as u16);
            }
            if stream.arriving == Some(id) {
                return self.respond_arriving(i);
            }
            // A frame whose first bytes (fewer than its id) arrived is in flight: it may be
            // the one named, a request's or a heartbeat's ping.
            let known =
                self.reqs.contains_key(&id) || self.ended.contains(&id) || self.pings.contains(&id);
            if known && !stream.buf.is_empty() && stream.arriving.is_none() {
                return;
            }
        }
        let result = self.pool.handle_response(self.now, conn, id, Bytes::new());
        let expected = if self.state_of(conn.node()).is_established() {
            Err(crate::HandleError::UnknownRequest)
        } else {
            Err(crate::HandleError::WrongState)
        };
        assert_eq!(result, expected, "a response naming nothing on {conn:?}");
        self.drain();
    }
}
