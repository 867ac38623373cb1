//! The README's quick-start: a memcached client on keepwire-tokio, with the memcached codec
//! from `keepwire_tests::protocols` (keepwire-driver and bytes only; copy it into your crate).
//!
//! ```text
//! cargo run -p keepwire-tests --example quickstart            # starts its own memcached
//! cargo run -p keepwire-tests --example quickstart 127.0.0.1:11211
//! ```
//!
//! Without an address it starts memcached on a free loopback port (`apt-get install
//! memcached` if it is missing) and stops it at the end.

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use keepwire_tests::protocols::memcached::{self, Memcached, Reply};
use keepwire_tests::servers::MemcachedServer;
use keepwire_tokio::{Config, SendError, Target};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (addr, _server) = match std::env::args().nth(1) {
        Some(addr) => (addr.parse()?, None),
        None => {
            let server = MemcachedServer::start()?;
            (server.addr(), Some(server))
        }
    };
    quickstart(addr).await
}

pub(crate) async fn quickstart(addr: SocketAddr) -> Result<(), Box<dyn Error>> {
    // README: quick-start
    let mut config = Config::default(); // Pinot / KIP-601 defaults, validated
    config.write_timeout = Duration::from_secs(2);
    let client = keepwire_tokio::client(config)
        .node(addr)
        .codec(Memcached::new()) // memcached's text protocol: in order, no tags
        .build()?;
    let timeout = Duration::from_secs(1);
    let set = memcached::set("greeting", "hello"); // requests are memcached's own bytes
    client.send(Target::Best, set, timeout).await?;
    let get = memcached::get("greeting");
    match client.send(Target::Best, get, timeout).await {
        Ok(reply) => println!("{:?}", Reply::parse(&reply)?.into_value()),
        Err(SendError::NotWritable) => println!("failed fast: that connection is backed up"),
        Err(e) if e.is_retryable() => println!("never reached the server, safe to resend: {e}"),
        Err(e) => println!("may have reached the server: {e}"), // typed: deadline, lost, ...
    }
    client.shutdown_gracefully().await; // sent requests finish, new ones are refused
    // README: end
    Ok(())
}
