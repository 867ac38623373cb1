use super::*;

#[test]
fn every_error_has_the_io_kind_its_doc_names() {
    use io::ErrorKind as K;
    let (sent, retried) = (Sent::Nothing, false);
    let lost = |cause| SendError::ConnectionLost {
        cause,
        sent,
        retried,
    };
    let cases = [
        (SendError::NotWritable, K::WouldBlock),
        (SendError::MemoryBudget, K::WouldBlock),
        (SendError::InFlightLimit, K::WouldBlock),
        (
            SendError::NodeUnavailable(Unavailable::Disabled),
            K::NotConnected,
        ),
        (SendError::NoNode { all_full: false }, K::NotConnected),
        (SendError::StaleNode, K::NotConnected),
        (
            SendError::DeadlineExceeded {
                phase: Phase::Queued,
                sent,
                retried,
            },
            K::TimedOut,
        ),
        (lost(CloseReason::Io(Failure::Reset)), K::ConnectionReset),
        (
            lost(CloseReason::ConnectFailed(Failure::Refused)),
            K::ConnectionRefused,
        ),
        (lost(CloseReason::Io(Failure::PeerClosed)), K::UnexpectedEof),
        (
            lost(CloseReason::ConnectFailed(Failure::Unreachable)),
            K::HostUnreachable,
        ),
        (
            lost(CloseReason::Io(Failure::Unreachable)),
            K::HostUnreachable,
        ),
        (lost(CloseReason::HandshakeFailed), K::ConnectionAborted),
        (
            SendError::Evicted {
                reason: EvictReason::Readmitted,
                sent,
                retried,
            },
            K::ConnectionAborted,
        ),
        (SendError::Shutdown, K::ConnectionAborted),
        (
            SendError::Protocol {
                violation: Violation::Undecodable,
                sent,
                retried,
            },
            K::InvalidData,
        ),
        (
            SendError::Encode(EncodeError::Invalid("too long".into())),
            K::InvalidInput,
        ),
        (SendError::Cancelled, K::Interrupted),
        (
            SendError::Other {
                outcome: "unknown".into(),
                sent,
                retried,
            },
            K::Other,
        ),
        (SendError::Rejected(SubmitError::DeadlinePassed), K::Other),
    ];
    for (error, kind) in cases {
        assert_eq!(error.io_kind(), kind, "{error}");
        let as_io = io::Error::from(error.clone());
        assert_eq!(as_io.kind(), kind, "{error}");
        let source = as_io.get_ref().and_then(|e| e.downcast_ref::<SendError>());
        assert_eq!(source, Some(&error), "the typed error comes back");
    }
}

#[test]
fn a_deadline_says_where_the_request_was_and_what_was_sent() {
    let text = |phase, sent, retried| {
        SendError::DeadlineExceeded {
            phase,
            sent,
            retried,
        }
        .to_string()
    };
    assert_eq!(
        text(Phase::Queued, Sent::Nothing, false),
        "deadline exceeded (queued, never sent)"
    );
    assert_eq!(
        text(Phase::InFlight, Sent::Partly, false),
        "deadline exceeded (in flight, partly sent)"
    );
    assert_eq!(
        text(Phase::InFlight, Sent::Fully, true),
        "deadline exceeded (in flight, fully sent, retried once)"
    );
}

