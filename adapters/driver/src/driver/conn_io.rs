//! Socket I/O on the driver's open connections: flushing what the pool hands out, filling
//! the read buffer, cutting responses with the codec, and the slow-drip frame deadline.
//!
//! A child of the driver module (so the driver's state stays private to the two of them):
//! [`Driver::poll_io`] runs once per round, and [`Driver::poll_timer`] consults
//! [`Driver::next_drip_deadline`] and [`Driver::check_drips`].

use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use keepwire_proto::{ConnId, Failure, Instant, Violation};

use super::{Conn, Driver, contain};
use crate::client::ClientEvent;
use crate::error::failure_of;
use crate::runtime::IoStream;
use crate::socket::OptionReport;

/// Writes or reads on one connection in one round.
const IO_BUDGET: usize = 64;

/// An open connection: its stream, its socket-option report, and the bytes read but not yet
/// decoded.
pub(super) struct OpenConn {
    pub(super) stream: Box<dyn IoStream>,
    pub(super) report: OptionReport,
    inbound: BytesMut,
    /// When the response now partly received started arriving.
    partial_since: Option<Instant>,
}

impl OpenConn {
    pub(super) fn new(stream: Box<dyn IoStream>, report: OptionReport) -> Self {
        Self {
            stream,
            report,
            inbound: BytesMut::new(),
            partial_since: None,
        }
    }
}

impl Driver {
    /// Writes what the pool hands out and reads what peers sent, on every open connection.
    pub(super) fn poll_io(&mut self, cx: &mut Context<'_>) -> bool {
        self.snapshot_conn_ids(true);
        let mut moved = false;
        for i in 0..self.conn_ids.len() {
            let conn = self.conn_ids[i];
            moved |= self.flush(cx, conn);
            self.settle();
            moved |= self.fill(cx, conn);
            self.settle();
        }
        moved
    }

    fn flush(&mut self, cx: &mut Context<'_>, conn: ConnId) -> bool {
        let mut moved = false;
        for _ in 0..IO_BUDGET {
            let Some(Conn::Open(open)) = self.conns.get_mut(&conn) else {
                return moved;
            };
            let Some(bytes) = self.pool.poll_transmit(conn) else {
                return moved;
            };
            let written = open.stream.poll_write(cx, &bytes);
            let now = self.now();
            match written {
                Poll::Ready(Ok(0)) if !bytes.is_empty() => {
                    self.lost(now, conn, Failure::PeerClosed);
                    return true;
                }
                Poll::Ready(Ok(n)) => {
                    let _ = self.pool.handle_written(now, conn, n);
                    moved = true;
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {
                    let _ = self.pool.handle_written(now, conn, 0);
                }
                Poll::Ready(Err(e)) => {
                    self.lost(now, conn, failure_of(&e));
                    return true;
                }
                Poll::Pending => {
                    let _ = self.pool.handle_written(now, conn, 0);
                    return moved;
                }
            }
        }
        cx.waker().wake_by_ref();
        moved
    }

    fn fill(&mut self, cx: &mut Context<'_>, conn: ConnId) -> bool {
        let mut moved = false;
        for _ in 0..IO_BUDGET {
            let now = self.now();
            let Some(Conn::Open(open)) = self.conns.get_mut(&conn) else {
                return moved;
            };
            let read = open.stream.poll_read(cx, &mut self.read_buf);
            match read {
                Poll::Pending => return moved,
                Poll::Ready(Ok(0)) => {
                    self.lost(now, conn, Failure::PeerClosed);
                    return true;
                }
                Poll::Ready(Ok(n)) => {
                    open.inbound.extend_from_slice(&self.read_buf[..n]);
                    moved = true;
                    if !self.decode(now, conn) {
                        return true;
                    }
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Poll::Ready(Err(e)) => {
                    self.lost(now, conn, failure_of(&e));
                    return true;
                }
            }
        }
        cx.waker().wake_by_ref();
        moved
    }

    /// Hands every complete response to the pool; `false` if the connection was closed.
    fn decode(&mut self, now: Instant, conn: ConnId) -> bool {
        let mut completed = false;
        loop {
            let Some(Conn::Open(open)) = self.conns.get_mut(&conn) else {
                return false;
            };
            let decoded = match contain(|| self.codec.decode(&mut open.inbound)) {
                Ok(decoded) => decoded,
                Err(message) => {
                    // The buffer's state is unknown: only closing the connection is safe.
                    self.publish(&ClientEvent::CodecPanicked { conn, message });
                    self.violated(now, conn, Violation::Undecodable);
                    return false;
                }
            };
            match decoded {
                Ok(Some(response)) => {
                    completed = true;
                    if self
                        .pool
                        .handle_response(now, conn, response.id, response.payload)
                        .is_err()
                    {
                        // An unknown id: the pool closed the connection (a Close follows).
                        self.conns.remove(&conn);
                        return false;
                    }
                }
                Ok(None) => {
                    if open.inbound.is_empty() {
                        open.partial_since = None;
                    } else if completed || open.partial_since.is_none() {
                        open.partial_since = Some(now);
                    }
                    return true;
                }
                Err(violation) => {
                    self.violated(now, conn, violation);
                    return false;
                }
            }
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

    /// The earliest instant at which some partly received response becomes too slow.
    pub(super) fn next_drip_deadline(&self) -> Option<Instant> {
        let limit = self.frame_timeout?;
        self.conns
            .values()
            .filter_map(|c| match c {
                Conn::Open(open) => open.partial_since.map(|since| since.expiry_after(limit)),
                _ => None,
            })
            .min()
    }

    pub(super) fn check_drips(&mut self, now: Instant) {
        let Some(limit) = self.frame_timeout else {
            return;
        };
        let slow: Vec<(ConnId, Duration)> = self
            .conns
            .iter()
            .filter_map(|(id, c)| match c {
                Conn::Open(OpenConn {
                    partial_since: Some(since),
                    ..
                }) if now - *since > limit => Some((*id, now - *since)),
                _ => None,
            })
            .collect();
        for (conn, elapsed) in slow {
            self.violated(now, conn, Violation::TooSlow { elapsed });
        }
    }
}
