//! The transition table of a node's connection state: one function, one `match`.
//!
//! ```text
//!                         Open (Demand | Probe)
//!   Disconnected ──────────────────────────────► Connecting
//!   AuthFailed   ─┘                                │  Connected
//!        ▲  ▲                       handshake off ┌┴────────────────┐ handshake on
//!        │  │                                     ▼                 ▼
//!        │  │                                   Ready ◄─────── Handshaking
//!        │  │                                     │   HandshakeDone
//!        │  │                               Drain ▼
//!        │  │                                  Closing
//!        │  │
//!        │  └── Lost(reason) / Evicted, from Connecting, Handshaking, Ready or Closing
//!        │      (`Lost(AuthFailed | CertificateRejected)` goes to AuthFailed instead)
//!        └───── BackoffReset (an epoch change): reconnect_at moves to now, if later (in
//!               Disconnected or AuthFailed)
//!
//!   Retire (node removed, pool shut down): every state but Closed ──► Closed (terminal)
//! ```
//!
//! Whether the node is admitted (enabled, not quarantined, not throttled) is not a connection
//! state: a quarantined node still opens probe connections through the same table. See
//! `node::Admission`.

use crate::event::{CloseReason, EvictReason, NodeState, Reason};
use crate::time::Instant;

/// What can move a node's connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// Open a fresh connection, for a request or the application (`probe: false`) or for the
    /// failure detector.
    Open { probe: bool },
    /// The TCP connect completed; `handshake` is [`Config::handshake`](crate::Config).
    Connected { handshake: bool },
    /// The application handshake completed.
    HandshakeDone,
    /// A graceful shutdown: a ready connection drains what it holds.
    Drain,
    /// The connection ended for `reason`; a new one may open from `reconnect_at`.
    Lost {
        reason: CloseReason,
        reconnect_at: Instant,
    },
    /// The cached connection was evicted; a fresh one may open at once (`at`).
    Evicted { reason: EvictReason, at: Instant },
    /// The node's backoff restarts (its epoch changed): reconnecting is allowed from `at`.
    BackoffReset { at: Instant },
    /// The node leaves for good.
    Retire(CloseReason),
}

/// The input does not apply in the node's state; nothing changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused;

