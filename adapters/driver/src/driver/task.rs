//! Who runs the driver's rounds: its task, or a caller in place.
//!
//! The driver lives behind a lock that is only ever tried, never waited on. Its task polls it
//! as it always did. A caller that queued a send while the task was not woken and no other
//! caller waited takes the lock and runs the round itself, in its own poll
//! ([`Shared::deliver`], when the runtime allows it: [`Runtime::drive_here`]): the request is
//! written without a task switch, and read right after the write, so the answer of a peer on
//! the same machine is often read in that same poll and the send is over before it ever
//! waits. A send that finds the task woken (it is about to run), other callers waiting (the
//! task writes their sends in batches) or the lock held only wakes the task, as before.
//!
//! Nothing is lost when the task and a caller meet at the lock. A caller that finds it held
//! wakes the task, which polls again after the holder. The task that finds it held (a caller
//! runs a round) leaves a mark and tries once more; the caller, once it let go, reads the mark
//! and wakes the task. A fence on each side, between its write and its read, makes sure one of
//! the two sees the other: the task the lock let go, or the caller the mark.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::task::{Context, Poll};

use super::Driver;
use super::wake::Wakeups;
use crate::runtime::Runtime;

/// What the driver's task and the client handles share: the driver itself (`None` once it
/// stopped), behind a lock that is only tried.
#[derive(Debug)]
pub(crate) struct Shared {
    driver: Mutex<Option<Driver>>,
    /// A poll of the task found the lock held: the holder wakes the task when it lets go.
    missed: AtomicBool,
    /// No caller was waiting when the driver last returned: a send may run the round in
    /// place. With callers waiting, their sends go to the task, which writes them in batches.
    idle: AtomicBool,
    wakeups: Arc<Wakeups>,
    runtime: Arc<dyn Runtime>,
    /// The runtime lets callers run rounds ([`Runtime::drive_here`], asked once).
    callers_may_run: bool,
}

/// The future spawned on the runtime: polls the driver unless a caller holds it.
#[derive(Debug)]
pub(crate) struct DriverTask {
    shared: Arc<Shared>,
}

impl Shared {
    /// Shares `driver` between its task (returned) and the client handles.
    pub(crate) fn new(driver: Driver) -> (Arc<Self>, DriverTask) {
        // Asked with nothing to run: a runtime that lets callers run rounds runs it.
        let callers_may_run = driver.runtime.drive_here(&mut || ());
        let shared = Arc::new(Self {
            callers_may_run,
            wakeups: Arc::clone(&driver.wakeups),
            runtime: Arc::clone(&driver.runtime),
            driver: Mutex::new(Some(driver)),
            missed: AtomicBool::new(false),
            idle: AtomicBool::new(false),
        });
        let task = DriverTask {
            shared: Arc::clone(&shared),
        };
        (shared, task)
    }

    /// After a command was queued without a wake: marks the inbox and runs a round here if
    /// nothing else will soon, else wakes the task (unless the inbox was marked already: then
    /// a round that takes the mark is coming).
    #[inline]
    pub(crate) fn deliver(&self) {
        if self.wakeups.claim_inbox() && !self.run_here() {
            self.wakeups.wake_task();
        }
    }

    /// Runs the driver's rounds in the caller's poll, as its task would (with the task's
    /// waker, so that every source it polls wakes the task): only when the task is not woken
    /// already, has been polled once, and nobody holds the driver. Whether it ran.
    fn run_here(&self) -> bool {
        if !self.callers_may_run || self.wakeups.scheduled() || !self.idle.load(Ordering::Relaxed) {
            return false;
        }
        let Some(waker) = self.wakeups.task_waker() else {
            return false;
        };
        let Ok(mut guard) = self.driver.try_lock() else {
            return false;
        };
        let Some(driver) = guard.as_mut() else {
            return false;
        };
        if driver.waiting.len() > 0 {
            return false;
        }
        let mut done = false;
        let ran = self.runtime.drive_here(&mut || {
            let cx = &mut Context::from_waker(waker);
            driver.in_place = true;
            done = driver.poll_rounds(cx).is_ready();
            driver.in_place = false;
        });
        if done {
            *guard = None;
        } else {
            self.publish_idle(driver);
        }
        drop(guard);
        // After letting go, before reading the mark: see the module's doc.
        fence(Ordering::SeqCst);
        let missed =
            self.missed.load(Ordering::Relaxed) && self.missed.swap(false, Ordering::Acquire);
        if done || missed {
            waker.wake_by_ref();
        }
        ran
    }

    /// Tells sends whether the driver has callers waiting (stored only on a change).
    #[inline]
    fn publish_idle(&self, driver: &Driver) {
        let idle = driver.waiting.len() == 0;
        if self.idle.load(Ordering::Relaxed) != idle {
            self.idle.store(idle, Ordering::Relaxed);
        }
    }

    /// The lock, for the task: `None` if a caller holds it (the mark is left for it).
    fn lock_for_task(&self) -> Option<MutexGuard<'_, Option<Driver>>> {
        for _ in 0..2 {
            match self.driver.try_lock() {
                Ok(guard) => return Some(guard),
                // A caller's round panicked in the driver: its state cannot be trusted. The
                // task ends it (below), which answers every caller.
                Err(TryLockError::Poisoned(poisoned)) => {
                    let mut guard = poisoned.into_inner();
                    guard.take();
                    return Some(guard);
                }
                // After the mark, and a fence: a holder that let go before reading the mark is
                // found gone by the second try (the module's doc).
                Err(TryLockError::WouldBlock) => {
                    self.missed.store(true, Ordering::Relaxed);
                    fence(Ordering::SeqCst);
                }
            }
        }
        None
    }
}

impl Future for DriverTask {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let shared = &*self.shared;
        shared.wakeups.register_task(cx.waker());
        let Some(mut guard) = shared.lock_for_task() else {
            return Poll::Pending;
        };
        let Some(driver) = guard.as_mut() else {
            return Poll::Ready(());
        };
        if driver.poll_rounds(cx).is_ready() {
            *guard = None;
            return Poll::Ready(());
        }
        shared.publish_idle(driver);
        Poll::Pending
    }
}

impl Drop for DriverTask {
    /// The runtime dropped the task (it is shutting down): the driver ends with it, so that no
    /// caller waits (a caller running a round in place lets go of it first).
    fn drop(&mut self) {
        let mut guard = self
            .shared
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        guard.take();
    }
}
