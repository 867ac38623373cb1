//! A one-shot reply for one call: a slot the caller's end and the driver's end share, with no
//! lock. The answer goes through a queue of one (`concurrent-queue`'s single slot), the
//! caller's waker through an `AtomicWaker`, and who left or bound what through one atomic
//! byte of flags that each end sets with a single `fetch_or`.
//!
//! It replaced tokio's `oneshot`, whose polls paid cooperative-budget bookkeeping
//! (BENCHMARKS.md, "The reply slot: keepwire's own one-shot, and no send-key map"). A
//! send allocates no slot in steady state: the caller's end gives its slot back to the
//! client's spares once the call is over and nothing else holds it ([`Spares`]: first the
//! thread's own, [`LocalSpares`]), and the next call takes it from there.
//!
//! For a send the slot also carries the request the driver submitted for it
//! ([`ReplySender::bind`]), so a caller that stops waiting names that request itself
//! ([`ReplyReceiver::abandon`]) and the driver keeps no map from sends to requests. The two
//! ends settle who acts by the order of their `fetch_or`s on the flags: either the caller
//! leaves after the driver bound the request and sends back its id, or the driver binds after
//! the caller left and cancels the request at once; never both, never neither.
//!
//! The caller takes the answer only after it read that the driver's end is gone, which that
//! end says only after its push: the two never meet on the queue's slot, and neither end ever
//! waits for the other. The slot used to be behind a mutex (four uncontended locks per call):
//! a driver preempted while holding it on one core could stall the caller polling on the
//! other.

use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;
use concurrent_queue::ConcurrentQueue;
use keepwire_proto::RequestId;

/// A one-shot reply for one call, in a new slot.
pub(crate) fn reply<T>() -> (ReplySender<T>, ReplyReceiver<T>) {
    ends(Arc::new(Slot::new()))
}

/// The most spare slots a client keeps: more than most keep calls in flight. A burst beyond
/// it allocates for the calls above it, and their slots are freed after them.
const SPARE_SLOTS: usize = 256;

/// The most spare slots a thread keeps of one reply type ([`LocalSpares`]), before a call
/// that is over gives its slot to its client's shared spares instead.
const LOCAL_SPARE_SLOTS: usize = 64;

/// A reply type whose spare slots are kept on each thread first: a call takes its slot from
/// (and gives it back to) the thread it runs on through a plain vector, where the shared
/// spares' queue did a compare-and-swap on each side, and only a thread that has none left
/// (or keeps enough) uses the client's shared spares. Every client
/// on a thread shares its cache: an emptied slot serves any call of the same reply type.
pub(crate) trait LocalSpares: Sized + 'static {
    /// Runs `f` on this thread's spare slots of this reply type; `None` (without running `f`)
    /// while the thread's locals are being torn down.
    fn with_local<R>(f: impl FnOnce(&mut Vec<Arc<Slot<Self>>>) -> R) -> Option<R>;
}

/// Implements [`LocalSpares`] for a reply type with a `thread_local` vector of its own.
macro_rules! local_spares {
    ($t:ty) => {
        impl $crate::sync::LocalSpares for $t {
            // Inlined into the call's take and give back: a thread-local access and a vector
            // push or pop, smaller than a call.
            #[inline]
            fn with_local<R>(
                f: impl FnOnce(&mut Vec<::std::sync::Arc<$crate::sync::Slot<Self>>>) -> R,
            ) -> Option<R> {
                type Slots = ::std::cell::RefCell<Vec<::std::sync::Arc<$crate::sync::Slot<$t>>>>;
                thread_local! {
                    static SPARES: Slots = const { ::std::cell::RefCell::new(Vec::new()) };
                }
                SPARES.try_with(|spares| f(&mut spares.borrow_mut())).ok()
            }
        }
    };
}
pub(crate) use local_spares;

/// The slots of calls that are over, kept for the next calls, so that a client's sends
/// allocate no reply slot in steady state: first on the thread that ran the call
/// ([`LocalSpares`]), then in the client's shared spares, which callers on any thread take
/// from and give back to without a lock (a bounded lock-free queue): a slot taken on one
/// thread and given back on another comes round through them.
pub(crate) struct Spares<T> {
    slots: ConcurrentQueue<Arc<Slot<T>>>,
}

