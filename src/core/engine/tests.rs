//! The engine on the memory store, with tokio's paused clock: no wall-clock sleeps, every
//! duration exact.

use super::*;
use crate::core::options::AcquireSpec;
use crate::store::ValueFormat;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn engine() -> Arc<Engine> {
    Engine::new(Arc::new(crate::store::memory::MemoryStore::default()))
}

fn spec(key: &str, owner: &str, ttl_ms: u64, wait: Option<Duration>) -> AcquireSpec {
    AcquireSpec {
        key: key.into(),
        owner: owner.into(),
        ttl_ms,
        wait,
        max_attempts: None,
        retry_delay: Duration::from_millis(50),
        jitter: 0.0,
        data: None,
        auto_extend: None,
        watch_expiry: false,
        report_extensions: false,
        format: ValueFormat::Fenced,
        permits: None,
    }
}

async fn take(e: &Arc<Engine>, key: &str, owner: &str) -> Grant {
    e.acquire(
        &spec(key, owner, 60_000, Some(Duration::ZERO)),
        &CancellationToken::new(),
    )
    .await
    .unwrap()
    .expect("free")
}

/// Lets every spawned task that can run, run.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_in_one_process_are_served_in_the_order_they_came() {
    let e = engine();
    take(&e, "k", "holder").await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let (e, order) = (e.clone(), order.clone());
        let owner = format!("w{i}");
        tasks.push(tokio::spawn(async move {
            let s = spec("k", &owner, 60_000, None);
            e.acquire(&s, &CancellationToken::new())
                .await
                .unwrap()
                .unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(1)).await;
            e.release("k", &owner, false).await.unwrap();
        }));
        // Each waiter has queued before the next one comes.
        settle().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(e.waiting(), 5);
    e.release("k", "holder", false).await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(e.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_release_hands_the_lock_to_the_waiter_with_the_next_token_and_a_fresh_lease() {
    let e = engine();
    let first = take(&e, "k", "a").await;
    let waiter = {
        let e = e.clone();
        tokio::spawn(async move {
            let s = spec("k", "b", 1_000, Some(Duration::from_secs(60)));
            e.acquire(&s, &CancellationToken::new()).await
        })
    };
    settle().await;
    // The holder keeps it for ten times the waiter's ttl.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let released_at = Instant::now();
    assert!(e.release("k", "a", false).await.unwrap());
    let grant = waiter.await.unwrap().unwrap().unwrap();
    assert_eq!(grant.token, first.token + 1);
    assert!(
        grant.sent >= released_at,
        "the lease is reckoned from the handoff, not from when the wait began"
    );
    let info = e.inspect("k").await.unwrap().unwrap();
    assert_eq!(info.owner, "b");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gives_up_exactly_at_its_deadline() {
    let e = engine();
    take(&e, "k", "a").await;
    let started = Instant::now();
    let s = spec("k", "b", 1_000, Some(Duration::from_millis(700)));
    let got = e.acquire(&s, &CancellationToken::new()).await.unwrap();
    assert_eq!(got, None);
    assert_eq!(started.elapsed(), Duration::from_millis(700));
    assert_eq!(e.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_no_queue_and_takes_nothing_later() {
    let e = engine();
    take(&e, "k", "a").await;
    let cancel = CancellationToken::new();
    let waiter = {
        let (e, cancel) = (e.clone(), cancel.clone());
        tokio::spawn(async move {
            let s = spec("k", "b", 1_000, None);
            e.acquire(&s, &cancel).await
        })
    };
    settle().await;
    assert_eq!(e.waiting(), 1);
    cancel.cancel();
    assert!(matches!(waiter.await.unwrap(), Err(LockError::Aborted)));
    assert_eq!(e.waiting(), 0);
    assert!(e.release("k", "a", false).await.unwrap());
    settle().await;
    assert_eq!(e.inspect("k").await.unwrap(), None, "nobody took it");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_cancelled_as_a_release_hands_it_the_lock_gives_it_back_before_it_returns() {
    // An election resigned by every candidate at once: the leader's release hands the lock to
    // the next candidate just as that one is cancelled. Its call must not return before the
    // lock is free again, or a read right after it names a candidate that resigned.
    let e = engine();
    take(&e, "k", "a").await;
    let cancel = CancellationToken::new();
    let s = spec("k", "b", 1_000, None);
    // Polled here, not spawned: nothing else runs between its return and the look below.
    let mut waiter = std::pin::pin!(e.acquire(&s, &cancel));
    let queued = tokio::time::timeout(Duration::from_millis(1), &mut waiter).await;
    assert!(queued.is_err(), "it waits");
    assert_eq!(e.waiting(), 1);
    assert!(e.release("k", "a", false).await.unwrap());
    cancel.cancel();
    assert!(matches!(waiter.await, Err(LockError::Aborted)));
    assert_eq!(
        e.inspect("k").await.unwrap(),
        None,
        "the handed lock is still held"
    );
    assert_eq!(e.cleanups(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_busy_key_is_polled_every_retry_delay_when_nobody_announces_its_release() {
    let e = engine();
    // Taken directly in the store: its release wakes nobody here.
    let store = e.store().clone();
    store
        .try_acquire("k", Acquisition::fenced("outsider", 60_000))
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let e = e.clone();
        tokio::spawn(async move {
            let s = spec("k", "b", 1_000, None);
            e.acquire(&s, &CancellationToken::new()).await
        })
    };
    settle().await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    store.release("k", Release::new("outsider")).await.unwrap();
    let released_at = Instant::now();
    let grant = waiter.await.unwrap().unwrap().unwrap();
    // Found at the next poll: within one retry delay (50 ms, no jitter).
    assert!(grant.sent - released_at <= Duration::from_millis(50));
}

/// A memory store that counts real releases (handoffs are not releases) and can hold one
/// owner's next acquire request at a gate, as a request on the wire would be. Like Redis, its
/// acquire returns the caller's own token when the caller already holds the key.
#[derive(Default)]
struct Probe {
    inner: Arc<crate::store::memory::MemoryStore>,
    releases: AtomicU64,
    gate: Mutex<Option<Gate>>,
    /// Requests for permits (a handoff's grant is not one).
    permit_asks: AtomicU64,
    /// The room its permit handoffs report.
    room: AtomicU32,
    /// Holds the next permit handoff before it reaches the store: (arrived, let it through).
    handoff_gate: Mutex<Option<(Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>)>>,
    /// Answers later acquire requests sooner (request n waits 1 000 - n ms before it reaches
    /// the store), as a store whose requests travel over several connections, or whose
    /// replies wake their tasks in any order, may.
    later_answers_sooner: AtomicBool,
    acquire_asks: AtomicU64,
    /// One owner's next release, held like an acquire request (see [`Probe::hold`]).
    release_gate: Mutex<Option<Gate>>,
}

/// One owner's acquire request (of a lock or permits), held until `go` is notified; `entered` says it arrived.
struct Gate {
    owner: String,
    entered: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Notify>,
}

impl Gate {
    /// Puts a gate for `owner`'s next call in `slot`; returns (arrived, let it through).
    fn set(
        slot: &Mutex<Option<Gate>>,
        owner: &str,
    ) -> (Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
        let (entered, go) = (Arc::default(), Arc::default());
        *slot.lock().unwrap() = Some(Gate {
            owner: owner.into(),
            entered: Arc::clone(&entered),
            go: Arc::clone(&go),
        });
        (entered, go)
    }

    /// The gate in `slot` if it is `owner`'s (it then holds that call alone).
    fn take(slot: &Mutex<Option<Gate>>, owner: &str) -> Option<Gate> {
        let mut gate = slot.lock().unwrap();
        match gate.as_ref() {
            Some(g) if g.owner == owner => gate.take(),
            _ => None,
        }
    }

    /// Says the call arrived and waits until it is let through (at once without a gate).
    async fn pass(gate: Option<Gate>) {
        if let Some(g) = gate {
            g.entered.notify_one();
            g.go.notified().await;
        }
    }
}

impl Probe {
    /// Holds `owner`'s next acquire request (of a lock or permits); returns (arrived, let it
    /// through).
    fn hold(&self, owner: &str) -> (Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
        Gate::set(&self.gate, owner)
    }

    /// Holds `owner`'s next release (of a lock or permits); returns (arrived, let it through).
    fn hold_release(&self, owner: &str) -> (Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
        Gate::set(&self.release_gate, owner)
    }
}

impl crate::store::LockStore for Probe {
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        acq: crate::store::Acquisition<'a>,
    ) -> crate::store::Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        let gate = Gate::take(&self.gate, owner);
        let n = self.acquire_asks.fetch_add(1, Ordering::SeqCst);
        let delay = if self.later_answers_sooner.load(Ordering::SeqCst) {
            Duration::from_millis(1_000u64.saturating_sub(n))
        } else {
            Duration::ZERO
        };
        Box::pin(async move {
            Gate::pass(gate).await;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(self.inner.try_acquire_or_own(key, owner, ttl_ms, data))
        })
    }
    fn extend<'a>(
        &'a self,
        key: &'a str,
        renewal: crate::store::Renewal<'a>,
    ) -> crate::store::Call<'a, bool> {
        crate::store::LockStore::extend(self.inner.as_ref(), key, renewal)
    }
    fn extend_many<'a>(
        &'a self,
        items: &'a [crate::store::ExtendItem],
    ) -> futures_util::future::BoxFuture<'a, Vec<crate::store::StoreResult<bool>>> {
        crate::store::LockStore::extend_many(self.inner.as_ref(), items)
    }
    fn release<'a>(
        &'a self,
        key: &'a str,
        r: crate::store::Release<'a>,
    ) -> futures_util::future::BoxFuture<'a, crate::store::StoreResult<crate::store::ReleaseOutcome>>
    {
        self.releases.fetch_add(1, Ordering::SeqCst);
        let gate = Gate::take(&self.release_gate, r.owner);
        Box::pin(async move {
            Gate::pass(gate).await;
            crate::store::LockStore::release(self.inner.as_ref(), key, r).await
        })
    }
    fn handoff<'a>(
        &'a self,
        key: &'a str,
        h: crate::store::Handoff<'a>,
    ) -> crate::store::Call<'a, Option<u64>> {
        crate::store::LockStore::handoff(self.inner.as_ref(), key, h)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a str,
    ) -> futures_util::future::BoxFuture<'a, crate::store::StoreResult<Option<LockInfo>>> {
        crate::store::LockStore::inspect(self.inner.as_ref(), key)
    }
    fn ping(&self) -> futures_util::future::BoxFuture<'_, crate::store::StoreResult<()>> {
        crate::store::LockStore::ping(self.inner.as_ref())
    }
    fn close(&self) -> futures_util::future::BoxFuture<'_, ()> {
        crate::store::LockStore::close(self.inner.as_ref())
    }
    fn acquire_permits<'a>(
        &'a self,
        req: &'a PermitRequest<'a>,
    ) -> futures_util::future::BoxFuture<'a, crate::store::StoreResult<Option<u64>>> {
        self.permit_asks.fetch_add(1, Ordering::SeqCst);
        let gate = Gate::take(&self.gate, req.owner);
        Box::pin(async move {
            Gate::pass(gate).await;
            crate::store::LockStore::acquire_permits(self.inner.as_ref(), req).await
        })
    }
    fn release_permits<'a>(
        &'a self,
        name: &'a str,
        r: crate::store::Release<'a>,
    ) -> futures_util::future::BoxFuture<'a, crate::store::StoreResult<crate::store::ReleaseOutcome>>
    {
        let gate = Gate::take(&self.release_gate, r.owner);
        Box::pin(async move {
            Gate::pass(gate).await;
            crate::store::LockStore::release_permits(self.inner.as_ref(), name, r).await
        })
    }
    fn permits<'a>(
        &'a self,
        name: &'a str,
    ) -> futures_util::future::BoxFuture<
        'a,
        crate::store::StoreResult<Vec<crate::store::PermitHolder>>,
    > {
        crate::store::LockStore::permits(self.inner.as_ref(), name)
    }
    fn handoff_permits<'a>(
        &'a self,
        h: crate::store::Handoff<'a, PermitRequest<'a>>,
    ) -> futures_util::future::BoxFuture<'a, crate::store::StoreResult<crate::store::PermitHandoff>>
    {
        let (owner, next) = (h.from, h.next);
        let gate = self.handoff_gate.lock().unwrap().take();
        Box::pin(async move {
            if let Some((entered, go)) = gate {
                entered.notify_one();
                go.notified().await;
            }
            let store = self.inner.as_ref();
            let released = crate::store::LockStore::release_permits(
                store,
                next.name,
                crate::store::Release::new(owner),
            )
            .await?
            .released;
            let granted = crate::store::LockStore::acquire_permits(store, next).await?;
            Ok(crate::store::PermitHandoff {
                released,
                granted,
                room: Some(self.room.load(Ordering::SeqCst)),
            })
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_for_no_permits_or_more_than_the_limit_is_refused_before_any_store_sees_it() {
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    for (count, limit) in [(0, 3), (4, 3), (1, 0)] {
        let s = AcquireSpec {
            permits: Some(PermitSpec { count, limit }),
            ..spec("k", "a", 1_000, Some(Duration::from_secs(1)))
        };
        let err = e.acquire(&s, &CancellationToken::new()).await.unwrap_err();
        let kind =
            matches!(&err, LockError::Backend(b) if b.kind == crate::store::ErrorKind::Invalid);
        assert!(kind, "{count} of {limit}: {err}");
    }
    assert_eq!(probe.permit_asks.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_whose_own_request_finds_the_lock_handed_to_it_keeps_it() {
    // The head waiter polls; its request is on the wire when the holder hands the lock to
    // it, so the request finds the waiter's own lock. The handed-over grant is that same
    // lock: the waiter must keep it, and the next waiter must not get it.
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    take(&e, "k", "c").await;
    let spawn_waiter = |owner: &'static str| {
        let e = e.clone();
        tokio::spawn(async move {
            let s = spec("k", owner, 60_000, None);
            e.acquire(&s, &CancellationToken::new()).await
        })
    };
    let b = spawn_waiter("b");
    settle().await;
    let a = spawn_waiter("a");
    settle().await;
    assert_eq!(e.waiting(), 2);
    let (entered, go) = probe.hold("b");
    // b's next poll (one retry delay later) reaches the gate.
    tokio::time::sleep(Duration::from_millis(50)).await;
    entered.notified().await;
    let handed_at = Instant::now();
    assert!(e.release("k", "c", false).await.unwrap());
    go.notify_one();
    let grant = b.await.unwrap().unwrap().expect("b holds it");
    assert!(
        grant.sent <= handed_at,
        "the lease runs from the handoff, the earlier send"
    );
    settle().await;
    let info = e.inspect("k").await.unwrap().expect("held");
    assert_eq!(
        info.owner, "b",
        "the lock b was told it holds went to another waiter"
    );
    assert_eq!(info.fencing_token, grant.token);
    assert!(!a.is_finished(), "a got the lock while b holds it");
    assert_eq!(e.waiting(), 1);
    a.abort();
}

/// A waiter whose poll is held on the wire while the holder hands it the lock; the poll
/// comes back `late_ms` after the handoff, past the handed lease's local deadline (ttl 1 s).
/// Returns what the waiter's acquisition (wait `wait`) returned, and the engine.
async fn handed_past_its_lease(wait: Duration, late_ms: u64) -> (Option<Grant>, Arc<Engine>) {
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    take(&e, "k", "c").await;
    let b = {
        let e = e.clone();
        tokio::spawn(async move {
            let s = spec("k", "b", 1_000, Some(wait));
            e.acquire(&s, &CancellationToken::new()).await
        })
    };
    settle().await;
    let (entered, go) = probe.hold("b");
    // b's next poll (one retry delay later) reaches the gate.
    tokio::time::sleep(Duration::from_millis(50)).await;
    entered.notified().await;
    assert!(e.release("k", "c", false).await.unwrap());
    tokio::time::sleep(Duration::from_millis(late_ms)).await;
    go.notify_one();
    (b.await.unwrap().unwrap(), e)
}

#[tokio::test(start_paused = true)]
async fn a_lock_handed_to_a_waiter_busy_past_its_lease_is_given_back_not_returned() {
    // The waiter could never act on that grant, and its wait (1.5 s) ran out meanwhile: the
    // acquisition returns none and the key is given back.
    let (got, e) = handed_past_its_lease(Duration::from_millis(1_500), 2_000).await;
    assert_eq!(got, None, "a grant past its lease was returned");
    settle().await;
    assert_eq!(
        e.inspect("k").await.unwrap(),
        None,
        "the grant was not given back"
    );
    assert_eq!((e.waiting(), e.cleanups()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_given_a_lock_past_its_lease_with_wait_left_gives_it_back_and_waits_on() {
    // The same late grant with 8 s of the wait left: it is given back, and the call asks
    // again and returns a fresh grant, whose lease runs from that later request.
    let handed = Instant::now();
    let (got, e) = handed_past_its_lease(Duration::from_secs(10), 2_000).await;
    let grant = got.expect("the call gave up with wait left");
    assert!(
        grant.sent >= handed + Duration::from_millis(2_000),
        "the grant returned is the late one"
    );
    assert!(
        Instant::now() < lease_end(grant.sent, 1_000),
        "returned past its lease"
    );
    let info = e.inspect("k").await.unwrap().expect("held");
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        ("b", grant.token)
    );
    assert_eq!(e.waiting(), 0);
}

/// A semaphore's waiter (1 of 2 permits, ttl 1 s, wait `wait`) whose request is held on the
/// wire for 2 s before it reaches the store, which then grants it: past the lease's local
/// deadline (from the send). Returns what the acquisition returned, and the engine.
async fn permits_granted_past_their_lease(wait: Duration) -> (Option<Grant>, Arc<Engine>) {
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    let (entered, go) = probe.hold("b");
    let b = {
        let e = e.clone();
        tokio::spawn(async move {
            let s = AcquireSpec {
                permits: Some(PermitSpec { count: 1, limit: 2 }),
                ..spec("sem", "b", 1_000, Some(wait))
            };
            e.acquire(&s, &CancellationToken::new()).await
        })
    };
    entered.notified().await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    go.notify_one();
    (b.await.unwrap().unwrap(), e)
}

#[tokio::test(start_paused = true)]
async fn permits_granted_past_their_lease_with_no_wait_left_are_given_back_not_returned() {
    // Permits go through the same gate as a lock: the grant came 2 s after its request
    // (ttl 1 s) and the wait (1.5 s) is over, so the call reports none and gives them back.
    let (got, e) = permits_granted_past_their_lease(Duration::from_millis(1_500)).await;
    assert_eq!(got, None, "permits past their lease were returned");
    settle().await;
    assert_eq!(
        e.permits("sem").await.unwrap(),
        vec![],
        "the permits were not given back"
    );
    assert_eq!((e.waiting(), e.cleanups()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn permits_granted_past_their_lease_with_wait_left_are_given_back_and_asked_for_again() {
    // The same late grant with 8 s of the wait left: given back, asked for again, and the
    // grant returned is a fresh one whose lease runs from the later request.
    let asked = Instant::now();
    let (got, e) = permits_granted_past_their_lease(Duration::from_secs(10)).await;
    let grant = got.expect("the call gave up with wait left");
    assert!(
        grant.sent >= asked + Duration::from_millis(2_000),
        "the grant returned is the late one"
    );
    assert!(
        Instant::now() < lease_end(grant.sent, 1_000),
        "returned past its lease"
    );
    settle().await;
    let holders = e.permits("sem").await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(
        (holders[0].owner.as_str(), holders[0].fencing_token),
        ("b", grant.token),
        "the clean-up of the late grant freed the fresh one"
    );
    assert_eq!((e.waiting(), e.cleanups()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_whose_every_grant_comes_past_its_lease_gives_up_after_late_grants_of_them()
{
    // Every answer takes about a second, the lease half that: each grant is given back and
    // asked for again while the wait lasts, but not forever.
    let probe = Arc::new(Probe::default());
    probe.later_answers_sooner.store(true, Ordering::SeqCst);
    let e = Engine::new(probe.clone());
    let s = spec("k", "b", 500, Some(Duration::from_secs(60)));
    let got = e.acquire(&s, &CancellationToken::new()).await.unwrap();
    assert_eq!(got, None, "a grant past its lease was returned");
    assert_eq!(
        probe.acquire_asks.load(Ordering::SeqCst),
        u64::from(LATE_GRANTS)
    );
    settle().await;
    assert_eq!(e.inspect("k").await.unwrap(), None, "a late grant was kept");
}

#[tokio::test(start_paused = true)]
async fn after_sixteen_handoffs_in_a_row_the_key_is_really_released() {
    let counting = Arc::new(Probe::default());
    let e = Engine::new(counting.clone());
    take(&e, "k", "w0").await;
    let mut tasks = Vec::new();
    for i in 1..=20 {
        let e = e.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            let s = spec("k", &owner, 60_000, None);
            e.acquire(&s, &CancellationToken::new())
                .await
                .unwrap()
                .unwrap();
            e.release("k", &owner, false).await.unwrap();
        }));
        settle().await;
    }
    e.release("k", "w0", false).await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    // 21 holders: the first 16 releases hand over directly, the 17th really releases (so
    // waiters elsewhere get a chance), then 3 more handoffs, and the last holder's release
    // is real (nobody left to hand to).
    assert_eq!(counting.releases.load(Ordering::SeqCst), 2);
    assert_eq!(e.waiting(), 0);
    assert_eq!(e.inspect("k").await.unwrap(), None);
}

/// Holder `a` of a one-permit semaphore, then waiters `b` (the head) and `c` queued here.
async fn one_permit_held_and_two_waiting(
    probe: &Arc<Probe>,
) -> (Arc<Engine>, Vec<tokio::task::JoinHandle<()>>) {
    let e = Engine::new(probe.clone());
    let permits = |owner: &str, wait| AcquireSpec {
        permits: Some(PermitSpec { count: 1, limit: 1 }),
        ..spec("s", owner, 60_000, wait)
    };
    e.acquire(
        &permits("a", Some(Duration::ZERO)),
        &CancellationToken::new(),
    )
    .await
    .unwrap()
    .expect("free");
    let mut waiters = Vec::new();
    for owner in ["b", "c"] {
        let (e, s) = (e.clone(), permits(owner, None));
        waiters.push(tokio::spawn(async move {
            e.acquire(&s, &CancellationToken::new())
                .await
                .unwrap()
                .unwrap();
        }));
        settle().await;
    }
    assert_eq!(e.waiting(), 2);
    (e, waiters)
}

#[tokio::test(start_paused = true)]
async fn after_a_permit_handoff_that_leaves_no_room_the_next_waiter_does_not_ask_the_store() {
    let probe = Arc::new(Probe::default());
    let (e, mut waiters) = one_permit_held_and_two_waiting(&probe).await;
    let asked = probe.permit_asks.load(Ordering::SeqCst);
    assert!(e.release_permits("s", "a").await.unwrap());
    waiters.remove(0).await.unwrap();
    settle().await;
    assert_eq!(e.waiting(), 1, "c waits, now at the head");
    assert_eq!(probe.permit_asks.load(Ordering::SeqCst), asked);
    waiters[0].abort();
}

#[tokio::test(start_paused = true)]
async fn after_a_permit_handoff_that_leaves_room_the_next_waiter_asks_at_once() {
    let probe = Arc::new(Probe::default());
    probe.room.store(1, Ordering::SeqCst);
    let (e, mut waiters) = one_permit_held_and_two_waiting(&probe).await;
    let asked = probe.permit_asks.load(Ordering::SeqCst);
    assert!(e.release_permits("s", "a").await.unwrap());
    waiters.remove(0).await.unwrap();
    settle().await;
    assert_eq!(probe.permit_asks.load(Ordering::SeqCst), asked + 1);
    waiters[0].abort();
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_waiter_that_gives_up_leaves_no_place_ahead_of_the_next_request() {
    // The engine's place in the store's queue is given up before the acquisition returns:
    // a request made right after (here without letting any spawned task run) is not held
    // back by a place nobody holds any more.
    let e = engine();
    let permits = |owner: &str, wait| AcquireSpec {
        permits: Some(PermitSpec { count: 1, limit: 1 }),
        ..spec("s", owner, 60_000, wait)
    };
    let none = CancellationToken::new();
    let a = e.acquire(&permits("a", Some(Duration::ZERO)), &none).await;
    assert!(a.unwrap().is_some());
    let b = permits("b", Some(Duration::from_millis(200)));
    assert!(e.acquire(&b, &none).await.unwrap().is_none());
    assert!(e.release_permits("s", "a").await.unwrap());
    let next = e.acquire(&permits("c", Some(Duration::ZERO)), &none).await;
    assert!(next.unwrap().is_some(), "c was held back by b's place");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_granted_while_permits_are_handed_to_it_returns_only_once_the_handoff_lands() {
    // Permits handed to a waiter its own request had just granted: were it to return (and be
    // released) before the handoff reached the store, the handoff would grant them again to
    // an owner that holds nothing, held by nobody until their lease ends.
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    let permits = |owner: &str, wait| AcquireSpec {
        permits: Some(PermitSpec { count: 1, limit: 2 }),
        ..spec("s", owner, 60_000, wait)
    };
    for owner in ["a", "c"] {
        e.acquire(
            &permits(owner, Some(Duration::ZERO)),
            &CancellationToken::new(),
        )
        .await
        .unwrap()
        .expect("free");
    }
    let waiter = {
        let (e, s) = (e.clone(), permits("b", None));
        tokio::spawn(async move { e.acquire(&s, &CancellationToken::new()).await })
    };
    settle().await;
    assert_eq!(e.waiting(), 1);
    // a's release picks b and hands it a's permit, held on its way to the store.
    let (entered, go) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    *probe.handoff_gate.lock().unwrap() = Some((entered.clone(), go.clone()));
    let handing = {
        let e = e.clone();
        tokio::spawn(async move { e.release_permits("s", "a").await })
    };
    entered.notified().await;
    // c's release frees a permit: b's own request takes it.
    assert!(e.release_permits("s", "c").await.unwrap());
    settle().await;
    let mut released = false;
    if waiter.is_finished() {
        // (What a caller does with a grant: use it, release it.)
        assert!(e.release_permits("s", "b").await.unwrap());
        released = true;
    }
    go.notify_one();
    assert!(handing.await.unwrap().unwrap());
    waiter.await.unwrap().unwrap().expect("granted");
    if !released {
        assert!(e.release_permits("s", "b").await.unwrap());
    }
    assert_eq!(
        e.permits("s").await.unwrap(),
        vec![],
        "no permits left held by nobody"
    );
}

#[tokio::test(start_paused = true)]
async fn waiters_that_ask_at_once_are_granted_in_the_order_they_asked_whatever_order_the_store_answers_in(
) {
    // 300 acquisitions of one key made one after the other (as a submission makes them: each
    // takes its first step before the next is made, runtime/first_step.rs), each released as
    // soon as it is granted, on a store that answers later requests sooner.
    let probe = Arc::new(Probe::default());
    probe.later_answers_sooner.store(true, Ordering::SeqCst);
    let e = Engine::new(probe.clone());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (e, order) = (e.clone(), order.clone());
        let mut task = Box::pin(async move {
            let owner = format!("w{i}");
            let s = spec("k", &owner, 60_000, None);
            e.acquire(&s, &CancellationToken::new())
                .await
                .unwrap()
                .expect("granted");
            order.lock().unwrap().push(i);
            e.release("k", &owner, false).await.unwrap();
        });
        let first_step = std::future::Future::poll(
            task.as_mut(),
            &mut std::task::Context::from_waker(std::task::Waker::noop()),
        );
        assert!(first_step.is_pending());
        tasks.push(tokio::spawn(task));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..300).collect::<Vec<_>>());
    assert_eq!(e.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_release_hands_no_permits_past_a_waiter_whose_own_handoff_is_on_its_way() {
    // A read-write lock of two permits (a reader takes one, the writer both): readers a and
    // b read; writer w waits, its own first request still on its way to the store, and
    // reader r waits behind it. a's release hands a's permit on to w (the head); b's
    // release, meanwhile, must not hand b's permit to r, which would read before the writer
    // that asked first.
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    let permits = |owner: &str, count, wait| AcquireSpec {
        permits: Some(PermitSpec { count, limit: 2 }),
        ..spec("s", owner, 60_000, wait)
    };
    let none = CancellationToken::new();
    for owner in ["a", "b"] {
        let s = permits(owner, 1, Some(Duration::ZERO));
        e.acquire(&s, &none).await.unwrap().expect("free");
    }
    let (w_asked, w_go) = probe.hold("w");
    let writer = {
        let (e, s) = (e.clone(), permits("w", 2, None));
        tokio::spawn(async move { e.acquire(&s, &CancellationToken::new()).await })
    };
    w_asked.notified().await;
    let reader = {
        let (e, s) = (e.clone(), permits("r", 1, None));
        tokio::spawn(async move { e.acquire(&s, &CancellationToken::new()).await })
    };
    settle().await;
    assert_eq!(e.waiting(), 2);
    let (handing_entered, handing_go) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    *probe.handoff_gate.lock().unwrap() = Some((handing_entered.clone(), handing_go.clone()));
    let handing = {
        let e = e.clone();
        tokio::spawn(async move { e.release_permits("s", "a").await })
    };
    handing_entered.notified().await;
    assert!(e.release_permits("s", "b").await.unwrap());
    settle().await;
    assert!(
        !reader.is_finished(),
        "the reader was granted before the writer queued ahead of it"
    );
    handing_go.notify_one();
    assert!(handing.await.unwrap().unwrap());
    w_go.notify_one();
    writer
        .await
        .unwrap()
        .unwrap()
        .expect("the writer is granted");
    settle().await;
    assert!(!reader.is_finished(), "the reader reads beside the writer");
    let holders = e.permits("s").await.unwrap();
    assert_eq!(
        holders
            .iter()
            .map(|h| (h.owner.as_str(), h.permits))
            .collect::<Vec<_>>(),
        vec![("w", 2)]
    );
    assert!(e.release_permits("s", "w").await.unwrap());
    reader
        .await
        .unwrap()
        .unwrap()
        .expect("the reader is granted");
}

/// Key "k" held by h; a clean-up of owner o's earlier grant whose first release is held on
/// the wire; w waiting for the key, then o behind it (so o sends nothing of its own before
/// a handoff reaches it). Returns the engine, the gate's "let it through", and w's and o's
/// acquisitions.
async fn an_owner_waiting_behind_its_clean_up() -> (
    Arc<Engine>,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<Result<Option<Grant>, LockError>>,
    tokio::task::JoinHandle<Result<Option<Grant>, LockError>>,
) {
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    take(&e, "k", "h").await;
    let (entered, go) = probe.hold_release("o");
    e.clean_up(Kind::Lock, "k", "o", false, Instant::now(), 60_000);
    entered.notified().await;
    let waiting = |owner: &'static str, retry: Duration| {
        let e = e.clone();
        tokio::spawn(async move {
            let s = AcquireSpec {
                retry_delay: retry,
                ..spec("k", owner, 60_000, Some(Duration::from_secs(30)))
            };
            e.acquire(&s, &CancellationToken::new()).await
        })
    };
    let w = waiting("w", Duration::from_millis(50));
    settle().await;
    let o = waiting("o", Duration::from_secs(20));
    settle().await;
    (e, go, w, o)
}

/// After o was handed `grant` and its clean-up had time to look again: o still holds the
/// key with that grant's token, and nothing is left waiting or cleaning up.
async fn still_held_by_o(e: &Arc<Engine>, grant: Grant) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let info = e
        .inspect("k")
        .await
        .unwrap()
        .expect("the clean-up's release freed the lock handed to o");
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        ("o", grant.token)
    );
    assert_eq!((e.waiting(), e.cleanups()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_lock_is_handed_to_an_owner_only_after_the_release_its_clean_up_has_in_flight() {
    // Owner o's clean-up (of an earlier grant whose outcome was unknown) has a release on the
    // wire when a release would hand the key to o's waiting acquisition. Landing after the
    // handoff, that release would free the lock o was just told it holds: the key is
    // released instead, and o's own request waits for the clean-up's release.
    let (e, go, w, o) = an_owner_waiting_behind_its_clean_up().await;
    assert!(e.release("k", "h", false).await.unwrap());
    w.await.unwrap().unwrap().expect("handed to w");
    let handing = {
        let e = e.clone();
        tokio::spawn(async move { e.release("k", "w", false).await })
    };
    settle().await;
    go.notify_one();
    assert!(handing.await.unwrap().unwrap());
    let grant = o.await.unwrap().unwrap().expect("handed to o");
    still_held_by_o(&e, grant).await;
}

#[tokio::test(start_paused = true)]
async fn permits_are_handed_to_an_owner_only_after_the_release_its_clean_up_has_in_flight() {
    // The same with a semaphore of one permit: the clean-up's release of o's earlier permits,
    // landing after the handoff, would free the permit o was just told it holds.
    let probe = Arc::new(Probe::default());
    let e = Engine::new(probe.clone());
    let one = |owner: &str, retry: Duration| AcquireSpec {
        retry_delay: retry,
        permits: Some(PermitSpec { count: 1, limit: 1 }),
        ..spec("sem", owner, 60_000, Some(Duration::from_secs(30)))
    };
    e.acquire(
        &one("h", Duration::from_millis(50)),
        &CancellationToken::new(),
    )
    .await
    .unwrap()
    .expect("free");
    let (entered, go) = probe.hold_release("o");
    e.clean_up(Kind::Permits, "sem", "o", false, Instant::now(), 60_000);
    entered.notified().await;
    let waiting = |s: AcquireSpec| {
        let e = e.clone();
        tokio::spawn(async move { e.acquire(&s, &CancellationToken::new()).await })
    };
    let w = waiting(one("w", Duration::from_millis(50)));
    settle().await;
    let o = waiting(one("o", Duration::from_secs(20)));
    settle().await;
    assert!(e.release_permits("sem", "h").await.unwrap());
    w.await.unwrap().unwrap().expect("handed to w");
    let handing = {
        let e = e.clone();
        tokio::spawn(async move { e.release_permits("sem", "w").await })
    };
    settle().await;
    go.notify_one();
    assert!(handing.await.unwrap().unwrap());
    let grant = o.await.unwrap().unwrap().expect("handed to o");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let holders = e.permits("sem").await.unwrap();
    assert_eq!(
        holders
            .iter()
            .map(|h| (h.owner.as_str(), h.fencing_token))
            .collect::<Vec<_>>(),
        vec![("o", grant.token)],
        "the clean-up's release freed the permit handed to o"
    );
    assert_eq!((e.waiting(), e.cleanups()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_lock_handed_to_an_owner_between_its_clean_ups_releases_stops_that_clean_up() {
    // Owner o's clean-up was answered "not held" once and pauses before it looks again, when
    // a release hands the key to o's waiting acquisition: the handoff goes out and the
    // clean-up stops, so its next release never frees the lock o was just told it holds.
    let (e, go, w, o) = an_owner_waiting_behind_its_clean_up().await;
    // The clean-up's release is answered (the key is h's) and the clean-up pauses.
    go.notify_one();
    settle().await;
    assert_eq!(e.cleanups(), 1, "the clean-up goes on after one answer");
    assert!(e.release("k", "h", false).await.unwrap());
    w.await.unwrap().unwrap().expect("handed to w");
    assert!(e.release("k", "w", false).await.unwrap());
    let grant = o.await.unwrap().unwrap().expect("handed to o");
    still_held_by_o(&e, grant).await;
}
