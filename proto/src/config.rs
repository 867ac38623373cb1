//! Configuration, its defaults (the ones the Pinot fix and Kafka's KIP-601 name) and its
//! validation.
//!
//! ```
//! use core::time::Duration;
//! use keepwire_proto::Config;
//!
//! let mut config = Config::default();
//! config.write_timeout = Duration::from_millis(500);
//! config.high_watermark = 64 * 1024;
//! config.low_watermark = 32 * 1024;
//! config.validate().unwrap();
//!
//! config.low_watermark = 128 * 1024;
//! let err = config.validate().unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "low_watermark (131072) must not exceed high_watermark (65536)"
//! );
//! ```

use core::time::Duration;

use crate::backoff::Backoff;

/// Everything a [`Pool`](crate::Pool) can be tuned with. Start from [`Config::default`] and
/// change fields; [`Pool::new`](crate::Pool::new) validates the result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Connection setup timeout for the first attempt: TCP connect *plus* handshake must reach
    /// `Ready` within it (KIP-601 `socket.connection.setup.timeout.ms`). Default 10 s.
    pub setup_timeout: Duration,
    /// Cap of the setup timeout as it doubles over consecutive failed attempts. Default 30 s.
    pub setup_timeout_max: Duration,
    /// Jitter ratio of the setup timeout, in `[0, 1)`. Default 0.2 (±20 %).
    pub setup_timeout_jitter: f64,
    /// Wait after the first disconnect before reconnecting (Kafka `reconnect.backoff.ms`).
    /// Default 50 ms.
    pub reconnect_backoff: Duration,
    /// Cap of the reconnect backoff as it doubles. Default 1 s.
    pub reconnect_backoff_max: Duration,
    /// Jitter ratio of the reconnect backoff, in `[0, 1)`; also jitters
    /// [`final_failure_backoff`](Self::final_failure_backoff). Default 0.2.
    pub reconnect_jitter: f64,
    /// Wait after a final connect failure (authentication refused, certificate rejected, a
    /// name that does not exist: [`CloseReason::is_final`](crate::CloseReason::is_final))
    /// before the node connects again, instead of the reconnect backoff, with
    /// [`reconnect_jitter`](Self::reconnect_jitter). Meanwhile submits to the node fail at once
    /// with [`Unavailable::Failed`](crate::Unavailable::Failed). At least
    /// `reconnect_backoff`. Default 30 s.
    pub final_failure_backoff: Duration,
    /// Each frame must be fully accepted by the kernel within this long of being queued, or
    /// the connection is closed (Netty's `WriteTimeoutHandler`). [`Duration::ZERO`] disables.
    /// Default 10 s.
    pub write_timeout: Duration,
    /// A connection becomes unwritable when its pending bytes exceed this. Default 16 MiB.
    pub high_watermark: u64,
    /// An unwritable connection becomes writable again when its pending bytes drop below
    /// this. Default 8 MiB.
    pub low_watermark: u64,
    /// Bytes of bookkeeping counted for every pending frame on top of its length
    /// (Netty counts 96 per entry). Default 96.
    pub per_frame_overhead: u64,
    /// Requests a node may have in flight at once (queued, being written or awaiting a
    /// response). Default 128.
    pub max_in_flight: u32,
    /// Whether connections pass through `Handshaking` (an application handshake such as TLS
    /// or an API-version exchange, reported by the adapter) before `Ready`. Default false.
    pub handshake: bool,
    /// Socket options proto hands to the adapter with every "open a connection" action.
    pub socket: SocketOptions,
    /// Seed of the PRNG behind every jitter draw and selection offset. Same seed and same
    /// inputs give bit-identical outputs, so a trace can be replayed.
    ///
    /// `None` (the default) leaves the choice to the host: the runtime adapters draw one from
    /// OS entropy for every pool, so a fleet of clients never shares its jitter or its first
    /// choice of node; proto alone, which has no entropy source, then uses
    /// [`Config::FALLBACK_SEED`]. [`Pool::seed`](crate::Pool::seed) tells the seed in use.
    pub seed: Option<u64>,
    /// How node selection ranks disconnected nodes whose backoff has elapsed.
    pub selection: SelectionRule,
    /// Consecutive connection failures that quarantine a node. Default 3 (the Pinot broker's
    /// detector).
    ///
    /// A connection failure is a close before `Ready`, the close of a ready connection that held
    /// requests, or a write timeout or protocol violation (a server closing an idle connection
    /// is not failing). The count resets on a response or a readmission, not on `Ready`, so a
    /// server that connects and then stalls every time is still quarantined.
    pub quarantine_after_failures: u32,
    /// Consecutive request timeouts (deadlines passed in flight, with no response from the
    /// node in between) that quarantine a node. Default 5.
    ///
    /// Higher than the failure threshold on purpose: a request timeout may be a slow query,
    /// not a dead server, and the caller's deadline already bounds what it costs. Five in a
    /// row with no answer in between is Envoy's default for consecutive errors. Resets on any
    /// response or a readmission.
    pub quarantine_after_timeouts: u32,
    /// The panic threshold (Envoy): when the share of admitted (enabled) nodes that are not
    /// quarantined falls below it, quarantine is ignored: quarantined nodes are selected and
    /// reconnected on the ordinary backoff like any other, so a sole node, or the last ones,
    /// is never locked out and a one-server client recovers within one backoff of the
    /// server's return. Probes go on as usual. In `[0, 1]`; zero disables panic mode.
    /// Default 0.5.
    pub panic_threshold: f64,
    /// Transparent retry (gRPC's): a request of which not one byte was handed to the adapter,
    /// ended by a connection failure, a failed connect, a setup or write timeout or a
    /// quarantine, is queued once more — on another node chosen by selection, or on a fresh
    /// connection of the same node when it was submitted to that node — within its own
    /// deadline. A refused authentication or certificate is final: its requests are not
    /// retried. Counted, and [`Event::RequestDone::retried`](crate::Event::RequestDone) says
    /// so. (An eviction moves untouched requests to a fresh connection once whatever this
    /// says.) Default false.
    pub retry_unsent: bool,
    /// Delay before the first probe of a quarantined node; doubles after each failed probe,
    /// counted from that failure (the Pinot broker's detector: 5 s). Default 5 s.
    ///
    /// A probe opens a fresh connection and succeeds when it reaches `Ready`: after the
    /// application handshake when [`handshake`](Self::handshake) is on. Only a handshake that
    /// exchanges a message (an API-version request, TLS) lets a probe catch a server that
    /// accepts connections but never answers; without one, such a server is readmitted and
    /// quarantined again after `quarantine_after_timeouts` request timeouts.
    pub probe_backoff: Duration,
    /// Probes tried before giving up on a quarantined node. Default 10.
    pub probe_retries: u32,
    /// What happens when the last probe has failed.
    pub after_last_probe: AfterLastProbe,
    /// Cap on pending outbound bytes across all connections; `None` leaves only the
    /// per-connection watermarks. Default `None`.
    pub memory_budget: Option<u64>,
    /// A `Ready` connection with no request for longer than this is closed (a counted,
    /// non-failure disconnect). [`Duration::ZERO`] disables. Default zero (disabled).
    pub idle_timeout: Duration,
    /// A response that has started arriving must be complete within this, or its connection
    /// is closed with [`Violation::TooSlow`](crate::Violation::TooSlow) (a peer dripping
    /// bytes). The adapter reports what it has buffered with
    /// [`Pool::handle_received`](crate::Pool::handle_received). [`Duration::ZERO`] disables.
    /// Default 10 s.
    pub frame_timeout: Duration,
    /// Heartbeats on idle connections: a ready connection that has held no request for longer
    /// than [`Heartbeat::interval`] gets a ping ([`Action::Heartbeat`](crate::Action::Heartbeat))
    /// that must be answered within [`Heartbeat::timeout`], or the connection closes with
    /// [`CloseReason::HeartbeatTimeout`](crate::CloseReason::HeartbeatTimeout) (a connection
    /// failure, counted for quarantine). This finds a server process that hangs while its
    /// kernel still answers TCP keepalive, before a caller's request pays for it. `None`
    /// (the default) sends none.
    pub heartbeat: Option<Heartbeat>,
}

