//! The driver reads only the connections whose streams woke it: each one's read waker puts it
//! on a bounded list (`adapters/driver/src/driver/wake.rs`). When more connections wake than
//! the list holds before the driver runs, the ones left off must still be read: the list says
//! it overflowed, and the next round looks at every open connection's mark.
//!
//! Deterministic, with no socket traffic at all: the runtime's connect hands out in-memory
//! streams that echo what is written to them, and hold the read wake-ups back while a gate is
//! closed. With every echo buffered, the test opens the gate and wakes them all from its own
//! task on a current_thread runtime, where the driver cannot run in between.
//!
//! The driver keeps its task's waker from the first poll and wakes it by reference; a poll
//! with a waker that would wake something else switches it to an `AtomicWaker` for good. The
//! second test runs it under an executor that gives every poll a new waker, over real sockets
//! on tokio's multi-thread runtime, where wakes come from other threads.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use keepwire_driver::{
    BoxFuture, ClientBuilder, IoStream, NodeId, PreparedSocket, ResolveError, Runtime, SocketRef,
    Target, Timer,
};
use keepwire_tests::memory::{Echo, InMemory};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;

/// More connections than the driver's list of woken ones holds (512).
const CONNECTIONS: u16 = 600;
const PAYLOAD: &[u8] = b"a request of 32 bytes, padded..";

#[test]
fn connections_that_woke_while_the_list_was_full_are_all_read() {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gate = Arc::new(Gate::default());
    let held = Arc::clone(&gate);
    let inner = Arc::new(TokioRuntime::from_handle(tokio.handle().clone()));
    let runtime = Arc::new(InMemory::new(inner, false, move |socket| {
        Box::new(EchoStream {
            socket,
            echo: Echo::default(),
            gate: Arc::clone(&held),
        })
    }));
    // Never connected to (the runtime's connect makes no connection): loopback, for form.
    let addrs = (0..CONNECTIONS).map(|i| SocketAddr::from(([127, 0, 0, 1], 20_000 + i)));
    let client = ClientBuilder::new(test_config())
        .nodes(addrs)
        .build(runtime)
        .unwrap();
    let nodes = client.initial_nodes().to_vec();
    let (answered, elapsed) = tokio.block_on(async move {
        let send_to = |nodes: &[NodeId]| {
            nodes
                .iter()
                .map(|&node| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let send = client.send(Target::Node(node), PAYLOAD, Duration::from_secs(3));
                        send.await.is_ok_and(|answer| answer == PAYLOAD)
                    })
                })
                .collect::<Vec<_>>()
        };
        // Every connection open and answered once (wake-ups pass straight through), so each
        // now waits on a read with its waker registered. A hundred at a time: new connections
        // are listed too, and this is not where the list is to overflow.
        for some in nodes.chunks(100) {
            for sent in send_to(some) {
                assert!(sent.await.unwrap(), "an opening request failed");
            }
        }
        // Gate closed: one more request on every connection, written and echoed, and every
        // read wake-up held back.
        gate.open.store(false, Ordering::SeqCst);
        let sends = send_to(&nodes);
        let started = Instant::now();
        while gate.held.lock().unwrap().len() < usize::from(CONNECTIONS) {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "only {} of {CONNECTIONS} requests written",
                gate.held.lock().unwrap().len()
            );
            tokio::task::yield_now().await;
        }
        // All at once, before the driver runs again: more than its list holds.
        let start = Instant::now();
        gate.open.store(true, Ordering::SeqCst);
        for waker in std::mem::take(&mut *gate.held.lock().unwrap()) {
            waker.wake();
        }
        let mut answered = 0;
        for sent in sends {
            answered += usize::from(sent.await.unwrap());
        }
        let elapsed = start.elapsed();
        client.shutdown().await;
        (answered, elapsed)
    });
    // The connections left off the full list would never be read (nothing else wakes them):
    // their requests would end at their 3 s deadline.
    assert_eq!(
        answered,
        usize::from(CONNECTIONS),
        "answered after {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

#[test]
fn a_driver_polled_with_a_new_waker_every_time_hears_every_wake() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let polls = Arc::new(AtomicUsize::new(0));
    let runtime = Arc::new(NewWakerEachPoll {
        inner: Arc::new(TokioRuntime::from_handle(tokio.handle().clone())),
        polls: Arc::clone(&polls),
    });
    let peers = [Peer::start(Behaviour::Echo), Peer::start(Behaviour::Echo)];
    let client = ClientBuilder::new(test_config())
        .nodes(peers.iter().map(Peer::addr))
        .build(runtime)
        .unwrap();
    let nodes = client.initial_nodes().to_vec();
    let sends = async move {
        // A wake the driver missed leaves it asleep until another wake, if any comes: its
        // timer's wakes are lost alike. Its requests fail at their 2 s deadline, or the test
        // at its 60 s limit below.
        let send = |client: &keepwire_driver::Client, node, i: usize| {
            let client = client.clone();
            async move {
                let payload = format!("request {i}");
                let answer = client
                    .send(Target::Node(node), payload.clone(), Duration::from_secs(2))
                    .await;
                answer.as_deref() == Ok(payload.as_bytes())
            }
        };
        // One at a time (each answer is a wake from the reactor), then bursts from tasks on
        // both workers (wakes of the inbox from other threads, several per round).
        let mut answered = 0;
        for i in 0..500 {
            answered += usize::from(send(&client, nodes[i % 2], i).await);
        }
        for burst in 0..20 {
            let tasks: Vec<_> = (0..64)
                .map(|i| tokio::spawn(send(&client, nodes[i % 2], burst * 64 + i)))
                .collect();
            for task in tasks {
                answered += usize::from(task.await.unwrap());
            }
        }
        client.shutdown().await;
        answered
    };
    let answered = tokio.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), sends)
            .await
            .expect("the driver stalled: a wake went to a stale waker")
    });
    assert_eq!(
        answered,
        500 + 20 * 64,
        "every request answered with its own payload"
    );
    assert!(
        polls.load(Ordering::Relaxed) > 1000,
        "the driver was polled {} times, each with a waker of its own",
        polls.load(Ordering::Relaxed)
    );
}

