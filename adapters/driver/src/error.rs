//! The client's errors, and how socket errors become keepwire [`Failure`]s.

use std::fmt;
use std::io;

use keepwire_proto::{
    CloseReason, ConfigError, EvictReason, Failure, HandleError, NodeId, Phase, Sent, SubmitError,
    Unavailable, Violation,
};

use crate::codec::EncodeError;

/// Why a [`Client::send`](crate::Client::send) did not return a response.
///
/// Two kinds of error:
///
/// - **Refusals** (`NotWritable`, `MemoryBudget`, `InFlightLimit`, `NodeUnavailable`,
///   `NoNode`, `StaleNode`, `Encode`, `Shutdown`, `Rejected`): the request never started,
///   nothing was queued and no byte of it left the client. [`sent`](Self::sent) is `None`.
/// - **Ends of a submitted request** (`DeadlineExceeded`, `ConnectionLost`, `Protocol`,
///   `Evicted`, `Other`): each says how much of the request's frame the kernel had accepted
///   ([`Sent`]: whether the server may have it, so whether sending it again is safe) and
///   whether keepwire had already retried it once on a fresh connection
///   ([`Config::retry_unsent`](keepwire_proto::Config::retry_unsent)), as keepwire-proto's
///   `Event::RequestDone` does. [`sent`](Self::sent) is `Some`.
///
/// [`is_retryable`](Self::is_retryable) puts the two together: it is true only where nothing
/// of the request can have reached the server.
///
/// A **final** error ([`is_final`](Self::is_final), with its reason in
/// [`final_reason`](Self::final_reason)) says that trying again cannot help until something
/// changes outside the client: the server refused the credentials, a certificate was
/// rejected, or the node's name does not exist. It reaches the requests waiting on the node at
/// once (not at their deadlines), and, while the node waits out its final-failure backoff, a
/// send to it is refused at once with the same reason.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The node's connection is above its high watermark: the request was rejected at once,
    /// nothing was queued, and the connection stays open.
    #[error("not writable: the connection's outbound buffer is above its high watermark")]
    NotWritable,
    /// Pending bytes across all connections would exceed the memory budget.
    #[error("memory budget exhausted")]
    MemoryBudget,
    /// The node already has its maximum of requests in flight.
    #[error("the node has reached its in-flight request limit")]
    InFlightLimit,
    /// The node cannot take requests now (disabled, quarantined, throttled).
    #[error("node unavailable: {0}")]
    NodeUnavailable(Unavailable),
    /// No node can take the request; `all_full` when every ready node is at its in-flight
    /// limit.
    #[error("no node available (all ready nodes full: {all_full})")]
    NoNode {
        /// Every ready node is at its in-flight limit.
        all_full: bool,
    },
    /// The node handle is stale (the node was removed) or unknown.
    #[error("stale or unknown node handle")]
    StaleNode,
    /// The deadline passed. `Queued`: no byte was written (and none will be), `sent` is
    /// [`Sent::Nothing`]; `InFlight`: part or all of the frame was handed to the kernel, and
    /// the server may have the request.
    ///
    /// A timeout too short to queue the request at all (its deadline already past at submit)
    /// reads the same: queued, nothing sent.
    #[error("deadline exceeded ({})", DeadlineText { phase: *phase, sent: *sent, retried: *retried })]
    DeadlineExceeded {
        /// Where the request was.
        phase: Phase,
        /// How much of its frame the kernel had accepted.
        sent: Sent,
        /// Whether it had been retried once on a fresh connection before.
        retried: bool,
    },
    /// The connection closed before the response came: `cause` says why (a failure, an
    /// eviction of the connection, the client's shutdown, ...).
    #[error("connection lost: {cause} ({})", Fate { sent: *sent, retried: *retried })]
    ConnectionLost {
        /// Why the connection closed.
        cause: CloseReason,
        /// How much of the request's frame the kernel had accepted.
        sent: Sent,
        /// Whether it had been retried once on a fresh connection before (and this is how the
        /// retry ended).
        retried: bool,
    },
    /// The peer broke the protocol (on this request's connection), which closed it.
    #[error("protocol error: {violation} ({})", Fate { sent: *sent, retried: *retried })]
    Protocol {
        /// How the peer broke the protocol.
        violation: Violation,
        /// How much of the request's frame the kernel had accepted.
        sent: Sent,
        /// Whether it had been retried once on a fresh connection before.
        retried: bool,
    },
    /// The connection was evicted while the request was on it (a request not yet written is
    /// moved once to a fresh connection first; this is the end of one that could not be).
    #[error("evicted: {reason} ({})", Fate { sent: *sent, retried: *retried })]
    Evicted {
        /// Why the connection was evicted.
        reason: EvictReason,
        /// How much of the request's frame the kernel had accepted.
        sent: Sent,
        /// Whether it had been retried once on a fresh connection before.
        retried: bool,
    },
    /// The request was cancelled.
    ///
    /// Only dropping the [`Client::send`](crate::Client::send) future cancels a request, so
    /// no caller reads this today; it carries no [`Sent`] for that reason.
    #[error("cancelled")]
    Cancelled,
    /// The request cannot be framed.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The client is shut down: the request was not started. (A request already submitted
    /// when the client shuts down ends with [`ConnectionLost`](Self::ConnectionLost) and
    /// `cause` [`CloseReason::Shutdown`], which says what reached the server.)
    #[error("the client is shut down")]
    Shutdown,
    /// An outcome this version of the driver does not know, as keepwire-proto printed it.
    #[error("request ended: {outcome} ({})", Fate { sent: *sent, retried: *retried })]
    Other {
        /// The outcome, printed.
        outcome: String,
        /// How much of the request's frame the kernel had accepted.
        sent: Sent,
        /// Whether it had been retried once on a fresh connection before.
        retried: bool,
    },
    /// keepwire-proto refused the request for a reason this version of the driver has no
    /// variant for (a newer [`SubmitError`]): the request never started, nothing was queued.
    #[error("request rejected: {0}")]
    Rejected(SubmitError),
}

