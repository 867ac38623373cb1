//! # keepwire-async-std (legacy)
//!
//! keepwire on [async-std](https://docs.rs/async-std): [`AsyncStdRuntime`] implements the
//! driver's [`Runtime`] trait, and [`client`] builds a [`Client`] whose driver runs on
//! async-std's executor.
//!
//! **Legacy.** async-std is discontinued upstream; its authors point to
//! [smol](https://docs.rs/smol) instead (advisory RUSTSEC-2025-0052). This crate stays, as
//! thin as `keepwire-smol`, for applications that still run on async-std; new code should
//! use `keepwire-smol` (both share the same async-io reactor).
//!
//! The async-io pieces (timer, stream, connect) are keepwire-driver's
//! [`async_io`] module, shared with keepwire-smol: async-std runs
//! on the same reactor, so this crate only spawns the driver on async-std's executor.
//! Features: `tracing` (on by default), `metrics` and `tower`, as keepwire-driver describes
//! them.
//!
//! ```no_run
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_async_std::{Config, Target};
//!
//! async_std::task::block_on(async {
//!     let client = keepwire_async_std::client(Config::default())
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
//! connect attempt, with std's resolver on async-std's blocking pool (`spawn_blocking`), and each of its addresses is tried
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
//! use keepwire_async_std::{Config, Endpoint, Target};
//!
//! async_std::task::block_on(async {
//!     let client = keepwire_async_std::client(Config::default())
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
//! `.handshake(keepwire_async_std::tls::handshake(config))` runs the TLS handshake under the setup
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

/// The async-std [`Runtime`]: async-std tasks, async-io timers and streams (the reactor
/// async-std itself runs on).
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncStdRuntime;

impl Runtime for AsyncStdRuntime {
    fn now(&self) -> Instant {
        async_io::now()
    }

    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn Timer>> {
        async_io::new_timer(deadline)
    }

    /// Yes: on async-std's executor (a thread per core), one request at a time to a loopback
    /// echo server made 32.6–35.0 K requests per second against 26.2–26.8 K without it,
    /// median round trips 24–26 µs against 30 µs (`keepwire-tests`' example
    /// `async_std_read_after_write`; BENCHMARKS.md, "A dry stream reads when woken").
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
        drop(async_std::task::spawn(future));
    }

    fn connect(
        &self,
        socket: PreparedSocket,
        addr: SocketAddr,
    ) -> BoxFuture<'static, io::Result<Box<dyn IoStream>>> {
        async_io::connect(socket, addr)
    }

    /// std's resolver on async-std's blocking pool (`spawn_blocking`).
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, Result<Vec<SocketAddr>, ResolveError>> {
        let host = host.to_owned();
        Box::pin(async_std::task::spawn_blocking(move || {
            resolve_blocking(&host, port)
        }))
    }
}

/// Builds a [`Client`] whose driver runs on async-std's executor.
pub fn client(config: Config) -> AsyncStdClientBuilder {
    BoundClientBuilder::new(config, AsyncStdRuntime)
}

/// A [`ClientBuilder`] bound to [`AsyncStdRuntime`].
pub type AsyncStdClientBuilder = BoundClientBuilder<AsyncStdRuntime>;
