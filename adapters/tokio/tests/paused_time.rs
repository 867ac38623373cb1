//! The driver reads time from tokio's clock, so with tokio's paused clock keepwire's
//! timeouts follow virtual time: a 10 s setup timeout passes in milliseconds of wall time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keepwire_proto::{CloseReason, Sent};
use keepwire_tokio::{Client, ClientBuilder, Config, SendError, Target, TokioRuntime};
use socket2::{Domain, Socket, Type};

/// A listen(0) socket whose accept queue one connection fills: the next connect hangs.
fn hanging_address() -> (SocketAddr, Socket, std::net::TcpStream) {
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let filler = std::net::TcpStream::connect(addr).unwrap();
    (addr, listener, filler)
}

fn config() -> Config {
    let mut config = Config::default();
    config.setup_timeout_jitter = 0.0;
    config
}

/// Sends to the hanging address and checks that the 10 s setup timeout ends the request
/// after 10 s of virtual time, within a few milliseconds of wall time.
async fn setup_timeout_passes_in_virtual_time(client: Client) {
    let wall = std::time::Instant::now();
    let virtual_start = tokio::time::Instant::now();
    let outcome = client
        .send(Target::Best, &b"hello"[..], Duration::from_secs(60))
        .await;
    assert_eq!(
        outcome,
        Err(SendError::ConnectionLost {
            cause: CloseReason::SetupTimeout,
            sent: Sent::Nothing,
            retried: false,
        })
    );
    let virtual_elapsed = virtual_start.elapsed();
    assert!(
        virtual_elapsed > Duration::from_secs(10)
            && virtual_elapsed < Duration::from_millis(10_050),
        "virtual {virtual_elapsed:?}"
    );
    assert!(
        wall.elapsed() < Duration::from_secs(3),
        "wall {:?}",
        wall.elapsed()
    );
    client.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_setup_timeout_follows_tokios_paused_clock() {
    let (addr, _listener, _filler) = hanging_address();
    let client = keepwire_tokio::client(config()).node(addr).build().unwrap();
    setup_timeout_passes_in_virtual_time(client).await;
}

/// A client built from a thread outside the runtime (with `TokioRuntime::from_handle`) must
/// still measure time on that runtime's paused clock, not on the system clock, which keeps
/// moving while the paused clock stands still.
#[test]
fn a_client_built_outside_the_runtime_follows_its_paused_clock() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (addr, _listener, _filler) = hanging_address();
    // The system clock moves on; the paused clock does not.
    std::thread::sleep(Duration::from_millis(300));
    let client = ClientBuilder::new(config())
        .node(addr)
        .build(Arc::new(TokioRuntime::from_handle(
            runtime.handle().clone(),
        )))
        .unwrap();
    runtime.block_on(setup_timeout_passes_in_virtual_time(client));
}

/// A resolver that answers `addrs` for every name, at once.
fn resolving_to(addrs: Vec<SocketAddr>) -> Arc<dyn keepwire_tokio::Resolver> {
    Arc::new(move |_host: &str, _port: u16| {
        let addrs = addrs.clone();
        async move { Ok::<_, keepwire_tokio::ResolveError>(addrs) }
    })
}

/// When the node reached `Ready`, in nanoseconds of virtual time since the client was built.
async fn ready_at(client: &Client) -> u64 {
    let mut events = client.subscribe();
    client.connect(client.initial_nodes()[0]).await.unwrap();
    loop {
        match events.recv().await {
            Some(keepwire_tokio::ClientEvent::Pool(keepwire_tokio::Event::StateChanged {
                to: keepwire_tokio::NodeState::Ready,
                at,
                ..
            })) => return at.as_nanos(),
            // The attempt failed (cut at its setup timeout): reported, never waited on again.
            Some(keepwire_tokio::ClientEvent::Pool(
                changed @ keepwire_tokio::Event::StateChanged {
                    to: keepwire_tokio::NodeState::Disconnected { .. },
                    ..
                },
            )) => panic!("the first attempt failed: {changed:?}"),
            Some(_) => {}
            None => panic!("the client stopped"),
        }
    }
}

/// Go's rule for a name with several addresses, in virtual time: with a 10 s setup timeout
/// and two addresses, the first (which never answers) gets 5 s, then the second connects, at
/// 5 s exactly, within the same attempt.
#[tokio::test(start_paused = true)]
async fn the_first_of_two_addresses_gets_half_the_setup_timeout() {
    let (hanging, _listener, _filler) = hanging_address();
    let answering = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = keepwire_tokio::client(config())
        .node(keepwire_tokio::Endpoint::name("db.example", 5432).unwrap())
        .resolver(resolving_to(vec![hanging, answering.local_addr().unwrap()]))
        .build()
        .unwrap();
    let at = ready_at(&client).await;
    let half = Duration::from_secs(5).as_nanos() as u64;
    assert!(
        (half..half + 50_000_000).contains(&at),
        "ready at {at} ns of virtual time"
    );
    let info = client.node_info(client.initial_nodes()[0]).await.unwrap();
    assert_eq!(info.addr, Some(answering.local_addr().unwrap()));
    client.shutdown().await;
}

/// Three addresses in a 9 s setup timeout, two of them silent: the first gets a third (3 s),
/// the second half of the 6 s then left (3 s: a share of what is left, divided by the
/// addresses left, not by all three), and the third connects at 6 s, within the attempt.
#[tokio::test(start_paused = true)]
async fn each_address_gets_its_share_of_what_is_left() {
    let at = ready_past_two_silent_addresses(Duration::from_secs(9)).await;
    let six = Duration::from_secs(6).as_nanos() as u64;
    assert!(
        (six..six + 50_000_000).contains(&at),
        "ready at {at} ns of virtual time"
    );
}

/// Three addresses in a 4.5 s setup timeout: an equal share would be 1.5 s each (the third
/// reached at 3 s), but each gets Go's 2 s minimum: the two that never answer take 2 s each,
/// and the third connects at 4 s, still within the attempt.
#[tokio::test(start_paused = true)]
async fn each_address_gets_at_least_two_seconds() {
    let at = ready_past_two_silent_addresses(Duration::from_millis(4500)).await;
    let four = Duration::from_secs(4).as_nanos() as u64;
    assert!(
        (four..four + 50_000_000).contains(&at),
        "ready at {at} ns of virtual time"
    );
}

/// A name with two addresses that never answer, then one that does, with `setup_timeout`:
/// when the node reached `Ready` (as [`ready_at`]), through the third address, in one attempt.
async fn ready_past_two_silent_addresses(setup_timeout: Duration) -> u64 {
    let (first, _listener1, _filler1) = hanging_address();
    let (second, _listener2, _filler2) = hanging_address();
    let answering = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = config();
    config.setup_timeout = setup_timeout;
    let client = keepwire_tokio::client(config)
        .node(keepwire_tokio::Endpoint::name("db.example", 5432).unwrap())
        .resolver(resolving_to(vec![
            first,
            second,
            answering.local_addr().unwrap(),
        ]))
        .build()
        .unwrap();
    let at = ready_at(&client).await;
    let info = client.node_info(client.initial_nodes()[0]).await.unwrap();
    assert_eq!(info.addr, Some(answering.local_addr().unwrap()));
    let counters = client.counters().await.unwrap();
    assert_eq!(counters.connects, 1, "{counters:?}");
    client.shutdown().await;
    at
}
