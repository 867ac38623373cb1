//! What PostgreSQL costs on keepwire: the keepwire PostgreSQL client (the `Postgres` codec, the
//! startup as its handshake hook) against a hand-written tokio PostgreSQL client, point reads
//! by primary key pipelined on one connection (`support/pipelined_bench.rs` says how it runs and
//! what the baseline is).
//!
//! ```text
//! cargo run --release -p keepwire-tests --example postgres_bench [-- REQUESTS [IN_FLIGHT [ROUNDS]]]
//! ```
//!
//! Defaults: 200,000 reads per client per round, 64 in flight, 7 rounds. It starts its own
//! PostgreSQL (initdb and postgres on the PATH), fills a table with the 1,024 keys, and logs
//! both clients in as a role with a clear-text password. Both send the same simple-protocol
//! `SELECT` and check every answer's value.

use std::error::Error;
use std::io;

use bytes::{Bytes, BytesMut};
use keepwire_tests::protocols::postgres::{Postgres, Response, Startup, Step};
use keepwire_tests::servers::PostgresServer;
use keepwire_tokio::{Codec, TokioClientBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "support/pipelined_bench.rs"]
mod pipelined_bench;

use pipelined_bench::{KEYS, Workload, key, run_bench, value};

const TABLE: &str = "keepwire_bench";

struct PointReads {
    codec: Postgres,
    startup: Startup,
}

impl Workload for PointReads {
    fn codec(&self) -> impl Codec {
        self.codec
    }

    fn ping(&self) -> Bytes {
        Bytes::from_static(b"SELECT 1")
    }

    fn read(&self, i: usize) -> Bytes {
        format!("SELECT v FROM {TABLE} WHERE k = '{}'", key(i)).into()
    }

    fn is_value(&self, answer: &Bytes, i: usize) -> bool {
        Response::parse(answer)
            .ok()
            .and_then(|r| r.into_result().ok())
            .is_some_and(|r| r.value(0, 0) == Some(value(i).as_bytes()))
    }

    fn keepwire(&self, builder: TokioClientBuilder) -> TokioClientBuilder {
        builder.handshake(self.startup.clone())
    }

    /// The startup a hand-written client runs: the same sans-IO steps as keepwire's hook, on
    /// the plain stream.
    async fn set_up(&self, stream: &mut TcpStream) -> io::Result<()> {
        stream.write_all(&self.startup.message()).await?;
        let mut received = BytesMut::new();
        loop {
            match self.startup.step(&mut received).map_err(io::Error::other)? {
                Step::Ready => return Ok(()),
                Step::Send(reply) => stream.write_all(&reply).await?,
                Step::Read => {
                    if stream.read_buf(&mut received).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
            }
        }
    }

    fn write_in_order(&self, request: &[u8], out: &mut BytesMut) {
        self.codec
            .encode(request, None, out)
            .expect("the benchmark's queries are valid SQL text");
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = PostgresServer::start()?;
    let fill = [
        format!("CREATE TABLE {TABLE} (k text PRIMARY KEY, v text NOT NULL)"),
        // The keys and values `key(i)` and `value(i)` name, for i below KEYS.
        format!(
            "INSERT INTO {TABLE} SELECT 'bench-' || lpad(i::text, 4, '0'), \
             'value-' || lpad(i::text, 4, '0') || '-' || repeat('x', 16) \
             FROM generate_series(0, {}) AS i",
            KEYS - 1
        ),
        "CREATE ROLE bench LOGIN PASSWORD 'bench-secret'".to_owned(),
        format!("GRANT SELECT ON {TABLE} TO bench"),
        format!("ANALYZE {TABLE}"),
    ];
    for sql in fill {
        server.query(&sql)?.into_result()?;
    }
    let workload = PointReads {
        codec: Postgres::new(),
        startup: Startup::new("bench", "postgres").password("bench-secret"),
    };
    run_bench(workload, "PostgreSQL", server.addr()).await
}