impl SendError {
    /// How much of the request's frame the kernel had accepted when it ended; `None` for a
    /// refusal (the request never started) and for [`Cancelled`](Self::Cancelled).
    pub fn sent(&self) -> Option<Sent> {
        match self {
            Self::DeadlineExceeded { sent, .. }
            | Self::ConnectionLost { sent, .. }
            | Self::Protocol { sent, .. }
            | Self::Evicted { sent, .. }
            | Self::Other { sent, .. } => Some(*sent),
            _ => None,
        }
    }

    /// Whether any byte of the request may have reached the server: it was submitted and the
    /// kernel accepted part or all of its frame, or may have ([`Sent::may_have_reached_server`]).
    /// Sending it again may then execute it twice.
    pub fn was_sent(&self) -> bool {
        self.sent().is_some_and(Sent::may_have_reached_server)
    }

    /// Whether sending the same request again is safe: nothing of it can have reached the
    /// server, because it was refused at submit or ended with [`Sent::Nothing`].
    ///
    /// False as well where a resend to this client fails the same way for certain: a payload
    /// the codec cannot frame ([`Encode`](Self::Encode)), a client that is shut down, a
    /// cancelled request, a [final](Self::is_final) error.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Encode(_) | Self::Shutdown | Self::Cancelled => false,
            _ => !self.was_sent() && !self.is_final(),
        }
    }

    /// Why no retry can help, for a final error: the connection the request waited for was
    /// refused for a reason that does not go away by itself
    /// ([`CloseReason::is_final`]: [`AuthFailed`](CloseReason::AuthFailed),
    /// [`CertificateRejected`](CloseReason::CertificateRejected),
    /// `ConnectFailed(`[`Failure::NameNotFound`]`)`), or the node is waiting out its
    /// final-failure backoff after one (`NodeUnavailable(Unavailable::Failed(reason))`).
    /// `None` for every other error.
    pub fn final_reason(&self) -> Option<CloseReason> {
        let reason = match self {
            Self::ConnectionLost { cause, .. } => *cause,
            Self::NodeUnavailable(Unavailable::Failed(reason)) => *reason,
            _ => return None,
        };
        reason.is_final().then_some(reason)
    }

    /// Whether trying again cannot help until something changes outside the client (new
    /// credentials, a certificate, a name that exists): see
    /// [`final_reason`](Self::final_reason).
    pub fn is_final(&self) -> bool {
        self.final_reason().is_some()
    }

    /// Whether keepwire had already retried the request once, transparently, on a fresh
    /// connection ([`Config::retry_unsent`](keepwire_proto::Config::retry_unsent)) before it
    /// ended with this error. Retries are also counted in
    /// [`Counters::transparent_retries`](keepwire_proto::Counters::transparent_retries),
    /// which is the only place a retry that then succeeded shows.
    pub fn retried(&self) -> bool {
        match self {
            Self::DeadlineExceeded { retried, .. }
            | Self::ConnectionLost { retried, .. }
            | Self::Protocol { retried, .. }
            | Self::Evicted { retried, .. }
            | Self::Other { retried, .. } => *retried,
            _ => false,
        }
    }
}

