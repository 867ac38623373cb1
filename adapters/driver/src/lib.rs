//! # keepwire-driver
//!
//! The runtime-agnostic half of keepwire's adapters, written once: a [`Client`] whose single
//! driver task owns a [`keepwire_proto::Pool`] and every socket, applies socket options
//! through socket2 (reporting each one the platform could not apply), enforces the setup,
//! write and request deadlines the pool computes, frames requests and cuts responses with a
//! [`Codec`], and sleeps until the pool's next deadline.
//!
//! A runtime crate (`keepwire-tokio`, `keepwire-smol`, `keepwire-async-std`) only implements
//! the small [`Runtime`] trait.
//!
//! ```no_run
//! # async fn demo(runtime: std::sync::Arc<dyn keepwire_driver::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use keepwire_driver::{ClientBuilder, Target};
//! use keepwire_proto::Config;
//!
//! let mut config = Config::default();
//! config.write_timeout = Duration::from_secs(2);
//! let client = ClientBuilder::new(config)
//!     .node("127.0.0.1:7000".parse()?)
//!     .node("127.0.0.1:7001".parse()?)
//!     .build(runtime)?;
//! let response = client.send(Target::Best, &b"ping"[..], Duration::from_secs(1)).await?;
//! # let _ = response;
//! client.shutdown().await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod codec;
mod driver;
mod error;
mod handshake;
mod runtime;
mod socket;
mod sync;

pub use client::{
    BoundClientBuilder, Client, ClientBuilder, ClientEvent, Events, NodeInfo, SocketInfo,
};
pub use codec::{Codec, EncodeError, LengthPrefixed, Response};
pub use error::{BuildError, CommandError, SendError, failure_of};
pub use handshake::{HandshakeError, HandshakeHook, HandshakeIo};
pub use keepwire_proto::{Config, Sent, Target};
pub use runtime::{
    BoxFuture, IoStream, Runtime, Timer, begin_connect, finish_connect, sleep_until,
};
pub use socket::{
    NotApplied, OptionReport, SocketOption, SocketReadback, Unapplied, apply_options,
    prepare_socket, read_back,
};
