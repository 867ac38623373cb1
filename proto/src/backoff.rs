//! The exponential backoff used for both the connection setup timeout and the reconnect
//! backoff (Kafka's `ExponentialBackoff`, KIP-601):
//!
//! ```text
//! v(n) = min(max, base · 2^min(n, log2(max/base)) · f)      f uniform in [1 - j, 1 + j)
//! v(n) = max                                                 when base >= max (no jitter)
//! ```
//!
//! `base · 2^min(n, log2(max/base))` is `min(base · 2^n, max)`, which is how it is computed
//! here: in integer nanoseconds, without `log2`, so it is exact and `no_std`.

use core::time::Duration;

use crate::rng::Unit;

/// An exponential backoff: a base doubling on each step up to a maximum, with jitter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Backoff {
    /// The value for step 0 before jitter.
    pub(crate) base: Duration,
    /// The cap; also the exact value when `base >= max`.
    pub(crate) max: Duration,
    /// The jitter ratio `j` in `[0, 1)`: each value is scaled by a factor in `[1 - j, 1 + j)`.
    pub(crate) jitter: f64,
}

impl Backoff {
    /// The value for step `n` (0 for the first), with `draw` as the jitter draw.
    ///
    /// `draw` comes from the pool's seeded [`Rng`](crate::rng::Rng); tests pass
    /// [`Unit::ZERO`] or `Unit::MAX` to pin the jitter at its extremes.
    pub(crate) fn delay(&self, n: u32, draw: Unit) -> Duration {
        if self.base >= self.max {
            return self.max;
        }
        let base = self.base.as_nanos();
        let max = self.max.as_nanos();
        let term = if n >= 127 {
            max
        } else {
            base.saturating_mul(1u128 << n).min(max)
        };
        if self.jitter == 0.0 {
            return Duration::from_nanos(u64::try_from(term).unwrap_or(u64::MAX));
        }
        // `term · f` with f in [1 - j, 1 + j): the low end plus a share of the span. Rounding
        // can carry the top draw onto `term · (1 + j)` itself; the range is half-open, so that
        // lands one nanosecond below it instead.
        let low = term as f64 * (1.0 - self.jitter);
        let high = term as f64 * (1.0 + self.jitter);
        let jittered = low + 2.0 * self.jitter * term as f64 * draw.get();
        let mut nanos = libm_floor(jittered);
        if nanos as f64 >= high {
            nanos = libm_ceil(high) - 1;
        }
        let nanos = nanos.min(max);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// `x.floor() as u128` for the non-negative values here (`f64::floor` needs std).
fn libm_floor(x: f64) -> u128 {
    x as u128 // `as` truncates toward zero, which is floor for x >= 0
}

/// `x.ceil() as u128` for the non-negative values here.
fn libm_ceil(x: f64) -> u128 {
    let floor = libm_floor(x);
    if (floor as f64) < x { floor + 1 } else { floor }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn reconnect() -> Backoff {
        Backoff {
            base: ms(50),
            max: ms(1000),
            jitter: 0.2,
        }
    }

    #[test]
    fn reconnect_sequence_without_jitter_draw() {
        let seq: [u64; 7] = [50, 100, 200, 400, 800, 1000, 1000];
        for (n, want) in seq.iter().enumerate() {
            assert_eq!(
                reconnect().delay(n as u32, Unit::HALF),
                ms(*want),
                "step {n}"
            );
        }
    }

    #[test]
    fn setup_timeout_sequence_without_jitter_draw() {
        let b = Backoff {
            base: ms(10_000),
            max: ms(30_000),
            jitter: 0.2,
        };
        let got: [Duration; 4] = core::array::from_fn(|n| b.delay(n as u32, Unit::HALF));
        assert_eq!(got, [ms(10_000), ms(20_000), ms(30_000), ms(30_000)]);
    }

    #[test]
    fn jitter_extremes() {
        let b = reconnect();
        assert_eq!(b.delay(0, Unit::ZERO), ms(40));
        // The range is [0.8, 1.2): the top draw stays strictly below 1.2 · base.
        let high = b.delay(0, Unit::MAX);
        assert!(high < ms(60) && high > ms(59), "{high:?}");
        // At the cap, a high draw cannot exceed max, a low one goes down to 0.8 max.
        assert_eq!(b.delay(9, Unit::MAX), ms(1000));
        assert_eq!(b.delay(9, Unit::ZERO), ms(800));
    }

    #[test]
    fn the_jitter_factor_stays_strictly_below_one_plus_jitter() {
        // Bases whose 1.2 multiple is exact in f64, where rounding used to reach it.
        for base in [50, 100, 250, 1000, 10_000] {
            let b = Backoff {
                base: ms(base),
                max: ms(1_000_000),
                jitter: 0.2,
            };
            let top = Duration::from_nanos(base * 1_200_000);
            for step in 0..4 {
                let d = b.delay(step, Unit::MAX);
                assert!(d < top * (1 << step), "base {base} step {step}: {d:?}");
            }
        }
        let b = Backoff {
            base: Duration::from_nanos(10),
            max: Duration::from_secs(1),
            jitter: 0.5,
        };
        assert_eq!(b.delay(0, Unit::MAX), Duration::from_nanos(14));
    }

    #[test]
    fn base_at_or_above_max_is_exactly_max() {
        let b = Backoff {
            base: ms(2000),
            max: ms(1000),
            jitter: 0.2,
        };
        assert_eq!(b.delay(0, Unit::ZERO), ms(1000));
        assert_eq!(b.delay(5, Unit::MAX), ms(1000));
        let b = Backoff {
            base: ms(1000),
            max: ms(1000),
            jitter: 0.2,
        };
        assert_eq!(b.delay(0, Unit::ZERO), ms(1000));
    }

    #[test]
    fn floor_and_ceil_round_to_the_whole_nanoseconds_around_a_value() {
        // `delay` needs `libm_ceil` only when rounding carried the top draw onto `high`,
        // which (below 2^52 ns) happens only for a whole `high`; these pin the other cases.
        for (x, floor, ceil) in [(0.0, 0, 0), (2.5, 2, 3), (3.0, 3, 3), (7.000_001, 7, 8)] {
            assert_eq!(libm_floor(x), floor, "floor({x})");
            assert_eq!(libm_ceil(x), ceil, "ceil({x})");
        }
    }

    #[test]
    fn huge_step_counts_do_not_overflow() {
        assert_eq!(reconnect().delay(u32::MAX, Unit::HALF), ms(1000));
        let b = Backoff {
            base: Duration::from_nanos(1),
            max: Duration::MAX,
            jitter: 0.0,
        };
        assert_eq!(b.delay(200, Unit::HALF), Duration::from_nanos(u64::MAX));
    }
}
