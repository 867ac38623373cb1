//! What goes into the pool from the adapter ([`Failure`], [`Violation`]) and what comes out of
//! it: [`Action`]s for the adapter, [`Event`]s for the application, and the typed reasons and
//! outcomes they carry.

use core::time::Duration;

use bytes::Bytes;

use crate::config::SocketOptions;
use crate::endpoint::Endpoint;
use crate::ids::{ConnId, NodeId, RequestId};
use crate::time::Instant;

/// Work for the adapter, drained with [`Pool::poll_action`](crate::Pool::poll_action).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Open a TCP connection to `endpoint`, apply `options`, and report the result with
    /// [`handle_connected`](crate::Pool::handle_connected) (or
    /// [`handle_connected_to`](crate::Pool::handle_connected_to), saying which address was
    /// reached) or [`handle_connect_failed`](crate::Pool::handle_connect_failed).
    ///
    /// An [`Endpoint::Name`] is resolved now, for this attempt (never from a cache of an
    /// earlier one), within `deadline`; when it resolves to several addresses, the adapter
    /// tries them in turn and reports the first that connects with `handle_connected_to`, or,
    /// when all fail, the last failure. A name that does not exist is
    /// [`Failure::NameNotFound`] (final: the requests waiting on the node end at once and it
    /// backs off for [`Config::final_failure_backoff`](crate::Config::final_failure_backoff));
    /// any other resolver failure is [`Failure::ResolveFailed`] (retryable).
    ///
    /// `deadline` is the setup deadline: proto closes the attempt itself when it passes (the
    /// adapter need not race a timer, but may abandon the connect then).
    Open {
        /// The new connection's handle.
        conn: ConnId,
        /// Where to connect: an address, or a name to resolve first.
        endpoint: Endpoint,
        /// The socket options to apply before connecting.
        options: SocketOptions,
        /// When proto will give up on the attempt (connect plus handshake).
        deadline: Instant,
    },
    /// Run the application handshake on `conn` (only with
    /// [`Config::handshake`](crate::Config::handshake)), then report
    /// [`handle_handshake_done`](crate::Pool::handle_handshake_done) or
    /// [`handle_handshake_failed`](crate::Pool::handle_handshake_failed).
    Handshake {
        /// The connection, now connected at the TCP level.
        conn: ConnId,
    },
    /// Send a heartbeat on the idle connection `conn` (only with
    /// [`Config::heartbeat`](crate::Config::heartbeat)): encode the codec's ping for request
    /// `id` (a protocol with its own ids maps one to `id`, as for any request) and hand it over
    /// with [`submit_heartbeat`](crate::Pool::submit_heartbeat). Its response is reported like
    /// any other ([`handle_response`](crate::Pool::handle_response) with `id`, or
    /// [`handle_next_response`](crate::Pool::handle_next_response) in order) and consumed by
    /// the pool: no [`Event::RequestDone`] ever follows for `id`.
    ///
    /// If no response arrives within [`Heartbeat::timeout`](crate::Heartbeat::timeout), proto
    /// closes the connection with [`CloseReason::HeartbeatTimeout`], whether or not the ping
    /// was ever submitted: an adapter without a ping may ignore this action, at the cost of
    /// that close.
    Heartbeat {
        /// The idle connection.
        conn: ConnId,
        /// The id reserved for the ping (see [`Pool::holds`](crate::Pool::holds)).
        id: RequestId,
    },
    /// Close `conn` and drop its socket. The handle is already stale: nothing more need be
    /// reported about it (a late report is refused and harmless).
    Close {
        /// The connection to close.
        conn: ConnId,
        /// Why proto closed it.
        reason: CloseReason,
    },
}

