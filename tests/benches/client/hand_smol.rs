//! B and C on smol: smol's tasks and `Async` socket (shared by the writer and the reader),
//! and the same hand-offs as on tokio: tokio's `sync` channels need no tokio runtime, and
//! cost one allocation per request (the oneshot), where async-channel's would allocate a
//! listener per wait. C's timeout is smol's `Timer` (async-io's timer wheel).

use super::*;
use smol::Async;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Bytes>;
type Stream = Arc<Async<TcpStream>>;

pub(super) struct Tasks {
    writer: smol::Task<()>,
    reader: smol::Task<()>,
}

impl Tasks {
    /// Once the callers' queue is dropped: the writer ends (closing the socket's write
    /// side), then the reader is stopped.
    pub(super) async fn finish(self) {
        self.writer.await;
        let _ = self.reader.cancel().await;
    }
}

/// B: no timeouts, the pending map owned by the reader.
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

pub(super) async fn connect(addr: SocketAddr) -> io::Result<(Plain, Tasks)> {
    let stream = open(addr).await?;
    let (queue, queued) = mpsc::unbounded_channel::<(Bytes, Reply)>();
    let (register, mut registered) = mpsc::unbounded_channel::<(u64, Reply)>();
    let mut next_id = 0u64;
    let writer = smol::spawn(write_loop(
        Arc::clone(&stream),
        queued,
        move |(payload, reply), batch| {
            LengthPrefixed::frame_into(next_id, &payload, batch).expect("fits");
            let _ = register.send((next_id, reply));
            next_id += 1;
        },
    ));
    let mut pending: HashMap<u64, Reply> = HashMap::with_capacity(1024);
    let reader = smol::spawn(read_loop(stream, move |id, payload| {
        let reply = pending.remove(&id).or_else(|| {
            while let Ok((id, reply)) = registered.try_recv() {
                pending.insert(id, reply);
            }
            pending.remove(&id)
        });
        if let Some(reply) = reply {
            let _ = reply.send(payload);
        }
    }));
    Ok((Plain { queue }, Tasks { writer, reader }))
}

/// C: a timeout per call (smol's `Timer` raced against the answer), the pending map shared
/// behind a lock.
#[derive(Clone)]
pub(super) struct WithTimeouts {
    queue: mpsc::UnboundedSender<(u64, Bytes)>,
    pending: Arc<Mutex<HashMap<u64, Reply>>>,
    next_id: Arc<AtomicU64>,
}

impl Caller for WithTimeouts {
    async fn call(&self, payload: Bytes) -> Option<Bytes> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.pending.lock().expect("pending").insert(id, reply);
        self.queue.send((id, payload)).ok()?;
        let answered = async { Some(answer.await.ok()) };
        let timed_out = async {
            smol::Timer::after(TIMEOUT).await;
            None
        };
        match smol::future::or(answered, timed_out).await {
            Some(answer) => answer,
            None => {
                self.pending.lock().expect("pending").remove(&id);
                None
            }
        }
    }
}

pub(super) async fn connect_with_timeouts(addr: SocketAddr) -> io::Result<(WithTimeouts, Tasks)> {
    let stream = open(addr).await?;
    let (queue, queued) = mpsc::unbounded_channel::<(u64, Bytes)>();
    let pending = Arc::new(Mutex::new(HashMap::with_capacity(1024)));
    let writer = smol::spawn(write_loop(
        Arc::clone(&stream),
        queued,
        |(id, payload), batch| {
            LengthPrefixed::frame_into(id, &payload, batch).expect("fits");
        },
    ));
    let shared: Arc<Mutex<HashMap<u64, Reply>>> = Arc::clone(&pending);
    let reader = smol::spawn(read_loop(stream, move |id, payload| {
        let reply = shared.lock().expect("pending").remove(&id);
        if let Some(reply) = reply {
            let _ = reply.send(payload);
        }
    }));
    let caller = WithTimeouts {
        queue,
        pending,
        next_id: Arc::default(),
    };
    Ok((caller, Tasks { writer, reader }))
}

async fn open(addr: SocketAddr) -> io::Result<Stream> {
    let stream = Async::<TcpStream>::connect(addr).await?;
    stream.get_ref().set_nodelay(true)?;
    Ok(Arc::new(stream))
}

/// Frames whatever is queued into one buffer (`frame` appends one item) and writes it, until
/// the queue closes; then closes the socket's write side.
async fn write_loop<T>(
    stream: Stream,
    mut queued: mpsc::UnboundedReceiver<T>,
    mut frame: impl FnMut(T, &mut BytesMut),
) {
    let mut taken = Vec::with_capacity(256);
    let mut batch = BytesMut::with_capacity(CHUNK);
    while queued.recv_many(&mut taken, 256).await > 0 {
        for item in taken.drain(..) {
            frame(item, &mut batch);
        }
        if (&*stream).write_all(&batch).await.is_err() {
            return;
        }
        batch.clear();
    }
    let _ = stream.get_ref().shutdown(std::net::Shutdown::Write);
}

/// Reads and cuts answers, handing each to `answer`, until the stream ends.
async fn read_loop(stream: Stream, mut answer: impl FnMut(u64, Bytes)) {
    let codec = LengthPrefixed::default();
    let mut inbound = BytesMut::with_capacity(CHUNK);
    let mut chunk = vec![0; CHUNK];
    loop {
        let n = match (&*stream).read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        inbound.extend_from_slice(&chunk[..n]);
        while let Ok(Some((id, payload))) = codec.cut(&mut inbound) {
            answer(id, payload);
        }
    }
}
