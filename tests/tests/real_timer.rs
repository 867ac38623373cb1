//! The timer contract on every runtime: a timer fires once its deadline has passed, and again
//! after every reset, to the same deadline too; and the driver re-arms its timer after every
//! fire, so a deadline the pool offers again after a fire (a clock that reads behind its
//! timers) still fires, on timers that stay pending after firing (async-io's) as on those that
//! stay ready (tokio's). A timer that is armed and waiting is polled again only once its
//! waker woke the driver, not on every round.

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use keepwire_driver::{
    BoxFuture, ClientBuilder, IoStream, PreparedSocket, Runtime, SendError, Target, Timer,
};
use keepwire_proto::{Phase, Sent};
use keepwire_tests::peers::{Behaviour, Peer};
use keepwire_tests::{test_config, test_on_every_runtime, within};

/// Waits for `timer` to fire, at most `limit`.
async fn fires(runtime: &dyn Runtime, timer: &mut Pin<Box<dyn Timer>>, limit: Duration) -> bool {
    within(runtime, limit, poll_fn(|cx| timer.as_mut().poll_fire(cx)))
        .await
        .is_some()
}

async fn a_timer_reset_to_the_same_deadline_fires_again(runtime: Arc<dyn Runtime>) {
    let deadline = runtime.now() + Duration::from_millis(30);
    let mut timer = runtime.new_timer(deadline);
    assert!(fires(&*runtime, &mut timer, Duration::from_secs(2)).await);
    assert!(runtime.now() >= deadline, "fired before its deadline");
    // The same deadline, already past, three times over: ready at once each time.
    for round in 0..3 {
        timer.as_mut().reset(deadline);
        assert!(
            fires(&*runtime, &mut timer, Duration::from_secs(2)).await,
            "a reset to the same deadline did not fire again (round {round})"
        );
    }
    // A later deadline waits for it.
    let later = runtime.now() + Duration::from_millis(50);
    timer.as_mut().reset(later);
    assert!(fires(&*runtime, &mut timer, Duration::from_secs(2)).await);
    assert!(runtime.now() >= later, "fired before its new deadline");
}

/// How the driver used the timers of a [`Lagging`] runtime.
#[derive(Debug, Default)]
struct TimerLog {
    /// Every poll of a timer.
    polls: AtomicUsize,
    fires: AtomicUsize,
    /// Resets to the deadline that had just fired: a deadline the pool offered again.
    repeats: AtomicUsize,
    /// Polls of a fired timer with no reset in between (the hang this test is about).
    polled_after_fire: AtomicUsize,
}

/// A runtime whose clock reads `lag` behind the clock its timers run on, like a coarse cached
/// clock: every timer fires while `now()` still reads before the deadline, so the pool, asked
/// at that `now`, offers the same deadline again. Its timers are strictly edge-triggered: a
/// fired timer stays pending until it is reset, and a poll without a reset is logged. It
/// counts every poll of its timers too (with no lag, for the test that counts them).
struct Lagging {
    inner: Arc<dyn Runtime>,
    lag: Duration,
    log: Arc<TimerLog>,
}

impl fmt::Debug for Lagging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lagging").field("lag", &self.lag).finish()
    }
}

impl Runtime for Lagging {
    fn now(&self) -> Instant {
        self.inner.now() - self.lag
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        Box::pin(EdgeTimer {
            inner: self.inner.new_timer(deadline),
            deadline,
            fired: None,
            log: Arc::clone(&self.log),
        })
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        self.inner.spawn(future);
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        self.inner.connect(socket, addr)
    }
}

#[derive(Debug)]
struct EdgeTimer {
    inner: Pin<Box<dyn Timer>>,
    deadline: Instant,
    /// The deadline it fired at, until the next reset.
    fired: Option<Instant>,
    log: Arc<TimerLog>,
}

impl Timer for EdgeTimer {
    fn reset(self: Pin<&mut Self>, deadline: Instant) {
        let this = self.get_mut();
        if this.fired == Some(deadline) {
            this.log.repeats.fetch_add(1, Ordering::Relaxed);
        }
        this.fired = None;
        this.deadline = deadline;
        this.inner.as_mut().reset(deadline);
    }