/// Heartbeats on idle connections ([`Config::heartbeat`]).
///
/// A heartbeat never keeps a connection open past [`Config::idle_timeout`], never counts
/// against [`Config::max_in_flight`] or selection's load, and never produces an
/// [`Event::RequestDone`](crate::Event::RequestDone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// A ready connection idle for longer than this (since it became ready, its last request
    /// ended, or its last heartbeat was answered) gets a ping. Greater than zero.
    pub interval: Duration,
    /// How long a ping may wait for its response before its connection closes. Greater than
    /// zero.
    pub timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            setup_timeout: Duration::from_secs(10),
            setup_timeout_max: Duration::from_secs(30),
            setup_timeout_jitter: 0.2,
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            reconnect_jitter: 0.2,
            final_failure_backoff: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            high_watermark: 16 * 1024 * 1024,
            low_watermark: 8 * 1024 * 1024,
            per_frame_overhead: 96,
            max_in_flight: 128,
            handshake: false,
            socket: SocketOptions::default(),
            seed: None,
            selection: SelectionRule::FewestFailedAttempts,
            quarantine_after_failures: 3,
            quarantine_after_timeouts: 5,
            panic_threshold: 0.5,
            retry_unsent: false,
            probe_backoff: Duration::from_secs(5),
            probe_retries: 10,
            after_last_probe: AfterLastProbe::StayExcluded,
            memory_budget: None,
            idle_timeout: Duration::ZERO,
            frame_timeout: Duration::from_secs(10),
            heartbeat: None,
        }
    }
}

