//! Spans and events through `tracing`.
//!
//! Every event has target `keepwire`. The spans are `keepwire_client` (field `seed`),
//! `keepwire_node` (`node`, `addr`) and `keepwire_conn` (`conn`), nested in that order; they
//! are at the ERROR level so that whatever level an operator filters at, an event still says
//! which node and connection it is about. Nothing is formatted unless a subscriber records
//! the event: every field is passed by reference to its `Display` or `Debug`.

use keepwire_proto::{
    Action, CloseReason, ConnId, Event, Failure, NodeId, NodeState, Outcome, Pool, Reason,
};
use tracing::{Level, Span};

use super::names;
use crate::client::ClientEvent;
use crate::sync::IdMap;

/// `tracing::event!` with a level chosen at run time (each arm is its own callsite).
macro_rules! event_at {
    ($level:expr, parent: $parent:expr, $($rest:tt)+) => {
        match $level {
            Level::ERROR => tracing::event!(target: "keepwire", parent: $parent, Level::ERROR, $($rest)+),
            Level::WARN => tracing::event!(target: "keepwire", parent: $parent, Level::WARN, $($rest)+),
            Level::INFO => tracing::event!(target: "keepwire", parent: $parent, Level::INFO, $($rest)+),
            Level::DEBUG => tracing::event!(target: "keepwire", parent: $parent, Level::DEBUG, $($rest)+),
            _ => tracing::event!(target: "keepwire", parent: $parent, Level::TRACE, $($rest)+),
        }
    };
}

#[derive(Debug)]
pub(super) struct Trace {
    client: Span,
    nodes: IdMap<NodeId, NodeSpans>,
}

#[derive(Debug)]
struct NodeSpans {
    span: Span,
    /// The node's latest connection and its span (kept after a close, so that the events
    /// the close causes are still filed under it, until the next connection).
    conn: Option<(ConnId, Span)>,
    /// A connection opened but whose attempt the pool has not announced yet: the driver
    /// performs the pool's actions before it hands out its events, so the events of the
    /// previous connection's close may still come, and belong to that one.
    next: Option<(ConnId, Span)>,
}

impl NodeSpans {
    /// The span of `conn` if it is the node's latest or next connection; with no
    /// connection named, the latest one's; else the node's.
    fn for_conn(&self, conn: Option<ConnId>) -> &Span {
        match (conn, &self.conn, &self.next) {
            (Some(conn), Some((latest, span)), _) if *latest == conn => span,
            (Some(conn), _, Some((next, span))) if *next == conn => span,
            (None, Some((_, span)), _) => span,
            _ => &self.span,
        }
    }
}

impl Trace {
    pub(super) fn new(seed: u64) -> Self {
        Self {
            client: tracing::error_span!(target: "keepwire", "keepwire_client", seed),
            nodes: IdMap::default(),
        }
    }

    fn node_span(&self, node: NodeId) -> &Span {
        self.nodes.get(&node).map_or(&self.client, |n| &n.span)
    }

    /// The latest connection's span of `node` (or the node's, or the client's).
    fn conn_span(&self, node: NodeId, conn: Option<ConnId>) -> &Span {
        self.nodes
            .get(&node)
            .map_or(&self.client, |n| n.for_conn(conn))
    }

    pub(super) fn node_added(&mut self, pool: &Pool, node: NodeId) {
        let endpoint = pool.node_endpoint(node);
        let span = tracing::error_span!(
            target: "keepwire",
            parent: &self.client,
            "keepwire_node",
            node = node.index(),
            addr = endpoint.map(tracing::field::display),
        );
        tracing::debug!(target: "keepwire", parent: &span, "node added");
        self.nodes.insert(
            node,
            NodeSpans {
                span,
                conn: None,
                next: None,
            },
        );
    }

