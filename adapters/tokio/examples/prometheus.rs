//! keepwire's metrics in Prometheus' text format, through `metrics-exporter-prometheus`.
//!
//! ```text
//! cargo run -p keepwire-tokio --example prometheus --features metrics
//! cargo run -p keepwire-tokio --example prometheus --features metrics -- 127.0.0.1:9100
//! ```
//!
//! The recorder is installed first (keepwire registers its counters and gauges when the
//! client and its nodes are made), then a client sends requests to an echo server in this
//! process and to a port that refuses connections, and the example prints what a scrape
//! would read. Given an address, it then serves that text at `http://ADDR/metrics` until
//! interrupted (a minimal HTTP responder, so that the example needs no HTTP stack).

use std::error::Error;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use keepwire_tokio::{Config, LengthPrefixed, Target};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let serve: Option<SocketAddr> = std::env::args().nth(1).map(|a| a.parse()).transpose()?;
    let handle = PrometheusBuilder::new().install_recorder()?;

    let echo = echo_server().await?;
    let refused = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut config = Config::default();
    config.reconnect_backoff = Duration::from_millis(20);
    config.reconnect_backoff_max = Duration::from_millis(40);
    let client = keepwire_tokio::client(config)
        .node(echo)
        .node(refused)
        .build()?;
    let [good, bad] = [client.initial_nodes()[0], client.initial_nodes()[1]];
    for i in 0..100 {
        client
            .send(
                Target::Node(good),
                format!("request {i}"),
                Duration::from_secs(1),
            )
            .await?;
    }
    for _ in 0..3 {
        let failed = client
            .send(Target::Node(bad), &b"lost"[..], Duration::from_secs(1))
            .await;
        assert!(failed.is_err(), "the port refuses connections");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The driver updates the metrics at the end of each of its polls: one more round trip
    // makes sure the last ones are in.
    client.counters().await?;

    let text = handle.render();
    for line in text.lines().filter(|l| l.contains("keepwire_")) {
        println!("{line}");
    }
    if let Some(addr) = serve {
        serve_forever(addr, &handle)?;
    }
    client.shutdown().await;
    Ok(())
}

/// Answers every connection with the current exposition (whatever the request).
fn serve_forever(addr: SocketAddr, handle: &PrometheusHandle) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(addr)?;
    eprintln!("serving http://{addr}/metrics");
    for stream in listener.incoming() {
        let mut stream = stream?;
        let mut request = [0; 1024];
        let _ = stream.read(&mut request)?;
        let body = handle.render();
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )?;
    }
    Ok(())
}

/// An echo server for the built-in framing.
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
