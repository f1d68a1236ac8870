//! Options of an acquisition, already validated and with defaults applied.

use crate::store::ValueFormat;
use std::time::Duration;

/// Keep-alive settings of a held lock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoExtend {
    /// How often the lease is extended (default: a third of the ttl).
    pub every: Duration,
    /// After this long the lock is given up instead of extended (default: never).
    pub max_hold: Option<Duration>,
}

/// Permits of a counting semaphore, asked for instead of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitSpec {
    /// How many permits, from 1 to `limit`.
    pub count: u32,
    /// How many permits the semaphore has.
    pub limit: u32,
}

/// Everything the acquire loop needs.
#[derive(Debug, Clone)]
pub struct AcquireSpec {
    /// Lock name.
    pub key: String,
    /// Owner token stored as the lock's value.
    pub owner: String,
    /// Lease length in ms.
    pub ttl_ms: u64,
    /// Total time to wait for the lock (`None`: forever).
    pub wait: Option<Duration>,
    /// Maximum number of store attempts (`None`: unlimited). redislock's `retries + 1`.
    pub max_attempts: Option<u64>,
    /// Base delay between polls.
    pub retry_delay: Duration,
    /// Relative jitter of the delay, 0.0..=1.0.
    pub jitter: f64,
    /// Payload stored with the lock.
    pub data: Option<Vec<u8>>,
    /// Background extension; `None` for a plain lease.
    pub auto_extend: Option<AutoExtend>,
    /// Report the lease's expiry as a loss even without auto-extension.
    pub watch_expiry: bool,
    /// Report every successful heartbeat extension to the session's event sink (someone
    /// traces extensions in JavaScript); off, a heartbeat reports nothing.
    pub report_extensions: bool,
    /// How the lock's value is written: with a fencing token (the default), the owner alone
    /// (the redislock wire format), or without drawing a token (`fencing: false`).
    pub format: ValueFormat,
    /// Permits of the semaphore `key` instead of the lock `key`.
    pub permits: Option<PermitSpec>,
}

impl AcquireSpec {
    /// The delay before the next poll: `retry_delay` scaled by a random factor in
    /// `[1 - jitter, 1 + jitter]`, never below 1 ms.
    pub fn next_delay(&self) -> Duration {
        let base_ms = self.retry_delay.as_secs_f64() * 1000.0;
        let factor = 1.0 + self.jitter * (fastrand::f64() * 2.0 - 1.0);
        crate::runtime::clock::from_ms(base_ms * factor).max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(delay_ms: u64, jitter: f64) -> AcquireSpec {
        AcquireSpec {
            key: "k".into(),
            owner: "o".into(),
            ttl_ms: 1000,
            wait: None,
            max_attempts: None,
            retry_delay: Duration::from_millis(delay_ms),
            jitter,
            data: None,
            auto_extend: None,
            watch_expiry: false,
            report_extensions: false,
            format: ValueFormat::Fenced,
            permits: None,
        }
    }

    #[test]
    fn jittered_delays_stay_within_the_jitter_band() {
        let s = spec(100, 0.5);
        for _ in 0..1000 {
            let d = s.next_delay().as_secs_f64();
            assert!((0.05..=0.15).contains(&d), "{d}");
        }
    }

    #[test]
    fn a_zero_jitter_gives_the_exact_delay() {
        assert_eq!(spec(50, 0.0).next_delay(), Duration::from_millis(50));
    }
}
