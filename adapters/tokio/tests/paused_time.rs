//! The driver reads time from tokio's clock, so with tokio's paused clock keepwire's
//! timeouts follow virtual time: a 10 s setup timeout passes in milliseconds of wall time.

use std::net::SocketAddr;
use std::time::Duration;

use keepwire_proto::CloseReason;
use keepwire_tokio::{Config, SendError, Target};
use socket2::{Domain, Socket, Type};

#[tokio::test(start_paused = true)]
async fn the_setup_timeout_follows_tokios_paused_clock() {
    // A listen(0) socket whose accept queue one connection fills: the next connect hangs.
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let _filler = std::net::TcpStream::connect(addr).unwrap();

    let mut config = Config::default();
    config.setup_timeout_jitter = 0.0;
    let client = keepwire_tokio::client(config).node(addr).build().unwrap();
    let wall = std::time::Instant::now();
    let virtual_start = tokio::time::Instant::now();
    let outcome = client
        .send(Target::Best, &b"hello"[..], Duration::from_secs(60))
        .await;
    assert_eq!(
        outcome,
        Err(SendError::ConnectionLost(CloseReason::SetupTimeout))
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
