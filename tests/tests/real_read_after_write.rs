//! Reads right after a write (`Runtime::read_after_write`, `IoStream::read_now`): a runtime
//! that asks for them has the driver read a connection as soon as the socket took a whole
//! write, before the stream wakes it; after a read that finds nothing, seven writes pass
//! before the next one; a stream that cannot is not asked again; the end of the stream or an
//! error found that way ends the connection as any read's would; and a runtime that does not
//! ask (the default, tokio's multi-thread runtime) is never read that way.
//!
//! The driver's side runs on in-memory streams, deterministic and with no socket traffic:
//! their peer answers each write at once, and they count the reads. tokio's own `read_now`
//! runs on a real loopback socket.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use keepwire_driver::{
    ClientBuilder, CloseReason, Failure, IoStream, Runtime, SendError, Sent, SocketRef, Target,
};
use keepwire_tests::memory::{Echo, InMemory};
use keepwire_tests::test_config;
use keepwire_tokio::TokioRuntime;

const PAYLOAD: &[u8] = b"a request of 32 bytes, padded..";

#[test]
fn a_runtime_that_asks_has_every_answer_read_right_after_its_write() {
    // The stream's peer answers at once, but the stream never wakes the driver: only reads
    // right after the writes can take the answers.
    let counts = run(true, Script::answer_now_only(), 20);
    assert_eq!(counts.answered, 20);
    assert_eq!(counts.tries, 20, "one read after each write");
    assert_eq!(counts.found, 20);
}

#[test]
fn a_runtime_that_does_not_ask_is_never_read_after_a_write() {
    let counts = run(false, Script::woken(usize::MAX), 20);
    assert_eq!(counts.answered, 20);
    assert_eq!(counts.tries, 0);
}

#[test]
fn after_a_read_that_found_nothing_seven_writes_pass_before_the_next() {
    // Nothing is ever found: the stream's wake brings every answer, and the driver reads after
    // the 1st, 9th and 17th writes only.
    let counts = run(true, Script::woken(usize::MAX), 20);
    assert_eq!(counts.answered, 20);
    assert_eq!(counts.tries, 3);
    assert_eq!(counts.found, 0);
}

#[test]
fn a_read_that_finds_the_answer_brings_the_next_write_its_read_again() {
    // Nothing found after the 1st write; from the 9th, every read finds its answer, so every
    // write from the 9th on is read after: the 1st, then the 9th to the 20th.
    let counts = run(true, Script::woken(1), 20);
    assert_eq!(counts.answered, 20);
    assert_eq!(counts.tries, 13);
    assert_eq!(counts.found, 12);
}

#[test]
fn a_stream_that_cannot_read_now_is_asked_once() {
    let counts = run(true, Script::cannot(), 20);
    assert_eq!(counts.answered, 20);
    assert_eq!(counts.tries, 1);
}

#[test]
fn reads_right_after_writes_go_on_past_the_connection_s_first_chunk() {
    // 2,000 answers of 43 bytes: more than one 64 KiB chunk of the connection's buffer.
    let counts = run(true, Script::answer_now_only(), 2000);
    assert_eq!(counts.answered, 2000);
    assert_eq!(counts.found, 2000);
}

#[test]
fn a_write_finds_room_for_its_read_even_with_the_buffer_full_of_part_of_an_answer() {
    // Two requests larger than the connection's 64 KiB chunk, queued together: each goes out
    // in a write of its own in one round. The read after the first write fills the chunk
    // with part of the first answer; the read after the second must make room first (a read
    // of nothing would look like the end of the stream).
    let tokio = current_thread();
    let stats = Arc::new(Stats::default());
    let client = client(&tokio, true, Script::woken(0), &stats);
    let large = |byte: u8| vec![byte; 70_000];
    let answers = tokio.block_on(async {
        let node = client.initial_nodes()[0];
        let sends: Vec<_> = [1u8, 2]
            .map(|byte| {
                let client = client.clone();
                tokio::spawn(async move {
                    let send = client.send(Target::Node(node), large(byte), Duration::from_secs(3));
                    send.await
                })
            })
            .into_iter()
            .collect();
        let mut answers = Vec::new();
        for send in sends {
            answers.push(send.await.unwrap());
        }
        client.shutdown().await;
        answers
    });
    for (answer, byte) in answers.into_iter().zip([1u8, 2]) {
        assert!(
            answer.as_ref().is_ok_and(|a| *a == large(byte)),
            "{answer:?}"
        );
    }
    assert!(stats.found.load(Ordering::SeqCst) >= 2);
}

