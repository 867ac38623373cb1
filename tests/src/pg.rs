//! What the PostgreSQL tests share, plaintext and TLS: a query on the client's one node, its
//! first value, and many tasks pipelining distinct queries on one connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keepwire_driver::{Client, Runtime, Target};

use crate::protocols::postgres::Response;
use crate::{runtime_name, spawn};

/// Runs `sql` on the client's one node and reads the response; panics on any failure.
///
/// `Target::Node`, not `Target::Best`: right after its connection was lost, a sole node is in
/// its reconnect backoff, when selection refuses at once (`NoNode`) but a request for the
/// node waits for the reconnect.
pub async fn query(client: &Client, sql: &str) -> Response {
    let node = client.initial_nodes()[0];
    let payload = client
        .send(Target::Node(node), sql.to_owned(), Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    Response::parse(&payload).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The text of the first value of `sql`'s result.
pub async fn value(client: &Client, sql: &str) -> String {
    first_value(query(client, sql).await)
}

/// The text of the first value of a response's payload.
pub fn text(payload: &Bytes) -> String {
    first_value(Response::parse(payload).unwrap())
}

fn first_value(response: Response) -> String {
    let result = response.into_result().unwrap();
    String::from_utf8(result.value(0, 0).expect("a value").to_vec()).unwrap()
}

/// `tasks` tasks each send `requests` distinct queries (`SELECT '<runtime>-<task>-<n>'`) at
/// once on `client` and check every answer is their own; asserts zero mismatches and that all
/// went over one connection. Returns how long it took.
pub async fn pipelined(
    runtime: &Arc<dyn Runtime>,
    client: &Client,
    tasks: usize,
    requests: usize,
) -> Duration {
    let name = runtime_name(&**runtime);
    let pid = value(client, "SELECT pg_backend_pid()").await;
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let client = client.clone();
            spawn(&**runtime, async move {
                let mut mismatches = 0;
                for r in 0..requests {
                    let expected = format!("{name}-{t}-{r}");
                    let sql = format!("SELECT '{expected}'");
                    let payload = client
                        .send(Target::Best, sql, Duration::from_secs(20))
                        .await
                        .unwrap_or_else(|e| panic!("task {t} request {r}: {e}"));
                    if text(&payload) != expected {
                        mismatches += 1;
                    }
                }
                mismatches
            })
        })
        .collect();
    let mut mismatches = 0;
    for handle in handles {
        mismatches += handle.join().await;
    }
    let took = started.elapsed();
    assert_eq!(mismatches, 0);
    assert_eq!(
        value(client, "SELECT pg_backend_pid()").await,
        pid,
        "all on one connection"
    );
    took
}
