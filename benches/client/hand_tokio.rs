//! B and C on tokio: the hand-written clients keepwire is measured against ([`hand`] has
//! what they do; this, their tasks, socket and timer).

use super::*;
use hand::{Plain, Timeout, WithTimeouts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub(super) struct Tasks {
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl hand::Finish for Tasks {
    async fn finish(self) {
        let _ = self.writer.await;
        self.reader.abort();
        let _ = self.reader.await;
    }
}

/// `tokio::time::timeout`.
#[derive(Clone)]
pub(super) struct TokioTimeout;

impl Timeout for TokioTimeout {
    async fn within(
        &self,
        answer: oneshot::Receiver<Bytes>,
    ) -> Option<Result<Bytes, oneshot::error::RecvError>> {
        tokio::time::timeout(TIMEOUT, answer).await.ok()
    }
}

/// B: no timeouts, the pending map owned by the reader.
pub(super) async fn connect(addr: SocketAddr) -> io::Result<(Plain, Tasks)> {
    hand::plain().start(|q, f, a| run(addr, q, f, a)).await
}

/// C: a timeout per call, the pending map shared behind a lock.
pub(super) async fn connect_with_timeouts(
    addr: SocketAddr,
) -> io::Result<(WithTimeouts<TokioTimeout>, Tasks)> {
    hand::with_timeouts(TokioTimeout)
        .start(|q, f, a| run(addr, q, f, a))
        .await
}

/// Connects and starts the writer (framing with `frame` whatever is queued into one buffer,
/// written at once) and the reader (cutting answers for `answer`).
async fn run<T: Send + 'static>(
    addr: SocketAddr,
    mut queued: mpsc::UnboundedReceiver<T>,
    mut frame: impl FnMut(T, &mut BytesMut) + Send + 'static,
    answer: impl FnMut(u64, Bytes) + Send + 'static,
) -> io::Result<Tasks> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let mut taken = Vec::with_capacity(256);
        let mut batch = BytesMut::with_capacity(CHUNK);
        while queued.recv_many(&mut taken, 256).await > 0 {
            for item in taken.drain(..) {
                frame(item, &mut batch);
            }
            if write_batch(&mut write, &mut batch).await.is_err() {
                return;
            }
        }
    });
    let reader = tokio::spawn(read_loop(read, answer));
    Ok(Tasks { writer, reader })
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