impl<T: LocalSpares> Spares<T> {
    pub(crate) fn new() -> Self {
        Self {
            slots: ConcurrentQueue::bounded(SPARE_SLOTS),
        }
    }

    /// A one-shot reply for one call, in a spare slot if there is one.
    pub(crate) fn reply(&self) -> (ReplySender<T>, ReplyReceiver<T>) {
        let slot = match T::with_local(Vec::pop).flatten() {
            Some(slot) => slot,
            None => self.shared_or_new(),
        };
        ends(slot)
    }

    /// A slot from the client's shared spares, or a new one: out of line, so the usual case
    /// (a slot of the thread's own) does not set up the stack frame a new slot needs.
    #[inline(never)]
    fn shared_or_new(&self) -> Arc<Slot<T>> {
        self.slots.pop().unwrap_or_else(|_| Arc::new(Slot::new()))
    }

    /// Keeps the slot of a call that is over (its receiver returned the answer or stopped
    /// waiting) for the next call, emptied, unless the driver's end still holds it (then it
    /// is freed with the last end, as before) or there are spares enough.
    pub(crate) fn recycle(&self, receiver: &mut ReplyReceiver<T>) {
        if !receiver.done {
            return; // still waiting: the slot is in use
        }
        // Taken, not cloned: the receiver has no use for it any more.
        let Some(mut slot) = receiver.slot.take() else {
            return;
        };
        let Some(emptied) = Arc::get_mut(&mut slot) else {
            return; // the driver's end still holds it: freed with the last end
        };
        emptied.empty();
        let full = T::with_local(|local| {
            if local.len() < LOCAL_SPARE_SLOTS {
                local.push(slot);
                None
            } else {
                Some(slot)
            }
        });
        if let Some(Some(slot)) = full {
            let _ = self.slots.push(slot);
        }
    }
}

impl<T> fmt::Debug for Spares<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spares")
            .field("slots", &self.slots.len())
            .finish()
    }
}

fn ends<T>(slot: Arc<Slot<T>>) -> (ReplySender<T>, ReplyReceiver<T>) {
    let sender = ReplySender {
        slot: Some(Arc::clone(&slot)),
    };
    let receiver = ReplyReceiver {
        slot: Some(slot),
        done: false,
    };
    (sender, receiver)
}

/// Delivers `value` to the caller; dropped if the caller stopped waiting.
pub(crate) fn answer<T>(reply: ReplySender<T>, value: T) {
    reply.send(value);
}

/// The caller's end read that the driver's end went away without a reply (the driver
/// stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoReply;

/// [`Slot::flags`]: the driver's end answered (the value is, or was, in the slot) or was
/// dropped.
const SENDER_GONE: u8 = 1;
/// [`Slot::flags`]: the caller's end stopped waiting or was dropped.
const RECEIVER_GONE: u8 = 2;
/// [`Slot::flags`]: [`Slot::request`] holds the request the driver submitted for the call.
const BOUND: u8 = 4;

/// The state one call's two ends share.
pub(crate) struct Slot<T> {
    /// The answer, pushed once by the driver's end.
    value: ConcurrentQueue<T>,
    /// The caller's task, to wake when the value arrives or the driver's end goes.
    waker: AtomicWaker,
    /// [`SENDER_GONE`], [`RECEIVER_GONE`] and [`BOUND`], each set once by one `fetch_or`.
    flags: AtomicU8,
    /// The request the driver submitted for this call (a [`RequestId`]'s bits), written before
    /// [`BOUND`] is set.
    request: AtomicU64,
}

impl<T> Slot<T> {
    fn new() -> Self {
        Self {
            value: ConcurrentQueue::bounded(1),
            waker: AtomicWaker::new(),
            flags: AtomicU8::new(0),
            request: AtomicU64::new(0),
        }
    }

    /// Back to new, for the next call: only its last holder may do it. Replaced whole: held
    /// alone, its answer left behind (if any) and its waker are simply dropped, without the
    /// compare-and-swap and read-modify-writes of a shared pop and take.
    fn empty(&mut self) {
        *self = Self::new();
    }

    /// Sets `flag`; returns the flags as they were before.
    fn set(&self, flag: u8) -> u8 {
        self.flags.fetch_or(flag, Ordering::AcqRel)
    }
}