/// The longest duration any setting may take: far beyond any sane timeout, small enough that
/// deadlines never saturate the clock.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

impl Config {
    /// The seed a pool uses when [`Config::seed`] is `None` and no adapter chose one.
    pub const FALLBACK_SEED: u64 = 0x6b65_6570_7769_7265; // "keepwire"

    /// Checks every field and every rule between fields; the error names the field(s) and the
    /// rule broken.
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive("setup_timeout", self.setup_timeout)?;
        positive("setup_timeout_max", self.setup_timeout_max)?;
        at_least(
            "setup_timeout_max",
            self.setup_timeout_max,
            "setup_timeout",
            self.setup_timeout,
        )?;
        jitter("setup_timeout_jitter", self.setup_timeout_jitter)?;
        positive("reconnect_backoff", self.reconnect_backoff)?;
        positive("reconnect_backoff_max", self.reconnect_backoff_max)?;
        at_least(
            "reconnect_backoff_max",
            self.reconnect_backoff_max,
            "reconnect_backoff",
            self.reconnect_backoff,
        )?;
        jitter("reconnect_jitter", self.reconnect_jitter)?;
        positive("final_failure_backoff", self.final_failure_backoff)?;
        at_least(
            "final_failure_backoff",
            self.final_failure_backoff,
            "reconnect_backoff",
            self.reconnect_backoff,
        )?;
        if let Some(h) = &self.heartbeat {
            positive("heartbeat.interval", h.interval)?;
            positive("heartbeat.timeout", h.timeout)?;
        }
        bounded("write_timeout", self.write_timeout)?;
        bounded("idle_timeout", self.idle_timeout)?;
        bounded("frame_timeout", self.frame_timeout)?;
        if self.high_watermark == 0 {
            return Err(ConfigError::Zero {
                field: "high_watermark",
            });
        }
        if self.low_watermark > self.high_watermark {
            return Err(ConfigError::WatermarksInverted {
                low: self.low_watermark,
                high: self.high_watermark,
            });
        }
        if self.max_in_flight == 0 {
            return Err(ConfigError::Zero {
                field: "max_in_flight",
            });
        }
        if self.quarantine_after_failures == 0 {
            return Err(ConfigError::Zero {
                field: "quarantine_after_failures",
            });
        }
        if self.quarantine_after_timeouts == 0 {
            return Err(ConfigError::Zero {
                field: "quarantine_after_timeouts",
            });
        }
        if !(0.0..=1.0).contains(&self.panic_threshold) {
            return Err(ConfigError::RatioOutOfRange {
                field: "panic_threshold",
                value: self.panic_threshold,
            });
        }
        positive("probe_backoff", self.probe_backoff)?;
        if self.memory_budget == Some(0) {
            return Err(ConfigError::Zero {
                field: "memory_budget",
            });
        }
        self.socket.validate()
    }

    pub(crate) fn setup_backoff(&self) -> Backoff {
        Backoff {
            base: self.setup_timeout,
            max: self.setup_timeout_max,
            jitter: self.setup_timeout_jitter,
        }
    }

    pub(crate) fn reconnect_backoff(&self) -> Backoff {
        Backoff {
            base: self.reconnect_backoff,
            max: self.reconnect_backoff_max,
            jitter: self.reconnect_jitter,
        }
    }

    /// The wait after a final connect failure: `final_failure_backoff`, jittered like the
    /// reconnect backoff.
    pub(crate) fn final_backoff(&self) -> Backoff {
        Backoff {
            base: self.final_failure_backoff,
            max: MAX_DURATION,
            jitter: self.reconnect_jitter,
        }
    }

    /// The delay before probe `n` (0 for the first): `probe_backoff · 2^n`, no jitter.
    pub(crate) fn probe_delay(&self, n: u32) -> Duration {
        Backoff {
            base: self.probe_backoff,
            max: MAX_DURATION,
            jitter: 0.0,
        }
        .delay(n, crate::rng::Unit::ZERO)
    }
}

