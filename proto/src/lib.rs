//! # keepwire-proto
//!
//! The sans-IO core of keepwire: one deterministic state machine, [`Pool`], that keeps a
//! client's connections to its servers honest. It never touches a socket, a clock or a thread:
//! it is fed time and I/O events and answers with [`Action`]s for the adapter, [`Event`]s for
//! the application, and the next instant it needs to be woken ([`Pool::poll_timeout`]).
//!
//! See [`Pool`] for the run loop.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
// Tests and the fuzzing interpreter (its `Arbitrary` derive) need std; the library does not.
#[cfg(any(test, feature = "fuzzing"))]
extern crate std;

mod backoff;
mod config;
mod counters;
mod display;
mod endpoint;
mod event;
mod fifo;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod hint;
mod ids;
mod node;
mod outbound;
mod pool;
mod requests;
mod rng;
mod select;
mod time;
mod timers;

#[cfg(test)]
mod tests;

pub use config::{
    AfterLastProbe, Config, ConfigError, Heartbeat, Keepalive, MAX_DURATION, SelectionRule,
    SocketOptions,
};
pub use counters::Counters;
pub use endpoint::{Endpoint, EndpointError};
pub use event::{
    Action, CloseReason, Event, EvictReason, Failure, HandleError, HandshakeFailure, NodeState,
    Outcome, Phase, QuarantineCause, Readmission, Reason, Sent, SubmitError, Unavailable,
    Violation,
};
pub use ids::{ConnId, NodeId, RequestId};
pub use outbound::HandOut;
pub use pool::{Pool, Target};
pub use select::Selection;
pub use time::Instant;
