//! The clean-up of grants whose reply was lost, on a memory store that loses replies as told,
//! with tokio's paused clock.

use super::super::{Engine, Grant};
use crate::core::options::AcquireSpec;
use crate::store::memory::MemoryStore;
use crate::store::{Acquisition, Batch, Call, Release};
use crate::store::{
    ErrorKind, ExtendItem, LockInfo, LockStore, ReleaseOutcome, StoreError, ValueFormat,
};
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A memory store whose acquisitions fail as `acquire_error` says (after granting, unless
/// `acquire_lands_later`: the request is then held and granted only by [`Lossy::land`]),
/// and whose releases fail with a time-out while `release_silent` is more than 0 (having
/// acted when `silent_acts`: only the reply was lost), or are answered only after
/// `release_delay`.
#[derive(Default)]
struct Lossy {
    inner: MemoryStore,
    acquire_error: Mutex<Option<ErrorKind>>,
    acquire_lands_later: AtomicBool,
    /// The request held back by `acquire_lands_later`: (key, owner, ttl).
    in_flight: Mutex<Option<(String, String, u64)>>,
    release_silent: AtomicU32,
    silent_acts: AtomicBool,
    release_delay: Mutex<Duration>,
    releases: AtomicU32,
    /// The next releases refused with a server error (the store does nothing).
    release_refused: AtomicU32,
}

impl Lossy {
    /// The held-back request reaches the store now.
    fn land(&self) {
        if let Some((key, owner, ttl)) = self.in_flight.lock().unwrap().take() {
            self.inner.try_acquire(&key, &owner, ttl, None);
        }
    }

    fn holder(&self, key: &str) -> Option<String> {
        self.inner.inspect(key).map(|i| i.owner)
    }
}

impl LockStore for Lossy {
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        Box::pin(async move {
            let error = self.acquire_error.lock().unwrap().take();
            if let Some(kind) = error {
                if self.acquire_lands_later.load(Ordering::SeqCst) {
                    *self.in_flight.lock().unwrap() = Some((key.into(), owner.into(), ttl_ms));
                } else if kind.outcome_unknown() {
                    self.inner.try_acquire(key, owner, ttl_ms, data);
                }
                return Err(StoreError::new(kind, "lost reply"));
            }
            Ok(self.inner.try_acquire_or_own(key, owner, ttl_ms, data))
        })
    }
    fn extend<'a>(
        &'a self,
        key: &'a str,
        renewal: crate::store::Renewal<'a>,
    ) -> crate::store::Call<'a, bool> {
        LockStore::extend(&self.inner, key, renewal)
    }
    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        LockStore::extend_many(&self.inner, items)
    }
    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let owner = r.owner;
        Box::pin(async move {
            self.releases.fetch_add(1, Ordering::SeqCst);
            if self
                .release_refused
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(StoreError::new(ErrorKind::Server, "refused"));
            }
            let delay = *self.release_delay.lock().unwrap();
            if self
                .release_silent
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                if self.silent_acts.load(Ordering::SeqCst) {
                    self.inner.release(key, owner);
                }
                tokio::time::sleep(Duration::from_millis(1000)).await;
                return Err(StoreError::timeout("no answer"));
            }
            tokio::time::sleep(delay).await;
            Ok(ReleaseOutcome {
                released: self.inner.release(key, owner),
                others_waiting: false,
            })
        })
    }
    fn handoff<'a>(
        &'a self,
        key: &'a str,
        h: crate::store::Handoff<'a>,
    ) -> crate::store::Call<'a, Option<u64>> {
        LockStore::handoff(&self.inner, key, h)
    }
    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        LockStore::inspect(&self.inner, key)
    }
    fn ping(&self) -> Call<'_, ()> {
        LockStore::ping(&self.inner)
    }
    fn close(&self) -> BoxFuture<'_, ()> {
        LockStore::close(&self.inner)
    }
}

fn setup() -> (Arc<Engine>, Arc<Lossy>) {
    let store = Arc::new(Lossy::default());
    (Engine::new(store.clone()), store)
}

