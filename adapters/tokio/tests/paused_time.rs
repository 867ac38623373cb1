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
