//! proto's own monotonic clock value.
//!
//! proto never reads a clock. Every input carries a `now` the caller made, so a simulated
//! clock, a fuzzer or a `no_std` host can make any time it likes. Adapters convert from their
//! runtime's clock by measuring from an origin they pick (see [`Instant::from_nanos`]).

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point on a monotonic clock: nanoseconds from an arbitrary origin chosen by the caller.
///
/// Arithmetic saturates instead of overflowing or panicking: `Instant::MAX + d` is
/// `Instant::MAX`, and `a - b` is [`Duration::ZERO`] when `b` is later than `a`.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl core::fmt::Debug for Instant {
    /// Seconds since the origin, to the nanosecond: `3.448630560s`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

impl Instant {
    /// The origin of the clock.
    pub const ZERO: Self = Self(0);
    /// The latest representable instant (about 584 years after the origin).
    pub const MAX: Self = Self(u64::MAX);

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// The instant `millis` milliseconds after the origin (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis.saturating_mul(1_000_000))
    }

    /// The instant `secs` seconds after the origin (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(nanos))
    }

    /// The first instant at which more than `limit` has elapsed since `self`.
    ///
    /// keepwire's timeouts fire when the elapsed time is *strictly greater* than the limit, so a
    /// 10 s timeout started at `t` fires at `t + 10 s + 1 ns`.
    pub fn expiry_after(self, limit: Duration) -> Self {
        self.saturating_add(limit)
            .saturating_add(Duration::from_nanos(1))
    }

    /// [`Instant::expiry_after`] a limit already in nanoseconds (its `Duration` converted as
    /// `Instant + Duration` does, saturating): the same instant, without converting again.
    pub(crate) fn expiry_after_nanos(self, limit: u64) -> Self {
        Self(self.0.saturating_add(limit).saturating_add(1))
    }
}

impl Add<Duration> for Instant {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        self.saturating_add(d)
    }
}

impl Sub<Duration> for Instant {
    type Output = Self;
    /// `self - d`, saturating at [`Instant::ZERO`].
    fn sub(self, d: Duration) -> Self {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Self(self.0.saturating_sub(nanos))
    }
}

impl Sub for Instant {
    type Output = Duration;
    fn sub(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// The pool's view of time: the latest `now` seen, so that a `now` earlier than one already
/// seen is clamped instead of moving time backwards.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock {
    latest: Instant,
}

impl Clock {
    pub(crate) fn new(start: Instant) -> Self {
        Self { latest: start }
    }

    /// Records `now` and returns the time to use: `now`, or the latest earlier input if `now`
    /// went backwards.
    pub(crate) fn advance(&mut self, now: Instant) -> Instant {
        if now > self.latest {
            self.latest = now;
        }
        self.latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Instant::from_secs(1), Duration::ZERO);
        assert_eq!(
            Instant::from_secs(3) - Instant::from_secs(1),
            Duration::from_secs(2)
        );
        assert_eq!(Instant::MAX + Duration::MAX, Instant::MAX);
        assert_eq!(
            Instant::from_secs(3) - Duration::from_secs(1),
            Instant::from_secs(2)
        );
        assert_eq!(
            Instant::from_secs(1) - Duration::from_secs(2),
            Instant::ZERO
        );
        assert_eq!(Instant::MAX - Duration::MAX, Instant::ZERO);
    }

    #[test]
    fn debug_shows_seconds_to_the_nanosecond() {
        let shown = |i: Instant| alloc::format!("{i:?}");
        assert_eq!(shown(Instant::from_nanos(3_448_630_560)), "3.448630560s");
        assert_eq!(shown(Instant::ZERO), "0.000000000s");
        assert_eq!(shown(Instant::from_millis(12_005)), "12.005000000s");
    }

    #[test]
    fn expiry_is_one_nanosecond_past_the_limit() {
        let t = Instant::from_secs(5);
        assert_eq!(
            t.expiry_after(Duration::from_secs(10)).as_nanos(),
            15_000_000_001
        );
    }

    #[test]
    fn clock_clamps_time_going_backwards() {
        let mut clock = Clock::new(Instant::from_secs(10));
        assert_eq!(clock.advance(Instant::from_secs(5)), Instant::from_secs(10));
        assert_eq!(
            clock.advance(Instant::from_secs(12)),
            Instant::from_secs(12)
        );
        assert_eq!(
            clock.advance(Instant::from_secs(11)),
            Instant::from_secs(12)
        );
    }
}
