//! What B and C do whatever runtime they run on: the callers' side, the writer's framing and
//! the reader's answering. `hand_tokio` and `hand_smol` add the tasks, the socket and, for C,
//! the timer.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

pub(super) type Reply = oneshot::Sender<Bytes>;

/// B: no timeouts; callers hand payload and reply slot to the writer.
#[derive(Clone)]
pub(super) struct Plain {
    queue: mpsc::UnboundedSender<(Bytes, Reply)>,
}

impl Caller for Plain {
    async fn call(&self, payload: Bytes) -> Option<Bytes> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((payload, reply)).ok()?;
        answer.await.ok()
    }
}

/// A hand-written client's parts: the callers' handle, the writer's queue and its `frame`
/// (appends one queued item to the batch), and the reader's `answer` (fills the reply of
/// the answer it cut).
pub(super) struct Parts<C, T, F, A> {
    pub(super) caller: C,
    pub(super) queued: mpsc::UnboundedReceiver<T>,
    pub(super) frame: F,
    pub(super) answer: A,
}

impl<C, T, F, A> Parts<C, T, F, A> {
    /// Starts the writer and the reader with the runtime's `run` (given the queue, `frame`
    /// and `answer`): the callers' handle and the tasks.
    pub(super) async fn start<K, R>(
        self,
        run: impl FnOnce(mpsc::UnboundedReceiver<T>, F, A) -> R,
    ) -> io::Result<(C, K)>
    where
        R: Future<Output = io::Result<K>>,
    {
        let tasks = run(self.queued, self.frame, self.answer).await?;
        Ok((self.caller, tasks))
    }
}

/// B's parts: each payload numbered and its reply passed on to the reader, which owns the
/// map of pending replies.
#[expect(
    clippy::type_complexity,
    reason = "the two closures' types are only nameable as impl Trait"
)]
pub(super) fn plain() -> Parts<
    Plain,
    (Bytes, Reply),
    impl FnMut((Bytes, Reply), &mut BytesMut) + Send + 'static,
    impl FnMut(u64, Bytes) + Send + 'static,
> {
    let (queue, queued) = mpsc::unbounded_channel();
    let (register, mut registered) = mpsc::unbounded_channel::<(u64, Reply)>();
    let mut next_id = 0u64;
    let frame = move |(payload, reply): (Bytes, Reply), batch: &mut BytesMut| {
        LengthPrefixed::frame_into(next_id, &payload, batch).expect("fits");
        let _ = register.send((next_id, reply));
        next_id += 1;
    };
    let mut pending: HashMap<u64, Reply> = HashMap::with_capacity(1024);
    let answer = move |id: u64, payload: Bytes| {
        let reply = pending.remove(&id).or_else(|| {
            while let Ok((id, reply)) = registered.try_recv() {
                pending.insert(id, reply);
            }
            pending.remove(&id)
        });
        if let Some(reply) = reply {
            let _ = reply.send(payload);
        }
    };
    Parts {
        caller: Plain { queue },
        queued,
        frame,
        answer,
    }
}

/// A hand-written client's writer and reader tasks, on whichever runtime.
pub(super) trait Finish {
    /// Once the callers' queue is dropped: the writer ends (closing the socket's write side),
    /// then the reader is stopped.
    fn finish(self) -> impl Future<Output = ()>;
}

/// How C bounds its wait for an answer on a runtime.
pub(super) trait Timeout: Clone + Send + Sync + 'static {
    /// The answer, or `None` once [`TIMEOUT`] has passed.
    fn within(
        &self,
        answer: oneshot::Receiver<Bytes>,
    ) -> impl Future<Output = Option<Result<Bytes, oneshot::error::RecvError>>> + Send;
}

/// C: B with a timeout on every call and the pending map shared behind a lock, filled by the
/// callers themselves.
#[derive(Clone)]
pub(super) struct WithTimeouts<T> {
    queue: mpsc::UnboundedSender<(u64, Bytes)>,
    pending: Arc<Mutex<HashMap<u64, Reply>>>,
    next_id: Arc<AtomicU64>,
    timeout: T,
}

impl<T: Timeout> Caller for WithTimeouts<T> {
    async fn call(&self, payload: Bytes) -> Option<Bytes> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.pending.lock().expect("pending").insert(id, reply);
        self.queue.send((id, payload)).ok()?;
        match self.timeout.within(answer).await {
            Some(answer) => answer.ok(),
            None => {
                self.pending.lock().expect("pending").remove(&id);
                None
            }
        }
    }
}

/// C's parts: callers number their payloads and file their replies themselves.
#[expect(
    clippy::type_complexity,
    reason = "the two closures' types are only nameable as impl Trait"
)]
pub(super) fn with_timeouts<T: Timeout>(
    timeout: T,
) -> Parts<
    WithTimeouts<T>,
    (u64, Bytes),
    impl FnMut((u64, Bytes), &mut BytesMut) + Send + 'static,
    impl FnMut(u64, Bytes) + Send + 'static,
> {
    let (queue, queued) = mpsc::unbounded_channel();
    let pending = Arc::new(Mutex::new(HashMap::with_capacity(1024)));
    let frame = |(id, payload): (u64, Bytes), batch: &mut BytesMut| {
        LengthPrefixed::frame_into(id, &payload, batch).expect("fits");
    };
    let shared: Arc<Mutex<HashMap<u64, Reply>>> = Arc::clone(&pending);
    let answer = move |id: u64, payload: Bytes| {
        let reply = shared.lock().expect("pending").remove(&id);
        if let Some(reply) = reply {
            let _ = reply.send(payload);
        }
    };
    let caller = WithTimeouts {
        queue,
        pending,
        next_id: Arc::default(),
        timeout,
    };
    Parts {
        caller,
        queued,
        frame,
        answer,
    }
}
