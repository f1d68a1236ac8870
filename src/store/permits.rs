//! Counting semaphores in the store contract: the request and reply types of
//! [`LockStore::acquire_permits`](super::LockStore::acquire_permits) and its siblings, and
//! [`PermitTable`], the rules every store keeps, written once as plain data and code.
//!
//! A semaphore `name` has holders (an owner token, a number of permits, a lease and a fencing
//! token each) and a queue of refused requests (an owner, a number of permits, and how long
//! the place is kept without the waiter asking again). Everything is decided by the store's
//! clock, atomically:
//!
//! 1. Holders whose lease ended and queued requests whose place lapsed are dropped.
//! 2. An owner that already holds permits of `name` gets its own token back and its lease
//!    renewed (a retried request whose reply was lost succeeds; it never holds twice).
//! 3. `taken` is the sum of the holders' permits; `ahead` the sum of the permits asked by the
//!    queued requests that joined before the caller's (all of them if it is not queued).
//!    The request is granted iff `taken + ahead + permits <= limit`: nobody overtakes a
//!    waiter it would delay, and a request that fits beside everyone ahead is not held back.
//!    So a writer (all permits) waiting on a read-write lock is not starved by readers that
//!    come after it. The grant draws a new fencing token from a counter that only increases
//!    for `name` (a read-write lock's readers and writers share it) and leaves the queue.
//! 4. A refused request with `queue_ttl_ms > 0` takes a place at the back of the queue (or
//!    keeps the place it had) for `queue_ttl_ms` more; with 0 (a try) it is not queued.
//!
//! A release (or a waiter giving up its place) frees the owner's permits and its queued
//! place, and is announced to waiters where the store can. Each store keeps a semaphore in
//! its own namespace: a semaphore and a lock with the same name never touch each other.
//!
//! Stores that can run a script on the server (Redis) or lock the semaphore's state in a
//! transaction (SQL) apply the rules there; [`PermitTable`] is the reference the memory store
//! uses as is, and that stores keeping a semaphore's state in one record (DynamoDB) can load,
//! change and write back with a condition.

use super::{StoreError, StoreResult};

/// The name under which releases of semaphore `name` are announced and watched through
/// [`ReleaseNotifications`](super::ReleaseNotifications), as if it were a lock's. A lock
/// whose name is this very string shares the announcements: its waiters and the semaphore's
/// then wake for each other's releases, which costs a look and nothing else.
pub fn watch_key(name: &str) -> String {
    format!("{name}\u{0}permits")
}

/// A request for permits of a counting semaphore.
#[derive(Debug, Clone, Copy)]
pub struct PermitRequest<'a> {
    /// Semaphore name.
    pub name: &'a str,
    /// Owner token of this acquisition (unique per acquisition).
    pub owner: &'a str,
    /// Permits asked for, from 1 to `limit`.
    pub permits: u32,
    /// How many permits the semaphore has.
    pub limit: u32,
    /// Lease of the permits in ms, if granted.
    pub ttl_ms: u64,
    /// How long a refused request keeps its place in the queue without asking again, in ms;
    /// 0: do not queue (a try).
    pub queue_ttl_ms: u64,
}

/// Refuses, as invalid input, a request for no permits or for more than the semaphore has
/// (a semaphore of no permits included). The engine runs it once on every acquisition of
/// permits, before the request reaches a store, so the contract leaves no store to grant or
/// refuse such a request as if it could be met, and no store checks it again.
pub fn check_permits(permits: u32, limit: u32) -> StoreResult<()> {
    if permits == 0 || permits > limit {
        return Err(StoreError::invalid(format!(
            "{permits} permits asked of a semaphore of {limit}: ask for 1 to the limit"
        )));
    }
    Ok(())
}

/// What [`LockStore::handoff_permits`](super::LockStore::handoff_permits) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitHandoff {
    /// Whether the releasing owner held live permits.
    pub released: bool,
    /// The next owner's fencing token, if its permits were granted.
    pub granted: Option<u64>,
    /// Permits a request without a place in the queue would find free right after the
    /// handoff (beside the holders and every queued request), if the store tells: the engine
    /// lets its next local waiter look at once only if that waiter's request fits.
    pub room: Option<u32>,
}

