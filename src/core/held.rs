//! A lock this process holds, and its lease as this process reckons it.
//!
//! The **local deadline** of a lease is the send time of the request that produced the grant
//! (or of the last successful extension) plus the ttl, less a small margin (see
//! [`lease_end`]): the store's own expiry is counted from when the request arrived, so it can
//! only be later, and a holder that stops believing at the local deadline never overlaps with
//! the next holder. It is never reckoned from an earlier moment (such as when the caller
//! started to wait), or a lock granted after a long wait would arrive already lost.

use crate::core::error::LostReason;
use crate::core::kind::Kind;
use crate::core::options::AutoExtend;
use crate::runtime::clock;
use crate::runtime::lease::lease_end;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tokio::time::Instant;

/// Called once when a held lock is lost.
pub type LostFn = Box<dyn Fn(&Held, LostReason) + Send + Sync>;

/// Called after each successful heartbeat extension of a held lock.
pub type ExtendedFn = Box<dyn Fn(&Held) + Send + Sync>;

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// The hasher of the engine's maps looked up at every operation (held locks, pending
/// acquisitions, local queues, the heartbeat's index): foldhash's seeded quality hasher, a
/// random per-process seed as SipHash's (keys come from callers), at a fraction of its cost
/// (SipHash was ~3 % of a fenced pair's client CPU in bench/PROFILE.md's profile).
pub(crate) type FastHash = foldhash::quality::RandomState;

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
    /// Its holder stopped extending it (`stopExtending`): it lapses at its deadline, and
    /// closing the session leaves it to lapse rather than releasing it (another process may
    /// have adopted it).
    pub(crate) stopped: bool,
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
    /// A lock, or a semaphore's permits (`key` is then the semaphore's name).
    pub kind: Kind,
    pub(crate) state: Mutex<HeldState>,
    on_lost: LostFn,
    /// Told of each heartbeat extension, when someone asked (see `reporting_extensions`).
    on_extended: Option<ExtendedFn>,
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
            kind: Kind::Lock,
            state: Mutex::new(HeldState {
                ttl_ms,
                lease_deadline: lease_end(sent, ttl_ms),
                acquired_at: sent,
                auto,
                watch_expiry,
                done: false,
                lost: None,
                in_flight: false,
                scheduled: None,
                stopped: false,
            }),
            on_lost,
            on_extended: None,
        }
    }

    /// The same, telling `on_extended` of each successful heartbeat extension.
    pub fn reporting_extensions(mut self, on_extended: ExtendedFn) -> Held {
        self.on_extended = Some(on_extended);
        self
    }

    /// A heartbeat extended the lease: tells whoever asked to know.
    pub(crate) fn heartbeat_extended(&self) {
        if let Some(f) = &self.on_extended {
            f(self);
        }
    }

    /// The same, for `kind` (a semaphore's permits, or a lock).
    pub fn of_kind(mut self, kind: Kind) -> Held {
        self.kind = kind;
        self
    }

    /// Records a successful extension to `ttl_ms` whose request was sent at `sent`.
    pub fn extended(&self, sent: Instant, ttl_ms: u64) {
        let mut s = guard(&self.state);
        s.ttl_ms = ttl_ms;
        s.lease_deadline = lease_end(sent, ttl_ms);
    }

    /// Whether this process may still act as the holder: neither released nor lost, the
    /// local deadline has not passed and `maxHold` has not run out (even if nobody has
    /// noticed the loss yet).
    pub fn is_live(&self, now: Instant) -> bool {
        self.valid_until().is_some_and(|end| now < end)
    }

    /// Until when this process may act as the holder: the local deadline, or the end of
    /// `maxHold` if that comes first; `None` once released or lost. (Redlock's validity is
    /// this same deadline.)
    pub fn valid_until(&self) -> Option<Instant> {
        let s = guard(&self.state);
        let max_hold = s
            .auto
            .and_then(|a| a.max_hold)
            .map(|m| clock::after(s.acquired_at, m));
        (!s.done).then(|| max_hold.map_or(s.lease_deadline, |m| m.min(s.lease_deadline)))
    }

    /// Marks the lock released by its holder. Returns false if it was already released or lost.
    pub fn finish(&self) -> bool {
        let mut s = guard(&self.state);
        !std::mem::replace(&mut s.done, true)
    }

    /// Stops its heartbeat for good: from now on its lease runs out at its local deadline
    /// (and is reported lost then) unless it is released first. `maxHold` no longer applies.
    /// Returns false if it was already released or lost.
    pub fn stop_extending(&self) -> bool {
        let mut s = guard(&self.state);
        if s.done {
            return false;
        }
        s.auto = None;
        s.watch_expiry = true;
        s.stopped = true;
        true
    }

    /// Whether its holder stopped extending it (see [`Held::stop_extending`]).
    pub fn is_stopped(&self) -> bool {
        guard(&self.state).stopped
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn held(ttl_ms: u64, auto: Option<AutoExtend>, sent: Instant) -> Held {
        Held::new(
            1,
            "k".into(),
            "o".into(),
            1,
            ttl_ms,
            sent,
            auto,
            false,
            false,
            Box::new(|_, _| {}),
        )
    }

    #[test]
    fn it_is_valid_until_its_local_deadline_or_max_hold_whichever_comes_first() {
        let sent = Instant::now();
        let h = held(10_000, None, sent);
        assert_eq!(h.valid_until(), Some(lease_end(sent, 10_000)));
        let auto = AutoExtend {
            every: Duration::from_secs(1),
            max_hold: Some(Duration::from_secs(2)),
        };
        let h = held(10_000, Some(auto), sent);
        assert_eq!(h.valid_until(), Some(sent + Duration::from_secs(2)));
        assert!(h.finish());
        assert_eq!(h.valid_until(), None);
    }

    #[test]
    fn a_lock_whose_holder_stopped_extending_it_is_watched_at_its_lease_end_only() {
        let sent = Instant::now();
        let auto = AutoExtend {
            every: Duration::from_secs(1),
            max_hold: Some(Duration::from_secs(2)),
        };
        let h = held(10_000, Some(auto), sent);
        assert!(h.stop_extending());
        assert!(h.is_stopped());
        let s = guard(&h.state);
        assert_eq!((s.auto, s.watch_expiry), (None, true));
        drop(s);
        assert_eq!(h.valid_until(), Some(lease_end(sent, 10_000)));
        assert!(h.finish());
        assert!(!h.stop_extending(), "a released lock has nothing to stop");
    }

    #[test]
    fn a_lock_is_not_live_once_max_hold_ran_out_even_before_anyone_noticed() {
        let sent = Instant::now() - Duration::from_secs(5);
        let auto = AutoExtend {
            every: Duration::from_secs(1),
            max_hold: Some(Duration::from_secs(2)),
        };
        let h = held(60_000, Some(auto), sent);
        assert!(!h.is_live(Instant::now()));
        let without = held(60_000, None, sent);
        assert!(without.is_live(Instant::now()));
    }
}
