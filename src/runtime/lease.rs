//! Lease arithmetic shared by the engine and the stores that reckon a lease themselves
//! (Redlock's validity): one clock, one margin, defined once.

use crate::limits;
use crate::runtime::clock;
use std::time::Duration;
use tokio::time::Instant;

/// The local deadline of a lease of `ttl_ms` whose request was sent at `sent`: `sent + ttl`
/// less `ttl × 1 % + 2 ms` (at most half the lease), which covers drift between the holder's
/// clock and the store's and the time a loss takes to reach the caller.
pub fn lease_end(sent: Instant, ttl_ms: u64) -> Instant {
    let ttl = Duration::from_millis(ttl_ms);
    let margin = Duration::from_millis(limits::LEASE_MARGIN_MS)
        .saturating_add(ttl.mul_f64(limits::LEASE_MARGIN_FRACTION))
        .min(ttl / 2);
    clock::after(sent, ttl - margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_deadline_keeps_a_margin_of_one_percent_and_two_ms_before_the_ttl() {
        let sent = Instant::now();
        assert_eq!(lease_end(sent, 10_000), sent + Duration::from_millis(9_898));
        assert_eq!(lease_end(sent, 1_000), sent + Duration::from_millis(988));
        // Never more than half the lease.
        assert_eq!(lease_end(sent, 2), sent + Duration::from_millis(1));
    }
}
