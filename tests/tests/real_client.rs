//! The client API on real sockets, on every runtime: node commands (disable, enable with
//! eviction, epoch change, removal), cancellation by dropping a send, a handshake that hangs
//! past the setup deadline, shutdown ending everything (at once, or gracefully), where a
//! connection's answers are read into, and protocol ids freed by requests that end unanswered.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use keepwire_driver::{
    ClientBuilder, ClientEvent, Codec, CommandError, Correlation, Decoder, EncodeError, Events,
    LengthPrefixed, Runtime, SendError, Target,
};
use keepwire_proto::{CloseReason, Event, EvictReason, NodeState, Phase, Sent, Unavailable};
use keepwire_tests::peers::{Behaviour, FullAcceptQueue, Peer, RefusingPort};
use keepwire_tests::{
    endless_handshake, send_held, sleep, spawn, test_config, test_on_every_runtime, until_read,
    wait_for, within,
};

/// The reason of the next eviction event, within 1 s.
async fn next_eviction(runtime: &dyn Runtime, events: &mut Events, what: &str) -> EvictReason {
    wait_for(runtime, events, Duration::from_secs(1), what, |e| match e {
        Event::Evicted { reason, .. } => Some(*reason),
        _ => None,
    })
    .await
}

async fn disable_enable_and_epoch_change_evict_cached_connections(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let node = client.initial_nodes()[0];
    let ping = || client.send(Target::Node(node), &b"ping"[..], Duration::from_secs(5));
    assert_eq!(ping().await.as_deref(), Ok(&b"ping"[..]));

    client.disable_node(node).await.unwrap();
    assert_eq!(
        ping().await,
        Err(SendError::NodeUnavailable(Unavailable::Disabled))
    );
    assert_eq!(
        client
            .send(Target::Best, &b"any"[..], Duration::from_secs(1))
            .await,
        Err(SendError::NoNode { all_full: false })
    );
    client.enable_node(node).await.unwrap();
    let reason = next_eviction(&*runtime, &mut events, "eviction on readmission").await;
    assert_eq!(reason, EvictReason::Readmitted);
    assert_eq!(ping().await.as_deref(), Ok(&b"ping"[..]));

    // Re-announcing the same epoch (0 until set) is no restart: nothing is evicted.
    client.set_epoch(node, 0).await.unwrap();
    assert_eq!(ping().await.as_deref(), Ok(&b"ping"[..]));
    assert_eq!(peer.accepted(), 2);
    client.set_epoch(node, 1).await.unwrap();
    let reason = next_eviction(&*runtime, &mut events, "eviction on epoch change").await;
    assert_eq!(reason, EvictReason::EpochChanged);
    assert_eq!(ping().await.as_deref(), Ok(&b"ping"[..]));
    assert_eq!(
        peer.accepted(),
        3,
        "each eviction forced a fresh connection"
    );

    client.remove_node(node).await.unwrap();
    assert_eq!(ping().await, Err(SendError::StaleNode));
    assert_eq!(client.evict(node).await, Err(CommandError::StaleNode(node)));
    let added = client.add_node(peer.addr()).await.unwrap();
    let answer = client
        .send(Target::Node(added), &b"again"[..], Duration::from_secs(5))
        .await;
    assert_eq!(answer.as_deref(), Ok(&b"again"[..]));
    client.shutdown().await;
    // What is still queued is read without waiting: the added node's connection among it.
    let queued: Vec<_> = std::iter::from_fn(|| events.try_recv()).collect();
    assert!(
        queued.iter().any(|e| matches!(
            e,
            ClientEvent::Pool(Event::StateChanged { node, to: NodeState::Ready, .. })
                if *node == added
        )),
        "{queued:?}"
    );
}

