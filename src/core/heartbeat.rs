//! Held locks and the heartbeat scheduler.
//!
//! One scheduler task per engine keeps every lease alive: locks due within the same short
//! window are extended together with one `extend_many` (one pipelined round trip on Redis), so
//! 10 000 auto-extended locks cost a few round trips per tick, not 10 000 timers. The same
//! scheduler notices when a lease that nobody extends passes its deadline, so a lost lock is
//! reported even without auto-extension. Nothing here keeps the Node process alive.

use crate::backend::{ExtendItem, Store};
use crate::core::error::LostReason;
use crate::core::options::AutoExtend;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Called once when a held lock is lost.
pub type LostFn = Box<dyn Fn(&Held, LostReason) + Send + Sync>;

/// Locks due within this window of each other share one batch.
const BATCH_WINDOW: Duration = Duration::from_millis(10);
/// A failed extension is retried this soon (bounded by the lease's deadline).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);

struct HeldState {
    ttl_ms: u64,
    /// When the lease ends by our conservative local reckoning: send time of the last
    /// successful acquire/extend plus its ttl.
    lease_deadline: Instant,
    acquired_at: Instant,
    auto: Option<AutoExtend>,
    watch_expiry: bool,
    /// Released or lost: the scheduler drops it, and the loss callback never runs twice.
    done: bool,
    lost: Option<LostReason>,
}

/// A lock this process holds.
pub struct Held {
    /// Handle chosen by the caller (unique within its session).
    pub id: u64,
    /// Lock name.
    pub key: String,
    /// Owner token.
    pub owner: String,
    /// Fencing token of this acquisition.
    pub token: u64,
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
        on_lost: LostFn,
    ) -> Held {
        Held {
            id,
            key,
            owner,
            token,
            state: Mutex::new(HeldState {
                ttl_ms,
                lease_deadline: sent + Duration::from_millis(ttl_ms),
                acquired_at: sent,
                auto,
                watch_expiry,
                done: false,
                lost: None,
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

    /// Whether it is still held by our reckoning.
    pub fn is_held(&self) -> bool {
        let s = self.state.lock().unwrap();
        !s.done && Instant::now() < s.lease_deadline
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

    /// When the scheduler should next look at it, or None if it needs no looking after.
    fn next_due(&self, now: Instant) -> Option<Instant> {
        let s = self.state.lock().unwrap();
        if s.done {
            return None;
        }
        match s.auto {
            Some(auto) => Some(now + auto.every),
            None if s.watch_expiry => Some(s.lease_deadline),
            None => None,
        }
    }
}

enum Msg {
    Add(Arc<Held>),
    /// Results of a batch sent at the instant given.
    Extended(Instant, Vec<Arc<Held>>, Vec<Result<bool, String>>),
}

/// Handle to an engine's heartbeat task.
pub struct Scheduler {
    tx: mpsc::UnboundedSender<Msg>,
}

impl Scheduler {
    /// Starts the task. It ends when the scheduler handle is dropped.
    pub fn start(store: Store) -> Scheduler {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, tx.downgrade(), rx));
        Scheduler { tx }
    }

    /// Starts looking after `held` (extending it, or watching its expiry) if it needs it.
    pub fn add(&self, held: Arc<Held>) {
        if held.next_due(Instant::now()).is_some() {
            let _ = self.tx.send(Msg::Add(held));
        }
    }
}

async fn run(
    store: Store,
    tx: mpsc::WeakUnboundedSender<Msg>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) {
    let mut due: BTreeMap<(Instant, u64), Arc<Held>> = BTreeMap::new();
    let far = Duration::from_secs(3600);
    loop {
        let next = due
            .first_key_value()
            .map(|((at, _), _)| *at)
            .unwrap_or_else(|| Instant::now() + far);
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(Msg::Add(held)) => {
                    if let Some(at) = held.next_due(Instant::now()) {
                        due.insert((at, held.id), held);
                    }
                }
                Some(Msg::Extended(sent, batch, results)) => {
                    let now = Instant::now();
                    for (held, result) in batch.into_iter().zip(results) {
                        let at = match result {
                            Ok(true) => {
                                let ttl = held.state.lock().unwrap().ttl_ms;
                                held.extended(sent, ttl);
                                held.next_due(sent)
                            }
                            Ok(false) => {
                                held.lose(LostReason::NotOwned);
                                None
                            }
                            Err(_) => {
                                let deadline = held.state.lock().unwrap().lease_deadline;
                                if now + RETRY_AFTER_ERROR >= deadline {
                                    held.lose(LostReason::Unreachable);
                                    None
                                } else {
                                    Some(now + RETRY_AFTER_ERROR)
                                }
                            }
                        };
                        if let Some(at) = at {
                            due.insert((at, held.id), held);
                        }
                    }
                }
                None => return,
            },
            _ = tokio::time::sleep_until(next.into()) => {
                let now = Instant::now();
                let horizon = now + BATCH_WINDOW;
                let mut batch = Vec::new();
                while let Some(entry) = due.first_entry() {
                    if entry.key().0 > horizon {
                        break;
                    }
                    let held = entry.remove();
                    match tick(&held, now, &store) {
                        Tick::Extend => batch.push(held),
                        Tick::Later(at) => { due.insert((at, held.id), held); }
                        Tick::Drop => {}
                    }
                }
                if batch.is_empty() {
                    continue;
                }
                let Some(tx) = tx.upgrade() else { return };
                let store = store.clone();
                // The batch runs on its own task so a slow store never delays other locks'
                // bookkeeping (their expiry checks run on the next tick as usual).
                tokio::spawn(async move {
                    let items: Vec<ExtendItem> = batch
                        .iter()
                        .map(|h| ExtendItem {
                            key: h.key.clone(),
                            owner: h.owner.clone(),
                            ttl_ms: h.state.lock().unwrap().ttl_ms,
                        })
                        .collect();
                    let results = store
                        .extend_many(&items)
                        .await
                        .into_iter()
                        .map(|r| r.map_err(|e| e.message))
                        .collect();
                    let _ = tx.send(Msg::Extended(now, batch, results));
                });
            }
        }
    }
}

enum Tick {
    Extend,
    Later(Instant),
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
                // Extended by hand since we scheduled it.
                Tick::Later(lease_deadline)
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
