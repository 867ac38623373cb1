//! The failure detector's part of a node: quarantine after consecutive failures, probes on
//! fresh connections at `probe_backoff · 2^k`, and readmission.

use super::{Node, Quarantine, Shared, Sink};
use crate::config::{AfterLastProbe, Config};
use crate::event::{CloseReason, Event, QuarantineCause, Readmission};
use crate::time::Instant;
use crate::timers::NodeTimer;

impl Node {
    /// Consecutive failures crossed the threshold: exclude the node, close its cached
    /// connection (it is never trusted for readmission), and schedule the first probe.
    pub(crate) fn quarantine(&mut self, sink: &mut Sink<'_>, cause: QuarantineCause) {
        if sink.pool.shut_down {
            return;
        }
        // In panic mode (counting this node's quarantine) a maybe-bad node beats no node: its
        // connection and queued requests stay.
        let mut census = sink.pool.census;
        census.healthy -= self.census().healthy;
        let panic = census.panics(sink.config.panic_threshold);
        self.admission.quarantine = Some(Quarantine {
            probes_failed: 0,
            exhausted: false,
        });
        sink.pool.counters.quarantines += 1;
        sink.pool.events.push_back(Event::Quarantined {
            node: self.id,
            cause,
            at: sink.now,
        });
        if !panic && (self.conn.is_some() || self.requests > 0) {
            self.close(sink, CloseReason::Quarantined, true);
        }
        self.schedule_probe(sink);
    }

    /// Arms the next probe `probe_backoff · 2^failed` from now. When every probe has failed,
    /// [`AfterLastProbe::Readmit`] waits one more such delay before readmitting (as Pinot's
    /// detector does); [`AfterLastProbe::StayExcluded`] leaves the node out.
    fn schedule_probe(&mut self, sink: &mut Sink<'_>) {
        let Some(q) = self.admission.quarantine.as_mut() else {
            return;
        };
        if q.probes_failed >= sink.config.probe_retries {
            q.exhausted = true;
            if sink.config.after_last_probe != AfterLastProbe::Readmit {
                return;
            }
        }
        let at = sink.now + sink.config.probe_delay(q.probes_failed);
        self.arm(sink, NodeTimer::Probe, at);
    }

    /// The probe timer fired: open a fresh connection, or readmit after the last probe.
    pub(super) fn probe_due(&mut self, sink: &mut Sink<'_>) {
        let Some(q) = self.admission.quarantine else {
            return;
        };
        if q.exhausted {
            if sink.config.after_last_probe == AfterLastProbe::Readmit {
                self.readmit(sink, Readmission::GaveUp);
            }
        } else if sink.pool.shut_down {
        } else if let Some(last) = self.final_failure(sink.now) {
            // A final failure's backoff holds probes off too: they would meet the same refusal.
            self.arm(sink, NodeTimer::Probe, last.until);
        } else if self.conn.is_none() {
            sink.pool.counters.probes += 1;
            self.open(sink, true);
        } else {
            // In panic mode the node may already have an ordinary connection: its requests
            // are the probe. Look again after the same delay.
            let at = sink.now + sink.config.probe_delay(q.probes_failed);
            self.arm(sink, NodeTimer::Probe, at);
        }
    }

    pub(super) fn probe_failed(&mut self, sink: &mut Sink<'_>) {
        if let Some(q) = self.admission.quarantine.as_mut() {
            q.probes_failed += 1;
        }
        self.schedule_probe(sink);
    }

    /// Lifts a quarantine (if any) and clears the consecutive-failure counts. Inlined, the
    /// usual case (no quarantine: every response asks) is one test; the rest is out of line.
    #[inline(always)]
    pub(crate) fn readmit(&mut self, sink: &mut Sink<'_>, via: Readmission) {
        if self.admission.quarantine.is_some() {
            self.lift_quarantine(sink.now, sink.config, sink.pool, via);
        }
    }

    /// The rest of [`Node::readmit`], for a quarantined node, taking the sink's parts (see
    /// [`Sink`]).
    #[cold]
    #[inline(never)]
    fn lift_quarantine(
        &mut self,
        now: Instant,
        config: &Config,
        pool: &mut Shared,
        via: Readmission,
    ) {
        let sink = &mut Sink { now, config, pool };
        self.admission.quarantine = None;
        self.failures = 0;
        self.timeouts = 0;
        self.disarm(sink, NodeTimer::Probe);
        sink.pool.counters.readmissions += 1;
        sink.pool.events.push_back(Event::Readmitted {
            node: self.id,
            via,
            at: sink.now,
        });
    }
}
