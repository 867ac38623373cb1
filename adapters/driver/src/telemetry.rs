//! What the driver tells operators: `tracing` spans and events (the `tracing` feature) and
//! `metrics` counters and gauges (the `metrics` feature). Without either feature every hook
//! here is empty and compiles away.
//!
//! The driver calls the hooks as it works: when a node is added, when a connection is opened,
//! for every pool event and every client event, for every node whose figures may have moved
//! ([`Telemetry::touched`]), and once at the end of every poll ([`Telemetry::flush`]), where
//! counters and gauges are brought up to date.

#[cfg(feature = "tracing")]
use keepwire_proto::Action;
use keepwire_proto::{Event, NodeId, Pool};

use crate::client::ClientEvent;

/// The driver's telemetry: empty unless a feature asks for some.
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "tracing")]
    trace: trace::Trace,
    #[cfg(feature = "metrics")]
    meter: meter::Meter,
}

impl Telemetry {
    pub(crate) fn new(pool: &Pool) -> Self {
        let _ = pool;
        Self {
            #[cfg(feature = "tracing")]
            trace: trace::Trace::new(pool.seed()),
            #[cfg(feature = "metrics")]
            meter: meter::Meter::new(),
        }
    }

    /// A node joined the pool.
    #[inline]
    pub(crate) fn node_added(&mut self, pool: &Pool, node: NodeId) {
        let _ = (pool, node);
        #[cfg(feature = "tracing")]
        self.trace.node_added(pool, node);
        #[cfg(feature = "metrics")]
        self.meter.node_added(pool, node);
    }

    /// A node left the pool (after the events of its removal were handled).
    #[inline]
    pub(crate) fn node_removed(&mut self, node: NodeId) {
        let _ = node;
        #[cfg(feature = "tracing")]
        self.trace.node_removed(node);
        #[cfg(feature = "metrics")]
        self.meter.node_removed(node);
    }

    /// The driver performs `action`.
    #[cfg(feature = "tracing")]
    #[inline]
    pub(crate) fn action(&mut self, action: &Action) {
        self.trace.action(action);
    }

    /// The pool announced `event`.
    #[inline]
    pub(crate) fn event(&mut self, event: &Event) {
        let _ = event;
        #[cfg(feature = "tracing")]
        self.trace.event(event);
        #[cfg(feature = "metrics")]
        self.meter.event(event);
    }

    /// The driver announced `event` to subscribers.
    #[inline]
    pub(crate) fn client_event(&mut self, event: &ClientEvent) {
        let _ = event;
        #[cfg(feature = "tracing")]
        self.trace.client_event(event);
    }

    /// `node`'s pending bytes or requests may have changed.
    #[inline]
    pub(crate) fn touched(&mut self, node: NodeId) {
        let _ = node;
        #[cfg(feature = "metrics")]
        self.meter.touched(node);
    }

    /// The end of a driver poll: brings counters and gauges up to date.
    #[inline]
    pub(crate) fn flush(&mut self, pool: &Pool) {
        let _ = pool;
        #[cfg(feature = "metrics")]
        self.meter.flush(pool);
    }

    /// The driver stops: its gauges go back to what they were before it started.
    pub(crate) fn finish(&mut self, pool: &Pool) {
        let _ = pool;
        #[cfg(feature = "metrics")]
        self.meter.finish(pool);
    }
}

/// Short, stable names for label values and structured fields.
#[cfg(any(feature = "tracing", feature = "metrics"))]
mod names {
    #[cfg(feature = "tracing")]
    use keepwire_proto::Reason;
    use keepwire_proto::{CloseReason, EvictReason, NodeState, QuarantineCause, Readmission};

