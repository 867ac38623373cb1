//! # keepwire-tokio
//!
//! keepwire on [tokio](https://tokio.rs): [`TokioRuntime`] implements the driver's
//! [`Runtime`] trait, and [`client`] builds a [`Client`] on the current tokio runtime.
//!
//! The driver reads time from `tokio::time::Instant`, so with tokio's paused clock
//! (`tokio::time::pause`) keepwire's timeouts follow the virtual time. Its timer is tokio's
//! own `Sleep` and its streams tokio's `TcpStream` (keepwire-driver implements the traits for
//! them), so this crate is only the glue: a clock, a spawner and a connect.
//!
//! Features: `tracing` (on by default), `metrics` and `tower`, as keepwire-driver describes
//! them. Examples: `load` (throughput), `tower` (timeout, retry and load-shed layers around a
//! `ClientService`, `--features tower`), `prometheus` (the metrics in Prometheus' text format,
//! `--features metrics`).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_tokio::{Config, Target};
//!
//! let client = keepwire_tokio::client(Config::default())
//!     .node("127.0.0.1:7000".parse::<std::net::SocketAddr>()?)
//!     .build()?;
//! let reply = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//! # let _ = reply;
//! # Ok(())
//! # }
//! ```
//!
//! **Nodes by name, final errors, heartbeats.** A node may be a name
//! (`"db.example:7000".parse::<Endpoint>()?` or [`Endpoint::name`]): it is resolved on every
//! connect attempt, with std's resolver on tokio's blocking pool, and each of its addresses is tried
//! in turn. `.resolver(..)` replaces the resolver with any [`Resolver`] (a test's table, a
//! service registry). A name that does not exist, refused credentials and a rejected
//! certificate are final errors ([`SendError::is_final`]): the waiting requests get them at
//! once. `.heartbeat(interval, timeout)` sends the codec's ping on idle connections, so a hung
//! server behind an idle connection is found within `interval + timeout`. keepwire-driver's
//! documentation has the details.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_tokio::{Config, Endpoint, SendError, Target};
//!
//! let client = keepwire_tokio::client(Config::default())
//!     .node("db.example:7000".parse::<Endpoint>()?) // resolved on every connect attempt
//!     .heartbeat(Duration::from_secs(5), Duration::from_secs(1)) // ping idle connections
//!     .build()?;
//! match client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await {
//!     Err(e) if e.is_final() => eprintln!("no retry can help: {e}"), // e.g. no such name
//!     other => drop(other),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! **Feature `tls`** (off by default): TLS on rustls through tokio-rustls, with ring as
//! the crypto provider and no OpenSSL, in the `tls` module:
//! `.handshake(keepwire_tokio::tls::handshake(config))` runs the TLS handshake under the setup
//! deadline, and a frame then counts as written only when its ciphertext has reached the
//! kernel.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "tls")]
pub mod tls;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Instant;

pub use keepwire_driver::*;
use tokio::net::TcpSocket;
use tokio::runtime::{Handle, RuntimeFlavor};

/// The tokio [`Runtime`]: spawns on a tokio runtime handle, uses tokio's clock and timers.
#[derive(Clone, Debug)]
pub struct TokioRuntime {
    handle: Handle,
}

impl TokioRuntime {
    /// The runtime of the calling context.
    ///
    /// # Panics
    /// Outside a tokio runtime (as `tokio::runtime::Handle::current` does).
    pub fn current() -> Self {
        Self {
            handle: Handle::current(),
        }
    }

    /// A given tokio runtime (its time and I/O drivers must be enabled).
    pub fn from_handle(handle: Handle) -> Self {
        Self { handle }
    }
}

impl Runtime for TokioRuntime {
    fn now(&self) -> Instant {
        // Outside a runtime context tokio's clock falls back to the system clock, which a
        // paused runtime does not follow: read the clock of *this* runtime wherever we are
        // called from (a client may be built on a plain thread with `from_handle`).
        let _context = self.handle.enter();
        tokio::time::Instant::now().into_std()
    }

    fn now_in_task(&self) -> Instant {
        // The driver's task runs on this runtime, in its context: no need to enter it again
        // (which costs as much as reading the clock, with every round of the driver).
        tokio::time::Instant::now().into_std()
    }

    /// On a current_thread runtime only: there the driver and its callers share the one
    /// thread. On the multi-thread runtime a read right after the write made the round trip
    /// slower (tokio's LIFO slot hands the fourth of a chain of tasks that wake each other
    /// to another worker: BENCHMARKS.md, "A read right after the write"). A round a caller
    /// runs in place ([`drive_here`](Runtime::drive_here)) reads after its write on either:
    /// no chain of tasks there.
    fn read_after_write(&self) -> bool {
        matches!(self.handle.runtime_flavor(), RuntimeFlavor::CurrentThread)
    }

    /// In this runtime's context, entered around the round: the caller may be a thread
    /// outside it, and a connect the round starts must register with this runtime's reactor.
    fn drive_here(&self, run: &mut dyn FnMut()) -> bool {
        let _context = self.handle.enter();
        run();
        true
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        let _context = self.handle.enter();
        Box::pin(tokio::time::sleep_until(deadline.into()))
    }

    fn spawn(&self, future: BoxFuture<'static, ()>) {
        drop(self.handle.spawn(future));
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        Box::pin(async move {
            let socket = TcpSocket::from_std_stream(socket.into_std());
            let stream = socket.connect(addr).await?;
            Ok(Box::new(stream) as Box<dyn IoStream>)
        })
    }

    /// std's resolver on this runtime's blocking pool (what `tokio::net::lookup_host` does,
    /// on the client's runtime wherever the lookup is polled from).
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        let host = host.to_owned();
        let lookup = self
            .handle
            .spawn_blocking(move || resolve_blocking(&host, port));
        Box::pin(async move {
            lookup
                .await
                .unwrap_or_else(|e| Err(ResolveError::Failed(io::Error::other(e))))
        })
    }
}

/// Builds a [`Client`] on the tokio runtime of the calling context.
///
/// # Panics
/// Outside a tokio runtime (use [`BoundClientBuilder::runtime`] with
/// [`TokioRuntime::from_handle`] to build from elsewhere).
pub fn client(config: Config) -> TokioClientBuilder {
    BoundClientBuilder::new(config, TokioRuntime::current())
}

/// A [`ClientBuilder`] bound to a tokio runtime.
pub type TokioClientBuilder = BoundClientBuilder<TokioRuntime>;
