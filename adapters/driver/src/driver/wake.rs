//! Which sources woke the driver: open connections with something to read, and the command
//! inbox. Each open connection's stream is read with a waker of its own, which puts the
//! connection on a list and wakes the driver's task; a round reads the connections on the
//! list (and the ones it left part-way), not every open one. A client with 17 connections, one
//! of them busy, spent 32,200 instructions per request reading all 17 on every round; a
//! hand-written client with a reader task per connection touches only the one with data, and
//! so does the driver now (BENCHMARKS.md, "Reading only the connections that woke").
//!
//! A connection is listed once until the driver takes its mark, which it does just before
//! the read that registers the waker again: a wake that comes between the two is not lost, it
//! lists the connection again and wakes the task again.
//!
//! The command inbox is asked for commands the same way, only in a round after it woke the
//! driver (the inbox's waker is [`Wakeups`] itself): a round that a socket woke, to read an
//! answer, used to ask it too, and find nothing.
//!
//! The timer is polled with a waker of its own too ([`TimerWake`]), which marks the timer and
//! wakes the task: a round polls a timer that is armed and waiting only after that mark, not on
//! every round (a tokio `Sleep` polled for nothing was about a hundred instructions per
//! request at one in flight).
//!
//! No lock: the list is a bounded lock-free queue (`concurrent-queue`, a piece smol is built
//! on), and the task's waker is kept from the first poll and woken by reference
//! ([`TaskWaker`]), with an `AtomicWaker` behind it for an executor that changes it. A wake
//! that finds the list full sets a flag instead, and the next round looks at every open
//! connection's mark.

use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::task::{Wake, Waker};

use atomic_waker::AtomicWaker;
use concurrent_queue::ConcurrentQueue;
use keepwire_proto::ConnId;

/// Connection slots a driver has at most ([`ConnTable::span`](super::ConnTable::span)) for
/// its connections' wakes to set [`Wakeups::scan`] rather than list them. A listing (a push,
/// then the driver's pop) cost about 170 instructions per wake, one wake per request at one
/// in flight; the scan of a lone connection's slot about 50 (callgrind, BENCHMARKS.md), and
/// each further slot adds a step of the table's loop and a load of its mark.
pub(super) const SCAN_AT_MOST: usize = 8;

/// Connections the list holds before a wake sets [`Wakeups::scan`] instead: more than
/// wake in one round in all but the largest clients (each is listed once until read). About
/// 12 KiB per client.
const LISTED: usize = 512;

/// What the connections' read wakers share with the driver: the task to wake, and the
/// connections that woke since the driver last looked.
#[derive(Debug)]
pub(super) struct Wakeups {
    task: TaskWaker,
    woken: ConcurrentQueue<ConnId>,
    /// Set after every addition to `woken`, so that a round with nothing listed only loads it.
    listed: AtomicBool,
    /// The driver looks at every open connection's mark: a wake found `woken` full, or set
    /// this instead of listing (`few`).
    scan: AtomicBool,
    /// The driver has at most [`SCAN_AT_MOST`] connection slots: a wake sets `scan` rather
    /// than listing its connection. Either way the connection is read; only the cost differs.
    few: AtomicBool,
    /// The command inbox woke the driver (or a round left commands in it): the next round
    /// asks it for commands. A round that only a socket or the timer woke does not.
    inbox: AtomicBool,
    /// The timer's waker woke the driver: the next round polls the timer.
    timer: AtomicBool,
}

impl Default for Wakeups {
    fn default() -> Self {
        Self {
            task: TaskWaker::default(),
            woken: ConcurrentQueue::bounded(LISTED),
            listed: AtomicBool::new(false),
            scan: AtomicBool::new(false),
            few: AtomicBool::new(false),
            inbox: AtomicBool::new(true),
            timer: AtomicBool::new(false),
        }
    }
}

impl Wakeups {
    /// Registers the waker of the poll under way as the task's, at the start of every poll:
    /// usually it is the one kept since the first poll, and nothing is written
    /// ([`TaskWaker`]).
    #[inline]
    pub(super) fn register_task(&self, waker: &Waker) {
        self.task.register(waker);
    }

    /// Whether the task was woken since its last poll began (a hint: it may be read stale
    /// either way).
    #[inline]
    pub(super) fn scheduled(&self) -> bool {
        self.task.scheduled.load(Ordering::Relaxed)
    }

    /// The task's waker, once its first poll kept it and unless an executor switched it: what
    /// a round run in place registers with the sources it polls, so that their wakes reach
    /// the task.
    #[inline]
    pub(super) fn task_waker(&self) -> Option<&Waker> {
        self.task.kept()
    }

