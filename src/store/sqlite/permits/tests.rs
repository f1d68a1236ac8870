//! The SQLite store's own semaphore behaviour, beyond the contract (`permits_suite!` in
//! `sqlite/tests.rs`): the table and its triggers, tokens from the locks' counter, rows that
//! go, and several stores on one file standing for several processes.

use super::super::tests::{
    alone, on_one_file, open, raw, rows, six_stores_take_turns, TempDir, Turns,
};
use super::super::{MAX_KEY_BYTES, MAX_TTL_MS};
use super::*;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, owner, sleep_ms};
use crate::store::permit_conformance::{
    a_holder_and_a_place_that_lapse, acquire_and_release_latency, queued, req, Ask, LAPSE_MS,
};
use crate::store::Acquisition;
use crate::store::{ErrorKind, LockStore, ValueFormat};

const TABLE: &str = "deadbolt_locks_permits";

#[tokio::test]
async fn a_file_made_before_semaphores_gets_their_table_on_first_use() {
    let (_dir, url, s) = alone();
    s.ping().await.unwrap();
    s.close().await;
    // As an older deadbolt left it: the lock tables only.
    let pool = raw(&url).await;
    sqlx::query(AssertSqlSafe(format!("DROP TABLE {TABLE}")))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    open(&url).grant(&req(&name(), &owner(), 1, 2)).await;
    assert_eq!(rows(&url, TABLE).await, 1);
}

#[tokio::test]
async fn permit_tokens_come_from_the_locks_counter_on_every_path_that_grants() {
    let (_dir, url, s) = alone();
    let (n, a, w) = (name(), owner(), owner());
    s.ping().await.unwrap();
    // Far above the clock, so the clock floor cannot hide a missed raise.
    let pool = raw(&url).await;
    sqlx::query("UPDATE deadbolt_locks_fence SET value = 9000000000000000000")
        .execute(&pool)
        .await
        .unwrap();
    let lock = async || {
        let n = name();
        let token = s.try_acquire(&n, Acquisition::fenced(&a, 10_000));
        token.await.unwrap()
    };
    let first = s.grant(&req(&n, &a, 1, 1)).await;
    assert_eq!(first, 9_000_000_000_000_000_001, "an insert raises it");
    assert_eq!(
        lock().await,
        Some(9_000_000_000_000_000_002),
        "locks draw after it"
    );
    s.refuse(&queued(&n, &w, 1, 1)).await;
    assert!(s.permits_released(&n, &a).await);
    // The queued row becomes a holder's through the upsert's update path.
    let granted = s.grant(&queued(&n, &w, 1, 1)).await;
    assert_eq!(granted, 9_000_000_000_000_000_003, "an update raises it");
    assert_eq!(lock().await, Some(9_000_000_000_000_000_004));
}

#[tokio::test]
async fn a_released_semaphore_leaves_no_row_and_its_tokens_keep_increasing_in_a_new_store() {
    let (_dir, url, s) = alone();
    let (n, a, b) = (name(), owner(), owner());
    let first = s.grant(&req(&n, &a, 2, 2)).await;
    assert!(s.permits_released(&n, &a).await);
    assert_eq!(rows(&url, TABLE).await, 0, "nothing left of the semaphore");
    s.close().await;
    drop(s);
    // A new process on the same file.
    let second = open(&url).grant(&req(&n, &b, 2, 2)).await;
    assert!(second > first, "{second} after {first}");
}

#[tokio::test]
async fn lapsed_holders_and_places_are_deleted_at_the_semaphores_next_grant() {
    let (_dir, url, s) = alone();
    let (n, b) = (name(), owner());
    a_holder_and_a_place_that_lapse(&s, &n).await;
    sleep_ms(LAPSE_MS + 100).await;
    s.grant(&req(&n, &b, 2, 2)).await;
    assert_eq!(rows(&url, TABLE).await, 1, "only b's row is left");
}

#[tokio::test]
async fn a_release_deletes_the_semaphores_lapsed_rows_with_the_callers() {
    let (_dir, url, s) = alone();
    let (n, a, b) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 2)).await;
    s.grant(&PermitRequest {
        ttl_ms: 20,
        ..req(&n, &b, 1, 2)
    })
    .await;
    sleep_ms(60).await;
    assert!(s.permits_released(&n, &a).await);
    assert_eq!(rows(&url, TABLE).await, 0);
}

