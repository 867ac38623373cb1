//! The hand-offs between client handles and the driver task: the event fan-out on tokio's
//! `sync` channels (well-kept and loom-tested; they need no tokio runtime, so the driver and
//! its callers may run on any executor), and of keepwire's own, an unbounded command queue
//! into the driver ([`command_queue`], lock-free while it holds under a few hundred commands)
//! and a one-shot reply per call ([`reply`](mod@reply)), whose slots a client's sends take
//! from and give back to its spares ([`Spares`]), so that a send allocates none in steady
//! state. What is left here gives them keepwire's semantics:
//!
//! - **Cancel on drop.** The driver binds each send's reply to the request it submitted; a
//!   caller that stops waiting takes that request's id from the reply and sends it back, and
//!   the driver cancels the request if it still runs (a stale id finds nothing: ids carry a
//!   generation). A caller that leaves before the bind leaves the reply closed: the driver
//!   submits nothing for it, or cancels at once what it submitted in between.
//! - **Drop-oldest fan-out with a missed count.** A subscriber that falls behind loses the
//!   oldest events and reads how many ([`Next::Missed`]), then carries on from the oldest
//!   still kept (tokio's `broadcast` lag semantics).
//! - **The end.** Clients hold the only strong command sender; the last one to go queues a
//!   shutdown. The event sender lives in the driver, which drops it when it stops, so every
//!   subscription ends (after reading what is queued) and a later one ends at once.

mod reply;

pub(crate) use reply::{
    LocalSpares, ReplyReceiver, ReplySender, Slot, Spares, answer, local_spares, reply,
};

use std::collections::HashMap;
use std::collections::VecDeque;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use concurrent_queue::{ConcurrentQueue, PushError};

use tokio::sync::broadcast;

/// What the command queue's two ends share: a lock-free ring (async-io's and
/// async-executor's queue), and behind it, for a burst that fills the ring, an overflow list
/// under a lock, which the commands queued while it is in use join in order.
///
/// It replaced tokio's unbounded `mpsc`, whose send (a semaphore, a slot claimed in its block
/// list, a ready bit, a receiver wake) and receive cost about 220 instructions per command
/// between them; an unbounded lock-free list allocates a block every few dozen commands. A
/// command queued into the ring takes no lock and allocates nothing.
#[derive(Debug)]
struct Queue<C> {
    ring: ConcurrentQueue<C>,
    /// Commands that found the ring full, and those queued after them until the driver took
    /// them all: in queue order, after the ring's.
    overflow: Mutex<VecDeque<C>>,
    /// The overflow list is in use: a command joins it rather than the ring. Set and cleared
    /// under its lock.
    overflowing: AtomicBool,
    /// The outbox is gone: nothing more will be queued. Set after its last push.
    orphaned: AtomicBool,
}

/// Commands the ring holds before they go to the overflow list.
const RING: usize = 256;

impl<C> Queue<C> {
    /// The overflow list, locked. Nothing panics while holding it (a push that cannot
    /// allocate aborts), so a poisoned lock still holds a consistent list.
    fn overflow(&self) -> MutexGuard<'_, VecDeque<C>> {
        self.overflow.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `command` behind the overflow list (the ring was full, or the list in use);
    /// hands it back if the driver has stopped.
    #[cold]
    fn push_overflow(&self, command: C) -> Result<(), C> {
        let mut overflow = self.overflow();
        if self.ring.is_closed() {
            return Err(command);
        }
        self.overflowing.store(true, Ordering::Release);
        overflow.push_back(command);
        Ok(())
    }

    /// Takes every command off the overflow list into `out`, behind those it holds.
    #[cold]
    #[inline(never)]
    fn take_overflow(&self, out: &mut VecDeque<C>) {
        let mut overflow = self.overflow();
        out.append(&mut overflow);
        // Under the lock: a command queued after this goes to the ring again, and comes after
        // these.
        self.overflowing.store(false, Ordering::Release);
    }
}

/// The driver's end of the command queue.
#[derive(Debug)]
pub(crate) struct Inbox<C> {
    queue: Arc<Queue<C>>,
    /// Commands taken off the overflow list, next in queue order: the ring's commands queued
    /// after the list was taken are newer.
    staged: VecDeque<C>,
}