#[test]
fn final_errors_say_so_with_their_reason() {
    let lost = |cause| SendError::ConnectionLost {
        cause,
        sent: Sent::Nothing,
        retried: false,
    };
    let finals = [
        (
            lost(CloseReason::AuthFailed),
            io::ErrorKind::PermissionDenied,
        ),
        (
            lost(CloseReason::CertificateRejected),
            io::ErrorKind::PermissionDenied,
        ),
        (
            lost(CloseReason::ConnectFailed(Failure::NameNotFound)),
            io::ErrorKind::NotFound,
        ),
        (
            SendError::NodeUnavailable(Unavailable::Failed(CloseReason::AuthFailed)),
            io::ErrorKind::PermissionDenied,
        ),
        (
            SendError::NodeUnavailable(Unavailable::Failed(CloseReason::ConnectFailed(
                Failure::NameNotFound,
            ))),
            io::ErrorKind::NotFound,
        ),
    ];
    for (error, kind) in finals {
        assert!(error.is_final(), "{error}");
        assert!(error.final_reason().is_some_and(CloseReason::is_final));
        assert!(
            !error.is_retryable(),
            "{error}: a resend meets the same refusal"
        );
        assert!(!error.is_timeout(), "{error}");
        assert_eq!(error.io_kind(), kind, "{error}");
    }
    for retryable in [
        lost(CloseReason::ConnectFailed(Failure::ResolveFailed)),
        lost(CloseReason::ConnectFailed(Failure::Refused)),
        lost(CloseReason::HandshakeFailed),
        lost(CloseReason::HeartbeatTimeout),
        SendError::NodeUnavailable(Unavailable::Disabled),
    ] {
        assert_eq!(retryable.final_reason(), None, "{retryable}");
        assert!(retryable.is_retryable(), "{retryable}");
    }
    assert!(lost(CloseReason::HeartbeatTimeout).is_timeout());
}

#[test]
fn io_errors_map_to_failures() {
    let cases = [
        (io::ErrorKind::ConnectionRefused, Failure::Refused),
        (io::ErrorKind::ConnectionReset, Failure::Reset),
        (io::ErrorKind::ConnectionAborted, Failure::Reset),
        (io::ErrorKind::TimedOut, Failure::TimedOut),
        (io::ErrorKind::UnexpectedEof, Failure::PeerClosed),
        (io::ErrorKind::BrokenPipe, Failure::PeerClosed),
        (io::ErrorKind::HostUnreachable, Failure::Unreachable),
        (io::ErrorKind::NetworkUnreachable, Failure::Unreachable),
        (io::ErrorKind::NetworkDown, Failure::Unreachable),
        (io::ErrorKind::OutOfMemory, Failure::Other { errno: None }),
    ];
    for (kind, failure) in cases {
        assert_eq!(failure_of(&io::Error::from(kind)), failure, "{kind:?}");
    }
    // The errors the kernel gives, by their errno.
    #[cfg(unix)]
    for (errno, failure) in [
        (libc::ECONNREFUSED, Failure::Refused),
        (libc::ECONNRESET, Failure::Reset),
        (libc::ECONNABORTED, Failure::Reset),
        (libc::ETIMEDOUT, Failure::TimedOut),
        (libc::EPIPE, Failure::PeerClosed),
        (libc::EHOSTUNREACH, Failure::Unreachable),
        (libc::ENETUNREACH, Failure::Unreachable),
        (libc::ENETDOWN, Failure::Unreachable),
        (
            libc::EMFILE,
            Failure::Other {
                errno: Some(libc::EMFILE),
            },
        ),
    ] {
        let error = io::Error::from_raw_os_error(errno);
        assert_eq!(failure_of(&error), failure, "{error}");
    }
}

