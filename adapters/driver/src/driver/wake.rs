//! Which open connections have something to read. Each one's stream is read with a waker of
//! its own, which puts the connection on a list and wakes the driver's task; a round reads
//! the connections on the list (and the ones it left part-way), not every open one. A client
//! with 17 connections, one of them busy, spent 32,200 instructions per request reading all
//! 17 on every round; a hand-written client with a reader task per connection touches only
//! the one with data, and so does the driver now (BENCHMARKS.md, "Reading only the
//! connections that woke").
//!
//! A connection is listed once until the driver takes its mark, which it does just before
//! the read that registers the waker again: a wake that comes between the two is not lost, it
//! lists the connection again and wakes the task again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Wake, Waker};

use keepwire_proto::ConnId;

/// What the connections' read wakers share with the driver: the task to wake, and the
/// connections that woke since the driver last looked.
#[derive(Debug, Default)]
pub(super) struct Wakeups {
    /// Set with every addition to `shared.woken`, so that a round with nothing listed takes
    /// no lock.
    listed: AtomicBool,
    shared: Mutex<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The driver task's waker. It changes only when the runtime moves the task (rarely, if
    /// ever): the driver compares before it stores ([`Wakeups::update_task`]).
    task: Option<Waker>,
    woken: Vec<ConnId>,
}

impl Wakeups {
    /// Stores `current` (the waker of the poll under way) unless `last` (the driver's copy of
    /// what is stored) would wake the same task.
    pub(super) fn update_task(&self, last: &mut Option<Waker>, current: &Waker) {
        if last.as_ref().is_some_and(|w| w.will_wake(current)) {
            return;
        }
        *last = Some(current.clone());
        self.lock().task = Some(current.clone());
    }

    /// Appends the connections listed since the last call to `into` (kept empty otherwise).
    pub(super) fn take(&self, into: &mut Vec<ConnId>) {
        if self.listed.swap(false, Ordering::Acquire) {
            into.append(&mut self.lock().woken);
        }
    }

    fn list(&self, conn: ConnId, wake_task: bool) {
        let mut shared = self.lock();
        shared.woken.push(conn);
        self.listed.store(true, Ordering::Release);
        if let (true, Some(task)) = (wake_task, shared.task.as_ref()) {
            task.wake_by_ref();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Nothing panics with the lock held; a poisoned one still holds valid data.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One open connection's read waker and its mark.
#[derive(Debug)]
pub(super) struct ReadWake {
    state: Arc<ReadWakeState>,
    waker: Waker,
}

#[derive(Debug)]
struct ReadWakeState {
    wakeups: Arc<Wakeups>,
    conn: ConnId,
    /// Listed and not yet taken by the driver.
    marked: AtomicBool,
}

impl Wake for ReadWakeState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.marked.swap(true, Ordering::AcqRel) {
            self.wakeups.list(self.conn, true);
        }
    }
}

impl ReadWake {
    /// A new connection's, listed already (without waking the task, which is running: it
    /// made the connection), so the round reads it: its stream may hold bytes the handshake
    /// read past, and its first read registers this waker.
    pub(super) fn new(wakeups: &Arc<Wakeups>, conn: ConnId) -> Self {
        let state = Arc::new(ReadWakeState {
            wakeups: Arc::clone(wakeups),
            conn,
            marked: AtomicBool::new(true),
        });
        wakeups.list(conn, false);
        let waker = Waker::from(Arc::clone(&state));
        Self { state, waker }
    }

    /// Whether the connection woke since the last call, clearing the mark (a connection
    /// listed twice, or listed and closed, is read once).
    pub(super) fn take(&self) -> bool {
        self.state.marked.swap(false, Ordering::AcqRel)
    }

    /// The waker to read the connection's stream with.
    pub(super) fn waker(&self) -> &Waker {
        &self.waker
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use keepwire_proto::{Config, Instant, Pool};

    use super::*;

    #[derive(Default)]
    struct CountWakes(AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl CountWakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Two connection ids, from a pool (nothing else makes them).
    fn conns() -> (ConnId, ConnId) {
        let now = Instant::from_secs(1);
        let mut pool = Pool::new(Config::default(), now).unwrap();
        let mut conn = |port: u16| {
            let node = pool.add_node(now, std::net::SocketAddr::from(([127, 0, 0, 1], port)));
            pool.connect(now, node).unwrap();
            pool.current_conn(node).unwrap()
        };
        (conn(1), conn(2))
    }

    fn taken(wakeups: &Wakeups) -> Vec<ConnId> {
        let mut list = Vec::new();
        wakeups.take(&mut list);
        list
    }

    #[test]
    fn a_wake_lists_its_connection_once_and_wakes_the_task() {
        let wakeups = Arc::new(Wakeups::default());
        let task = Arc::new(CountWakes::default());
        let mut last = None;
        wakeups.update_task(&mut last, &Waker::from(Arc::clone(&task)));
        let (a_id, b_id) = conns();
        let (a, b) = (ReadWake::new(&wakeups, a_id), ReadWake::new(&wakeups, b_id));
        assert_eq!(
            taken(&wakeups),
            [a_id, b_id],
            "a new connection is read at once"
        );
        assert_eq!(
            task.count(),
            0,
            "the task made them: it is not woken for it"
        );
        assert!(a.take() && b.take());
        assert!(taken(&wakeups).is_empty() && !a.take() && !b.take());

        a.waker().wake_by_ref();
        let kept = a.waker().clone(); // a clone the stream kept, woken by value
        kept.wake();
        assert_eq!(
            task.count(),
            1,
            "woken once until the driver takes the mark"
        );
        assert_eq!(taken(&wakeups), [a_id], "only the woken connection, once");
        assert!(a.take() && !b.take());

        a.waker().wake_by_ref();
        assert_eq!(task.count(), 2, "once taken, a wake lists it again");
        assert_eq!(taken(&wakeups), [a_id]);
    }

    #[test]
    fn the_task_waker_follows_the_task() {
        let wakeups = Arc::new(Wakeups::default());
        let (conn, _) = conns();
        let read = ReadWake::new(&wakeups, conn);
        assert!(read.take());
        read.waker().wake_by_ref(); // no task yet: listed, nothing else
        assert_eq!(taken(&wakeups), [conn, conn]);
        assert!(read.take());

        let (first, second) = (
            Arc::new(CountWakes::default()),
            Arc::new(CountWakes::default()),
        );
        let mut last = None;
        wakeups.update_task(&mut last, &Waker::from(Arc::clone(&first)));
        wakeups.update_task(&mut last, &Waker::from(Arc::clone(&second)));
        read.waker().wake_by_ref();
        assert_eq!((first.count(), second.count()), (0, 1));
    }
}
