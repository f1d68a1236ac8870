//! The semaphore half of the store contract (see [`permits`](super::permits)), as tests any
//! store runs against itself: each store's `tests.rs` invokes [`permits_suite!`] with an
//! expression that opens a fresh store, like [`conformance_suite!`](crate::conformance_suite).

use super::conformance::{heard, name, owner, sleep_ms};
use super::permits::watch_key;
use super::{ExtendItem, LockStore, PermitRequest, ReleaseNotifications, SharedStore};
use crate::store::conformance::AcquireFenced;
use crate::store::ValueFormat;
use crate::store::{Handoff, Release, Renewal};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::Receiver;

/// A try for `permits` of `limit`, with a 10 s lease and no queued place.
pub fn req<'a>(name: &'a str, owner: &'a str, permits: u32, limit: u32) -> PermitRequest<'a> {
    PermitRequest {
        name,
        owner,
        permits,
        limit,
        ttl_ms: 10_000,
        queue_ttl_ms: 0,
    }
}

/// The same request, keeping a place in the queue for 10 s if refused.
pub fn queued<'a>(name: &'a str, owner: &'a str, permits: u32, limit: u32) -> PermitRequest<'a> {
    PermitRequest {
        queue_ttl_ms: 10_000,
        ..req(name, owner, permits, limit)
    }
}

/// Asking for permits with the answer a test expects, on any store (through an `Arc` too).
pub trait Ask: LockStore {
    /// Asks for `r`, which must be granted; returns its token.
    fn grant<'a>(&'a self, r: &'a PermitRequest<'a>) -> impl Future<Output = u64> + Send + 'a {
        async move {
            match self.acquire_permits(r).await.unwrap() {
                Some(token) => token,
                None => panic!("refused: {r:?}"),
            }
        }
    }

    /// Asks for `r`, which must be refused.
    fn refuse<'a>(&'a self, r: &'a PermitRequest<'a>) -> impl Future<Output = ()> + Send + 'a {
        async move { assert_eq!(self.acquire_permits(r).await.unwrap(), None, "{r:?}") }
    }

    /// Extends `items` in one batch, which must not fail; returns what each extension found.
    fn extend_all<'a>(
        &'a self,
        items: &'a [ExtendItem],
    ) -> impl Future<Output = Vec<bool>> + Send + 'a {
        async move {
            let got = self.extend_permits_many(items).await;
            got.into_iter().map(Result::unwrap).collect()
        }
    }
}

impl<S: LockStore + ?Sized> Ask for S {}

/// An extension of `owner`'s permits of semaphore `key` to `ttl_ms`, for a batch.
pub fn item(key: &str, owner: &str, ttl_ms: u64) -> ExtendItem {
    ExtendItem {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl_ms,
        has_data: false,
    }
}

/// Two semaphores left for a purge: one granted and released, one whose only lease lapsed.
pub struct LeftForPurge {
    /// The semaphore granted (token `first`) and released.
    pub released: String,
    /// The semaphore whose holder's lease lapsed.
    pub lapsed: String,
    owner: String,
    first: u64,
}

impl LeftForPurge {
    /// Leaves both semaphores on `s`, the lapsed one's lease ended by the time it returns.
    pub async fn leave<S: LockStore + ?Sized>(s: &S) -> Self {
        let (released, lapsed, owner) = (name(), name(), owner());
        let first = s.grant(&req(&released, &owner, 1, 1)).await;
        assert!(s.permits_released(&released, &owner).await);
        s.grant(&PermitRequest {
            ttl_ms: 1,
            ..req(&lapsed, &owner, 1, 1)
        })
        .await;
        sleep_ms(20).await;
        LeftForPurge {
            released,
            lapsed,
            owner,
            first,
        }
    }

    /// Asserts that the released semaphore is granted again with a higher token than before.
    pub async fn assert_it_comes_back_with_a_higher_token<S: LockStore + ?Sized>(&self, s: &S) {
        let again = s.grant(&req(&self.released, &self.owner, 1, 1)).await;
        assert!(again > self.first, "{again} > {}", self.first);
    }
}

/// How long the holder and the place of [`a_holder_and_a_place_that_lapse`] last: long
/// enough that a loaded machine still queues the place before the holder lapses.
pub const LAPSE_MS: u64 = 300;