    pub(super) fn state(state: NodeState) -> &'static str {
        match state {
            NodeState::Disconnected { .. } => "disconnected",
            NodeState::Connecting => "connecting",
            NodeState::Handshaking => "handshaking",
            NodeState::Ready => "ready",
            NodeState::Closing => "closing",
            NodeState::AuthFailed { .. } => "auth_failed",
            NodeState::Closed => "closed",
            _ => "other",
        }
    }

    /// Every state [`state`] names, for the per-state gauges.
    #[cfg(feature = "metrics")]
    pub(super) const STATES: [&str; 8] = [
        "disconnected",
        "connecting",
        "handshaking",
        "ready",
        "closing",
        "auth_failed",
        "closed",
        "other",
    ];

    pub(super) fn close(reason: CloseReason) -> &'static str {
        match reason {
            CloseReason::SetupTimeout => "setup_timeout",
            CloseReason::ConnectFailed(_) => "connect_failed",
            CloseReason::HandshakeFailed => "handshake_failed",
            CloseReason::AuthFailed => "auth_failed",
            CloseReason::CertificateRejected => "certificate_rejected",
            CloseReason::WriteTimeout => "write_timeout",
            CloseReason::HeartbeatTimeout => "heartbeat_timeout",
            CloseReason::Io(_) => "io",
            CloseReason::Protocol(_) => "protocol",
            CloseReason::Evicted(_) => "evicted",
            CloseReason::Quarantined => "quarantined",
            CloseReason::Idle => "idle",
            CloseReason::NodeRemoved => "node_removed",
            CloseReason::Shutdown => "shutdown",
            _ => "other",
        }
    }

    #[cfg(feature = "tracing")]
    pub(super) fn reason(reason: Reason) -> &'static str {
        match reason {
            Reason::Demand => "demand",
            Reason::Probe => "probe",
            Reason::Connected => "connected",
            Reason::HandshakeDone => "handshake_done",
            Reason::Closed(close) => self::close(close),
            Reason::Draining => "draining",
            Reason::BackoffReset => "backoff_reset",
            _ => "other",
        }
    }

    pub(super) fn evict(reason: EvictReason) -> &'static str {
        match reason {
            EvictReason::Readmitted => "readmitted",
            EvictReason::EpochChanged => "epoch_changed",
            EvictReason::Requested => "requested",
            _ => "other",
        }
    }

    pub(super) fn quarantine(cause: QuarantineCause) -> &'static str {
        match cause {
            QuarantineCause::ConnectionFailures(_) => "connection_failures",
            QuarantineCause::RequestTimeouts => "request_timeouts",
            _ => "other",
        }
    }

    pub(super) fn readmission(via: Readmission) -> &'static str {
        match via {
            Readmission::Probe => "probe",
            Readmission::GaveUp => "gave_up",
            Readmission::Application => "application",
            Readmission::Answered => "answered",
            _ => "other",
        }
    }
}

/// Spans and events through `tracing`.
///
/// Every event has target `keepwire`. The spans are `keepwire_client` (field `seed`),
/// `keepwire_node` (`node`, `addr`) and `keepwire_conn` (`conn`), nested in that order; they
/// are at the ERROR level so that whatever level an operator filters at, an event still says
/// which node and connection it is about. Nothing is formatted unless a subscriber records
/// the event: every field is passed by reference to its `Display` or `Debug`.
#[cfg(feature = "tracing")]
mod trace {
    use std::collections::HashMap;

    use keepwire_proto::{
        Action, CloseReason, ConnId, Event, Failure, NodeId, NodeState, Outcome, Pool, Reason,
    };
    use tracing::{Level, Span};

    use super::names;
    use crate::client::ClientEvent;

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
        nodes: HashMap<NodeId, NodeSpans>,
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
                nodes: HashMap::new(),
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
            let (level, message) = match (to, reason) {
                (_, Reason::Closed(CloseReason::WriteTimeout)) => (
                    Level::WARN,
                    "write timeout: the kernel did not accept a frame in time, connection closed",
                ),
                (_, Reason::Closed(CloseReason::Protocol(_))) => (
                    Level::WARN,
                    "the peer broke the protocol, connection closed",
                ),
                (_, Reason::Closed(CloseReason::AuthFailed)) => {
                    (Level::WARN, "authentication failed")
                }
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
            };
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
}

/// Counters and gauges through the `metrics` facade.
///
/// Gauges move by increments and decrements (never `set`), so several clients in one process
/// add up: `keepwire_node_pending_bytes{node="10.0.0.7:5432"}` is what the whole process has
/// pending to that server. Handles are registered when a node is added: install the recorder
/// before building the client.
#[cfg(feature = "metrics")]
mod meter {
    use std::collections::HashMap;
    use std::sync::{Arc, Once};

    use keepwire_proto::{Counters, Event, NodeId, NodeState, Pool, Reason};
    use metrics::{Counter, Gauge, SharedString, Unit};

