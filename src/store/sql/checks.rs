//! The checks every SQL dialect makes before any I/O: a name, an owner or a lease its
//! columns cannot hold is refused as invalid input, never truncated by a lenient server (two
//! names cut to one would share one lock).

use super::Dialect;
use crate::store::{Handoff, PermitRequest, StoreError, StoreResult};

/// Longest lock name accepted, in bytes (the width of the `name` column).
pub const MAX_KEY_BYTES: usize = crate::limits::MAX_KEY_BYTES;

/// Longest owner token accepted, in bytes (the width of the `owner` column).
pub const MAX_OWNER_BYTES: usize = 255;

/// Longest lease accepted, in milliseconds (100 years): `ttl * 1000` microseconds stays far
/// from `u64` overflow, and an expiry inside every dialect's time range (MySQL's `DATETIME`
/// ends in the year 9999).
pub const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// Refuses `value` (a `what`) when it is longer than `max` bytes.
fn check_len<D: Dialect>(what: &str, value: &str, max: usize) -> StoreResult<()> {
    if value.len() > max {
        return Err(StoreError::invalid(format!(
            "{}: {what} is {} bytes, at most {max} are supported",
            D::NAME,
            value.len()
        )));
    }
    Ok(())
}

/// Refuses a lock name longer than [`MAX_KEY_BYTES`].
pub fn check_key<D: Dialect>(key: &str) -> StoreResult<()> {
    check_len::<D>("lock name", key, MAX_KEY_BYTES)
}

/// Refuses an owner token longer than [`MAX_OWNER_BYTES`].
pub fn check_owner<D: Dialect>(owner: &str) -> StoreResult<()> {
    check_len::<D>("owner token", owner, MAX_OWNER_BYTES)
}

/// Checks a lock's name, its owner and a lease for it, before any I/O; returns the lease as
/// [`check_ttl`] does.
pub fn check_lease<D: Dialect>(key: &str, owner: &str, ttl_ms: u64) -> StoreResult<i64> {
    check_key::<D>(key)?;
    check_owner::<D>(owner)?;
    check_ttl::<D>(ttl_ms)
}

/// Checks a handoff of `key` before any I/O: the name, both owners and the next lease;
/// returns the lease as [`check_ttl`] does.
pub fn check_handoff<D: Dialect>(key: &str, h: &Handoff<'_>) -> StoreResult<i64> {
    check_owner::<D>(h.from)?;
    check_lease::<D>(key, h.next.owner, h.next.ttl_ms)
}

/// Refuses a semaphore name longer than a lock name may be.
pub fn check_semaphore<D: Dialect>(name: &str) -> StoreResult<()> {
    check_len::<D>("semaphore name", name, MAX_KEY_BYTES)
}

/// The lease, as a signed integer for the dialect's arithmetic, if it is within
/// [`MAX_TTL_MS`] (far below `i64::MAX`).
pub fn check_ttl<D: Dialect>(ttl_ms: u64) -> StoreResult<i64> {
    if ttl_ms > MAX_TTL_MS {
        return Err(StoreError::invalid(format!(
            "{}: ttl of {ttl_ms} ms is longer than the {MAX_TTL_MS} ms supported",
            D::NAME
        )));
    }
    Ok(ttl_ms as i64)
}

/// Checks a semaphore request before any I/O: its name and owner, a number of permits from 1
/// to the semaphore's limit, and its lease and queue time. Returns those two, in ms.
pub fn check_request<D: Dialect>(req: &PermitRequest<'_>) -> StoreResult<(i64, i64)> {
    check_semaphore::<D>(req.name)?;
    check_owner::<D>(req.owner)?;
    let ttl = check_ttl::<D>(req.ttl_ms)?;
    if req.queue_ttl_ms > MAX_TTL_MS {
        return Err(StoreError::invalid(format!(
            "{}: a queued place of {} ms is longer than the {MAX_TTL_MS} ms supported",
            D::NAME,
            req.queue_ttl_ms
        )));
    }
    Ok((ttl, req.queue_ttl_ms as i64))
}
