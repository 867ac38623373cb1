//! The sans-IO run loop from the README, compiled and run against an in-memory world: a
//! "kernel" whose send buffer holds 4 KiB and a server that reads it in bursts, so the loop
//! meets short writes, a full socket and the writability that follows.
//!
//! `cargo run -p keepwire-proto --example run_loop`
//!
//! The part between the `README` markers is the README's run loop, word for word (a test
//! compares them).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use keepwire_proto::{
    Action, Config, ConnId, Endpoint, Event, Failure, HandleError, Instant, Outcome, Pool,
    RequestId, SubmitError, Target,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sockets = Sockets::default();
    let addr: SocketAddr = "127.0.0.1:7000".parse()?;
    let mut app = App::default();

    // README: run loop
    let mut pool = Pool::new(Config::default(), sockets.now())?; // validated; seeded
    pool.add_node(sockets.now(), addr);
    let mut bufs = Vec::new();
    while !app.done() {
        let now = sockets.now();
        while let Some(frame) = app.next_request(pool.next_request_id()) {
            let deadline = now + Duration::from_secs(5);
            app.submitted(pool.submit(now, Target::Best, deadline, frame)); // fails fast, typed
        }
        while let Some(action) = pool.poll_action() {
            match action {
                Action::Open { conn, endpoint, .. } => sockets.connect(conn, endpoint), // + options
                Action::Close { conn, .. } => sockets.close(conn),
                _ => {} // Handshake, Heartbeat: when Config::handshake / heartbeat are on
            }
        }
        // Only connections with bytes to send come out, each with its queued frames for one
        // vectored write; report exactly what the kernel took. A short write (0 when it would
        // block) parks the connection until handle_writable.
        while let Some(conn) = pool.poll_transmit(64 * 1024, &mut bufs) {
            match sockets.write_vectored(conn, &bufs) {
                Ok(n) => pool.handle_written(now, conn, n)?,
                Err(failure) => pool.handle_closed(now, conn, failure)?,
            }
        }
        while let Some(event) = pool.poll_event() {
            app.deliver(event); // outcomes, state changes, writability flips
        }
        // Sleep until the pool's next deadline or the next I/O, then report what happened.
        for io in sockets.wait_until(pool.poll_timeout()) {
            let now = sockets.now();
            let _: Result<(), HandleError> = match io {
                Io::Connected(conn) => pool.handle_connected(now, conn),
                Io::Writable(conn) => pool.handle_writable(now, conn),
                Io::Response(conn, id, payload) => pool.handle_response(now, conn, id, payload),
                Io::Received { conn, partial } => pool.handle_received(now, conn, partial),
                Io::Closed(conn, failure) => pool.handle_closed(now, conn, failure),
            };
        }
        pool.handle_timeout(sockets.now());
    }
    // README: end

    println!(
        "{} requests answered, {} failed, {} short writes parked the connection, {:?} simulated",
        app.answered,
        app.failed,
        sockets.short_writes,
        sockets.now()
    );
    assert_eq!(app.answered, REQUESTS, "every request answered");
    Ok(())
}

const REQUESTS: usize = 200;
const FRAME: usize = 1024;
const SEND_BUFFER: usize = 4096;

/// The application: 200 requests of 1 KiB, up to 32 outstanding, each carrying its request id in its first 8 bytes
/// (the correlation id a codec would write).
#[derive(Default)]
struct App {
    sent: usize,
    answered: usize,
    failed: usize,
}

impl App {
    fn done(&self) -> bool {
        self.answered + self.failed == REQUESTS
    }

    fn next_request(&mut self, id: RequestId) -> Option<Bytes> {
        let outstanding = self.sent - self.answered - self.failed;
        (self.sent < REQUESTS && outstanding < 32).then(|| {
            self.sent += 1;
            let mut frame = vec![b'q'; FRAME];
            frame[..8].copy_from_slice(&id.as_u64().to_be_bytes());
            Bytes::from(frame)
        })
    }

    fn submitted(&mut self, result: Result<RequestId, SubmitError>) {
        if let Err(e) = result {
            println!("rejected at once: {e}");
            self.failed += 1;
        }
    }

    fn deliver(&mut self, event: Event) {
        if let Event::RequestDone { outcome, .. } = event {
            match outcome {
                Outcome::Response(_) => self.answered += 1,
                other => {
                    println!("failed: {other}");
                    self.failed += 1;
                }
            }
        }
    }
}

/// One simulated connection: the kernel's 4 KiB send buffer, which a server drains by one
/// 1 KiB request a millisecond, answering each with the id in its first 8 bytes.
#[derive(Default)]
struct Sockets {
    clock: Duration,
    conn: Option<ConnId>,
    connecting: bool,
    kernel: Vec<u8>,
    blocked: bool,
    short_writes: u64,
}

impl Sockets {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.as_nanos() as u64)
    }

    fn connect(&mut self, conn: ConnId, _endpoint: Endpoint) {
        self.conn = Some(conn);
        self.connecting = true;
        self.kernel.clear();
    }

    fn close(&mut self, conn: ConnId) {
        if self.conn == Some(conn) {
            self.conn = None;
        }
    }

    /// The kernel takes what fits in its send buffer.
    fn write_vectored(&mut self, conn: ConnId, bufs: &[Bytes]) -> Result<usize, Failure> {
        if self.conn != Some(conn) {
            return Err(Failure::Reset);
        }
        let mut n = 0;
        for buf in bufs {
            let take = buf.len().min(SEND_BUFFER - self.kernel.len());
            self.kernel.extend_from_slice(&buf[..take]);
            n += take;
        }
        if n < bufs.iter().map(Bytes::len).sum() {
            self.short_writes += 1;
            self.blocked = true;
        }
        Ok(n)
    }

    /// Sleeps a millisecond (or until the deadline, if sooner), lets the server read one
    /// request and answer it, and says what happened.
    fn wait_until(&mut self, deadline: Option<Instant>) -> Vec<Io> {
        let tick = self.now() + Duration::from_millis(1);
        let wake = deadline.map_or(tick, |d| d.min(tick)).max(self.now());
        self.clock = Duration::from_nanos(wake.as_nanos());
        let Some(conn) = self.conn else {
            return Vec::new();
        };
        let mut io = Vec::new();
        if std::mem::take(&mut self.connecting) {
            io.push(Io::Connected(conn));
        }
        if self.kernel.len() >= FRAME {
            let frame: Vec<u8> = self.kernel.drain(..FRAME).collect();
            let id = u64::from_be_bytes(frame[..8].try_into().expect("8 bytes"));
            io.push(Io::Response(
                conn,
                RequestId::from_u64(id),
                Bytes::from_static(b"ok"),
            ));
            io.push(Io::Received {
                conn,
                partial: false,
            });
        }
        if std::mem::take(&mut self.blocked) && self.kernel.len() < SEND_BUFFER {
            io.push(Io::Writable(conn));
        }
        io
    }
}

/// What the loop reports after a wait.
enum Io {
    Connected(ConnId),
    Writable(ConnId),
    Response(ConnId, RequestId, Bytes),
    Received {
        conn: ConnId,
        partial: bool,
    },
    #[allow(dead_code, reason = "this world never fails a socket; a real one does")]
    Closed(ConnId, Failure),
}
