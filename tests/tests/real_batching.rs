//! The callers a round answers send their next requests in one write, and a round answers a
//! slice of a batch, not all of it. After a round that answered several callers the driver
//! yields, so they run before its next round; it used to loop on, and on an executor that
//! runs a just-woken task next (tokio's multi-thread scheduler and its LIFO slot) each
//! caller's send then woke the driver straight into a round of its own: one write per
//! request. And a round hands the pool about half of a connection's requests in flight,
//! leaving the rest of a batch of answers buffered for the next round, so the first callers'
//! next requests are written while the rest are still being answered (before, the whole batch
//! was answered first, and the peer sat idle meanwhile).
//!
//! A lone request needs no batch, and the driver does not yield for it: yielding costs a poll,
//! and on tokio a wake of a parked worker. Nor does it go round again when nothing is left
//! for a round: the tests at the end check the rounds it must not skip (answers left
//! buffered when a slice runs out, commands beyond a round's batches).
//!
//! A write that fails hands its requests back untouched: they end `Sent::Nothing`.
//!
//! Deterministic setup: tokio's multi-thread scheduler with one worker (the LIFO slot and no
//! stealing), and a peer that answers only once a whole batch of requests is in, with one
//! write, so each batch of answers reaches the driver in one read.

use std::future::{Future, poll_fn};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keepwire_driver::{
    BoxFuture, Client, ClientBuilder, HandshakeIo, IoStream, LengthPrefixed, NodeId,
    PreparedSocket, ResolveError, Runtime, SendError, SocketRef, Target, Timer,
};
use keepwire_proto::{CloseReason, Failure, Sent};
use keepwire_tests::peers::{Behaviour, Peer, batch_echo};
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;

const ROUNDS: usize = 4;
/// 16 KiB requests queued at once under a failing write.
const QUEUED: usize = 12;
const PAYLOAD: &[u8] = b"a request of 32 bytes, padded..";

#[test]
fn the_callers_a_round_answers_send_their_next_requests_in_one_write() {
    // Two callers are already a batch worth yielding for, and fewer than a slice (at least
    // four); eight are answered four at a time; 64 and 12 half at a time, rounded up.
    for (callers, slices) in [(2, &[2][..]), (8, &[4, 4]), (12, &[6, 6]), (64, &[32, 32])] {
        callers_send_each_slice_in_one_write(callers, slices);
    }
}

/// `callers` send `ROUNDS` requests each to a peer that answers a whole batch at once; each
/// batch's answers are handed out in `slices`, and the callers of each slice send their next
/// requests in one write.
fn callers_send_each_slice_in_one_write(callers: usize, slices: &[usize]) {
    assert_eq!(slices.iter().sum::<usize>(), callers);
    let peer = batch_echo(callers);
    let tokio = one_worker();
    let runtime = CountingRuntime::on(&tokio);
    let (client, node) = client_of(&runtime, peer);
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let client = client.clone();
            tokio.spawn(async move {
                for _ in 0..ROUNDS {
                    let answer = client
                        .send(Target::Node(node), PAYLOAD, Duration::from_secs(10))
                        .await;
                    assert_eq!(answer.as_deref(), Ok(PAYLOAD));
                }
            })
        })
        .collect();
    tokio.block_on(async {
        for task in tasks {
            task.await.unwrap();
        }
        client.shutdown().await;
    });

    // Bytes per write, in requests. The first round's requests go out as the callers start;
    // every later round is sent by callers the driver answered in one round, a slice of the
    // batch at a time.
    let frame = LengthPrefixed::frame(0, PAYLOAD).unwrap().len();
    let writes = runtime.writes.lock().unwrap().clone();
    let requests: Vec<usize> = writes.iter().map(|bytes| bytes / frame).collect();
    assert_eq!(
        requests.iter().sum::<usize>(),
        callers * ROUNDS,
        "{requests:?}"
    );
    let mut sent = 0;
    let first_round_writes = requests
        .iter()
        .take_while(|n| {
            sent += **n;
            sent <= callers
        })
        .count();
    assert_eq!(
        &requests[first_round_writes..],
        slices.repeat(ROUNDS - 1),
        "every round after the first in one write per slice: {requests:?}"
    );
}