/// A receiver gives up its slot only once its call is over ([`Spares::recycle`]).
const NOT_DONE: &str = "a call that is not over keeps its slot";

/// The driver's end of a reply.
pub(crate) struct ReplySender<T> {
    /// `None` once the answer went.
    slot: Option<Arc<Slot<T>>>,
}

/// The caller's end of a reply: a future of the answer, or [`NoReply`] if the driver stopped
/// without one.
pub(crate) struct ReplyReceiver<T> {
    /// `None` once the call is over and [`Spares::recycle`] took the slot back.
    slot: Option<Arc<Slot<T>>>,
    /// The future returned its output: there is nothing left to abandon.
    done: bool,
}

impl<T> ReplySender<T> {
    /// Whether the caller stopped waiting.
    pub(crate) fn is_closed(&self) -> bool {
        self.slot
            .as_ref()
            .is_none_or(|slot| slot.flags.load(Ordering::Acquire) & RECEIVER_GONE != 0)
    }

    /// Records `request` as the one submitted for this call; `false` if the caller already
    /// stopped waiting (nobody will name it: the driver cancels it itself).
    pub(crate) fn bind(&self, request: RequestId) -> bool {
        let Some(slot) = &self.slot else {
            return false;
        };
        slot.request.store(request.as_u64(), Ordering::Relaxed);
        slot.set(BOUND) & RECEIVER_GONE == 0
    }

    /// Hands `value` to the caller and wakes it; dropped if the caller stopped waiting.
    fn send(self, value: T) {
        // Taken out of a sender that is not dropped after: its drop would find nothing to do.
        let Some(slot) = ManuallyDrop::new(self).slot.take() else {
            return;
        };
        if slot.flags.load(Ordering::Acquire) & RECEIVER_GONE == 0 {
            // The only push into the slot: it cannot be full. A caller that leaves from now
            // on leaves the value in the slot, emptied by the slot's next use or its drop.
            let _ = slot.value.push(value);
        }
        // After the push: a caller that reads the flag finds the value.
        slot.set(SENDER_GONE);
        wake_and_let_go(slot);
    }
}

/// Takes the caller's waker, lets go of the slot, then wakes the caller: woken, it finds
/// itself the slot's only holder and keeps it for its next call (`Spares::recycle`).
fn wake_and_let_go<T>(slot: Arc<Slot<T>>) {
    let waker = slot.waker.take();
    drop(slot);
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.set(SENDER_GONE);
            wake_and_let_go(slot);
        }
    }
}

impl<T> ReplyReceiver<T> {
    /// Stops waiting: the request the driver bound to this call, if it was bound and has not
    /// been answered (the caller sends it back to be cancelled). After this the driver's
    /// answer is dropped and [`ReplySender::bind`] refuses.
    pub(crate) fn abandon(&mut self) -> Option<RequestId> {
        if self.done {
            return None;
        }
        self.done = true;
        let slot = self.slot.as_ref().expect(NOT_DONE);
        let before = slot.set(RECEIVER_GONE);
        if before & SENDER_GONE != 0 || before & BOUND == 0 {
            return None;
        }
        Some(RequestId::from_u64(slot.request.load(Ordering::Relaxed)))
    }
}

impl<T> Drop for ReplyReceiver<T> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.abandon();
        }
    }
}

impl<T> Future for ReplyReceiver<T> {
    type Output = Result<T, NoReply>;

    // Inlined into the caller's send ([`CancelOnDrop`](crate::client)), which polls it twice
    // (once to wait, once to take the answer): each call saved six registers for a few loads.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        assert!(!this.done, "a reply polled after it completed");
        let slot = this.slot.as_deref().expect(NOT_DONE);
        if slot.flags.load(Ordering::Acquire) & SENDER_GONE == 0 {
            // Registered before the second look: an answer after that look wakes this task.
            slot.waker.register(cx.waker());
            if slot.flags.load(Ordering::Acquire) & SENDER_GONE == 0 {
                return Poll::Pending;
            }
        }
        // The driver's end is gone, and it pushed its answer, if any, before saying so.
        let output = slot.value.pop().map_err(|_| NoReply);
        this.done = true;
        Poll::Ready(output)
    }
}