#[test]
fn errors_read_as_sentences() {
    let cases = [
        (
            SendError::ConnectionLost {
                cause: CloseReason::WriteTimeout,
                sent: Sent::Nothing,
                retried: false,
            },
            "connection lost: write timeout (nothing sent)",
        ),
        (
            SendError::ConnectionLost {
                cause: CloseReason::Io(Failure::TimedOut),
                sent: Sent::Partly,
                retried: false,
            },
            "connection lost: timed out (kernel) (partly sent)",
        ),
        (
            SendError::ConnectionLost {
                cause: CloseReason::ConnectFailed(Failure::Refused),
                sent: Sent::Nothing,
                retried: true,
            },
            "connection lost: connect failed: refused (nothing sent, retried once)",
        ),
        (
            SendError::Protocol {
                violation: Violation::FrameTooLong { len: 9, max: 8 },
                sent: Sent::Fully,
                retried: false,
            },
            "protocol error: frame of 9 bytes exceeds the maximum of 8 (fully sent)",
        ),
        (
            SendError::DeadlineExceeded {
                phase: Phase::Queued,
                sent: Sent::Nothing,
                retried: false,
            },
            "deadline exceeded (queued, never sent)",
        ),
        (
            SendError::DeadlineExceeded {
                phase: Phase::InFlight,
                sent: Sent::Fully,
                retried: true,
            },
            "deadline exceeded (in flight, fully sent, retried once)",
        ),
        (
            SendError::Evicted {
                reason: EvictReason::EpochChanged,
                sent: Sent::Unknown,
                retried: false,
            },
            "evicted: node restarted (epoch changed) (may have been sent)",
        ),
        (
            SendError::Rejected(SubmitError::DeadlinePassed),
            "request rejected: the deadline is already past",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
    assert_eq!(
        SendError::from(SubmitError::NotWritable),
        SendError::NotWritable
    );
}

/// `sent()` is `None` exactly for refusals; `was_sent()` and `is_retryable()` follow it.
#[test]
fn what_reached_the_server_decides_whether_a_resend_is_safe() {
    let lost = |sent| SendError::ConnectionLost {
        cause: CloseReason::Io(Failure::Reset),
        sent,
        retried: false,
    };
    for (sent, reached) in [
        (Sent::Nothing, false),
        (Sent::Unknown, true),
        (Sent::Partly, true),
        (Sent::Fully, true),
    ] {
        let error = lost(sent);
        assert_eq!(error.sent(), Some(sent));
        assert_eq!(error.was_sent(), reached, "{error}");
        assert_eq!(error.is_retryable(), !reached, "{error}");
        assert!(!error.retried());
    }
    let refusals = [
        SendError::NotWritable,
        SendError::MemoryBudget,
        SendError::InFlightLimit,
        SendError::NodeUnavailable(Unavailable::Quarantined),
        SendError::NoNode { all_full: false },
        SendError::StaleNode,
        SendError::Rejected(SubmitError::MemoryBudget),
    ];
    for error in refusals {
        assert_eq!(error.sent(), None, "{error}");
        assert!(!error.was_sent() && error.is_retryable(), "{error}");
    }
    for error in [
        SendError::Encode(EncodeError::Panicked),
        SendError::Shutdown,
        SendError::Cancelled,
    ] {
        assert_eq!(error.sent(), None, "{error}");
        assert!(
            !error.is_retryable(),
            "{error}: a resend fails the same way"
        );
    }
    let retried = SendError::Evicted {
        reason: EvictReason::Requested,
        sent: Sent::Nothing,
        retried: true,
    };
    assert!(retried.retried() && retried.is_retryable());
    let queued = SendError::from(SubmitError::DeadlinePassed);
    assert_eq!(queued.sent(), Some(Sent::Nothing));
    assert!(queued.is_retryable());
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
                sent: Sent::Nothing,
                retried: false,
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

#[test]
fn errors_convert_to_io_errors_of_the_matching_kind() {
    use std::io::ErrorKind as K;
    let lost = |cause| SendError::ConnectionLost {
        cause,
        sent: Sent::Fully,
        retried: false,
    };
    let cases = [
        (lost(CloseReason::WriteTimeout), K::TimedOut, true),
        (lost(CloseReason::Io(Failure::TimedOut)), K::TimedOut, true),
        (
            lost(CloseReason::Io(Failure::Reset)),
            K::ConnectionReset,
            false,
        ),
        (
            lost(CloseReason::ConnectFailed(Failure::Refused)),
            K::ConnectionRefused,
            false,
        ),
        (
            lost(CloseReason::Io(Failure::PeerClosed)),
            K::UnexpectedEof,
            false,
        ),
        (SendError::NotWritable, K::WouldBlock, false),
        (SendError::NoNode { all_full: true }, K::NotConnected, false),
        (SendError::Cancelled, K::Interrupted, false),
        (
            SendError::DeadlineExceeded {
                phase: Phase::Queued,
                sent: Sent::Nothing,
                retried: false,
            },
            K::TimedOut,
            true,
        ),
    ];
    for (error, kind, timeout) in cases {
        assert_eq!(error.is_timeout(), timeout, "{error:?}");
        let text = error.to_string();
        let io: io::Error = error.into();
        assert_eq!(io.kind(), kind, "{text}");
        assert_eq!(io.to_string(), text);
        let back = io.get_ref().and_then(|e| e.downcast_ref::<SendError>());
        assert!(back.is_some(), "the typed error is kept as the source");
    }
}