impl<C> Inbox<C> {
    /// Refuses every later command (the outbox hands it back); those queued stay to be taken.
    pub(crate) fn close(&mut self) {
        self.queue.ring.close();
    }

    /// Drops every command queued (a dropped reply wakes its caller).
    pub(crate) fn clear(&mut self) {
        self.staged.clear();
        while self.queue.ring.pop().is_ok() {}
        let dropped = std::mem::take(&mut *self.queue.overflow());
        drop(dropped);
    }

    /// Whether the outbox is gone, read before a take's first [`next`](Self::next): once it
    /// is, every command it queued is in the queue by then, and the take finds them all
    /// before [`closed`](Self::closed) says the queue is closed.
    #[inline]
    pub(crate) fn orphaned(&self) -> bool {
        self.queue.orphaned.load(Ordering::Acquire)
    }

    /// The oldest command queued, if any, taken one at a time: none is moved into a batch and
    /// out again. `None` when the queue is empty: a command queued from now on wakes the
    /// driver (the [`Outbox`] does it for every command).
    #[inline]
    pub(crate) fn next(&mut self) -> Option<C> {
        if !self.staged.is_empty() {
            return self.staged.pop_front();
        }
        // An empty ring is seen with two loads, not a failed pop: that pop's full fence makes
        // the queue's emptiness exact for any consumer, and the driver needs less. A command
        // this misses was pushed after the inbox mark the round took (a command whose mark it
        // took happened before that take, and is seen), and its push marks the inbox again,
        // so the next round takes it. At one request in flight every round that takes a
        // command ends with this look: about two locked instructions fewer per request.
        if !self.queue.ring.is_empty()
            && let Ok(command) = self.queue.ring.pop()
        {
            return Some(command);
        }
        // The ring is empty: the overflow list's commands come after its.
        if self.queue.overflowing.load(Ordering::Acquire) {
            self.queue.take_overflow(&mut self.staged);
            return self.staged.pop_front();
        }
        None
    }

    /// After [`next`](Self::next) found the queue empty: whether it is closed for good (the
    /// outbox was gone when the take began, or the driver closed the inbox) rather than
    /// empty for now.
    pub(crate) fn closed(&self, orphaned: bool) -> bool {
        orphaned || self.queue.ring.is_closed()
    }
}

impl<C> Drop for Inbox<C> {
    /// The driver is gone (its end is dropped as it finishes, or with a driver that never
    /// ran): a command sent from now on is handed back, and those still queued are dropped,
    /// so that no caller waits on a reply nobody holds.
    fn drop(&mut self) {
        self.close();
        self.clear();
    }
}

/// A client's end of the command queue: each command queued wakes the driver with `wake`
/// (the driver's inbox waker, which marks the inbox), so the driver takes commands only when
/// the inbox was marked. The only one of its queue: dropping it ends the queue.
#[derive(Debug)]
pub(crate) struct Outbox<C> {
    queue: Arc<Queue<C>>,
    wake: Waker,
}

impl<C> Outbox<C> {
    /// Queues `command` and wakes the driver; hands it back if the driver has stopped.
    #[inline]
    pub(crate) fn send(&self, command: C) -> Result<(), C> {
        self.push(command)?;
        self.wake.wake_by_ref();
        Ok(())
    }

    /// Queues `command` without waking the driver (the caller delivers it); hands it back if
    /// the driver has stopped.
    #[inline]
    pub(crate) fn push(&self, command: C) -> Result<(), C> {
        let queue = &*self.queue;
        if queue.overflowing.load(Ordering::Acquire) {
            queue.push_overflow(command)?;
        } else {
            match queue.ring.push(command) {
                Ok(()) => {}
                Err(PushError::Full(command)) => queue.push_overflow(command)?,
                Err(PushError::Closed(command)) => return Err(command),
            }
        }
        Ok(())
    }
}

impl<C> Drop for Outbox<C> {
    /// Every sender is gone: the driver's next take reports the queue closed once it is
    /// empty, and the wake makes sure a take comes.
    fn drop(&mut self) {
        // After every push of this outbox: a take that reads the mark finds them all.
        self.queue.orphaned.store(true, Ordering::Release);
        self.wake.wake_by_ref();
    }
}

