//! Rounds a caller runs in place (`Runtime::drive_here`): a send queued while the driver's
//! task has nothing to do runs the driver's round in the caller's own poll, reading right after
//! the write although the runtime does not ask for that, so with a peer that answers within
//! the write the send is over at its first poll, without the driver's task; a
//! runtime that does not let callers do it leaves every send to the task; sends while other
//! callers wait go to the task (which writes them in batches); and callers that run rounds
//! from many threads at once, some outside the runtime, each get their own answer, with
//! connects started in the caller's round bound to the client's runtime. keepwire's runtimes
//! let callers run rounds; the trait's default does not.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use keepwire_driver::{BoxFuture, Client, ClientBuilder, IoStream, Runtime, SocketRef, Target};
use keepwire_tests::memory::{Echo, InMemory};
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;

const PAYLOAD: &[u8] = b"a request of 32 bytes, padded..";

#[test]
fn a_lone_send_is_written_and_answered_in_its_own_first_poll() {
    let (ready, task_polls) = first_polls(true, Answers::All, 100);
    assert_eq!(
        ready, 100,
        "every send after the first was over at its first poll"
    );
    // The task still runs for what callers do not: the connect's setup, and the wakes that
    // the stream raises for answers a caller already read.
    assert!(task_polls > 0);
}

#[test]
fn a_caller_s_round_reads_right_after_its_write_though_the_runtime_does_not_ask() {
    // The runtime does not ask for reads right after writes, and after the first the stream
    // never wakes a read: a caller's round must read right after its write to get any answer.
    let (ready, _) = first_polls(true, Answers::Unwoken, 100);
    assert_eq!(ready, 100, "a caller's round left its answer unread");
}

#[test]
fn a_runtime_that_does_not_let_callers_run_rounds_leaves_every_send_to_the_task() {
    let (ready, task_polls) = first_polls(false, Answers::All, 100);
    assert_eq!(ready, 0, "a send waits for the driver's task");
    assert!(
        task_polls >= 100,
        "the task ran every send: {task_polls} polls"
    );
}

#[test]
fn a_send_while_others_wait_goes_to_the_task() {
    // One caller waits on a request the peer never answers: the next caller's send leaves its
    // round to the task, and is not over at its first poll although its own answer comes
    // within the write.
    let tokio = current_thread();
    let polls = Arc::new(AtomicUsize::new(0));
    let client = in_memory_client(&tokio, true, Answers::AllBut(1), &polls);
    let node = Target::Node(client.initial_nodes()[0]);
    let (first_poll, answer) = tokio.block_on(async {
        // Connected, and the task polled once.
        client.send(node, PAYLOAD, secs(3)).await.unwrap();
        let waiting = tokio::spawn({
            let client = client.clone();
            async move { client.send(node, PAYLOAD, secs(3)).await }
        });
        tokio::task::yield_now().await;
        let mut send = pin!(client.send(node, PAYLOAD, secs(3)));
        let (first_poll, answer) =
            match std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await {
                Poll::Ready(answer) => (true, answer),
                Poll::Pending => (false, send.await),
            };
        waiting.abort();
        client.shutdown().await;
        (first_poll, answer)
    });
    assert!(
        !first_poll,
        "a send beside a waiting caller ran its round in place"
    );
    assert_eq!(answer.unwrap(), PAYLOAD);
}

#[test]
fn a_send_while_the_task_is_woken_leaves_the_round_to_it() {
    // Each answer, given within the write, also wakes the read the driver's task left
    // waiting (as a reactor would), so after a send run in place the task is woken. A send
    // made before the task ran leaves its round to it; once it ran, the next runs in place.
    // The 3rd send yields first (nothing else is left to run by then).
    let tokio = current_thread();
    let polls = Arc::new(AtomicUsize::new(0));
    let client = in_memory_client(&tokio, true, Answers::All, &polls);
    let node = Target::Node(client.initial_nodes()[0]);
    let firsts = tokio.block_on(async {
        client.send(node, PAYLOAD, secs(3)).await.unwrap();
        tokio::task::yield_now().await;
        let mut firsts = Vec::new();
        for yields in [false, false, true, false] {
            if yields {
                tokio::task::yield_now().await;
            }
            let mut send = pin!(client.send(node, PAYLOAD, secs(3)));
            let answer = match std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await
            {
                Poll::Ready(answer) => {
                    firsts.push(true);
                    answer
                }
                Poll::Pending => {
                    firsts.push(false);
                    send.await
                }
            };
            assert_eq!(answer.unwrap(), PAYLOAD);
        }
        client.shutdown().await;
        firsts
    });
    // The 1st in place, its answer waking the task; the 2nd, before the task ran, the task's
    // (which leaves its read waiting again); the 3rd in place, and its answer wakes the task
    // again; the 4th the task's.
    assert_eq!(firsts, [true, false, true, false]);
}