/// Large frames go out in large writes: twelve 16 KiB requests queued while the connection is
/// set up leave in two `writev`s, three frames under the first hand-out's 64 KiB cap and the
/// other nine under the cap their size sets (up to 256 KiB). A client with a handshake hook,
/// which may install a stream that holds what it is given (TLS), keeps the 64 KiB cap: four
/// writes of three.
#[test]
fn large_frames_go_out_in_large_writes_unless_a_hook_may_hold_them() {
    for (hook, frames_per_write) in [(false, &[3, 9][..]), (true, &[3, 3, 3, 3])] {
        queued_large_frames_go_out_in(hook, frames_per_write);
    }
}

fn queued_large_frames_go_out_in(hook: bool, frames_per_write: &[usize]) {
    const CALLERS: usize = 12;
    let payload = Bytes::from(vec![b'x'; 16 * 1024]);
    let peer = batch_echo(CALLERS);
    let tokio = one_worker();
    let runtime = CountingRuntime::on(&tokio);
    let mut config = test_config();
    // Room in the kernel for the whole batch, so that every write moves all it is given.
    config.socket.send_buffer_size = Some(4 << 20);
    let mut builder = ClientBuilder::new(config).node(peer);
    if hook {
        builder = builder.handshake(|io: HandshakeIo| async move { Ok(io) });
    }
    let client = builder.build(runtime.clone()).unwrap();
    let node = client.initial_nodes()[0];
    // One task queues every request in one poll, on the driver's only worker: the driver
    // takes them all in one round, before its connection is ready.
    let expected = payload.clone();
    let sends = tokio.spawn(async move {
        let send = || client.send(Target::Node(node), payload.clone(), Duration::from_secs(10));
        let answers = all_of((0..CALLERS).map(|_| Box::pin(send())).collect()).await;
        client.shutdown().await;
        answers
    });
    let answers = tokio.block_on(sends).unwrap();
    assert_eq!(answers.len(), CALLERS);
    assert!(
        answers
            .iter()
            .all(|answer| answer.as_ref() == Ok(&expected))
    );

    let frame = LengthPrefixed::frame(0, &expected).unwrap().len();
    let writes = runtime.writes.lock().unwrap().clone();
    let frames: Vec<usize> = writes.iter().map(|bytes| bytes / frame).collect();
    assert_eq!(
        frames, frames_per_write,
        "frames per write (hook: {hook}): {writes:?}"
    );
}

/// Not one byte of a write that fails reached the kernel, and the requests it was handed end
/// so: `Sent::Nothing` (safe to send again), or with `retry_unsent` sent again on the next
/// connection and answered. A failed write used to leave its hand-out unreported, which ends
/// every frame of it `Sent::Unknown`: with hand-outs of up to 256 KiB, up to fifteen 16 KiB
/// requests that lost their safe retry though the kernel took none of their bytes.
#[test]
fn the_requests_a_failed_write_was_given_end_with_nothing_sent() {
    for retry_unsent in [false, true] {
        let (nothing, unknown, answered) = a_write_fails_under_requests(false, retry_unsent);
        assert_eq!(unknown, 0);
        if retry_unsent {
            assert_eq!(answered, QUEUED, "every request sent again and answered");
        } else {
            // The connection's loss ends the queued requests too (untouched, also `Nothing`).
            assert_eq!(nothing, QUEUED);
        }
    }
}

/// A stream a handshake hook installed may encode what it is given, and may have pushed part
/// of it to the kernel before its write failed (tokio-rustls does): the requests of that
/// hand-out (three, under the least cap) end `Sent::Unknown`, the untouched rest `Nothing`.
#[test]
fn the_requests_a_failed_write_of_a_hooks_stream_was_given_end_unknown() {
    let (nothing, unknown, answered) = a_write_fails_under_requests(true, false);
    assert_eq!((nothing, unknown, answered), (QUEUED - 3, 3, 0));
}

