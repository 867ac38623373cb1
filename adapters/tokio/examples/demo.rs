//! keepwire in 15 seconds: four loopback servers, one client, a steady request load, and a
//! live timeline of what keepwire notices.
//!
//! ```text
//! cargo run -p keepwire-tokio --example demo
//! ```
//!
//! * `healthy`   answers every request.
//! * `stalls`    answers, then stops reading at t = 2 s (a wedged server): the outbound buffer
//!   fills, sends are rejected as "not writable", the write timeout closes the connection.
//! * `restarts`  restarts on the same port at t = 4 s and t = 8 s (down 500 ms each time):
//!   requests in flight end "closed by peer", reconnects are refused, then succeed.
//! * `blackhole` never accepts (full accept queue): every connect hangs until the setup
//!   timeout, which grows from 500 ms to 2 s; after three failures the node is quarantined.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keepwire_proto::{CloseReason, Event, NodeId, NodeState, Reason};
use keepwire_tokio::{ClientEvent, Config, LengthPrefixed, SendError, Target};
use socket2::{Domain, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;

const LOAD: Duration = Duration::from_secs(12);
const SEND_EVERY: Duration = Duration::from_millis(20);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);
const PAYLOAD: usize = 16 * 1024;
const STALL_AT: Duration = Duration::from_secs(2);
const RESTARTS_AT: [Duration; 2] = [Duration::from_secs(4), Duration::from_secs(8)];
const NAMES: [&str; 4] = ["healthy", "stalls", "restarts", "blackhole"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let healthy = spawn_echo(None).await?;
    let stalls = spawn_echo(Some(start + STALL_AT)).await?;
    let restarts = spawn_restarting(start).await?;
    let (blackhole, _queue) = full_accept_queue()?;
    let addrs = [healthy, stalls, restarts, blackhole];

    let mut config = Config::default();
    config.setup_timeout = Duration::from_millis(500);
    config.setup_timeout_max = Duration::from_secs(2);
    config.write_timeout = Duration::from_secs(1);
    config.high_watermark = 256 * 1024;
    config.low_watermark = 128 * 1024;
    config.reconnect_backoff = Duration::from_millis(100);
    config.reconnect_backoff_max = Duration::from_secs(1);
    config.probe_backoff = Duration::from_secs(2);
    config.socket.user_timeout = Some(Duration::from_secs(3));
    config.socket.send_buffer_size = Some(16 * 1024);
    let client = addrs
        .iter()
        .fold(keepwire_tokio::client(config), |b, a| b.node(*a))
        .build()?;
    let nodes: HashMap<NodeId, usize> = client
        .initial_nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, i))
        .collect();

    println!(
        "keepwire demo: 4 loopback servers, {} s of steady load on tokio\n",
        LOAD.as_secs()
    );
    println!("  healthy    {healthy:<16}  answers every request");
    println!("  stalls     {stalls:<16}  stops reading at t=2 s");
    println!("  restarts   {restarts:<16}  restarts on the same port at t=4 s and t=8 s");
    println!("  blackhole  {blackhole:<16}  never accepts: connects hang (full accept queue)");
    println!(
        "\n  setup timeout 500 ms doubling to 2 s, write timeout 1 s, watermarks 256/128 KiB,"
    );
    println!(
        "  backoff 100 ms doubling to 1 s, one {} KiB request per node every {} ms, each with a {} ms deadline\n",
        PAYLOAD / 1024,
        SEND_EVERY.as_millis(),
        REQUEST_TIMEOUT.as_millis()
    );

    let stats = Arc::new(Mutex::new(vec![NodeStats::default(); NAMES.len()]));
    let timeline = tokio::spawn(print_timeline(
        client.subscribe(),
        nodes.clone(),
        Arc::clone(&stats),
        start,
    ));
    let sampler = tokio::spawn(sample_pending(
        client.clone(),
        nodes.clone(),
        Arc::clone(&stats),
    ));

    let mut load = JoinSet::new();
    let mut tick = tokio::time::interval(SEND_EVERY);
    while start.elapsed() < LOAD {
        tick.tick().await;
        for (&node, &i) in &nodes {
            let (client, stats) = (client.clone(), Arc::clone(&stats));
            load.spawn(async move {
                let sent = Instant::now();
                let outcome = client
                    .send(Target::Node(node), vec![i as u8; PAYLOAD], REQUEST_TIMEOUT)
                    .await;
                record(&stats, i, sent.elapsed(), outcome, start);
            });
        }
    }
    while load.join_next().await.is_some() {}
    sampler.abort();
    let counters = client.counters().await?;
    client.shutdown().await;
    timeline.await?;

    print_table(&stats.lock().unwrap());
    println!(
        "\ncounters: {} write timeouts, {} unwritable rejections, {} setup timeouts, {} reconnects, {} quarantines, {} probes",
        counters.write_timeouts,
        counters.unwritable_rejections,
        counters.setup_timeouts,
        counters.reconnects,
        counters.quarantines,
        counters.probes
    );
    println!("finished in {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

#[derive(Clone, Debug, Default)]
struct NodeStats {
    ok: u64,
    failed_fast: u64,
    deadline: u64,
    lost: u64,
    lost_unsent: u64,
    detect: Option<Duration>,
    peak_pending: u64,
    announce_rejection: bool,
}

/// When each node's fault begins, for "time to detect".
fn fault_start(i: usize, at: Duration) -> Option<Duration> {
    match NAMES[i] {
        "stalls" => Some(STALL_AT),
        "restarts" => RESTARTS_AT.into_iter().rfind(|r| *r <= at),
        "blackhole" => Some(Duration::ZERO),
        _ => None,
    }
}

fn record(
    stats: &Mutex<Vec<NodeStats>>,
    i: usize,
    took: Duration,
    outcome: Result<bytes::Bytes, SendError>,
    start: Instant,
) {
    let mut stats = stats.lock().unwrap();
    let s = &mut stats[i];
    match outcome {
        Ok(_) => s.ok += 1,
        Err(SendError::DeadlineExceeded { .. }) => s.deadline += 1,
        Err(e) if took < Duration::from_millis(50) => {
            s.failed_fast += 1;
            if std::mem::take(&mut s.announce_rejection) {
                println!(
                    "  t={:6.3}s  {:<9}  send rejected at once: {e}",
                    start.elapsed().as_secs_f64(),
                    NAMES[i]
                );
            }
        }
        Err(e) => {
            s.lost += 1;
            // The error says whether the server may have the request: only those that never
            // left are safe to send again.
            s.lost_unsent += u64::from(e.is_retryable());
        }
    }
}

async fn print_timeline(
    mut events: keepwire_tokio::Events,
    nodes: HashMap<NodeId, usize>,
    stats: Arc<Mutex<Vec<NodeStats>>>,
    start: Instant,
) {
    while let Some(event) = events.recv().await {
        let ClientEvent::Pool(event) = event else {
            continue;
        };
        let t = start.elapsed();
        if let Event::PanicMode {
            entered,
            healthy,
            admitted,
            ..
        } = &event
        {
            let what = if *entered { "enters" } else { "leaves" };
            println!(
                "  t={:6.3}s  (pool)     {what} panic mode: {healthy} of {admitted} nodes healthy",
                t.as_secs_f64()
            );
            continue;
        }
        let (node, line) = match &event {
            Event::StateChanged {
                node,
                from,
                to,
                reason,
                ..
            } => (
                *node,
                format!("{} → {}  ({})", state(*from), state(*to), why(*reason)),
            ),
            Event::Writability {
                node,
                writable,
                pending,
            } => {
                let flip = if *writable {
                    "writable again"
                } else {
                    "NOT writable"
                };
                (*node, format!("{flip}: {} KiB pending", pending / 1024))
            }
            Event::Evicted { conn, reason } => {
                (conn.node(), format!("connection evicted ({reason:?})"))
            }
            Event::Quarantined { node, cause, .. } => (
                *node,
                format!(
                    "QUARANTINED after repeated failures ({cause:?}); probing on fresh connections"
                ),
            ),
            Event::Readmitted { node, via, .. } => (*node, format!("readmitted ({via:?})")),
            _ => continue,
        };
        let Some(&i) = nodes.get(&node) else { continue };
        {
            let mut stats = stats.lock().unwrap();
            let s = &mut stats[i];
            let failed = matches!(&event, Event::StateChanged { reason: Reason::Closed(r), .. } if r.is_failure());
            if failed {
                if let (None, Some(fault)) = (s.detect, fault_start(i, t)) {
                    s.detect = Some(t.saturating_sub(fault));
                }
            }
            if let Event::Writability {
                writable: false,
                pending,
                ..
            } = &event
            {
                s.announce_rejection = true;
                s.peak_pending = s.peak_pending.max(*pending);
            }
        }
        if NAMES[i] != "healthy"
            || !matches!(&event, Event::StateChanged { .. })
            || t < Duration::from_millis(100)
        {
            println!("  t={:6.3}s  {:<9}  {line}", t.as_secs_f64(), NAMES[i]);
        }
    }
}

async fn sample_pending(
    client: keepwire_tokio::Client,
    nodes: HashMap<NodeId, usize>,
    stats: Arc<Mutex<Vec<NodeStats>>>,
) {
    loop {
        for (&node, &i) in &nodes {
            if let Ok(info) = client.node_info(node).await {
                let mut stats = stats.lock().unwrap();
                stats[i].peak_pending = stats[i].peak_pending.max(info.pending_bytes);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn print_table(stats: &[NodeStats]) {
    println!(
        "\n  node        requests ok   failed fast   deadline exceeded   connection lost (unsent)   time to detect   peak pending"
    );
    for (i, s) in stats.iter().enumerate() {
        let detect = s
            .detect
            .map_or_else(|| "-".to_owned(), |d| format!("{} ms", d.as_millis()));
        let lost = format!("{} ({})", s.lost, s.lost_unsent);
        println!(
            "  {:<10}  {:>11}   {:>11}   {:>17}   {:>24}   {:>14}   {:>8} KiB",
            NAMES[i],
            s.ok,
            s.failed_fast,
            s.deadline,
            lost,
            detect,
            s.peak_pending / 1024
        );
    }
}

fn state(s: NodeState) -> &'static str {
    match s {
        NodeState::Disconnected { .. } => "disconnected",
        NodeState::Connecting => "connecting",
        NodeState::Handshaking => "handshaking",
        NodeState::Ready => "ready",
        NodeState::AuthFailed { .. } => "auth failed",
        NodeState::Closed => "closed",
        _ => "?",
    }
}

fn why(reason: Reason) -> String {
    match reason {
        Reason::Closed(CloseReason::Shutdown) => "shutdown".into(),
        Reason::Closed(cause) => cause.to_string(),
        Reason::Demand => "a request needs a connection".into(),
        Reason::Probe => "probe on a fresh connection".into(),
        Reason::Connected => "TCP connected".into(),
        Reason::HandshakeDone => "handshake done".into(),
        other => format!("{other:?}"),
    }
}

/// An echo server speaking the built-in codec; with `stall_at`, it stops reading then (and
/// never reads on connections accepted later), with 4 KiB receive buffers so it stalls fast.
async fn spawn_echo(stall_at: Option<Instant>) -> std::io::Result<SocketAddr> {
    let socket = TcpSocket::new_v4()?;
    if stall_at.is_some() {
        socket.set_recv_buffer_size(4096)?;
    }
    socket.bind("127.0.0.1:0".parse().expect("literal"))?;
    let listener = socket.listen(128)?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(echo(stream, stall_at));
        }
    });
    Ok(addr)
}

async fn echo(mut stream: TcpStream, stall_at: Option<Instant>) {
    let mut header = [0u8; LengthPrefixed::HEADER_LEN];
    loop {
        if stall_at.is_some_and(|at| Instant::now() >= at) {
            // Wedged: keep the socket open, read nothing, ever.
            std::future::pending::<()>().await;
        }
        if stream.read_exact(&mut header).await.is_err() {
            return;
        }
        let len =
            u32::from_be_bytes([header[0], header[1], header[2], header[3]]).saturating_sub(8);
        let mut payload = vec![0; len as usize];
        if stream.read_exact(&mut payload).await.is_err() {
            return;
        }
        let id = u64::from_be_bytes(header[4..].try_into().expect("8 bytes"));
        let frame = LengthPrefixed::frame(id, &payload).expect("fits");
        if stream.write_all(&frame).await.is_err() {
            return;
        }
    }
}

/// An echo server that restarts on the same port at each of `RESTARTS_AT`, down 500 ms.
async fn spawn_restarting(start: Instant) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut listener = Some(listener);
        for restart in RESTARTS_AT.into_iter().map(Some).chain([None]) {
            let Some(current) = listener.take() else {
                return;
            };
            let mut connections = JoinSet::new();
            let serve = async {
                while let Ok((stream, _)) = current.accept().await {
                    connections.spawn(echo(stream, None));
                }
            };
            match restart {
                Some(at) => drop(tokio::time::timeout_at((start + at).into(), serve).await),
                None => serve.await,
            }
            drop(current);
            connections.abort_all();
            tokio::time::sleep(Duration::from_millis(500)).await;
            listener = TcpListener::bind(addr).await.ok();
        }
    });
    Ok(addr)
}

/// A `listen(0)` socket that never accepts, its queue filled by one connection: further
/// connects get no answer to their SYN.
fn full_accept_queue() -> std::io::Result<(SocketAddr, (Socket, std::net::TcpStream))> {
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    listener.bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("literal").into())?;
    listener.listen(0)?;
    let addr = listener.local_addr()?.as_socket().expect("inet");
    let filler = std::net::TcpStream::connect(addr)?;
    Ok((addr, (listener, filler)))
}