#[tokio::test]
async fn a_purge_deletes_lapsed_permits_nobody_touches_again_and_never_live_ones() {
    let (_dir, url, s) = alone();
    let a = owner();
    for _ in 0..3 {
        s.grant(&PermitRequest {
            ttl_ms: 20,
            ..req(&name(), &a, 1, 1)
        })
        .await;
    }
    let live = name();
    s.grant(&req(&live, &a, 1, 1)).await;
    sleep_ms(60).await;
    assert_eq!(s.purge().await.unwrap(), 3);
    assert_eq!(rows(&url, TABLE).await, 1);
    assert_eq!(s.permits(&live).await.unwrap()[0].owner, a);
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_io() {
    let s = open("sqlite:///nonexistent-dir-for-deadbolt/locks.db");
    let (n, a) = (name(), owner());
    let long = "k".repeat(MAX_KEY_BYTES + 1);
    let err = s.acquire_permits(&req(&long, &a, 1, 1)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
    assert!(err.message.contains("semaphore name"), "{}", err.message);
    let too_long = PermitRequest {
        queue_ttl_ms: MAX_TTL_MS + 1,
        ..req(&n, &a, 1, 1)
    };
    let err = s.acquire_permits(&too_long).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
}

/// Turns at a semaphore: a permit each.
struct PermitTurns;

impl Turns for PermitTurns {
    async fn take(s: &SqliteStore, name: &str, owner: &str, limit: u32) -> Option<u64> {
        s.acquire_permits(&req(name, owner, 1, limit))
            .await
            .unwrap()
    }

    async fn give(s: &SqliteStore, name: &str, owner: &str) -> bool {
        s.permits_released(name, owner).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_on_one_file_never_hold_more_permits_than_the_limit() {
    let mut tokens = six_stores_take_turns::<PermitTurns>(30, 3, true).await;
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 180, "every grant has a token of its own");
}

#[cfg(unix)]
mod wake_ups {
    use super::*;
    use crate::store::conformance::heard;
    use crate::store::permits::watch_key;
    use crate::store::ReleaseNotifications;

    /// Has a store watch semaphore `n` on the file at `url` while another grants and releases
    /// a permit of it; returns whether the release told of others waiting and was heard.
    async fn released_and_heard(url: &str, n: &str) -> (bool, bool) {
        let (waiting, holding, a) = (open(url), open(url), owner());
        holding.grant(&req(n, &a, 1, 1)).await;
        let mut releases = waiting.releases();
        waiting.watch(&watch_key(n)).await;
        let outcome = holding.release_permits(n, Release::new(&a)).await.unwrap();
        assert!(outcome.released, "{outcome:?}");
        let heard = heard(&mut releases, &watch_key(n), 5_000).await;
        (outcome.others_waiting, heard)
    }

    #[tokio::test]
    async fn a_permit_release_in_one_store_wakes_a_watcher_in_another() {
        let dir = TempDir::new();
        assert_eq!(released_and_heard(&dir.url(), &name()).await, (true, true));
    }

    #[tokio::test]
    async fn a_lock_release_does_not_wake_the_watchers_of_the_semaphore_of_its_name() {
        let (_dir, _, waiting, holding) = on_one_file();
        let (n, a) = (name(), owner());
        holding
            .acquire_granted(&n, &a, 10_000, None, ValueFormat::Fenced)
            .await;
        waiting.watch(&watch_key(&n)).await;
        let outcome = holding.release(&n, Release::new(&a)).await.unwrap();
        assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    }

    #[tokio::test]
    async fn the_watch_key_of_the_longest_name_arrives_whole() {
        let (dir, n) = (TempDir::new(), "s".repeat(MAX_KEY_BYTES));
        assert_eq!(released_and_heard(&dir.url(), &n).await, (true, true));
    }

    #[tokio::test]
    async fn a_stores_own_watcher_hears_its_permit_release_without_counting_as_another() {
        let (_dir, _, s) = alone();
        let (n, a) = (name(), owner());
        s.grant(&req(&n, &a, 1, 1)).await;
        let mut releases = s.releases();
        s.watch(&watch_key(&n)).await;
        let outcome = s.release_permits(&n, Release::new(&a)).await.unwrap();
        assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
        assert!(heard(&mut releases, &watch_key(&n), 5_000).await);
    }
}

#[tokio::test]
#[ignore = "benchmark: cargo test -- --ignored --nocapture"]
async fn sequential_permit_acquire_and_release_latency() {
    let (_dir, _, s) = alone();
    s.ping().await.unwrap();
    let [p50, p90, p99] = acquire_and_release_latency(&s, 2000, true).await;
    println!("permits acquire+release: p50 {p50:?} p90 {p90:?} p99 {p99:?}");
}
