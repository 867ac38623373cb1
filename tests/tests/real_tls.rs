//! TLS on real sockets, on every runtime, each with its own crate's `tls` feature
//! (tokio-rustls for tokio, futures-rustls for smol and async-std), against loopback rustls
//! servers with certificates made by rcgen: a server that answers, one that completes the
//! handshake and then stops reading (the write timeout fires as for a plaintext peer, at the
//! same instant; the watermarks reject as for a plaintext peer, and the memory bound holds),
//! one that stalls in the middle of the handshake (the setup timeout), certificates that do
//! not verify (a typed, final failure), and a node added by name, whose name is the one its
//! certificate must carry.

use std::sync::Arc;
use std::time::{Duration, Instant as WallClock};

use keepwire_driver::tls::{BUFFER_LIMIT, TlsConfig};
use keepwire_driver::{
    Client, ClientBuilder, ClientEvent, Endpoint, Events, HandshakeErrorKind, Runtime, SendError,
    Target,
};
use keepwire_proto::{CloseReason, Config, Event, Instant, NodeId, NodeState, Reason, Sent};
use keepwire_tests::names::Names;
use keepwire_tests::peers::Peer;
use keepwire_tests::tls::{Pki, TlsBehaviour, TlsOn, TlsPeer};
use keepwire_tests::{
    sleep, spawn, test_config, test_tls_on_every_runtime, until_pending, wait_for, watermark,
};

const MIB: usize = 1024 * 1024;
/// How late a timer may fire on a loaded 2-core CI machine and still count as "on time": the
/// driver arms its timer at the pool's exact deadline, so this is the runtime's timer
/// granularity (1 ms on tokio) plus scheduling latency.
const TICK: Duration = Duration::from_millis(50);

fn start(
    runtime: &Arc<dyn Runtime>,
    config: Config,
    addr: std::net::SocketAddr,
    tls: Option<(TlsOn, TlsConfig)>,
) -> (Client, NodeId, Events) {
    let mut builder = ClientBuilder::new(config).node(addr);
    if let Some((on, config)) = tls {
        builder = on.handshake(builder, config);
    }
    let client = builder.build(Arc::clone(runtime)).unwrap();
    let events = client.subscribe();
    let node = client.initial_nodes()[0];
    (client, node, events)
}

fn stalling_config() -> Config {
    let mut config = test_config();
    config.socket.send_buffer_size = Some(4096);
    config.socket.recv_buffer_size = Some(4096);
    config.socket.user_timeout = None;
    config
}

/// A TLS server that answers: small requests, many at once (framed into shared records), and
/// a 1 MiB one (written in several takes of the TLS layer, each reported only once its
/// ciphertext is in the kernel); the socket under the TLS session stays reachable.
async fn a_tls_server_answers(runtime: Arc<dyn Runtime>, tls: TlsOn) {
    let pki = Pki::new();
    let peer = TlsPeer::start(pki.server_config(), TlsBehaviour::Echo);
    let (client, node, _events) = start(
        &runtime,
        test_config(),
        peer.addr(),
        Some((tls, pki.client_config())),
    );
    let reply = client
        .send(Target::Node(node), &b"over tls"[..], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&reply[..], b"over tls");

    let many: Vec<_> = (0..50)
        .map(|i| {
            let client = client.clone();
            spawn(&*runtime, async move {
                let payload = format!("request {i}");
                let reply = client
                    .send(Target::Node(node), payload.clone(), Duration::from_secs(5))
                    .await;
                (payload, reply)
            })
        })
        .collect();
    for task in many {
        let (payload, reply) = task.join().await;
        assert_eq!(reply.unwrap(), payload.as_bytes());
    }

    let big: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
    let reply = client
        .send(Target::Node(node), big.clone(), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(reply[..] == big[..], "the 1 MiB answer differs");

    let info = client.node_info(node).await.unwrap();
    assert_eq!(info.state, NodeState::Ready);
    assert_eq!(
        info.stream_held, 0,
        "nothing held once everything is answered"
    );
    let socket = info.socket.expect("the socket under the TLS session");
    assert_eq!(socket.peer_addr, Some(peer.addr()));
    assert_eq!(socket.readback.nodelay, Some(true), "{:?}", socket.readback);
    assert_eq!((peer.accepted(), peer.handshakes()), (1, 1));
    assert_eq!(peer.requests(), 52);
    client.shutdown().await;
}

/// When the connection became ready and when it closed for a write timeout, on the pool's
/// clock.
async fn ready_and_write_timeout(runtime: &dyn Runtime, events: &mut Events) -> (Instant, Instant) {
    let ready = wait_for(
        runtime,
        events,
        Duration::from_secs(3),
        "ready",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Ready,
                at,
                ..
            } => Some(*at),
            _ => None,
        },
    )
    .await;
    let closed = wait_for(
        runtime,
        events,
        Duration::from_secs(3),
        "close",
        |e| match e {
            Event::StateChanged {
                reason: Reason::Closed(CloseReason::WriteTimeout),
                at,
                ..
            } => Some(*at),
            _ => None,
        },
    )
    .await;
    (ready, closed)
}

