//! Socket options on real connections, on every runtime: what keepwire asked for is what the
//! kernel reports (read back with `getsockopt` through socket2's `SockRef`, both from the
//! handshake hook and from the driver's per-connection query), and an option the kernel
//! would not take is reported, never silent, once per connection, for a node added by
//! address or by name. Also the handshake hook's failure path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use keepwire_driver::{
    ClientBuilder, ClientEvent, HandshakeError, HandshakeIo, NotApplied, Runtime, SendError,
    SocketOption, Target,
};
use keepwire_proto::{CloseReason, Endpoint, Keepalive, Sent};
use keepwire_tests::names::Names;
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{test_config, test_on_every_runtime, within};

/// What the test's handshake hook read from the socket.
#[derive(Debug, Default, Clone, PartialEq)]
struct SeenOptions {
    nodelay: Option<bool>,
    keepalive: Option<bool>,
    idle: Option<Duration>,
    interval: Option<Duration>,
    retries: Option<u32>,
    user_timeout: Option<Duration>,
    send_buffer: Option<usize>,
    recv_buffer: Option<usize>,
}

/// Through the application's own socket2: keepwire's `SocketRef` is `AsFd`.
fn read_options(io: &HandshakeIo) -> SeenOptions {
    let socket_ref = io.socket();
    let socket = socket2::SockRef::from(&socket_ref);
    SeenOptions {
        nodelay: socket.tcp_nodelay().ok(),
        keepalive: socket.keepalive().ok(),
        idle: socket.tcp_keepalive_time().ok(),
        interval: socket.tcp_keepalive_interval().ok(),
        retries: socket.tcp_keepalive_retries().ok(),
        user_timeout: socket.tcp_user_timeout().ok().flatten(),
        send_buffer: socket.send_buffer_size().ok(),
        recv_buffer: socket.recv_buffer_size().ok(),
    }
}

async fn configured_options_read_back_after_connect(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    config.socket.nodelay = true;
    config.socket.keepalive = Some(Keepalive {
        idle: Duration::from_secs(7),
        interval: Duration::from_secs(3),
        retries: 4,
    });
    config.socket.user_timeout = Some(Duration::from_millis(1500));
    config.socket.send_buffer_size = Some(16 * 1024);
    config.socket.recv_buffer_size = Some(32 * 1024);
    let seen = Arc::new(Mutex::new(None));
    let hook = {
        let seen = Arc::clone(&seen);
        move |io: HandshakeIo| {
            let seen = Arc::clone(&seen);
            async move {
                *seen.lock().unwrap() = Some(read_options(&io));
                Ok(io)
            }
        }
    };
    let client = ClientBuilder::new(config)
        .node(peer.addr())
        .handshake(hook)
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let node = client.initial_nodes()[0];
    let answer = client
        .send(Target::Node(node), &b"hi"[..], Duration::from_secs(5))
        .await;
    assert_eq!(answer.as_deref(), Ok(&b"hi"[..]));

    let seen = seen.lock().unwrap().clone().expect("the hook ran");
    assert_eq!(seen.nodelay, Some(true));
    assert_eq!(seen.keepalive, Some(true));
    assert_eq!(seen.idle, Some(Duration::from_secs(7)));
    assert_eq!(seen.interval, Some(Duration::from_secs(3)));
    assert_eq!(seen.retries, Some(4));
    assert_eq!(seen.user_timeout, Some(Duration::from_millis(1500)));
    assert!(seen.send_buffer.unwrap() >= 16 * 1024, "{seen:?}");
    assert!(seen.recv_buffer.unwrap() >= 32 * 1024, "{seen:?}");

    let socket = client
        .node_info(node)
        .await
        .unwrap()
        .socket
        .expect("connected");
    assert!(socket.report.is_empty(), "{}", socket.report);
    assert_eq!(socket.peer_addr, Some(peer.addr()));
    assert_eq!(socket.readback.keepalive_idle, seen.idle);
    assert_eq!(socket.readback.keepalive_retries, seen.retries);
    assert_eq!(socket.readback.user_timeout, seen.user_timeout);
    client.shutdown().await;
    while let Some(event) = events.recv().await {
        assert!(
            !matches!(event, ClientEvent::SocketOptions { .. }),
            "nothing to report: {event:?}"
        );
    }
}

async fn an_option_the_kernel_caps_is_reported(runtime: Arc<dyn Runtime>) {
    an_option_the_kernel_caps(runtime, false).await;
}

/// As above for a node added by name: its socket is made for the address that answers, and
/// the report comes once that one connected.
async fn an_option_the_kernel_caps_is_reported_for_a_named_node(runtime: Arc<dyn Runtime>) {
    an_option_the_kernel_caps(runtime, true).await;
}