/// Twelve 16 KiB requests queued in one poll on a connected client whose next write fails (a
/// reset, as the kernel reports one, moving nothing): how many ended `Sent::Nothing`, how
/// many `Sent::Unknown`, and how many were answered.
fn a_write_fails_under_requests(hook: bool, retry_unsent: bool) -> (usize, usize, usize) {
    let payload = Bytes::from(vec![b'x'; 16 * 1024]);
    let peer = Peer::start(Behaviour::Echo);
    let tokio = one_worker();
    let runtime = CountingRuntime::on(&tokio);
    let mut config = test_config();
    config.retry_unsent = retry_unsent;
    let mut builder = ClientBuilder::new(config).node(peer.addr());
    if hook {
        builder = builder.handshake(|io: HandshakeIo| async move { Ok(io) });
    }
    let client = builder.build(runtime.clone()).unwrap();
    let node = client.initial_nodes()[0];
    let fail_next_write = Arc::clone(&runtime.fail_next_write);
    let expected = payload.clone();
    let sends = tokio.spawn(async move {
        let send = || client.send(Target::Node(node), payload.clone(), Duration::from_secs(10));
        assert_eq!(send().await.as_ref(), Ok(&payload), "connected");
        // The next write is the one of the first hand-out of these requests.
        fail_next_write.store(true, Ordering::Relaxed);
        let answers = all_of((0..QUEUED).map(|_| Box::pin(send())).collect()).await;
        client.shutdown().await;
        answers
    });
    let answers = tokio.block_on(sends).unwrap();
    assert!(
        !runtime.fail_next_write.load(Ordering::Relaxed),
        "no write was made to fail"
    );
    let (mut nothing, mut unknown, mut answered) = (0, 0, 0);
    for answer in &answers {
        match answer {
            Ok(echo) => {
                assert_eq!(echo, &expected);
                answered += 1;
            }
            Err(SendError::ConnectionLost {
                cause: CloseReason::Io(Failure::Reset),
                sent,
                retried: false,
            }) => match sent {
                Sent::Nothing => nothing += 1,
                Sent::Unknown => unknown += 1,
                other => panic!("hook: {hook}, retry_unsent: {retry_unsent}: {other:?}"),
            },
            other => panic!("hook: {hook}, retry_unsent: {retry_unsent}: {other:?}"),
        }
    }
    let connections = if retry_unsent { 2 } else { 1 };
    assert_eq!(peer.accepted(), connections);
    (nothing, unknown, answered)
}