/// Something the application may want to know, drained with
/// [`Pool::poll_event`](crate::Pool::poll_event).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A request ended. Every submitted request ends exactly once, with exactly one of these
    /// (a submit that returned an error never started).
    RequestDone {
        /// The request.
        id: RequestId,
        /// The node it was last sent to.
        node: NodeId,
        /// How it ended.
        outcome: Outcome,
        /// How much of its frame the kernel had accepted when it ended: whether the server
        /// may have it, and so whether sending it again is safe.
        sent: Sent,
        /// Whether it had been queued once more after its first connection failed or was
        /// evicted with not one byte of it sent (at most once per request).
        retried: bool,
    },
    /// A node's connection changed state.
    StateChanged {
        /// The node.
        node: NodeId,
        /// The state it left.
        from: NodeState,
        /// The state it entered.
        to: NodeState,
        /// Why.
        reason: Reason,
        /// When.
        at: Instant,
    },
    /// A node's outbound buffer crossed a watermark.
    Writability {
        /// The node.
        node: NodeId,
        /// `false` when pending bytes rose above the high watermark, `true` when they fell
        /// below the low one.
        writable: bool,
        /// Pending bytes (frames plus per-frame overhead) at the flip.
        pending: u64,
    },
    /// A connection was evicted: flagged, then closed; its queued requests moved to a fresh
    /// connection once.
    Evicted {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: EvictReason,
    },
    /// A node was excluded from selection after too many consecutive failures.
    Quarantined {
        /// The node.
        node: NodeId,
        /// The failure that crossed the threshold.
        cause: QuarantineCause,
        /// When.
        at: Instant,
    },
    /// The share of admitted nodes that are healthy fell below
    /// [`Config::panic_threshold`](crate::Config::panic_threshold) (`entered`), or rose back
    /// to it: while in panic mode, selection ignores quarantine.
    PanicMode {
        /// Whether the pool entered panic mode (`false`: it left it).
        entered: bool,
        /// Admitted (enabled) nodes that are not quarantined.
        healthy: usize,
        /// Admitted (enabled) nodes.
        admitted: usize,
        /// When.
        at: Instant,
    },
    /// A quarantined node is selectable again.
    Readmitted {
        /// The node.
        node: NodeId,
        /// Why.
        via: Readmission,
        /// When.
        at: Instant,
    },
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
// The discriminant takes a whole word, at no cost in size (40 bytes either way). With the
// default one-byte discriminant, the small variants' fields sat in the seven bytes after it,
// which every move of an outcome copied as two overlapping 4-byte moves; the next move's load
// of them then waited for the last one's stores to drain (a failed store-to-load forward,
// about 5 ns each, twice per request in the driver's `poll_event`). BENCHMARKS.md, "A load
// the store buffer cannot forward".
#[repr(u64)]
pub enum Outcome {
    /// The peer answered; the response frame's payload.
    Response(Bytes),
    /// Its deadline passed.
    DeadlineExceeded {
        /// `Queued` if no byte of the frame had been written (and none ever will be),
        /// `InFlight` otherwise.
        phase: Phase,
    },
    /// Its connection closed before an answer came.
    ConnectionLost(CloseReason),
    /// Its connection was evicted (after the one retry, or while in flight).
    Evicted(EvictReason),
    /// The application cancelled it.
    Cancelled,
}

/// How much of a request's frame the kernel had accepted when the request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sent {
    /// Not one byte: the server cannot have it, and sending it again is safe.
    Nothing,
    /// Handed to the adapter, which had not yet said how much the kernel took: the server may
    /// have some or all of it.
    Unknown,
    /// Some bytes but not the last one: the server has a truncated frame at most.
    Partly,
    /// Every byte: the server may have acted on it.
    Fully,
}

impl Sent {
    /// Whether any byte may have reached the server (everything but [`Sent::Nothing`]).
    pub fn may_have_reached_server(self) -> bool {
        self != Self::Nothing
    }
}

/// Where a request was when its deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Queued: not one byte written; the frame was dropped unsent.
    Queued,
    /// Partly or fully written: the server may have it.
    InFlight,
}

