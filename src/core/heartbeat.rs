//! The heartbeat scheduler.
//!
//! One scheduler per engine keeps every lease alive: locks due within the same short window
//! are extended together with one `extend_many` (one pipelined round trip on Redis), so
//! 10 000 auto-extended locks cost a few round trips per tick, not 10 000 timers. The same
//! scheduler fires every lease's **local deadline** (see [`crate::core::held`]) on time,
//! whether or not an extension is in flight, so a holder cut off from the store stops
//! believing it holds before the store can give the lock to anyone else.
//!
//! The timers live in one mutex-guarded ordered map that any thread updates directly: adding
//! a lock or removing a released one costs a map operation, and the scheduler task is woken
//! only when a new deadline is earlier than the one it sleeps towards (which may be the
//! deadline of a lock released since: one acquisition after another with the same ttl then
//! wakes no thread). Nothing here keeps the Node process alive.
//! Time arithmetic saturates and each lock's tick runs under `catch_unwind`, so one bad entry
//! can never stop the task that serves every other lock.

use crate::core::error::LostReason;
use crate::core::held::{guard, FastHash, Held};
use crate::core::kind::Kind;
use crate::runtime::clock;
use crate::runtime::debug::debug;
use crate::store::{ErrorKind, ExtendItem, SharedStore, StoreError, StoreResult};
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Frees a lock in the store on the scheduler's behalf (through the engine, so local waiters
/// get it handed over or are woken): after `maxHold`, or when an extension succeeded for a
/// lock already reported lost (the store then holds a fresh lease nobody will use).
pub type ReleaseFn = Arc<dyn Fn(&Held) + Send + Sync>;

/// Locks due within this window of each other share one batch.
const BATCH_WINDOW: Duration = Duration::from_millis(10);
/// A failed extension is retried this soon (bounded by the lease's deadline).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);

/// Heartbeat times are rounded down to a grid of `every / 8` (at most 250 ms) counted from
/// one process-wide origin, so locks acquired at scattered moments fall due together and go
/// out in one batch. Extending up to an eighth of a period early is harmless.
fn align(at: Instant, every: Duration) -> Instant {
    let origin = grid_origin();
    let grid = (every / 8).clamp(Duration::from_millis(1), Duration::from_millis(250));
    let since = at.saturating_duration_since(origin).as_nanos();
    let grid_ns = grid.as_nanos();
    let aligned = u64::try_from((since / grid_ns) * grid_ns).unwrap_or(u64::MAX);
    clock::after(origin, Duration::from_nanos(aligned))
}

/// The instant every heartbeat grid counts from: one per process, taken at its first use (a
/// simulation lines its paused clock up with it, so that a seed replays the same beats).
pub(crate) fn grid_origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// When the scheduler should next look at `held` (from `now`), or None if it needs no
/// looking after: the next heartbeat, never later than the local deadline; only the deadline
/// while an extension is in flight or for a lease nobody extends.
fn next_due(held: &Held, now: Instant) -> Option<Instant> {
    let s = guard(&held.state);
    if s.done {
        return None;
    }
    match s.auto {
        Some(_) if s.in_flight => Some(s.lease_deadline),
        Some(auto) => {
            let beat = align(clock::after(now, auto.every), auto.every).max(now);
            Some(beat.min(s.lease_deadline))
        }
        None if s.watch_expiry => Some(s.lease_deadline),
        None => None,
    }
}

/// The timer map, and when the task will next look at it.
#[derive(Default)]
struct Due {
    map: BTreeMap<(Instant, u64), Arc<Held>>,
    /// The instant the task sleeps towards; `None` while it is awake (it reads the map before
    /// it sleeps again, so nothing added meanwhile needs to wake it).
    sleeps_until: Option<Instant>,
}

struct Timers {
    due: Mutex<Due>,
    /// Wakes the task when a deadline earlier than the one it sleeps towards is added, or
    /// when the scheduler is dropped.
    earlier: Notify,
    /// Times the task woke up (for tests).
    #[cfg(test)]
    wakeups: std::sync::atomic::AtomicUsize,
    closed: AtomicBool,
    release: ReleaseFn,
    /// Every lock looked after, by the hash of its key and owner ([`Timers::pair_id`]), for
    /// the store's loss announcements (a lock nobody extends is in here too, though not in
    /// the timer map). Keyed by the hash, not by copies of the two strings, which cost two
    /// allocations at every acquisition and two more at every release only to look the pair
    /// up (bench/PROFILE.md); a lookup compares each entry's own key and owner, so two pairs
    /// whose hashes meet share a list and are still told apart.
    holders: Mutex<HashMap<u64, Holders, FastHash>>,
    /// The seeded hasher of [`Timers::pair_id`].
    pair_hash: FastHash,
}

