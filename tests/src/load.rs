//! A steady load and an event recorder on the runtime under test, for the availability suite
//! on real sockets (`tests/real_availability.rs`): requests sent on a fixed period and how each
//! ended, and every pool event stamped on the runtime's clock as it arrived.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use keepwire_driver::{Client, ClientEvent, Runtime, SendError, Target};
use keepwire_proto::Event;

use crate::{Task, sleep, spawn, within};

/// One request's end, on the runtime's clock.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Index into the load's targets.
    pub target: usize,
    /// When the request was sent, on the runtime's clock.
    pub sent_at: Instant,
    /// When it ended.
    pub done_at: Instant,
    /// How it ended.
    pub result: Result<(), SendError>,
}

/// Sends one request every `period`, to each target in turn, each from its own task, and
/// records how each ended.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    outstanding: Arc<AtomicUsize>,
    samples: Arc<Mutex<Vec<Sample>>>,
    task: Task<()>,
}

impl Load {
    /// Starts sending to `targets` on `runtime`, every `period`, each request with `timeout`.
    pub fn start(
        runtime: &Arc<dyn Runtime>,
        client: &Client,
        targets: Vec<Target>,
        period: Duration,
        timeout: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let outstanding = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let task = spawn(&**runtime, {
            let (runtime, client) = (Arc::clone(runtime), client.clone());
            let (stop, outstanding, samples) = (
                Arc::clone(&stop),
                Arc::clone(&outstanding),
                Arc::clone(&samples),
            );
            async move {
                let mut next = runtime.now();
                for i in (0..targets.len()).cycle() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    outstanding.fetch_add(1, Ordering::SeqCst);
                    let (target, client, clock) =
                        (targets[i], client.clone(), Arc::clone(&runtime));
                    let (outstanding, samples) = (Arc::clone(&outstanding), Arc::clone(&samples));
                    drop(spawn(&*runtime, async move {
                        let sent_at = clock.now();
                        let result = client.send(target, &b"ping"[..], timeout).await;
                        let sample = Sample {
                            target: i,
                            sent_at,
                            done_at: clock.now(),
                            result: result.map(drop),
                        };
                        lock(&samples).push(sample);
                        outstanding.fetch_sub(1, Ordering::SeqCst);
                    }));
                    next += period;
                    keepwire_driver::sleep_until(&*runtime, next).await;
                }
            }
        });
        Self {
            stop,
            outstanding,
            samples,
            task,
        }
    }

    /// The end of the first successful request that ended at or after `since`, waiting at most
    /// `limit` for one; `None` if none came.
    pub async fn first_success_after(
        &self,
        runtime: &dyn Runtime,
        since: Instant,
        limit: Duration,
    ) -> Option<Duration> {
        within(runtime, limit, async {
            loop {
                let first = lock(&self.samples)
                    .iter()
                    .filter(|s| s.result.is_ok() && s.done_at >= since)
                    .map(|s| s.done_at - since)
                    .min();
                if let Some(first) = first {
                    return first;
                }
                sleep(runtime, Duration::from_millis(5)).await;
            }
        })
        .await
    }

    /// Stops sending, waits for every request to end (each has a deadline) and returns them.
    pub async fn stop(self, runtime: &dyn Runtime) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.join().await;
        let ended = within(runtime, Duration::from_secs(10), async {
            while self.outstanding.load(Ordering::SeqCst) > 0 {
                sleep(runtime, Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(ended.is_some(), "every request ends by its deadline");
        std::mem::take(&mut *lock(&self.samples))
    }
}

/// Every pool event, stamped on the runtime's clock as it arrived.
#[derive(Debug)]
pub struct Recorder {
    events: Arc<Mutex<Vec<(Instant, Event)>>>,
    missed: Arc<AtomicUsize>,
}

impl Recorder {
    /// Starts recording `client`'s pool events on `runtime`.
    pub fn start(runtime: &Arc<dyn Runtime>, client: &Client) -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let missed = Arc::new(AtomicUsize::new(0));
        let mut stream = client.subscribe();
        drop(spawn(&**runtime, {
            let (runtime, events, missed) = (
                Arc::clone(runtime),
                Arc::clone(&events),
                Arc::clone(&missed),
            );
            async move {
                while let Some(event) = stream.recv().await {
                    match event {
                        ClientEvent::Pool(event) => lock(&events).push((runtime.now(), event)),
                        ClientEvent::Missed(n) => {
                            missed.fetch_add(n as usize, Ordering::SeqCst);
                        }
                        _ => {}
                    }
                }
            }
        }));
        Self { events, missed }
    }

    /// The events so far; panics if the recorder missed any.
    pub fn snapshot(&self) -> Vec<(Instant, Event)> {
        let missed = self.missed.load(Ordering::SeqCst);
        assert_eq!(missed, 0, "the recorder fell behind");
        lock(&self.events).clone()
    }

    /// Waits, at most `limit`, until `done` holds for the events so far.
    pub async fn until(
        &self,
        runtime: &dyn Runtime,
        limit: Duration,
        what: &str,
        done: impl Fn(&[(Instant, Event)]) -> bool,
    ) {
        let reached = within(runtime, limit, async {
            while !done(&lock(&self.events)) {
                sleep(runtime, Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(reached.is_some(), "no {what} within {limit:?}");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
