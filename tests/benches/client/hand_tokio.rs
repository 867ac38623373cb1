//! B and C on tokio: the hand-written clients keepwire is measured against.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

type Reply = oneshot::Sender<Bytes>;

pub(super) struct Tasks {
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl Tasks {
    /// Once the callers' queue is dropped: the writer ends (closing the socket's write
    /// side), then the reader is stopped.
    pub(super) async fn finish(self) {
        let _ = self.writer.await;
        self.reader.abort();
        let _ = self.reader.await;
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
    let (read, mut write) = open(addr).await?;
    let (queue, mut queued) = mpsc::unbounded_channel::<(Bytes, Reply)>();
    let (register, mut registered) = mpsc::unbounded_channel::<(u64, Reply)>();
    let writer = tokio::spawn(async move {
        let mut taken = Vec::with_capacity(256);
        let mut batch = BytesMut::with_capacity(CHUNK);
        let mut next_id = 0u64;
        while queued.recv_many(&mut taken, 256).await > 0 {
            for (payload, reply) in taken.drain(..) {
                LengthPrefixed::frame_into(next_id, &payload, &mut batch).expect("fits");
                let _ = register.send((next_id, reply));
                next_id += 1;
            }
            if write_batch(&mut write, &mut batch).await.is_err() {
                return;
            }
        }
    });
    let reader = tokio::spawn(async move {
        let mut pending: HashMap<u64, Reply> = HashMap::with_capacity(1024);
        read_loop(read, |id, payload| {
            let reply = pending.remove(&id).or_else(|| {
                while let Ok((id, reply)) = registered.try_recv() {
                    pending.insert(id, reply);
                }
                pending.remove(&id)
            });
            if let Some(reply) = reply {
                let _ = reply.send(payload);
            }
        })
        .await;
    });
    Ok((Plain { queue }, Tasks { writer, reader }))
}

/// C: a timeout per call, the pending map shared behind a lock.
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
        match tokio::time::timeout(TIMEOUT, answer).await {
            Ok(Ok(answer)) => Some(answer),
            _ => {
                self.pending.lock().expect("pending").remove(&id);
                None
            }
        }
    }
}

pub(super) async fn connect_with_timeouts(addr: SocketAddr) -> io::Result<(WithTimeouts, Tasks)> {
    let (read, mut write) = open(addr).await?;
    let (queue, mut queued) = mpsc::unbounded_channel::<(u64, Bytes)>();
    let pending = Arc::new(Mutex::new(HashMap::with_capacity(1024)));
    let writer = tokio::spawn(async move {
        let mut taken = Vec::with_capacity(256);
        let mut batch = BytesMut::with_capacity(CHUNK);
        while queued.recv_many(&mut taken, 256).await > 0 {
            for (id, payload) in taken.drain(..) {
                LengthPrefixed::frame_into(id, &payload, &mut batch).expect("fits");
            }
            if write_batch(&mut write, &mut batch).await.is_err() {
                return;
            }
        }
    });
    let shared: Arc<Mutex<HashMap<u64, Reply>>> = Arc::clone(&pending);
    let reader = tokio::spawn(async move {
        read_loop(read, |id, payload| {
            let reply = shared.lock().expect("pending").remove(&id);
            if let Some(reply) = reply {
                let _ = reply.send(payload);
            }
        })
        .await;
    });
    let caller = WithTimeouts {
        queue,
        pending,
        next_id: Arc::default(),
    };
    Ok((caller, Tasks { writer, reader }))
}

async fn open(addr: SocketAddr) -> io::Result<(OwnedReadHalf, OwnedWriteHalf)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream.into_split())
}

async fn write_batch(write: &mut OwnedWriteHalf, batch: &mut BytesMut) -> io::Result<()> {
    write.write_all(batch).await?;
    batch.clear();
    Ok(())
}

async fn read_loop(mut read: OwnedReadHalf, mut answer: impl FnMut(u64, Bytes)) {
    let codec = LengthPrefixed::default();
    let mut inbound = BytesMut::with_capacity(CHUNK);
    loop {
        if inbound.capacity() - inbound.len() < CHUNK / 4 {
            inbound.reserve(CHUNK);
        }
        match read.read_buf(&mut inbound).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while let Ok(Some((id, payload))) = codec.cut(&mut inbound) {
            answer(id, payload);
        }
    }
}