#[test]
fn a_runtime_that_drops_the_driver_s_task_ends_every_send() {
    // The peer reads and never answers; a caller outside the runtime waits. Shutting the
    // runtime down drops the driver's task, and with it the driver: the caller must not wait
    // out its deadline.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        while let Ok(1..) = stream.read(&mut buf) {}
    });
    let tokio = multi_thread(1);
    let client = tokio_client(&tokio, addr);
    let node = Target::Node(client.initial_nodes()[0]);
    let (sent, waiting) = std::sync::mpsc::channel();
    let (ended, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        smol::block_on(async {
            let mut send = pin!(client.send(node, PAYLOAD, secs(60)));
            let first = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
            assert!(first.is_pending());
            sent.send(()).unwrap();
            ended.send(send.await).unwrap();
        });
    });
    waiting.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    tokio.shutdown_timeout(secs(5));
    let outcome = outcome
        .recv_timeout(secs(20))
        .expect("the caller still waits after its client's runtime shut down");
    assert!(outcome.is_err(), "{outcome:?}");
    silent.join().unwrap();
}

#[test]
fn the_task_that_finds_a_caller_running_its_round_runs_after_it() {
    // A caller outside the runtime runs its round in place and is held in the write, the
    // driver in its hands. Meanwhile a command wakes the driver's task, which finds the driver
    // held and returns. The caller, once its round is over, must wake the task again: the
    // command is taken only then.
    let tokio = multi_thread(1);
    let polls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Gate::default());
    let client = gated_client(&tokio, true, Answers::All, &polls, &gate);
    let node = Target::Node(client.initial_nodes()[0]);
    let caller = std::thread::spawn({
        let (client, gate) = (client.clone(), Arc::clone(&gate));
        move || {
            smol::block_on(async {
                // Connected, through the task; then the task has nothing left to do.
                client.send(node, PAYLOAD, secs(10)).await.unwrap();
                std::thread::sleep(Duration::from_millis(50));
                *gate.thread.lock().unwrap() = Some(std::thread::current().id());
                client.send(node, PAYLOAD, secs(10)).await
            })
        }
    });
    gate.wait_until(|gate| gate.holding.load(Ordering::SeqCst));
    let before = polls.load(Ordering::SeqCst);
    let counters = tokio.spawn({
        let client = client.clone();
        async move { client.counters().await }
    });
    // The task's poll that finds the driver held, over by the time the gate opens.
    gate.wait_until(|_| polls.load(Ordering::SeqCst) > before);
    std::thread::sleep(Duration::from_millis(50));
    gate.open.store(true, Ordering::SeqCst);
    assert_eq!(caller.join().unwrap().unwrap(), PAYLOAD);
    let counters = tokio.block_on(async { tokio::time::timeout(secs(10), counters).await });
    assert!(
        counters.is_ok_and(|counters| counters.unwrap().is_ok()),
        "the command queued while the caller held the driver was never taken"
    );
}