/// A TLS peer that completes the handshake and stops reading, next to a plaintext peer that
/// never reads, under the same load (a 4 MiB request, a small one queued behind it) and the
/// same 500 ms write timeout: both connections close for the write timeout within one tick
/// of its limit, on the pool's clock, and the requests end alike. While stalled, the TLS
/// layer holds its whole buffer limit, 64 KiB (the bytes it took whose ciphertext the kernel
/// has not accepted), and the 4 MiB frame still counts in full.
async fn a_stalled_tls_peer_trips_the_write_timeout_like_a_plaintext_one(
    runtime: Arc<dyn Runtime>,
    tls: TlsOn,
) {
    let pki = Pki::new();
    let tls_peer = TlsPeer::never_read(pki.server_config());
    let plain_peer = Peer::never_read();
    let config = stalling_config();
    let (tls_client, tls_node, mut tls_events) = start(
        &runtime,
        config.clone(),
        tls_peer.addr(),
        Some((tls, pki.client_config())),
    );
    let (plain_client, plain_node, mut plain_events) =
        start(&runtime, config, plain_peer.addr(), None);
    let send = |client: &Client, node, payload: Vec<u8>| {
        let client = client.clone();
        spawn(&*runtime, async move {
            client
                .send(Target::Node(node), payload, Duration::from_secs(10))
                .await
        })
    };
    let started = WallClock::now();
    let tls_big = send(&tls_client, tls_node, vec![7; 4 * MIB]);
    let plain_big = send(&plain_client, plain_node, vec![7; 4 * MIB]);
    // The big requests queued first (the tasks sending them may run late), then given 50 ms
    // to stall.
    until_pending(&*runtime, &tls_client, tls_node, (4 * MIB) as u64).await;
    until_pending(&*runtime, &plain_client, plain_node, (4 * MIB) as u64).await;
    sleep(&*runtime, Duration::from_millis(50)).await;
    let tls_small = send(&tls_client, tls_node, b"queued behind".to_vec());
    let plain_small = send(&plain_client, plain_node, b"queued behind".to_vec());

    // Stalled, before the write timeout: the TLS layer holds what it took (at most its
    // buffer limit) and the frame is still pending in full.
    sleep(&*runtime, Duration::from_millis(200)).await;
    let info = tls_client.node_info(tls_node).await.unwrap();
    assert_eq!(info.state, NodeState::Ready);
    println!(
        "stalled TLS connection: {} bytes pending, {} held by the TLS layer (limit {BUFFER_LIMIT})",
        info.pending_bytes, info.stream_held
    );
    // rustls takes plaintext up to its limit, 64 KiB as documented, and no more.
    assert_eq!(info.stream_held, 64 * 1024, "limit {BUFFER_LIMIT}");
    assert!(
        info.pending_bytes >= (4 * MIB) as u64,
        "{}",
        info.pending_bytes
    );

    let (tls_big, plain_big) = (tls_big.join().await, plain_big.join().await);
    let detected = started.elapsed();
    let cause = |r: &Result<_, SendError>| match r {
        Err(SendError::ConnectionLost { cause, .. }) => Some(*cause),
        _ => None,
    };
    assert_eq!(
        cause(&tls_big),
        Some(CloseReason::WriteTimeout),
        "{tls_big:?}"
    );
    assert_eq!(
        cause(&plain_big),
        Some(CloseReason::WriteTimeout),
        "{plain_big:?}"
    );
    // The kernel took the start of the frame in both: the server may have part of it. (Over
    // TLS it reads `Unknown` rather than `Partly` when the kernel never took the whole of the
    // TLS layer's first take: those bytes stay handed out, unreported.)
    for big in [&tls_big, &plain_big] {
        let sent = big.as_ref().unwrap_err().sent().unwrap();
        assert!(sent.may_have_reached_server(), "{big:?}");
    }
    for small in [tls_small.join().await, plain_small.join().await] {
        assert_eq!(
            small,
            Err(SendError::ConnectionLost {
                cause: CloseReason::WriteTimeout,
                sent: Sent::Nothing,
                retried: false,
            })
        );
    }
    println!("both write timeouts seen by the callers after {detected:?} (limit 500 ms)");

    let (tls_ready, tls_closed) = ready_and_write_timeout(&*runtime, &mut tls_events).await;
    let (plain_ready, plain_closed) = ready_and_write_timeout(&*runtime, &mut plain_events).await;
    let limit = Duration::from_millis(500);
    let tls_took = tls_closed - tls_ready;
    let plain_took = plain_closed - plain_ready;
    println!(
        "write timeout on the pool's clock: TLS {tls_took:?}, plaintext {plain_took:?} after \
         ready (limit {limit:?})"
    );
    for took in [tls_took, plain_took] {
        assert!(took > limit && took < limit + TICK, "{took:?}");
    }
    let counters = tls_client.counters().await.unwrap();
    assert_eq!(counters.write_timeouts, 1, "{counters:?}");
    assert_eq!(tls_peer.handshakes(), 1);
    tls_client.shutdown().await;
    plain_client.shutdown().await;
}