    fn poll_fire(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.log.polls.fetch_add(1, Ordering::Relaxed);
        if this.fired.is_some() {
            this.log.polled_after_fire.fetch_add(1, Ordering::Relaxed);
            return Poll::Pending; // as async-io's timer: never again without a reset
        }
        match this.inner.as_mut().poll_fire(cx) {
            Poll::Ready(()) => {
                this.fired = Some(this.deadline);
                this.log.fires.fetch_add(1, Ordering::Relaxed);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

async fn a_deadline_offered_again_after_its_timer_fired_still_fires(runtime: Arc<dyn Runtime>) {
    let peer = Peer::start(Behaviour::Hold);
    let log = Arc::new(TimerLog::default());
    let lagging: Arc<dyn Runtime> = Arc::new(Lagging {
        inner: Arc::clone(&runtime),
        lag: Duration::from_millis(20),
        log: Arc::clone(&log),
    });
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(lagging)
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for round in 0..3 {
        let started = Instant::now();
        let outcome = within(
            &*runtime,
            Duration::from_secs(3),
            client.send(
                Target::Best,
                format!("held {round}"),
                Duration::from_millis(150),
            ),
        )
        .await;
        let outcome = outcome.unwrap_or_else(|| panic!("round {round}: the deadline never fired"));
        assert!(
            matches!(
                outcome,
                Err(SendError::DeadlineExceeded {
                    phase: Phase::InFlight,
                    sent: Sent::Fully,
                    ..
                })
            ),
            "round {round}: {outcome:?}"
        );
        seen.lock().unwrap().push(started.elapsed());
    }
    let took = seen.lock().unwrap().clone();
    assert!(
        took.iter()
            .all(|t| *t >= Duration::from_millis(150) && *t < Duration::from_secs(1)),
        "{took:?}"
    );
    assert_eq!(
        log.polled_after_fire.load(Ordering::Relaxed),
        0,
        "the driver polled a fired timer without resetting it"
    );
    assert!(
        log.repeats.load(Ordering::Relaxed) >= 3,
        "every deadline was offered again after its fire ({log:?})"
    );
    client.shutdown().await;
}

/// One caller's requests one after the other, each answered long before any deadline: the
/// timer, armed at the first request's deadline, covers every later one (deadlines move
/// later), and it is not polled again for each request while it waits.
async fn a_waiting_timer_is_not_polled_on_every_round(runtime: Arc<dyn Runtime>) {
    const REQUESTS: usize = 100;
    let peer = Peer::start(Behaviour::Echo);
    let log = Arc::new(TimerLog::default());
    let counting: Arc<dyn Runtime> = Arc::new(Lagging {
        inner: Arc::clone(&runtime),
        lag: Duration::ZERO,
        log: Arc::clone(&log),
    });
    let client = ClientBuilder::new(test_config())
        .node(peer.addr())
        .build(counting)
        .unwrap();
    for round in 0..REQUESTS {
        let answer = within(
            &*runtime,
            Duration::from_secs(5),
            client.send(Target::Best, "ping", Duration::from_secs(10)),
        )
        .await;
        assert!(
            matches!(answer, Some(Ok(ref payload)) if payload == "ping"),
            "request {round}: {answer:?}"
        );
    }
    // A few: the connect's deadline and the first requests', and one more per write timeout
    // that fires (500 ms) should the machine be slow; one per request polls every round.
    let polled = log.polls.load(Ordering::Relaxed);
    assert!(
        polled < REQUESTS / 4,
        "the timer was polled {polled} times for {REQUESTS} requests"
    );
    client.shutdown().await;
}

test_on_every_runtime!(
    a_timer_reset_to_the_same_deadline_fires_again,
    a_deadline_offered_again_after_its_timer_fired_still_fires,
    a_waiting_timer_is_not_polled_on_every_round,
);
