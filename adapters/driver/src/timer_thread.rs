//! [`ThreadTimer`]: a [`Timer`] kept by one process-wide thread that sleeps until the
//! earliest deadline, so that the runtime's own event loop parks without a timeout.
//!
//! A runtime's timer wheel makes every park of its event loop a wait with a timeout (tokio's
//! `epoll_wait(…, timeout)`): the kernel arms a high-resolution timer and cancels it again at
//! each wake-up. Where that timer is the earliest one of an idle vCPU, arming and cancelling
//! it reprograms the timer device, which in a VM whose idle vCPUs halt is an exit to the
//! hypervisor: BENCHMARKS.md measured 2–4 µs of CPU per request at one request in flight.
//! Here the thread's wait is armed once per deadline, not once per park: the driver's
//! deadline moves only when it fires or an earlier one comes.
//!
//! The thread starts with the first timer, is named `keepwire-timer`, and lives as long as the
//! process; it reads std's clock, so these timers do not follow a runtime's virtual clock.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::Timer;

/// A [`Timer`] on std's clock, woken by keepwire's timer thread (module docs). A runtime
/// hands it out from [`Runtime::new_timer`](crate::Runtime::new_timer) in place of its own
/// timers, as keepwire-tokio's `TokioRuntime::with_timer_thread` does.
///
/// ```
/// use std::pin::Pin;
/// use std::time::{Duration, Instant};
///
/// use keepwire_driver::{ThreadTimer, Timer};
///
/// # futures_lite::future::block_on(async {
/// let start = Instant::now();
/// let mut timer = ThreadTimer::at(start + Duration::from_millis(20));
/// std::future::poll_fn(|cx| Pin::new(&mut timer).poll_fire(cx)).await;
/// assert!(start.elapsed() >= Duration::from_millis(20));
/// # });
/// ```
pub struct ThreadTimer {
    deadline: Instant,
    /// This timer's number, which makes its key in the thread's table unique.
    id: u64,
    /// The deadline it is registered under in the thread's table, with a waker to wake.
    registered: Option<Instant>,
}

impl ThreadTimer {
    /// A timer that fires at `deadline`.
    pub fn at(deadline: Instant) -> Self {
        Self {
            deadline,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            registered: None,
        }
    }

    /// Takes this timer out of the thread's table, if it is in it.
    fn unregister(&mut self) {
        if let Some(at) = self.registered.take() {
            Table::shared().lock().due.remove(&(at, self.id));
        }
    }
}

impl Timer for ThreadTimer {
    fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
        if deadline != self.deadline {
            // A later deadline must not be woken at the old one, an earlier one must be: the
            // next poll registers the new one.
            self.unregister();
            self.deadline = deadline;
        }
    }

    fn poll_fire(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            self.unregister();
            return Poll::Ready(());
        }
        let key = (self.deadline, self.id);
        let table = Table::shared();
        let mut state = table.lock();
        let earliest = state.due.keys().next().is_none_or(|first| key < *first);
        match state.due.get_mut(&key) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                state.due.insert(key, cx.waker().clone());
            }
        }
        drop(state);
        self.registered = Some(self.deadline);
        if earliest {
            table.changed.notify_one(); // the thread sleeps until a later deadline
        }
        Poll::Pending
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl fmt::Debug for ThreadTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadTimer")
            .field("deadline", &self.deadline)
            .field("registered", &self.registered.is_some())
            .finish()
    }
}

/// The timers waiting on the thread, and the condition variable it sleeps on.
struct Table {
    state: Mutex<State>,
    /// Notified when a timer earlier than every other is registered.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// The waiting timers by deadline (then number), each with the waker its last poll left.
    due: BTreeMap<(Instant, u64), Waker>,
}

