//! How proto's states, reasons and outcomes read in a log: short lower-case phrases, written
//! straight to the formatter (no allocation), so an application prints them with `{}`.
//!
//! Nested reasons read as one sentence: `CloseReason::Io(Failure::Reset)` is "reset by peer",
//! `Outcome::ConnectionLost(CloseReason::WriteTimeout)` is "connection lost: write timeout".

use core::fmt;

use crate::event::{
    CloseReason, EvictReason, Failure, HandshakeFailure, NodeState, Outcome, Phase,
    QuarantineCause, Readmission, Reason, Sent, Violation,
};

/// "disconnected", "connecting", "handshaking", "ready", "closing", "auth failed", "closed".
impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Disconnected { .. } => "disconnected",
            Self::Connecting => "connecting",
            Self::Handshaking => "handshaking",
            Self::Ready => "ready",
            Self::Closing => "closing",
            Self::AuthFailed { .. } => "auth failed",
            Self::Closed => "closed",
        })
    }
}

/// "on demand", "probe on a fresh connection", "connected", "handshake done",
/// "closed: write timeout", "draining for shutdown".
impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Demand => f.write_str("on demand"),
            Self::Probe => f.write_str("probe on a fresh connection"),
            Self::Connected => f.write_str("connected"),
            Self::HandshakeDone => f.write_str("handshake done"),
            Self::Closed(reason) => write!(f, "closed: {reason}"),
            Self::Draining => f.write_str("draining for shutdown"),
            Self::BackoffReset => f.write_str("backoff reset (new epoch)"),
        }
    }
}

/// "write timeout", "connect failed: refused", "reset by peer" (an I/O failure reads as the
/// failure alone), "protocol error: malformed frame header", "evicted (requested)",
/// "certificate rejected", "heartbeat timeout".
impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SetupTimeout => f.write_str("connection setup timeout"),
            Self::ConnectFailed(failure) => write!(f, "connect failed: {failure}"),
            Self::HandshakeFailed => f.write_str("handshake failed"),
            Self::AuthFailed => f.write_str("authentication failed"),
            Self::CertificateRejected => f.write_str("certificate rejected"),
            Self::WriteTimeout => f.write_str("write timeout"),
            Self::Io(failure) => fmt::Display::fmt(failure, f),
            Self::Protocol(violation) => write!(f, "protocol error: {violation}"),
            Self::Evicted(why) => write!(f, "evicted ({why})"),
            Self::Quarantined => f.write_str("node quarantined"),
            Self::Idle => f.write_str("idle"),
            Self::HeartbeatTimeout => f.write_str("heartbeat timeout"),
            Self::NodeRemoved => f.write_str("node removed"),
            Self::Shutdown => f.write_str("shut down"),
        }
    }
}

/// "refused", "reset by peer", "closed by peer", "timed out (kernel)", "unreachable",
/// "name not found", "name resolution failed", "i/o error (os error 24)", "i/o error".
///
/// proto has no `std`, so an OS error shows its number only (`std::io::Error` would also
/// name it).
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused => f.write_str("refused"),
            Self::Reset => f.write_str("reset by peer"),
            Self::PeerClosed => f.write_str("closed by peer"),
            Self::TimedOut => f.write_str("timed out (kernel)"),
            Self::Unreachable => f.write_str("unreachable"),
            Self::NameNotFound => f.write_str("name not found"),
            Self::ResolveFailed => f.write_str("name resolution failed"),
            Self::Other { errno: Some(errno) } => write!(f, "i/o error (os error {errno})"),
            Self::Other { errno: None } => f.write_str("i/o error"),
        }
    }
}

/// "handshake failed", "authentication refused", "certificate rejected".
impl fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Failed => "handshake failed",
            Self::AuthRefused => "authentication refused",
            Self::CertificateRejected => "certificate rejected",
        })
    }
}