/// Socket options the adapter applies (through socket2) to every connection it opens, and
/// reports back when the platform could not apply one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketOptions {
    /// `TCP_NODELAY`. Default true.
    pub nodelay: bool,
    /// TCP keepalive; `None` leaves it off. Default idle 10 s, interval 5 s, 3 probes, so an
    /// idle dead peer is found in about 25 s instead of the kernel's 2 h 11 min.
    pub keepalive: Option<Keepalive>,
    /// `TCP_USER_TIMEOUT` (Linux): how long written data may stay unacknowledged before the
    /// kernel drops the connection. `None` leaves the kernel default. Default 10 s.
    pub user_timeout: Option<Duration>,
    /// `SO_SNDBUF` in bytes; `None` leaves the kernel default.
    pub send_buffer_size: Option<u32>,
    /// `SO_RCVBUF` in bytes; `None` leaves the kernel default.
    pub recv_buffer_size: Option<u32>,
    /// `TCP_QUICKACK` (Linux), set at connect and again after every read that returned bytes
    /// (the kernel leaves quick-ACK mode by itself): each response is acknowledged at once
    /// rather than after the delayed-ACK timer (40 ms at least). For servers that leave
    /// Nagle's algorithm on (Unbound, for one): once every request of a burst is written and
    /// the client has nothing left to send, their later responses wait for that ACK. It costs a
    /// `setsockopt` per read, and the server an ACK segment per read; in a pipeline kept full
    /// the client's own requests carry its ACKs, and it can lose throughput (BENCHMARKS.md,
    /// the DNS benchmark). Default false.
    pub quickack: bool,
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            nodelay: true,
            keepalive: Some(Keepalive::default()),
            user_timeout: Some(Duration::from_secs(10)),
            send_buffer_size: None,
            recv_buffer_size: None,
            quickack: false,
        }
    }
}

impl SocketOptions {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(k) = &self.keepalive {
            whole_seconds("socket.keepalive.idle", k.idle)?;
            whole_seconds("socket.keepalive.interval", k.interval)?;
            if k.retries == 0 {
                return Err(ConfigError::Zero {
                    field: "socket.keepalive.retries",
                });
            }
        }
        if let Some(t) = self.user_timeout {
            positive("socket.user_timeout", t)?;
            if t.as_millis() > u128::from(u32::MAX) {
                return Err(ConfigError::TooLong {
                    field: "socket.user_timeout",
                    value: t,
                });
            }
        }
        if self.send_buffer_size == Some(0) {
            return Err(ConfigError::Zero {
                field: "socket.send_buffer_size",
            });
        }
        if self.recv_buffer_size == Some(0) {
            return Err(ConfigError::Zero {
                field: "socket.recv_buffer_size",
            });
        }
        Ok(())
    }
}