    pub(super) fn action(&mut self, action: &Action) {
        if let Action::Heartbeat { conn, id } = action {
            let span = self.conn_span(conn.node(), Some(*conn));
            tracing::trace!(target: "keepwire", parent: span, request = ?id, "heartbeat ping");
            return;
        }
        let Action::Open { conn, deadline, .. } = action else {
            return;
        };
        let Some(node) = self.nodes.get_mut(&conn.node()) else {
            return;
        };
        let span = tracing::error_span!(
            target: "keepwire",
            parent: &node.span,
            "keepwire_conn",
            conn = ?conn,
        );
        tracing::trace!(
            target: "keepwire",
            parent: &span,
            setup_deadline_ns = deadline.as_nanos(),
            "opening a connection"
        );
        node.next = Some((*conn, span));
    }

    pub(super) fn event(&mut self, event: &Event) {
        match event {
            Event::StateChanged {
                node,
                from,
                to,
                reason,
                ..
            } => self.state_changed(*node, *from, *to, *reason),
            Event::Writability {
                node,
                writable,
                pending,
            } => {
                let span = self.conn_span(*node, None);
                if *writable {
                    tracing::info!(
                        target: "keepwire",
                        parent: span,
                        pending,
                        "writable again: outbound buffer below the low watermark"
                    );
                } else {
                    tracing::warn!(
                        target: "keepwire",
                        parent: span,
                        pending,
                        "not writable: outbound buffer above the high watermark, sends are rejected"
                    );
                }
            }
            Event::Evicted { conn, reason } => {
                let span = self.conn_span(conn.node(), Some(*conn));
                tracing::info!(
                    target: "keepwire",
                    parent: span,
                    reason = %reason,
                    kind = names::evict(*reason),
                    "connection evicted"
                );
            }
            Event::Quarantined { node, cause, .. } => {
                tracing::warn!(
                    target: "keepwire",
                    parent: self.node_span(*node),
                    cause = %cause,
                    kind = names::quarantine(*cause),
                    "node quarantined: excluded from selection, probed on fresh connections"
                );
            }
            Event::Readmitted { node, via, .. } => {
                tracing::info!(
                    target: "keepwire",
                    parent: self.node_span(*node),
                    via = %via,
                    kind = names::readmission(*via),
                    "node readmitted"
                );
            }
            Event::PanicMode {
                entered,
                healthy,
                admitted,
                ..
            } => {
                if *entered {
                    tracing::warn!(
                        target: "keepwire",
                        parent: &self.client,
                        healthy,
                        admitted,
                        "panic mode: too few healthy nodes, selection ignores quarantine"
                    );
                } else {
                    tracing::info!(
                        target: "keepwire",
                        parent: &self.client,
                        healthy,
                        admitted,
                        "panic mode over"
                    );
                }
            }
            Event::RequestDone {
                id,
                node,
                outcome,
                sent,
                retried,
            } => {
                tracing::trace!(
                    target: "keepwire",
                    parent: self.conn_span(*node, None),
                    request = ?id,
                    outcome = outcome_kind(outcome),
                    sent = %sent,
                    retried,
                    "request ended"
                );
            }
            _ => {}
        }
    }

    fn state_changed(&mut self, node: NodeId, from: NodeState, to: NodeState, reason: Reason) {
        let (level, message) = state_change_level(to, reason);
        if to.is_connecting() {
            // The attempt the pool announces now is the connection opened last.
            if let Some(spans) = self.nodes.get_mut(&node) {
                if let Some(next) = spans.next.take() {
                    spans.conn = Some(next);
                }
            }
        }
        let span = self.conn_span(node, None);
        event_at!(
            level,
            parent: span,
            from = %from,
            to = %to,
            reason = %reason,
            kind = names::reason(reason),
            state = names::state(to),
            "{}",
            message
        );
    }

    pub(super) fn node_removed(&mut self, node: NodeId) {
        if let Some(spans) = self.nodes.remove(&node) {
            tracing::debug!(target: "keepwire", parent: &spans.span, "node removed");
        }
    }

