//! # keepwire-smol
//!
//! keepwire on [smol](https://docs.rs/smol): [`SmolRuntime`] implements the driver's
//! [`Runtime`] trait with async-io sockets and timers, and [`client`] builds a [`Client`]
//! whose driver runs on smol's global executor (or on an executor you pass).
//!
//! The async-io pieces (timer, stream, connect) are keepwire-driver's
//! [`async_io`] module, shared with keepwire-async-std: this crate
//! only chooses where the driver is spawned. Features: `tracing` (on by default), `metrics`
//! and `tower`, as keepwire-driver describes them.
//!
//! ```no_run
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_smol::{Config, Target};
//!
//! smol::block_on(async {
//!     let client = keepwire_smol::client(Config::default())
//!         .node("127.0.0.1:7000".parse::<std::net::SocketAddr>()?)
//!         .build()?;
//!     let reply = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//!     # let _ = reply;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! **Nodes by name, final errors, heartbeats.** A node may be a name
//! (`"db.example:7000".parse::<Endpoint>()?` or [`Endpoint::name`]): it is resolved on every
//! connect attempt, with std's resolver on smol's blocking pool (`smol::unblock`), and each of its addresses is tried
//! in turn. `.resolver(..)` replaces the resolver with any [`Resolver`] (a test's table, a
//! service registry). A name that does not exist, refused credentials and a rejected
//! certificate are final errors ([`SendError::is_final`]): the waiting requests get them at
//! once. `.heartbeat(interval, timeout)` sends the codec's ping on idle connections, so a hung
//! server behind an idle connection is found within `interval + timeout`. keepwire-driver's
//! documentation has the details.
//!
//! ```no_run
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_smol::{Config, Endpoint, Target};
//!
//! smol::block_on(async {
//!     let client = keepwire_smol::client(Config::default())
//!         .node("db.example:7000".parse::<Endpoint>()?) // resolved on every connect attempt
//!         .heartbeat(Duration::from_secs(5), Duration::from_secs(1)) // ping idle connections
//!         .build()?;
//!     match client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await {
//!         Err(e) if e.is_final() => eprintln!("no retry can help: {e}"), // e.g. no such name
//!         other => drop(other),
//!     }
//!     Ok(())
//! })
//! # }
//! ```
//!
//! **Feature `tls`** (off by default): TLS on rustls through futures-rustls, with ring as
//! the crypto provider and no OpenSSL, in the `tls` module:
//! `.handshake(keepwire_smol::tls::handshake(config))` runs the TLS handshake under the setup
//! deadline, and a frame then counts as written only when its ciphertext has reached the
//! kernel.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "tls")]
pub mod tls;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

pub use keepwire_driver::*;
use smol::Executor;

/// The smol [`Runtime`]: async-io sockets and timers, tasks on smol's global executor or on
/// a given [`Executor`].
#[derive(Clone, Default)]
pub struct SmolRuntime {
    executor: Option<Arc<Executor<'static>>>,
}

impl SmolRuntime {
    /// Spawns on smol's global executor (`smol::spawn`).
    pub fn new() -> Self {
        Self { executor: None }
    }

    /// Spawns on `executor`; the application must keep running it.
    pub fn with_executor(executor: Arc<Executor<'static>>) -> Self {
        Self {
            executor: Some(executor),
        }
    }
}

impl fmt::Debug for SmolRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let executor = if self.executor.is_some() {
            "given"
        } else {
            "global"
        };
        f.debug_struct("SmolRuntime")
            .field("executor", &executor)
            .finish()
    }
}

impl Runtime for SmolRuntime {
    fn now(&self) -> Instant {
        async_io::now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        async_io::new_timer(deadline)
    }

    /// Yes: with smol's global executor on one thread (its default) a round trip to a
    /// loopback echo server took 2.2 µs less (7.5 µs to 5.3 µs; BENCHMARKS.md, "A read right
    /// after the write"), and on two threads (`SMOL_THREADS=2`) one request at a time made
    /// 38–41 K requests per second against 29–31 K without it (BENCHMARKS.md, "A dry stream
    /// reads when woken").
    fn read_after_write(&self) -> bool {
        true
    }

    /// As it is: async-io's reactor and timers are global, and the executor's spawn is
    /// callable from any thread.
    fn drive_here(&self, run: &mut dyn FnMut()) -> bool {
        run();
        true
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        match &self.executor {
            Some(executor) => executor.spawn(future).detach(),
            None => smol::spawn(future).detach(),
        }
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        async_io::connect(socket, addr)
    }

    /// std's resolver on smol's blocking pool (`smol::unblock`).
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        let host = host.to_owned();
        Box::pin(smol::unblock(move || resolve_blocking(&host, port)))
    }
}

/// Builds a [`Client`] whose driver runs on smol's global executor; to run it on an executor
/// of your own, pass `.runtime(SmolRuntime::with_executor(executor))`.
pub fn client(config: Config) -> SmolClientBuilder {
    BoundClientBuilder::new(config, SmolRuntime::new())
}

/// A [`ClientBuilder`] bound to a [`SmolRuntime`].
pub type SmolClientBuilder = BoundClientBuilder<SmolRuntime>;

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::thread::{self, ThreadId};
    use std::time::Duration;

    use super::*;

    /// Spawns a task that sends the id of the thread it runs on.
    fn spawn_reporter(runtime: &SmolRuntime) -> mpsc::Receiver<ThreadId> {
        let (tx, rx) = mpsc::channel();
        runtime.spawn(Box::pin(async move {
            let _ = tx.send(thread::current().id());
        }));
        rx
    }

    #[test]
    fn a_given_executor_runs_the_tasks_and_nothing_else_does() {
        let executor = Arc::new(Executor::new());
        let runtime = SmolRuntime::with_executor(Arc::clone(&executor));
        let ran = spawn_reporter(&runtime);
        // Queued on the given executor, not on smol's global one (whose threads would run it
        // meanwhile): it runs when, and where, this thread runs the executor.
        assert!(executor.try_tick(), "the task is on the given executor");
        assert_eq!(ran.try_recv(), Ok(thread::current().id()));
        assert_eq!(
            format!("{runtime:?}"),
            r#"SmolRuntime { executor: "given" }"#
        );
    }

    #[test]
    fn the_default_is_smols_global_executor() {
        let runtime = SmolRuntime::new();
        let ran = spawn_reporter(&runtime);
        let on = ran
            .recv_timeout(Duration::from_secs(10))
            .expect("the global executor ran the task");
        assert_ne!(on, thread::current().id());
        assert_eq!(
            format!("{runtime:?}"),
            r#"SmolRuntime { executor: "global" }"#
        );
    }
}
