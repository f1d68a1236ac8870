//! The acquire loop and the per-key local queues.
//!
//! One `Engine` serves one store; the composition root (`binding/engines.rs`) shares it with
//! every client of the process that targets that store.
//! Waiters for a key in this process form a FIFO queue; only the head talks to the store, so
//! N local waiters cost one poll, not N, and a releaser that asks again queues behind the
//! waiters that were already there (no barging). The head is woken at once by a local release
//! or by the store's release announcement, and otherwise polls with a jittered delay, so a
//! release by a legacy client or a lost message costs at most one poll.
//!
//! Permits of a counting semaphore go through the same loop, in queues of their own (a lock
//! and a semaphore with one name never share a queue): the head waiter asks the store for its
//! permits with a place in the store's queue, so waiters of every process are served in
//! order; a grant lets the next local waiter look at once (there may be permits left, unless a
//! handoff reported no room for it), and a release of permits wakes the head. Permits are never handed over locally: the store
//! decides who fits.

use crate::core::error::LockError;
use crate::core::heartbeat::Scheduler;
use crate::core::held::Held;
use crate::core::kind::Kind;
use crate::core::options::{AcquireSpec, PermitSpec};
use crate::runtime::clock;
use crate::runtime::debug::debug;
use crate::runtime::lease::lease_end;
use crate::store::permits::{check_permits, watch_key};
use crate::store::{
    Acquisition, Handoff, HandoffOutcome, HeldLock, LockInfo, NextOwner, PermitRequest, Release,
    Renewal, SharedStore, StoreError, StoreResult,
};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod queue;

pub use queue::Grant;
use queue::{
    earliest, queue_ttl_ms, watched_name, Claim, Mailbox, Queues, Slot, Waiter, FAIRNESS_PAUSE,
    MAX_LOCAL_HANDOFFS,
};

/// How many grants past their lease's local deadline one acquisition gives back and asks
/// again after, while its wait lasts, before it reports that it got nothing.
pub const LATE_GRANTS: u32 = 3;

/// One store plus the process-local state around it.
pub struct Engine {
    store: SharedStore,
    queues: Mutex<Queues>,
    scheduler: Scheduler,
    next_waiter: AtomicU64,
    /// Clean-ups of grants whose reply was lost (`engine/orphans.rs`).
    orphans: orphans::Orphans,
}

