//! A deterministic simulator of kernels, links and servers around the real
//! [`keepwire_proto::Pool`], on a virtual clock.
//!
//! The [`World`] drives the pool through exactly the calls an adapter makes (`poll_action`,
//! `poll_transmit` + `handle_written`, `handle_writable`, `handle_response`, `handle_closed`,
//! `poll_timeout` + `handle_timeout`) against:
//!
//! - simulated kernels ([`kernel`]): per connection a TCP model with the Linux rules that decide
//!   how long a dead or stalled connection looks alive: send and receive buffers,
//!   retransmission with the RTO doubling from 200 ms to 120 s and the `tcp_retries2` give-up,
//!   the zero-window persist timer, keepalive, `TCP_USER_TIMEOUT`, SYN retries, RST and FIN;
//! - servers with [`Fault`]s: a process that hangs while its kernel acknowledges, a restart
//!   with or without a FIN, a path that drops everything for a while, a host that never
//!   answers SYNs, a slow server;
//! - open-loop load ([`Stream`]): requests at a rate per node, each with a deadline, whatever
//!   happened to the earlier ones, like a query router's traffic.
//!
//! Time moves from one event to the next (the pool's `poll_timeout`, a kernel timer, an
//! arrival, a scripted fault), so a 37-minute replay of a million queries takes well under a
//! second in release mode. [`stories`] replays keepwire's three incident stories before and
//! after; [`chaos`] checks its invariants under random fault schedules.

mod arena;
pub mod chaos;
pub mod kernel;
mod report;
mod server;
pub mod stories;
pub mod svg;
mod world;

pub use arena::{Class, MAX_FRAME};
pub use kernel::Kernel;
pub use report::{Lane, Tally, Timeline};
pub use server::{Fault, Restart, Server};
pub use world::{Act, Checks, Record, Stream, World};

use std::time::Duration;

use keepwire_proto::Instant;

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The instant `d` after the start.
pub fn at(d: Duration) -> Instant {
    Instant::ZERO + d
}