async fn an_option_the_kernel_caps(runtime: Arc<dyn Runtime>, by_name: bool) {
    const NAME: &str = "options.keepwire.test";
    let peer = Peer::start(Behaviour::Echo);
    let mut config = test_config();
    config.socket.send_buffer_size = Some(u32::MAX / 2);
    let names = Names::new();
    names.set(NAME, &[peer.addr()]);
    let endpoint = if by_name {
        Endpoint::name(NAME, peer.addr().port()).unwrap()
    } else {
        Endpoint::from(peer.addr())
    };
    let client = ClientBuilder::new(config)
        .node(endpoint)
        .resolver(names)
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let node = client.initial_nodes()[0];
    let answer = client
        .send(Target::Node(node), &b"hi"[..], Duration::from_secs(5))
        .await;
    assert_eq!(answer.as_deref(), Ok(&b"hi"[..]));
    let reported = within(&*runtime, Duration::from_secs(1), async {
        loop {
            if let Some(ClientEvent::SocketOptions { report, .. }) = events.recv().await {
                return report;
            }
        }
    })
    .await
    .expect("a SocketOptions event");
    let clamped = reported
        .unapplied()
        .iter()
        .find(|u| u.option == SocketOption::SendBuffer)
        .expect("SendBuffer reported");
    assert!(
        matches!(clamped.why, NotApplied::Clamped { .. }),
        "{reported}"
    );
    let socket = client
        .node_info(node)
        .await
        .unwrap()
        .socket
        .expect("connected");
    assert_eq!(
        socket.report, reported,
        "the per-connection query keeps the report"
    );
    client.shutdown().await;
    while let Some(event) = events.recv().await {
        assert!(
            !matches!(event, ClientEvent::SocketOptions { .. }),
            "one report per connection: {event:?}"
        );
    }
}

async fn a_failing_handshake_ends_requests_typed(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Echo);
    let hook =
        |_io: HandshakeIo| async { Err::<HandshakeIo, _>(HandshakeError::auth("bad credentials")) };
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .handshake(hook)
        .build(Arc::clone(&runtime))
        .unwrap();
    let mut events = client.subscribe();
    let node = client.initial_nodes()[0];
    let outcome = client
        .send(Target::Node(node), &b"hi"[..], Duration::from_secs(5))
        .await;
    assert_eq!(
        outcome,
        Err(SendError::ConnectionLost {
            cause: CloseReason::AuthFailed,
            sent: Sent::Nothing,
            retried: false,
        })
    );
    let error = within(&*runtime, Duration::from_secs(1), async {
        loop {
            if let Some(ClientEvent::HandshakeFailed { error, .. }) = events.recv().await {
                return error;
            }
        }
    })
    .await
    .expect("a HandshakeFailed event");
    assert_eq!(error.to_string(), "authentication failed: bad credentials");
    client.shutdown().await;
}

/// `TCP_QUICKACK` is read back as the kernel has it. On, the driver sets it again after every
/// read, so once an answer is in, the connection is in quick-ACK mode: that needs the re-arm,
/// since Linux leaves the mode by itself for traffic where each request follows an answer.
/// Off, such traffic puts it in delayed-ACK mode, until its delayed ACK goes out about 40 ms
/// after the last answer: read back false at once (tried a few times, in case a loaded machine
/// kept the query back that long).
async fn quick_ack_mode_reads_back_as_the_option_leaves_it(runtime: Arc<dyn Runtime>) {
    for quickack in [true, false] {
        let peer = Peer::start(Behaviour::Echo);
        let mut config = test_config();
        config.socket.quickack = quickack;
        let client = ClientBuilder::new(config)
            .node(peer.addr())
            .build(Arc::clone(&runtime))
            .unwrap();
        let node = client.initial_nodes()[0];
        let mut readbacks = Vec::new();
        for _ in 0..5 {
            for _ in 0..4 {
                let answer = client
                    .send(Target::Node(node), &b"hi"[..], Duration::from_secs(5))
                    .await;
                assert_eq!(answer.as_deref(), Ok(&b"hi"[..]));
            }
            let info = client.node_info(node).await.unwrap();
            let readback = info.socket.expect("connected").readback.quickack;
            readbacks.push(readback);
            if readback == Some(quickack) {
                break;
            }
        }
        if quickack {
            assert_eq!(readbacks, [Some(true)], "re-armed after every read");
        } else {
            assert!(
                readbacks.contains(&Some(false)),
                "delayed-ACK mode after request-answer traffic: {readbacks:?}"
            );
        }
        client.shutdown().await;
    }
}

test_on_every_runtime!(
    configured_options_read_back_after_connect,
    quick_ack_mode_reads_back_as_the_option_leaves_it,
    an_option_the_kernel_caps_is_reported,
    an_option_the_kernel_caps_is_reported_for_a_named_node,
    a_failing_handshake_ends_requests_typed,
);