/// Grants semaphore `n` one permit of two for [`LAPSE_MS`] and queues a request for both for
/// as long: a holder and a place that lapse together.
pub async fn a_holder_and_a_place_that_lapse<S: LockStore + ?Sized>(s: &S, n: &str) {
    s.grant(&PermitRequest {
        ttl_ms: LAPSE_MS,
        ..req(n, &owner(), 1, 2)
    })
    .await;
    s.refuse(&PermitRequest {
        queue_ttl_ms: LAPSE_MS,
        ..req(n, &owner(), 2, 2)
    })
    .await;
}

/// Has `notes` watch semaphore `n`; returns its announcements and the key `n`'s come under.
pub async fn watching<N>(notes: &N, n: &str) -> (Receiver<String>, String)
where
    N: ReleaseNotifications + ?Sized,
{
    let key = watch_key(n);
    let rx = notes.releases();
    notes.watch(&key).await;
    (rx, key)
}

/// Takes lock `n` for one owner and a permit of semaphore `n` for another; returns both
/// owners, the lock's first.
pub async fn a_lock_and_a_semaphore_of_one_name<S: LockStore + ?Sized>(
    s: &S,
    n: &str,
) -> (String, String) {
    let (a, b) = (owner(), owner());
    s.acquire_granted(n, &a, 10_000, None, ValueFormat::Fenced)
        .await;
    s.grant(&req(n, &b, 1, 1)).await;
    (a, b)
}

/// Times `rounds` acquisitions of a permit (of a fresh semaphore each time, or of one) and
/// their releases on `s`; returns the 50th, 90th and 99th percentiles.
pub async fn acquire_and_release_latency<S: LockStore + ?Sized>(
    s: &S,
    rounds: usize,
    fresh_names: bool,
) -> [Duration; 3] {
    let (a, one) = (owner(), name());
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let n = if fresh_names { name() } else { one.clone() };
        let started = Instant::now();
        s.grant(&req(&n, &a, 1, 3)).await;
        assert!(s.permits_released(&n, &a).await);
        samples.push(started.elapsed());
    }
    samples.sort();
    [0.5, 0.9, 0.99].map(|q| samples[((samples.len() - 1) as f64 * q) as usize])
}

async fn taken(s: &SharedStore, name: &str) -> u32 {
    s.permits(name)
        .await
        .unwrap()
        .iter()
        .map(|h| h.permits)
        .sum()
}

/// Permits are granted up to the limit and refused beyond it; `permits` lists the holders.
pub async fn permits_are_granted_up_to_the_limit_and_no_further(s: SharedStore) {
    let (n, a, b, c) = (name(), owner(), owner(), owner());
    let ta = s.grant(&req(&n, &a, 2, 3)).await;
    let tb = s.grant(&req(&n, &b, 1, 3)).await;
    assert!(tb > ta);
    s.refuse(&req(&n, &c, 1, 3)).await;
    let mut holders = s.permits(&n).await.unwrap();
    holders.sort_by_key(|h| h.fencing_token);
    let seen: Vec<_> = holders
        .iter()
        .map(|h| (h.owner.clone(), h.permits, h.fencing_token))
        .collect();
    assert_eq!(seen, vec![(a, 2, ta), (b, 1, tb)]);
    assert!(holders
        .iter()
        .all(|h| h.remaining_ms > 5_000 && h.remaining_ms <= 10_000));
}

/// A holder asking again gets its own token back and still holds its permits once.
pub async fn an_owner_asking_again_gets_its_own_token(s: SharedStore) {
    let (n, a) = (name(), owner());
    let t = s.grant(&req(&n, &a, 2, 3)).await;
    assert_eq!(s.grant(&req(&n, &a, 2, 3)).await, t);
    assert_eq!(taken(&s, &n).await, 2);
}