    use super::names;

    /// Every [`Counters`] field as `keepwire_<field>_total`, with its description.
    macro_rules! pool_counters {
        ($($field:ident: $doc:literal,)*) => {
            /// The registered pool-wide counters.
            #[derive(Debug)]
            struct PoolCounters {
                $($field: Counter,)*
            }

            impl PoolCounters {
                fn register() -> Self {
                    Self {
                        $($field: metrics::counter!(concat!("keepwire_", stringify!($field), "_total")),)*
                    }
                }

                /// Adds what `now` has on `last`.
                fn advance(&self, last: &Counters, now: &Counters) {
                    $(if now.$field > last.$field {
                        self.$field.increment(now.$field - last.$field);
                    })*
                }
            }

            fn describe_pool_counters() {
                $(metrics::describe_counter!(
                    concat!("keepwire_", stringify!($field), "_total"),
                    Unit::Count,
                    $doc
                );)*
            }
        };
    }

    pool_counters! {
        write_timeouts: "Connections closed because a frame missed its write deadline.",
        unwritable_rejections: "Sends rejected because the connection was above its high watermark.",
        memory_budget_rejections: "Sends rejected by the global memory budget.",
        in_flight_rejections: "Sends rejected because the node had max_in_flight requests.",
        evictions: "Connections evicted (readmission, epoch change, or on request).",
        eviction_retries: "Requests moved once to a fresh connection after an eviction.",
        setup_timeouts: "Connection attempts abandoned at the setup deadline.",
        request_timeouts: "Requests whose deadline passed in flight.",
        queued_deadline_drops: "Requests whose deadline passed while queued (dropped unsent).",
        connects: "Connection attempts started.",
        reconnects: "Connection attempts started after an earlier connection of the same node.",
        ready: "Connections that reached Ready.",
        quarantines: "Nodes quarantined.",
        readmissions: "Quarantined nodes readmitted.",
        probes: "Probes started on fresh connections.",
        idle_closes: "Connections closed for being idle.",
        protocol_violations: "Connections closed because the peer broke the protocol.",
        submitted: "Requests submitted (accepted).",
        responses: "Requests answered.",
        late_responses: "Responses to requests that had already ended (consumed and dropped).",
        transparent_retries: "Requests queued once more, nothing sent, after their connection failed or was evicted.",
        panics: "Times the pool entered panic mode (quarantine ignored).",
        heartbeats_sent: "Heartbeat pings asked for on idle connections.",
        heartbeat_timeouts: "Connections closed because a heartbeat ping got no answer in time.",
    }