impl SendError {
    /// Whether the request ran out of time: its deadline passed (queued or in flight), or its
    /// connection closed because a setup, write or heartbeat deadline passed or the kernel
    /// gave up (`ETIMEDOUT`).
    pub fn is_timeout(&self) -> bool {
        match self {
            Self::DeadlineExceeded { .. } => true,
            Self::ConnectionLost { cause, .. } => matches!(
                cause,
                CloseReason::SetupTimeout
                    | CloseReason::WriteTimeout
                    | CloseReason::HeartbeatTimeout
                    | CloseReason::Io(Failure::TimedOut)
                    | CloseReason::ConnectFailed(Failure::TimedOut)
            ),
            _ => false,
        }
    }

    /// The [`io::ErrorKind`] a caller speaking `std::io` would expect:
    /// `TimedOut` for [`is_timeout`](Self::is_timeout), `ConnectionReset`, `ConnectionRefused`
    /// or `ConnectionAborted` for a lost connection by its cause, `WouldBlock` for the
    /// fail-fast refusals (not writable, memory budget, in-flight limit), `NotConnected` when no
    /// node can take it, `InvalidData` for a protocol violation, `InvalidInput` for a request
    /// the codec refused, `Interrupted` for a cancel, `PermissionDenied` for refused
    /// credentials or a rejected certificate, `NotFound` for a name that does not exist, and
    /// `Other` for the rest.
    pub fn io_kind(&self) -> io::ErrorKind {
        use std::io::ErrorKind as K;
        if self.is_timeout() {
            return K::TimedOut;
        }
        match self.final_reason() {
            Some(CloseReason::ConnectFailed(Failure::NameNotFound)) => return K::NotFound,
            Some(_) => return K::PermissionDenied,
            None => {}
        }
        match self {
            Self::NotWritable | Self::MemoryBudget | Self::InFlightLimit => K::WouldBlock,
            Self::NodeUnavailable(_) | Self::NoNode { .. } | Self::StaleNode => K::NotConnected,
            Self::ConnectionLost { cause, .. } => match cause {
                CloseReason::Io(Failure::Reset) => K::ConnectionReset,
                CloseReason::ConnectFailed(Failure::Refused) => K::ConnectionRefused,
                CloseReason::Io(Failure::PeerClosed) => K::UnexpectedEof,
                CloseReason::ConnectFailed(Failure::Unreachable)
                | CloseReason::Io(Failure::Unreachable) => K::HostUnreachable,
                _ => K::ConnectionAborted,
            },
            Self::Evicted { .. } | Self::Shutdown => K::ConnectionAborted,
            Self::Protocol { .. } => K::InvalidData,
            Self::Encode(_) => K::InvalidInput,
            Self::Cancelled => K::Interrupted,
            _ => K::Other,
        }
    }
}