/// The locks of one key-and-owner hash (more than one when a lock was adopted in its own
/// process, or when two pairs' hashes meet), the usual one inline: a vector allocated per
/// acquisition was one of the allocations of every acquire+release pair.
type Holders = smallvec::SmallVec<[std::sync::Weak<Held>; 1]>;

impl Timers {
    /// The hash a key and owner are indexed under.
    fn pair_id(&self, key: &str, owner: &str) -> u64 {
        use std::hash::BuildHasher;
        self.pair_hash.hash_one((key, owner))
    }

    fn index(&self, held: &Arc<Held>) {
        let id = self.pair_id(&held.key, &held.owner);
        let mut holders = guard(&self.holders);
        let list = holders.entry(id).or_default();
        list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(held)));
        list.push(Arc::downgrade(held));
    }

    fn unindex(&self, held: &Held) {
        let id = self.pair_id(&held.key, &held.owner);
        let mut holders = guard(&self.holders);
        if let Some(list) = holders.get_mut(&id) {
            list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), held));
            if list.is_empty() {
                holders.remove(&id);
            }
        }
    }

    /// Takes the live locks of `key` held by `owner` out of the index.
    fn take_pair(&self, key: &str, owner: &str) -> Vec<Arc<Held>> {
        self.take_listed(self.pair_id(key, owner), key, owner)
    }

    /// Takes the live locks of `key` held by `owner` out of the list under `id`, leaving
    /// those of other pairs listed there.
    fn take_listed(&self, id: u64, key: &str, owner: &str) -> Vec<Arc<Held>> {
        let mut holders = guard(&self.holders);
        let Some(list) = holders.get_mut(&id) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        list.retain(|w| match w.upgrade() {
            Some(held) if held.key == key && held.owner == owner => {
                found.push(held);
                false
            }
            Some(_) => true,
            None => false,
        });
        if list.is_empty() {
            holders.remove(&id);
        }
        found
    }
}

/// Handle to an engine's heartbeat scheduler; its task ends when the handle is dropped.
pub struct Scheduler {
    timers: Arc<Timers>,
}

impl Scheduler {
    /// Starts the scheduler task. Must run inside a tokio runtime.
    pub fn start(store: SharedStore, release: ReleaseFn) -> Scheduler {
        let timers = Arc::new(Timers {
            due: Mutex::new(Due::default()),
            earlier: Notify::new(),
            #[cfg(test)]
            wakeups: Default::default(),
            closed: AtomicBool::new(false),
            release,
            holders: Mutex::new(HashMap::default()),
            pair_hash: FastHash::default(),
        });
        tokio::spawn(run(store, timers.clone()));
        Scheduler { timers }
    }

    /// Starts looking after `held` (extending it, or watching its deadline) if it needs it.
    pub fn add(&self, held: Arc<Held>) {
        self.timers.index(&held);
        schedule(&self.timers, held, Instant::now());
    }

    /// Looks at `held` again after its lease changed by hand (an `extend`), so a shorter lease
    /// is watched at its new deadline.
    pub fn reschedule(&self, held: Arc<Held>) {
        schedule(&self.timers, held, Instant::now());
    }

    /// Stops looking after `held` (it was released or lost).
    pub fn remove(&self, held: &Held) {
        self.timers.unindex(held);
        unschedule(&self.timers, held);
    }

    /// Reports lost, at once, the locks and permits of `key` held by `owner`: the store saw
    /// them end without their holder (see `ReleaseNotifications::losses`).
    pub fn lost(&self, key: &str, owner: &str) {
        for held in self.timers.take_pair(key, owner) {
            lose(&self.timers, &held, LostReason::NotOwned);
        }
    }

    /// Number of locks the scheduler looks after (for tests and diagnostics).
    pub fn len(&self) -> usize {
        guard(&self.timers.due).map.len()
    }

    /// Whether the scheduler looks after no lock.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.timers.closed.store(true, Ordering::Release);
        self.timers.earlier.notify_one();
    }
}