/// tokio's runtime, but every future it spawns is polled with a waker made for that poll, equal
/// to no other, which wakes the task only until the next poll (as an executor may: only the
/// last poll's waker must work). The driver cannot keep its first, and a wake that went to it
/// would be lost.
#[derive(Debug)]
struct NewWakerEachPoll {
    inner: Arc<dyn Runtime>,
    polls: Arc<AtomicUsize>,
}

impl Runtime for NewWakerEachPoll {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        self.inner.new_timer(deadline)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        let polls = Arc::clone(&self.polls);
        let last = Arc::new(AtomicUsize::new(0));
        let mut future = future;
        self.inner.spawn(Box::pin(std::future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            let poll = last.fetch_add(1, Ordering::SeqCst) + 1;
            let fresh = Waker::from(Arc::new(Forward {
                poll,
                last: Arc::clone(&last),
                task: cx.waker().clone(),
            }));
            future.as_mut().poll(&mut Context::from_waker(&fresh))
        })));
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        self.inner.connect(socket, addr)
    }

    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.inner.resolve(host, port)
    }
}

/// A waker made for one poll: it wakes the task while no later poll of it has begun.
struct Forward {
    poll: usize,
    last: Arc<AtomicUsize>,
    task: Waker,
}

impl Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.last.load(Ordering::SeqCst) == self.poll {
            self.task.wake_by_ref();
        }
    }
}

/// Whether echoes wake their readers now, or are held back for the test to wake.
#[derive(Debug)]
struct Gate {
    open: AtomicBool,
    held: Mutex<Vec<Waker>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            open: AtomicBool::new(true),
            held: Mutex::default(),
        }
    }
}

/// A stream whose peer answers every request with the request itself (a `LengthPrefixed`
/// response is its request's frame): what is written is read back.
#[derive(Debug)]
struct EchoStream {
    /// Never connected; only for the driver's option reads.
    socket: std::net::TcpStream,
    echo: Echo,
    gate: Arc<Gate>,
}

impl IoStream for EchoStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.echo.poll_read(cx, buf)
    }

    fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(reader) = self.echo.answer(buf) {
            if self.gate.open.load(Ordering::SeqCst) {
                reader.wake();
            } else {
                self.gate.held.lock().unwrap().push(reader);
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(&self.socket)
    }
}
