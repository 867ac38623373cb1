//! B on smol: smol's tasks and `Async` socket (shared by the writer and the reader), and
//! the same hand-offs as B on tokio: tokio's `sync` channels need no tokio runtime, and
//! cost one allocation per request (the oneshot), where async-channel's would allocate a
//! listener per wait.

use super::*;
use smol::Async;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Bytes>;

pub(super) struct Tasks {
    writer: smol::Task<()>,
    reader: smol::Task<()>,
}

impl Tasks {
    pub(super) async fn finish(self) {
        self.writer.await;
        let _ = self.reader.cancel().await;
    }
}

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
    let stream = Arc::new(Async::<TcpStream>::connect(addr).await?);
    stream.get_ref().set_nodelay(true)?;
    let (queue, mut queued) = mpsc::unbounded_channel::<(Bytes, Reply)>();
    let (register, mut registered) = mpsc::unbounded_channel::<(u64, Reply)>();
    let write = Arc::clone(&stream);
    let writer = smol::spawn(async move {
        let mut taken = Vec::with_capacity(256);
        let mut batch = BytesMut::with_capacity(CHUNK);
        let mut next_id = 0u64;
        while queued.recv_many(&mut taken, 256).await > 0 {
            for (payload, reply) in taken.drain(..) {
                LengthPrefixed::frame_into(next_id, &payload, &mut batch).expect("fits");
                let _ = register.send((next_id, reply));
                next_id += 1;
            }
            if (&*write).write_all(&batch).await.is_err() {
                return;
            }
            batch.clear();
        }
        let _ = write.get_ref().shutdown(std::net::Shutdown::Write);
    });
    let reader = smol::spawn(async move {
        let codec = LengthPrefixed::default();
        let mut pending: HashMap<u64, Reply> = HashMap::with_capacity(1024);
        let mut inbound = BytesMut::with_capacity(CHUNK);
        let mut chunk = vec![0; CHUNK];
        loop {
            let n = match (&*stream).read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            inbound.extend_from_slice(&chunk[..n]);
            while let Ok(Some((id, payload))) = codec.cut(&mut inbound) {
                let reply = pending.remove(&id).or_else(|| {
                    while let Ok((id, reply)) = registered.try_recv() {
                        pending.insert(id, reply);
                    }
                    pending.remove(&id)
                });
                if let Some(reply) = reply {
                    let _ = reply.send(payload);
                }
            }
        }
    });
    Ok((Plain { queue }, Tasks { writer, reader }))
}
