//! TLS request/response throughput through keepwire against a hand-written tokio-rustls client
//! of the same framing, taking turns in the same run.
//!
//! ```text
//! cargo run --release -p keepwire-tests --example tls_bench -- [REQUESTS] [IN_FLIGHT] [ROUNDS]
//! # defaults: 100000 requests, 64 in flight, 9 rounds
//! ```
//!
//! One TLS echo server (rustls, blocking, on its own thread; certificates made by rcgen) for
//! the built-in `LengthPrefixed` framing: each read is answered by one write of every complete
//! frame it finished. Both clients hold one TLS connection (TLS 1.3, ring, the same
//! `ClientConfig`), keep `IN_FLIGHT` callers sending 64-byte requests back to back until
//! `REQUESTS` have been answered, check every answer, and take turns going first.
//!
//! - **keepwire**: `keepwire_tokio::client` with `keepwire_tokio::tls::handshake`: a deadline
//!   per request, watermarks, the write timeout counted at the kernel boundary (a write
//!   reports its frames only once their ciphertext is in the kernel), a typed outcome for
//!   every request, all through one driver task.
//! - **hand-written**: the usual pipelined tokio-rustls client: callers register a reply slot
//!   under a fresh correlation id in a `Mutex<HashMap>`, hand the frame to a writer task that
//!   writes whatever is queued in one `write_all` + `flush`, and a reader task cuts answers
//!   with the same `LengthPrefixed` decoder and fills the slots; each call is wrapped in
//!   `tokio::time::timeout`.

