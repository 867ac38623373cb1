//! What the Redis tests share, plaintext and TLS: a command on the client's one node, and many
//! tasks pipelining distinct `ECHO`s on one connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keepwire_driver::{Client, Runtime, Target};

use crate::protocols::redis::{Reply, command};
use crate::{OneConnection, spawn};

/// Runs the command `args` on the client's one node and reads the answer; panics on any
/// failure (a server error is an answer: [`Reply::Error`]).
pub async fn ask<const N: usize>(client: &Client, args: [&[u8]; N]) -> Reply {
    let node = client.initial_nodes()[0];
    let request = command(args);
    let payload = client
        .send(Target::Node(node), request.clone(), Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{request:?}: {e}"));
    Reply::parse(&payload).unwrap_or_else(|e| panic!("{request:?}: {e}"))
}

/// `tasks` tasks each send `requests` `ECHO`s of distinct texts and lengths at once on
/// `client`, and check every answer is their own; asserts zero mismatches and that all went
/// over one connection. Returns how long it took.
pub async fn pipelined(
    runtime: &Arc<dyn Runtime>,
    client: &Client,
    tasks: usize,
    requests: usize,
) -> Duration {
    let node = client.initial_nodes()[0];
    let conn = OneConnection::now(client).await;
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let client = client.clone();
            spawn(&**runtime, async move {
                let mut mismatches = 0;
                for r in 0..requests {
                    // Lengths that differ, so a shifted answer cannot match.
                    let text = format!("{t}:{r}:{}", "e".repeat((t + r) % 89));
                    let answer = client
                        .send(
                            Target::Node(node),
                            command(["ECHO", &text]),
                            Duration::from_secs(20),
                        )
                        .await
                        .unwrap_or_else(|e| panic!("echo {text}: {e}"));
                    mismatches +=
                        usize::from(Reply::parse(&answer) != Ok(Reply::Bulk(text.into())));
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
    conn.held(client).await;
    took
}
