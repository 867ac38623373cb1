//! The driver reads only the connections whose streams woke it: each one's read waker puts it
//! on a bounded list (`adapters/driver/src/driver/wake.rs`). When more connections wake than
//! the list holds before the driver runs, the ones left off must still be read: the list says
//! it overflowed, and the next round looks at every open connection's mark.
//!
//! Deterministic, with no socket traffic at all: the runtime's connect hands out in-memory
//! streams that echo what is written to them, and hold the read wake-ups back while a gate is
//! closed. With every echo buffered, the test opens the gate and wakes them all from its own
//! task on a current_thread runtime, where the driver cannot run in between.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use keepwire_driver::{
    BoxFuture, ClientBuilder, IoStream, NodeId, PreparedSocket, ResolveError, Runtime, SocketRef,
    Target, Timer,
};
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
    let runtime = Arc::new(EchoRuntime {
        inner: Arc::new(TokioRuntime::from_handle(tokio.handle().clone())),
        gate: Arc::clone(&gate),
    });
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

/// tokio's runtime, but a connect hands out an [`EchoStream`] over the prepared socket, left
/// unconnected.
#[derive(Debug)]
struct EchoRuntime {
    inner: Arc<dyn Runtime>,
    gate: Arc<Gate>,
}

impl Runtime for EchoRuntime {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        self.inner.new_timer(deadline)
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        self.inner.spawn(future);
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        _addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        let stream = EchoStream {
            socket: socket.into_std(),
            echoed: Vec::new(),
            reader: None,
            gate: Arc::clone(&self.gate),
        };
        Box::pin(std::future::ready(
            Ok(Box::new(stream) as Box<dyn IoStream>),
        ))
    }

    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        self.inner.resolve(host, port)
    }
}

/// A stream whose peer answers every request with the request itself (a `LengthPrefixed`
/// response is its request's frame): what is written is read back.
#[derive(Debug)]
struct EchoStream {
    /// Never connected; only for the driver's option reads.
    socket: std::net::TcpStream,
    echoed: Vec<u8>,
    reader: Option<Waker>,
    gate: Arc<Gate>,
}

impl IoStream for EchoStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        if self.echoed.is_empty() {
            self.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = buf.len().min(self.echoed.len());
        buf[..n].copy_from_slice(&self.echoed[..n]);
        self.echoed.drain(..n);
        Poll::Ready(Ok(n))
    }

    fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.echoed.extend_from_slice(buf);
        if let Some(reader) = self.reader.take() {
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