#[test]
fn callers_on_many_threads_each_get_their_own_answer() {
    // A real echo server; the client's runtime has two workers. Four tasks on the runtime and
    // four plain threads outside it (each with its own executor) send at once, so rounds run
    // in place on every one of them and on the driver's task, and they find each other
    // holding the driver. Each send carries its own payload, and its answer must be it.
    let addr = echo_server();
    let tokio = multi_thread(2);
    let client = tokio_client(&tokio, addr);
    let node = Target::Node(client.initial_nodes()[0]);
    let caller = move |client: Client, who: usize| async move {
        for i in 0..400 {
            let payload = format!("caller {who} request {i}");
            let answer = client.send(node, payload.clone(), secs(10)).await;
            assert_eq!(answer.unwrap(), payload.as_bytes(), "caller {who}");
        }
    };
    let tasks: Vec<_> = (0..4)
        .map(|who| tokio.spawn(caller(client.clone(), who)))
        .collect();
    let threads: Vec<_> = (4..8)
        .map(|who| {
            let client = client.clone();
            std::thread::spawn(move || smol::block_on(caller(client, who)))
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    tokio.block_on(async {
        for task in tasks {
            task.await.unwrap();
        }
    });
}

#[test]
fn a_connect_started_in_a_caller_s_round_outside_the_runtime_binds_to_the_runtime() {
    // A plain thread with no tokio context sends after an eviction: its round opens the new
    // connection, whose socket must register with the client's runtime (tokio panics with "no
    // reactor running" otherwise).
    let addr = echo_server();
    let tokio = multi_thread(1);
    let client = tokio_client(&tokio, addr);
    let node = client.initial_nodes()[0];
    let thread = std::thread::spawn(move || {
        smol::block_on(async {
            for round in 0..20 {
                let payload = format!("after eviction {round}");
                let answer = client
                    .send(Target::Node(node), payload.clone(), secs(10))
                    .await;
                assert_eq!(answer.unwrap(), payload.as_bytes());
                client.evict(node).await.unwrap();
            }
            client.counters().await.unwrap()
        })
    });
    let counters = thread.join().unwrap();
    assert!(counters.connects >= 20, "{counters:?}");
}

#[test]
fn keepwire_s_runtimes_let_callers_run_rounds_and_the_default_does_not() {
    let run = |runtime: &dyn Runtime| {
        let mut ran = false;
        let said = runtime.drive_here(&mut || ran = true);
        assert_eq!(said, ran, "{runtime:?} said {said} but ran: {ran}");
        said
    };
    for flavour in [current_thread(), multi_thread(1)] {
        assert!(run(&TokioRuntime::from_handle(flavour.handle().clone())));
    }
    assert!(run(&keepwire_smol::SmolRuntime::new()));
    assert!(run(&keepwire_async_std::AsyncStdRuntime));
    let tokio = current_thread();
    let inner = Arc::new(TokioRuntime::from_handle(tokio.handle().clone()));
    let default = InMemory::new(inner, true, |_| unreachable!("no connect"));
    assert!(!run(&default));
}

/// Over `sends` sends one after another (after a first that connects), how many were over at
/// their first poll, and how often the driver's task was polled meanwhile.
fn first_polls(in_place: bool, answers: Answers, sends: usize) -> (usize, usize) {
    let tokio = current_thread();
    let polls = Arc::new(AtomicUsize::new(0));
    let client = in_memory_client(&tokio, in_place, answers, &polls);
    let node = Target::Node(client.initial_nodes()[0]);
    tokio.block_on(async {
        client.send(node, PAYLOAD, secs(3)).await.unwrap();
        // Let the task run what the first send left it (the wake of its answer).
        tokio::task::yield_now().await;
        let before = polls.load(Ordering::SeqCst);
        let mut ready = 0;
        for _ in 0..sends {
            let mut send = pin!(client.send(node, PAYLOAD, secs(3)));
            let first = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
            let answer = match first {
                Poll::Ready(answer) => {
                    ready += 1;
                    answer
                }
                Poll::Pending => send.await,
            };
            assert_eq!(answer.unwrap(), PAYLOAD);
            // The task runs here if anything woke it.
            tokio::task::yield_now().await;
        }
        let task_polls = polls.load(Ordering::SeqCst) - before;
        client.shutdown().await;
        (ready, task_polls)
    })
}

/// Which requests the in-memory peer answers.
#[derive(Clone, Copy, Debug)]
enum Answers {
    All,
    /// Every request but the `n`th (counted from 0).
    AllBut(usize),
    /// Every request, but only the first answer wakes the stream's read: the others are
    /// taken only by a read right after the write.
    Unwoken,
}

/// A client on `tokio` whose connection is an in-memory stream answering within each write
/// (and waking its read), on a runtime that lets callers run rounds in place if `in_place`
/// and does not ask for reads right after writes; `polls` counts the polls of the driver's task.
fn in_memory_client(
    tokio: &tokio::runtime::Runtime,
    in_place: bool,
    answers: Answers,
    polls: &Arc<AtomicUsize>,
) -> Client {
    gated_client(tokio, in_place, answers, polls, &Arc::default())
}

/// [`in_memory_client`], whose stream's writes made on the gate's thread wait for it.
fn gated_client(
    tokio: &tokio::runtime::Runtime,
    in_place: bool,
    answers: Answers,
    polls: &Arc<AtomicUsize>,
    gate: &Arc<Gate>,
) -> Client {
    let gate = Arc::clone(gate);
    let inner: Arc<dyn Runtime> = Arc::new(Counting {
        inner: TokioRuntime::from_handle(tokio.handle().clone()),
        polls: Arc::clone(polls),
    });
    // No reads right after writes for the task: a caller's round reads after its write all
    // the same.
    let runtime = InMemory::new(inner, false, move |socket| {
        Box::new(EchoStream {
            socket,
            echo: Echo::default(),
            answers,
            written: 0,
            gate: Arc::clone(&gate),
        })
    });
    let runtime = if in_place {
        runtime.with_rounds_in_place()
    } else {
        runtime
    };
    // Never connected to (the runtime's connect makes no connection): loopback, for form.
    ClientBuilder::new(test_config())
        .node(SocketAddr::from(([127, 0, 0, 1], 9)))
        .build(Arc::new(runtime))
        .unwrap()
}

/// tokio, with the polls of what it spawns counted.
#[derive(Debug)]
struct Counting {
    inner: TokioRuntime,
    polls: Arc<AtomicUsize>,
}

impl Runtime for Counting {
    fn now(&self) -> std::time::Instant {
        self.inner.now()
    }

    fn now_in_task(&self) -> std::time::Instant {
        self.inner.now_in_task()
    }

    fn new_timer(
        &self,
        deadline: std::time::Instant,
    ) -> std::pin::Pin<Box<dyn keepwire_driver::Timer>> {
        self.inner.new_timer(deadline)
    }

    fn drive_here(&self, run: &mut dyn FnMut()) -> bool {
        self.inner.drive_here(run)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        let polls = Arc::clone(&self.polls);
        let mut future = future;
        self.inner.spawn(Box::pin(std::future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::SeqCst);
            future.as_mut().poll(cx)
        })));
    }

    fn connect(
        &self,
        socket: keepwire_driver::PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        self.inner.connect(socket, addr)
    }
}

