//! A lock this process holds, and its lease as this process reckons it.
//!
//! The **local deadline** of a lease is the send time of the request that produced the grant
//! (or of the last successful extension) plus the ttl: the store's own expiry can only be
//! later, so a holder that stops believing at the local deadline never overlaps with the next
//! holder. It is never reckoned from an earlier moment (such as when the caller started to
//! wait), or a lock granted after a long wait would arrive already lost.

use crate::core::clock;
use crate::core::error::LostReason;
use crate::core::options::AutoExtend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// Called once when a held lock is lost.
pub type LostFn = Box<dyn Fn(&Held, LostReason) + Send + Sync>;

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// Locks a mutex even if a panic elsewhere poisoned it: the state it guards stays consistent
/// (every critical section here is a few assignments), and one bug must not stop every lock.
pub(crate) fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct HeldState {
    pub(crate) ttl_ms: u64,
    /// When the lease ends by our conservative local reckoning (see the module docs).
    pub(crate) lease_deadline: Instant,
    pub(crate) acquired_at: Instant,
    pub(crate) auto: Option<AutoExtend>,
    pub(crate) watch_expiry: bool,
    /// Released or lost: never scheduled again, and the loss callback never runs twice.
    pub(crate) done: bool,
    pub(crate) lost: Option<LostReason>,
    /// An extension is on its way to the store. Meanwhile the lock stays in the timer map at
    /// its local deadline, so the deadline fires on time however long the store takes.
    pub(crate) in_flight: bool,
    /// Its key in the scheduler's map while it is in there.
    pub(crate) scheduled: Option<Instant>,
}

/// A lock this process holds.
pub struct Held {
    /// Handle chosen by the caller (unique within its session).
    pub id: u64,
    /// Unique across the process: orders timers that fall on the same instant.
    pub(crate) seq: u64,
    /// Lock name.
    pub key: String,
    /// Owner token.
    pub owner: String,
    /// Fencing token of this acquisition.
    pub token: u64,
    /// Whether a payload was stored with it (a handoff must not pass it on).
    pub has_data: bool,
    pub(crate) state: Mutex<HeldState>,
    on_lost: LostFn,
}

impl Held {
    /// A lock granted by a request sent at `sent`, for `ttl_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        key: String,
        owner: String,
        token: u64,
        ttl_ms: u64,
        sent: Instant,
        auto: Option<AutoExtend>,
        watch_expiry: bool,
        has_data: bool,
        on_lost: LostFn,
    ) -> Held {
        Held {
            id,
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            key,
            owner,
            token,
            has_data,
            state: Mutex::new(HeldState {
                ttl_ms,
                lease_deadline: clock::after(sent, Duration::from_millis(ttl_ms)),
                acquired_at: sent,
                auto,
                watch_expiry,
                done: false,
                lost: None,
                in_flight: false,
                scheduled: None,
            }),
            on_lost,
        }
    }

    /// Records a successful extension to `ttl_ms` whose request was sent at `sent`.
    pub fn extended(&self, sent: Instant, ttl_ms: u64) {
        let mut s = guard(&self.state);
        s.ttl_ms = ttl_ms;
        s.lease_deadline = clock::after(sent, Duration::from_millis(ttl_ms));
    }

    /// Whether this process may still act as the holder: neither released nor lost, and the
    /// local deadline has not passed (even if nobody has noticed the loss yet).
    pub fn is_live(&self, now: Instant) -> bool {
        let s = guard(&self.state);
        !s.done && now < s.lease_deadline
    }

    /// Marks the lock released by its holder. Returns false if it was already released or lost.
    pub fn finish(&self) -> bool {
        let mut s = guard(&self.state);
        !std::mem::replace(&mut s.done, true)
    }

    /// Why it was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        guard(&self.state).lost
    }

    /// Marks it lost and runs the callback, once. Returns whether this call lost it.
    pub fn lose(&self, reason: LostReason) -> bool {
        {
            let mut s = guard(&self.state);
            if s.done {
                return false;
            }
            s.done = true;
            s.lost = Some(reason);
        }
        (self.on_lost)(self, reason);
        true
    }
}