    fn describe() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            describe_pool_counters();
            let counters = [
                (
                    "keepwire_node_connects_total",
                    "Connection attempts to the node (probes included).",
                ),
                (
                    "keepwire_node_closes_total",
                    "Connections to the node closed, by reason.",
                ),
                (
                    "keepwire_node_write_timeouts_total",
                    "Connections to the node closed by the write timeout.",
                ),
                (
                    "keepwire_node_evictions_total",
                    "Connections to the node evicted, by reason.",
                ),
                (
                    "keepwire_node_quarantines_total",
                    "Times the node was quarantined, by cause.",
                ),
                (
                    "keepwire_node_readmissions_total",
                    "Times the node was readmitted, by how.",
                ),
                (
                    "keepwire_node_probes_total",
                    "Probes of the node on fresh connections.",
                ),
                (
                    "keepwire_node_unwritable_total",
                    "Times the node's connection went above its high watermark.",
                ),
            ];
            for (name, doc) in counters {
                metrics::describe_counter!(name, Unit::Count, doc);
            }
            let gauges = [
                (
                    "keepwire_node_pending_bytes",
                    Unit::Bytes,
                    "Bytes queued or being written to the node (frames plus per-frame overhead).",
                ),
                (
                    "keepwire_node_in_flight",
                    Unit::Count,
                    "Requests the node holds: queued, being written or awaiting a response.",
                ),
                (
                    "keepwire_node_writable",
                    Unit::Count,
                    "1 while the node's connection accepts requests (below its watermarks).",
                ),
                (
                    "keepwire_node_quarantined",
                    Unit::Count,
                    "1 while the node is quarantined.",
                ),
                (
                    "keepwire_node_state",
                    Unit::Count,
                    "1 for the node's current connection state, 0 for the others.",
                ),
                ("keepwire_nodes", Unit::Count, "Nodes per connection state."),
                (
                    "keepwire_pending_bytes",
                    Unit::Bytes,
                    "Bytes pending across all nodes.",
                ),
                (
                    "keepwire_panic_mode",
                    Unit::Count,
                    "1 while the pool is in panic mode.",
                ),
            ];
            for (name, unit, doc) in gauges {
                metrics::describe_gauge!(name, unit, doc);
            }
        });
    }

    /// A gauge this client moves by deltas, remembering its own contribution.
    #[derive(Debug)]
    struct Share {
        gauge: Gauge,
        mine: f64,
    }

    impl Share {
        fn new(gauge: Gauge) -> Self {
            Self { gauge, mine: 0.0 }
        }

        fn set(&mut self, value: f64) {
            if value > self.mine {
                self.gauge.increment(value - self.mine);
            } else if value < self.mine {
                self.gauge.decrement(self.mine - value);
            }
            self.mine = value;
        }
    }

    #[derive(Debug)]
    struct NodeMeter {
        label: SharedString,
        pending: Share,
        in_flight: Share,
        writable: Share,
        quarantined: Share,
        state: Option<(&'static str, Share)>,
    }

    impl NodeMeter {
        fn new(label: SharedString) -> Self {
            let gauge =
                |name: &'static str| Share::new(metrics::gauge!(name, "node" => label.clone()));
            Self {
                pending: gauge("keepwire_node_pending_bytes"),
                in_flight: gauge("keepwire_node_in_flight"),
                writable: gauge("keepwire_node_writable"),
                quarantined: gauge("keepwire_node_quarantined"),
                state: None,
                label,
            }
        }

        fn counter(&self, name: &'static str) -> Counter {
            metrics::counter!(name, "node" => self.label.clone())
        }

        fn counter_by(
            &self,
            name: &'static str,
            key: &'static str,
            value: &'static str,
        ) -> Counter {
            metrics::counter!(name, "node" => self.label.clone(), key => value)
        }

        fn enter(&mut self, state: &'static str) {
            if let Some((_, share)) = &mut self.state {
                share.set(0.0);
            }
            let gauge = metrics::gauge!("keepwire_node_state", "node" => self.label.clone(), "state" => state);
            let mut share = Share::new(gauge);
            share.set(1.0);
            self.state = Some((state, share));
        }

        /// Takes this node's contributions back out of every gauge.
        fn retire(&mut self) {
            for share in [
                &mut self.pending,
                &mut self.in_flight,
                &mut self.writable,
                &mut self.quarantined,
            ] {
                share.set(0.0);
            }
            if let Some((_, share)) = &mut self.state {
                share.set(0.0);
            }
        }
    }

    #[derive(Debug)]
    pub(super) struct Meter {
        pool: PoolCounters,
        last: Counters,
        nodes: HashMap<NodeId, NodeMeter>,
        touched: Vec<NodeId>,
        per_state: Vec<(&'static str, Share)>,
        pending_total: Share,
        panic: Share,
    }

    impl Meter {
        pub(super) fn new() -> Self {
            describe();
            Self {
                pool: PoolCounters::register(),
                last: Counters::default(),
                nodes: HashMap::new(),
                touched: Vec::new(),
                per_state: names::STATES
                    .iter()
                    .map(|state| {
                        (
                            *state,
                            Share::new(metrics::gauge!("keepwire_nodes", "state" => *state)),
                        )
                    })
                    .collect(),
                pending_total: Share::new(metrics::gauge!("keepwire_pending_bytes")),
                panic: Share::new(metrics::gauge!("keepwire_panic_mode")),
            }
        }

        fn count_state(&mut self, state: &'static str, delta: f64) {
            if let Some((_, share)) = self.per_state.iter_mut().find(|(s, _)| *s == state) {
                let value = share.mine + delta;
                share.set(value);
            }
        }

        pub(super) fn node_added(&mut self, pool: &Pool, node: NodeId) {
            let label: Arc<str> = pool
                .node_endpoint(node)
                .map_or_else(|| "unknown".into(), |endpoint| endpoint.to_string().into());
            let mut meter = NodeMeter::new(SharedString::from(label));
            let state = names::state(pool.node_state(node).unwrap_or(NodeState::Closed));
            meter.enter(state);
            self.count_state(state, 1.0);
            self.nodes.insert(node, meter);
            self.touched(node);
        }

        pub(super) fn node_removed(&mut self, node: NodeId) {
            if let Some(mut meter) = self.nodes.remove(&node) {
                if let Some((state, _)) = meter.state {
                    self.count_state(state, -1.0);
                }
                meter.retire();
            }
        }

        pub(super) fn touched(&mut self, node: NodeId) {
            if self.touched.last() != Some(&node) {
                self.touched.push(node);
            }
        }

        pub(super) fn event(&mut self, event: &Event) {
            match *event {
                Event::StateChanged {
                    node, to, reason, ..
                } => {
                    self.touched(node);
                    let to_name = names::state(to);
                    let Some(meter) = self.nodes.get_mut(&node) else {
                        return;
                    };
                    let from_name = meter.state.as_ref().map(|(s, _)| *s);
                    meter.enter(to_name);
                    match reason {
                        Reason::Closed(close) => {
                            meter
                                .counter_by(
                                    "keepwire_node_closes_total",
                                    "reason",
                                    names::close(close),
                                )
                                .increment(1);
                            if close == keepwire_proto::CloseReason::WriteTimeout {
                                meter
                                    .counter("keepwire_node_write_timeouts_total")
                                    .increment(1);
                            }
                        }
                        Reason::Probe => meter.counter("keepwire_node_probes_total").increment(1),
                        _ => {}
                    }
                    if to == NodeState::Connecting {
                        meter.counter("keepwire_node_connects_total").increment(1);
                    }
                    if let Some(from_name) = from_name {
                        self.count_state(from_name, -1.0);
                    }
                    self.count_state(to_name, 1.0);
                }
                Event::Writability { node, writable, .. } => {
                    self.touched(node);
                    if let (false, Some(meter)) = (writable, self.nodes.get(&node)) {
                        meter.counter("keepwire_node_unwritable_total").increment(1);
                    }
                }
                Event::Evicted { conn, reason } => {
                    if let Some(meter) = self.nodes.get(&conn.node()) {
                        meter
                            .counter_by(
                                "keepwire_node_evictions_total",
                                "reason",
                                names::evict(reason),
                            )
                            .increment(1);
                    }
                }
                Event::Quarantined { node, cause, .. } => {
                    if let Some(meter) = self.nodes.get_mut(&node) {
                        meter
                            .counter_by(
                                "keepwire_node_quarantines_total",
                                "cause",
                                names::quarantine(cause),
                            )
                            .increment(1);
                        meter.quarantined.set(1.0);
                    }
                }
                Event::Readmitted { node, via, .. } => {
                    if let Some(meter) = self.nodes.get_mut(&node) {
                        meter
                            .counter_by(
                                "keepwire_node_readmissions_total",
                                "via",
                                names::readmission(via),
                            )
                            .increment(1);
                        meter.quarantined.set(0.0);
                    }
                }
                Event::PanicMode { entered, .. } => {
                    self.panic.set(if entered { 1.0 } else { 0.0 });
                }
                Event::RequestDone { node, .. } => self.touched(node),
                _ => {}
            }
        }

        pub(super) fn flush(&mut self, pool: &Pool) {
            let counters = pool.counters();
            if counters != self.last {
                self.pool.advance(&self.last, &counters);
                self.last = counters;
            }
            for node in self.touched.drain(..) {
                let Some(meter) = self.nodes.get_mut(&node) else {
                    continue;
                };
                meter
                    .pending
                    .set(pool.pending_bytes(node).unwrap_or(0) as f64);
                meter
                    .in_flight
                    .set(pool.in_flight(node).unwrap_or(0) as f64);
                let writable = pool.is_writable(node).unwrap_or(false);
                meter.writable.set(if writable { 1.0 } else { 0.0 });
            }
            self.pending_total.set(pool.total_pending_bytes() as f64);
        }

        pub(super) fn finish(&mut self, pool: &Pool) {
            self.flush(pool);
            for (_, mut meter) in self.nodes.drain() {
                meter.retire();
            }
            for (_, share) in &mut self.per_state {
                share.set(0.0);
            }
            self.pending_total.set(0.0);
            self.panic.set(0.0);
        }
    }
}
