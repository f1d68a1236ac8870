//! Held locks and the heartbeat scheduler.
//!
//! One scheduler per engine keeps every lease alive: locks due within the same short window
//! are extended together with one `extend_many` (one pipelined round trip on Redis), so
//! 10 000 auto-extended locks cost a few round trips per tick, not 10 000 timers. The same
//! scheduler notices when a lease that nobody extends passes its deadline, so a lost lock is
//! reported even without auto-extension.
//!
//! The timers live in one mutex-guarded ordered map that any thread updates directly: adding
//! a lock or removing a released one costs a map operation, and the scheduler task is woken
//! only when a new deadline becomes the earliest. Nothing here keeps the Node process alive.

use crate::backend::{ExtendItem, Store};
use crate::core::error::LostReason;
use crate::core::options::AutoExtend;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Called once when a held lock is lost.
pub type LostFn = Box<dyn Fn(&Held, LostReason) + Send + Sync>;

/// Locks due within this window of each other share one batch.
const BATCH_WINDOW: Duration = Duration::from_millis(10);
/// A failed extension is retried this soon (bounded by the lease's deadline).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// Heartbeat times are rounded down to a grid of `every / 8` (at most 250 ms) counted from
/// one process-wide origin, so locks acquired at scattered moments fall due together and go
/// out in one batch. Extending up to an eighth of a period early is harmless.
fn align(at: Instant, every: Duration) -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let grid = (every / 8).clamp(Duration::from_millis(1), Duration::from_millis(250));
    let since = at.saturating_duration_since(origin).as_nanos();
    let grid_ns = grid.as_nanos();
    origin + Duration::from_nanos(((since / grid_ns) * grid_ns) as u64)
}

struct HeldState {
    ttl_ms: u64,
    /// When the lease ends by our conservative local reckoning: send time of the last
    /// successful acquire/extend plus its ttl.
    lease_deadline: Instant,
    acquired_at: Instant,
    auto: Option<AutoExtend>,
    watch_expiry: bool,
    /// Released or lost: never scheduled again, and the loss callback never runs twice.
    done: bool,
    lost: Option<LostReason>,
    /// Its key in the scheduler's map while it is in there.
    scheduled: Option<Instant>,
}

/// A lock this process holds.
pub struct Held {
    /// Handle chosen by the caller (unique within its session).
    pub id: u64,
    /// Unique across the process: orders timers that fall on the same instant.
    seq: u64,
    /// Lock name.
    pub key: String,
    /// Owner token.
    pub owner: String,
    /// Fencing token of this acquisition.
    pub token: u64,
    /// Whether a payload was stored with it (a handoff must not pass it on).
    pub has_data: bool,
    state: Mutex<HeldState>,
    on_lost: LostFn,
}

impl Held {
    /// A lock granted at `sent` (when the acquiring request was sent) for `ttl_ms`.
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
                lease_deadline: sent + Duration::from_millis(ttl_ms),
                acquired_at: sent,
                auto,
                watch_expiry,
                done: false,
                lost: None,
                scheduled: None,
            }),
            on_lost,
        }
    }

    /// Records a successful extension sent at `sent`.
    pub fn extended(&self, sent: Instant, ttl_ms: u64) {
        let mut s = self.state.lock().unwrap();
        s.ttl_ms = ttl_ms;
        s.lease_deadline = sent + Duration::from_millis(ttl_ms);
    }

    /// Marks the lock released by its holder. Returns false if it was already released or lost.
    pub fn finish(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        !std::mem::replace(&mut s.done, true)
    }

    /// Why it was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.state.lock().unwrap().lost
    }

    /// Marks it lost and runs the callback, once.
    pub fn lose(&self, reason: LostReason) {
        {
            let mut s = self.state.lock().unwrap();
            if s.done {
                return;
            }
            s.done = true;
            s.lost = Some(reason);
        }
        (self.on_lost)(self, reason);
    }

    /// When the scheduler should next look at it (from `now`), or None if it needs no
    /// looking after.
    fn next_due(&self, now: Instant) -> Option<Instant> {
        let s = self.state.lock().unwrap();
        if s.done {
            return None;
        }
        match s.auto {
            Some(auto) => Some(align(now + auto.every, auto.every).max(now)),
            None if s.watch_expiry => Some(s.lease_deadline),
            None => None,
        }
    }
}

