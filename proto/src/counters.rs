//! Plain counters, readable as a snapshot with [`Pool::counters`](crate::Pool::counters).

/// How often each protective mechanism acted since the pool was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Connections closed because a frame missed its write deadline.
    pub write_timeouts: u64,
    /// Submits rejected because the connection was above its high watermark.
    pub unwritable_rejections: u64,
    /// Submits rejected by the global memory budget.
    pub memory_budget_rejections: u64,
    /// Submits rejected because the node had `max_in_flight` requests.
    pub in_flight_rejections: u64,
    /// Connections evicted (readmission, epoch change, or on request).
    pub evictions: u64,
    /// Requests moved once to a fresh connection after an eviction.
    pub eviction_retries: u64,
    /// Connection attempts abandoned at the setup deadline.
    pub setup_timeouts: u64,
    /// Requests whose deadline passed in flight.
    pub request_timeouts: u64,
    /// Requests whose deadline passed while queued; their frames were dropped unsent.
    pub queued_deadline_drops: u64,
    /// Connection attempts started.
    pub connects: u64,
    /// Connection attempts started after an earlier connection of the same node.
    pub reconnects: u64,
    /// Connections that reached `Ready`.
    pub ready: u64,
    /// Nodes quarantined.
    pub quarantines: u64,
    /// Quarantined nodes readmitted.
    pub readmissions: u64,
    /// Probes started on fresh connections.
    pub probes: u64,
    /// Connections closed for being idle.
    pub idle_closes: u64,
    /// Connections closed because the peer broke the protocol.
    pub protocol_violations: u64,
    /// Requests submitted (accepted).
    pub submitted: u64,
    /// Requests answered.
    pub responses: u64,
    /// Responses to requests that had already ended (deadline, cancel): consumed, dropped.
    pub late_responses: u64,
    /// Requests queued once more, with not one byte sent, after their connection failed or
    /// was evicted ([`Config::retry_unsent`](crate::Config::retry_unsent)).
    pub transparent_retries: u64,
    /// Times the pool entered panic mode (quarantine ignored).
    pub panics: u64,
    /// Heartbeats started on idle connections (an
    /// [`Action::Heartbeat`](crate::Action::Heartbeat) emitted).
    pub heartbeats_sent: u64,
    /// Connections closed because a heartbeat missed its deadline.
    pub heartbeat_timeouts: u64,
}