    /// Marks the inbox as the inbox's waker would, without waking the task: whether this
    /// marked it (else a round that takes the mark is coming already).
    #[inline]
    pub(super) fn claim_inbox(&self) -> bool {
        !self.inbox.swap(true, Ordering::AcqRel)
    }

    /// Wakes the task.
    #[inline]
    pub(super) fn wake_task(&self) {
        self.task.wake();
    }

    /// Appends the connections listed since the last call to `into`. Returns whether every
    /// open connection's mark must be looked at: the list overflowed meanwhile, or a wake set
    /// the flag instead of listing (the driver has few connections: [`set_few`](Self::set_few)).
    ///
    /// Inlined down to its two loads: about half the rounds (those a command woke, at one
    /// request in flight) find nothing listed, and the call cost more than the loads.
    #[inline]
    pub(super) fn take(&self, into: &mut Vec<ConnId>) -> bool {
        if self.listed.load(Ordering::Relaxed) {
            self.take_listed(into);
        }
        self.scan.load(Ordering::Relaxed) && self.scan.swap(false, Ordering::Acquire)
    }

    /// Tells the wakers whether the driver has few enough connection slots (at most
    /// [`SCAN_AT_MOST`]) to look at every one's mark rather than have them listed. Once per
    /// round; stores only a change.
    #[inline]
    pub(super) fn set_few(&self, few: bool) {
        if self.few.load(Ordering::Relaxed) != few {
            self.few.store(few, Ordering::Relaxed);
        }
    }

    /// [`take`](Self::take)'s pops, once something seems listed.
    fn take_listed(&self, into: &mut Vec<ConnId>) {
        if self.listed.swap(false, Ordering::Acquire) {
            // As many as are in now (a pop of an empty queue costs as much as one that
            // finds a connection); one listed after this sets the flag again.
            for _ in 0..self.woken.len() {
                if let Ok(conn) = self.woken.pop() {
                    into.push(conn);
                }
            }
        }
    }

    /// Whether the inbox is marked, clearing the mark. Taken before the inbox is asked, so a
    /// command queued after that marks it again.
    pub(super) fn take_inbox(&self) -> bool {
        self.inbox.load(Ordering::Relaxed) && self.inbox.swap(false, Ordering::Acquire)
    }

    /// Marks the inbox without a wake: the round that left commands in it has another
    /// round follow it.
    pub(super) fn mark_inbox(&self) {
        self.inbox.store(true, Ordering::Release);
    }

    /// Whether the timer's waker woke since the last call, clearing the mark. Taken before
    /// the timer is polled, so a wake after that poll marks it again.
    pub(super) fn take_timer(&self) -> bool {
        self.timer.load(Ordering::Relaxed) && self.timer.swap(false, Ordering::Acquire)
    }

    fn list(&self, conn: ConnId, wake_task: bool) {
        // `few` is only a hint: a wake that reads it stale lists, or sets the flag, and the
        // connection is read all the same.
        if self.few.load(Ordering::Relaxed) || self.woken.push(conn).is_err() {
            self.scan.store(true, Ordering::Release);
        } else {
            // After the push: a round that finds the flag finds the connection.
            self.listed.store(true, Ordering::Release);
        }
        if wake_task {
            self.task.wake();
        }
    }
}

/// The driver task's waker, as its wakers (the inbox's, the timer's, each connection's) wake
/// it: kept from the first poll and woken by reference, never taken.
///
/// The executors keepwire runs on (tokio, and async-executor under smol and async-std) give a
/// task the same waker on every poll, so the first poll's is the task's for good: a later poll
/// with one that wakes the same task (`Waker::will_wake`) writes nothing, and a wake reads it
/// where it is. An `AtomicWaker`, as this was, cannot keep a waker: a wake takes it (two
/// read-modify-writes) to wake it by value, and the next poll puts a clone back (two
/// compare-and-swaps and the clone's count): with a wake and a poll per round, ten locked
/// instructions per request at one in flight, where this has a fence per wake
/// (`scripts/locked-instructions.sh`, A at one in flight: 74.4 to 65.9 on tokio's
/// multi-thread runtime, 61.1 to 53.1 on its current_thread one, 122.8 to 113.5 on smol, the
/// fences included).
///
/// A poll with a waker that would wake something else (an executor that makes a new one per
/// poll, or the future moved to another task) switches it, for good, to an `AtomicWaker` with
/// its usual contract. The fences make the switch safe against a wake on another thread: a
/// wake sets its source's mark, fences, then reads whether the waker switched; the poll that
/// switches it fences, then reads the marks. At least one of the two sees the other's write:
/// a wake that missed the switch woke the first waker for nothing, and the poll reads its
/// mark; a wake that saw it goes through the `AtomicWaker`. The first poll's keeping of its
/// waker fences the same way.
#[derive(Debug, Default)]
struct TaskWaker {
    /// The first poll's waker.
    first: OnceLock<Waker>,
    /// A poll came with a waker that would not wake what `first` wakes: wakes go to `later`.
    switched: AtomicBool,
    later: AtomicWaker,
    /// The task was woken since its last poll began: a caller leaves the round to it rather
    /// than run one in place ([`task`](super::task)). A hint, never a guarantee.
    scheduled: AtomicBool,
}