use std::collections::HashMap;
use std::error::Error;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keepwire_driver::tls::TlsConfig;
use keepwire_driver::tls::rustls::{ServerConfig, ServerConnection, StreamOwned};
use keepwire_driver::{Codec, Decoded, LengthPrefixed};
use keepwire_tests::tls::Pki;
use keepwire_tokio::{Config, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

const PAYLOAD: [u8; 64] = [b'x'; 64];
const TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let in_flight: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(9), |a| a.parse())?;

    let pki = Pki::new();
    let addr = start_server(pki.server_config())?;
    let tls = pki.client_config();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "TLS echo on {addr}: {requests} requests of {} bytes, {in_flight} in flight, {rounds} rounds",
        PAYLOAD.len()
    );
    println!(
        "| round | keepwire (req/s) | hand-written tokio-rustls (req/s) | keepwire / hand-written |"
    );
    println!("|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    let mut keepwire_rates = Vec::new();
    let mut baseline_rates = Vec::new();
    for round in 1..=rounds {
        let (k, b) = if round % 2 == 1 {
            let k = runtime.block_on(keepwire_round(addr, &tls, requests, in_flight))?;
            let b = runtime.block_on(baseline_round(addr, &tls, requests, in_flight))?;
            (k, b)
        } else {
            let b = runtime.block_on(baseline_round(addr, &tls, requests, in_flight))?;
            let k = runtime.block_on(keepwire_round(addr, &tls, requests, in_flight))?;
            (k, b)
        };
        println!("| {round} | {k:.0} | {b:.0} | {:.2} |", k / b);
        keepwire_rates.push(k);
        baseline_rates.push(b);
        ratios.push(k / b);
    }
    println!(
        "| **median** | **{:.0}** | **{:.0}** | **{:.2}** |",
        median(&mut keepwire_rates),
        median(&mut baseline_rates),
        median(&mut ratios)
    );
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Requests per second through keepwire.
async fn keepwire_round(
    addr: SocketAddr,
    tls: &TlsConfig,
    requests: usize,
    in_flight: usize,
) -> Result<f64, Box<dyn Error>> {
    let client = keepwire_tokio::client(Config::default())
        .node(addr)
        .handshake(keepwire_tokio::tls::handshake(tls.clone()))
        .build()?;
    let node = client.initial_nodes()[0];
    // One request first, so the connect and the TLS handshake are not measured.
    client
        .send(Target::Node(node), &PAYLOAD[..], TIMEOUT)
        .await?;
    let claimed = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (client, claimed) = (client.clone(), Arc::clone(&claimed));
        callers.spawn(async move {
            let mut failed = 0usize;
            while claimed.fetch_add(1, Ordering::Relaxed) < requests {
                let payload = Bytes::from_static(&PAYLOAD);
                match client.send(Target::Node(node), payload, TIMEOUT).await {
                    Ok(answer) if answer[..] == PAYLOAD[..] => {}
                    _ => failed += 1,
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(caller) = callers.join_next().await {
        failed += caller?;
    }
    let elapsed = start.elapsed();
    client.shutdown().await;
    if failed > 0 {
        return Err(format!("keepwire: {failed} requests failed").into());
    }
    Ok(requests as f64 / elapsed.as_secs_f64())
}

type Slots = Arc<Mutex<HashMap<u64, oneshot::Sender<Bytes>>>>;

/// Requests per second through the hand-written tokio-rustls client.
async fn baseline_round(
    addr: SocketAddr,
    tls: &TlsConfig,
    requests: usize,
    in_flight: usize,
) -> Result<f64, Box<dyn Error>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls.rustls()));
    let name = tls.server_name_for(Some(addr))?;
    let stream = connector.connect(name, tcp).await?;
    let (mut reader, mut writer) = tokio::io::split(stream);
    let slots: Slots = Arc::default();
    let (frames, mut queue) = mpsc::unbounded_channel::<Bytes>();

    let write_task = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(64 * 1024);
        while let Some(frame) = queue.recv().await {
            batch.extend_from_slice(&frame);
            while batch.len() < 64 * 1024 {
                match queue.try_recv() {
                    Ok(frame) => batch.extend_from_slice(&frame),
                    Err(_) => break,
                }
            }
            if writer.write_all(&batch).await.is_err() || writer.flush().await.is_err() {
                return;
            }
            batch.clear();
        }
    });
    let read_task = {
        let slots = Arc::clone(&slots);
        tokio::spawn(async move {
            let mut decoder = LengthPrefixed::default().decoder();
            let mut inbound = BytesMut::with_capacity(64 * 1024);
            loop {
                inbound.reserve(64 * 1024);
                match reader.read_buf(&mut inbound).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                while let Ok(Some(Decoded::Tagged { id, payload })) = decoder.decode(&mut inbound) {
                    let slot = slots.lock().expect("slots").remove(&id);
                    if let Some(slot) = slot {
                        let _ = slot.send(payload);
                    }
                }
            }
        })
    };

    let next_id = Arc::new(AtomicU64::new(0));
    let call = {
        let (slots, frames, next_id) = (Arc::clone(&slots), frames.clone(), Arc::clone(&next_id));
        move |payload: &'static [u8]| {
            let (slots, frames, next_id) =
                (Arc::clone(&slots), frames.clone(), Arc::clone(&next_id));
            async move {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                let (reply, answer) = oneshot::channel();
                slots.lock().expect("slots").insert(id, reply);
                let frame = LengthPrefixed::frame(id, payload).expect("frame fits");
                if frames.send(frame).is_err() {
                    return None;
                }
                match tokio::time::timeout(TIMEOUT, answer).await {
                    Ok(Ok(answer)) => Some(answer),
                    _ => {
                        slots.lock().expect("slots").remove(&id);
                        None
                    }
                }
            }
        }
    };
    // One request first, as for keepwire.
    call(&PAYLOAD)
        .await
        .ok_or("hand-written: the first request failed")?;
    let claimed = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (call, claimed) = (call.clone(), Arc::clone(&claimed));
        callers.spawn(async move {
            let mut failed = 0usize;
            while claimed.fetch_add(1, Ordering::Relaxed) < requests {
                match call(&PAYLOAD).await {
                    Some(answer) if answer[..] == PAYLOAD[..] => {}
                    _ => failed += 1,
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(caller) = callers.join_next().await {
        failed += caller?;
    }
    let elapsed = start.elapsed();
    drop((call, frames));
    let _ = write_task.await;
    read_task.abort();
    if failed > 0 {
        return Err(format!("hand-written: {failed} requests failed").into());
    }
    Ok(requests as f64 / elapsed.as_secs_f64())
}

/// A TLS echo server for `LengthPrefixed` frames, each connection on its own thread: every
/// read is answered by one write of the complete frames it finished.
fn start_server(config: Arc<ServerConfig>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let config = Arc::clone(&config);
            thread::spawn(move || {
                let _ = serve(stream, config);
            });
        }
    });
    Ok(addr)
}

fn serve(tcp: TcpStream, config: Arc<ServerConfig>) -> std::io::Result<()> {
    tcp.set_nodelay(true)?;
    let conn = ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = StreamOwned::new(conn, tcp);
    let mut inbound = Vec::with_capacity(128 * 1024);
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let n = tls.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        inbound.extend_from_slice(&chunk[..n]);
        let complete = complete_frames(&inbound);
        if complete > 0 {
            tls.write_all(&inbound[..complete])?;
            tls.flush()?;
            inbound.drain(..complete);
        }
    }
}

/// How many leading bytes of `buf` are whole frames (`u32` BE length, then that many bytes).
fn complete_frames(buf: &[u8]) -> usize {
    let mut at = 0;
    while let Some(header) = buf.get(at..at + 4) {
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if buf.len() - at - 4 < len {
            break;
        }
        at += 4 + len;
    }
    at
}
