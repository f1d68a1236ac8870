//! What only the Redis semaphore has, against the server on 127.0.0.1:6379 (skipped with a
//! message when it is down, failed under `CI`): one expiring key per semaphore, the server's
//! clock, a script cache the server can forget, and the ticket order Redlock relies on.

use super::KeepPlace;
use crate::store::conformance::{heard, name, owner, server_or_skip, AcquireFenced};
use crate::store::permit_conformance::{item, queued, req, watching, Ask};
use crate::store::permits::watch_key;
use crate::store::redis::keys::permits_key;
use crate::store::redis::{RedisOptions, RedisStore};
use crate::store::Renewal;
use crate::store::{LockStore, PermitRequest};
use std::sync::Arc;

const URL: &str = "redis://127.0.0.1:6379";

fn open() -> Option<Arc<RedisStore>> {
    server_or_skip("Redis", 6379)
        .then(|| RedisStore::connect(URL, &RedisOptions::default()).unwrap())
}

async fn query<T: redis::FromRedisValue>(cmd: &mut redis::Cmd) -> T {
    let mut conn = crate::store::test_servers::redis_connection(URL).await;
    cmd.query_async(&mut conn).await.unwrap()
}

fn state(n: &str) -> Vec<u8> {
    permits_key(&watch_key(n))
}

#[tokio::test]
async fn a_semaphore_is_one_key_that_expires_with_its_last_lease_or_place() {
    let Some(s) = open() else { return };
    let (n, a, w) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    let pttl: i64 = query(redis::cmd("PTTL").arg(state(&n))).await;
    assert!(pttl > 5_000 && pttl <= 10_000, "{pttl}");
    s.refuse(&PermitRequest {
        queue_ttl_ms: 60_000,
        ..req(&n, &w, 1, 1)
    })
    .await;
    let pttl: i64 = query(redis::cmd("PTTL").arg(state(&n))).await;
    assert!(pttl > 50_000, "the waiter's place keeps the state: {pttl}");
}

#[tokio::test]
async fn a_semaphore_with_nobody_holding_or_queued_leaves_no_key() {
    let Some(s) = open() else { return };
    let (n, a, w) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    s.refuse(&queued(&n, &w, 1, 1)).await;
    assert!(s.permits_released(&n, &a).await);
    assert!(!s.permits_released(&n, &w).await);
    let exists: i64 = query(redis::cmd("EXISTS").arg(state(&n))).await;
    assert_eq!(exists, 0);
}

/// The state is written with expiries on the server's `TIME` (here by a script of the test's
/// own, in the store's format): a lease is what is left of it by that clock.
#[tokio::test]
async fn leases_are_reckoned_on_the_servers_clock() {
    let Some(s) = open() else { return };
    let n = name();
    let write = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], cmsgpack.pack({2, 2, 'gone', 1, '7', now - 1, 'kept', 1, '8',
  now + 42000}), 'PX', 60000)
"#;
    let _: () = query(redis::cmd("EVAL").arg(write).arg(1).arg(state(&n))).await;
    let holders = s.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(
        (holders[0].owner.as_str(), holders[0].fencing_token),
        ("kept", 8)
    );
    let left = holders[0].remaining_ms;
    assert!(left > 30_000 && left <= 42_000, "{left}");
    // The lapsed holder's permit is free: one of two is left.
    s.grant(&req(&n, &owner(), 1, 2)).await;
    s.refuse(&req(&n, &owner(), 1, 2)).await;
}