/// A connection's lifecycle state, as seen by its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// No connection. A new one may be opened from `reconnect_at` on.
    Disconnected {
        /// When the reconnect backoff ends (a reconnect is allowed *at* this instant).
        reconnect_at: Instant,
    },
    /// TCP connect in progress.
    Connecting,
    /// Connected; application handshake in progress.
    Handshaking,
    /// Usable.
    Ready,
    /// Draining for a graceful shutdown: no new requests; the ones it holds are still written
    /// and answered (or reach their deadlines), then the connection closes.
    Closing,
    /// The last handshake failed authentication or the server's certificate was rejected: a
    /// final failure. Like `Disconnected`, with the reason kept; `reconnect_at` is
    /// [`Config::final_failure_backoff`](crate::Config::final_failure_backoff) after it.
    AuthFailed {
        /// When the reconnect backoff ends.
        reconnect_at: Instant,
    },
    /// The node was removed or the pool shut down; terminal.
    Closed,
}

impl NodeState {
    /// Whether a connection attempt is in progress (`Connecting` or `Handshaking`).
    pub fn is_connecting(self) -> bool {
        matches!(self, Self::Connecting | Self::Handshaking)
    }

    /// Whether the connection carries requests (`Ready` or `Closing`).
    pub fn is_established(self) -> bool {
        matches!(self, Self::Ready | Self::Closing)
    }
}

/// Why a node's state changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// A request or [`Pool::connect`](crate::Pool::connect) needed a connection.
    Demand,
    /// A probe of a quarantined node opened a fresh connection.
    Probe,
    /// The adapter reported the TCP connect done.
    Connected,
    /// The adapter reported the handshake done.
    HandshakeDone,
    /// The connection closed.
    Closed(CloseReason),
    /// A graceful shutdown began: the connection drains what it holds.
    Draining,
    /// The node's restart epoch changed while it was between connections: its backoff
    /// restarted and it may reconnect now.
    BackoffReset,
}

/// Why a connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The setup timeout passed before `Ready`.
    SetupTimeout,
    /// The TCP connect failed.
    ConnectFailed(Failure),
    /// The handshake failed (not authentication).
    HandshakeFailed,
    /// The handshake failed authentication (final: see [`CloseReason::is_final`]).
    AuthFailed,
    /// The handshake rejected a certificate (final: see [`CloseReason::is_final`]).
    CertificateRejected,
    /// A frame was not accepted by the kernel within the write timeout.
    WriteTimeout,
    /// The socket failed or the peer closed it.
    Io(Failure),
    /// The peer broke the protocol.
    Protocol(Violation),
    /// The connection was evicted.
    Evicted(EvictReason),
    /// The node was quarantined; it is probed on a fresh connection.
    Quarantined,
    /// No request for longer than the idle timeout.
    Idle,
    /// A heartbeat on the idle connection was not answered within
    /// [`Heartbeat::timeout`](crate::Heartbeat::timeout): a connection failure.
    HeartbeatTimeout,
    /// The node was removed.
    NodeRemoved,
    /// The pool shut down.
    Shutdown,
}

impl CloseReason {
    /// Whether this close counts as a connection failure (for quarantine).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::SetupTimeout
                | Self::ConnectFailed(_)
                | Self::HandshakeFailed
                | Self::AuthFailed
                | Self::CertificateRejected
                | Self::WriteTimeout
                | Self::HeartbeatTimeout
                | Self::Io(_)
                | Self::Protocol(_)
        )
    }

    /// Whether no retry can fix it until something changes (credentials, certificates, DNS):
    /// [`AuthFailed`](Self::AuthFailed), [`CertificateRejected`](Self::CertificateRejected)
    /// and [`ConnectFailed`](Self::ConnectFailed)`(`[`Failure::NameNotFound`]`)`.
    ///
    /// A final failure ends every request waiting on the node at once (never retried), and
    /// the node backs off for
    /// [`Config::final_failure_backoff`](crate::Config::final_failure_backoff), during which
    /// submits to it fail at once with [`Unavailable::Failed`].
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::AuthFailed
                | Self::CertificateRejected
                | Self::ConnectFailed(Failure::NameNotFound)
        )
    }
}