/// The transition table: the state `input` moves a node from `from` to, and the reason the
/// state change carries.
pub(crate) fn transition(from: NodeState, input: Input) -> Result<(NodeState, Reason), Refused> {
    use NodeState as S;
    let open = matches!(from, S::Connecting | S::Handshaking | S::Ready | S::Closing);
    Ok(match (from, input) {
        (S::Disconnected { .. } | S::AuthFailed { .. }, Input::Open { probe }) => {
            let reason = if probe { Reason::Probe } else { Reason::Demand };
            (S::Connecting, reason)
        }
        (S::Connecting, Input::Connected { handshake: true }) => {
            (S::Handshaking, Reason::Connected)
        }
        (S::Connecting, Input::Connected { handshake: false }) => (S::Ready, Reason::Connected),
        (S::Handshaking, Input::HandshakeDone) => (S::Ready, Reason::HandshakeDone),
        (S::Ready, Input::Drain) => (S::Closing, Reason::Draining),
        (
            _,
            Input::Lost {
                reason,
                reconnect_at,
            },
        ) if open => {
            let to = if matches!(
                reason,
                CloseReason::AuthFailed | CloseReason::CertificateRejected
            ) {
                S::AuthFailed { reconnect_at }
            } else {
                S::Disconnected { reconnect_at }
            };
            (to, Reason::Closed(reason))
        }
        (_, Input::Evicted { reason, at }) if open => (
            S::Disconnected { reconnect_at: at },
            Reason::Closed(CloseReason::Evicted(reason)),
        ),
        (S::Disconnected { reconnect_at }, Input::BackoffReset { at }) => (
            S::Disconnected {
                reconnect_at: reconnect_at.min(at),
            },
            Reason::BackoffReset,
        ),
        (S::AuthFailed { reconnect_at }, Input::BackoffReset { at }) => (
            S::AuthFailed {
                reconnect_at: reconnect_at.min(at),
            },
            Reason::BackoffReset,
        ),
        (S::Closed, Input::Retire(_)) => return Err(Refused),
        (_, Input::Retire(reason)) => (S::Closed, Reason::Closed(reason)),
        _ => return Err(Refused),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Instant = Instant::from_secs(7);

    fn all_states() -> [NodeState; 7] {
        [
            NodeState::Disconnected { reconnect_at: T },
            NodeState::Connecting,
            NodeState::Handshaking,
            NodeState::Ready,
            NodeState::Closing,
            NodeState::AuthFailed { reconnect_at: T },
            NodeState::Closed,
        ]
    }

    #[test]
    fn closed_is_terminal() {
        let inputs = [
            Input::Open { probe: false },
            Input::Connected { handshake: false },
            Input::HandshakeDone,
            Input::Drain,
            Input::Lost {
                reason: CloseReason::Idle,
                reconnect_at: T,
            },
            Input::Evicted {
                reason: EvictReason::Requested,
                at: T,
            },
            Input::BackoffReset { at: T },
            Input::Retire(CloseReason::Shutdown),
        ];
        for input in inputs {
            assert_eq!(transition(NodeState::Closed, input), Err(Refused));
        }
    }

    #[test]
    fn only_a_connection_can_be_lost_or_evicted() {
        let lost = Input::Lost {
            reason: CloseReason::WriteTimeout,
            reconnect_at: T,
        };
        for from in all_states() {
            let has_conn = matches!(
                from,
                NodeState::Connecting
                    | NodeState::Handshaking
                    | NodeState::Ready
                    | NodeState::Closing
            );
            assert_eq!(transition(from, lost).is_ok(), has_conn, "{from:?}");
        }
    }

    #[test]
    fn an_auth_failure_is_its_own_state() {
        let lost = Input::Lost {
            reason: CloseReason::AuthFailed,
            reconnect_at: T,
        };
        assert_eq!(
            transition(NodeState::Handshaking, lost),
            Ok((
                NodeState::AuthFailed { reconnect_at: T },
                Reason::Closed(CloseReason::AuthFailed)
            ))
        );
    }

    #[test]
    fn a_rejected_certificate_is_an_auth_failure_state_too() {
        let lost = Input::Lost {
            reason: CloseReason::CertificateRejected,
            reconnect_at: T,
        };
        assert_eq!(
            transition(NodeState::Handshaking, lost),
            Ok((
                NodeState::AuthFailed { reconnect_at: T },
                Reason::Closed(CloseReason::CertificateRejected)
            ))
        );
    }

    #[test]
    fn a_backoff_reset_cuts_an_auth_failure_backoff_short_too() {
        let later = Instant::from_secs(9);
        let (to, _) = transition(
            NodeState::AuthFailed {
                reconnect_at: later,
            },
            Input::BackoffReset { at: T },
        )
        .unwrap();
        assert_eq!(to, NodeState::AuthFailed { reconnect_at: T });
    }

    #[test]
    fn a_backoff_reset_only_moves_reconnect_earlier() {
        let later = Instant::from_secs(9);
        let (to, _) = transition(
            NodeState::Disconnected { reconnect_at: T },
            Input::BackoffReset { at: later },
        )
        .unwrap();
        assert_eq!(to, NodeState::Disconnected { reconnect_at: T });
        let (to, _) = transition(
            NodeState::Disconnected {
                reconnect_at: later,
            },
            Input::BackoffReset { at: T },
        )
        .unwrap();
        assert_eq!(to, NodeState::Disconnected { reconnect_at: T });
    }

    #[test]
    fn opening_needs_a_node_between_connections() {
        for from in all_states() {
            let ok = matches!(
                from,
                NodeState::Disconnected { .. } | NodeState::AuthFailed { .. }
            );
            assert_eq!(
                transition(from, Input::Open { probe: false }).is_ok(),
                ok,
                "{from:?}"
            );
        }
    }
}