#[tokio::test]
async fn the_semaphore_script_is_loaded_again_after_the_server_forgot_it() {
    let Some(s) = open() else { return };
    let (n, a) = (name(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    // A call by hash meets NOSCRIPT, one by one and in a batch.
    let _: () = query(redis::cmd("SCRIPT").arg("FLUSH")).await;
    assert!(s
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap());
    let _: () = query(redis::cmd("SCRIPT").arg("FLUSH")).await;
    assert_eq!(s.extend_all(&[item(&n, &a, 10_000)]).await, [true]);
    assert!(s.permits_released(&n, &a).await);
}

/// Redlock sends one ticket to every server: a waiter with an earlier ticket is ahead of one
/// that arrived first with a later ticket.
#[tokio::test]
async fn ticketed_waiters_are_queued_in_ticket_order() {
    let Some(s) = open() else { return };
    let (n, a, early, late) = (name(), owner(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    let ask = async |o: &str, ticket: u64| {
        let r = queued(&n, o, 1, 1);
        s.acquire_permits_ticketed(&r, ticket, None).await.unwrap()
    };
    assert_eq!(ask(&late, 20).await, None);
    assert_eq!(ask(&early, 10).await, None);
    assert!(s.permits_released(&n, &a).await);
    assert_eq!(ask(&late, 20).await, None);
    assert!(ask(&early, 10).await.is_some());
}

/// Redlock's undo of a partial grant gives the permits back and keeps the request's place.
#[tokio::test]
async fn a_release_that_keeps_the_place_frees_the_permits_and_still_holds_others_back() {
    let Some(s) = open() else { return };
    let (n, w) = (name(), owner());
    s.grant(&req(&n, &w, 2, 2)).await;
    let keep = KeepPlace {
        permits: 2,
        queue_ttl_ms: 10_000,
        ticket: 5,
    };
    let (outcome, limit) = s
        .release_permits_keeping(&n, &w, Some(keep), None)
        .await
        .unwrap();
    assert!(outcome.released);
    assert_eq!(limit, 2);
    assert!(s.permits(&n).await.unwrap().is_empty());
    // One permit would fit, but the waiter for both is ahead.
    s.refuse(&req(&n, &owner(), 1, 2)).await;
}

/// A waiter asks every poll period, far more often than half its place's time: a refused poll
/// that finds more than half of it left renews nothing and writes nothing.
#[tokio::test]
async fn a_refused_poll_with_more_than_half_its_place_left_leaves_the_state_as_it_was() {
    let Some(s) = open() else { return };
    let (n, a, w) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    let place = |qttl| PermitRequest {
        queue_ttl_ms: qttl,
        ..req(&n, &w, 1, 1)
    };
    s.refuse(&place(60_000)).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.refuse(&place(60_000)).await;
    let pttl: i64 = query(redis::cmd("PTTL").arg(state(&n))).await;
    assert!(pttl <= 59_960, "the place was renewed: {pttl}");
    // Less than half of a longer place is left: renewed.
    s.refuse(&place(200_000)).await;
    let pttl: i64 = query(redis::cmd("PTTL").arg(state(&n))).await;
    assert!(pttl > 150_000, "the place was not renewed: {pttl}");
}

/// The engine lets its next waiter look at once only if that waiter's request could fit.
#[tokio::test]
async fn a_handoff_reports_the_permits_a_newcomer_would_find_beside_holders_and_queue() {
    let Some(s) = open() else { return };
    let (n, a, b, c, q) = (name(), owner(), owner(), owner(), owner());
    for (o, permits) in [(&a, 2), (&b, 1)] {
        s.grant(&req(&n, o, permits, 5)).await;
    }
    s.refuse(&queued(&n, &q, 3, 5)).await;
    let h = s
        .handoff_permits_once(&a, &req(&n, &c, 1, 5))
        .await
        .unwrap();
    assert!(h.released);
    assert!(h.granted.is_some(), "c fits beside b and behind q");
    assert_eq!(h.room, Some(0), "b's one, c's one and q's three");
    let h = s
        .handoff_permits_once(&c, &req(&n, &owner(), 4, 5))
        .await
        .unwrap();
    assert_eq!(h.granted, None, "q is ahead");
    assert_eq!(h.room, Some(1), "b's one and q's three");
    assert!(!s.permits_released(&n, &q).await);
    let h = s
        .handoff_permits_once(&b, &req(&n, &owner(), 2, 5))
        .await
        .unwrap();
    assert!(h.granted.is_some());
    assert_eq!(h.room, Some(3));
}

/// Has `watcher` watch a fresh semaphore, then has `s` grant one permit of two and hand it
/// over to another owner, which leaves a permit free. Returns the watcher's receiver, the
/// watch key, the semaphore, the next owner and the handoff.
async fn watched_handoff(
    s: &RedisStore,
    watcher: &RedisStore,
) -> (
    tokio::sync::broadcast::Receiver<String>,
    String,
    String,
    String,
    crate::store::PermitHandoff,
) {
    let (n, a, b) = (name(), owner(), owner());
    let (rx, key) = watching(watcher.release_notifications().unwrap(), &n).await;
    s.acquire_permits(&req(&n, &a, 1, 2))
        .await
        .unwrap()
        .unwrap();
    let h = s
        .handoff_permits_once(&a, &req(&n, &b, 1, 2))
        .await
        .unwrap();
    (rx, key, n, b, h)
}

/// The caller's waiters learn from the handoff's reply; an announcement only its own
/// subscriber hears would wake its head to ask in vain.
#[tokio::test]
async fn a_handoff_leaving_permits_is_not_announced_when_only_the_callers_store_listens() {
    let Some(s) = open() else { return };
    let (mut rx, key, n, b, h) = watched_handoff(&s, &s).await;
    assert_eq!(h.room, Some(1));
    assert!(!heard(&mut rx, &key, 300).await, "announced to itself");
    // A plain release still is.
    assert!(s.permits_released(&n, &b).await);
    assert!(
        heard(&mut rx, &key, 5_000).await,
        "the release was not announced"
    );
    s.release_notifications().unwrap().unwatch(&key).await;
}

#[tokio::test]
async fn a_handoff_leaving_permits_is_announced_to_a_store_elsewhere() {
    let Some(s) = open() else { return };
    let other = open().unwrap();
    let (mut rx, key, _, _, h) = watched_handoff(&s, &other).await;
    assert!(h.granted.is_some());
    assert!(
        heard(&mut rx, &key, 5_000).await,
        "the handoff was not announced"
    );
    other.release_notifications().unwrap().unwatch(&key).await;
}

/// Redlock tags a grant with its attempt: another attempt of the same owner is refused it
/// and its give-back frees nothing, while the owner's own listing, extension and release (by
/// owner, untagged) see the permits as before.
#[tokio::test]
async fn an_attempts_grant_is_its_own_and_only_its_give_back_frees_it() {
    let Some(s) = open() else { return };
    let (n, a) = (name(), owner());
    let r = req(&n, &a, 1, 2);
    let first = s.acquire_permits_ticketed(&r, 0, Some(1)).await.unwrap();
    assert!(first.is_some());
    assert_eq!(
        s.acquire_permits_ticketed(&r, 0, Some(1)).await.unwrap(),
        first,
        "the same attempt asking again gets its own token"
    );
    assert_eq!(
        s.acquire_permits_ticketed(&r, 0, Some(2)).await.unwrap(),
        None
    );
    let (outcome, _) = s
        .release_permits_keeping(&n, &a, None, Some(2))
        .await
        .unwrap();
    assert!(
        !outcome.released,
        "another attempt's give-back frees nothing"
    );
    assert!(!s
        .raise_permit_token(&n, &a, 1 << 40, Some(2))
        .await
        .unwrap());
    let holders = s.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].owner.as_str(), holders[0].fencing_token),
        (a.as_str(), first.unwrap())
    );
    assert!(s
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap());
    let (outcome, _) = s
        .release_permits_keeping(&n, &a, None, Some(1))
        .await
        .unwrap();
    assert!(outcome.released, "its own give-back frees it");
    assert!(s.permits(&n).await.unwrap().is_empty());
    // An untagged request and release go by the owner, whatever attempt holds.
    let third = s.acquire_permits_ticketed(&r, 0, Some(3)).await.unwrap();
    assert!(third.is_some());
    assert_eq!(
        s.acquire_permits_ticketed(&r, 0, None).await.unwrap(),
        third
    );
    assert!(s.permits_released(&n, &a).await);
}
