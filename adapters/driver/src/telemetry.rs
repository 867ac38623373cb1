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

    /// Whether a request's end is told as the whole event ([`event`](Self::event)): only
    /// when a subscriber wants `keepwire`'s TRACE events. Otherwise
    /// [`request_done`](Self::request_done) says it with the node alone, and the driver never
    /// takes the event's address (which costs a copy of it per request).
    #[inline]
    pub(crate) fn traces_requests(&self) -> bool {
        #[cfg(feature = "tracing")]
        return tracing::enabled!(target: "keepwire", tracing::Level::TRACE);
        #[cfg(not(feature = "tracing"))]
        false
    }

    /// A request on `node` ended (its [`Event::RequestDone`]): all of it but the trace, which
    /// [`event`](Self::event) adds when [`traces_requests`](Self::traces_requests).
    #[inline]
    pub(crate) fn request_done(&mut self, node: NodeId) {
        let _ = node;
        #[cfg(feature = "metrics")]
        self.meter.touched(node);
    }

    /// The pool announced `event`.
    #[inline]
    pub(crate) fn event(&mut self, event: &Event) {
        let _ = event;
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        match event {
            // One per request: its trace event only when a subscriber wants TRACE from
            // keepwire, and for metrics only its node's gauges to refresh.
            Event::RequestDone { node, .. } => {
                #[cfg(feature = "tracing")]
                if self.traces_requests() {
                    self.trace.event(event);
                }
                self.request_done(*node);
            }
            _ => {
                #[cfg(feature = "tracing")]
                self.trace.event(event);
                #[cfg(feature = "metrics")]
                self.meter.event(event);
            }
        }
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

#[cfg(feature = "tracing")]
mod trace;

#[cfg(feature = "metrics")]
mod meter;
