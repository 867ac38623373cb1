//! A keepwire client behind tower layers: timeout and retry around a `ClientService`, with the
//! retry allowed only where keepwire says nothing of the request reached the server, and a
//! load-shed layer that refuses requests while keepwire's own back-pressure says a node cannot
//! take them (its connection is above the high watermark).
//!
//! ```text
//! cargo run -p keepwire-tokio --example tower --features tower
//! ```
//!
//! Everything runs on loopback in this process: an echo server, a port that refuses
//! connections, and a server that accepts and never reads.

use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keepwire_tokio::{Backpressure, Config, LengthPrefixed, SendError, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::retry::Policy;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// Retries made, for the summary.
static RETRIES: AtomicUsize = AtomicUsize::new(0);

/// Retries a request at most `left` more times, and only when keepwire says not one byte of
/// it reached the server ([`SendError::is_retryable`]): refused at once (not writable, no
/// node, ...) or ended before anything was written (a connect that failed). A timeout from the
/// timeout layer is never retried: the request may have been written.
#[derive(Clone, Debug)]
struct OnlyUnsent {
    left: usize,
}

impl Policy<Bytes, Bytes, BoxError> for OnlyUnsent {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _request: &mut Bytes,
        result: &mut Result<Bytes, BoxError>,
    ) -> Option<Self::Future> {
        let error = result.as_ref().err()?;
        let unsent = error
            .downcast_ref::<SendError>()
            .is_some_and(SendError::is_retryable);
        if unsent && self.left > 0 {
            println!("  retrying: {error} (nothing reached the server)");
            RETRIES.fetch_add(1, Ordering::Relaxed);
            self.left -= 1;
            Some(ready(()))
        } else {
            None
        }
    }

    fn clone_request(&mut self, request: &Bytes) -> Option<Bytes> {
        Some(request.clone())
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let echo = echo_server().await?;
    let refused = refusing_port()?;

    // 1. Timeout and retry. Two nodes, one of which refuses connections: a request that
    //    selection sends there fails before a byte is written, and is retried.
    let mut config = Config::default();
    // A seed whose first pick is the refusing node, so that the retry shows (selection
    // starts from a random offset, drawn from the seed).
    config.seed = Some(3);
    config.reconnect_backoff = Duration::from_secs(5); // keep the refusing node out meanwhile
    config.reconnect_backoff_max = Duration::from_secs(5);
    let client = keepwire_tokio::client(config)
        .node(refused)
        .node(echo)
        .build()?;
    let service = client.service(Target::Best, Duration::from_secs(2)).await?;
    let mut stack = ServiceBuilder::new()
        .retry(OnlyUnsent { left: 2 })
        .timeout(Duration::from_millis(500))
        .service(service);
    println!("timeout + retry, nodes {refused} (refuses) and {echo} (echoes):");
    for i in 0..4 {
        let request = Bytes::from(format!("request {i}"));
        let reply = stack.ready().await?.call(request).await?;
        println!("  {:?}", String::from_utf8_lossy(&reply));
    }
    let counters = client.counters().await?;
    println!(
        "  connects {}, responses {}, retried {}",
        counters.connects,
        counters.responses,
        RETRIES.load(Ordering::Relaxed)
    );
    if RETRIES.load(Ordering::Relaxed) == 0 {
        return Err("the refusing node was never picked: choose another seed".into());
    }
    client.shutdown().await;

    // 2. Load shedding. A server that never reads: once the connection is above its high
    //    watermark, keepwire's back-pressure makes the service not ready, and the load-shed
    //    layer refuses at once instead of queuing.
    let stalled = stalled_server().await?;
    let mut config = Config::default();
    config.high_watermark = 64 * 1024;
    config.low_watermark = 32 * 1024;
    config.socket.send_buffer_size = Some(4096);
    let client = keepwire_tokio::client(config).node(stalled).build()?;
    let node = client.initial_nodes()[0];
    let service = client
        .service(Target::Node(node), Duration::from_secs(30))
        .await?;
    let mut shedding = ServiceBuilder::new().load_shed().service(service.clone());
    println!("load shed, node {stalled} (never reads):");
    let mut held = Vec::new();
    while service.backpressure().is_none() {
        let payload = Bytes::from(vec![b'x'; 8 * 1024]);
        // Sent directly: these stay in flight, filling the connection.
        let client = client.clone();
        held.push(tokio::spawn(async move {
            client
                .send(Target::Node(node), payload, Duration::from_secs(30))
                .await
        }));
        tokio::time::sleep(Duration::from_millis(2)).await;
        if held.len() > 1000 {
            return Err("the connection never went above its high watermark".into());
        }
    }
    println!(
        "  after {} requests of 8 KiB: {:?}",
        held.len(),
        service.backpressure()
    );
    assert_eq!(service.backpressure(), Some(Backpressure::NotWritable));
    let before = client.counters().await?;
    let shed = shedding
        .ready()
        .await?
        .call(Bytes::from_static(b"one more"))
        .await;
    match shed {
        Err(error) if error.is::<tower::load_shed::error::Overloaded>() => {
            println!("  shed at once: {error}");
        }
        other => return Err(format!("expected the load-shed layer to refuse: {other:?}").into()),
    }
    let after = client.counters().await?;
    assert_eq!(
        after.submitted, before.submitted,
        "the shed request never reached keepwire"
    );
    client.shutdown().await;
    for task in held {
        let _ = task.await;
    }
    Ok(())
}

/// An echo server for the built-in framing: every complete frame goes back as it came.
async fn echo_server() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(echo(stream));
        }
    });
    Ok(addr)
}

async fn echo(mut stream: TcpStream) -> std::io::Result<()> {
    let codec = LengthPrefixed::default();
    let mut inbound = BytesMut::new();
    loop {
        if stream.read_buf(&mut inbound).await? == 0 {
            return Ok(());
        }
        while let Some((id, payload)) = codec
            .cut(&mut inbound)
            .map_err(|v| std::io::Error::other(v.to_string()))?
        {
            let frame = LengthPrefixed::frame(id, &payload).map_err(std::io::Error::other)?;
            stream.write_all(&frame).await?;
        }
    }
}

/// A server that accepts connections and never reads from them (keeping them open), with a
/// small receive buffer so that the client's writes stall soon.
async fn stalled_server() -> std::io::Result<SocketAddr> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?; // accepted sockets inherit it
    socket.bind("127.0.0.1:0".parse().map_err(std::io::Error::other)?)?;
    let listener = socket.listen(16)?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            kept.push(stream);
        }
    });
    Ok(addr)
}

/// A loopback port with nothing listening: connects are refused.
fn refusing_port() -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()
}
