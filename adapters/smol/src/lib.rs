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
//!         .node("127.0.0.1:7000".parse()?)
//!         .build()?;
//!     let reply = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//!     # let _ = reply;
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
