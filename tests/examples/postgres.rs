//! A PostgreSQL client on keepwire-tokio: the startup handshake (trust or a clear-text
//! password) in a handshake hook, simple queries in order, pipelined on one connection.
//!
//! ```text
//! cargo run -p keepwire-tests --example postgres              # starts its own PostgreSQL 15
//! cargo run -p keepwire-tests --example postgres 127.0.0.1:5432 [USER [PASSWORD]]
//! ```
//!
//! Without an address it starts PostgreSQL (initdb and postgres on the PATH; as root it runs
//! the server as the user `keepwire`) and logs in as a role it creates.

use std::error::Error;
use std::time::{Duration, Instant};

use keepwire_tests::protocols::postgres::{Postgres, Response, Startup};
use keepwire_tests::servers::PostgresServer;
use keepwire_tokio::{Config, SendError, Target};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let mut _server = None;
    let (addr, startup) = match args.next() {
        Some(addr) => {
            let user = args.next().unwrap_or_else(|| "postgres".into());
            let mut startup = Startup::new(user, "postgres");
            if let Some(password) = args.next() {
                startup = startup.password(password);
            }
            (addr.parse()?, startup)
        }
        None => {
            let server = PostgresServer::start()?;
            server.create_role("demo", "demo-secret")?;
            let addr = server.addr();
            _server = Some(server);
            (
                addr,
                Startup::new("demo", "postgres").password("demo-secret"),
            )
        }
    };

    let client = keepwire_tokio::client(Config::default())
        .node(addr)
        .codec(Postgres::new()) // the simple query protocol: in order, no tags
        .handshake(startup) // startup and authentication, under the setup timeout
        .build()?;
    let timeout = Duration::from_secs(5);

    let payload = client
        .send(Target::Best, "SELECT version()", timeout)
        .await?;
    let response = Response::parse(&payload)?.into_result()?;
    println!(
        "{}",
        String::from_utf8_lossy(response.value(0, 0).unwrap_or_default())
    );

    // A hundred queries at once: pipelined on the one connection, each answer its own.
    let started = Instant::now();
    let queries: Vec<_> = (0..100)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .send(Target::Best, format!("SELECT {i} * {i}"), timeout)
                    .await
            })
        })
        .collect();
    for (i, query) in queries.into_iter().enumerate() {
        let response = Response::parse(&query.await??)?.into_result()?;
        assert_eq!(response.value(0, 0), Some((i * i).to_string().as_bytes()));
    }
    println!(
        "100 pipelined queries answered in {:.1?}",
        started.elapsed()
    );

    // A query past its deadline fails in time; its late answer never reaches another query.
    let slow = client.send(
        Target::Best,
        "SELECT pg_sleep(2)",
        Duration::from_millis(500),
    );
    match slow.await {
        Err(e @ SendError::DeadlineExceeded { .. }) => println!("{e}"),
        other => println!("unexpected: {other:?}"),
    }
    let payload = client.send(Target::Best, "SELECT 'next'", timeout).await?;
    let response = Response::parse(&payload)?;
    println!(
        "after it: {:?}",
        response.value(0, 0).map(String::from_utf8_lossy)
    );
    client.shutdown_gracefully().await;
    Ok(())
}