/// How an application handshake failed, reported with
/// [`Pool::handle_handshake_failed`](crate::Pool::handle_handshake_failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeFailure {
    /// Any failure a retry may fix: [`CloseReason::HandshakeFailed`].
    Failed,
    /// The server refused our credentials: [`CloseReason::AuthFailed`], final.
    AuthRefused,
    /// A certificate was rejected (the server's by us, or ours by the server):
    /// [`CloseReason::CertificateRejected`], final.
    CertificateRejected,
}

/// An I/O failure the adapter observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Connection refused (no listener).
    Refused,
    /// Connection reset by the peer.
    Reset,
    /// The peer closed its side (end of stream).
    PeerClosed,
    /// The kernel gave up (`ETIMEDOUT`: TCP_USER_TIMEOUT, keepalive or retransmissions).
    TimedOut,
    /// Host or network unreachable.
    Unreachable,
    /// The node's name does not exist (NXDOMAIN, or no address for it): final (see
    /// [`CloseReason::is_final`]).
    NameNotFound,
    /// Resolving the node's name failed for another reason (resolver unreachable, temporary
    /// failure): retryable, like any connect failure.
    ResolveFailed,
    /// Any other error, with its OS error number when there was one.
    Other {
        /// The `errno`, if known.
        errno: Option<i32>,
    },
}

/// How a peer broke the protocol. Each closes only that peer's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// A frame longer than the configured maximum.
    FrameTooLong {
        /// The length the header announced.
        len: u64,
        /// The maximum.
        max: u64,
    },
    /// A header that cannot be decoded.
    MalformedHeader,
    /// A response for a request that is not in flight on that connection.
    UnknownRequest(RequestId),
    /// A response on an in-order connection with no request in flight on it.
    UnexpectedResponse,
    /// A response carrying a protocol id (the codec's own, not a [`RequestId`]) that names no
    /// request that may still be answered.
    UnknownId(u64),
    /// The local codec failed on what the peer sent (it panicked): the bytes cannot be trusted,
    /// so only closing the connection is safe.
    Undecodable,
    /// A frame that took longer than allowed to arrive (a peer dripping bytes).
    TooSlow {
        /// How long the frame had been arriving.
        elapsed: Duration,
    },
}

/// Why a connection was evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictReason {
    /// The node re-entered the enabled set after being disabled.
    Readmitted,
    /// The node's restart epoch changed: the server is a new process.
    EpochChanged,
    /// The application asked for it.
    Requested,
}

/// Why a node was quarantined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuarantineCause {
    /// Too many consecutive connection failures; the last one.
    ConnectionFailures(CloseReason),
    /// Too many consecutive request timeouts.
    RequestTimeouts,
}

/// Why a quarantined node became selectable again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Readmission {
    /// A probe on a fresh connection reached `Ready`.
    Probe,
    /// The last probe failed and [`AfterLastProbe::Readmit`](crate::AfterLastProbe) is set.
    GaveUp,
    /// The application enabled it, or its epoch changed.
    Application,
    /// It answered a request (possible in panic mode, when quarantined nodes still serve).
    Answered,
}