impl TaskWaker {
    /// At the start of every poll, before the poll reads any mark.
    #[inline]
    fn register(&self, waker: &Waker) {
        if self.scheduled.load(Ordering::Relaxed) {
            self.scheduled.store(false, Ordering::Relaxed);
        }
        match self.first.get() {
            Some(first) if first.will_wake(waker) && !self.switched.load(Ordering::Relaxed) => {}
            _ => self.register_other(waker),
        }
    }

    /// The first poll's registration, or one with a waker that would wake something else.
    #[cold]
    #[inline(never)]
    fn register_other(&self, waker: &Waker) {
        if self.first.get().is_none() {
            // Polls do not overlap: nothing else sets it.
            let _ = self.first.set(waker.clone());
            fence(Ordering::SeqCst);
            return;
        }
        if !self.switched.load(Ordering::Relaxed) {
            self.switched.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
        }
        self.later.register(waker);
    }

    /// The first poll's waker, unless a later poll switched it.
    #[inline]
    fn kept(&self) -> Option<&Waker> {
        self.first
            .get()
            .filter(|_| !self.switched.load(Ordering::Relaxed))
    }

    /// Wakes the task, after the waking source's mark is set.
    #[inline]
    fn wake(&self) {
        if !self.scheduled.load(Ordering::Relaxed) {
            self.scheduled.store(true, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        match self.first.get() {
            Some(first) if !self.switched.load(Ordering::Relaxed) => first.wake_by_ref(),
            // Switched, or never polled (nothing to wake: the first poll reads every mark).
            _ => self.later.wake(),
        }
    }
}

/// As a waker, the command inbox's (every command queued wakes it): it marks the inbox and
/// wakes the task, unless the inbox was marked already. Then a round that takes the mark is
/// coming (the task was woken by whoever marked it, or the round that left commands has a
/// follow-up), and it finds this command: it takes the mark after this swap.
impl Wake for Wakeups {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.claim_inbox() {
            self.task.wake();
        }
    }
}

/// The driver's timer's waker: it marks the timer and wakes the task. A timer that returned
/// `Pending` holds it (the [`Timer`](crate::Timer) contract: `poll_fire` registers the waker
/// it is given), so until the mark is set that timer has nothing new to say, whatever runtime
/// made it; one that runs out of a cooperative budget wakes it at once, and is polled again.
#[derive(Debug)]
pub(super) struct TimerWake {
    wakeups: Arc<Wakeups>,
}

impl TimerWake {
    /// The timer's waker, for the driver of `wakeups`.
    pub(super) fn waker(wakeups: &Arc<Wakeups>) -> Waker {
        Waker::from(Arc::new(Self {
            wakeups: Arc::clone(wakeups),
        }))
    }
}

impl Wake for TimerWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Set before the wake: the round it brings finds the mark.
        self.wakeups.timer.store(true, Ordering::Release);
        self.wakeups.task.wake();
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

    /// Whether the connection woke since the mark was last taken, leaving it.
    pub(super) fn is_marked(&self) -> bool {
        self.state.marked.load(Ordering::Acquire)
    }

    /// The waker to read the connection's stream with.
    pub(super) fn waker(&self) -> &Waker {
        &self.waker
    }
}

#[cfg(test)]
mod tests {
    use keepwire_proto::{Config, Instant, Pool};