/// TCP keepalive settings (`TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe; whole seconds, at least 1.
    pub idle: Duration,
    /// Time between probes; whole seconds, at least 1.
    pub interval: Duration,
    /// Unanswered probes before the kernel drops the connection.
    pub retries: u32,
}

impl Default for Keepalive {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(10),
            interval: Duration::from_secs(5),
            retries: 3,
        }
    }
}

/// How selection ranks disconnected nodes whose reconnect backoff has elapsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SelectionRule {
    /// KIP-601's proposal text: the fewest failed connection attempts; ties go to the least
    /// recently attempted.
    #[default]
    FewestFailedAttempts,
    /// Kafka's shipped rule: the least recently attempted.
    LeastRecentlyAttempted,
}

/// What happens to a quarantined node once its last probe has failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AfterLastProbe {
    /// Stay excluded until the application enables it again or its epoch changes.
    #[default]
    StayExcluded,
    /// Readmit it anyway (the Pinot broker's detector does this).
    Readmit,
}

/// A configuration value that makes no sense. Each variant names the field(s) and the rule.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration that must be positive is zero.
    #[error("{field} must be greater than zero")]
    ZeroDuration {
        /// The field.
        field: &'static str,
    },
    /// A count or size that must be positive is zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// A duration is longer than keepwire accepts (a year, or `u32::MAX` ms for socket
    /// options).
    #[error("{field} ({value:?}) is too long")]
    TooLong {
        /// The field.
        field: &'static str,
        /// The value given.
        value: Duration,
    },
    /// A duration is below one it must be at least (a maximum below its base).
    #[error("{max_field} ({max:?}) must be at least {base_field} ({base:?})")]
    MaxBelowBase {
        /// The field that is too short (a maximum).
        max_field: &'static str,
        /// The maximum given.
        max: Duration,
        /// The field it must be at least (a base).
        base_field: &'static str,
        /// The base given.
        base: Duration,
    },
    /// A jitter ratio is outside `[0, 1)` or not a number.
    #[error("{field} ({value}) must be in [0, 1)")]
    JitterOutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// A ratio is outside `[0, 1]` or not a number.
    #[error("{field} ({value}) must be in [0, 1]")]
    RatioOutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// The low watermark is above the high watermark.
    #[error("low_watermark ({low}) must not exceed high_watermark ({high})")]
    WatermarksInverted {
        /// The low watermark given.
        low: u64,
        /// The high watermark given.
        high: u64,
    },
    /// A keepalive time is not a whole number of seconds of at least one (the kernel's unit).
    #[error("{field} ({value:?}) must be a whole number of seconds, at least 1")]
    NotWholeSeconds {
        /// The field.
        field: &'static str,
        /// The value given.
        value: Duration,
    },
}

fn bounded(field: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value > MAX_DURATION {
        return Err(ConfigError::TooLong { field, value });
    }
    Ok(())
}

fn positive(field: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::ZeroDuration { field });
    }
    bounded(field, value)
}

fn at_least(
    max_field: &'static str,
    max: Duration,
    base_field: &'static str,
    base: Duration,
) -> Result<(), ConfigError> {
    if max < base {
        return Err(ConfigError::MaxBelowBase {
            max_field,
            max,
            base_field,
            base,
        });
    }
    Ok(())
}

fn jitter(field: &'static str, value: f64) -> Result<(), ConfigError> {
    if !(0.0..1.0).contains(&value) {
        return Err(ConfigError::JitterOutOfRange { field, value });
    }
    Ok(())
}

