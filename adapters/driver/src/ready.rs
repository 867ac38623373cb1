//! Readiness, as services read it: for every target a live [`ClientService`] sends to, the
//! back-pressure the driver last saw, and a notification when it changes.
//!
//! The pool lives in the driver task, but `poll_ready` must answer at once; so the driver
//! publishes a snapshot here after every poll (only while some service is alive, and only for
//! the targets services watch), and wakes the waiting services when it changes. A service
//! checks the snapshot, registers for the notification, and checks again, so a change between
//! the two is never missed (tokio's `Notify` keeps the waiters).
//!
//! [`ClientService`]: crate::ClientService

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keepwire_proto::Target;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::service::Backpressure;

/// What a service may expect of a send to its target right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TargetState {
    /// A send would be accepted (as far as the driver could tell after its last poll).
    Ready,
    /// A send would be refused at once.
    Blocked(Backpressure),
    /// The target node was removed: every send to it fails.
    Gone,
}

/// The readiness snapshot the driver and its services share.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    /// Live services; the driver does nothing for readiness while there are none.
    services: AtomicUsize,
    watched: Mutex<Watched>,
    notify: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Watched {
    targets: Vec<Entry>,
    /// The driver stopped: every service is done.
    stopped: bool,
}

#[derive(Debug)]
struct Entry {
    target: Target,
    services: usize,
    state: TargetState,
}

/// Locks `mutex`, recovering the data if a panicking thread poisoned it: every critical
/// section here leaves the data consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Readiness {
    /// Whether any service is alive.
    pub(crate) fn watched(&self) -> bool {
        self.services.load(Ordering::Acquire) > 0
    }

    /// A service of `target` was made (its state is taken as ready until the driver says).
    pub(crate) fn add_service(&self, target: Target) {
        let mut watched = lock(&self.watched);
        self.services.fetch_add(1, Ordering::AcqRel);
        match watched.targets.iter_mut().find(|e| e.target == target) {
            Some(entry) => entry.services += 1,
            None => watched.targets.push(Entry {
                target,
                services: 1,
                state: TargetState::Ready,
            }),
        }
    }

    /// The driver computed `target`'s state for a new service (nothing if that service is
    /// already gone).
    pub(crate) fn set(&self, target: Target, state: TargetState) {
        let mut watched = lock(&self.watched);
        if let Some(entry) = watched.targets.iter_mut().find(|e| e.target == target) {
            entry.state = state;
        }
    }

    /// A service was dropped.
    pub(crate) fn remove_service(&self, target: Target) {
        let mut watched = lock(&self.watched);
        self.services.fetch_sub(1, Ordering::AcqRel);
        if let Some(at) = watched.targets.iter().position(|e| e.target == target) {
            watched.targets[at].services -= 1;
            if watched.targets[at].services == 0 {
                watched.targets.swap_remove(at);
            }
        }
    }

    /// The driver recomputes every watched target's state; the services waiting are woken if
    /// any changed.
    pub(crate) fn update(&self, mut state_of: impl FnMut(Target) -> TargetState) {
        let changed = {
            let mut watched = lock(&self.watched);
            let mut changed = false;
            for entry in &mut watched.targets {
                let state = state_of(entry.target);
                changed |= state != entry.state;
                entry.state = state;
            }
            changed
        };
        if changed {
            self.notify.notify_waiters();
        }
    }

    /// The driver stopped.
    pub(crate) fn stop(&self) {
        lock(&self.watched).stopped = true;
        self.notify.notify_waiters();
    }

    /// `target`'s state; `None` once the driver stopped.
    pub(crate) fn state(&self, target: Target) -> Option<TargetState> {
        let watched = lock(&self.watched);
        if watched.stopped {
            return None;
        }
        Some(
            watched
                .targets
                .iter()
                .find(|e| e.target == target)
                .map_or(TargetState::Ready, |e| e.state),
        )
    }

    /// A notification of the next change (register it with `enable`, then check again).
    pub(crate) fn notified(&self) -> OwnedNotified {
        Arc::clone(&self.notify).notified_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::pin::pin;

    use futures_lite::future::{block_on, poll_once};
    use keepwire_proto::{Config, Instant, Pool};

    use super::*;

    const BLOCKED: TargetState = TargetState::Blocked(Backpressure::NotWritable);

    fn a_node() -> Target {
        let now = Instant::from_secs(0);
        let mut pool = Pool::new(Config::default(), now).unwrap();
        Target::Node(pool.add_node(now, SocketAddr::from(([127, 0, 0, 1], 1))))
    }

    /// A target is watched while one of its services lives, whatever the others do; once
    /// the last is gone the driver's word about it is forgotten, and with no service left the
    /// driver does nothing for readiness.
    #[test]
    fn a_target_is_watched_until_its_last_service_is_dropped() {
        let readiness = Readiness::default();
        let node = a_node();
        assert!(!readiness.watched());
        readiness.add_service(node);
        readiness.add_service(node);
        readiness.add_service(Target::Best);
        assert!(readiness.watched());
        readiness.set(node, BLOCKED);
        assert_eq!(readiness.state(node), Some(BLOCKED));
        readiness.remove_service(node);
        assert_eq!(readiness.state(node), Some(BLOCKED), "one service left");
        readiness.remove_service(node);
        assert_eq!(readiness.state(node), Some(TargetState::Ready), "forgotten");
        readiness.set(node, BLOCKED);
        assert_eq!(
            readiness.state(node),
            Some(TargetState::Ready),
            "a word about a target nobody watches is dropped"
        );
        assert!(readiness.watched(), "Best's service");
        readiness.remove_service(Target::Best);
        assert!(!readiness.watched());
    }

    /// The waiting services are woken when a watched target's state changes, not when the
    /// driver recomputes the same states; and when the driver stops, after which no state
    /// is told.
    #[test]
    fn a_change_wakes_the_waiters_and_a_recomputation_does_not() {
        let readiness = Readiness::default();
        let node = a_node();
        readiness.add_service(node);
        let woken = |state: TargetState| {
            let mut waiting = pin!(readiness.notified());
            waiting.as_mut().enable();
            readiness.update(|_| state);
            block_on(poll_once(waiting)).is_some()
        };
        assert!(!woken(TargetState::Ready), "unchanged");
        assert!(woken(BLOCKED));
        assert_eq!(readiness.state(node), Some(BLOCKED));
        assert!(!woken(BLOCKED), "unchanged");
        assert!(woken(TargetState::Gone));
        let mut waiting = pin!(readiness.notified());
        waiting.as_mut().enable();
        readiness.stop();
        assert!(block_on(poll_once(waiting)).is_some());
        assert_eq!(readiness.state(node), None);
    }
}