#[test]
fn an_interrupted_read_right_after_a_write_is_tried_again_at_the_next() {
    // Neither bytes nor nothing: no write is let pass, and the stream's wake brings the
    // answers.
    let counts = run(true, Script::failing(io::ErrorKind::Interrupted, true), 20);
    assert_eq!(counts.answered, 20);
    assert_eq!(counts.tries, 20);
}

#[test]
fn the_end_of_the_stream_found_right_after_a_write_closes_the_connection() {
    let (outcome, tries) = first_outcome(Script::ends());
    assert!(
        matches!(
            outcome,
            Err(SendError::ConnectionLost {
                cause: CloseReason::Io(Failure::PeerClosed),
                sent: Sent::Fully,
                retried: false,
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(tries, 1);
}

#[test]
fn an_error_found_right_after_a_write_closes_the_connection_with_it() {
    // The stream never wakes the driver: only the read right after the write can end it.
    let (outcome, tries) = first_outcome(Script::failing(io::ErrorKind::ConnectionReset, false));
    assert!(
        matches!(
            outcome,
            Err(SendError::ConnectionLost {
                cause: CloseReason::Io(Failure::Reset),
                sent: Sent::Fully,
                retried: false,
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(tries, 1);
}

#[test]
fn smol_and_async_std_ask() {
    assert!(keepwire_smol::SmolRuntime::new().read_after_write());
    assert!(keepwire_async_std::AsyncStdRuntime.read_after_write());
}

#[test]
fn tokio_asks_on_current_thread_only() {
    let current = current_thread();
    assert!(TokioRuntime::from_handle(current.handle().clone()).read_after_write());
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    assert!(!TokioRuntime::from_handle(multi.handle().clone()).read_after_write());
}

/// tokio's stream reads the socket itself: bytes that came after tokio last found it dry are
/// read at once, and the wake their arrival raised still comes (and reads nothing), so a
/// later answer is not missed.
#[test]
fn tokio_reads_now_what_came_after_its_stream_found_the_socket_dry() {
    current_thread().block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        // Dry: tokio records the socket as not readable, with the read's waker registered.
        let dry = std::future::poll_fn(|cx| Poll::Ready(stream.poll_read(cx, &mut buf))).await;
        assert!(dry.is_pending());
        assert_eq!(
            stream.read_now(&mut buf).unwrap().unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // Read with no turn of tokio's reactor since (no await in between; a loaded machine
        // may deliver the bytes a moment after the write returns).
        peer.write_all(b"first").unwrap();
        let read = read_now_within(&mut stream, &mut buf);
        assert_eq!(&buf[..read], b"first");
        assert_eq!(
            stream.read_now(&mut buf).unwrap().unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // The next bytes wake the stream's read as usual.
        peer.write_all(b"second").unwrap();
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| stream.poll_read(cx, &mut buf)),
        )
        .await
        .expect("the read after `read_now` was never woken")
        .unwrap();
        assert_eq!(&buf[..read], b"second");
    });
}

/// `stream.read_now` until it reads something (at most 5 s), sleeping the thread between
/// tries: no reactor runs meanwhile.
fn read_now_within(stream: &mut dyn IoStream, buf: &mut [u8]) -> usize {
    let start = Instant::now();
    loop {
        match stream.read_now(buf).unwrap() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < Duration::from_secs(5), "nothing to read");
                std::thread::sleep(Duration::from_millis(1));
            }
            read => return read.unwrap(),
        }
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Requests answered, and reads right after writes tried and found bytes, over `requests`
/// requests one after another on one connection.
struct Counts {
    answered: usize,
    tries: usize,
    found: usize,
}

fn run(asks: bool, script: Script, requests: usize) -> Counts {
    let tokio = current_thread();
    let stats = Arc::new(Stats::default());
    let client = client(&tokio, asks, script, &stats);
    let answered = tokio.block_on(async {
        let node = client.initial_nodes()[0];
        let mut answered = 0;
        for _ in 0..requests {
            let answer = client
                .send(Target::Node(node), PAYLOAD, Duration::from_secs(3))
                .await;
            if !answer.is_ok_and(|a| a == PAYLOAD) {
                break; // one unanswered is enough to fail, without waiting out the rest
            }
            answered += 1;
        }
        client.shutdown().await;
        answered
    });
    Counts {
        answered,
        tries: stats.tries.load(Ordering::SeqCst),
        found: stats.found.load(Ordering::SeqCst),
    }
}

/// The outcome of one request on a runtime that asks, and the reads right after writes tried.
fn first_outcome(script: Script) -> (Result<bytes::Bytes, SendError>, usize) {
    let tokio = current_thread();
    let stats = Arc::new(Stats::default());
    let client = client(&tokio, true, script, &stats);
    let outcome = tokio.block_on(async {
        let node = client.initial_nodes()[0];
        let outcome = client
            .send(Target::Node(node), PAYLOAD, Duration::from_secs(3))
            .await;
        client.shutdown().await;
        outcome
    });
    (outcome, stats.tries.load(Ordering::SeqCst))
}

fn client(
    tokio: &tokio::runtime::Runtime,
    asks: bool,
    script: Script,
    stats: &Arc<Stats>,
) -> keepwire_driver::Client {
    let stats = Arc::clone(stats);
    let inner = Arc::new(TokioRuntime::from_handle(tokio.handle().clone()));
    let runtime = Arc::new(InMemory::new(inner, asks, move |socket| {
        Box::new(EchoStream {
            socket,
            echo: Echo::default(),
            script,
            stats: Arc::clone(&stats),
        })
    }));
    // Never connected to (the runtime's connect makes no connection): loopback, for form.
    ClientBuilder::new(test_config())
        .node(SocketAddr::from(([127, 0, 0, 1], 9)))
        .build(runtime)
        .unwrap()
}

#[derive(Debug, Default)]
struct Stats {
    /// `read_now` calls (also those of a stream that cannot).
    tries: AtomicUsize,
    /// `read_now` calls that returned bytes.
    found: AtomicUsize,
}

/// How an [`EchoStream`] reads.
#[derive(Clone, Copy, Debug)]
struct Script {
    /// `read_now` is supported.
    can: bool,
    /// `read_now` calls that report nothing even with an answer buffered (`WouldBlock`).
    miss_first: usize,
    /// A write wakes the stream's read (else its read is never ready, and only `read_now`
    /// can take the answers).
    wakes: bool,
    /// The peer closes instead of answering.
    ends: bool,
    /// `read_now` fails with this error, every time.
    fails: Option<io::ErrorKind>,
}

impl Script {
    fn answer_now_only() -> Self {
        Self {
            can: true,
            miss_first: 0,
            wakes: false,
            ends: false,
            fails: None,
        }
    }

    fn woken(miss_first: usize) -> Self {
        Self {
            can: true,
            miss_first,
            wakes: true,
            ends: false,
            fails: None,
        }
    }

    fn cannot() -> Self {
        Self {
            can: false,
            ..Self::woken(0)
        }
    }

    fn failing(error: io::ErrorKind, wakes: bool) -> Self {
        Self {
            fails: Some(error),
            wakes,
            ..Self::answer_now_only()
        }
    }

    fn ends() -> Self {
        Self {
            ends: true,
            ..Self::answer_now_only()
        }
    }
}

/// A stream whose peer answers every request at once with the request itself (a
/// `LengthPrefixed` response is its request's frame), or closes (`Script::ends`).
#[derive(Debug)]
struct EchoStream {
    /// Never connected; only for the driver's option reads.
    socket: std::net::TcpStream,
    echo: Echo,
    script: Script,
    stats: Arc<Stats>,
}

impl IoStream for EchoStream {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        if !self.script.wakes {
            return Poll::Pending; // never woken, so never ready either
        }
        self.echo.poll_read(cx, buf)
    }

    fn poll_write(&mut self, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        // A read waits only if the script lets writes wake it (`poll_read`, above).
        let reader = if self.script.ends {
            self.echo.close()
        } else {
            self.echo.answer(buf)
        };
        if let Some(reader) = reader {
            reader.wake();
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn read_now(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let tries = self.stats.tries.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.script.can {
            return None;
        }
        if let Some(error) = self.script.fails {
            return Some(Err(error.into()));
        }
        if tries <= self.script.miss_first {
            return Some(Err(io::ErrorKind::WouldBlock.into()));
        }
        let read = self.echo.read(buf);
        if matches!(read, Ok(n) if n > 0) {
            self.stats.found.fetch_add(1, Ordering::SeqCst);
        }
        Some(read)
    }

    fn socket(&self) -> SocketRef<'_> {
        SocketRef::new(&self.socket)
    }
}
