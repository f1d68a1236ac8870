//! Time arithmetic that cannot panic. Durations come from JavaScript numbers, and an
//! `Instant + Duration` that overflows panics: one huge option must never abort the process
//! or stop the heartbeat task that serves every lock.

use std::time::Duration;
use tokio::time::Instant;

/// Far enough to mean "never" for a lease or a wait, small enough to add to any `Instant`.
pub const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `at + d`, or `at + NEVER` when that would overflow or `d` is longer than `NEVER`.
pub fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d.min(NEVER))
        .or_else(|| at.checked_add(NEVER))
        .unwrap_or(at)
}

/// A duration of `ms` milliseconds from a JavaScript number: negative and NaN give zero,
/// anything beyond [`NEVER`] (including infinity) gives `NEVER`.
pub fn from_ms(ms: f64) -> Duration {
    if ms.is_nan() || ms <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .unwrap_or(NEVER)
        .min(NEVER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_nan_and_negative_numbers_become_valid_durations() {
        assert_eq!(from_ms(f64::NAN), Duration::ZERO);
        assert_eq!(from_ms(-5.0), Duration::ZERO);
        assert_eq!(from_ms(1e300), NEVER);
        assert_eq!(from_ms(f64::INFINITY), NEVER);
        assert_eq!(from_ms(1e22), NEVER);
        assert_eq!(from_ms(1500.0), Duration::from_millis(1500));
    }

    #[test]
    fn adding_any_duration_to_now_never_panics() {
        let now = Instant::now();
        assert!(after(now, Duration::MAX) > now);
        assert_eq!(
            after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }
}