struct Timers {
    due: Mutex<BTreeMap<(Instant, u64), Arc<Held>>>,
    /// Wakes the task when a deadline earlier than the one it sleeps towards is added, or
    /// when the scheduler is dropped.
    earlier: Notify,
    closed: std::sync::atomic::AtomicBool,
}

/// Handle to an engine's heartbeat scheduler; its task ends when the handle is dropped.
pub struct Scheduler {
    timers: Arc<Timers>,
}

impl Scheduler {
    /// Starts the scheduler task. Must run inside a tokio runtime.
    pub fn start(store: Store) -> Scheduler {
        let timers = Arc::new(Timers {
            due: Mutex::new(BTreeMap::new()),
            earlier: Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(run(store, timers.clone()));
        Scheduler { timers }
    }

    /// Starts looking after `held` (extending it, or watching its expiry) if it needs it.
    pub fn add(&self, held: Arc<Held>) {
        schedule(&self.timers, held, Instant::now());
    }

    /// Stops looking after `held` (it was released or lost).
    pub fn remove(&self, held: &Held) {
        let at = held.state.lock().unwrap().scheduled.take();
        if let Some(at) = at {
            self.timers.due.lock().unwrap().remove(&(at, held.seq));
        }
    }

    /// Number of locks the scheduler looks after (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.timers.due.lock().unwrap().len()
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

/// Puts `held` in the map at its next due time counted from `from`.
fn schedule(timers: &Timers, held: Arc<Held>, from: Instant) {
    if let Some(at) = held.next_due(from) {
        schedule_at(timers, held, at);
    }
}

/// Puts `held` in the map at `at` (replacing its earlier entry), unless it is done; wakes the
/// scheduler task if that is now the earliest deadline.
fn schedule_at(timers: &Timers, held: Arc<Held>, at: Instant) {
    let first = {
        let mut due = timers.due.lock().unwrap();
        let mut s = held.state.lock().unwrap();
        if s.done {
            return;
        }
        if let Some(old) = s.scheduled.replace(at) {
            due.remove(&(old, held.seq));
        }
        drop(s);
        let first = due.first_key_value().is_none_or(|((t, _), _)| at < *t);
        due.insert((at, held.seq), held);
        first
    };
    if first {
        timers.earlier.notify_one();
    }
}

async fn run(store: Store, t: Arc<Timers>) {
    let far = Duration::from_secs(3600);
    loop {
        if t.closed.load(Ordering::Acquire) {
            return;
        }
        let next = t
            .due
            .lock()
            .unwrap()
            .first_key_value()
            .map(|((at, _), _)| *at)
            .unwrap_or_else(|| Instant::now() + far);
        tokio::select! {
            _ = t.earlier.notified() => continue,
            _ = tokio::time::sleep_until(next.into()) => {}
        }
        let now = Instant::now();
        let horizon = now + BATCH_WINDOW;
        let mut popped = Vec::new();
        {
            let mut due = t.due.lock().unwrap();
            while let Some(entry) = due.first_entry() {
                if entry.key().0 > horizon {
                    break;
                }
                let held = entry.remove();
                held.state.lock().unwrap().scheduled = None;
                popped.push(held);
            }
        }
        let mut batch = Vec::new();
        for held in popped {
            match tick(&held, now, &store) {
                Tick::Extend => batch.push(held),
                Tick::Later => schedule(&t, held, now),
                Tick::Drop => {}
            }
        }
        if batch.is_empty() {
            continue;
        }
        let store = store.clone();
        let weak = Arc::downgrade(&t);
        // The batch runs on its own task so a slow store never delays other locks' expiry
        // checks.
        tokio::spawn(async move {
            let items: Vec<ExtendItem> = batch
                .iter()
                .map(|h| ExtendItem {
                    key: h.key.clone(),
                    owner: h.owner.clone(),
                    ttl_ms: h.state.lock().unwrap().ttl_ms,
                    has_data: h.has_data,
                })
                .collect();
            let results = store.extend_many(&items).await;
            let done = Instant::now();
            let Some(t) = weak.upgrade() else { return };
            for (held, result) in batch.into_iter().zip(results) {
                match result {
                    Ok(true) => {
                        let ttl = held.state.lock().unwrap().ttl_ms;
                        held.extended(now, ttl);
                        schedule(&t, held, now);
                    }
                    Ok(false) => held.lose(LostReason::NotOwned),
                    Err(_) => {
                        let deadline = held.state.lock().unwrap().lease_deadline;
                        if done + RETRY_AFTER_ERROR >= deadline {
                            held.lose(LostReason::Unreachable);
                        } else {
                            // Try again shortly, still bounded by the lease.
                            schedule_at(&t, held, done + RETRY_AFTER_ERROR);
                        }
                    }
                }
            }
        });
    }
}

enum Tick {
    Extend,
    /// Not due yet after all (its lease was extended by hand): schedule again.
    Later,
    Drop,
}

fn tick(held: &Arc<Held>, now: Instant, store: &Store) -> Tick {
    let (auto, lease_deadline, acquired_at, done) = {
        let s = held.state.lock().unwrap();
        (s.auto, s.lease_deadline, s.acquired_at, s.done)
    };
    if done {
        return Tick::Drop;
    }
    match auto {
        None => {
            if now >= lease_deadline {
                held.lose(LostReason::Expired);
                Tick::Drop
            } else {
                Tick::Later
            }
        }
        Some(auto) => {
            if auto.max_hold.is_some_and(|m| now >= acquired_at + m) {
                held.lose(LostReason::MaxHold);
                // Given up: free it for others rather than make them wait out the lease.
                let store = store.clone();
                let (key, owner) = (held.key.clone(), held.owner.clone());
                tokio::spawn(async move {
                    let _ = store.release(&key, &owner).await;
                });
                Tick::Drop
            } else if now >= lease_deadline {
                held.lose(LostReason::Unreachable);
                Tick::Drop
            } else {
                Tick::Extend
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryStore;
    use std::sync::atomic::AtomicUsize;

    fn held(id: u64, ttl_ms: u64, auto: Option<AutoExtend>, lost: Arc<AtomicUsize>) -> Arc<Held> {
        Arc::new(Held::new(
            id,
            format!("k{id}"),
            "o".into(),
            1,
            ttl_ms,
            Instant::now(),
            auto,
            true,
            false,
            Box::new(move |_, _| {
                lost.fetch_add(1, Ordering::SeqCst);
            }),
        ))
    }

    #[test]
    fn heartbeat_times_fall_on_a_shared_grid_never_later_than_asked() {
        let every = Duration::from_millis(800);
        let base = Instant::now();
        let a = align(base + every, every);
        let b = align(base + every + Duration::from_millis(30), every);
        assert!(a <= base + every && base + every - a < every / 8 + Duration::from_millis(1));
        // Two asks 30 ms apart land on the same 100 ms grid point, or neighbouring ones.
        let diff = if b >= a { b - a } else { a - b };
        assert!(diff == Duration::ZERO || diff == every / 8, "{diff:?}");
    }

    #[tokio::test]
    async fn a_released_lock_leaves_the_scheduler_at_once() {
        let sched = Scheduler::start(Store::Memory(Arc::new(MemoryStore::default())));
        let lost = Arc::new(AtomicUsize::new(0));
        let locks: Vec<_> = (0..1000)
            .map(|i| held(i, 60_000, None, lost.clone()))
            .collect();
        for h in &locks {
            sched.add(h.clone());
        }
        assert_eq!(sched.len(), 1000);
        for h in &locks {
            h.finish();
            sched.remove(h);
        }
        assert!(sched.is_empty());
    }

    #[tokio::test]
    async fn an_unextended_lease_is_reported_lost_once_at_its_deadline() {
        let sched = Scheduler::start(Store::Memory(Arc::new(MemoryStore::default())));
        let lost = Arc::new(AtomicUsize::new(0));
        let h = held(1, 30, None, lost.clone());
        sched.add(h.clone());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert_eq!(lost.load(Ordering::SeqCst), 1);
        assert_eq!(h.lost_reason(), Some(LostReason::Expired));
        assert!(sched.is_empty());
    }

    #[tokio::test]
    async fn an_earlier_deadline_wakes_a_scheduler_sleeping_towards_a_later_one() {
        let sched = Scheduler::start(Store::Memory(Arc::new(MemoryStore::default())));
        let lost = Arc::new(AtomicUsize::new(0));
        sched.add(held(1, 60_000, None, lost.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let short = held(2, 20, None, lost.clone());
        sched.add(short.clone());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert_eq!(short.lost_reason(), Some(LostReason::Expired));
    }
}