/// Polls every future in one task until all are done (so that whatever they queue in their
/// first poll, they queue together); their outputs in the order they finished.
async fn all_of<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let mut outputs = Vec::new();
    poll_fn(|cx| {
        futures.retain_mut(|future| match Pin::new(&mut *future).poll(cx) {
            Poll::Ready(output) => {
                outputs.push(output);
                false
            }
            Poll::Pending => true,
        });
        if futures.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs
}

#[test]
fn a_lone_callers_request_goes_straight_through_the_driver() {
    const REQUESTS: u64 = 200;
    let peer = batch_echo(1);
    let tokio = one_worker();
    let runtime = CountingRuntime::on(&tokio);
    let (client, node) = client_of(&runtime, peer);
    // The caller runs on the worker, beside the driver (as the batch test's callers do), so
    // that the two take turns on one thread: from the test's own thread, its sends and the
    // driver's rounds could interleave as the machine's load has it.
    let counting = runtime.clone();
    let caller = tokio.spawn(async move {
        let runtime = counting;
        let send = || client.send(Target::Node(node), PAYLOAD, Duration::from_secs(10));
        assert_eq!(send().await.as_deref(), Ok(PAYLOAD)); // connected and warm
        let polls = runtime.polls.load(Ordering::Relaxed);
        let reads = runtime.reads.load(Ordering::Relaxed);
        let yields = runtime.self_wakes.load(Ordering::Relaxed);
        let read_polls = runtime.read_polls.load(Ordering::Relaxed);
        for _ in 0..REQUESTS {
            assert_eq!(send().await.as_deref(), Ok(PAYLOAD));
        }
        let polls = runtime.polls.load(Ordering::Relaxed) - polls;
        let reads = runtime.reads.load(Ordering::Relaxed) - reads;
        let yields = runtime.self_wakes.load(Ordering::Relaxed) - yields;
        let read_polls = runtime.read_polls.load(Ordering::Relaxed) - read_polls;
        // Quiet now: a driver that went round without end (a follow-up that never clears)
        // would be polled on and on.
        let quiet = runtime.polls.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let quiet = runtime.polls.load(Ordering::Relaxed) - quiet;
        client.shutdown().await;
        (polls, reads, yields, read_polls, quiet)
    });
    let (polls, reads, yields, read_polls, quiet) = tokio.block_on(caller).unwrap();
    assert!(
        quiet <= 2,
        "{quiet} driver polls in 200 ms with nothing to do"
    );
    // The driver does not yield for a lone answer. (Here the caller runs on the driver's
    // worker, so a yield costs no extra poll and only this count shows it; from another
    // thread it cost about two more polls per request, and on tokio a wake of a parked
    // worker.)
    assert!(
        yields <= REQUESTS / 10,
        "the driver yielded {yields} times for {REQUESTS} requests one at a time"
    );
    // One poll takes the request and writes it, one reads its answer. A driver that yielded
    // after every round that moved would take four (each yield one more), and on tokio each
    // yield wakes a parked worker.
    assert!(
        polls <= 2 * REQUESTS + REQUESTS / 10,
        "{polls} driver polls for {REQUESTS} requests one at a time"
    );
    // One round per poll: the one that takes the request and writes it, reading nothing (the
    // socket has not woken the driver), then the one that reads the answer and reads again
    // until the socket would block: two reads per request. Reading every open connection in
    // every round made it three, and a round after each (the driver used to go round until
    // one found nothing, though every source had the waker already) five.
    assert!(
        read_polls <= 2 * REQUESTS + REQUESTS / 10,
        "{read_polls} reads asked of the socket for {REQUESTS} requests one at a time"
    );
    // The clock is read about once per poll: by the round that moves, not by the round after
    // it that only finds every source pending (its timer armed by then). A read per round was
    // two per poll.
    assert!(
        reads <= polls + REQUESTS / 10,
        "{reads} clock reads in {polls} driver polls for {REQUESTS} requests"
    );
}

/// A round reads only the connections whose sockets woke the driver: requests to one node
/// cost no reads of the others' connections, open and idle beside it. Every connection of a
/// client used to be read in every round; a hand-written client with a reader task per
/// connection never touches a quiet one.
#[test]
fn idle_connections_are_not_read_while_another_is_busy() {
    // Nine connections: their read wakes list them for the driver.
    idle_connections_are_not_read_beside_a_busy_one(8);
}

/// The same with four connections: a driver with at most eight connection slots has their
/// read wakes set a flag instead of listing them, and looks at every connection's mark; it
/// still reads only the one whose mark is set.
#[test]
fn idle_connections_are_not_read_in_a_client_with_few() {
    idle_connections_are_not_read_beside_a_busy_one(3);
}

fn idle_connections_are_not_read_beside_a_busy_one(idle: usize) {
    const REQUESTS: u64 = 200;
    let peers: Vec<SocketAddr> = (0..=idle).map(|_| batch_echo(1)).collect();
    let tokio = one_worker();
    let runtime = CountingRuntime::on(&tokio);
    let client = ClientBuilder::new(test_config())
        .nodes(peers)
        .build(runtime.clone())
        .unwrap();
    let counting = runtime.clone();
    let caller = tokio.spawn(async move {
        let send = |node| client.send(Target::Node(node), PAYLOAD, Duration::from_secs(10));
        for &node in client.initial_nodes() {
            assert_eq!(send(node).await.as_deref(), Ok(PAYLOAD)); // each one open
        }
        let busy = client.initial_nodes()[0];
        let read_polls = counting.read_polls.load(Ordering::Relaxed);
        for _ in 0..REQUESTS {
            assert_eq!(send(busy).await.as_deref(), Ok(PAYLOAD));
        }
        let read_polls = counting.read_polls.load(Ordering::Relaxed) - read_polls;
        // The idle ones still answer (each was left with its read waker registered).
        for &node in &client.initial_nodes()[1..] {
            assert_eq!(send(node).await.as_deref(), Ok(PAYLOAD));
        }
        client.shutdown().await;
        read_polls
    });
    let read_polls = tokio.block_on(caller).unwrap();
    // Two reads per request, as with no other connection open (the lone-caller test): the
    // answer and the read that finds the socket empty. Reading every connection in each
    // of a request's two rounds was 19 per request with nine connections.
    assert!(
        read_polls <= 2 * REQUESTS + REQUESTS / 10,
        "{read_polls} reads asked of the sockets for {REQUESTS} requests to one of {} nodes",
        idle + 1
    );
}

/// A client of the one node at `addr`, on `runtime`.
fn client_of(runtime: &Arc<CountingRuntime>, addr: SocketAddr) -> (Client, NodeId) {
    let client = ClientBuilder::new(test_config())
        .node(addr)
        .build(runtime.clone())
        .unwrap();
    let node = client.initial_nodes()[0];
    (client, node)
}

/// tokio's multi-thread scheduler with one worker: its LIFO slot, and no stealing.
fn one_worker() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// `inner`, with every stream it connects recording the bytes of each write that moved any,
/// and the polls of the tasks it spawns (the driver's: the one task a client spawns) counted,
/// and the wakes such a task gives itself while it is being polled (a yield).
#[derive(Debug)]
struct CountingRuntime {
    inner: Arc<dyn Runtime>,
    writes: Arc<Mutex<Vec<usize>>>,
    polls: Arc<AtomicU64>,
    self_wakes: Arc<AtomicU64>,
    /// Clock reads from inside the driver's task.
    reads: AtomicU64,
    /// Reads asked of the connections' streams, including those that found nothing.
    read_polls: Arc<AtomicU64>,
    /// Set: the next write on any of its streams fails with a reset, moving nothing.
    fail_next_write: Arc<AtomicBool>,
}

impl CountingRuntime {
    fn on(tokio: &tokio::runtime::Runtime) -> Arc<Self> {
        Arc::new(Self {
            inner: Arc::new(TokioRuntime::from_handle(tokio.handle().clone())),
            writes: Arc::default(),
            polls: Arc::default(),
            self_wakes: Arc::default(),
            reads: AtomicU64::new(0),
            read_polls: Arc::default(),
            fail_next_write: Arc::default(),
        })
    }
}

/// A future whose polls are counted, and the wakes it gives itself during them.
struct CountPolls {
    future: BoxFuture<'static, ()>,
    polls: Arc<AtomicU64>,
    self_wakes: Arc<AtomicU64>,
}

/// The waker a [`CountPolls`] hands its future for one poll: it counts the wakes that come
/// while that poll runs, and passes every wake on.
struct SelfWakes {
    inner: Waker,
    polling: AtomicBool,
    count: Arc<AtomicU64>,
}

impl Wake for SelfWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::Relaxed) {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.wake_by_ref();
    }
}

