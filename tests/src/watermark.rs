//! The high watermark's fail-fast rejection on real sockets, as the plaintext and TLS suites
//! check it (`real_faults`, `real_tls`): requests queued behind a peer that stopped reading
//! until the connection turns unwritable, the next send refused at once while the connection
//! stays open, and every queued request ending with a typed outcome.

use std::time::{Duration, Instant as WallClock};

use bytes::Bytes;
use keepwire_driver::tls::BUFFER_LIMIT;
use keepwire_driver::{Client, Events, NodeInfo, Runtime, SendError, Target};
use keepwire_proto::{CloseReason, Config, Counters, Event, NodeId, NodeState, Sent};

use crate::{Task, sleep, spawn, wait_for};

/// The high watermark the checks use: 128 KiB (the low one is half of it), twice what the TLS
/// layer may hold ([`BUFFER_LIMIT`]). Frames handed to that layer count as pending until the
/// kernel takes their ciphertext, and their requests read `Unknown`: at 64 KiB, a connection
/// that became ready only after every filler request was queued (a handshake slowed by a
/// loaded machine) handed them all out at once, the layer took them all, and no request was
/// left that had never left.
pub const HIGH_WATERMARK: u64 = 2 * BUFFER_LIMIT as u64;

/// Each queued request's payload: 8 KiB.
pub const FRAME: usize = 8 * 1024;

/// `config` with the write timeout off (the watermark, not the timeout, must act) and the
/// watermarks at [`HIGH_WATERMARK`] and half of it.
pub fn config(mut config: Config) -> Config {
    config.write_timeout = Duration::ZERO;
    config.high_watermark = HIGH_WATERMARK;
    config.low_watermark = HIGH_WATERMARK / 2;
    config
}

/// A request to `node` that is still queued or in flight.
pub type Queued = Task<Result<Bytes, SendError>>;

/// Queues [`FRAME`]-byte requests to `node` (each from its own task, 10 ms apart, with a 20 s
/// deadline) until the node is no longer writable, then waits for the unwritable flip and
/// checks that it came above the high watermark. Returns the queued requests.
///
/// # Panics
/// If 64 requests did not make the node unwritable, or no flip came within 1 s.
pub async fn fill(
    runtime: &dyn Runtime,
    client: &Client,
    node: NodeId,
    events: &mut Events,
) -> Vec<Queued> {
    let mut queued = Vec::new();
    while client.node_info(node).await.unwrap().writable {
        assert!(queued.len() < 64, "never became unwritable");
        let client = client.clone();
        queued.push(spawn(runtime, async move {
            let payload = vec![1u8; FRAME];
            client
                .send(Target::Node(node), payload, Duration::from_secs(20))
                .await
        }));
        sleep(runtime, Duration::from_millis(10)).await;
    }
    let pending = unwritable_flip(runtime, events).await;
    assert!(pending > HIGH_WATERMARK, "flipped at {pending} bytes");
    queued
}

/// Waits, at most 1 s, for a connection's flip to unwritable; returns the bytes it had
/// pending then.
///
/// # Panics
/// If no such flip comes within 1 s.
pub async fn unwritable_flip(runtime: &dyn Runtime, events: &mut Events) -> u64 {
    wait_for(
        runtime,
        events,
        Duration::from_secs(1),
        "unwritable flip",
        |e| match e {
            Event::Writability {
                writable: false,
                pending,
                ..
            } => Some(*pending),
            _ => None,
        },
    )
    .await
}

/// Checks that the next send to the unwritable `node` is refused with
/// [`SendError::NotWritable`] at once (a command round trip, not its 20 s deadline; 1 s is
/// generous for a loaded machine), that the connection stays `Ready`, and that no more than
/// the high watermark plus one frame (with its overhead) is pending. Returns the node's info.
///
/// # Panics
/// If any of that does not hold.
pub async fn refused_at_once(client: &Client, node: NodeId) -> NodeInfo {
    let started = WallClock::now();
    let rejected = client
        .send(
            Target::Node(node),
            vec![2u8; FRAME],
            Duration::from_secs(20),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(rejected, Err(SendError::NotWritable));
    assert!(took < Duration::from_secs(1), "rejection took {took:?}");
    let info = client.node_info(node).await.unwrap();
    assert_eq!(info.state, NodeState::Ready, "the connection stays open");
    let most = HIGH_WATERMARK + FRAME as u64 + Config::default().per_frame_overhead;
    assert!(info.pending_bytes <= most, "{} pending", info.pending_bytes);
    info
}

/// After the client shut down: checks that every `queued` request ended typed, either refused
/// as not writable (a request whose task ran after the flip) or lost to the shutdown saying
/// how much of it the kernel took; that those above the watermark never left and the first
/// ones reached the kernel; and that `counters` (read before the shutdown) count one
/// unwritable rejection for the send [`refused_at_once`] made, plus those late ones.
///
/// # Panics
/// If any of that does not hold.
pub async fn queued_requests_ended(queued: Vec<Queued>, counters: &Counters) {
    let mut late_rejections = 0;
    let mut sent = Vec::new();
    for request in queued {
        match request.join().await {
            Err(SendError::NotWritable) => late_rejections += 1,
            Err(SendError::ConnectionLost {
                cause: CloseReason::Shutdown,
                sent: s,
                retried: false,
            }) => sent.push(s),
            other => panic!("every queued request ends typed: {other:?}"),
        }
    }
    assert!(
        sent.contains(&Sent::Nothing),
        "those above the watermark never left: {sent:?}"
    );
    assert!(
        sent.iter().any(|s| s.may_have_reached_server()),
        "the kernel took the first ones: {sent:?}"
    );
    assert!(
        (1..=1 + late_rejections).contains(&counters.unwritable_rejections),
        "{counters:?}, {late_rejections} filler sends rejected"
    );
}
