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
mod layer;
mod runtime;
mod socket;
mod sync;
#[cfg(feature = "tls")]
pub mod tls;

pub use client::{
    BoundClientBuilder, Client, ClientBuilder, ClientEvent, Events, NodeInfo, SocketInfo,
};
pub use codec::{Codec, Correlation, Decoded, Decoder, EncodeError, LengthPrefixed};
pub use error::{BuildError, CommandError, SendError, failure_of};
pub use handshake::{HandshakeError, HandshakeErrorKind, HandshakeHook, HandshakeIo};
/// keepwire's sans-IO core, re-exported whole so that one runtime crate is the only
/// dependency an application needs.
pub use keepwire_proto as proto;
pub use keepwire_proto::{
    CloseReason, Config, ConfigError, ConnId, Counters, Event, EvictReason, Failure, Keepalive,
    NodeId, NodeState, Outcome, Phase, QuarantineCause, Readmission, Reason, RequestId,
    SelectionRule, Sent, SocketOptions, SubmitError, Target, Unavailable, Violation,
};
pub use layer::{BufferedLayer, KernelAccounted};
pub use runtime::{
    BoxFuture, IoStream, Runtime, Timer, begin_connect, finish_connect, sleep_until,
};
pub use socket::{
    NotApplied, OptionReport, SocketOption, SocketReadback, Unapplied, apply_options,
    prepare_socket, read_back,
};
