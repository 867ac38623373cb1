//! Timers against the config: each fires no earlier than its config allows (checked when it
//! fires) and no later than the time step that passes its instant (checked after every step).
//!
//! | timer | due (fires when the time is past it) |
//! |---|---|
//! | setup timeout | the `Action::Open` deadline: `S(m)` after the attempt, jitter drawn once |
//! | reconnect | `B(k)` after a close (at, not past: a reconnect is allowed *at* it) |
//! | write timeout | `max(enqueued, ready) + write_timeout` of the oldest frame not fully taken |
//! | request deadline | the deadline given at submit |
//! | heartbeat | `interval` after the ready connection last held a request (or became ready, or had its ping answered) |
//! | heartbeat deadline | `timeout` after the ping was asked for |
//! | idle close | `idle_timeout` after the ready connection last held a request (or became ready) |
//! | readmission after the last probe | `probe_delay(failed probes)` after it failed (at, not past) |

use core::time::Duration;

use super::Session;
use super::model::reconnect_at;
use crate::{Instant, NodeId, NodeState};

/// `(base, max, jitter)` of an exponential backoff.
pub(super) type Backoff = (Duration, Duration, f64);

/// Checks that `got` is a value of `v(step) = min(max, base · 2^step · f)`, `f` in
/// `[1 - jitter, 1 + jitter)`, and exactly `max` when `base >= max` (DESIGN, "Backoff
/// formula"); in whole nanoseconds, rounded down.
pub(super) fn check_backoff(what: &str, (base, max, jitter): Backoff, step: u32, got: Duration) {
    let (low, high) = if base >= max {
        (max.as_nanos(), max.as_nanos())
    } else {
        let doubled = if step >= 64 {
            u128::MAX
        } else {
            base.as_nanos().saturating_mul(1 << step)
        };
        let term = doubled.min(max.as_nanos());
        let low = (term as f64 * (1.0 - jitter)) as u128;
        // Strictly below `term · (1 + jitter)`, and never above `max`.
        let top = term as f64 * (1.0 + jitter);
        let below_top = if jitter == 0.0 {
            term
        } else {
            top.ceil() as u128 - 1
        };
        (low, below_top.min(max.as_nanos()))
    };
    let got_nanos = got.as_nanos();
    assert!(
        (low..=high).contains(&got_nanos),
        "{what} {got:?} at step {step}: outside [{low}, {high}] ns (base {base:?}, max {max:?}, jitter {jitter})"
    );
}

impl Session {
    /// A write timeout closed the node's connection: its oldest frame not fully taken by the
    /// kernel had waited (since it was queued, or since the connection became ready) longer
    /// than the write timeout.
    pub(super) fn check_write_timeout(&self, node: NodeId) {
        let limit = self.config.write_timeout;
        assert!(
            !limit.is_zero(),
            "{node:?}: a write timeout with none configured"
        );
        let oldest = self
            .frames
            .oldest(node)
            .expect("a write timeout with no frame pending");
        let due = self
            .write_due(node, oldest)
            .expect("a write timeout before ready");
        assert!(
            self.now > due,
            "{node:?}: write timeout at {:?}, due after {due:?}",
            self.now
        );
    }

    /// When the write timeout of a ready connection whose oldest frame was queued at `oldest`
    /// is due: it fires when the time is past it.
    fn write_due(&self, node: NodeId, oldest: Instant) -> Option<Instant> {
        let ready_at = self.model[&node].conn.and_then(|c| c.ready_at)?;
        Some(oldest.max(ready_at) + self.config.write_timeout)
    }

    /// When a ready connection that holds no request may close as idle, or be sent a ping.
    pub(super) fn idle_since(&self, node: NodeId, answered_counts: bool) -> Instant {
        let n = &self.model[&node];
        let c = n.conn.expect("a connection");
        let ready_at = c.ready_at.expect("ready");
        let answered = c
            .answered_at
            .filter(|_| answered_counts)
            .unwrap_or(ready_at);
        n.last_busy.max(ready_at).max(answered)
    }

    pub(super) fn check_idle_close(&self, node: NodeId) {
        let limit = self.config.idle_timeout;
        assert!(
            !limit.is_zero(),
            "{node:?}: an idle close with no idle timeout"
        );
        let since = self.idle_since(node, false);
        assert!(
            self.now > since + limit,
            "{node:?}: closed as idle at {:?}, last busy at {since:?}",
            self.now
        );
    }

    pub(super) fn check_heartbeat_timeout(&self, node: NodeId) {
        let timeout = self
            .config
            .heartbeat
            .expect("heartbeats configured")
            .timeout;
        let ping = self.model[&node].conn.and_then(|c| c.ping);
        let ping = ping.expect("a heartbeat timeout with no ping outstanding");
        assert!(
            ping.timed,
            "{node:?}: a heartbeat timeout after its timer stopped"
        );
        assert!(
            self.now > ping.asked_at + timeout,
            "{node:?}: heartbeat timeout at {:?}, ping asked at {:?}",
            self.now,
            ping.asked_at
        );
    }

    /// After time moved on: nothing whose instant the time passed is still waiting.
    pub(super) fn check_due(&self) {
        let now = self.now;
        if let Some(&(deadline, id)) = self.deadlines.first() {
            assert!(
                now <= deadline,
                "{id:?}: deadline {deadline:?} passed at {now:?}, still open"
            );
        }
        let c = &self.config;
        for (&node, n) in self.model.iter() {
            let late = |what: &str, due: Instant| {
                assert!(
                    now <= due,
                    "{node:?}: {what} due {due:?} has not fired at {now:?}"
                )
            };
            if let Some(q) = n.quarantine.filter(|_| !self.shut_down) {
                let readmits = c.after_last_probe == crate::AfterLastProbe::Readmit;
                if let (Some(at), true) = (q.exhausted_at, readmits) {
                    let due = at + c.probe_delay(q.probes_failed);
                    assert!(
                        now < due,
                        "{node:?}: readmission after the last probe, due {due:?}"
                    );
                }
            }
            let Some(conn) = n.conn else {
                if let Some(at) = reconnect_at(n.state) {
                    if n.want && n.quarantine.is_none() && !self.shut_down {
                        assert!(
                            now < at,
                            "{node:?}: a wanted connection due {at:?} not opened"
                        );
                    }
                }
                continue;
            };
            if n.state.is_connecting() {
                late("setup timeout", conn.setup_deadline);
                continue;
            }
            if let (Some(at), false) = (self.frames.oldest(node), c.write_timeout.is_zero()) {
                late("write timeout", self.write_due(node, at).expect("ready"));
            }
            if let (Some(ping), Some(h)) = (conn.ping.filter(|p| p.timed), c.heartbeat) {
                late("heartbeat deadline", ping.asked_at + h.timeout);
            }
            if n.state != NodeState::Ready || n.held > 0 {
                continue;
            }
            if !c.idle_timeout.is_zero() {
                late("idle close", self.idle_since(node, false) + c.idle_timeout);
            }
            if let (None, Some(h)) = (conn.ping, c.heartbeat) {
                late("heartbeat", self.idle_since(node, true) + h.interval);
            }
        }
    }
}