/// A command queue: clients send, the driver receives; each send wakes the driver with
/// `wake`.
pub(crate) fn command_queue<C>(wake: Waker) -> (Outbox<C>, Inbox<C>) {
    let queue = Arc::new(Queue {
        ring: ConcurrentQueue::bounded(RING),
        overflow: Mutex::new(VecDeque::new()),
        overflowing: AtomicBool::new(false),
        orphaned: AtomicBool::new(false),
    });
    let inbox = Inbox {
        queue: Arc::clone(&queue),
        staged: VecDeque::new(),
    };
    (Outbox { queue, wake }, inbox)
}

/// A map keyed by ids keepwire makes itself (request and protocol ids): hashed with one
/// multiplication, since no peer chooses them (SipHash's defence against chosen keys buys
/// nothing here and costs on every request).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// The hasher of [`IdMap`]: Fibonacci hashing of the key's 64 bits.
#[derive(Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    /// A node's handle hashes as two of these (its slot and generation).
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
}

/// The driver's end of the event fan-out.
#[derive(Debug)]
pub(crate) struct Hub<E> {
    /// `None` once closed.
    sender: Option<broadcast::Sender<E>>,
}

/// What clients keep of the fan-out: enough to subscribe while the driver runs, not enough to
/// keep the subscriptions open after it stopped.
#[derive(Debug)]
pub(crate) struct HubHandle<E> {
    sender: broadcast::WeakSender<E>,
}

impl<E: Clone> Hub<E> {
    /// A fan-out where each subscriber may have `capacity` events unread (rounded up to a
    /// power of two) before the oldest are dropped.
    pub(crate) fn new(capacity: usize) -> (Self, HubHandle<E>) {
        let (sender, _) = broadcast::channel(capacity.clamp(1, usize::MAX >> 2));
        let handle = HubHandle {
            sender: sender.downgrade(),
        };
        (
            Self {
                sender: Some(sender),
            },
            handle,
        )
    }

    /// Delivers `event` to every subscriber.
    pub(crate) fn publish(&self, event: E) {
        if let Some(sender) = &self.sender {
            // No subscriber is fine: the event is for nobody.
            let _ = sender.send(event);
        }
    }

    /// Ends every subscription, present and future: each reads what is queued, then the end.
    pub(crate) fn close(&mut self) {
        self.sender = None;
    }
}

impl<E: Clone> HubHandle<E> {
    /// A subscription to events published from now on; closed at once if the driver stopped.
    pub(crate) fn subscribe(&self) -> Subscription<E> {
        let receiver = match self.sender.upgrade() {
            Some(sender) => sender.subscribe(),
            None => broadcast::channel(1).1,
        };
        Subscription { receiver }
    }
}

/// One subscriber's queue.
#[derive(Debug)]
pub(crate) struct Subscription<E> {
    receiver: broadcast::Receiver<E>,
}

/// What a subscription yields next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<E> {
    Event(E),
    /// Events were dropped because the queue was full.
    Missed(u64),
    Closed,
}

impl<E: Clone> Subscription<E> {
    /// The next event, waiting for one.
    pub(crate) async fn next(&mut self) -> Next<E> {
        match self.receiver.recv().await {
            Ok(event) => Next::Event(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => Next::Missed(missed),
            Err(broadcast::error::RecvError::Closed) => Next::Closed,
        }
    }

    /// The next event if one is queued.
    pub(crate) fn try_next(&mut self) -> Option<Next<E>> {
        match self.receiver.try_recv() {
            Ok(event) => Some(Next::Event(event)),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => Some(Next::Missed(missed)),
            Err(broadcast::error::TryRecvError::Closed) => Some(Next::Closed),
            Err(broadcast::error::TryRecvError::Empty) => None,
        }
    }
}

/// A waker that counts how often it was woken, for the tests of the driver's hand-offs.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct WakeCount(std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl WakeCount {
    /// A fresh count and a waker that adds to it.
    pub(crate) fn waker() -> (Arc<Self>, Waker) {
        let count = Arc::new(Self::default());
        (Arc::clone(&count), Waker::from(count))
    }