/// A queued request for every permit is not overtaken by later requests that would fit
/// beside the current holders (a writer is not starved by readers).
pub async fn a_queued_request_is_not_overtaken_by_one_it_would_delay(s: SharedStore) {
    let (n, r1, w, r2) = (name(), owner(), owner(), owner());
    s.grant(&req(&n, &r1, 1, 3)).await;
    s.refuse(&queued(&n, &w, 3, 3)).await;
    s.refuse(&queued(&n, &r2, 1, 3)).await;
    // A try (not queued) is held back all the same.
    s.refuse(&req(&n, &owner(), 1, 3)).await;
    assert!(s.permits_released(&n, &r1).await);
    s.refuse(&queued(&n, &r2, 1, 3)).await;
    let tw = s.grant(&queued(&n, &w, 3, 3)).await;
    assert!(s.permits_released(&n, &w).await);
    let tr = s.grant(&queued(&n, &r2, 1, 3)).await;
    assert!(tr > tw);
}

/// A queued request asking again (as a waiter polls) keeps its place ahead of requests
/// queued after its first ask.
pub async fn a_queued_request_asking_again_keeps_its_place_ahead_of_later_ones(s: SharedStore) {
    let (n, h, first, second) = (name(), owner(), owner(), owner());
    s.grant(&req(&n, &h, 3, 3)).await;
    s.refuse(&queued(&n, &first, 3, 3)).await;
    s.refuse(&queued(&n, &second, 3, 3)).await;
    // Asking again renews `first`'s place; it must not move behind `second`.
    s.refuse(&queued(&n, &first, 3, 3)).await;
    assert!(s.permits_released(&n, &h).await);
    s.refuse(&queued(&n, &second, 3, 3)).await;
    s.grant(&queued(&n, &first, 3, 3)).await;
}

/// A queued place holds no permits: it is neither extended (alone or in a batch) nor listed
/// among the holders.
pub async fn a_queued_place_is_neither_extended_nor_listed_as_a_holder(s: SharedStore) {
    let (n, a, w) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    s.refuse(&queued(&n, &w, 1, 1)).await;
    assert!(!s
        .extend_permits(&n, Renewal::new(&w, 10_000))
        .await
        .unwrap());
    let got = s
        .extend_all(&[item(&n, &a, 10_000), item(&n, &w, 10_000)])
        .await;
    assert_eq!(got, [true, false]);
    let holders = s.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].owner, a);
}

/// Permits whose lease ended are reclaimed by the store's clock, with higher tokens, and
/// their former holder can neither extend nor release them.
pub async fn expired_permits_are_reclaimed(s: SharedStore) {
    let (n, a, b) = (name(), owner(), owner());
    let short = PermitRequest {
        ttl_ms: 50,
        ..req(&n, &a, 3, 3)
    };
    let first = s.grant(&short).await;
    sleep_ms(150).await;
    let second = s.grant(&req(&n, &b, 3, 3)).await;
    assert!(second > first);
    assert!(!s
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap());
    assert!(!s.permits_released(&n, &a).await);
    assert_eq!(taken(&s, &n).await, 3);
}

/// A queued place that is not renewed lapses and stops holding others back.
pub async fn a_lapsed_queued_place_stops_holding_others_back(s: SharedStore) {
    let (n, a, w, b) = (name(), owner(), owner(), owner());
    s.grant(&req(&n, &a, 1, 3)).await;
    // Long enough that the next request is sure to come before it lapses, even on a loaded
    // machine (a place of 100 ms lapsed in between there).
    let dies = PermitRequest {
        queue_ttl_ms: 1_500,
        ..req(&n, &w, 3, 3)
    };
    s.refuse(&dies).await;
    s.refuse(&req(&n, &b, 1, 3)).await;
    sleep_ms(1_750).await;
    s.grant(&req(&n, &b, 1, 3)).await;
}

/// Tokens strictly increase across releases and expiries of one semaphore.
pub async fn permit_tokens_strictly_increase(s: SharedStore) {
    let n = name();
    let mut last = 0;
    for i in 0..6 {
        let o = owner();
        let r = PermitRequest {
            ttl_ms: if i % 2 == 0 { 10_000 } else { 30 },
            ..req(&n, &o, 1, 1)
        };
        let t = s.grant(&r).await;
        assert!(t > last, "{t} after {last}");
        last = t;
        if i % 2 == 0 {
            assert!(s.permits_released(&n, &o).await);
        } else {
            sleep_ms(80).await;
        }
    }
}