    pub(super) fn client_event(&mut self, event: &ClientEvent) {
        match event {
            ClientEvent::SocketOptions { conn, report } => {
                tracing::warn!(
                    target: "keepwire",
                    parent: self.conn_span(conn.node(), Some(*conn)),
                    report = %report,
                    "socket options not applied"
                );
            }
            ClientEvent::HandshakeFailed { conn, error } => {
                tracing::warn!(
                    target: "keepwire",
                    parent: self.conn_span(conn.node(), Some(*conn)),
                    error = %error,
                    "handshake failed"
                );
            }
            ClientEvent::CodecPanicked { conn, message } => {
                tracing::error!(
                    target: "keepwire",
                    parent: self.conn_span(conn.node(), Some(*conn)),
                    panic = %message,
                    "the codec panicked; connection closed"
                );
            }
            _ => {}
        }
    }
}

/// The level and message of a node's state change: a warning for what an operator must act
/// on (a write or heartbeat timeout, a protocol violation, a final refusal, a name that does
/// not exist), an info for a failed attempt and a probe, debug for the rest.
fn state_change_level(to: NodeState, reason: Reason) -> (Level, &'static str) {
    match (to, reason) {
        (_, Reason::Closed(CloseReason::WriteTimeout)) => (
            Level::WARN,
            "write timeout: the kernel did not accept a frame in time, connection closed",
        ),
        (_, Reason::Closed(CloseReason::Protocol(_))) => (
            Level::WARN,
            "the peer broke the protocol, connection closed",
        ),
        (_, Reason::Closed(CloseReason::AuthFailed)) => (Level::WARN, "authentication failed"),
        (_, Reason::Closed(CloseReason::CertificateRejected)) => {
            (Level::WARN, "certificate rejected")
        }
        (_, Reason::Closed(CloseReason::ConnectFailed(Failure::NameNotFound))) => {
            (Level::WARN, "the node's name does not exist")
        }
        (_, Reason::Closed(CloseReason::HeartbeatTimeout)) => (
            Level::WARN,
            "heartbeat timeout: the idle connection's ping got no answer in time, connection closed",
        ),
        (
            _,
            Reason::Closed(
                CloseReason::SetupTimeout
                | CloseReason::ConnectFailed(_)
                | CloseReason::HandshakeFailed
                | CloseReason::Io(_),
            ),
        ) => (Level::INFO, "connection failed"),
        (_, Reason::Closed(_)) => (Level::DEBUG, "connection closed"),
        (_, Reason::Probe) => (
            Level::INFO,
            "probing the quarantined node on a fresh connection",
        ),
        (NodeState::Connecting, _) => (Level::DEBUG, "connecting"),
        (NodeState::Handshaking, _) => (Level::DEBUG, "connected, handshaking"),
        (NodeState::Ready, _) => (Level::DEBUG, "ready"),
        _ => (Level::DEBUG, "state changed"),
    }
}

