//! B and C on smol ([`hand`] has what they do; this, their tasks, socket and timer): smol's
//! tasks and `Async` socket (shared by the writer and the reader), with the same hand-offs as
//! on tokio: tokio's `sync` channels need no tokio runtime, and cost one allocation per
//! request (the oneshot), where async-channel's would allocate a listener per wait. C's
//! timeout is smol's `Timer` (async-io's timer wheel).

use super::*;
use hand::{Plain, Timeout, WithTimeouts};
use smol::Async;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

type Stream = Arc<Async<TcpStream>>;

pub(super) struct Tasks {
    writer: smol::Task<()>,
    reader: smol::Task<()>,
}

impl hand::Finish for Tasks {
    async fn finish(self) {
        self.writer.await;
        let _ = self.reader.cancel().await;
    }
}

/// smol's `Timer` raced against the answer.
#[derive(Clone)]
pub(super) struct SmolTimeout;

impl Timeout for SmolTimeout {
    async fn within(
        &self,
        answer: oneshot::Receiver<Bytes>,
    ) -> Option<Result<Bytes, oneshot::error::RecvError>> {
        let answered = async { Some(answer.await) };
        let timed_out = async {
            smol::Timer::after(TIMEOUT).await;
            None
        };
        smol::future::or(answered, timed_out).await
    }
}

/// B: no timeouts, the pending map owned by the reader.
pub(super) async fn connect(addr: SocketAddr) -> io::Result<(Plain, Tasks)> {
    hand::plain().start(|q, f, a| run(addr, q, f, a)).await
}

/// C: a timeout per call, the pending map shared behind a lock.
pub(super) async fn connect_with_timeouts(
    addr: SocketAddr,
) -> io::Result<(WithTimeouts<SmolTimeout>, Tasks)> {
    hand::with_timeouts(SmolTimeout)
        .start(|q, f, a| run(addr, q, f, a))
        .await
}

/// Connects and starts the writer and the reader.
async fn run<T: Send + 'static>(
    addr: SocketAddr,
    queued: mpsc::UnboundedReceiver<T>,
    frame: impl FnMut(T, &mut BytesMut) + Send + 'static,
    answer: impl FnMut(u64, Bytes) + Send + 'static,
) -> io::Result<Tasks> {
    let stream = Async::<TcpStream>::connect(addr).await?;
    stream.get_ref().set_nodelay(true)?;
    let stream = Arc::new(stream);
    let writer = smol::spawn(write_loop(Arc::clone(&stream), queued, frame));
    let reader = smol::spawn(read_loop(stream, answer));
    Ok(Tasks { writer, reader })
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