/// "frame of 9 bytes exceeds the maximum of 8", "malformed frame header",
/// "response for unknown request 3.1", "the codec could not decode what the peer sent",
/// "frame still incomplete after 1500 ms".
impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FrameTooLong { len, max } => {
                write!(f, "frame of {len} bytes exceeds the maximum of {max}")
            }
            Self::MalformedHeader => f.write_str("malformed frame header"),
            Self::UnknownRequest(id) => write!(f, "response for unknown {id}"),
            Self::UnexpectedResponse => f.write_str("a response with no request in flight"),
            Self::UnknownId(id) => write!(f, "response for unknown protocol id {id}"),
            Self::Undecodable => f.write_str("the codec could not decode what the peer sent"),
            Self::TooSlow { elapsed } => {
                write!(f, "frame still incomplete after {} ms", elapsed.as_millis())
            }
        }
    }
}

/// "node readmitted", "node restarted (epoch changed)", "requested".
impl fmt::Display for EvictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Readmitted => "node readmitted",
            Self::EpochChanged => "node restarted (epoch changed)",
            Self::Requested => "requested",
        })
    }
}

/// "repeated connection failures (last: connection setup timeout)",
/// "repeated request timeouts".
impl fmt::Display for QuarantineCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionFailures(last) => {
                write!(f, "repeated connection failures (last: {last})")
            }
            Self::RequestTimeouts => f.write_str("repeated request timeouts"),
        }
    }
}

/// "probe succeeded", "probes exhausted", "by the application".
impl fmt::Display for Readmission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Probe => "probe succeeded",
            Self::GaveUp => "probes exhausted",
            Self::Application => "by the application",
            Self::Answered => "it answered a request",
        })
    }
}

/// "queued, never sent", "in flight".
impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Queued => "queued, never sent",
            Self::InFlight => "in flight",
        })
    }
}

/// "nothing sent", "may have been sent", "partly sent", "fully sent".
impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Nothing => "nothing sent",
            Self::Unknown => "may have been sent",
            Self::Partly => "partly sent",
            Self::Fully => "fully sent",
        })
    }
}

