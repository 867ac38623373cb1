//! The client's errors, and how socket errors become keepwire [`Failure`]s.

use std::io;

use keepwire_proto::{
    CloseReason, ConfigError, EvictReason, Failure, HandleError, NodeId, Phase, SubmitError,
    Unavailable, Violation,
};

use crate::codec::EncodeError;

/// Why a [`Client::send`](crate::Client::send) did not return a response.
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
    /// The deadline passed. `Queued`: no byte was written (and none will be); `InFlight`:
    /// the server may have the request.
    #[error("deadline exceeded ({phase})")]
    DeadlineExceeded {
        /// Where the request was.
        phase: Phase,
    },
    /// The connection closed before the response came.
    #[error("connection lost: {0}")]
    ConnectionLost(CloseReason),
    /// The peer broke the protocol (on this request's connection), which closed it.
    #[error("protocol error: {0}")]
    Protocol(Violation),
    /// The connection was evicted while the request was on it.
    #[error("evicted: {0}")]
    Evicted(EvictReason),
    /// The request was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The request cannot be framed.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The client is shut down.
    #[error("the client is shut down")]
    Shutdown,
    /// An outcome this version of the driver does not know, as keepwire-proto printed it.
    #[error("request ended: {0}")]
    Other(String),
    /// keepwire-proto refused the request for a reason this version of the driver has no
    /// variant for (a newer [`SubmitError`]): the request never started, nothing was queued.
    #[error("request rejected: {0}")]
    Rejected(SubmitError),
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

/// Maps a socket error to the keepwire failure it means.
pub fn failure_of(error: &io::Error) -> Failure {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => return Failure::Refused,
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => return Failure::Reset,
        io::ErrorKind::TimedOut => return Failure::TimedOut,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe => return Failure::PeerClosed,
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            return Failure::Unreachable;
        }
        _ => {}
    }
    #[cfg(unix)]
    match error.raw_os_error() {
        Some(libc::ECONNREFUSED) => return Failure::Refused,
        Some(libc::ECONNRESET | libc::ECONNABORTED | libc::EPIPE) => return Failure::Reset,
        Some(libc::ETIMEDOUT) => return Failure::TimedOut,
        Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::ENETDOWN) => {
            return Failure::Unreachable;
        }
        _ => {}
    }
    Failure::Other {
        errno: error.raw_os_error(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_failures() {
        let cases = [
            (io::ErrorKind::ConnectionRefused, Failure::Refused),
            (io::ErrorKind::ConnectionReset, Failure::Reset),
            (io::ErrorKind::TimedOut, Failure::TimedOut),
            (io::ErrorKind::UnexpectedEof, Failure::PeerClosed),
        ];
        for (kind, failure) in cases {
            assert_eq!(failure_of(&io::Error::from(kind)), failure);
        }
        #[cfg(unix)]
        {
            assert_eq!(
                failure_of(&io::Error::from_raw_os_error(libc::ETIMEDOUT)),
                Failure::TimedOut
            );
            assert_eq!(
                failure_of(&io::Error::from_raw_os_error(libc::ENETDOWN)),
                Failure::Unreachable
            );
            assert_eq!(
                failure_of(&io::Error::from_raw_os_error(libc::EMFILE)),
                Failure::Other {
                    errno: Some(libc::EMFILE)
                }
            );
        }
    }

    #[test]
    fn errors_read_as_sentences() {
        assert_eq!(
            SendError::ConnectionLost(CloseReason::WriteTimeout).to_string(),
            "connection lost: write timeout"
        );
        assert_eq!(
            SendError::ConnectionLost(CloseReason::Io(Failure::TimedOut)).to_string(),
            "connection lost: timed out (kernel)"
        );
        assert_eq!(
            SendError::Protocol(Violation::FrameTooLong { len: 9, max: 8 }).to_string(),
            "protocol error: frame of 9 bytes exceeds the maximum of 8"
        );
        assert_eq!(
            SendError::DeadlineExceeded {
                phase: Phase::Queued
            }
            .to_string(),
            "deadline exceeded (queued, never sent)"
        );
        assert_eq!(
            SendError::Evicted(EvictReason::EpochChanged).to_string(),
            "evicted: node restarted (epoch changed)"
        );
        assert_eq!(
            SendError::from(SubmitError::NotWritable),
            SendError::NotWritable
        );
        assert_eq!(
            SendError::Rejected(SubmitError::DeadlinePassed).to_string(),
            "request rejected: the deadline is already past"
        );
    }

    /// Every refusal keepwire-proto has today maps to its own variant; only one this version
    /// does not know becomes `Rejected` (never a misleading `StaleNode`).
    #[test]
    fn submit_errors_map_to_their_own_variants() {
        let cases = [
            (SubmitError::NotWritable, SendError::NotWritable),
            (SubmitError::MemoryBudget, SendError::MemoryBudget),
            (SubmitError::InFlightLimit, SendError::InFlightLimit),
            (
                SubmitError::NodeUnavailable(Unavailable::Disabled),
                SendError::NodeUnavailable(Unavailable::Disabled),
            ),
            (
                SubmitError::NodeUnavailable(Unavailable::Shutdown),
                SendError::Shutdown,
            ),
            (
                SubmitError::NoNode { all_full: true },
                SendError::NoNode { all_full: true },
            ),
            (
                SubmitError::DeadlinePassed,
                SendError::DeadlineExceeded {
                    phase: Phase::Queued,
                },
            ),
            (SubmitError::StaleHandle, SendError::StaleNode),
        ];
        for (submit, send) in cases {
            let mapped = SendError::from(submit);
            assert_eq!(mapped, send, "{submit:?}");
            assert!(!matches!(mapped, SendError::Rejected(_)), "{submit:?}");
        }
    }
}
