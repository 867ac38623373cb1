//! The few synchronisation pieces between client handles and the driver task: a command
//! inbox, a one-shot reply slot per command, and a bounded event fan-out. Every mutex here is
//! held only to push or pop and to swap a waker: never across an await or a syscall.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use keepwire_proto::RequestId;

/// Locks `mutex`, recovering the data if a panicking thread poisoned it: every critical
/// section here leaves the data consistent.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Commands from client handles to the driver, and the driver's waker.
#[derive(Debug)]
pub(crate) struct Inbox<C> {
    state: Mutex<InboxState<C>>,
}

#[derive(Debug)]
struct InboxState<C> {
    commands: VecDeque<C>,
    waker: Option<Waker>,
    closed: bool,
}

impl<C> Inbox<C> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(InboxState {
                commands: VecDeque::new(),
                waker: None,
                closed: false,
            }),
        }
    }

    /// Queues `command` and wakes the driver; hands it back if the driver has stopped.
    pub(crate) fn push(&self, command: C) -> Result<(), C> {
        let waker = {
            let mut state = lock(&self.state);
            if state.closed {
                return Err(command);
            }
            state.commands.push_back(command);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Moves every queued command into `out` and registers the driver's waker.
    pub(crate) fn drain_into(&self, waker: &Waker, out: &mut VecDeque<C>) {
        let mut state = lock(&self.state);
        out.append(&mut state.commands);
        if !state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.waker = Some(waker.clone());
        }
    }

    /// Refuses every later push and returns what was still queued.
    pub(crate) fn close(&self) -> VecDeque<C> {
        let mut state = lock(&self.state);
        state.closed = true;
        std::mem::take(&mut state.commands)
    }
}

/// Creates a reply slot: the driver completes the [`ReplySender`], the caller awaits the
/// [`ReplyReceiver`].
pub(crate) fn reply<T>() -> (ReplySender<T>, ReplyReceiver<T>) {
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        waker: None,
        sender_gone: false,
        receiver_gone: false,
        request: None,
    }));
    (
        ReplySender {
            slot: Arc::clone(&slot),
        },
        ReplyReceiver { slot },
    )
}

#[derive(Debug)]
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_gone: bool,
    receiver_gone: bool,
    /// For a request: its id once submitted, so an abandoned caller can cancel it.
    request: Option<RequestId>,
}