/// Why a submit was refused. The request never started, so no
/// [`Event::RequestDone`] follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The connection is above its high watermark (not yet back below the low one).
    #[error("not writable: the connection's outbound buffer is above its high watermark")]
    NotWritable,
    /// Queuing it would push pending bytes across all connections over the memory budget,
    /// and this connection holds more than its share.
    #[error("memory budget exhausted: this connection holds more than its share")]
    MemoryBudget,
    /// The node already has `max_in_flight` requests.
    #[error("the node has reached its in-flight request limit")]
    InFlightLimit,
    /// The node cannot take requests now.
    #[error("node unavailable: {0}")]
    NodeUnavailable(Unavailable),
    /// No node can take the request; `all_full` when that is only because every ready node is
    /// at its in-flight limit.
    #[error("no node available (all ready nodes full: {all_full})")]
    NoNode {
        /// Every ready node is at its in-flight limit; waiting for a response frees one.
        all_full: bool,
    },
    /// The deadline has already passed.
    #[error("the deadline is already past")]
    DeadlinePassed,
    /// The handle is stale or unknown.
    #[error("stale or unknown node handle")]
    StaleHandle,
}

/// Why a given node cannot take a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// The application disabled it.
    #[error("disabled")]
    Disabled,
    /// The failure detector quarantined it.
    #[error("quarantined")]
    Quarantined,
    /// The server asked for backpressure until this instant.
    #[error("throttled")]
    Throttled {
        /// When the throttle ends.
        until: Instant,
    },
    /// The pool is shut down.
    #[error("shut down")]
    Shutdown,
    /// The node's last connect failed for a final reason ([`CloseReason::is_final`]) and its
    /// [`final_failure_backoff`](crate::Config::final_failure_backoff) is still running.
    #[error("final failure: {0}")]
    Failed(CloseReason),
}

/// A report or command named a handle that is stale (from before a removal, eviction or
/// reconnect) or unknown. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// The node was removed (or never existed).
    #[error("stale or unknown node handle")]
    StaleNode,
    /// The connection was closed, evicted or replaced (or never existed).
    #[error("stale or unknown connection handle")]
    StaleConn,
    /// The request already ended (or never existed).
    #[error("request already ended or unknown")]
    UnknownRequest,
    /// The report does not fit the connection's state (e.g. `handle_connected` twice).
    #[error("report does not fit the connection's state")]
    WrongState,
    /// More bytes were reported written than were handed out.
    #[error("more bytes reported written than were handed out")]
    Overwritten,
}

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    #[test]
    fn an_outcome_and_its_event_keep_their_sizes() {
        // The sizes they had with a one-byte discriminant: the word-wide one (see `Outcome`)
        // costs no space, and the queue's `Option` still fits in the event's own niche. What
        // the word-wide discriminant is for, moves that stall no load, only
        // `scripts/forwarding.sh client` shows.
        assert_eq!(size_of::<Outcome>(), 40);
        assert_eq!(size_of::<Option<Outcome>>(), 40);
        assert_eq!(size_of::<Event>(), 72);
        assert_eq!(size_of::<Option<Event>>(), 72);
    }

    #[test]
    fn only_a_request_with_nothing_sent_cannot_have_reached_the_server() {
        assert!(!Sent::Nothing.may_have_reached_server());
        for sent in [Sent::Unknown, Sent::Partly, Sent::Fully] {
            assert!(sent.may_have_reached_server(), "{sent:?}");
        }
    }

    #[test]
    fn a_close_counts_as_a_failure_only_when_the_connection_broke() {
        let failures = [
            CloseReason::SetupTimeout,
            CloseReason::ConnectFailed(Failure::Refused),
            CloseReason::HandshakeFailed,
            CloseReason::AuthFailed,
            CloseReason::CertificateRejected,
            CloseReason::WriteTimeout,
            CloseReason::HeartbeatTimeout,
            CloseReason::Io(Failure::Reset),
            CloseReason::Protocol(Violation::MalformedHeader),
        ];
        for reason in failures {
            assert!(reason.is_failure(), "{reason:?}");
        }
        let not_failures = [
            CloseReason::Evicted(EvictReason::Readmitted),
            CloseReason::Quarantined,
            CloseReason::Idle,
            CloseReason::NodeRemoved,
            CloseReason::Shutdown,
        ];
        for reason in not_failures {
            assert!(!reason.is_failure(), "{reason:?}");
        }
    }
}