fn unschedule(timers: &Timers, held: &Held) {
    let at = guard(&held.state).scheduled.take();
    if let Some(at) = at {
        guard(&timers.due).map.remove(&(at, held.seq));
    }
}

/// Puts `held` in the map at its next due time counted from `from`.
fn schedule(timers: &Timers, held: Arc<Held>, from: Instant) {
    if let Some(at) = next_due(&held, from) {
        schedule_at(timers, held, at);
    }
}

/// Puts `held` in the map at `at` (replacing its earlier entry), unless it is done; wakes the
/// scheduler task if it sleeps towards a later instant. It may sleep towards an instant whose
/// entry is gone (a released lock's): it then wakes there, finds nothing due and sleeps
/// towards what is first by then, so no deadline is ever missed and a run of acquisitions
/// with one ttl wakes it once per ttl, not once per acquisition.
fn schedule_at(timers: &Timers, held: Arc<Held>, at: Instant) {
    let first = {
        let mut due = guard(&timers.due);
        let mut s = guard(&held.state);
        if s.done {
            return;
        }
        if let Some(old) = s.scheduled.replace(at) {
            due.map.remove(&(old, held.seq));
        }
        drop(s);
        due.map.insert((at, held.seq), held);
        due.sleeps_until.is_some_and(|t| at < t)
    };
    if first {
        timers.earlier.notify_one();
    }
}

/// Reports `held` lost. A lock given up by `maxHold` still has most of a lease in the store,
/// so it is freed there for others; a lease that reached its local deadline ends in the store
/// a margin later by itself (releasing it early would shorten the lease others see).
fn lose(timers: &Timers, held: &Held, reason: LostReason) {
    debug!("lost {:?}: {reason:?}", held.key);
    timers.unindex(held);
    unschedule(timers, held);
    if held.lose(reason) && reason == LostReason::MaxHold {
        (timers.release)(held);
    }
}

async fn run(store: SharedStore, t: Arc<Timers>) {
    let far = Duration::from_secs(3600);
    loop {
        if t.closed.load(Ordering::Acquire) {
            return;
        }
        let next = {
            let mut due = guard(&t.due);
            let next = due
                .map
                .first_key_value()
                .map(|((at, _), _)| *at)
                .unwrap_or_else(|| clock::after(Instant::now(), far));
            due.sleeps_until = Some(next);
            next
        };
        let woken = tokio::select! {
            _ = t.earlier.notified() => true,
            _ = tokio::time::sleep_until(next) => false,
        };
        guard(&t.due).sleeps_until = None;
        #[cfg(test)]
        t.wakeups.fetch_add(1, Ordering::Relaxed);
        if woken {
            continue;
        }
        let now = Instant::now();
        let horizon = now + BATCH_WINDOW;
        let mut popped = Vec::new();
        {
            let mut due = guard(&t.due);
            while let Some(entry) = due.map.first_entry() {
                if entry.key().0 > horizon {
                    break;
                }
                let held = entry.remove();
                guard(&held.state).scheduled = None;
                popped.push(held);
            }
        }
        let mut batch = Vec::new();
        for held in popped {
            // A bug in one lock's tick drops that lock from the map (and reports it lost)
            // instead of ending the task that serves every lock.
            match catch_unwind(AssertUnwindSafe(|| tick(&t, &held, now))) {
                Ok(Tick::Extend) => batch.push(held),
                Ok(Tick::Later) => schedule(&t, held, now),
                Ok(Tick::Drop) => {}
                Err(_) => {
                    let _ = catch_unwind(AssertUnwindSafe(|| {
                        lose(&t, &held, LostReason::Unreachable)
                    }));
                }
            }
        }
        if !batch.is_empty() {
            // The batch runs on its own task so a slow store never delays other locks'
            // deadlines.
            tokio::spawn(extend_batch(store.clone(), Arc::downgrade(&t), batch, now));
        }
    }
}