fn spec(owner: &str, ttl_ms: u64) -> AcquireSpec {
    AcquireSpec {
        key: "k".into(),
        owner: owner.into(),
        ttl_ms,
        wait: Some(Duration::ZERO),
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

async fn acquire(e: &Arc<Engine>, owner: &str, ttl_ms: u64) -> Result<Option<Grant>, String> {
    e.acquire(&spec(owner, ttl_ms), &CancellationToken::new())
        .await
        .map_err(|e| format!("{e:?}"))
}

/// Waits (in paused time) until no clean-up runs, at most `ms`.
async fn until_clean(e: &Engine, ms: u64) {
    for _ in 0..ms {
        if e.cleanups() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("a clean-up still runs after {ms} ms");
}

fn fail_next_acquire(store: &Lossy, kind: ErrorKind) {
    *store.acquire_error.lock().unwrap() = Some(kind);
}

#[tokio::test(start_paused = true)]
async fn a_grant_whose_reply_timed_out_is_released_in_the_background() {
    let (e, store) = setup();
    fail_next_acquire(&store, ErrorKind::Timeout);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    assert_eq!(store.holder("k").as_deref(), Some("o"));
    assert_eq!(e.cleanups(), 1);
    until_clean(&e, 100).await;
    assert_eq!(store.holder("k"), None);
}

#[tokio::test(start_paused = true)]
async fn a_connection_broken_in_flight_is_cleaned_up_too_but_a_server_error_is_not() {
    let (e, store) = setup();
    fail_next_acquire(&store, ErrorKind::Unreachable);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    until_clean(&e, 100).await;
    assert_eq!(store.holder("k"), None);
    fail_next_acquire(&store, ErrorKind::Server);
    let releases = store.releases.load(Ordering::SeqCst);
    assert!(acquire(&e, "p", 60_000).await.is_err());
    assert_eq!(e.cleanups(), 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(store.releases.load(Ordering::SeqCst), releases);
}

#[tokio::test(start_paused = true)]
async fn a_clean_up_keeps_releasing_while_the_store_is_silent_and_frees_the_grant_once_it_answers()
{
    let (e, store) = setup();
    store.release_silent.store(3, Ordering::SeqCst);
    fail_next_acquire(&store, ErrorKind::Timeout);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    until_clean(&e, 10_000).await;
    assert_eq!(store.holder("k"), None);
    assert_eq!(store.releases.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn a_clean_up_refused_by_a_server_error_releases_again_and_frees_the_grant() {
    let (e, store) = setup();
    store.release_refused.store(2, Ordering::SeqCst);
    fail_next_acquire(&store, ErrorKind::Timeout);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    until_clean(&e, 10_000).await;
    assert_eq!(store.holder("k"), None, "the grant was left to its lease");
    assert_eq!(store.releases.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn one_not_held_answer_is_not_enough_since_the_release_may_have_overtaken_the_request() {
    let (e, store) = setup();
    store.acquire_lands_later.store(true, Ordering::SeqCst);
    *store.release_delay.lock().unwrap() = Duration::from_millis(5);
    fail_next_acquire(&store, ErrorKind::Timeout);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    // The first release is answered "not held"; the request lands right after it.
    while store.releases.load(Ordering::SeqCst) < 1 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(6)).await;
    store.land();
    assert_eq!(store.holder("k").as_deref(), Some("o"));
    until_clean(&e, 1_000).await;
    assert_eq!(store.holder("k"), None);
}

#[tokio::test(start_paused = true)]
async fn a_clean_up_ends_when_the_lease_is_over_if_the_store_never_answers() {
    let (e, store) = setup();
    store.release_silent.store(u32::MAX, Ordering::SeqCst);
    fail_next_acquire(&store, ErrorKind::Timeout);
    let ttl = 5_000;
    assert!(acquire(&e, "o", ttl).await.is_err());
    tokio::time::sleep(Duration::from_millis(ttl - 1_000)).await;
    assert_eq!(e.cleanups(), 1);
    // One release per second of silence (the time-out) plus the pause after it.
    until_clean(&e, 2_500).await;
    assert!(store.releases.load(Ordering::SeqCst) <= 6);
}

#[tokio::test(start_paused = true)]
async fn an_owner_that_asks_again_keeps_its_new_grant() {
    let (e, store) = setup();
    *store.release_delay.lock().unwrap() = Duration::from_millis(100);
    fail_next_acquire(&store, ErrorKind::Timeout);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    // The clean-up's release is on its way; the same owner asks again meanwhile.
    while store.releases.load(Ordering::SeqCst) < 1 {
        tokio::task::yield_now().await;
    }
    let again = acquire(&e, "o", 60_000).await.unwrap();
    assert!(again.is_some());
    until_clean(&e, 1_000).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(store.holder("k").as_deref(), Some("o"));
}

#[tokio::test(start_paused = true)]
async fn a_clean_up_never_frees_the_lock_of_another_owner() {
    let (e, store) = setup();
    // Releases reach the store, their replies are lost: the first frees the orphan, the next
    // ones find another owner's lock.
    store.silent_acts.store(true, Ordering::SeqCst);
    store.release_silent.store(3, Ordering::SeqCst);
    fail_next_acquire(&store, ErrorKind::Timeout);
    assert!(acquire(&e, "o", 60_000).await.is_err());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(acquire(&e, "other", 60_000).await.unwrap().is_some());
    until_clean(&e, 10_000).await;
    assert!(store.releases.load(Ordering::SeqCst) >= 4);
    assert_eq!(store.holder("k").as_deref(), Some("other"));
}
