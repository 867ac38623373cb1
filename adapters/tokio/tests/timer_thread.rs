//! `TokioRuntime::with_timer_thread`: keepwire's deadlines fire on its timer thread, on both
//! of tokio's flavours, on the real clock: a request's deadline, an earlier deadline after a
//! later one, and a connect's setup timeout.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use keepwire_proto::{CloseReason, Sent};
use keepwire_tokio::{Client, Config, Phase, SendError, Target, TokioRuntime};

/// A server that accepts and reads everything, and never answers: its listener and the
/// address to connect to. The accepted connections live on a thread until the process ends.
fn silent_server() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        for conn in accepting.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || std::io::copy(&mut conn, &mut std::io::sink()));
        }
    });
    (listener, addr)
}

fn client(config: Config, addr: SocketAddr) -> Client {
    keepwire_tokio::client(config)
        .runtime(TokioRuntime::current().with_timer_thread())
        .node(addr)
        .build()
        .unwrap()
}

/// A request due in an hour is waiting; one due in 200 ms, sent after it, ends at its own
/// deadline: the driver's timer, armed at the later deadline, moved to the earlier one.
async fn an_earlier_deadline_ends_its_request_on_time() {
    let (_listener, addr) = silent_server();
    let client = client(Config::default(), addr);
    let late = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .send(Target::Best, &b"later"[..], Duration::from_secs(3_600))
                .await
        }
    });
    // The late request written and waiting: the timer is armed an hour ahead.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    let outcome = client
        .send(Target::Best, &b"sooner"[..], Duration::from_millis(200))
        .await;
    let waited = start.elapsed();
    assert_eq!(
        outcome,
        Err(SendError::DeadlineExceeded {
            phase: Phase::InFlight,
            sent: Sent::Fully,
            retried: false,
        })
    );
    assert!(
        waited >= Duration::from_millis(200),
        "ended after {waited:?}"
    );
    // Not the hour: well within the test's patience on the slowest machine.
    assert!(waited < Duration::from_secs(10), "ended after {waited:?}");
    assert!(!late.is_finished(), "the later request still waits");
    #[cfg(target_os = "linux")]
    assert!(timer_thread_runs(), "the deadline fired on tokio's timers");
    client.shutdown().await;
    assert!(matches!(
        late.await.unwrap(),
        Err(SendError::ConnectionLost {
            cause: CloseReason::Shutdown,
            ..
        })
    ));
}

/// Whether this process has keepwire's timer thread. Under `cargo test` another test of this
/// file may have started it, but every one of them asks for it.
#[cfg(target_os = "linux")]
fn timer_thread_runs() -> bool {
    std::fs::read_dir("/proc/self/task").unwrap().any(|task| {
        let comm = task.unwrap().path().join("comm");
        std::fs::read_to_string(comm).is_ok_and(|name| name.trim() == "keepwire-timer")
    })
}

#[tokio::test(flavor = "current_thread")]
async fn current_thread_an_earlier_deadline_ends_its_request_on_time() {
    an_earlier_deadline_ends_its_request_on_time().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_an_earlier_deadline_ends_its_request_on_time() {
    an_earlier_deadline_ends_its_request_on_time().await;
}

/// A connect that hangs (a full accept queue) is cut at its setup timeout, 300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_connect_ends_at_its_setup_timeout() {
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let _filler = std::net::TcpStream::connect(addr).unwrap(); // the queue's one place
    let mut config = Config::default();
    config.setup_timeout = Duration::from_millis(300);
    config.setup_timeout_jitter = 0.0;
    let client = client(config, addr);
    let start = Instant::now();
    let outcome = client
        .send(Target::Best, &b"hello"[..], Duration::from_secs(60))
        .await;
    let waited = start.elapsed();
    assert_eq!(
        outcome,
        Err(SendError::ConnectionLost {
            cause: CloseReason::SetupTimeout,
            sent: Sent::Nothing,
            retried: false,
        })
    );
    assert!(
        waited >= Duration::from_millis(300),
        "ended after {waited:?}"
    );
    assert!(waited < Duration::from_secs(10), "ended after {waited:?}");
    #[cfg(target_os = "linux")]
    assert!(
        timer_thread_runs(),
        "the setup timeout fired on tokio's timers"
    );
    client.shutdown().await;
}