/// Extends `items` (one per lock of `batch`): locks with `extend_many`, semaphores' permits
/// with `extend_permits_many`, both at once. One result per item, in order.
async fn extend_all(
    store: &SharedStore,
    batch: &[Arc<Held>],
    items: &[ExtendItem],
) -> Vec<StoreResult<bool>> {
    if batch.iter().all(|h| h.kind == Kind::Lock) {
        return store.extend_many(items).await;
    }
    let (locks, permits): (Vec<_>, Vec<_>) = batch
        .iter()
        .zip(items)
        .partition(|(h, _)| h.kind == Kind::Lock);
    let locks: Vec<ExtendItem> = locks.into_iter().map(|(_, i)| i.clone()).collect();
    let permits: Vec<ExtendItem> = permits.into_iter().map(|(_, i)| i.clone()).collect();
    let (lock_results, permit_results) = futures_util::future::join(
        store.extend_many(&locks),
        store.extend_permits_many(&permits),
    )
    .await;
    let (mut lock_results, mut permit_results) =
        (lock_results.into_iter(), permit_results.into_iter());
    batch
        .iter()
        .map(|h| {
            let next = match h.kind {
                Kind::Lock => lock_results.next(),
                Kind::Permits => permit_results.next(),
            };
            next.unwrap_or_else(|| Err(StoreError::internal("a batch result went missing")))
        })
        .collect()
}

/// Sends one batch of extensions (requests sent at `sent`) and applies the outcomes.
async fn extend_batch(
    store: SharedStore,
    timers: std::sync::Weak<Timers>,
    batch: Vec<Arc<Held>>,
    sent: Instant,
) {
    let items: Vec<ExtendItem> = batch
        .iter()
        .map(|h| ExtendItem {
            key: h.key.clone(),
            owner: h.owner.clone(),
            ttl_ms: guard(&h.state).ttl_ms,
            has_data: h.has_data,
        })
        .collect();
    let results = extend_all(&store, &batch, &items).await;
    let done = Instant::now();
    if crate::runtime::debug::enabled() {
        let extended = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let failed = results.iter().filter(|r| r.is_err()).count();
        debug!(
            "heartbeat: {} lease(s) in one batch, {extended} extended, {failed} failed, {} ms",
            items.len(),
            done.duration_since(sent).as_millis()
        );
    }
    let Some(t) = timers.upgrade() else { return };
    for (held, result) in batch.into_iter().zip(results) {
        let (deadline, was_lost) = {
            let mut s = guard(&held.state);
            s.in_flight = false;
            (s.lease_deadline, s.lost.is_some())
        };
        match result {
            Ok(true) if was_lost => {
                // The local deadline fired while the extension was on its way: the loss has
                // been reported and is never taken back, so free the lock for others.
                (t.release)(&held);
            }
            Ok(true) => {
                let ttl = guard(&held.state).ttl_ms;
                held.extended(sent, ttl);
                held.heartbeat_extended();
                schedule(&t, held, done);
            }
            Ok(false) => lose(&t, &held, LostReason::NotOwned),
            // The lease was in a file since replaced: retrying cannot bring it back.
            Err(e) if e.kind == ErrorKind::Replaced => lose(&t, &held, LostReason::StoreReplaced),
            Err(_) => {
                if clock::after(done, RETRY_AFTER_ERROR) >= deadline {
                    lose(&t, &held, LostReason::Unreachable);
                } else {
                    // Try again shortly, still bounded by the lease.
                    schedule_at(&t, held, clock::after(done, RETRY_AFTER_ERROR));
                }
            }
        }
    }
}

enum Tick {
    Extend,
    /// Not due yet after all (its lease was extended by hand, or an extension is in flight
    /// and the deadline has not come): schedule again.
    Later,
    Drop,
}

fn tick(t: &Timers, held: &Arc<Held>, now: Instant) -> Tick {
    let (auto, lease_deadline, acquired_at, done, in_flight) = {
        let s = guard(&held.state);
        (s.auto, s.lease_deadline, s.acquired_at, s.done, s.in_flight)
    };
    if done {
        return Tick::Drop;
    }
    match auto {
        None => {
            if now >= lease_deadline {
                lose(t, held, LostReason::Expired);
                Tick::Drop
            } else {
                Tick::Later
            }
        }
        Some(auto) => {
            let max_hold_passed = auto
                .max_hold
                .is_some_and(|m| now >= clock::after(acquired_at, m));
            if max_hold_passed {
                // Given up: freed for others rather than make them wait out the lease.
                lose(t, held, LostReason::MaxHold);
                Tick::Drop
            } else if now >= lease_deadline {
                lose(t, held, LostReason::Unreachable);
                Tick::Drop
            } else if in_flight {
                Tick::Later
            } else {
                // Watched at its deadline while the extension is on its way.
                let mut s = guard(&held.state);
                s.in_flight = true;
                drop(s);
                schedule_at(t, held.clone(), lease_deadline);
                Tick::Extend
            }
        }
    }
}

#[cfg(test)]
mod tests;