/// Extending is compare-and-set: only the holder extends, and its permits outlive the
/// first lease.
pub async fn extend_permits_is_compare_and_set(s: SharedStore) {
    let (n, a) = (name(), owner());
    // A lease long enough for the first calls on a fresh store of a loaded machine.
    let short = PermitRequest {
        ttl_ms: 1_500,
        ..req(&n, &a, 1, 2)
    };
    s.grant(&short).await;
    assert!(!s
        .extend_permits(&n, Renewal::new(&owner(), 10_000))
        .await
        .unwrap());
    assert!(s
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap());
    sleep_ms(2_000).await;
    assert_eq!(taken(&s, &n).await, 1);
    assert!(s.permits_released(&n, &a).await);
    assert!(!s
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap());
    assert_eq!(taken(&s, &n).await, 0);
}

/// Releasing frees only the caller's permits; a waiter releasing gives up its place.
pub async fn release_permits_frees_only_the_callers(s: SharedStore) {
    let (n, a, w, b) = (name(), owner(), owner(), owner());
    s.grant(&req(&n, &a, 2, 2)).await;
    assert!(
        !s.release_permits(&n, Release::new(&owner()))
            .await
            .unwrap()
            .released
    );
    s.refuse(&queued(&n, &w, 2, 2)).await;
    assert!(!s.permits_released(&n, &w).await);
    assert!(s.permits_released(&n, &a).await);
    assert!(!s.permits_released(&n, &a).await);
    // w gave up its place: b is not held back by it.
    s.grant(&req(&n, &b, 2, 2)).await;
}

/// Batched extensions report each item in order.
pub async fn extend_permits_many_reports_each_item_in_order(s: SharedStore) {
    let (n, m, a, b) = (name(), name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 2)).await;
    s.grant(&req(&m, &b, 1, 2)).await;
    let items = [(&n, &a), (&n, &b), (&m, &b), (&m, &a)].map(|(k, o)| item(k, o, 20_000));
    assert_eq!(s.extend_all(&items).await, [true, false, true, false]);
    assert!(s.permits(&n).await.unwrap()[0].remaining_ms > 10_000);
}

/// A batch that extends several holders of one semaphore gives each its own lease.
pub async fn extend_permits_many_gives_each_holder_of_one_semaphore_its_own_lease(s: SharedStore) {
    let (n, a, b) = (name(), owner(), owner());
    for o in [&a, &b] {
        s.grant(&req(&n, o, 1, 2)).await;
    }
    let got = s
        .extend_all(&[item(&n, &a, 30_000), item(&n, &b, 60_000)])
        .await;
    assert_eq!(got, [true, true]);
    let mut holders = s.permits(&n).await.unwrap();
    holders.sort_by_key(|h| h.remaining_ms);
    assert_eq!(holders[0].owner, a);
    assert!(holders[0].remaining_ms > 20_000 && holders[0].remaining_ms <= 30_000);
    assert_eq!(holders[1].owner, b);
    assert!(holders[1].remaining_ms > 50_000 && holders[1].remaining_ms <= 60_000);
}

/// A semaphore and a lock with the same name never touch each other.
pub async fn a_semaphore_and_a_lock_of_one_name_are_independent(s: SharedStore) {
    let n = name();
    let (a, b) = a_lock_and_a_semaphore_of_one_name(&*s, &n).await;
    assert_eq!(s.inspect(&n).await.unwrap().unwrap().owner, a);
    assert!(s.released(&n, &a).await);
    assert_eq!(taken(&s, &n).await, 1);
    assert!(s.permits_released(&n, &b).await);
    assert_eq!(s.inspect(&n).await.unwrap(), None);
}

/// Of many concurrent tries, at most `limit` permits are granted, and the permits taken are
/// the ones granted; tries after them take what is left, up to the limit and no further.
/// (Redlock may refuse a try that races with others: servers that see the tries in different
/// orders grant different ones, and a grant short of a quorum is given back.)
pub async fn concurrent_requests_never_exceed_the_limit(s: SharedStore) {
    let n = name();
    let tries = (0..12).map(|_| {
        let (s, n) = (s.clone(), n.clone());
        tokio::spawn(async move {
            let o = owner();
            s.acquire_permits(&req(&n, &o, 1, 4)).await.unwrap()
        })
    });
    let granted = futures_util::future::join_all(tries)
        .await
        .into_iter()
        .filter(|r| r.as_ref().unwrap().is_some())
        .count();
    assert!((1..=4).contains(&granted), "{granted} granted");
    assert_eq!(taken(&s, &n).await as usize, granted);
    for _ in granted..4 {
        s.grant(&req(&n, &owner(), 1, 4)).await;
    }
    s.refuse(&req(&n, &owner(), 1, 4)).await;
    assert_eq!(taken(&s, &n).await, 4);
}