/// Over TLS as in plaintext: with the write timeout off and a 128 KiB high watermark, once
/// enough is queued behind a TLS peer that stopped reading, the next send fails at once with
/// `NotWritable` and the connection stays open; pending bytes stay within the high
/// watermark plus one frame, and the TLS layer's own buffer within its limit.
async fn a_send_above_the_high_watermark_fails_at_once_over_tls(
    runtime: Arc<dyn Runtime>,
    tls: TlsOn,
) {
    let pki = Pki::new();
    let peer = TlsPeer::never_read(pki.server_config());
    let config = watermark::config(stalling_config());
    let (client, node, mut events) = start(
        &runtime,
        config,
        peer.addr(),
        Some((tls, pki.client_config())),
    );
    let queued = watermark::fill(&*runtime, &client, node, &mut events).await;
    let info = watermark::refused_at_once(&client, node).await;
    println!(
        "unwritable TLS connection: {} bytes pending (high watermark {} + one 8 KiB frame), \
         {} held by the TLS layer (limit {BUFFER_LIMIT})",
        info.pending_bytes,
        watermark::HIGH_WATERMARK,
        info.stream_held
    );
    assert!(info.stream_held <= BUFFER_LIMIT, "{}", info.stream_held);
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.write_timeouts, 0, "{counters:?}");
    assert_eq!(peer.accepted(), 1);
    client.shutdown().await;
    watermark::queued_requests_ended(queued, &counters).await;
}

/// A server that takes the ClientHello and never answers: the setup timeout (300 ms) cuts the
/// handshake, as it cuts a hanging connect, and the request fails with nothing sent.
async fn a_tls_handshake_that_stalls_is_cut_by_the_setup_timeout(
    runtime: Arc<dyn Runtime>,
    tls: TlsOn,
) {
    let pki = Pki::new();
    let peer = TlsPeer::start(pki.server_config(), TlsBehaviour::StallHandshake);
    let (client, node, mut events) = start(
        &runtime,
        test_config(),
        peer.addr(),
        Some((tls, pki.client_config())),
    );
    let started = WallClock::now();
    let outcome = client
        .send(Target::Node(node), &b"hello"[..], Duration::from_secs(5))
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
    println!("stalled TLS handshake abandoned after {took:?} (setup timeout 300 ms)");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(1300), "{took:?}");
    let connecting = wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "connecting",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Connecting,
                at,
                ..
            } => Some(*at),
            _ => None,
        },
    )
    .await;
    // The TCP connect went through: it is the TLS handshake that the setup timeout cut.
    wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "handshaking",
        |e| match e {
            Event::StateChanged {
                to: NodeState::Handshaking,
                ..
            } => Some(()),
            _ => None,
        },
    )
    .await;
    let abandoned = wait_for(
        &*runtime,
        &mut events,
        Duration::from_secs(1),
        "setup timeout",
        |e| match e {
            Event::StateChanged {
                reason: Reason::Closed(CloseReason::SetupTimeout),
                at,
                ..
            } => Some(*at),
            _ => None,
        },
    )
    .await;
    let on_pool_clock = abandoned - connecting;
    println!("on the pool's clock: {on_pool_clock:?} from connecting to the setup timeout");
    let limit = Duration::from_millis(300);
    assert!(
        on_pool_clock > limit && on_pool_clock < limit + TICK,
        "{on_pool_clock:?}"
    );
    assert_eq!(peer.handshakes(), 0);
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.setup_timeouts, 1, "{counters:?}");
    client.shutdown().await;
}