fn outcome_kind(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Response(_) => "response",
        Outcome::DeadlineExceeded { .. } => "deadline_exceeded",
        Outcome::ConnectionLost(reason) => names::close(*reason),
        Outcome::Evicted(_) => "evicted",
        Outcome::Cancelled => "cancelled",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::ptr;

    use keepwire_proto::{Config, EvictReason, Instant, Violation};

    use super::*;

    /// An event about a connection goes under that connection's span: the latest one's or
    /// the one opened next; an event about another connection under the node's, and one that
    /// names none under the latest connection's.
    #[test]
    fn an_event_goes_under_the_span_of_the_connection_it_names() {
        let now = Instant::from_secs(0);
        let mut pool = Pool::new(Config::default(), now).unwrap();
        let [latest, next, other] = [1, 2, 3].map(|port| {
            let node = pool.add_node(now, SocketAddr::from(([127, 0, 0, 1], port)));
            pool.connect(now, node).unwrap();
            loop {
                match pool.poll_action() {
                    Some(Action::Open { conn, .. }) => break conn,
                    Some(_) => {}
                    None => panic!("no connection opened"),
                }
            }
        });
        let spans = NodeSpans {
            span: Span::none(),
            conn: Some((latest, Span::none())),
            next: Some((next, Span::none())),
        };
        let latest_span = &spans.conn.as_ref().unwrap().1;
        let next_span = &spans.next.as_ref().unwrap().1;
        assert!(ptr::eq(spans.for_conn(Some(latest)), latest_span));
        assert!(ptr::eq(spans.for_conn(Some(next)), next_span));
        assert!(ptr::eq(spans.for_conn(Some(other)), &spans.span));
        assert!(ptr::eq(spans.for_conn(None), latest_span));
    }

    /// A request's end is named by how it ended (the connection's close by its reason).
    #[test]
    fn each_outcome_has_its_name() {
        use keepwire_proto::Phase;
        let cases = [
            (Outcome::Response(bytes::Bytes::new()), "response"),
            (
                Outcome::DeadlineExceeded {
                    phase: Phase::Queued,
                },
                "deadline_exceeded",
            ),
            (
                Outcome::ConnectionLost(CloseReason::WriteTimeout),
                "write_timeout",
            ),
            (Outcome::Evicted(EvictReason::Readmitted), "evicted"),
            (Outcome::Cancelled, "cancelled"),
        ];
        for (outcome, name) in cases {
            assert_eq!(outcome_kind(&outcome), name, "{outcome:?}");
        }
    }

    /// Each kind of state change at the level its documentation gives (a warning is for what
    /// an operator must act on), with the message that says which it was.
    #[test]
    fn each_state_change_has_its_level_and_message() {
        let down = NodeState::Disconnected {
            reconnect_at: Instant::from_secs(1),
        };
        let refused = NodeState::AuthFailed {
            reconnect_at: Instant::from_secs(30),
        };
        let closed = |reason| (down, Reason::Closed(reason));
        let cases = [
            (
                closed(CloseReason::WriteTimeout),
                Level::WARN,
                "write timeout",
            ),
            (
                closed(CloseReason::Protocol(Violation::MalformedHeader)),
                Level::WARN,
                "the peer broke the protocol",
            ),
            (
                (refused, Reason::Closed(CloseReason::AuthFailed)),
                Level::WARN,
                "authentication failed",
            ),
            (
                (refused, Reason::Closed(CloseReason::CertificateRejected)),
                Level::WARN,
                "certificate rejected",
            ),
            (
                closed(CloseReason::ConnectFailed(Failure::NameNotFound)),
                Level::WARN,
                "the node's name does not exist",
            ),
            (
                closed(CloseReason::HeartbeatTimeout),
                Level::WARN,
                "heartbeat timeout",
            ),
            (
                closed(CloseReason::SetupTimeout),
                Level::INFO,
                "connection failed",
            ),
            (
                closed(CloseReason::ConnectFailed(Failure::Refused)),
                Level::INFO,
                "connection failed",
            ),
            (
                closed(CloseReason::HandshakeFailed),
                Level::INFO,
                "connection failed",
            ),
            (
                closed(CloseReason::Io(Failure::Reset)),
                Level::INFO,
                "connection failed",
            ),
            (closed(CloseReason::Idle), Level::DEBUG, "connection closed"),
            (
                closed(CloseReason::Evicted(EvictReason::Requested)),
                Level::DEBUG,
                "connection closed",
            ),
            (
                (NodeState::Connecting, Reason::Probe),
                Level::INFO,
                "probing the quarantined node",
            ),
            (
                (NodeState::Connecting, Reason::Demand),
                Level::DEBUG,
                "connecting",
            ),
            (
                (NodeState::Handshaking, Reason::Connected),
                Level::DEBUG,
                "connected, handshaking",
            ),
            (
                (NodeState::Ready, Reason::HandshakeDone),
                Level::DEBUG,
                "ready",
            ),
            (
                (NodeState::Closing, Reason::Draining),
                Level::DEBUG,
                "state changed",
            ),
            ((down, Reason::BackoffReset), Level::DEBUG, "state changed"),
        ];
        for ((to, reason), level, message) in cases {
            let (got_level, got_message) = state_change_level(to, reason);
            assert_eq!(got_level, level, "{reason:?}");
            assert!(
                got_message.starts_with(message),
                "{reason:?}: {got_message}"
            );
        }
    }
}