fn whole_seconds(field: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value.subsec_nanos() != 0
        || value.as_secs() == 0
        || value.as_secs() > u64::from(i32::MAX as u32)
    {
        return Err(ConfigError::NotWholeSeconds { field, value });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn defaults_are_valid_and_match_the_design() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.setup_timeout, Duration::from_secs(10));
        assert_eq!(c.setup_timeout_max, Duration::from_secs(30));
        assert_eq!(c.reconnect_backoff, Duration::from_millis(50));
        assert_eq!(c.reconnect_backoff_max, Duration::from_secs(1));
        assert_eq!(c.write_timeout, Duration::from_secs(10));
        assert_eq!((c.high_watermark, c.low_watermark), (16 << 20, 8 << 20));
        assert_eq!(c.socket.user_timeout, Some(Duration::from_secs(10)));
        assert_eq!(c.probe_backoff, Duration::from_secs(5));
        assert_eq!(c.probe_retries, 10);
        assert_eq!(
            (c.quarantine_after_failures, c.quarantine_after_timeouts),
            (3, 5)
        );
        assert_eq!(c.panic_threshold, 0.5);
        assert!(!c.retry_unsent);
        assert_eq!(c.frame_timeout, Duration::from_secs(10));
        assert_eq!(c.seed, None);
        assert_eq!(c.final_failure_backoff, Duration::from_secs(30));
        assert_eq!(c.heartbeat, None);
    }

    fn rejects(change: impl FnOnce(&mut Config)) -> ConfigError {
        let mut c = Config::default();
        change(&mut c);
        c.validate().unwrap_err()
    }

    #[test]
    fn every_rule_is_checked_and_named() {
        type Case = (fn(&mut Config), &'static str);
        let cases: [Case; 25] = [
            (
                |c| c.setup_timeout = Duration::ZERO,
                "setup_timeout must be greater than zero",
            ),
            (
                |c| c.setup_timeout_max = Duration::from_secs(5),
                "setup_timeout_max (5s) must be at least setup_timeout (10s)",
            ),
            (
                |c| c.setup_timeout_jitter = 1.0,
                "setup_timeout_jitter (1) must be in [0, 1)",
            ),
            (
                |c| c.reconnect_jitter = -0.1,
                "reconnect_jitter (-0.1) must be in [0, 1)",
            ),
            (
                |c| c.reconnect_jitter = f64::NAN,
                "reconnect_jitter (NaN) must be in [0, 1)",
            ),
            (
                |c| c.reconnect_backoff = Duration::ZERO,
                "reconnect_backoff must be greater than zero",
            ),
            (
                |c| c.reconnect_backoff_max = Duration::from_millis(10),
                "reconnect_backoff_max (10ms) must be at least reconnect_backoff (50ms)",
            ),
            (
                |c| c.low_watermark = c.high_watermark + 1,
                "low_watermark (16777217) must not exceed high_watermark (16777216)",
            ),
            (
                |c| c.high_watermark = 0,
                "high_watermark must be greater than zero",
            ),
            (
                |c| c.max_in_flight = 0,
                "max_in_flight must be greater than zero",
            ),
            (
                |c| c.quarantine_after_failures = 0,
                "quarantine_after_failures must be greater than zero",
            ),
            (
                |c| c.quarantine_after_timeouts = 0,
                "quarantine_after_timeouts must be greater than zero",
            ),
            (
                |c| c.panic_threshold = 1.5,
                "panic_threshold (1.5) must be in [0, 1]",
            ),
            (
                |c| c.panic_threshold = f64::NAN,
                "panic_threshold (NaN) must be in [0, 1]",
            ),
            (
                |c| c.frame_timeout = MAX_DURATION + Duration::from_secs(1),
                "frame_timeout (31536001s) is too long",
            ),
            (
                |c| c.probe_backoff = Duration::ZERO,
                "probe_backoff must be greater than zero",
            ),
            (
                |c| c.memory_budget = Some(0),
                "memory_budget must be greater than zero",
            ),
            (
                |c| {
                    c.socket.keepalive = Some(Keepalive {
                        idle: Duration::from_millis(1500),
                        ..Keepalive::default()
                    })
                },
                "socket.keepalive.idle (1.5s) must be a whole number of seconds, at least 1",
            ),
            (
                |c| c.socket.user_timeout = Some(Duration::ZERO),
                "socket.user_timeout must be greater than zero",
            ),
            (
                |c| c.write_timeout = MAX_DURATION + Duration::from_secs(1),
                "write_timeout (31536001s) is too long",
            ),
            (
                |c| c.final_failure_backoff = Duration::ZERO,
                "final_failure_backoff must be greater than zero",
            ),
            (
                |c| c.final_failure_backoff = Duration::from_millis(10),
                "final_failure_backoff (10ms) must be at least reconnect_backoff (50ms)",
            ),
            (
                |c| c.final_failure_backoff = MAX_DURATION + Duration::from_secs(1),
                "final_failure_backoff (31536001s) is too long",
            ),
            (
                |c| {
                    c.heartbeat = Some(Heartbeat {
                        interval: Duration::ZERO,
                        timeout: Duration::from_secs(1),
                    })
                },
                "heartbeat.interval must be greater than zero",
            ),
            (
                |c| {
                    c.heartbeat = Some(Heartbeat {
                        interval: Duration::from_secs(1),
                        timeout: Duration::ZERO,
                    })
                },
                "heartbeat.timeout must be greater than zero",
            ),
        ];
        for (change, message) in cases {
            assert_eq!(rejects(change).to_string(), message);
        }
    }

    #[test]
    fn zero_write_and_idle_timeouts_mean_disabled() {
        let mut c = Config::default();
        c.write_timeout = Duration::ZERO;
        c.idle_timeout = Duration::ZERO;
        c.validate().unwrap();
    }

    #[test]
    fn the_longest_duration_is_accepted() {
        let mut c = Config::default();
        c.write_timeout = MAX_DURATION;
        c.idle_timeout = MAX_DURATION;
        c.frame_timeout = MAX_DURATION;
        c.setup_timeout_max = MAX_DURATION;
        c.validate().unwrap();
    }

    #[test]
    fn socket_limits_are_the_kernels_and_inclusive() {
        // TCP_USER_TIMEOUT takes u32 milliseconds; TCP_KEEPIDLE and TCP_KEEPINTVL an int of
        // seconds. The largest value each takes is accepted, one unit more is refused.
        let longest_user_timeout = Duration::from_millis(u64::from(u32::MAX));
        let mut c = Config::default();
        c.socket.user_timeout = Some(longest_user_timeout);
        c.validate().unwrap();
        let err = rejects(|c| {
            c.socket.user_timeout = Some(Duration::from_millis(u64::from(u32::MAX) + 1));
        });
        assert_eq!(
            err.to_string(),
            "socket.user_timeout (4294967.296s) is too long"
        );

        let longest_keepalive = Duration::from_secs(i32::MAX as u64);
        c.socket.keepalive = Some(Keepalive {
            idle: longest_keepalive,
            interval: longest_keepalive,
            ..Keepalive::default()
        });
        c.validate().unwrap();
        let too_long = longest_keepalive + Duration::from_secs(1);
        let idle = rejects(|c| {
            c.socket.keepalive = Some(Keepalive {
                idle: too_long,
                ..Keepalive::default()
            });
        });
        let interval = rejects(|c| {
            c.socket.keepalive = Some(Keepalive {
                interval: too_long,
                ..Keepalive::default()
            });
        });
        assert_eq!(
            idle.to_string(),
            "socket.keepalive.idle (2147483648s) must be a whole number of seconds, at least 1"
        );
        assert_eq!(
            interval.to_string(),
            "socket.keepalive.interval (2147483648s) must be a whole number of seconds, at least 1"
        );
    }

    #[test]
    fn probe_delays_double_from_the_base() {
        let c = Config::default();
        let got: [u64; 4] = core::array::from_fn(|n| c.probe_delay(n as u32).as_secs());
        assert_eq!(got, [5, 10, 20, 40]);
    }
}
