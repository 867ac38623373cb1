//! An adapter for "another runtime", written from scratch: a thread per task, a timer of its
//! own, and async-io's reactor for the sockets (keepwire-driver's shared `async_io` pieces).
//! The crate documentation's guide walks through what each method must do.
//!
//! ```text
//! cargo run -p keepwire-driver --example thread_runtime --features async-io
//! ```
//!
//! It runs a client on that runtime against two servers in this process: one that echoes
//! (a hundred requests are answered) and one that reads and never answers (a request's
//! deadline fires through the hand-written timer).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use keepwire_driver::{
    BoxFuture, ClientBuilder, Config, IoStream, LengthPrefixed, PreparedSocket, Runtime, SendError,
    Target, Timer,
};

/// The runtime: every task on its own thread, polled by `block_on`.
#[derive(Clone, Copy, Debug)]
struct ThreadPerTask;

impl Runtime for ThreadPerTask {
    fn now(&self) -> Instant {
        // The clock the timers below run on.
        Instant::now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        Box::pin(ThreadTimer::new(deadline))
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        thread::spawn(move || futures_lite::future::block_on(future));
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        // A non-blocking connect on async-io's reactor (its own thread drives it here).
        keepwire_driver::async_io::connect(socket, addr)
    }
}

/// A timer that sleeps on a helper thread and wakes the task when its deadline passes.
/// Edge-triggered, as the `Timer` contract allows: it fires once per reset (the driver resets
/// after every fire). A real runtime would keep a timer wheel instead of a thread per arm.
#[derive(Debug)]
struct ThreadTimer {
    deadline: Instant,
    fired: bool,
    shared: Arc<Mutex<Armed>>,
}

#[derive(Debug, Default)]
struct Armed {
    waker: Option<Waker>,
    /// The deadline a helper thread sleeps toward, if any.
    until: Option<Instant>,
}

impl ThreadTimer {
    fn new(deadline: Instant) -> Self {
        Self {
            deadline,
            fired: false,
            shared: Arc::default(),
        }
    }
}

impl Timer for ThreadTimer {
    fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
        self.deadline = deadline;
        self.fired = false;
    }

    fn poll_fire(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired {
            return Poll::Pending; // until the next reset
        }
        if Instant::now() >= self.deadline {
            self.fired = true;
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        let mut armed = self.shared.lock().unwrap();
        armed.waker = Some(cx.waker().clone());
        if armed.until != Some(deadline) {
            armed.until = Some(deadline);
            let shared = Arc::clone(&self.shared);
            thread::spawn(move || {
                thread::sleep(deadline.saturating_duration_since(Instant::now()));
                let mut armed = shared.lock().unwrap();
                if armed.until == Some(deadline) {
                    armed.until = None;
                    if let Some(waker) = armed.waker.take() {
                        waker.wake();
                    }
                }
            });
        }
        Poll::Pending
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let echo = serve(true)?;
    let silent = serve(false)?;
    let client = ClientBuilder::new(Config::default())
        .node(echo)
        .node(silent)
        .build(Arc::new(ThreadPerTask))?;
    let [echo_node, silent_node] = [client.initial_nodes()[0], client.initial_nodes()[1]];
    futures_lite::future::block_on(async {
        for i in 0..100 {
            let answer = client
                .send(
                    Target::Node(echo_node),
                    format!("request {i}"),
                    Duration::from_secs(2),
                )
                .await?;
            assert_eq!(answer, format!("request {i}").as_bytes());
        }
        println!("100 requests answered on a thread-per-task runtime");
        let started = Instant::now();
        let unanswered = client
            .send(
                Target::Node(silent_node),
                &b"hello?"[..],
                Duration::from_millis(200),
            )
            .await;
        println!(
            "a request the server never answers: {} after {:?}",
            unanswered
                .as_ref()
                .map_or_else(SendError::to_string, |_| "answered?".into()),
            started.elapsed()
        );
        assert!(matches!(
            unanswered,
            Err(SendError::DeadlineExceeded { .. })
        ));
        client.shutdown().await;
        Ok(())
    })
}

/// A server for the built-in framing on its own threads: echoes every frame, or reads and
/// never answers.
fn serve(answer: bool) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || connection(stream, answer));
        }
    });
    Ok(addr)
}

fn connection(mut stream: TcpStream, answer: bool) -> io::Result<()> {
    let codec = LengthPrefixed::default();
    let mut inbound = bytes::BytesMut::new();
    let mut chunk = [0; 4096];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        inbound.extend_from_slice(&chunk[..n]);
        while let Some((id, payload)) = codec
            .cut(&mut inbound)
            .map_err(|v| io::Error::other(v.to_string()))?
        {
            if answer {
                let frame = LengthPrefixed::frame(id, &payload).map_err(io::Error::other)?;
                stream.write_all(&frame)?;
            }
        }
    }
}
