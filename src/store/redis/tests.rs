//! The Redis store against the real server on 127.0.0.1:6379 (skipped with a message when it
//! is down, failed under `CI`): the contract, and what only Redis has (a script cache the
//! server can forget, pub/sub connections that can drop).

use super::{RedisOptions, RedisStore};
use crate::store::conformance::{name, server_or_skip};
use crate::store::{LockStore, ReleaseNotifications};
use std::sync::Arc;
use std::time::Duration;

const URL: &str = "redis://127.0.0.1:6379";

fn open() -> Option<Arc<RedisStore>> {
    server_or_skip("Redis", 6379)
        .then(|| RedisStore::connect(URL, &RedisOptions::default()).unwrap())
}

async fn raw() -> redis::aio::MultiplexedConnection {
    redis::Client::open(URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Runs a command on a connection of its own (not the store's).
async fn raw_command(args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(&mut raw().await).await.unwrap();
}

mod conformance {
    crate::conformance_suite!(super::open().map(|s| s as _));
}

#[tokio::test]
async fn scripts_are_loaded_again_after_the_server_forgot_them() {
    let Some(s) = open() else { return };
    let k = name();
    s.try_acquire(&k, "a", 10_000, None, false)
        .await
        .unwrap()
        .unwrap();
    raw_command(&["SCRIPT", "FLUSH"]).await;
    // Every script, run by hash, meets NOSCRIPT once.
    assert!(LockStore::extend(&*s, &k, "a", 10_000, false)
        .await
        .unwrap());
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, "a");
    let items = [crate::store::ExtendItem {
        key: k.clone(),
        owner: "a".into(),
        ttl_ms: 10_000,
        has_data: false,
    }];
    raw_command(&["SCRIPT", "FLUSH"]).await;
    assert!(s.extend_many(&items).await[0].as_ref().unwrap());
    assert!(LockStore::release(&*s, &k, "a").await.unwrap().released);
}

#[tokio::test]
async fn a_killed_connection_is_replaced_within_the_same_call() {
    let Some(s) = open() else { return };
    let k = name();
    s.try_acquire(&k, "a", 10_000, None, false)
        .await
        .unwrap()
        .unwrap();
    raw_command(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]).await;
    assert!(LockStore::release(&*s, &k, "a").await.unwrap().released);
}

#[tokio::test]
async fn release_announcements_resume_after_the_subscriber_connection_dropped() {
    let Some(s) = open() else { return };
    let k = name();
    let mut releases = s.releases();
    s.watch(&k).await;
    raw_command(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    // Another process releases the key, again and again until it is heard: the watch must
    // come back by itself.
    let other = RedisStore::connect(URL, &RedisOptions::default()).unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            other
                .try_acquire(&k, "b", 10_000, None, false)
                .await
                .unwrap();
            LockStore::release(&*other, &k, "b").await.unwrap();
            if let Ok(Ok(key)) =
                tokio::time::timeout(Duration::from_millis(100), releases.recv()).await
            {
                return key;
            }
        }
    })
    .await
    .expect("no announcement reached the watcher after its connection dropped");
    assert_eq!(heard, k);
    s.unwatch(&k).await;
    assert_eq!(s.watched(), 0);
}

#[tokio::test]
async fn an_acquire_that_finds_its_own_lock_returns_its_token_with_a_fresh_lease() {
    let Some(s) = open() else { return };
    let k = name();
    let token = s
        .try_acquire(&k, "a", 200, Some(b"x"), false)
        .await
        .unwrap()
        .unwrap();
    // The request that finds the caller's lock (a retry, or a race with a local handoff to
    // it) reports the lease as running from now: the store must agree.
    let again = s.try_acquire(&k, "a", 60_000, Some(b"x"), false).await;
    assert_eq!(again.unwrap(), Some(token));
    let info = s.inspect(&k).await.unwrap().expect("held");
    assert!(info.remaining_ms > 50_000, "lease not renewed: {info:?}");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(super::keys::data_key(&k))
        .query_async(&mut raw().await)
        .await
        .unwrap();
    assert!(pttl > 50_000, "payload lease not renewed: {pttl}");
    assert!(LockStore::release(&*s, &k, "a").await.unwrap().released);
}

#[tokio::test]
async fn a_rediss_url_to_a_plaintext_server_fails_as_a_tls_handshake_within_the_connect_timeout() {
    if !server_or_skip("Redis", 6379) {
        return;
    }
    let opts = RedisOptions {
        connect_timeout_ms: 300,
        response_timeout_ms: 30_000,
        tls: None,
    };
    // The plaintext server on 6379, reached as if it spoke TLS.
    let s = RedisStore::connect("rediss://127.0.0.1:6379/#insecure", &opts).unwrap();
    let started = std::time::Instant::now();
    let err = s.ping().await.unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(err.kind, crate::store::ErrorKind::Unreachable, "{err}");
    assert!(
        err.message
            .contains("TLS handshake with 127.0.0.1:6379 failed"),
        "{err}"
    );
    // Not redis-rs's handshake timed out and retried: the check's one connect time-out.
    assert!(elapsed < Duration::from_millis(300 * 2), "{elapsed:?}");
}