/// A `SendError` as an [`io::Error`] of the matching kind
/// ([`SendError::io_kind`]), keeping the `SendError` as its source: `?` works in code that
/// returns `io::Result`, and `err.get_ref()` gets the typed error back.
impl From<SendError> for io::Error {
    fn from(e: SendError) -> Self {
        io::Error::new(e.io_kind(), e)
    }
}

/// "nothing sent", "fully sent, retried once".
struct Fate {
    sent: Sent,
    retried: bool,
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.sent, f)?;
        if self.retried {
            f.write_str(", retried once")?;
        }
        Ok(())
    }
}

/// "queued, never sent", "in flight, partly sent", "queued, never sent, retried once".
struct DeadlineText {
    phase: Phase,
    sent: Sent,
    retried: bool,
}

impl fmt::Display for DeadlineText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.phase {
            // "queued, never sent" already says what reached the server.
            Phase::Queued if self.sent == Sent::Nothing => fmt::Display::fmt(&self.phase, f)?,
            _ => write!(f, "{}, {}", self.phase, self.sent)?,
        }
        if self.retried {
            f.write_str(", retried once")?;
        }
        Ok(())
    }
}

impl From<SubmitError> for SendError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::NotWritable => Self::NotWritable,
            SubmitError::MemoryBudget => Self::MemoryBudget,
            SubmitError::InFlightLimit => Self::InFlightLimit,
            SubmitError::NodeUnavailable(Unavailable::Shutdown) => Self::Shutdown,
            SubmitError::NodeUnavailable(why) => Self::NodeUnavailable(why),
            SubmitError::NoNode { all_full } => Self::NoNode { all_full },
            SubmitError::DeadlinePassed => Self::DeadlineExceeded {
                phase: Phase::Queued,
                sent: Sent::Nothing,
                retried: false,
            },
            SubmitError::StaleHandle => Self::StaleNode,
            other => Self::Rejected(other),
        }
    }
}

/// A client could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The keepwire configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// `Config::handshake` is set but no handshake hook was given.
    #[error("Config::handshake is set but no handshake hook was given")]
    MissingHandshakeHook,
    /// Heartbeats are on (`Config::heartbeat`) but the codec has no ping
    /// ([`Codec::heartbeat`](crate::Codec::heartbeat) returns `None`).
    #[error("heartbeats are on but the codec has no ping to send (Codec::heartbeat)")]
    NoHeartbeatPing,
}

/// A client command (other than a send) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The node was removed or never existed.
    #[error("stale or unknown node {0:?}")]
    StaleNode(NodeId),
    /// The node exists but refuses this command in its current state: `connect` on a
    /// quarantined node (the failure detector probes it on its own schedule).
    #[error("node {0:?} refuses this command in its current state")]
    WrongState(NodeId),
    /// The pool refused the command for another reason (one a newer keepwire-proto may add).
    #[error("node {0:?} refused the command: {1}")]
    Refused(NodeId, HandleError),
    /// The client is shut down.
    #[error("the client is shut down")]
    Shutdown,
}

/// Maps a socket error to the keepwire failure it means, by its kind (the standard library
/// gives an error from the OS the kind of its errno: `ECONNREFUSED` is `ConnectionRefused`,
/// `EPIPE` is `BrokenPipe`, `ENETDOWN` is `NetworkDown`, ...).
pub fn failure_of(error: &io::Error) -> Failure {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => Failure::Refused,
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => Failure::Reset,
        io::ErrorKind::TimedOut => Failure::TimedOut,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe => Failure::PeerClosed,
        io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable
        | io::ErrorKind::NetworkDown => Failure::Unreachable,
        _ => Failure::Other {
            errno: error.raw_os_error(),
        },
    }
}

#[cfg(test)]
mod tests;