/// Where the store announces releases, a release of permits that a waiter elsewhere (a second
/// store on the same server, as another process would have) was refused is announced there
/// under [`watch_key`]. (A store may announce only when such a waiter exists: PostgreSQL
/// does, and leaves its own waiters to the engine.)
pub async fn a_permit_release_is_announced_to_a_waiter_elsewhere(
    s: SharedStore,
    other: SharedStore,
) {
    let Some(notes) = other.release_notifications() else {
        return;
    };
    let (n, a, w) = (name(), owner(), owner());
    let (mut rx, key) = watching(notes, &n).await;
    s.grant(&req(&n, &a, 1, 1)).await;
    other.refuse(&queued(&n, &w, 1, 1)).await;
    assert!(s.permits_released(&n, &a).await);
    let announced = heard(&mut rx, &key, 5_000).await;
    notes.unwatch(&key).await;
    assert!(announced, "no announcement under {key:?}");
}

/// Where the store announces releases, a waiter giving up its place (which frees no permit)
/// is announced to a waiter elsewhere that the place held back, which is then granted; the
/// outcome tells of others waiting just as a release of permits that waiter was refused does.
pub async fn a_waiter_giving_up_its_place_is_announced_to_the_waiters_behind_it_elsewhere(
    s: SharedStore,
    other: SharedStore,
) {
    let Some(notes) = other.release_notifications() else {
        return;
    };
    let (n, a, first, second) = (name(), owner(), owner(), owner());
    let (mut rx, key) = watching(notes, &n).await;
    s.grant(&req(&n, &a, 1, 2)).await;
    s.refuse(&queued(&n, &first, 2, 2)).await;
    // Held back by the place ahead of it, which would not fit beside it.
    other.refuse(&queued(&n, &second, 1, 2)).await;
    let gave_up = s.release_permits(&n, Release::new(&first)).await.unwrap();
    assert!(!gave_up.released, "{gave_up:?}");
    let announced = heard(&mut rx, &key, 5_000).await;
    other.grant(&queued(&n, &second, 1, 2)).await;
    other.refuse(&queued(&n, &owner(), 2, 2)).await;
    let released = s.release_permits(&n, Release::new(&a)).await.unwrap();
    notes.unwatch(&key).await;
    assert!(announced, "no announcement under {key:?}");
    assert!(released.released, "{released:?}");
    assert_eq!(gave_up.others_waiting, released.others_waiting);
}

/// A release of permits the caller did not hold frees nothing and tells nobody, even with a
/// watcher of the semaphore elsewhere.
pub async fn a_release_of_permits_nobody_held_tells_nobody(s: SharedStore, other: SharedStore) {
    let n = name();
    let key = watch_key(&n);
    if let Some(notes) = other.release_notifications() {
        notes.watch(&key).await;
    }
    let outcome = s.release_permits(&n, Release::new(&owner())).await.unwrap();
    if let Some(notes) = other.release_notifications() {
        notes.unwatch(&key).await;
    }
    assert!(!outcome.released && !outcome.others_waiting, "{outcome:?}");
}

/// A place queued through one store holds back a request through another store of the same
/// server (as another process's would), until its waiter gives it up. (Stores that share
/// nothing, as two in-memory ones, have nothing to show.)
pub async fn a_place_queued_through_one_store_holds_back_a_request_through_another(
    s: SharedStore,
    other: SharedStore,
) {
    let (n, a, w, b) = (name(), owner(), owner(), owner());
    s.grant(&req(&n, &a, 1, 2)).await;
    if taken(&other, &n).await == 0 {
        return;
    }
    s.refuse(&queued(&n, &w, 2, 2)).await;
    other.refuse(&req(&n, &b, 1, 2)).await;
    assert!(!s.permits_released(&n, &w).await);
    other.grant(&req(&n, &b, 1, 2)).await;
}