/// A stream whose peer answers each request within its write, as a peer on the same CPU
/// often does, and wakes a waiting read as a reactor would.
#[derive(Debug)]
struct EchoStream {
    /// Never connected; only for the driver's option reads.
    socket: TcpStream,
    echo: Echo,
    answers: Answers,
    /// Writes so far.
    written: usize,
    gate: Arc<Gate>,
}

/// Holds the writes made on one thread until the test opens it: a caller's round, stopped
/// with the driver in its hands.
#[derive(Debug, Default)]
struct Gate {
    /// The thread whose writes wait; none at first.
    thread: std::sync::Mutex<Option<std::thread::ThreadId>>,
    /// A write is waiting.
    holding: std::sync::atomic::AtomicBool,
    open: std::sync::atomic::AtomicBool,
}

impl Gate {
    /// Waits (at most 10 s) until `holds`.
    fn wait_until(&self, holds: impl Fn(&Self) -> bool) {
        let start = std::time::Instant::now();
        while !holds(self) {
            assert!(start.elapsed() < secs(10), "the gate never got there");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl IoStream for EchoStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.echo.poll_read(cx, buf)
    }

    fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let gated = *self.gate.thread.lock().unwrap() == Some(std::thread::current().id());
        if gated {
            self.gate.holding.store(true, Ordering::SeqCst);
            self.gate
                .wait_until(|gate| gate.open.load(Ordering::SeqCst));
        }
        let unanswered = matches!(self.answers, Answers::AllBut(n) if n == self.written);
        let wakes = !matches!(self.answers, Answers::Unwoken) || self.written == 0;
        self.written += 1;
        if !unanswered
            && let Some(reader) = self.echo.answer(buf)
            && wakes
        {
            reader.wake();
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        Some(self.echo.read(buf))
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(&self.socket)
    }
}

/// A blocking echo server on loopback: every byte read is written back (a `LengthPrefixed`
/// response is its request's frame), a thread per connection.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut buf) {
                    if stream.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A client of `addr` on `tokio`.
fn tokio_client(tokio: &tokio::runtime::Runtime, addr: SocketAddr) -> Client {
    ClientBuilder::new(test_config())
        .node(addr)
        .build(Arc::new(TokioRuntime::from_handle(tokio.handle().clone())))
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