/// The driver's end of a reply slot.
#[derive(Debug)]
pub(crate) struct ReplySender<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> ReplySender<T> {
    /// Delivers the reply (dropped if the caller is gone).
    pub(crate) fn send(self, value: T) {
        let waker = {
            let mut slot = lock(&self.slot);
            if slot.receiver_gone {
                return;
            }
            slot.value = Some(value);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Whether the caller stopped waiting.
    pub(crate) fn is_abandoned(&self) -> bool {
        lock(&self.slot).receiver_gone
    }

    /// Records the id the request was submitted under. Returns `false` if the caller already
    /// stopped waiting, in which case the driver cancels the request itself.
    pub(crate) fn set_request(&self, id: RequestId) -> bool {
        let mut slot = lock(&self.slot);
        slot.request = Some(id);
        !slot.receiver_gone
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = lock(&self.slot);
            slot.sender_gone = true;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The caller's end of a reply slot: resolves to the reply, or `None` if the driver dropped
/// the command unanswered (it stopped).
#[derive(Debug)]
pub(crate) struct ReplyReceiver<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> ReplyReceiver<T> {
    /// Marks the caller gone and returns the request to cancel, if one was submitted and
    /// has not been answered.
    pub(crate) fn abandon(&self) -> Option<RequestId> {
        let mut slot = lock(&self.slot);
        slot.receiver_gone = true;
        if slot.value.is_some() {
            None
        } else {
            slot.request
        }
    }
}

impl<T> Future for ReplyReceiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = lock(&self.slot);
        if let Some(value) = slot.value.take() {
            return Poll::Ready(Some(value));
        }
        if slot.sender_gone {
            return Poll::Ready(None);
        }
        if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            slot.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Fans events out to every live subscriber, each with a bounded queue.
#[derive(Debug)]
pub(crate) struct Hub<E> {
    /// `None` once closed: a later subscriber is closed from the start.
    subscribers: Mutex<Option<Vec<QueueRef<E>>>>,
    capacity: usize,
}

impl<E: Clone> Hub<E> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            subscribers: Mutex::new(Some(Vec::new())),
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn subscribe(&self) -> Subscription<E> {
        let mut subscribers = lock(&self.subscribers);
        let queue = Arc::new(Mutex::new(Queue {
            events: VecDeque::new(),
            missed: 0,
            waker: None,
            closed: subscribers.is_none(),
        }));
        if let Some(subscribers) = subscribers.as_mut() {
            subscribers.push(Arc::downgrade(&queue));
        }
        Subscription { queue }
    }

    /// Delivers `event` to every subscriber; a full queue drops its oldest event and counts it.
    pub(crate) fn publish(&self, event: &E) {
        let mut wakers = Vec::new();
        if let Some(subscribers) = lock(&self.subscribers).as_mut() {
            subscribers.retain(|weak| {
                let Some(queue) = weak.upgrade() else {
                    return false;
                };
                let mut queue = lock(&queue);
                if queue.events.len() >= self.capacity {
                    queue.events.pop_front();
                    queue.missed += 1;
                }
                queue.events.push_back(event.clone());
                wakers.extend(queue.waker.take());
                true
            });
        }
        // Woken with no lock held.
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Ends every subscription, present and future: each receives what is queued, then `None`.
    pub(crate) fn close(&self) {
        let mut wakers = Vec::new();
        let subscribers = lock(&self.subscribers).take().unwrap_or_default();
        for weak in subscribers {
            if let Some(queue) = weak.upgrade() {
                let mut queue = lock(&queue);
                queue.closed = true;
                wakers.extend(queue.waker.take());
            }
        }
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// A subscriber's queue as the hub holds it: dropped with the subscriber.
type QueueRef<E> = Weak<Mutex<Queue<E>>>;

#[derive(Debug)]
struct Queue<E> {
    events: VecDeque<E>,
    missed: u64,
    waker: Option<Waker>,
    closed: bool,
}

/// One subscriber's queue.
#[derive(Debug)]
pub(crate) struct Subscription<E> {
    queue: Arc<Mutex<Queue<E>>>,
}

/// What a subscription yields next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<E> {
    Event(E),
    /// Events were dropped because the queue was full.
    Missed(u64),
    Closed,
}

impl<E> Subscription<E> {
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Next<E>> {
        let mut queue = lock(&self.queue);
        match self.take(&mut queue) {
            Some(next) => Poll::Ready(next),
            None => {
                queue.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    pub(crate) fn try_next(&self) -> Option<Next<E>> {
        let mut queue = lock(&self.queue);
        self.take(&mut queue)
    }

    fn take(&self, queue: &mut Queue<E>) -> Option<Next<E>> {
        if queue.missed > 0 {
            return Some(Next::Missed(std::mem::take(&mut queue.missed)));
        }
        if let Some(event) = queue.events.pop_front() {
            return Some(Next::Event(event));
        }
        queue.closed.then_some(Next::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    #[test]
    fn a_reply_reaches_the_receiver_and_a_dropped_sender_reads_as_none() {
        let (tx, rx) = reply::<u32>();
        tx.send(7);
        assert_eq!(block_on(rx), Some(7));
        let (tx, rx) = reply::<u32>();
        drop(tx);
        assert_eq!(block_on(rx), None);
    }

    #[test]
    fn an_abandoned_request_is_cancelled_by_exactly_one_side() {
        // The caller leaves before the driver submits: the driver sees it.
        let (tx, rx) = reply::<u32>();
        assert_eq!(rx.abandon(), None);
        assert!(!tx.set_request(RequestId::from_u64(1)));
        // The driver submits first: the caller's abandon returns the id to cancel.
        let (tx, rx) = reply::<u32>();
        assert!(tx.set_request(RequestId::from_u64(2)));
        assert_eq!(rx.abandon(), Some(RequestId::from_u64(2)));
        assert!(tx.is_abandoned());
    }

    #[test]
    fn a_full_subscription_drops_the_oldest_and_says_how_many() {
        let hub = Hub::new(2);
        let sub = hub.subscribe();
        for n in 0..5 {
            hub.publish(&n);
        }
        assert_eq!(sub.try_next(), Some(Next::Missed(3)));
        assert_eq!(sub.try_next(), Some(Next::Event(3)));
        assert_eq!(sub.try_next(), Some(Next::Event(4)));
        assert_eq!(sub.try_next(), None);
        hub.close();
        assert_eq!(sub.try_next(), Some(Next::Closed));
    }

    #[test]
    fn a_subscription_made_after_close_ends_at_once() {
        let hub = Hub::<u32>::new(2);
        hub.close();
        let late = hub.subscribe();
        assert_eq!(late.try_next(), Some(Next::Closed));
        hub.publish(&1);
        assert_eq!(late.try_next(), Some(Next::Closed));
    }

    #[test]
    fn a_closed_inbox_hands_commands_back() {
        let inbox = Inbox::new();
        inbox.push(1).unwrap();
        assert_eq!(inbox.close(), VecDeque::from([1]));
        assert_eq!(inbox.push(2), Err(2));
    }
}
