//! What the DNS tests share, over TCP and over TLS, against
//! [`UnboundServer`](crate::servers::UnboundServer): a query on the client's one node, a slow
//! answer overtaken by fast ones on one connection, and many tasks pipelining distinct names.

use std::sync::Arc;
use std::time::{Duration, Instant};

use keepwire_driver::{Client, Runtime, SendError, Target};

use crate::protocols::dns::{self, Data, Message, TXT};
use crate::servers::{LOCAL_TEXT, LOCAL_ZONE};
use crate::{OneConnection, spawn};

/// Asks the client's one node for `name`'s TXT record within `timeout`. An answer is checked
/// to be for `name` (its question) and to be a success with one TXT record, whose text it
/// returns.
pub async fn resolve(client: &Client, name: &str, timeout: Duration) -> Result<String, SendError> {
    let node = client.initial_nodes()[0];
    let query = dns::query(name, TXT).unwrap_or_else(|e| panic!("{name}: {e}"));
    let payload = client.send(Target::Node(node), query, timeout).await?;
    let answer = Message::parse(&payload).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(answer.questions.len(), 1, "{name}: {answer:?}");
    assert_eq!(
        answer.questions[0].name, name,
        "the answer to another query"
    );
    assert_eq!(answer.rcode, 0, "{name}: {answer:?}");
    match &answer.answers[..] {
        [record] => match &record.data {
            Data::Txt(text) if text.len() == 1 => {
                Ok(String::from_utf8_lossy(&text[0]).into_owned())
            }
            other => panic!("{name}: {other:?}"),
        },
        other => panic!("{name}: {other:?}"),
    }
}

/// Resolves `label` in the resolver's own zone (`{label}.fast.kw`) and asserts its answer;
/// panics on any failure.
pub async fn resolve_local(client: &Client, label: &str) {
    let name = format!("{label}.{LOCAL_ZONE}");
    let text = resolve(client, &name, Duration::from_secs(5)).await;
    assert_eq!(text.as_deref(), Ok(LOCAL_TEXT), "{name}");
}

/// The text the resolver answers `name` with: the name itself from the upstream, the local
/// zone's text under it.
pub fn expected_text(name: &str) -> &str {
    if name.ends_with(LOCAL_ZONE) {
        LOCAL_TEXT
    } else {
        name
    }
}

/// What [`overtaken`] measured.
#[derive(Debug)]
pub struct Overtaken {
    /// When the last of the fast answers came, from the slow query's send.
    pub fast: Duration,
    /// When the slow answer came.
    pub slow: Duration,
}

/// On one connection: a query the upstream answers after `delay`, written first, then
/// `fast` queries of the local zone at once. Asserts every fast answer came before the slow
/// one, each its own, and that nothing reconnected. `tag` makes the names unique.
pub async fn overtaken(
    runtime: &Arc<dyn Runtime>,
    client: &Client,
    delay: Duration,
    fast: usize,
    tag: &str,
) -> Overtaken {
    let node = client.initial_nodes()[0];
    let conn = OneConnection::now(client).await;
    let started = Instant::now();
    let slow_name = format!("d{}.slow-{tag}.up", delay.as_millis());
    let slow = {
        let (client, name) = (client.clone(), slow_name.clone());
        spawn(&**runtime, async move {
            let text = resolve(&client, &name, Duration::from_secs(10)).await;
            (text, started.elapsed())
        })
    };
    // The slow query first on the wire: the fast ones are queued behind it.
    while client.node_info(node).await.unwrap().in_flight == 0 {
        crate::sleep(&**runtime, Duration::from_millis(1)).await;
    }
    let fasts: Vec<_> = (0..fast)
        .map(|i| {
            let (client, name) = (client.clone(), format!("f{i}-{tag}.{LOCAL_ZONE}"));
            spawn(&**runtime, async move {
                let text = resolve(&client, &name, Duration::from_secs(10)).await;
                assert_eq!(text.as_deref(), Ok(LOCAL_TEXT), "{name}");
                started.elapsed()
            })
        })
        .collect();
    let mut last_fast = Duration::ZERO;
    for fast in fasts {
        last_fast = last_fast.max(fast.join().await);
    }
    let (text, slow_at) = slow.join().await;
    assert_eq!(text, Ok(slow_name.clone()));
    assert!(slow_at >= delay, "{slow_name} answered after {slow_at:?}");
    assert!(
        last_fast < slow_at && last_fast < delay,
        "the last fast answer came after {last_fast:?}, the slow one after {slow_at:?}"
    );
    conn.held(client).await;
    Overtaken {
        fast: last_fast,
        slow: slow_at,
    }
}

/// `tasks` tasks each resolve `requests` distinct names at once on `client`, every eighth
/// forwarded to the upstream, the rest the resolver's own, and check every answer is their
/// own; asserts that all went over one connection. Returns how long it took.
pub async fn pipelined(
    runtime: &Arc<dyn Runtime>,
    client: &Client,
    tasks: usize,
    requests: usize,
    tag: &str,
) -> Duration {
    let conn = OneConnection::now(client).await;
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (client, tag) = (client.clone(), tag.to_owned());
            spawn(&**runtime, async move {
                for r in 0..requests {
                    let name = if r % 8 == 0 {
                        format!("t{t}-r{r}-{tag}.up")
                    } else {
                        format!("t{t}-r{r}-{tag}.{LOCAL_ZONE}")
                    };
                    let text = resolve(&client, &name, Duration::from_secs(20)).await;
                    assert_eq!(text.as_deref(), Ok(expected_text(&name)), "{name}");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().await;
    }
    let took = started.elapsed();
    conn.held(client).await;
    took
}