impl<T> fmt::Debug for ReplySender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplySender")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for ReplyReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyReceiver")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::WakeCount;
    use futures_lite::future::{block_on, poll_once};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn request(n: u64) -> RequestId {
        RequestId::from_u64(n)
    }

    local_spares!(u32);
    local_spares!(u64);

    /// Where `receiver`'s slot is.
    fn slot_of<T>(receiver: &ReplyReceiver<T>) -> *const Slot<T> {
        Arc::as_ptr(receiver.slot.as_ref().expect("the call is not over"))
    }

    /// Spare slots this thread keeps, and the client's shared ones.
    fn kept(spares: &Spares<u32>) -> (usize, usize) {
        (
            u32::with_local(|local| local.len()).unwrap(),
            spares.slots.len(),
        )
    }

    #[test]
    fn a_reply_reaches_the_receiver_and_a_dropped_sender_reads_as_no_reply() {
        let (tx, rx) = reply::<u32>();
        answer(tx, 7);
        assert_eq!(block_on(rx), Ok(7));
        let (tx, rx) = reply::<u32>();
        drop(tx);
        assert_eq!(block_on(rx), Err(NoReply));
        let (tx, rx) = reply::<u32>();
        assert!(!tx.is_closed());
        drop(rx);
        assert!(tx.is_closed(), "the driver sees that the caller left");
    }

    #[test]
    fn a_reply_polled_from_another_task_wakes_that_task() {
        let (first, first_waker) = WakeCount::waker();
        let (second, second_waker) = WakeCount::waker();
        let (tx, mut rx) = reply::<u32>();
        let mut cx = Context::from_waker(&first_waker);
        assert!(Pin::new(&mut rx).poll(&mut cx).is_pending());
        let mut cx = Context::from_waker(&second_waker);
        assert!(Pin::new(&mut rx).poll(&mut cx).is_pending());
        answer(tx, 4);
        assert_eq!(
            (first.count(), second.count()),
            (0, 1),
            "only the task that polled last is woken"
        );
    }

    #[test]
    fn both_ends_say_what_state_they_are_in() {
        let (tx, mut rx) = reply::<u32>();
        assert_eq!(format!("{tx:?}"), "ReplySender { closed: false, .. }");
        assert_eq!(format!("{rx:?}"), "ReplyReceiver { done: false, .. }");
        let _ = rx.abandon();
        assert_eq!(format!("{tx:?}"), "ReplySender { closed: true, .. }");
        assert_eq!(format!("{rx:?}"), "ReplyReceiver { done: true, .. }");
    }

    #[test]
    fn an_answer_after_the_first_poll_wakes_the_waiting_task_once() {
        let (count, waker) = WakeCount::waker();
        let mut cx = Context::from_waker(&waker);
        let (tx, mut rx) = reply::<u32>();
        assert!(Pin::new(&mut rx).poll(&mut cx).is_pending());
        assert!(
            Pin::new(&mut rx).poll(&mut cx).is_pending(),
            "polled again, same task"
        );
        assert_eq!(count.count(), 0);
        answer(tx, 3);
        assert_eq!(count.count(), 1);
        assert_eq!(Pin::new(&mut rx).poll(&mut cx), Poll::Ready(Ok(3)));
        assert_eq!(rx.abandon(), None, "answered: nothing to cancel");
    }

    #[test]
    fn a_caller_leaving_after_the_bind_names_the_request() {
        let (tx, mut rx) = reply::<u32>();
        assert!(block_on(poll_once(&mut rx)).is_none());
        assert!(tx.bind(request(5)));
        assert_eq!(rx.abandon(), Some(request(5)));
        assert!(tx.is_closed());
        answer(tx, 1); // dropped: nobody waits
    }

    #[test]
    fn a_bind_after_the_caller_left_is_refused() {
        let (tx, rx) = reply::<u32>();
        drop(rx);
        assert!(
            !tx.bind(request(5)),
            "the driver must cancel the request itself"
        );
        let (tx, mut rx) = reply::<u32>();
        assert_eq!(rx.abandon(), None, "not bound yet: nothing to name");
        assert!(!tx.bind(request(6)));
    }

    #[test]
    fn an_answered_or_orphaned_call_names_nothing_when_dropped() {
        let (tx, mut rx) = reply::<u32>();
        assert!(tx.bind(request(8)));
        answer(tx, 2);
        assert_eq!(rx.abandon(), None, "answered while the caller was away");
        let (tx, mut rx) = reply::<u32>();
        assert!(tx.bind(request(9)));
        drop(tx);
        assert_eq!(
            rx.abandon(),
            None,
            "the driver stopped: nothing left to cancel"
        );
    }

    #[test]
    fn an_answered_calls_slot_serves_the_next_call_emptied() {
        let spares = Spares::<u32>::new();
        let (tx, mut rx) = spares.reply();
        assert!(tx.bind(request(3)));
        let first = slot_of(&rx);
        answer(tx, 1);
        assert_eq!(block_on(&mut rx), Ok(1));
        spares.recycle(&mut rx);
        drop(rx);
        let (tx, mut rx) = spares.reply();
        assert_eq!(slot_of(&rx), first, "the spare slot is taken again");
        assert!(
            !tx.is_closed(),
            "emptied: not marked as left by the last call"
        );
        assert_eq!(
            rx.abandon(),
            None,
            "emptied: not bound to the last call's request"
        );
        let (tx, rx) = spares.reply();
        assert_ne!(slot_of(&rx), first, "no spare left: a new slot");
        answer(tx, 2);
        assert_eq!(block_on(rx), Ok(2));
    }

    #[test]
    fn an_answer_left_behind_is_not_handed_to_the_next_call() {
        let spares = Spares::<u32>::new();
        let (tx, mut rx) = spares.reply();
        answer(tx, 1); // the caller had already stopped polling
        assert_eq!(rx.abandon(), None, "answered: nothing to cancel");
        spares.recycle(&mut rx);
        assert_eq!(kept(&spares), (1, 0), "kept on this thread");
        let (tx, rx) = spares.reply();
        answer(tx, 2);
        assert_eq!(
            block_on(rx),
            Ok(2),
            "the slot was emptied of the old answer"
        );
    }

    #[test]
    fn a_slot_the_driver_still_holds_is_not_kept() {
        let spares = Spares::<u32>::new();
        let (tx, mut rx) = spares.reply();
        assert!(tx.bind(request(4)));
        assert_eq!(rx.abandon(), Some(request(4)));
        let held = slot_of(&rx);
        spares.recycle(&mut rx);
        assert_eq!(kept(&spares), (0, 0), "the driver's end still holds it");
        let (tx2, rx2) = spares.reply();
        assert_ne!(slot_of(&rx2), held);
        drop((tx2, rx2));
        // A receiver still waiting keeps its slot too.
        let (tx3, mut rx3) = spares.reply();
        drop(tx);
        spares.recycle(&mut rx3);
        assert_eq!(kept(&spares), (0, 0), "not done: the slot is in use");
        drop(tx3);
        spares.recycle(&mut rx3);
        assert_eq!(
            kept(&spares),
            (0, 0),
            "not done, though alone: still in use"
        );
        assert_eq!(block_on(&mut rx3), Err(NoReply));
        spares.recycle(&mut rx3);
        assert_eq!(kept(&spares), (1, 0), "done, and nothing else holds it");
    }

    /// Bind and abandon race on two threads: exactly one of them acts (the caller names the
    /// request, or the driver's bind is refused), never both and never neither.
    #[test]
    fn a_bind_racing_a_caller_that_leaves_is_settled_once() {
        for trial in 0..2_000 {
            let (tx, mut rx) = reply::<u32>();
            let start = Arc::new(std::sync::Barrier::new(2));
            let caller_start = Arc::clone(&start);
            let leaving = std::thread::spawn(move || {
                caller_start.wait();
                rx.abandon()
            });
            start.wait();
            let bound = tx.bind(request(trial));
            let named = leaving.join().unwrap();
            assert_eq!(
                named.is_some(),
                bound,
                "trial {trial}: bound {bound}, named {named:?}"
            );
            if let Some(named) = named {
                assert_eq!(named, request(trial));
            }
        }
    }

    /// An answer from another thread always wakes a caller that waits for it: a wake lost
    /// between the caller's look at the slot and its waker's registration would leave it
    /// waiting here (the receive would not arrive within the guard's 10 s).
    #[test]
    fn an_answer_from_another_thread_is_never_missed() {
        let spares = Arc::new(Spares::<u64>::new());
        let mut kept_slots = 0;
        for trial in 0..2_000u64 {
            let (tx, rx) = spares.reply();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let caller_spares = Arc::clone(&spares);
            let start = Arc::new(std::sync::Barrier::new(2));
            let caller_start = Arc::clone(&start);
            let caller = std::thread::spawn(move || {
                let mut rx = rx;
                caller_start.wait();
                let got = block_on(&mut rx);
                caller_spares.recycle(&mut rx);
                let kept = u64::with_local(|local| local.len()).unwrap();
                done_tx.send((got, kept)).unwrap();
            });
            start.wait();
            if trial % 2 == 0 {
                answer(tx, trial);
            } else {
                drop(tx);
            }
            let (got, kept) = done_rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the caller was woken");
            let expected = if trial % 2 == 0 {
                Ok(trial)
            } else {
                Err(NoReply)
            };
            assert_eq!(got, expected);
            kept_slots += kept;
            caller.join().unwrap();
        }
        // Each caller thread keeps its call's slot once nothing else holds it (and frees it
        // when the thread ends).
        assert!(kept_slots > 0, "the slots went back to the spares");
    }

    /// Answers racing callers that leave: every answer is dropped exactly once, and by the
    /// time both ends are done with the call (the driver dropped it, or it was emptied from
    /// the slot as the slot went back to the spares, or freed with the slot): none waits in
    /// a spare slot.
    #[test]
    fn an_answer_racing_a_caller_that_leaves_is_dropped_exactly_once() {
        struct Counted(Arc<AtomicUsize>);
        local_spares!(Counted);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let spares = Arc::new(Spares::<Counted>::new());
        let trials = 2_000;
        for trial in 0..trials {
            let (tx, mut rx) = spares.reply();
            let caller_spares = Arc::clone(&spares);
            let start = Arc::new(std::sync::Barrier::new(2));
            let caller_start = Arc::clone(&start);
            let caller = std::thread::spawn(move || {
                caller_start.wait();
                let _ = rx.abandon();
                caller_spares.recycle(&mut rx);
            });
            start.wait();
            answer(tx, Counted(Arc::clone(&drops)));
            caller.join().unwrap();
            assert_eq!(
                drops.load(Ordering::SeqCst),
                trial + 1,
                "trial {trial}: the answer outlived its call (kept in a spare slot?)"
            );
        }
        drop(spares);
        assert_eq!(drops.load(Ordering::SeqCst), trials);
    }

    #[test]
    fn spares_are_bounded() {
        let spares = Spares::<u32>::new();
        let calls: Vec<_> = (0..LOCAL_SPARE_SLOTS + SPARE_SLOTS + 10)
            .map(|_| spares.reply())
            .collect();
        for (tx, mut rx) in calls {
            answer(tx, 0);
            assert_eq!(block_on(&mut rx), Ok(0));
            spares.recycle(&mut rx);
        }
        assert_eq!(kept(&spares), (LOCAL_SPARE_SLOTS, SPARE_SLOTS));
    }

    /// Calls taken on one thread and over on another: that thread keeps its share, then gives
    /// the rest to the client's spares, where the first thread finds them; nothing is lost.
    #[test]
    fn slots_given_back_on_another_thread_come_round_through_the_shared_spares() {
        let spares = Arc::new(Spares::<u32>::new());
        let calls: Vec<_> = (0..LOCAL_SPARE_SLOTS + 2).map(|_| spares.reply()).collect();
        let last = slot_of(&calls[calls.len() - 1].1);
        let other = Arc::clone(&spares);
        std::thread::spawn(move || {
            for (tx, mut rx) in calls {
                answer(tx, 0);
                assert_eq!(block_on(&mut rx), Ok(0));
                other.recycle(&mut rx);
            }
            assert_eq!(kept(&other), (LOCAL_SPARE_SLOTS, 2));
        })
        .join()
        .unwrap();
        assert_eq!(kept(&spares), (0, 2), "this thread kept none");
        let (_, first) = spares.reply();
        let (_, second) = spares.reply();
        assert_eq!(slot_of(&second), last, "taken from the shared spares");
        assert_ne!(slot_of(&first), slot_of(&second));
        assert_eq!(kept(&spares), (0, 0));
    }
}