impl Engine {
    /// An engine over `store`; whoever opened the store shares the engine with the clients
    /// that target it. Must run inside a tokio runtime; does no I/O.
    pub fn new(store: SharedStore) -> Arc<Engine> {
        let engine = Arc::new_cyclic(|weak: &Weak<Engine>| {
            let weak = weak.clone();
            // Locks the scheduler gives up (maxHold, a passed deadline) are released through
            // the engine, so a local waiter gets them handed over or is woken.
            let release = Arc::new(move |held: &Held| {
                if let Some(engine) = weak.upgrade() {
                    let (key, owner, had_data, kind) = (
                        held.key.clone(),
                        held.owner.clone(),
                        held.has_data,
                        held.kind,
                    );
                    tokio::spawn(async move {
                        let _ = engine.release_as(kind, &key, &owner, had_data).await;
                    });
                }
            });
            Engine {
                scheduler: Scheduler::start(store.clone(), release),
                store,
                queues: Mutex::new(Queues::default()),
                next_waiter: AtomicU64::new(1),
                orphans: orphans::Orphans::default(),
            }
        });
        if let Some(notifications) = engine.store.release_notifications() {
            // Releases announced by other processes wake the head waiter of their key.
            let mut releases = notifications.releases();
            let weak = Arc::downgrade(&engine);
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match releases.recv().await {
                        Ok(key) => match weak.upgrade() {
                            Some(engine) => {
                                engine.wake(&key, Kind::Lock, true);
                                if let Some(name) = key.strip_suffix(&*watch_key("")) {
                                    engine.wake(name, Kind::Permits, true);
                                }
                            }
                            None => return,
                        },
                        // Missed announcements cost their waiters one poll.
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return,
                    }
                }
            });
        }
        if let Some(mut losses) = engine
            .store
            .release_notifications()
            .and_then(|n| n.losses())
        {
            // Grants the store saw end without their holder: the holder hears of it now
            // rather than at its next extension.
            let weak = Arc::downgrade(&engine);
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match losses.recv().await {
                        Ok(loss) => match weak.upgrade() {
                            Some(engine) => engine.scheduler.lost(&loss.key, &loss.owner),
                            None => return,
                        },
                        // Missed announcements: those holders hear of it at their next
                        // extension.
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return,
                    }
                }
            });
        }
        engine
    }

    /// Closes the store of an engine nothing else holds any more (its last client closed),
    /// so that its connections are closed when that client's `close` returns rather than
    /// whenever the last clone is dropped: a SQLite file's `-wal` and `-shm` files then go
    /// before the process may exit. An engine still held elsewhere (another client, an
    /// operation on its way) closes its connections when the last of them lets go.
    ///
    /// # Cancel Safety
    /// Cancel safe: the store closes or is dropped either way.
    pub async fn close_if_last(engine: Arc<Engine>) {
        if let Some(engine) = Arc::into_inner(engine) {
            // Stops the heartbeat task first: it holds the store too.
            drop(engine.scheduler);
            engine.store.close().await;
        }
    }

    /// Paces the clean-ups of grants whose reply was lost by the store's response timeout
    /// (`engine/orphans.rs`); until then, by the default one.
    pub fn set_response_timeout(&self, response_timeout: Duration) {
        self.orphans.set_response_timeout(response_timeout);
    }

    /// The store this engine talks to.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Waiters queued in this process, over all keys.
    pub fn waiting(&self) -> usize {
        let queues = self.queues.lock().unwrap();
        queues
            .0
            .iter()
            .flat_map(|m| m.values())
            .map(|q| q.waiters.len())
            .sum()
    }

    /// Release channels this process is subscribed to (Redis).
    pub fn subscriptions(&self) -> usize {
        self.store
            .release_notifications()
            .map_or(0, |n| n.watched())
    }

    /// Background clean-ups of grants whose reply was lost, in progress.
    pub fn cleanups(&self) -> usize {
        self.orphans.len()
    }

    /// The heartbeat scheduler of this engine.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Wakes the head waiter of `key`, if any.
    fn wake(&self, key: &str, kind: Kind, released: bool) {
        let queues = self.queues.lock().unwrap();
        if let Some(head) = queues.of(kind).get(key).and_then(|q| q.waiters.front()) {
            debug!("wake {key:?}: the head waiter looks now");
            if released {
                head.released.store(true, Ordering::Release);
            }
            head.notify.notify_one();
        }
    }

    fn is_head(&self, key: &str, kind: Kind, waiter: &Waiter) -> bool {
        let queues = self.queues.lock().unwrap();
        queues
            .of(kind)
            .get(key)
            .and_then(|q| q.waiters.front())
            .is_some_and(|h| h.id == waiter.id)
    }

    /// Tries to take `spec.key`, waiting as the spec allows. Returns the grant, or `None` when
    /// the lock stayed busy until the deadline or the attempts ran out.
    ///
    /// Waiters for a key in this process are granted in the order they called: each joins the
    /// key's queue before its first await (so in the order the calls were made, when they are
    /// made from one thread), and only the queue's head asks the store; a releaser hands the
    /// lock to the head. Alone in the queue, a lock's waiter asks the store at once; a try
    /// (one attempt, or no wait) asks beside the queue, and only when nobody here waits.
    ///
    /// A grant that reaches this point already past its lease's local deadline (the store
    /// answered more than a ttl after the request was sent, or the grant waited in the
    /// mailbox of a waiter busy with a slow request of its own) is never returned: its
    /// holder could not act on it, and the store may give the key to another as soon as its
    /// lease ends. It is given back in the background as a grant whose reply was lost
    /// ([`Engine::clean_up`]: a new request of the same owner waits for that). While the
    /// call's wait lasts (and it counts no attempts), the call then waits on for the key, at
    /// the back of this process's queue, with what is left of its wait, up to
    /// [`LATE_GRANTS`] late grants in all; otherwise it reports that it got nothing, as when
    /// the wait ran out.
    ///
    /// # Cancel Safety
    /// Cancel safe through `cancel`: when it fires, the call returns `Aborted` and leaves no
    /// lock behind (a grant that raced the cancellation, its own or one a release handed it,
    /// is released first). Dropping the future instead is safe for the queue, but a grant in
    /// flight may stay until its ttl.
    pub async fn acquire(
        self: &Arc<Self>,
        spec: &AcquireSpec,
        cancel: &CancellationToken,
    ) -> Result<Option<Grant>, LockError> {
        if let Some(PermitSpec { count, limit }) = spec.permits {
            // The one place the request is checked: no store sees it otherwise.
            check_permits(count, limit)?;
        }
        let deadline = spec.wait.map(|w| clock::after(Instant::now(), w));
        let mut again: Option<AcquireSpec> = None;
        let mut late_grants = 0;
        loop {
            let current = again.as_ref().unwrap_or(spec);
            match self.acquire_queued(current, cancel).await? {
                Some(grant) if Instant::now() >= lease_end(grant.sent, spec.ttl_ms) => {
                    let kind = Kind::of(spec);
                    self.clean_up(
                        kind,
                        &spec.key,
                        &spec.owner,
                        spec.data.is_some(),
                        grant.sent,
                        spec.ttl_ms,
                    );
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    // A try, or a call that counts its attempts, does not ask again; nor does
                    // one after LATE_GRANTS of them (a store that answers later than the lease
                    // every time, or a lease of a few ms, would make it spin).
                    late_grants += 1;
                    let no_more = spec.max_attempts.is_some()
                        || spec.wait.is_some_and(|w| w.is_zero())
                        || late_grants >= LATE_GRANTS;
                    if no_more || left.is_some_and(|l| l.is_zero()) {
                        debug!(
                            "acquire {:?}: granted past its lease's local deadline; given back",
                            spec.key
                        );
                        return Ok(None);
                    }
                    debug!(
                        "acquire {:?}: granted past its lease's local deadline; given back, waiting on",
                        spec.key
                    );
                    let mut next = spec.clone();
                    next.wait = left;
                    again = Some(next);
                }
                granted => return Ok(granted),
            }
        }
    }

    /// [`Engine::acquire`] up to the grant, whenever it arrives.
    async fn acquire_queued(
        self: &Arc<Self>,
        spec: &AcquireSpec,
        cancel: &CancellationToken,
    ) -> Result<Option<Grant>, LockError> {
        let kind = Kind::of(spec);
        let started = Instant::now();
        let deadline = spec.wait.map(|w| clock::after(started, w));
        let single_shot = spec.max_attempts == Some(1) || spec.wait.is_some_and(|w| w.is_zero());
        let mut attempts: u64 = 0;
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        if single_shot {
            // A try takes no place in the local queue: it holds nobody back (a semaphore's
            // tries may each find permits, and each try meets the store's own answer, an
            // error included). It never barges past local waiters either.
            if self
                .queues
                .lock()
                .unwrap()
                .of(kind)
                .contains_key(spec.key.as_str())
            {
                return Ok(None);
            }
            let granted = self.attempt(spec, false, (1, started)).await?;
            if let Some(grant) = granted.filter(|_| cancel.is_cancelled()) {
                self.give_back(spec, grant).await;
                return Err(LockError::Aborted);
            }
            return Ok(granted);
        }
        let waiter = Arc::new(Waiter {
            id: self.next_waiter.fetch_add(1, Ordering::Relaxed),
            notify: Notify::new(),
            released: AtomicBool::new(false),
            owner: spec.owner.clone(),
            ttl_ms: spec.ttl_ms,
            data: spec.data.clone(),
            format: spec.format,
            permits: spec.permits,
            claimed: AtomicBool::new(false),
            room: AtomicU32::new(u32::MAX),
            mailbox: Mutex::new(Mailbox::default()),
        });
        // The waiter joins the queue before anything is awaited: later callers queue behind
        // it even while its first request is on its way (were it to ask outside the queue,
        // they would ask too, and the store would pick whichever request it saw first).
        let (contended, mut slot) = {
            let mut queues = self.queues.lock().unwrap();
            let map = queues.of_mut(kind);
            let key: Arc<str> = match map.get_key_value(spec.key.as_str()) {
                Some((key, _)) => key.clone(),
                None => Arc::from(spec.key.as_str()),
            };
            let queue = map.entry(key.clone()).or_default();
            let contended = !queue.waiters.is_empty();
            queue.waiters.push_back(waiter.clone());
            let slot = Slot {
                engine: self.clone(),
                key,
                kind,
                waiter: waiter.clone(),
                acquired: false,
                queued_in_store: false,
                left: false,
            };
            (contended, slot)
        };
        // A cancelled call leaves once it gave back what a release handed it meanwhile.
        let outcome = async {
            let mut try_now = true;
            if !contended && kind == Kind::Lock {
                // Alone in the queue: ask at once, before subscribing to release announcements, so
                // an acquisition nobody contends costs one request. (A semaphore's head subscribes
                // first and asks with a place in the store's queue, below.)
                attempts = 1;
                let granted = self.attempt(spec, false, (attempts, started)).await?;
                if let Some(token) = waiter.unless_cancelled(granted, cancel)? {
                    slot.acquired = true;
                    return Ok(Some(earliest(token, waiter.take_grant())));
                }
                // Refused: the next look waits for a release (a local one hands the lock over or
                // wakes this head, as it is queued already) or a poll, unless it subscribes now.
                try_now = false;
            }
            loop {
                // (A grant waiting in the mailbox of a cancelled waiter is given back as it
                // leaves, below.)
                if cancel.is_cancelled() {
                    return Err(LockError::Aborted);
                }
                if let Some(token) = waiter.take_grant() {
                    slot.acquired = true;
                    return Ok(Some(token));
                }
                let head = self.is_head(&spec.key, kind, &waiter);
                if head && !single_shot && self.start_watching(&spec.key, kind).await {
                    // Subscribed only now: a release between the refusal and the subscription
                    // would go unheard, so look once more before sleeping.
                    try_now = true;
                }
                if try_now && attempts > 0 && deadline.is_some_and(|d| Instant::now() > d) {
                    // The wait ran out during the last request (a release heard meanwhile, or
                    // the subscription above, asks to look again): no request starts after it,
                    // so the call ends within its wait and one store call.
                    slot.leave_store_queue().await;
                    return Ok(None);
                }
                if try_now && head {
                    waiter.released.store(false, Ordering::Release);
                    attempts += 1;
                    // A semaphore's head waiter keeps a place in the store's queue while it waits.
                    slot.queued_in_store |= kind == Kind::Permits && !single_shot;
                    let granted = self
                        .attempt(spec, !single_shot, (attempts, started))
                        .await?;
                    if let Some(token) = waiter.unless_cancelled(granted, cancel)? {
                        slot.acquired = true;
                        if kind == Kind::Permits {
                            waiter.settle_claim().await;
                        }
                        return Ok(Some(earliest(token, waiter.take_grant())));
                    }
                    // Refused because a releaser was handing it to us just then?
                    if let Some(token) = waiter.take_grant() {
                        slot.acquired = true;
                        return Ok(Some(token));
                    }
                } else if try_now {
                    // A poll period spent queued behind local waiters counts as an attempt, so
                    // redislock's `retries` bound the wait the same way with or without a queue.
                    attempts += 1;
                }
                let now = Instant::now();
                if spec.max_attempts.is_some_and(|max| attempts >= max)
                    || deadline.is_some_and(|d| now >= d)
                {
                    debug!(
                        "acquire {:?}: gave up after {attempts} attempt(s) in {} ms",
                        spec.key,
                        now.duration_since(started).as_millis()
                    );
                    slot.leave_store_queue().await;
                    return Ok(None);
                }
                let mut delay = spec.next_delay();
                if let Some(d) = deadline {
                    delay = delay.min(d - now);
                }
                tokio::select! {
                    _ = waiter.notify.notified() => {
                        // A promotion to head while the predecessor holds the lock is no reason
                        // to ask the store; a release is.
                        try_now = waiter.released.load(Ordering::Acquire);
                    }
                    _ = tokio::time::sleep(delay) => try_now = true,
                    _ = cancel.cancelled() => return Err(LockError::Aborted),
                }
            }
        }
        .await;
        if matches!(outcome, Err(LockError::Aborted)) {
            slot.leave_cancelled().await;
        }
        outcome
    }

    /// One request to the store (`queue`: a semaphore's waiter takes or keeps a place in the
    /// store's queue if refused). A grant that raced a cancellation is the caller's to give
    /// back; one the store may have made when the call failed with its outcome unknown is
    /// given back in the background (`engine/orphans.rs`).
    ///
    /// `(nth, started)`: which attempt of the acquisition this is and when it began, for the
    /// debug log, which says `busy` once and summarises a wait at its grant (or its end), not
    /// a line per poll.
    async fn attempt(
        self: &Arc<Self>,
        spec: &AcquireSpec,
        queue: bool,
        (nth, started): (u64, Instant),
    ) -> Result<Option<Grant>, LockError> {
        let kind = Kind::of(spec);
        // An owner asking again (the redislock face's lock objects keep theirs, and a call
        // whose grant came past its lease asks on) must not have its new grant freed by the
        // clean-up of its last one. Waiting for that clean-up's release may take a store
        // call: if a wait ran out meanwhile, no request starts, so the call still ends
        // within its wait and one store call. (A try, with no wait, still asks once.)
        if self.orphans.len() > 0
            && self.orphans.supersede(kind, &spec.key, &spec.owner).await
            && spec
                .wait
                .is_some_and(|w| !w.is_zero() && Instant::now() >= clock::after(started, w))
        {
            return Ok(None);
        }
        let sent = Instant::now();
        let granted = match spec.permits {
            None => {
                self.store
                    .try_acquire(
                        &spec.key,
                        Acquisition {
                            owner: &spec.owner,
                            ttl_ms: spec.ttl_ms,
                            data: spec.data.as_deref(),
                            format: spec.format,
                        },
                    )
                    .await
            }
            Some(PermitSpec { count, limit }) => {
                let req = PermitRequest {
                    name: &spec.key,
                    owner: &spec.owner,
                    permits: count,
                    limit,
                    ttl_ms: spec.ttl_ms,
                    queue_ttl_ms: if queue { queue_ttl_ms(spec) } else { 0 },
                };
                self.store.acquire_permits(&req).await
            }
        }
        .inspect_err(|e| {
            debug!("acquire {:?}: store error ({:?})", spec.key, e.kind);
            if e.kind.outcome_unknown() {
                let has_data = spec.data.is_some();
                self.clean_up(kind, &spec.key, &spec.owner, has_data, sent, spec.ttl_ms);
            }
        })?;
        match granted {
            Some(token) if nth <= 1 => {
                debug!("acquire {:?}: granted, token {token}", spec.key)
            }
            Some(token) => debug!(
                "acquire {:?}: granted, token {token}, at attempt {nth} after {} ms waiting",
                spec.key,
                started.elapsed().as_millis()
            ),
            None if nth <= 1 => debug!("acquire {:?}: busy", spec.key),
            // A waiter's later refusals: its grant (or its end) sums them up.
            None => {}
        }
        Ok(granted.map(|token| Grant { token, sent }))
    }

    /// Gives back `grant`, which raced the cancellation of a try that holds no place in the
    /// local queue: released now, or, if that fails, in the background as a grant whose reply
    /// was lost.
    async fn give_back(self: &Arc<Self>, spec: &AcquireSpec, grant: Grant) {
        let (kind, has_data) = (Kind::of(spec), spec.data.is_some());
        if self
            .release_as(kind, &spec.key, &spec.owner, has_data)
            .await
            .is_err()
        {
            self.clean_up(
                kind,
                &spec.key,
                &spec.owner,
                has_data,
                grant.sent,
                spec.ttl_ms,
            );
        }
    }

    /// Subscribes the key's queue to release announcements, once. Returns true if it just did.
    async fn start_watching(&self, key: &str, kind: Kind) -> bool {
        let Some(notifications) = self.store.release_notifications() else {
            return false;
        };
        {
            let mut queues = self.queues.lock().unwrap();
            match queues.of_mut(kind).get_mut(key) {
                Some(q) if !q.watching => q.watching = true,
                _ => return false,
            }
        }
        notifications.watch(&watched_name(key, kind)).await;
        true
    }

    /// Frees what `owner` holds of `key`: a lock (see [`Engine::release`]) or a semaphore's
    /// permits (see [`Engine::release_permits`]).
    ///
    /// # Cancel Safety
    /// As [`Engine::release`] for a lock; cancel safe for permits.
    pub async fn release_as(
        self: &Arc<Self>,
        kind: Kind,
        key: &str,
        owner: &str,
        had_data: bool,
    ) -> StoreResult<bool> {
        match kind {
            Kind::Lock => self.release(key, owner, had_data).await,
            Kind::Permits => self.release_permits(key, owner).await,
        }
    }

    /// Frees `owner`'s permits of semaphore `key` (and its place in the store's queue) and
    /// lets the head local waiter look. Returns whether `owner` held permits.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release_permits(self: &Arc<Self>, key: &str, owner: &str) -> StoreResult<bool> {
        let mut owner = owner.to_string();
        let mut released: Option<bool> = None;
        // Loops only when a waiter left while permits handed to it were on the way: they are
        // released (or handed on) in turn. `inherited`: that grant's send time and lease, to
        // give it back in the background if this fails (as a lock's, in `release`).
        let mut inherited: Option<(Instant, u64)> = None;
        loop {
            // The first waiter no other release is handing permits to, unless that would
            // pass over one whose handoff is still on its way.
            let next = {
                let mut queues = self.queues.lock().unwrap();
                queues
                    .of_mut(Kind::Permits)
                    .get_mut(key)
                    .and_then(|q| q.next_for_permits())
            };
            let next = next.filter(|w| {
                let ok = self.may_hand_to(Kind::Permits, key, &owner, w);
                if !ok {
                    w.claimed.store(false, Ordering::Release);
                }
                ok
            });
            let Some((waiter, spec)) = next.and_then(|w| w.permits.map(|p| (w, p))) else {
                let outcome = self.store.release_permits(key, Release::new(&owner)).await;
                self.wake(key, Kind::Permits, true);
                if let (Err(_), Some((sent, ttl_ms))) = (&outcome, inherited) {
                    self.clean_up(Kind::Permits, key, &owner, false, sent, ttl_ms);
                }
                return outcome.map(|o| *released.get_or_insert(o.released));
            };
            // The head asks through the release, without a place of its own in the store's
            // queue (it keeps the one it has).
            let next = PermitRequest {
                name: key,
                owner: &waiter.owner,
                permits: spec.count,
                limit: spec.limit,
                ttl_ms: waiter.ttl_ms,
                queue_ttl_ms: 0,
            };
            let claim = Claim::new(waiter.clone());
            let sent = Instant::now();
            let handed = self
                .store
                .handoff_permits(Handoff::new(&owner, &next))
                .await;
            let handed = match handed {
                Ok(h) => h,
                Err(e) => {
                    drop(claim);
                    self.wake(key, Kind::Permits, true);
                    if let Some((sent, ttl_ms)) = inherited {
                        self.clean_up(Kind::Permits, key, &owner, false, sent, ttl_ms);
                    }
                    return match released {
                        Some(r) => Ok(r),
                        None => Err(e),
                    };
                }
            };
            let was_held = *released.get_or_insert(handed.released);
            let Some(token) = handed.granted else {
                drop(claim);
                self.wake(key, Kind::Permits, true);
                return Ok(was_held);
            };
            debug!("handoff {key:?}: permits to the next local waiter, token {token}");
            waiter
                .room
                .store(handed.room.unwrap_or(u32::MAX), Ordering::Release);
            let taken = waiter.deliver(Grant { token, sent });
            claim.delivered();
            if taken {
                return Ok(was_held);
            }
            owner = waiter.owner.clone();
            inherited = Some((sent, waiter.ttl_ms));
        }
    }

    /// The live holders of semaphore `key`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits(&self, key: &str) -> StoreResult<Vec<crate::store::PermitHolder>> {
        self.store.permits(key).await
    }

    /// Frees the lock if `owner` still holds it and wakes the next local waiter; where the
    /// store allows, a lock that a local waiter is queued for is handed straight to it
    /// instead (one round trip, never free in between). `had_data`: whether the holder
    /// stored a payload. Returns whether `owner` held it.
    ///
    /// # Cancel Safety
    /// Not cancel safe once a handoff is under way (the next holder may miss its grant until
    /// the lease ends); the plain release is idempotent.
    pub async fn release(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        had_data: bool,
    ) -> StoreResult<bool> {
        let mut owner = owner.to_string();
        let mut had_data = had_data;
        // Once the caller's lock was handed over, whatever follows is not the caller's.
        let mut released: Option<bool> = None;
        // Loops only when a waiter left while its grant was on the way: the grant is then
        // released (or handed on) in turn. `inherited`: that grant's send time and lease, to
        // give it back in the background (`clean_up`) if this fails, whatever the failure:
        // nobody else knows of it, and a release the store refused (an error reply) left it
        // held as surely as one whose outcome is unknown may have.
        let mut inherited: Option<(Instant, u64)> = None;
        loop {
            let next = self.next_for_handoff(key);
            let next = next.filter(|w| self.may_hand_to(Kind::Lock, key, &owner, w));
            let Some(waiter) = next else {
                let release = Release {
                    owner: &owner,
                    had_data,
                };
                let outcome = self.store.release(key, release).await;
                if matches!(outcome, Ok(o) if o.others_waiting) && self.has_waiters(key) {
                    // Handoffs kept the key in this process for a while and other processes
                    // wait for it: they heard the release, let them have it first.
                    self.wake_later(key, FAIRNESS_PAUSE);
                } else {
                    // Even a refused release may mean the lease lapsed: let the head look now.
                    self.wake(key, Kind::Lock, true);
                }
                if let (Err(_), Some((sent, ttl_ms))) = (&outcome, inherited) {
                    self.clean_up(Kind::Lock, key, &owner, had_data, sent, ttl_ms);
                }
                return match released {
                    Some(r) => Ok(r),
                    None => outcome.map(|o| o.released),
                };
            };
            let sent = Instant::now();
            let handed = self
                .store
                .handoff_or_release(
                    key,
                    Handoff {
                        from: &owner,
                        next: &NextOwner {
                            owner: &waiter.owner,
                            ttl_ms: waiter.ttl_ms,
                            data: waiter.data.as_deref(),
                            previous_had_data: had_data,
                            format: waiter.format,
                        },
                    },
                )
                .await;
            let token = match handed {
                Ok(HandoffOutcome::Handed(token)) => {
                    debug!("handoff {key:?}: to the next local waiter, token {token}");
                    Grant { token, sent }
                }
                // Not handed over (not held any more, or a store that had to release it
                // instead): the head waiter asks the store as anyone would.
                other => {
                    self.wake(key, Kind::Lock, true);
                    if let Err(e) = &other {
                        if e.kind.outcome_unknown() {
                            // The store may have handed it over all the same: the waiter
                            // takes it with its next request, or gives it back if it left.
                            self.maybe_handed(key, &waiter, sent);
                        }
                        if let Some((sent, ttl_ms)) = inherited {
                            self.clean_up(Kind::Lock, key, &owner, had_data, sent, ttl_ms);
                        }
                    }
                    return match released {
                        Some(r) => Ok(r),
                        None => {
                            other.map(|o| matches!(o, HandoffOutcome::Released(r) if r.released))
                        }
                    };
                }
            };
            released.get_or_insert(true);
            if waiter.deliver(token) {
                return Ok(true);
            }
            owner = waiter.owner.clone();
            had_data = waiter.data.is_some();
            inherited = Some((sent, waiter.ttl_ms));
        }
    }

    /// A handoff to `waiter` sent at `sent` failed without telling whether the store made it:
    /// if the waiter left already, what it may have been granted is given back in the
    /// background; otherwise the waiter does that if it leaves without the lock
    /// (`Slot`'s drop), and its own next request finds the lock its own if it was handed.
    fn maybe_handed(self: &Arc<Self>, key: &str, waiter: &Waiter, sent: Instant) {
        if waiter.maybe_handed(sent) {
            let had_data = waiter.data.is_some();
            self.clean_up(
                Kind::Lock,
                key,
                &waiter.owner,
                had_data,
                sent,
                waiter.ttl_ms,
            );
        }
    }

    fn has_waiters(&self, key: &str) -> bool {
        self.queues.lock().unwrap().of(Kind::Lock).contains_key(key)
    }

    /// Wakes the head waiter of `key` after `pause`.
    fn wake_later(self: &Arc<Self>, key: &str, pause: Duration) {
        let engine = Arc::downgrade(self);
        let key = key.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            if let Some(engine) = engine.upgrade() {
                engine.wake(&key, Kind::Lock, true);
            }
        });
    }

    /// Whether `owner` may hand `key` to `waiter`. A clean-up of the waiter's owner's earlier
    /// grant is stopped first, as the waiter's own request would stop it: its release landing
    /// after the handoff would free, or hand on, what the waiter was just told it holds. When
    /// that release is already on its way, the key is released instead of handed over and
    /// the waiter asks for itself (its request waits for that release). Never waits: a
    /// clean-up releases through here too, and two clean-ups waiting for each other would
    /// never end. A clean-up handing its grant to its own owner's next acquisition may.
    fn may_hand_to(&self, kind: Kind, key: &str, owner: &str, waiter: &Waiter) -> bool {
        self.orphans.len() == 0
            || waiter.owner == owner
            || self.orphans.stop_idle(kind, key, &waiter.owner)
    }

    /// The head waiter of `key`, if a handoff to it is due (not too many in a row).
    fn next_for_handoff(&self, key: &str) -> Option<Arc<Waiter>> {
        let mut queues = self.queues.lock().unwrap();
        let queue = queues.of_mut(Kind::Lock).get_mut(key)?;
        if queue.handoffs >= MAX_LOCAL_HANDOFFS {
            queue.handoffs = 0;
            return None;
        }
        let head = queue.waiters.front()?.clone();
        queue.handoffs += 1;
        Some(head)
    }

    /// Sets the remaining lease of a held lock.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(&self, held: &Arc<Held>, ttl_ms: u64) -> StoreResult<bool> {
        let sent = Instant::now();
        let owned = match held.kind {
            Kind::Lock => {
                self.store
                    .extend(
                        &held.key,
                        Renewal {
                            owner: &held.owner,
                            ttl_ms,
                            has_data: held.has_data,
                        },
                    )
                    .await?
            }
            Kind::Permits => {
                self.store
                    .extend_permits(&held.key, Renewal::new(&held.owner, ttl_ms))
                    .await?
            }
        };
        if owned {
            held.extended(sent, ttl_ms);
            self.scheduler.reschedule(held.clone());
        }
        Ok(owned)
    }

    /// Reads who holds `key`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> StoreResult<Option<LockInfo>> {
        self.store.inspect(key).await
    }

    /// Frees `key` whoever holds it (an operator's tool) and lets a local waiter look at once.
    /// Returns whether a live lock was freed.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn force_release(&self, key: &str) -> StoreResult<bool> {
        let tools = self
            .store
            .operator()
            .ok_or_else(|| StoreError::invalid("this store has no force release"))?;
        let freed = tools.force_release(key).await?;
        self.wake(key, Kind::Lock, true);
        Ok(freed)
    }

    /// Up to `limit` held locks whose names start with `prefix`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn list(&self, prefix: &str, limit: usize) -> StoreResult<Vec<HeldLock>> {
        let tools = self
            .store
            .operator()
            .ok_or_else(|| StoreError::invalid("this store cannot list its locks"))?;
        tools.list(prefix, limit).await
    }
}

mod evict;
mod orphans;

#[cfg(test)]
mod tests;
