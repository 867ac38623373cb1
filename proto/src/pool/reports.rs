//! The adapter's reports to the [`Pool`]: what its I/O did (connected, handshaken, wrote,
//! read, failed) and the time passing. A report about a stale or unknown handle returns an
//! error and changes nothing.

use core::net::SocketAddr;

use bytes::Bytes;

use super::Pool;
use crate::event::{CloseReason, Failure, HandleError, HandshakeFailure, NodeState, Violation};
use crate::hint::cold_path;
use crate::ids::{ConnId, RequestId};
use crate::time::Instant;
use crate::timers::TimerKey;

impl Pool {
    /// The TCP connect of `conn` completed. For a node added by name, prefer
    /// [`handle_connected_to`](Self::handle_connected_to), which says where.
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Connecting,
            |n, sink| {
                n.connected(sink);
                Ok(())
            },
        )
    }

    /// The TCP connect of `conn` completed, to `peer`: the address a name resolved to (see
    /// [`node_addr`](Self::node_addr)). Otherwise as [`handle_connected`](Self::handle_connected).
    pub fn handle_connected_to(
        &mut self,
        now: Instant,
        conn: ConnId,
        peer: SocketAddr,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Connecting,
            |n, sink| {
                n.reached(peer);
                n.connected(sink);
                Ok(())
            },
        )
    }

    /// The connect of `conn` failed: the TCP connect, or resolving the node's name
    /// ([`Failure::NameNotFound`], final; [`Failure::ResolveFailed`], retryable). A final failure
    /// ([`CloseReason::is_final`]) ends the requests waiting on the node at once and backs the node
    /// off for [`Config::final_failure_backoff`](crate::Config::final_failure_backoff).
    pub fn handle_connect_failed(
        &mut self,
        now: Instant,
        conn: ConnId,
        failure: Failure,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Connecting,
            |n, sink| {
                n.close(sink, CloseReason::ConnectFailed(failure), false);
                Ok(())
            },
        )
    }

    /// The application handshake on `conn` succeeded: the connection is `Ready`.
    pub fn handle_handshake_done(&mut self, now: Instant, conn: ConnId) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |s| s == NodeState::Handshaking,
            |n, sink| {
                n.handshake_done(sink);
                Ok(())
            },
        )
    }

    /// The application handshake on `conn` failed, and how. proto closes the connection.
    /// [`HandshakeFailure::AuthRefused`] and [`HandshakeFailure::CertificateRejected`] are final:
    /// the node enters `AuthFailed`, the requests waiting on it end at once and it backs off for
    /// [`Config::final_failure_backoff`](crate::Config::final_failure_backoff).
    ///
    /// Also taken once the connection is `Ready` (or `Closing`), after
    /// [`handle_handshake_done`](Self::handle_handshake_done): a TLS 1.3 server checks the
    /// client's certificate only after the client has finished its side of the handshake, so
    /// its refusal reaches the adapter as the error of a read that follows. The requests the
    /// connection holds end with the same reason, written or not, and a final one is not
    /// retried.
    pub fn handle_handshake_failed(
        &mut self,
        now: Instant,
        conn: ConnId,
        failure: HandshakeFailure,
    ) -> Result<(), HandleError> {
        let reason = match failure {
            HandshakeFailure::AuthRefused => CloseReason::AuthFailed,
            HandshakeFailure::CertificateRejected => CloseReason::CertificateRejected,
            HandshakeFailure::Failed => CloseReason::HandshakeFailed,
        };
        self.report(
            now,
            conn,
            |s| s == NodeState::Handshaking || s.is_established(),
            |n, sink| {
                n.close(sink, reason, true);
                Ok(())
            },
        )
    }

    /// The kernel accepted `n` bytes of what [`poll_transmit`](Self::poll_transmit) (or
    /// [`poll_hand_out`](Self::poll_hand_out)) last handed out for `conn`; `n` may span
    /// several frames. Exactly one report follows each hand-out. Fewer bytes than were
    /// handed out (0 when the write would block) leave the connection *blocked*: it is not
    /// handed out again until [`handle_writable`](Self::handle_writable). More than was
    /// handed out is refused.
    pub fn handle_written(
        &mut self,
        now: Instant,
        conn: ConnId,
        n: usize,
    ) -> Result<(), HandleError> {
        let node = match self.node(conn.node) {
            Ok(node) if node.is_current(conn) => node,
            _ => {
                cold_path();
                return Err(HandleError::StaleConn);
            }
        };
        match node.state() {
            // The usual case: a report on a ready connection leaves the census as it is.
            NodeState::Ready => {
                let now = self.clock.advance(now);
                self.with_node_in_census(now, conn.node, |node, sink| {
                    node.written(sink, conn.generation, n)
                })?
            }
            NodeState::Closing => self.written_while_closing(now, conn, n),
            _ => Err(HandleError::WrongState),
        }
    }

    /// The socket of `conn` can take bytes again after a short write: its queued frames are
    /// handed out again by [`poll_transmit`](Self::poll_transmit).
    pub fn handle_writable(&mut self, now: Instant, conn: ConnId) -> Result<(), HandleError> {
        self.report(now, conn, NodeState::is_established, |n, sink| {
            n.writable(sink);
            Ok(())
        })
    }

    /// A response to `id` arrived on `conn` (a protocol whose responses carry the request's
    /// correlation id; see [`handle_next_response`](Self::handle_next_response) for in-order
    /// protocols). A response for a request that is not in flight on that connection is a protocol
    /// violation: proto closes the connection (an [`Action::Close`](crate::Action::Close) follows)
    /// and returns [`HandleError::UnknownRequest`]. A late response to a request that already ended
    /// (deadline, cancel) is dropped quietly.
    pub fn handle_response(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: RequestId,
        payload: Bytes,
    ) -> Result<(), HandleError> {
        self.report_answer(
            now,
            conn,
            payload,
            |n, sink, payload| n.respond(sink, conn.generation, id, payload),
            |n, sink, payload| n.response(sink, conn.generation, id, payload),
        )
    }

    /// A response arrived on `conn` for an in-order protocol (PostgreSQL, memcached, Redis,
    /// HTTP/1.1): it answers the oldest request written on `conn` and not yet answered, which is
    /// returned. A request that ended early (deadline, cancel) after a byte of it was written keeps
    /// its place: its late response is consumed, counted
    /// ([`Counters::late_responses`](crate::Counters::late_responses)) and dropped, and `Ok(None)`
    /// says so; it is never handed to the request behind it. A response with nothing in flight
    /// closes the connection ([`Violation::UnexpectedResponse`]; an
    /// [`Action::Close`](crate::Action::Close) follows).
    pub fn handle_next_response(
        &mut self,
        now: Instant,
        conn: ConnId,
        payload: Bytes,
    ) -> Result<Option<RequestId>, HandleError> {
        self.report_answer(
            now,
            conn,
            payload,
            |n, sink, payload| n.respond_next(sink, conn.generation, payload),
            |n, sink, payload| n.next_response(sink, conn.generation, payload),
        )
    }

    /// The adapter read from `conn` and handed every complete response to
    /// [`handle_response`](Self::handle_response); `partial` says whether the start of another one
    /// is still buffered. A response that keeps arriving for longer than
    /// [`Config::frame_timeout`](crate::Config::frame_timeout) closes the connection with
    /// [`Violation::TooSlow`].
    pub fn handle_received(
        &mut self,
        now: Instant,
        conn: ConnId,
        partial: bool,
    ) -> Result<(), HandleError> {
        self.report(now, conn, NodeState::is_established, |n, sink| {
            n.received(sink, partial);
            Ok(())
        })
    }

    /// `conn` failed or the peer closed it. Everything on it ends with
    /// [`CloseReason::Io`] (or [`CloseReason::ConnectFailed`] while connecting).
    pub fn handle_closed(
        &mut self,
        now: Instant,
        conn: ConnId,
        failure: Failure,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |_| true,
            |n, sink| {
                let reason = if n.state() == NodeState::Connecting {
                    CloseReason::ConnectFailed(failure)
                } else {
                    CloseReason::Io(failure)
                };
                n.close(sink, reason, false);
                Ok(())
            },
        )
    }

    /// The peer on `conn` broke the protocol. proto closes that connection only (an
    /// [`Action::Close`](crate::Action::Close) follows); every request on it ends with
    /// [`CloseReason::Protocol`].
    pub fn handle_violation(
        &mut self,
        now: Instant,
        conn: ConnId,
        violation: Violation,
    ) -> Result<(), HandleError> {
        self.report(
            now,
            conn,
            |_| true,
            |n, sink| {
                sink.pool.counters.protocol_violations += 1;
                n.close(sink, CloseReason::Protocol(violation), true);
                Ok(())
            },
        )
    }

    /// Fires every timer due at `now`. Safe to call early (nothing happens) or twice.
    ///
    /// Due timers fire by instant. At one instant the nodes' timers fire first; request
    /// deadlines submitted in order of their instants (one timeout for every request) then end
    /// in the order they were submitted. The order depends only on the inputs, so a replay
    /// gives the same events.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock.advance(now);
        while let Some((at, key)) = self.shared.timers.pop_due(now) {
            debug_assert!(
                self.timer_valid(at, key),
                "stale timer entry {key:?} at {at:?}"
            );
            let node = match key {
                TimerKey::Node(node, _) => node,
                TimerKey::Request(id) => match self.shared.requests.get(id) {
                    Some(r) => r.node,
                    None => continue,
                },
            };
            let _ = self.with_node(now, node, |n, sink| match key {
                TimerKey::Node(_, timer) => n.on_timer(sink, timer),
                TimerKey::Request(id) => n.request_deadline(sink, id),
            });
        }
    }
}