/// A handoff frees the caller's permits and grants the next owner's if they fit, with a
/// higher token; when they do not fit (or the caller held nothing) only the release happens.
pub async fn a_permit_handoff_releases_and_grants_the_next_owner(s: SharedStore) {
    let (n, a, b, c) = (name(), owner(), owner(), owner());
    let ta = s.grant(&req(&n, &a, 2, 3)).await;
    s.grant(&req(&n, &c, 1, 3)).await;
    let h = s
        .handoff_permits(Handoff::new(&a, &queued(&n, &b, 2, 3)))
        .await
        .unwrap();
    assert!(h.released);
    assert!(h.granted.is_some_and(|t| t > ta), "{h:?}");
    assert_eq!(taken(&s, &n).await, 3);
    // Three wanted, one free after b lets go of two (c keeps one): released, not granted.
    let d = owner();
    let h = s
        .handoff_permits(Handoff::new(&b, &queued(&n, &d, 3, 3)))
        .await
        .unwrap();
    assert_eq!((h.released, h.granted), (true, None));
    assert_eq!(taken(&s, &n).await, 1);
    // A caller that held nothing releases nothing, and the next owner is still asked for.
    let h = s
        .handoff_permits(Handoff::new(&owner(), &req(&n, &d, 2, 3)))
        .await
        .unwrap();
    assert!(!h.released);
    assert!(h.granted.is_some());
}

/// A handoff to an owner that already holds permits of the semaphore (a local waiter whose
/// earlier request was granted while its reply was on the way) still frees the caller's
/// permits and reports the next owner's own token, and the room left where the store tells.
pub async fn a_permit_handoff_to_an_owner_that_already_holds_frees_the_callers_permits(
    s: SharedStore,
) {
    let (n, a, b) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 2)).await;
    let token = s.grant(&req(&n, &b, 1, 2)).await;
    let h = s
        .handoff_permits(Handoff::new(&a, &req(&n, &b, 1, 2)))
        .await
        .unwrap();
    assert!(h.released, "{h:?}");
    assert_eq!(h.granted, Some(token), "the next owner's own token");
    let holders = s.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].owner, b);
    // Where the store tells the room left: one permit, beside b's.
    assert!(h.room.is_none_or(|room| room == 1), "{h:?}");
}

/// Defines one `#[tokio::test]` per semaphore contract test above, each with a fresh store
/// from `$open` (an expression of type `Option<SharedStore>`; `None` skips), two for a test
/// that needs a second store (through [`conformance_suite!`](crate::conformance_suite)'s arms).
#[macro_export]
macro_rules! permits_suite {
    ($open:expr) => {
        $crate::conformance_suite!(@tests permit_conformance $open;
            permits_are_granted_up_to_the_limit_and_no_further,
            an_owner_asking_again_gets_its_own_token,
            a_queued_request_is_not_overtaken_by_one_it_would_delay,
            a_queued_request_asking_again_keeps_its_place_ahead_of_later_ones,
            a_queued_place_is_neither_extended_nor_listed_as_a_holder,
            expired_permits_are_reclaimed,
            a_lapsed_queued_place_stops_holding_others_back,
            permit_tokens_strictly_increase,
            extend_permits_is_compare_and_set,
            release_permits_frees_only_the_callers,
            extend_permits_many_reports_each_item_in_order,
            extend_permits_many_gives_each_holder_of_one_semaphore_its_own_lease,
            a_semaphore_and_a_lock_of_one_name_are_independent,
            concurrent_requests_never_exceed_the_limit,
            a_permit_handoff_releases_and_grants_the_next_owner,
            a_permit_handoff_to_an_owner_that_already_holds_frees_the_callers_permits
        );
        $crate::conformance_suite!(@pairs permit_conformance $open;
            a_permit_release_is_announced_to_a_waiter_elsewhere,
            a_waiter_giving_up_its_place_is_announced_to_the_waiters_behind_it_elsewhere,
            a_release_of_permits_nobody_held_tells_nobody,
            a_place_queued_through_one_store_holds_back_a_request_through_another
        );
    };
}