    /// The wakes so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    /// What [`take_commands`] found after the commands it took.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Taken {
        /// The queue is empty: a command queued from now on wakes the driver.
        Empty,
        /// It took its limit: more may be queued.
        Limit,
        /// The queue is empty and the outbox is gone (or the driver closed the inbox).
        Closed,
    }

    /// Takes up to `limit` queued commands into `out`, oldest first: the driver's take
    /// ([`Inbox::next`] until the queue is empty, as `Driver::take_commands` runs it) as a
    /// batch.
    fn take_commands<C>(inbox: &mut Inbox<C>, out: &mut Vec<C>, limit: usize) -> Taken {
        let orphaned = inbox.orphaned();
        for _ in 0..limit {
            match inbox.next() {
                Some(command) => out.push(command),
                None if inbox.closed(orphaned) => return Taken::Closed,
                None => return Taken::Empty,
            }
        }
        Taken::Limit
    }

    #[test]
    fn id_maps_find_their_keys() {
        let mut map = IdMap::default();
        map.insert(1u64, 'a');
        map.insert(1 << 40, 'b');
        assert_eq!((map.get(&1), map.get(&(1 << 40))), (Some(&'a'), Some(&'b')));
        let mut hasher = IdHasher::default();
        hasher.write(&[1, 2, 3]);
        assert_ne!(hasher.finish(), IdHasher::default().finish());
    }

    /// Distinct node handles (a slot and a generation, hashed as two `u32`s) hash apart, so
    /// a map of them never degrades into one bucket: every pair of 64 slots and 16
    /// generations gets a hash of its own.
    #[test]
    fn node_handles_hash_apart() {
        let hashes: std::collections::HashSet<u64> = (0..64u32)
            .flat_map(|slot| (0..16u32).map(move |generation| (slot, generation)))
            .map(|(slot, generation)| {
                let mut hasher = IdHasher::default();
                hasher.write_u32(slot);
                hasher.write_u32(generation);
                hasher.finish()
            })
            .collect();
        assert_eq!(hashes.len(), 64 * 16);
    }

    #[test]
    fn a_full_subscription_drops_the_oldest_and_says_how_many() {
        let (hub, handle) = Hub::new(2);
        let mut sub = handle.subscribe();
        for n in 0..5 {
            hub.publish(n);
        }
        assert_eq!(sub.try_next(), Some(Next::Missed(3)));
        assert_eq!(sub.try_next(), Some(Next::Event(3)));
        assert_eq!(sub.try_next(), Some(Next::Event(4)));
        assert_eq!(sub.try_next(), None);
        hub.publish(5);
        drop(hub);
        assert_eq!(
            sub.try_next(),
            Some(Next::Event(5)),
            "queued events survive"
        );
        assert_eq!(sub.try_next(), Some(Next::Closed));
        assert_eq!(block_on(sub.next()), Next::Closed);
    }

    #[test]
    fn a_subscription_made_after_the_driver_stopped_ends_at_once() {
        let (mut hub, handle) = Hub::<u32>::new(2);
        hub.close();
        let mut late = handle.subscribe();
        assert_eq!(late.try_next(), Some(Next::Closed));
    }

    #[test]
    fn a_dropped_inbox_drops_what_is_queued_and_hands_later_commands_back() {
        let (outbox, inbox) = command_queue(Waker::noop().clone());
        let queued = Arc::new(());
        outbox.send(Arc::clone(&queued)).unwrap();
        assert_eq!(Arc::strong_count(&queued), 2);
        drop(inbox);
        assert_eq!(
            Arc::strong_count(&queued),
            1,
            "the queued command is dropped (its reply with it)"
        );
        assert!(outbox.send(Arc::clone(&queued)).is_err());
    }

    #[test]
    fn a_burst_beyond_the_ring_keeps_its_order_through_the_overflow_list() {
        let (outbox, mut inbox) = command_queue(Waker::noop().clone());
        let burst = RING + 10;
        for command in 0..burst {
            outbox.send(command).unwrap();
        }
        assert!(inbox.queue.overflowing.load(Ordering::SeqCst));
        let mut taken = Vec::new();
        assert_eq!(
            take_commands(&mut inbox, &mut taken, RING + 5),
            Taken::Limit,
            "the ring's, then five of the overflow list's"
        );
        outbox.send(burst).unwrap(); // joins the overflow list, behind the rest
        assert_eq!(take_commands(&mut inbox, &mut taken, RING), Taken::Empty);
        assert_eq!(taken, (0..=burst).collect::<Vec<_>>());
        assert!(
            !inbox.queue.overflowing.load(Ordering::SeqCst),
            "emptied, the overflow list is out of use"
        );
        outbox.send(0).unwrap();
        assert_eq!(inbox.queue.ring.len(), 1, "back to the ring");

        // Closed, a full ring hands a command back as the overflow list would.
        for command in 1..RING {
            outbox.send(command).unwrap();
        }
        inbox.close();
        assert_eq!(outbox.send(RING), Err(RING));
        inbox.clear();
        drop(outbox);
        taken.clear();
        assert_eq!(take_commands(&mut inbox, &mut taken, 1), Taken::Closed);
        assert!(taken.is_empty());
    }

    #[test]
    fn commands_from_many_threads_arrive_once_each_in_each_threads_order() {
        let (outbox, mut inbox) = command_queue(Waker::noop().clone());
        let outbox = Arc::new(outbox);
        const THREADS: usize = 4;
        const EACH: usize = 2 * RING;
        let senders: Vec<_> = (0..THREADS)
            .map(|t| {
                let outbox = Arc::clone(&outbox);
                std::thread::spawn(move || {
                    for n in 0..EACH {
                        outbox.send((t, n)).unwrap();
                    }
                })
            })
            .collect();
        let mut next = [0; THREADS];
        let mut batch = Vec::new();
        while next.iter().any(|&n| n < EACH) {
            take_commands(&mut inbox, &mut batch, 7);
            for (t, n) in batch.drain(..) {
                assert_eq!(n, next[t], "thread {t}'s commands in order");
                next[t] += 1;
            }
            std::thread::yield_now();
        }
        for sender in senders {
            sender.join().unwrap();
        }
        drop(outbox);
        assert_eq!(take_commands(&mut inbox, &mut batch, 7), Taken::Closed);
    }

    #[test]
    fn each_command_queued_wakes_the_driver_and_a_closed_queue_hands_commands_back() {
        let (wakes, wake) = WakeCount::waker();
        let (outbox, mut inbox) = command_queue(wake);
        let mut taken = Vec::new();
        assert_eq!(take_commands(&mut inbox, &mut taken, 2), Taken::Empty);
        for command in 1..=3 {
            outbox.send(command).unwrap();
        }
        assert_eq!(wakes.count(), 3);
        assert_eq!(take_commands(&mut inbox, &mut taken, 2), Taken::Limit);
        assert_eq!(take_commands(&mut inbox, &mut taken, 2), Taken::Empty);
        assert_eq!(taken, [1, 2, 3]);
        for command in 10..20 {
            outbox.send(command).unwrap();
        }
        taken.clear();
        assert_eq!(
            take_commands(&mut inbox, &mut taken, 6),
            Taken::Limit,
            "six at most"
        );
        assert_eq!(take_commands(&mut inbox, &mut taken, 6), Taken::Empty);
        assert_eq!(taken, (10..20).collect::<Vec<_>>());
        outbox.send(4).unwrap();
        inbox.close();
        assert_eq!(outbox.send(5), Err(5), "handed back once closed");
        assert_eq!(wakes.count(), 14);
        let mut last = Vec::new();
        assert_eq!(take_commands(&mut inbox, &mut last, 1), Taken::Limit);
        assert_eq!(last, [4]);
        drop(outbox);
        assert_eq!(take_commands(&mut inbox, &mut taken, 2), Taken::Closed);

        let (outbox, mut inbox) = command_queue(Waker::noop().clone());
        for command in 0..3 {
            outbox.send(command).unwrap();
        }
        drop(outbox);
        taken.clear();
        assert_eq!(
            take_commands(&mut inbox, &mut taken, 6),
            Taken::Closed,
            "the senders gone, the last commands are taken before it says so"
        );
        assert_eq!(taken, [0, 1, 2]);
    }
}