/// A request still queued (its node is connecting) is dropped unsent when its caller stops
/// waiting: its slot and its pending bytes are freed at once.
async fn dropping_a_send_cancels_its_request(runtime: Arc<dyn Runtime>) {
    let queue = FullAcceptQueue::new();
    let mut config = test_config();
    config.setup_timeout = Duration::from_secs(5);
    config.setup_timeout_max = Duration::from_secs(5);
    let client = ClientBuilder::new(config)
        .node(queue.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let gave_up = within(
        &*runtime,
        Duration::from_millis(200),
        client.send(Target::Node(node), &b"slow"[..], Duration::from_secs(30)),
    )
    .await;
    assert!(
        gave_up.is_none(),
        "the connect hangs, so the request stays queued"
    );
    // Well before the 5 s setup timeout, which would also free it.
    let freed = within(&*runtime, Duration::from_secs(2), async {
        loop {
            let info = client.node_info(node).await.unwrap();
            if info.in_flight == 0 && info.pending_bytes == 0 {
                break;
            }
            sleep(&*runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(freed.is_some(), "the dropped request was cancelled");
    let counters = client.counters().await.unwrap();
    assert_eq!(
        (counters.submitted, counters.setup_timeouts),
        (1, 0),
        "{counters:?}"
    );
    client.shutdown().await;
}

async fn a_hanging_handshake_is_abandoned_at_the_setup_deadline(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .handshake(endless_handshake)
        .build(Arc::clone(&runtime))
        .unwrap();
    let started = std::time::Instant::now();
    let outcome = client
        .send(Target::Best, &b"hi"[..], Duration::from_secs(5))
        .await;
    let took = started.elapsed();
    assert_eq!(
        outcome,
        Err(SendError::ConnectionLost {
            cause: CloseReason::SetupTimeout,
            sent: Sent::Nothing,
            retried: false,
        })
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1300),
        "{took:?}"
    );
    client.shutdown().await;
}

/// keepwire's framing with protocol ids four bits wide: sixteen requests at most may hold one.
#[derive(Debug)]
struct SixteenIds;

impl Codec for SixteenIds {
    fn correlation(&self) -> Correlation {
        Correlation::ById { bits: 4 }
    }

    fn encode(
        &self,
        payload: &[u8],
        id: Option<u64>,
        dst: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        LengthPrefixed::default().encode(payload, id, dst)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        LengthPrefixed::default().decoder()
    }
}

/// A request's protocol id is free again once the request ends, answered or not: on a
/// protocol with sixteen ids, forty requests in a row that reach their deadlines unsent (the
/// handshake hangs, so they stay queued) each end `DeadlineExceeded`, and none is refused for
/// want of an id.
async fn the_ids_of_requests_that_end_unanswered_are_used_again(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    // However slow the machine, the connection is still being set up at the last request.
    config.setup_timeout = Duration::from_secs(30);
    config.setup_timeout_max = Duration::from_secs(30);
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .codec(SixteenIds)
        .handshake(endless_handshake)
        .build(Arc::clone(&runtime))
        .unwrap();
    for i in 0..40 {
        let outcome = client
            .send(Target::Best, &b"hi"[..], Duration::from_millis(2))
            .await;
        assert_eq!(
            outcome,
            Err(SendError::DeadlineExceeded {
                phase: Phase::Queued,
                sent: Sent::Nothing,
                retried: false,
            }),
            "request {i}"
        );
    }
    client.shutdown().await;
}

/// A request that ended in flight keeps its protocol id until its late answer arrives (a
/// Kafka client's rule for its correlation ids): on a protocol with sixteen ids, a request
/// past its deadline at a stalled server and fifteen waiting behind it hold all sixteen, so
/// a seventeenth is refused before it is sent rather than given the ended one's id. Once the
/// server resumes, the late answer is consumed in its place, the fifteen get their own
/// payloads, and the ids serve the requests after them.
async fn an_ended_requests_id_waits_for_its_late_answer(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .codec(SixteenIds)
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let send = |payload: String, timeout: Duration| {
        client.send(Target::Node(node), payload.into_bytes(), timeout)
    };
    assert_eq!(
        send("first".into(), Duration::from_secs(5))
            .await
            .as_deref(),
        Ok(&b"first"[..])
    );
    peer.stall();
    let ended = send("ended".into(), Duration::from_millis(50)).await;
    let in_flight = SendError::DeadlineExceeded {
        phase: Phase::InFlight,
        sent: Sent::Fully,
        retried: false,
    };
    assert_eq!(ended, Err(in_flight));
    let waiting: Vec<_> = (0..15)
        .map(|i| {
            let client = client.clone();
            spawn(&*runtime, async move {
                let payload = format!("waiting {i}");
                let answer = client
                    .send(
                        Target::Node(node),
                        payload.clone().into_bytes(),
                        Duration::from_secs(10),
                    )
                    .await;
                (payload, answer)
            })
        })
        .collect();
    // The node's count includes the ended request, still held for its late answer.
    while client.node_info(node).await.unwrap().in_flight < 16 {
        sleep(&*runtime, Duration::from_millis(1)).await;
    }
    let refused = send("seventeenth".into(), Duration::from_secs(5)).await;
    let Err(SendError::Encode(EncodeError::Invalid(why))) = &refused else {
        panic!("{refused:?}");
    };
    assert!(why.contains("every protocol id is in use"), "{why}");
    peer.resume();
    for task in waiting {
        let (payload, answer) = task.join().await;
        assert_eq!(answer.as_deref(), Ok(payload.as_bytes()));
    }
    for i in 0..40 {
        let payload = format!("after {i}");
        assert_eq!(
            send(payload.clone(), Duration::from_secs(5))
                .await
                .as_deref(),
            Ok(payload.as_bytes())
        );
    }
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.late_responses, 1, "{counters:?}");
    assert_eq!(counters.reconnects, 0, "{counters:?}");
    client.shutdown().await;
}

async fn shutdown_ends_every_pending_request_and_later_calls(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Hold);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let pending = send_held(&*runtime, &client, Target::Best, 5, Duration::from_secs(30));
    until_read(&*runtime, &peer, 5).await;
    client.shutdown().await;
    // The server read them all: each ends saying so (not as a refusal).
    for request in pending {
        assert_eq!(
            request.join().await,
            Err(SendError::ConnectionLost {
                cause: CloseReason::Shutdown,
                sent: Sent::Fully,
                retried: false,
            })
        );
    }
    assert_eq!(
        client
            .send(Target::Best, &b"late"[..], Duration::from_secs(1))
            .await,
        Err(SendError::Shutdown)
    );
    assert_eq!(
        client.counters().await.map(|_| ()),
        Err(CommandError::Shutdown)
    );
    let drained = within(&*runtime, Duration::from_secs(1), async {
        while events.recv().await.is_some() {}
    })
    .await;
    assert!(drained.is_some(), "the event stream ends after shutdown");
    let late = within(&*runtime, Duration::from_secs(1), client.subscribe().recv()).await;
    assert_eq!(
        late,
        Some(None),
        "a subscription made after shutdown ends at once"
    );
}

/// `connect` on a quarantined node is refused because of the node's state, not reported as
/// a stale handle (the node exists; the failure detector owns its reconnects).
async fn connect_on_a_quarantined_node_says_why_it_is_refused(runtime: Arc<dyn Runtime>) {
    let port = RefusingPort::new();
    let mut config = test_config();
    config.quarantine_after_failures = 1;
    config.quarantine_after_timeouts = 1;
    // A sole quarantined node puts selection in panic mode, which lets it be connected again;
    // this test is about the refusal outside panic mode.
    config.panic_threshold = 0.0;
    let client = ClientBuilder::new(config)
        .node(port.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    let refused = client
        .send(Target::Node(node), &b"hi"[..], Duration::from_secs(5))
        .await;
    assert!(
        matches!(
            refused,
            Err(SendError::ConnectionLost {
                cause: CloseReason::ConnectFailed(_),
                sent: Sent::Nothing,
                retried: false,
            })
        ),
        "{refused:?}"
    );
    assert_eq!(client.counters().await.unwrap().quarantines, 1);
    let error = client.connect(node).await.unwrap_err();
    assert_eq!(error, CommandError::WrongState(node));
    assert!(error.to_string().contains("current state"), "{error}");
    client.shutdown().await;
}

/// Dropping the last client handle without `shutdown` stops the driver: the event stream
/// ends and the server sees its connection closed.
async fn dropping_the_last_client_closes_its_connections(runtime: Arc<dyn Runtime>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = ClientBuilder::new(test_config())
        .node(listener.local_addr().unwrap())
        .build(Arc::clone(&runtime))
        .unwrap();
    let node = client.initial_nodes()[0];
    client.connect(node).await.unwrap();
    let ready = within(&*runtime, Duration::from_secs(2), async {
        while client.node_info(node).await.unwrap().state != NodeState::Ready {
            sleep(&*runtime, Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(ready.is_some(), "connected");
    let (mut accepted, _) = listener.accept().unwrap();
    let mut events = client.subscribe();
    drop(client);
    let ended = within(&*runtime, Duration::from_secs(2), async {
        while events.recv().await.is_some() {}
    })
    .await;
    assert!(ended.is_some(), "the driver stopped");
    accepted
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let read = std::io::Read::read(&mut accepted, &mut [0; 1]);
    assert_eq!(read.unwrap(), 0, "the server sees end of stream");
}

async fn a_graceful_shutdown_lets_sent_requests_run_to_their_own_end(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Hold);
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let held = send_held(
        &*runtime,
        &client,
        Target::Best,
        3,
        Duration::from_millis(500),
    );
    until_read(&*runtime, &peer, 3).await;
    let draining = {
        let client = client.clone();
        spawn(&*runtime, async move { client.shutdown_gracefully().await })
    };
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "the connection draining",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Closing,
                ..
            } => Some(()),
            _ => None,
        },
    )
    .await;
    // New sends are refused at once...
    let late = within(
        &*runtime,
        Duration::from_secs(1),
        client.send(Target::Best, &b"late"[..], Duration::from_secs(5)),
    )
    .await;
    assert_eq!(late, Some(Err(SendError::Shutdown)));
    // ...while the ones already sent end by their own deadline, not by the shutdown.
    for request in held {
        let result = request.join().await;
        assert!(
            matches!(
                result,
                Err(SendError::DeadlineExceeded {
                    phase: Phase::InFlight,
                    sent: Sent::Fully,
                    retried: false,
                })
            ),
            "{result:?}"
        );
    }
    let stopped = within(&*runtime, Duration::from_secs(2), draining.join()).await;
    assert!(stopped.is_some(), "the drain ends once nothing is left");
    assert_eq!(
        client.counters().await.map(|_| ()),
        Err(CommandError::Shutdown)
    );
}

/// Every client draws its own seed from OS entropy unless the configuration sets one, and
/// tells the seed in use, so a trace can be replayed.
async fn each_client_is_seeded_from_entropy_unless_a_seed_is_set(runtime: Arc<dyn Runtime>) {
    let build = |config| {
        ClientBuilder::new(config)
            .build(Arc::clone(&runtime))
            .unwrap()
    };
    let (first, second) = (build(test_config()), build(test_config()));
    assert_ne!(
        first.seed(),
        second.seed(),
        "two default clients share a seed"
    );
    let mut config = test_config();
    config.seed = Some(7);
    let replay = build(config);
    assert_eq!(replay.seed(), 7);
    for client in [first, second, replay] {
        client.shutdown().await;
    }
}

/// How far `later` starts past `earlier`, in bytes (`None` when it starts before it).
fn offset(earlier: &[u8], later: &[u8]) -> Option<usize> {
    (later.as_ptr() as usize).checked_sub(earlier.as_ptr() as usize)
}

/// A lone connection keeps its read chunk between answers: its next answer is read in right
/// behind the last one, which the test still holds. With a second connection open, a
/// connection left with nothing in flight gives its chunk back for the other one, and, the
/// answers cut from it still held, its next answer lands in another chunk.
async fn a_lone_connection_keeps_its_read_chunk_and_one_of_two_gives_it_back(
    runtime: Arc<dyn Runtime>,
) {
    const CHUNK: usize = 64 * 1024;
    let (one, two) = (Peer::start(Behaviour::Echo), Peer::start(Behaviour::Echo));
    let client = ClientBuilder::new(test_config())
        .node(one.addr())
        .build(runtime)
        .unwrap();
    let node = client.initial_nodes()[0];
    let ping = |node| client.send(Target::Node(node), &b"ping"[..], Duration::from_secs(5));
    let first = ping(node).await.unwrap();
    let second = ping(node).await.unwrap();
    let behind = offset(&first, &second);
    assert!(
        behind.is_some_and(|o| o > 0 && o < 64),
        "the second answer starts {behind:?} bytes past the first: not right behind it"
    );

    let other = client.add_node(two.addr()).await.unwrap();
    assert_eq!(ping(other).await.as_deref(), Ok(&b"ping"[..]));
    let third = ping(node).await.unwrap();
    let fourth = ping(node).await.unwrap();
    let behind = offset(&third, &fourth);
    assert!(
        behind.is_none_or(|o| o > CHUNK / 2),
        "the fourth answer starts {behind:?} bytes past the third: read into the same chunk"
    );
    drop((first, second, third, fourth));
    client.shutdown().await;
}

test_on_every_runtime!(
    a_lone_connection_keeps_its_read_chunk_and_one_of_two_gives_it_back,
    each_client_is_seeded_from_entropy_unless_a_seed_is_set,
    a_graceful_shutdown_lets_sent_requests_run_to_their_own_end,
    connect_on_a_quarantined_node_says_why_it_is_refused,
    dropping_the_last_client_closes_its_connections,
    disable_enable_and_epoch_change_evict_cached_connections,
    dropping_a_send_cancels_its_request,
    a_hanging_handshake_is_abandoned_at_the_setup_deadline,
    the_ids_of_requests_that_end_unanswered_are_used_again,
    an_ended_requests_id_waits_for_its_late_answer,
    shutdown_ends_every_pending_request_and_later_calls,
);