    use super::*;
    use crate::sync::WakeCount;

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
        assert!(!wakeups.take(&mut list), "not overflowed");
        list
    }

    #[test]
    fn a_wake_lists_its_connection_once_and_wakes_the_task() {
        let wakeups = Arc::new(Wakeups::default());
        let task = Arc::new(WakeCount::default());
        let waker = Waker::from(Arc::clone(&task));
        wakeups.register_task(&waker);
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

        // The task's waker is kept: the next wake needs no new registration (the next poll
        // registers the same waker, which writes nothing).
        a.waker().wake_by_ref();
        assert_eq!(task.count(), 2, "once taken, a wake lists it again");
        assert_eq!(taken(&wakeups), [a_id]);
        assert!(a.take());
        wakeups.register_task(&waker);
        a.waker().wake_by_ref();
        assert_eq!(task.count(), 3);
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
            Arc::new(WakeCount::default()),
            Arc::new(WakeCount::default()),
        );
        wakeups.register_task(&Waker::from(Arc::clone(&first)));
        wakeups.register_task(&Waker::from(Arc::clone(&second)));
        read.waker().wake_by_ref();
        assert_eq!((first.count(), second.count()), (0, 1));
        assert!(read.take());

        // Switched to another waker, the task's waker has an `AtomicWaker`'s contract: a wake
        // takes it, and the next poll's registration puts it back.
        let waker = Waker::from(Arc::clone(&second));
        wakeups.register_task(&waker);
        read.waker().wake_by_ref();
        assert_eq!(second.count(), 2);
        assert!(read.take());
        read.waker().wake_by_ref();
        assert_eq!(
            second.count(),
            2,
            "taken by the last wake, not registered since"
        );
        assert!(read.take());
        wakeups.register_task(&waker);
        read.waker().wake_by_ref();
        assert_eq!(second.count(), 3);
        assert!(read.take());

        // For good: the first waker, registered anew, is a waker like any other (woken once
        // through the `AtomicWaker`, then taken), not the one kept.
        wakeups.register_task(&Waker::from(Arc::clone(&first)));
        read.waker().wake_by_ref();
        assert!(read.take());
        read.waker().wake_by_ref();
        assert_eq!((first.count(), second.count()), (1, 3));
    }

    #[test]
    fn the_inbox_waker_marks_the_inbox_alone_and_wakes_the_task() {
        let wakeups = Arc::new(Wakeups::default());
        let task = Arc::new(WakeCount::default());
        wakeups.register_task(&Waker::from(Arc::clone(&task)));
        assert!(wakeups.take_inbox(), "the first round asks the inbox");
        assert!(!wakeups.take_inbox());

        let inbox = Waker::from(Arc::clone(&wakeups));
        inbox.wake_by_ref();
        assert_eq!(task.count(), 1);
        wakeups.register_task(&Waker::from(Arc::clone(&task)));
        inbox.wake_by_ref();
        assert_eq!(
            task.count(),
            1,
            "marked already: the round coming takes both"
        );
        assert!(taken(&wakeups).is_empty(), "no connection listed");
        assert!(wakeups.take_inbox() && !wakeups.take_inbox());

        wakeups.mark_inbox(); // commands left: no wake, the round's follow-up comes anyway
        assert_eq!(task.count(), 1);
        inbox.wake_by_ref();
        assert_eq!(
            task.count(),
            1,
            "the follow-up round takes this command too"
        );
        assert!(wakeups.take_inbox());
        inbox.wake_by_ref();
        assert_eq!(task.count(), 2, "taken: the next command wakes the task");
    }

    #[test]
    fn the_list_takes_about_12_kib() {
        // A bounded queue's slot is the entry and a stamp: a connection id and a word.
        let slot = size_of::<(usize, ConnId)>();
        assert!(LISTED * slot <= 12 * 1024, "{LISTED} slots of {slot} bytes");
    }

    #[test]
    fn a_full_list_says_so_and_loses_no_mark() {
        let wakeups = Arc::new(Wakeups::default());
        let (conn, _) = conns();
        let reads: Vec<ReadWake> = (0..=LISTED)
            .map(|_| ReadWake::new(&wakeups, conn))
            .collect();
        let mut list = Vec::new();
        assert!(
            wakeups.take(&mut list),
            "one more than the list holds: overflowed"
        );
        assert_eq!(list.len(), LISTED);
        assert!(
            reads.iter().all(ReadWake::is_marked),
            "every mark still set"
        );
        assert!(!wakeups.take(&mut list), "said once");
    }

    #[test]
    fn with_few_connections_a_wake_asks_for_a_look_at_every_mark_instead_of_listing() {
        let wakeups = Arc::new(Wakeups::default());
        let (a, b) = conns();
        wakeups.set_few(true);
        let read_a = ReadWake::new(&wakeups, a);
        let mut list = Vec::new();
        assert!(wakeups.take(&mut list), "look at every mark");
        assert!(list.is_empty(), "nothing listed");
        assert!(read_a.take(), "the mark is set");
        assert!(!wakeups.take(&mut list), "said once");
        // Back to listing: a wake lists its connection again, and the flag stays down.
        wakeups.set_few(false);
        let read_b = ReadWake::new(&wakeups, b);
        assert!(!wakeups.take(&mut list));
        assert_eq!(list, vec![b]);
        assert!(read_b.take());
        // A wake through the waker (not a new connection's listing) also wakes the task.
        wakeups.set_few(true);
        let (task, waker) = WakeCount::waker();
        wakeups.register_task(&waker);
        read_a.waker().wake_by_ref();
        assert_eq!(task.count(), 1, "the task is woken");
        list.clear();
        assert!(wakeups.take(&mut list));
        assert!(list.is_empty());
        assert!(read_a.take());
    }
}
