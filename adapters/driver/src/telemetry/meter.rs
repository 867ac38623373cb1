//! Counters and gauges through the `metrics` facade.
//!
//! Gauges move by increments and decrements (never `set`), so several clients in one process
//! add up: `keepwire_node_pending_bytes{node="10.0.0.7:5432"}` is what the whole process has
//! pending to that server. Handles are registered when a node is added: install the recorder
//! before building the client.

use std::sync::{Arc, Once};

use keepwire_proto::{Counters, Event, NodeId, NodeState, Pool, Reason};
use metrics::{Counter, Gauge, SharedString, Unit};

use super::names;
use crate::sync::IdMap;

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

            /// Adds what `now` has on `last`, and brings `last` up to `now` (only the fields
            /// that moved are written).
            fn advance(&self, last: &mut Counters, now: &Counters) {
                $(if now.$field > last.$field {
                    self.$field.increment(now.$field - last.$field);
                    last.$field = now.$field;
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
        let gauge = |name: &'static str| Share::new(metrics::gauge!(name, "node" => label.clone()));
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

    fn counter_by(&self, name: &'static str, key: &'static str, value: &'static str) -> Counter {
        metrics::counter!(name, "node" => self.label.clone(), key => value)
    }

    fn enter(&mut self, state: &'static str) {
        if let Some((_, share)) = &mut self.state {
            share.set(0.0);
        }
        let gauge =
            metrics::gauge!("keepwire_node_state", "node" => self.label.clone(), "state" => state);
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
    nodes: IdMap<NodeId, NodeMeter>,
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
            nodes: IdMap::default(),
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

    #[inline]
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
                            .counter_by("keepwire_node_closes_total", "reason", names::close(close))
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
            _ => {}
        }
    }

    pub(super) fn flush(&mut self, pool: &Pool) {
        self.pool.advance(&mut self.last, &pool.counters());
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