/// A holder of permits, as [`LockStore::permits`](super::LockStore::permits) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitHolder {
    /// Owner token of the acquisition.
    pub owner: String,
    /// How many permits it holds.
    pub permits: u32,
    /// Its fencing token.
    pub fencing_token: u64,
    /// Remaining lease in ms, by the store's clock.
    pub remaining_ms: i64,
}

/// A holder in a [`PermitTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableHolder {
    /// Owner token.
    pub owner: String,
    /// Permits held.
    pub permits: u32,
    /// Fencing token.
    pub token: u64,
    /// End of the lease, in ms on the store's clock.
    pub expires: u64,
}

/// A queued request in a [`PermitTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableWaiter {
    /// Owner token.
    pub owner: String,
    /// Permits asked for.
    pub permits: u32,
    /// When its place lapses, in ms on the store's clock.
    pub expires: u64,
}

/// One semaphore's state, with the rules of the module documentation. Times are ms on the
/// store's clock (any origin, never going back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermitTable {
    /// Current holders.
    pub holders: Vec<TableHolder>,
    /// Refused requests, in the order they joined.
    pub queue: Vec<TableWaiter>,
    /// The last fencing token issued (only increases).
    pub fence: u64,
}

impl PermitTable {
    /// Rule 1: drops lapsed holders and queued places.
    pub fn purge(&mut self, now: u64) {
        self.holders.retain(|h| h.expires > now);
        self.queue.retain(|w| w.expires > now);
    }

    /// Permits held by live holders.
    pub fn taken(&self) -> u64 {
        self.holders.iter().map(|h| u64::from(h.permits)).sum()
    }

    /// Rules 1 to 4: the fencing token if granted, `None` if refused.
    pub fn acquire(&mut self, req: &PermitRequest<'_>, now: u64) -> Option<u64> {
        self.purge(now);
        let expires = now.saturating_add(req.ttl_ms);
        if let Some(h) = self.holders.iter_mut().find(|h| h.owner == req.owner) {
            h.expires = expires;
            return Some(h.token);
        }
        let place = self.queue.iter().position(|w| w.owner == req.owner);
        let ahead: u64 = self.queue[..place.unwrap_or(self.queue.len())]
            .iter()
            .map(|w| u64::from(w.permits))
            .sum();
        if self.taken() + ahead + u64::from(req.permits) <= u64::from(req.limit) {
            if let Some(i) = place {
                self.queue.remove(i);
            }
            self.fence += 1;
            self.holders.push(TableHolder {
                owner: req.owner.to_string(),
                permits: req.permits,
                token: self.fence,
                expires,
            });
            return Some(self.fence);
        }
        if req.queue_ttl_ms > 0 {
            let until = now.saturating_add(req.queue_ttl_ms);
            match place {
                Some(i) => self.queue[i].expires = until,
                None => self.queue.push(TableWaiter {
                    owner: req.owner.to_string(),
                    permits: req.permits,
                    expires: until,
                }),
            }
        }
        None
    }

    /// Sets `owner`'s lease to `ttl_ms` if it still holds permits. Returns whether it did.
    pub fn extend(&mut self, owner: &str, ttl_ms: u64, now: u64) -> bool {
        self.purge(now);
        match self.holders.iter_mut().find(|h| h.owner == owner) {
            Some(h) => {
                h.expires = now.saturating_add(ttl_ms);
                true
            }
            None => false,
        }
    }

    /// Frees `owner`'s permits and its queued place. Returns whether it held live permits.
    pub fn release(&mut self, owner: &str, now: u64) -> bool {
        self.purge(now);
        self.queue.retain(|w| w.owner != owner);
        let before = self.holders.len();
        self.holders.retain(|h| h.owner != owner);
        self.holders.len() != before
    }

    /// The live holders.
    pub fn live(&self, now: u64) -> Vec<PermitHolder> {
        self.holders
            .iter()
            .filter(|h| h.expires > now)
            .map(|h| PermitHolder {
                owner: h.owner.clone(),
                permits: h.permits,
                fencing_token: h.token,
                remaining_ms: (h.expires - now) as i64,
            })
            .collect()
    }

    /// Whether nothing but the fence is left (a store may then drop the holders and queue).
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests;