/// Certificates that do not verify: one signed by a CA the client does not trust, and one for
/// another name. Each ends the handshake at once (well before the setup timeout) with a typed,
/// final certificate failure: the node enters `AuthFailed`, the request ends with
/// `CloseReason::CertificateRejected` and nothing sent, and it is not retried.
async fn a_bad_certificate_is_a_typed_final_failure(runtime: Arc<dyn Runtime>, tls: TlsOn) {
    let trusted = Pki::new();
    let other_ca = Pki::new();
    let wrong_name = Pki::for_names(&["not-localhost.example"]);
    let cases = [
        (
            "untrusted issuer",
            other_ca.server_config(),
            trusted.client_config(),
        ),
        (
            "wrong name",
            wrong_name.server_config(),
            wrong_name.client_config(),
        ),
    ];
    for (case, server, client_tls) in cases {
        let peer = TlsPeer::start(server, TlsBehaviour::Echo);
        let (client, node, mut events) = start(
            &runtime,
            test_config(),
            peer.addr(),
            Some((tls, client_tls)),
        );
        let started = WallClock::now();
        let outcome = client
            .send(Target::Node(node), &b"hello"[..], Duration::from_secs(5))
            .await;
        let took = started.elapsed();
        println!("{case}: {outcome:?} after {took:?}");
        assert_eq!(
            outcome,
            Err(SendError::ConnectionLost {
                cause: CloseReason::CertificateRejected,
                sent: Sent::Nothing,
                retried: false,
            }),
            "{case}"
        );
        assert!(outcome.unwrap_err().is_final(), "{case}");
        assert!(took < Duration::from_millis(300), "{case}: {took:?}");
        let error = sleep_until_event(&*runtime, &mut events, |e| match e {
            ClientEvent::HandshakeFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .await;
        assert_eq!(
            error.kind(),
            HandshakeErrorKind::Certificate,
            "{case}: {error}"
        );
        assert!(error.is_final(), "{case}");
        println!("{case}: {error}");
        let info = client.node_info(node).await.unwrap();
        assert!(
            matches!(info.state, NodeState::AuthFailed { .. }),
            "{case}: {:?}",
            info.state
        );
        let counters = client.counters().await.unwrap();
        assert_eq!(counters.connects, 1, "{case}: tried once, {counters:?}");
        assert_eq!(peer.handshakes(), 0, "{case}");
        client.shutdown().await;
    }
}

/// A node added by name checks that name in the server's certificate when no server name is
/// configured: a certificate for the name passes; one for another name is a final
/// `CertificateRejected`, at once.
async fn a_named_node_checks_its_name_in_the_certificate(runtime: Arc<dyn Runtime>, tls: TlsOn) {
    const SERVED: &str = "orders.keepwire.test";
    const OTHER: &str = "billing.keepwire.test";
    let pki = Pki::for_names(&[SERVED]);
    let peer = TlsPeer::start(pki.server_config(), TlsBehaviour::Echo);
    let names = Names::new();
    names.set(SERVED, &[peer.addr()]);
    names.set(OTHER, &[peer.addr()]);
    let client_tls = TlsConfig::builder()
        .roots_pem(pki.ca_pem().as_bytes())
        .build()
        .unwrap();
    for (host, expected) in [
        (SERVED, Ok(&b"by name"[..])),
        (
            OTHER,
            Err(SendError::ConnectionLost {
                cause: CloseReason::CertificateRejected,
                sent: Sent::Nothing,
                retried: false,
            }),
        ),
    ] {
        let builder = ClientBuilder::new(test_config())
            .node(Endpoint::name(host, peer.addr().port()).unwrap())
            .resolver(names.clone());
        let client = tls
            .handshake(builder, client_tls.clone())
            .build(Arc::clone(&runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        let started = WallClock::now();
        let outcome = client
            .send(Target::Node(node), &b"by name"[..], Duration::from_secs(5))
            .await;
        assert_eq!(outcome.as_deref().map_err(Clone::clone), expected, "{host}");
        assert!(started.elapsed() < Duration::from_secs(1), "{host}");
        client.shutdown().await;
    }
}

/// Mutual TLS: a server that requires a client certificate signed by its CA answers a client
/// that presents one (`client_cert_pem`). A client with none is refused, and TLS 1.3 says so
/// only after the client's side of the handshake is done: the refusal arrives with a read,
/// once the connection is ready. It is still the typed, final `CertificateRejected` a refusal
/// during the handshake is: the request ends with it, not retried, the node enters
/// `AuthFailed` and nothing reconnects meanwhile.
async fn a_server_requiring_a_client_certificate(runtime: Arc<dyn Runtime>, tls: TlsOn) {
    let pki = Pki::new();
    let peer = TlsPeer::start(
        pki.server_config_requiring_client_certs(),
        TlsBehaviour::Echo,
    );
    let with_cert = pki.client_config_presenting(&pki);
    let (client, node, _events) =
        start(&runtime, test_config(), peer.addr(), Some((tls, with_cert)));
    let answer = client
        .send(Target::Node(node), &b"mutual"[..], Duration::from_secs(5))
        .await;
    assert_eq!(answer.as_deref(), Ok(&b"mutual"[..]));
    client.shutdown().await;

    let (client, node, mut events) = start(
        &runtime,
        test_config(),
        peer.addr(),
        Some((tls, pki.client_config())),
    );
    let outcome = client
        .send(
            Target::Node(node),
            &b"no certificate"[..],
            Duration::from_secs(5),
        )
        .await;
    let Err(SendError::ConnectionLost { cause, retried, .. }) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!((cause, retried), (CloseReason::CertificateRejected, false));
    assert!(outcome.unwrap_err().is_final());
    let error = sleep_until_event(&*runtime, &mut events, |e| match e {
        ClientEvent::HandshakeFailed { error, .. } => Some(error.clone()),
        _ => None,
    })
    .await;
    assert_eq!(error.kind(), HandshakeErrorKind::Certificate, "{error}");
    println!("without a client certificate: {error}");
    let info = client.node_info(node).await.unwrap();
    assert!(
        matches!(info.state, NodeState::AuthFailed { .. }),
        "{:?}",
        info.state
    );
    // A send during the final backoff is refused at once, with the same reason.
    let refused = client
        .send(Target::Node(node), &b"again"[..], Duration::from_secs(5))
        .await;
    assert!(
        refused.as_ref().is_err_and(SendError::is_final),
        "{refused:?}"
    );
    assert_eq!(client.counters().await.unwrap().connects, 1);
    client.shutdown().await;
}

/// The first client event `matches` selects, within 1 s.
async fn sleep_until_event<T>(
    runtime: &dyn Runtime,
    events: &mut Events,
    mut matches: impl FnMut(&ClientEvent) -> Option<T>,
) -> T {
    let found = keepwire_tests::within(runtime, Duration::from_secs(1), async {
        while let Some(event) = events.recv().await {
            if let Some(found) = matches(&event) {
                return Some(found);
            }
        }
        None
    })
    .await;
    found.flatten().expect("the client event")
}

test_tls_on_every_runtime!(
    a_tls_server_answers,
    a_stalled_tls_peer_trips_the_write_timeout_like_a_plaintext_one,
    a_send_above_the_high_watermark_fails_at_once_over_tls,
    a_tls_handshake_that_stalls_is_cut_by_the_setup_timeout,
    a_bad_certificate_is_a_typed_final_failure,
    a_named_node_checks_its_name_in_the_certificate,
    a_server_requiring_a_client_certificate,
);