impl Future for CountPolls {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let wakes = Arc::new(SelfWakes {
            inner: cx.waker().clone(),
            polling: AtomicBool::new(true),
            count: Arc::clone(&self.self_wakes),
        });
        let waker = Waker::from(Arc::clone(&wakes));
        let polled = self.future.as_mut().poll(&mut Context::from_waker(&waker));
        wakes.polling.store(false, Ordering::Relaxed);
        polled
    }
}

impl Runtime for CountingRuntime {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn now_in_task(&self) -> Instant {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.now_in_task()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        self.inner.new_timer(deadline)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        self.inner.spawn(Box::pin(CountPolls {
            future,
            polls: Arc::clone(&self.polls),
            self_wakes: Arc::clone(&self.self_wakes),
        }));
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        let connecting = self.inner.connect(socket, addr);
        let writes = Arc::clone(&self.writes);
        let read_polls = Arc::clone(&self.read_polls);
        let fail_next_write = Arc::clone(&self.fail_next_write);
        Box::pin(async move {
            let stream = connecting.await?;
            Ok(Box::new(CountedStream {
                stream,
                writes,
                read_polls,
                fail_next_write,
            }) as Box<dyn IoStream>)
        })
    }

    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.inner.resolve(host, port)
    }
}

#[derive(Debug)]
struct CountedStream {
    stream: Box<dyn IoStream>,
    writes: Arc<Mutex<Vec<usize>>>,
    read_polls: Arc<AtomicU64>,
    fail_next_write: Arc<AtomicBool>,
}

impl CountedStream {
    fn count(&self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            self.writes.lock().unwrap().push(n);
        }
        written
    }
}