/// The next timer's number.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Table {
    /// The process's table, its thread started on first use.
    fn shared() -> &'static Table {
        static TABLE: OnceLock<Table> = OnceLock::new();
        TABLE.get_or_init(|| {
            std::thread::Builder::new()
                .name("keepwire-timer".into())
                .spawn(|| Table::shared().run())
                .expect("keepwire's timer thread could not start");
            Table {
                state: Mutex::default(),
                changed: Condvar::new(),
            }
        })
    }

    /// The state, also after a panic elsewhere held its lock (every change to it is one
    /// insert or remove, so it is never left half-made).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread: wakes every timer whose deadline has passed, then sleeps until the next
    /// one or until an earlier one is registered.
    fn run(&self) {
        let mut due = Vec::new();
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            while let Some(entry) = state.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            if !due.is_empty() {
                drop(state);
                for waker in due.drain(..) {
                    // A waker that panics must not stop every other timer of the process.
                    let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
                }
                state = self.lock();
                continue;
            }
            state = match state.due.keys().next() {
                Some(&(at, _)) => {
                    self.changed
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, mpsc};
    use std::task::Wake;
    use std::time::Duration;

    use super::*;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counted() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    fn poll(timer: &mut ThreadTimer, waker: &Waker) -> Poll<()> {
        Pin::new(timer).poll_fire(&mut Context::from_waker(waker))
    }

    /// Whether `timer` is in the thread's table.
    fn waiting(timer: &ThreadTimer) -> bool {
        let key = (timer.deadline, timer.id);
        Table::shared().lock().due.contains_key(&key)
    }

    /// A waker that sends on a channel.
    struct Send(Mutex<mpsc::Sender<()>>);

    impl Wake for Send {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().unwrap().send(());
        }
    }

    /// Polls `timer` until it fires, blocking the test's thread; fails if a wake-up it waits
    /// for does not come within 10 s.
    fn fire(timer: &mut ThreadTimer) {
        let (tx, rx) = mpsc::channel();
        let waker = Waker::from(Arc::new(Send(Mutex::new(tx))));
        while poll(timer, &waker).is_pending() {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("the timer thread woke it within 10 s");
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn fires_at_its_deadline_and_not_before() {
        let start = Instant::now();
        let mut timer = ThreadTimer::at(start + ms(30));
        let (count, waker) = counted();
        assert_eq!(poll(&mut timer, &waker), Poll::Pending);
        assert!(waiting(&timer));
        fire(&mut timer);
        assert!(start.elapsed() >= ms(30));
        assert!(!waiting(&timer), "a fired timer leaves the table");
        // The first poll's waker was replaced by the blocking poll's, and never woken.
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_passed_deadline_is_ready_without_the_thread() {
        let mut timer = ThreadTimer::at(Instant::now());
        let (count, waker) = counted();
        assert_eq!(poll(&mut timer, &waker), Poll::Ready(()));
        assert!(!waiting(&timer));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        // Stays ready until it is reset.
        assert_eq!(poll(&mut timer, &waker), Poll::Ready(()));
    }

    #[test]
    fn an_earlier_deadline_wakes_the_sleeping_thread() {
        // The thread sleeps until the later timer's deadline, an hour away; the earlier one,
        // registered after, must still fire on time.
        let start = Instant::now();
        let (_, waker) = counted();
        let mut later = ThreadTimer::at(start + Duration::from_secs(3_600));
        assert_eq!(poll(&mut later, &waker), Poll::Pending);
        std::thread::sleep(ms(5)); // the thread is asleep until the later deadline
        let mut earlier = ThreadTimer::at(start + ms(30));
        fire(&mut earlier);
        assert!(start.elapsed() >= ms(30));
        assert!(waiting(&later), "the later timer still waits");
    }

    #[test]
    fn reset_moves_the_deadline_both_ways() {
        let (count, waker) = counted();
        let start = Instant::now();
        let mut timer = ThreadTimer::at(start + ms(20));
        assert_eq!(poll(&mut timer, &waker), Poll::Pending);
        // Later: not woken at the old deadline.
        Pin::new(&mut timer).reset(start + Duration::from_secs(3_600));
        assert!(!waiting(&timer), "reset takes the old deadline out");
        assert_eq!(poll(&mut timer, &waker), Poll::Pending);
        std::thread::sleep(ms(60));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "woken at the old deadline"
        );
        assert_eq!(poll(&mut timer, &waker), Poll::Pending);
        // Earlier again: fires there.
        let earlier = Instant::now() + ms(20);
        Pin::new(&mut timer).reset(earlier);
        fire(&mut timer);
        assert!(Instant::now() >= earlier);
        // Reset after firing, to a deadline ahead: pending again.
        Pin::new(&mut timer).reset(Instant::now() + Duration::from_secs(3_600));
        assert_eq!(poll(&mut timer, &waker), Poll::Pending);
    }

    #[test]
    fn a_dropped_timer_leaves_the_table_and_wakes_no_one() {
        let (count, waker) = counted();
        let mut timer = ThreadTimer::at(Instant::now() + ms(20));
        assert_eq!(poll(&mut timer, &waker), Poll::Pending);
        let key = (timer.deadline, timer.id);
        drop(timer);
        assert!(!Table::shared().lock().due.contains_key(&key));
        std::thread::sleep(ms(60));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn many_timers_fire_each_once_at_its_own_deadline() {
        let start = Instant::now();
        let mut timers: Vec<(ThreadTimer, Arc<Count>, Waker)> = (0..32u64)
            .map(|i| {
                let (count, waker) = counted();
                // Two timers at each deadline: their keys differ by number only.
                (ThreadTimer::at(start + ms(10 + i / 2 * 3)), count, waker)
            })
            .collect();
        for (timer, _, waker) in &mut timers {
            assert_eq!(poll(timer, waker), Poll::Pending);
        }
        for (timer, count, _) in &mut timers {
            // Woken at its deadline (the table holds every pending one): no more than once.
            let give_up = Instant::now() + Duration::from_secs(10);
            while count.0.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < give_up, "not woken within 10 s");
                std::thread::sleep(ms(1));
            }
            assert!(Instant::now() >= timer.deadline);
        }
        std::thread::sleep(ms(20));
        for (timer, count, waker) in &mut timers {
            assert_eq!(count.0.load(Ordering::SeqCst), 1);
            assert_eq!(poll(timer, waker), Poll::Ready(()));
        }
    }

    #[test]
    fn a_panicking_waker_does_not_stop_the_thread() {
        struct Panics;
        impl Wake for Panics {
            fn wake(self: Arc<Self>) {
                panic!("a waker that panics");
            }
        }
        let start = Instant::now();
        let mut bad = ThreadTimer::at(start + ms(10));
        assert_eq!(
            poll(&mut bad, &Waker::from(Arc::new(Panics))),
            Poll::Pending
        );
        let mut good = ThreadTimer::at(start + ms(40));
        fire(&mut good);
        assert!(start.elapsed() >= ms(40));
    }
}
