//! Many tasks, one client, one healthy echo server: every request completes exactly once,
//! with its own response; requests far larger than the socket buffers go out in many short
//! writes, each resuming when the socket is writable again.

use std::sync::Arc;
use std::time::Duration;

use keepwire_driver::{ClientBuilder, Runtime, Target};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{spawn, test_config, test_on_every_runtime};

const TASKS: u64 = 64;
const REQUESTS_PER_TASK: u64 = 1_000;

async fn every_request_of_64_tasks_completes_exactly_once(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let client = client.clone();
            spawn(&*runtime, async move {
                let mut completed = 0u64;
                for i in 0..REQUESTS_PER_TASK {
                    let payload = format!("task {task} request {i}");
                    let target = if i % 2 == 0 {
                        Target::Best
                    } else {
                        Target::Node(node)
                    };
                    let response = client
                        .send(target, payload.clone(), Duration::from_secs(30))
                        .await;
                    assert_eq!(
                        response.as_deref(),
                        Ok(payload.as_bytes()),
                        "task {task} request {i}"
                    );
                    completed += 1;
                }
                completed
            })
        })
        .collect();
    let mut completed = 0;
    for task in tasks {
        completed += task.join().await;
    }
    assert_eq!(completed, TASKS * REQUESTS_PER_TASK);
    assert_eq!(
        peer.requests() as u64,
        TASKS * REQUESTS_PER_TASK,
        "each request reached the server once"
    );
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.connects, 1, "{counters:?}");
    client.shutdown().await;
}

/// 256 KiB requests through a 4 KiB send buffer: nearly every vectored write is cut short or
/// would block, and the connection must resume each time the peer has read.
async fn large_requests_resume_whenever_the_socket_takes_bytes_again(runtime: Arc<dyn Runtime>) {
    const LARGE: usize = 256 * 1024;
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    config.socket.send_buffer_size = Some(4096);
    config.write_timeout = Duration::from_secs(10);
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let tasks: Vec<_> = (0..4u8)
        .map(|task| {
            let client = client.clone();
            spawn(&*runtime, async move {
                for i in 0..2u8 {
                    let payload = vec![task * 16 + i; LARGE - usize::from(i)];
                    let response = client
                        .send(Target::Best, payload.clone(), Duration::from_secs(20))
                        .await;
                    assert!(
                        response.as_deref() == Ok(&payload[..]),
                        "task {task} request {i}: {:?}",
                        response.map(|r| r.len())
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.join().await;
    }
    assert_eq!(peer.requests(), 8);
    client.shutdown().await;
}

test_on_every_runtime!(
    every_request_of_64_tasks_completes_exactly_once,
    large_requests_resume_whenever_the_socket_takes_bytes_again,
);