impl IoStream for CountedStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.read_polls.fetch_add(1, Ordering::Relaxed);
        self.stream.poll_read(cx, buf)
    }

    fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        limit: usize,
        scratch: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.read_polls.fetch_add(1, Ordering::Relaxed);
        self.stream.poll_read_buf(cx, buf, limit, scratch)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = self.stream.poll_write(cx, buf);
        self.count(written)
    }

    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.fail_next_write.swap(false, Ordering::Relaxed) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        let written = self.stream.poll_write_vectored(cx, bufs);
        self.count(written)
    }

    fn held(&self) -> usize {
        self.stream.held()
    }

    fn socket(&self) -> SocketRef<'_> {
        self.stream.socket()
    }
}

/// Responses left buffered when a round's slice runs out are decoded by the next round of the
/// same poll, even when the slice went to answers nobody waits for any more (so no caller was
/// answered and the driver does not yield), and no new byte or timer will wake it.
#[test]
fn answers_left_buffered_behind_a_slice_of_late_ones_are_not_kept_waiting() {
    let peer = batch_echo(8);
    let tokio = one_worker();
    let runtime = CountingRuntime::on(&tokio);
    // No deadline of the connection's within seconds (the test config's setup deadline, say),
    // so that only the requests' own could wake a driver that left them buffered.
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(20);
    config.setup_timeout_max = Duration::from_secs(20);
    config.write_timeout = Duration::from_secs(20);
    let client = ClientBuilder::new(config)
        .node(peer)
        .build(runtime.clone())
        .unwrap();
    let node = client.initial_nodes()[0];
    let elapsed = tokio.block_on(async move {
        // Four callers give up before the peer answers (it waits for eight requests): their
        // answers will come first, to requests that have ended.
        let mut gave_up = Vec::new();
        for _ in 0..4 {
            let client = client.clone();
            gave_up.push(tokio::spawn(async move {
                let send = client.send(Target::Node(node), PAYLOAD, Duration::from_secs(10));
                tokio::time::timeout(Duration::from_millis(100), send).await
            }));
        }
        for caller in gave_up {
            assert!(
                caller.await.unwrap().is_err(),
                "the peer answers only eight at once"
            );
        }
        // Four more: the peer answers all eight in one write, the driver reads them in one
        // read, and its slice (4) is spent on the four late answers.
        let start = Instant::now();
        let mut waiting = Vec::new();
        for _ in 0..4 {
            let client = client.clone();
            waiting.push(tokio::spawn(async move {
                client
                    .send(Target::Node(node), PAYLOAD, Duration::from_secs(10))
                    .await
            }));
        }
        for caller in waiting {
            assert_eq!(caller.await.unwrap().as_deref(), Ok(PAYLOAD));
        }
        let elapsed = start.elapsed();
        client.shutdown().await;
        elapsed
    });
    // Left buffered, they would wait for the next wake-up: the requests' own deadlines, 10 s.
    assert!(
        elapsed < Duration::from_secs(3),
        "the answers behind the late ones took {elapsed:?}"
    );
}

/// More commands than a round takes (four batches of 256) are all run: the round after takes
/// the rest. The inbox holds no waker once it has handed out commands, so nothing else would
/// bring the driver back to them; commands that need no I/O (counters) leave no socket to
/// wake it either.
#[test]
fn more_commands_than_a_round_takes_are_all_run() {
    const CALLS: usize = 1_100;
    let peer = batch_echo(1);
    // current_thread: a woken task goes to the back of the queue (no LIFO slot), so the
    // callers spawned below all run, and queue their command, before the driver runs again.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = CountingRuntime::on(&tokio);
    let (client, _node) = client_of(&runtime, peer);
    tokio.block_on(async move {
        let callers = tokio::spawn({
            let client = client.clone();
            async move {
                let calls: Vec<_> = (0..CALLS)
                    .map(|_| {
                        let client = client.clone();
                        tokio::spawn(async move { client.counters().await })
                    })
                    .collect();
                for call in calls {
                    assert!(call.await.unwrap().is_ok());
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(5), callers)
            .await
            .expect("every command run")
            .unwrap();
        client.shutdown().await;
    });
}