/// "response (12 bytes)" (the payload's length, never its bytes),
/// "deadline exceeded (in flight)", "connection lost: write timeout",
/// "evicted: node readmitted", "cancelled".
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Response(payload) if payload.len() == 1 => f.write_str("response (1 byte)"),
            Self::Response(payload) => write!(f, "response ({} bytes)", payload.len()),
            Self::DeadlineExceeded { phase } => write!(f, "deadline exceeded ({phase})"),
            Self::ConnectionLost(reason) => write!(f, "connection lost: {reason}"),
            Self::Evicted(why) => write!(f, "evicted: {why}"),
            Self::Cancelled => f.write_str("cancelled"),
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use core::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::ids::RequestId;
    use crate::time::Instant;

    #[test]
    fn node_states() {
        let at = Instant::from_nanos(5);
        assert_eq!(
            NodeState::Disconnected { reconnect_at: at }.to_string(),
            "disconnected"
        );
        assert_eq!(NodeState::Ready.to_string(), "ready");
        assert_eq!(
            NodeState::AuthFailed { reconnect_at: at }.to_string(),
            "auth failed"
        );
    }

    #[test]
    fn how_much_was_sent() {
        assert_eq!(Sent::Nothing.to_string(), "nothing sent");
        assert_eq!(Sent::Unknown.to_string(), "may have been sent");
        assert_eq!(Sent::Partly.to_string(), "partly sent");
        assert_eq!(Sent::Fully.to_string(), "fully sent");
    }

    #[test]
    fn reasons() {
        assert_eq!(Reason::Demand.to_string(), "on demand");
        assert_eq!(
            Reason::Closed(CloseReason::WriteTimeout).to_string(),
            "closed: write timeout"
        );
    }

    /// The wording the driver's errors printed before proto had `Display`.
    #[test]
    fn close_reasons() {
        assert_eq!(CloseReason::WriteTimeout.to_string(), "write timeout");
        assert_eq!(CloseReason::Io(Failure::Reset).to_string(), "reset by peer");
        assert_eq!(
            CloseReason::ConnectFailed(Failure::Refused).to_string(),
            "connect failed: refused"
        );
        assert_eq!(
            CloseReason::Protocol(Violation::MalformedHeader).to_string(),
            "protocol error: malformed frame header"
        );
        assert_eq!(
            CloseReason::Evicted(EvictReason::Requested).to_string(),
            "evicted (requested)"
        );
        assert_eq!(
            CloseReason::CertificateRejected.to_string(),
            "certificate rejected"
        );
        assert_eq!(
            CloseReason::HeartbeatTimeout.to_string(),
            "heartbeat timeout"
        );
        assert_eq!(
            CloseReason::ConnectFailed(Failure::NameNotFound).to_string(),
            "connect failed: name not found"
        );
        assert_eq!(
            CloseReason::ConnectFailed(Failure::ResolveFailed).to_string(),
            "connect failed: name resolution failed"
        );
    }

    #[test]
    fn handshake_failures() {
        assert_eq!(HandshakeFailure::Failed.to_string(), "handshake failed");
        assert_eq!(
            HandshakeFailure::AuthRefused.to_string(),
            "authentication refused"
        );
        assert_eq!(
            HandshakeFailure::CertificateRejected.to_string(),
            "certificate rejected"
        );
    }

    #[test]
    fn failures() {
        assert_eq!(Failure::TimedOut.to_string(), "timed out (kernel)");
        assert_eq!(
            Failure::Other { errno: Some(24) }.to_string(),
            "i/o error (os error 24)"
        );
        assert_eq!(Failure::Other { errno: None }.to_string(), "i/o error");
    }

    #[test]
    fn violations() {
        assert_eq!(
            Violation::FrameTooLong { len: 9, max: 8 }.to_string(),
            "frame of 9 bytes exceeds the maximum of 8"
        );
        assert_eq!(
            Violation::UnknownRequest(RequestId::new(3, 1)).to_string(),
            "response for unknown request 3.1"
        );
        assert_eq!(
            Violation::TooSlow {
                elapsed: Duration::from_millis(1500)
            }
            .to_string(),
            "frame still incomplete after 1500 ms"
        );
    }

    #[test]
    fn evict_reasons() {
        assert_eq!(
            EvictReason::EpochChanged.to_string(),
            "node restarted (epoch changed)"
        );
    }

    #[test]
    fn quarantine_causes() {
        assert_eq!(
            QuarantineCause::ConnectionFailures(CloseReason::SetupTimeout).to_string(),
            "repeated connection failures (last: connection setup timeout)"
        );
        assert_eq!(
            QuarantineCause::RequestTimeouts.to_string(),
            "repeated request timeouts"
        );
    }

    #[test]
    fn readmissions() {
        assert_eq!(Readmission::GaveUp.to_string(), "probes exhausted");
    }

    #[test]
    fn phases() {
        assert_eq!(Phase::Queued.to_string(), "queued, never sent");
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            Outcome::Response(Bytes::from_static(b"hello, world")).to_string(),
            "response (12 bytes)"
        );
        assert_eq!(
            Outcome::Response(Bytes::from_static(b"!")).to_string(),
            "response (1 byte)"
        );
        assert_eq!(
            Outcome::DeadlineExceeded {
                phase: Phase::InFlight
            }
            .to_string(),
            "deadline exceeded (in flight)"
        );
        assert_eq!(
            Outcome::ConnectionLost(CloseReason::Io(Failure::PeerClosed)).to_string(),
            "connection lost: closed by peer"
        );
        assert_eq!(
            Outcome::Evicted(EvictReason::Readmitted).to_string(),
            "evicted: node readmitted"
        );
        assert_eq!(Outcome::Cancelled.to_string(), "cancelled");
    }
}
