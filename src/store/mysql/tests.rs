//! These run against the MariaDB at `TEST_URL` and fail, not skip, when it is down.

use super::*;
use crate::store::conformance::{name, next_owner, owner, sleep_ms};
use crate::store::{ErrorKind, ValueFormat};
use sqlx::Connection;
use std::time::Instant;
use tokio::task::JoinSet;

pub(super) const TEST_URL: &str = "mysql://root@127.0.0.1:3306/test";
// Its own table, so these tests never meet another suite's rows; names are random uuids,
// so tests running at once never meet each other's.
pub(super) const TEST_TABLE: &str = "deadbolt_locks_mysql_rs_test";

pub(super) fn options(pool_size: u32) -> MysqlOptions {
    MysqlOptions {
        table: TEST_TABLE.to_owned(),
        pool_size,
        connect_timeout_ms: 5000,
        response_timeout_ms: 5000,
        purge_after_ms: 300_000,
        tls: None,
    }
}

fn store() -> MysqlStore {
    MysqlStore::connect(TEST_URL, options(10)).unwrap()
}

/// The token of a grant on a name that has no row: the server clock in microseconds
/// since the epoch (see `SQL_ACQUIRE`), so far above any per-name count.
fn fresh(granted: Option<u64>) -> u64 {
    let token = granted.expect("granted");
    assert!(token > 1_600_000_000_000_000, "{token}");
    token
}

#[tokio::test]
async fn acquire_on_a_new_name_returns_the_clock_and_after_release_the_next_token() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = fresh(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    assert!(s.release(&k, &a).await.unwrap().released);
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        Some(first + 1)
    );
}

#[tokio::test]
async fn a_held_name_returns_none_for_another_owner_and_stays_with_its_holder() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = fresh(
        s.try_acquire(&k, &a, 10_000, Some(b"mine"), ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, Some(b"theirs"), ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(info.owner, a);
    assert_eq!(info.fencing_token, first);
    assert_eq!(info.data.as_deref(), Some(&b"mine"[..]));
    assert!(info.remaining_ms > 9_000, "{info:?}");
}

#[tokio::test]
async fn the_same_owner_acquiring_again_while_holding_gets_none() {
    let s = store();
    let (k, a) = (name(), owner());
    let first = fresh(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    assert_eq!(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().fencing_token, first);
}

#[tokio::test]
async fn an_expired_lease_is_taken_by_another_owner_with_a_higher_token() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = fresh(
        s.try_acquire(&k, &a, 100, Some(b"old"), ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    sleep_ms(250).await;
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, Some(b"new"), ValueFormat::Fenced)
            .await
            .unwrap(),
        Some(first + 1)
    );
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (b.as_str(), first + 1)
    );
    assert_eq!(info.data.as_deref(), Some(&b"new"[..]));
    // The old holder's lease is gone: it can neither extend nor release the new one.
    assert!(!s.extend(&k, &a, 10_000, false).await.unwrap());
    assert!(!s.release(&k, &a).await.unwrap().released);
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, b);
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_across_releases_expiries_and_new_stores() {
    let (k, a) = (name(), owner());
    let mut expected = fresh(
        store()
            .try_acquire(&k, &a, 50, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    sleep_ms(150).await;
    for round in 0..3 {
        // A new store (a new pool) stands in for a restarted client.
        let s = store();
        expected += 1;
        assert_eq!(
            s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
                .await
                .unwrap(),
            Some(expected)
        );
        assert!(s.release(&k, &a).await.unwrap().released);
        expected += 1;
        assert_eq!(
            s.try_acquire(&k, &a, 50, None, ValueFormat::Fenced)
                .await
                .unwrap(),
            Some(expected)
        );
        sleep_ms(150).await;
        s.close().await;
        assert!(round < 3);
    }
}

#[tokio::test]
async fn a_token_from_an_earlier_statement_on_the_same_connection_never_leaks_into_busy() {
    // One connection, so every statement below runs on the connection that just reported
    // a token; a busy acquire must still report busy.
    let s = MysqlStore::connect(TEST_URL, options(1)).unwrap();
    let (k, a, b) = (name(), owner(), owner());
    fresh(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    let other = name();
    let first = fresh(
        s.try_acquire(&other, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    assert!(s.release(&other, &a).await.unwrap().released);
    assert_eq!(
        s.try_acquire(&other, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        Some(first + 1)
    );
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    let pool = s.ready().await.unwrap();
    sqlx::query("SELECT LAST_INSERT_ID(99)")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        s.try_acquire(&other, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn extend_by_the_owner_succeeds_and_by_a_stranger_fails() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    s.try_acquire(&k, &a, 1_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.extend(&k, &a, 60_000, false).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!((59_000..=60_000).contains(&remaining), "{remaining}");
    assert!(!s.extend(&k, &b, 120_000, false).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!(remaining <= 60_000, "{remaining}");
}

#[tokio::test]
async fn extend_can_shorten_a_lease() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.extend(&k, &a, 2_000, false).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!((1_000..=2_000).contains(&remaining), "{remaining}");
}

#[tokio::test]
async fn extend_after_expiry_fails() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 100, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(250).await;
    assert!(!s.extend(&k, &a, 10_000, false).await.unwrap());
    assert_eq!(s.inspect(&k).await.unwrap(), None);
}

#[tokio::test]
async fn extend_of_a_name_never_locked_fails() {
    let s = store();
    assert!(!s.extend(&name(), &owner(), 10_000, false).await.unwrap());
}

#[tokio::test]
async fn release_by_a_stranger_returns_false_and_leaves_the_lock() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(!s.release(&k, &b).await.unwrap().released);
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, a);
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_handoff_gives_the_lock_to_the_next_owner_with_the_next_token() {
    let store = store();
    let (key, a, b) = (name(), owner(), owner());
    let first = store
        .try_acquire(&key, &a, 30_000, Some(b"a-data"), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    let next = crate::store::NextOwner {
        previous_had_data: true,
        ..next_owner(&b, 30_000, ValueFormat::Fenced)
    };
    let token = store.handoff(&key, &a, &next).await.unwrap();
    assert_eq!(token, Some(first + 1));
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.data, info.fencing_token),
        (b.as_str(), None, first + 1)
    );
    assert_eq!(
        store.handoff(&key, &a, &next).await.unwrap(),
        None,
        "a no longer holds it"
    );
    assert!(store.release(&key, &b).await.unwrap().released);
}

#[tokio::test]
async fn release_twice_returns_true_then_false() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.release(&k, &a).await.unwrap().released);
    assert!(!s.release(&k, &a).await.unwrap().released);
}

#[tokio::test]
async fn release_after_expiry_returns_false() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 100, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(250).await;
    assert!(!s.release(&k, &a).await.unwrap().released);
}

#[tokio::test]
async fn inspect_returns_none_for_a_name_never_locked_released_or_expired() {
    let s = store();
    assert_eq!(s.inspect(&name()).await.unwrap(), None);
    let (released, expired, a) = (name(), name(), owner());
    s.try_acquire(&released, &a, 10_000, Some(b"x"), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    s.release(&released, &a).await.unwrap();
    assert_eq!(s.inspect(&released).await.unwrap(), None);
    s.try_acquire(&expired, &a, 100, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(250).await;
    assert_eq!(s.inspect(&expired).await.unwrap(), None);
}

#[tokio::test]
async fn inspect_reports_no_data_when_acquired_without_data() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 100, Some(b"first"), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(250).await;
    s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, None);
}

#[tokio::test]
async fn data_round_trips_binary_bytes_including_zero_and_0xff() {
    let s = store();
    let (k, a) = (name(), owner());
    let mut data: Vec<u8> = (0..=255u8).collect();
    data.extend_from_slice(&[0x00, 0xff, 0x00, b'\'', b'\\', 0xff]);
    s.try_acquire(&k, &a, 10_000, Some(&data), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, Some(data));
}

#[tokio::test]
async fn data_of_a_few_megabytes_round_trips() {
    let s = store();
    let (k, a) = (name(), owner());
    let data: Vec<u8> = (0..3 * 1024 * 1024).map(|_| fastrand::u8(..)).collect();
    s.try_acquire(&k, &a, 10_000, Some(&data), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.inspect(&k).await.unwrap().unwrap().data == Some(data));
}

#[tokio::test]
async fn names_that_differ_only_in_case_or_trailing_spaces_are_different_locks() {
    let s = store();
    let k = name();
    let (a, b, c) = (owner(), owner(), owner());
    fresh(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    let upper = k.to_uppercase();
    fresh(
        s.try_acquire(&upper, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    let spaced = format!("{k} ");
    fresh(
        s.try_acquire(&spaced, &c, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn a_name_longer_than_the_column_is_rejected_instead_of_truncated() {
    let s = store();
    let long = "x".repeat(MAX_KEY_BYTES + 1);
    assert!(s
        .try_acquire(&long, &owner(), 10_000, None, ValueFormat::Fenced)
        .await
        .is_err());
    let base = name();
    let longest = format!("{base}{}", "y".repeat(MAX_KEY_BYTES - base.len()));
    assert_eq!(longest.len(), MAX_KEY_BYTES);
    fresh(
        s.try_acquire(&longest, &owner(), 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn a_ttl_beyond_the_supported_maximum_is_rejected() {
    let s = store();
    assert!(s
        .try_acquire(&name(), &owner(), MAX_TTL_MS + 1, None, ValueFormat::Fenced)
        .await
        .is_err());
    assert!(s
        .try_acquire(&name(), &owner(), MAX_TTL_MS, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_200_concurrent_acquirers_of_a_free_name_wins() {
    let s = Arc::new(store());
    let k = name();
    let mut tasks = JoinSet::new();
    for _ in 0..200 {
        let (s, k) = (s.clone(), k.clone());
        tasks.spawn(async move {
            s.try_acquire(&k, &owner(), 10_000, None, ValueFormat::Fenced)
                .await
        });
    }
    let mut winners = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Some(token) = joined.unwrap().unwrap() {
            winners.push(token);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    fresh(Some(winners[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_200_concurrent_acquirers_of_an_expired_name_wins() {
    let s = Arc::new(store());
    let k = name();
    let first = fresh(
        s.try_acquire(&k, &owner(), 50, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    sleep_ms(150).await;
    let mut tasks = JoinSet::new();
    for _ in 0..200 {
        let (s, k) = (s.clone(), k.clone());
        tasks.spawn(async move {
            s.try_acquire(&k, &owner(), 10_000, None, ValueFormat::Fenced)
                .await
        });
    }
    let mut winners = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Some(token) = joined.unwrap().unwrap() {
            winners.push(token);
        }
    }
    assert_eq!(winners, vec![first + 1]);
}

#[tokio::test]
async fn extend_many_reports_each_items_outcome_in_order() {
    let s = store();
    let (held, expired, taken, never) = (name(), name(), name(), name());
    let (a, b) = (owner(), owner());
    s.try_acquire(&held, &a, 1_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    s.try_acquire(&expired, &a, 50, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    s.try_acquire(&taken, &b, 1_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(150).await;
    let item = |key: &str, owner: &str, ttl_ms: u64| ExtendItem {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl_ms,
        has_data: false,
    };
    let items = vec![
        item(&held, &a, 30_000),
        item(&expired, &a, 30_000),
        item(&taken, &a, 30_000),
        item(&never, &a, 30_000),
        item(&taken, &b, 40_000),
        item(&"z".repeat(MAX_KEY_BYTES + 1), &a, 30_000),
    ];
    let results = s.extend_many(&items).await;
    let outcomes: Vec<Option<bool>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
    assert_eq!(
        outcomes,
        vec![
            Some(true),
            Some(false),
            Some(false),
            Some(false),
            Some(true),
            None
        ]
    );
    let held_left = s.inspect(&held).await.unwrap().unwrap().remaining_ms;
    assert!((29_000..=30_000).contains(&held_left), "{held_left}");
    let taken_left = s.inspect(&taken).await.unwrap().unwrap().remaining_ms;
    assert!((39_000..=40_000).contains(&taken_left), "{taken_left}");
}

#[tokio::test]
async fn extend_many_gives_each_item_its_own_ttl() {
    let s = store();
    let a = owner();
    let keys: Vec<String> = (0..5).map(|_| name()).collect();
    for k in &keys {
        s.try_acquire(k, &a, 1_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
    }
    let items: Vec<ExtendItem> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| ExtendItem {
            key: k.clone(),
            owner: a.clone(),
            ttl_ms: 10_000 * (i as u64 + 1),
            has_data: false,
        })
        .collect();
    let results = s.extend_many(&items).await;
    assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
    for (i, k) in keys.iter().enumerate() {
        let left = s.inspect(k).await.unwrap().unwrap().remaining_ms;
        let ttl = 10_000 * (i as i64 + 1);
        assert!((ttl - 1_000..=ttl).contains(&left), "{i}: {left}");
    }
}

#[tokio::test]
async fn extend_many_with_a_duplicate_item_reports_both_as_extended() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 1_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    let item = ExtendItem {
        key: k.clone(),
        owner: a.clone(),
        ttl_ms: 20_000,
        has_data: false,
    };
    let results = s.extend_many(&[item.clone(), item]).await;
    assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
}

#[tokio::test]
async fn extend_many_over_several_batches_keeps_every_items_place() {
    let s = store();
    let a = owner();
    // 600 items: three batches (256, 256, 88), every seventh not held, so each batch takes
    // the per-item path.
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for i in 0..600 {
        let k = name();
        let held = i % 7 != 3;
        if held {
            s.try_acquire(&k, &a, 5_000, None, ValueFormat::Fenced)
                .await
                .unwrap()
                .unwrap();
        }
        items.push(ExtendItem {
            key: k,
            owner: a.clone(),
            ttl_ms: 20_000,
            has_data: false,
        });
        expected.push(held);
    }
    let got: Vec<bool> = s
        .extend_many(&items)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, expected);
    // And with every item held, the single-statement path answers.
    let held: Vec<ExtendItem> = items
        .into_iter()
        .zip(&expected)
        .filter(|(_, held)| **held)
        .map(|(item, _)| item)
        .collect();
    let got = s.extend_many(&held).await;
    assert!(got.iter().all(|r| matches!(r, Ok(true))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_many_chosen_as_a_deadlock_victim_still_reports_every_outcome() {
    let s = Arc::new(store());
    let (a, prefix) = (owner(), name());
    // `first` sorts before `second`, so the multi-row extend locks `first`, then waits for
    // `second`, which the other transaction holds.
    let (first, second) = (format!("{prefix}:1"), format!("{prefix}:2"));
    for k in [&first, &second] {
        s.try_acquire(k, &a, 60_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
    }
    // Many rows changed make the other transaction the heavier one, so InnoDB rolls back
    // the extend instead.
    for i in 0..50 {
        let filler = format!("{prefix}:filler:{i}");
        s.try_acquire(&filler, &a, 60_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
    }
    let mut other = sqlx::MySqlConnection::connect(TEST_URL).await.unwrap();
    let table = format!("`{TEST_TABLE}`");
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    let touch = format!("UPDATE {table} SET data = 'other' WHERE name LIKE ?");
    sqlx::query(AssertSqlSafe(touch.clone()))
        .bind(format!("{prefix}:filler:%"))
        .execute(&mut other)
        .await
        .unwrap();
    sqlx::query(AssertSqlSafe(touch.clone()))
        .bind(&second)
        .execute(&mut other)
        .await
        .unwrap();
    let items: Vec<ExtendItem> = [&first, &second]
        .into_iter()
        .map(|k| ExtendItem {
            key: k.clone(),
            owner: a.clone(),
            ttl_ms: 30_000,
            has_data: false,
        })
        .collect();
    let extend = tokio::spawn({
        let s = s.clone();
        async move { s.extend_many(&items).await }
    });
    sleep_ms(300).await;
    // Closes the cycle: InnoDB must roll back one side at once.
    let closing = sqlx::query(AssertSqlSafe(touch))
        .bind(&first)
        .execute(&mut other)
        .await;
    sleep_ms(100).await;
    sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
    assert!(
        closing.is_ok(),
        "the other transaction was the victim: {closing:?}"
    );
    let results = extend.await.unwrap();
    assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
}

/// A server error with a chosen SQLSTATE, for testing error classification.
#[derive(Debug)]
struct FakeServerError(&'static str);

impl std::fmt::Display for FakeServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SQLSTATE {}", self.0)
    }
}

impl std::error::Error for FakeServerError {}

impl sqlx::error::DatabaseError for FakeServerError {
    fn message(&self) -> &str {
        "fake"
    }
    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(self.0.into())
    }
    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }
    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

#[tokio::test]
async fn a_deadlock_victim_is_retried_and_other_errors_are_returned_at_once() {
    let fail_with = |state: &'static str, failures: u32| {
        let calls = std::cell::Cell::new(0);
        async move {
            let result = retry_on_conflict(|| {
                calls.set(calls.get() + 1);
                let failing = calls.get() <= failures;
                async move {
                    if failing {
                        Err(sqlx::Error::Database(Box::new(FakeServerError(state))))
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
            (result.is_ok(), calls.get())
        }
    };
    assert_eq!(fail_with("40001", 2).await, (true, 3));
    assert_eq!(fail_with("40001", 10).await, (false, 5));
    assert_eq!(fail_with("HY000", 1).await, (false, 1));
    assert_eq!(fail_with("23000", 1).await, (false, 1));
}

/// A store that purges a free name's row as soon as it is free.
fn purging_at_once() -> MysqlStore {
    let opts = MysqlOptions {
        purge_after_ms: 0,
        ..options(2)
    };
    MysqlStore::connect(TEST_URL, opts).unwrap()
}

#[tokio::test]
async fn a_purged_name_leaves_no_row_and_comes_back_with_a_higher_token() {
    let s = purging_at_once();
    let (k, a) = (name(), owner());
    let first = fresh(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    assert!(s.release(&k, &a).await.unwrap().released);
    let expired = name();
    fresh(
        s.try_acquire(&expired, &a, 1, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    sleep_ms(20).await;
    s.purge().await.unwrap();
    let pool = s.ready().await.unwrap();
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM `{TEST_TABLE}` WHERE name IN (?, ?)"
    )))
    .bind(k.as_bytes())
    .bind(expired.as_bytes())
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(rows, 0, "released and expired names leave no row");
    let again = fresh(
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    assert!(again > first, "{again} > {first}");
}

#[tokio::test]
async fn a_purge_never_deletes_a_held_lock() {
    let s = purging_at_once();
    let (k, a) = (name(), owner());
    let token = fresh(
        s.try_acquire(&k, &a, 60_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
    );
    s.purge().await.unwrap();
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner, info.fencing_token), (a, token));
}

#[tokio::test]
async fn extend_many_of_nothing_returns_nothing() {
    assert!(store().extend_many(&[]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holding_2000_locks_at_once_needs_no_connection_per_lock() {
    let s = Arc::new(
        MysqlStore::connect(
            TEST_URL,
            MysqlOptions {
                // 2000 acquires queue for 3 connections: give the queue time.
                connect_timeout_ms: 120_000,
                ..options(3)
            },
        )
        .unwrap(),
    );
    let a = owner();
    let keys: Vec<String> = (0..2000).map(|_| name()).collect();
    let mut tasks = JoinSet::new();
    for k in keys.clone() {
        let (s, a) = (s.clone(), a.clone());
        tasks.spawn(async move {
            s.try_acquire(&k, &a, 120_000, None, ValueFormat::Fenced)
                .await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        fresh(joined.unwrap().unwrap());
    }
    assert!(s.ready().await.unwrap().size() <= 3);
    let items: Vec<ExtendItem> = keys
        .iter()
        .map(|k| ExtendItem {
            key: k.clone(),
            owner: a.clone(),
            ttl_ms: 120_000,
            has_data: false,
        })
        .collect();
    assert!(s
        .extend_many(&items)
        .await
        .iter()
        .all(|r| matches!(r, Ok(true))));
    let mut tasks = JoinSet::new();
    for k in keys {
        let (s, a) = (s.clone(), a.clone());
        tasks.spawn(async move {
            let busy = s
                .try_acquire(&k, &owner(), 1_000, None, ValueFormat::Fenced)
                .await
                .unwrap();
            let released = s.release(&k, &a).await.unwrap().released;
            (busy, released)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        assert_eq!(joined.unwrap(), (None, true));
    }
}

#[tokio::test]
async fn a_store_pointed_at_a_closed_port_fails_within_the_connect_timeout() {
    let s = MysqlStore::connect(
        "mysql://root@127.0.0.1:1/test",
        MysqlOptions {
            connect_timeout_ms: 1_000,
            ..options(2)
        },
    )
    .unwrap();
    let started = Instant::now();
    let result = s
        .try_acquire(&name(), &owner(), 1_000, None, ValueFormat::Fenced)
        .await;
    let elapsed = started.elapsed();
    assert!(result.is_err());
    assert!(elapsed < Duration::from_millis(2_000), "{elapsed:?}");
    let started = Instant::now();
    assert!(s.ping().await.is_err());
    assert!(started.elapsed() < Duration::from_millis(2_000));
}

#[test]
fn connect_rejects_bad_urls_table_names_and_pool_sizes_without_a_runtime() {
    let bad = |url: &str, opts: MysqlOptions| MysqlStore::connect(url, opts).is_err();
    assert!(bad("not a url", MysqlOptions::default()));
    assert!(bad("redis://127.0.0.1:6379", MysqlOptions::default()));
    assert!(bad(
        "mysql://root@127.0.0.1:notaport/test",
        MysqlOptions::default()
    ));
    assert!(bad(
        "mysql://127.0.0.1/test?sslmode=sometimes",
        MysqlOptions::default()
    ));
    for table in ["", "locks; DROP TABLE x", "a`b", "naïve", &"t".repeat(65)] {
        let opts = MysqlOptions {
            table: table.to_owned(),
            ..MysqlOptions::default()
        };
        assert!(bad(TEST_URL, opts), "{table:?}");
    }
    let opts = MysqlOptions {
        pool_size: 0,
        ..MysqlOptions::default()
    };
    assert!(bad(TEST_URL, opts));
    assert!(MysqlStore::connect("mariadb://root@127.0.0.1/test", MysqlOptions::default()).is_ok());
    assert!(MysqlStore::connect(
        TEST_URL,
        MysqlOptions {
            table: "T_".repeat(32),
            ..MysqlOptions::default()
        }
    )
    .is_ok());
}

#[test]
fn default_options_are_the_documented_ones() {
    let opts = MysqlOptions::default();
    assert_eq!(opts.table, "deadbolt_locks");
    assert_eq!(opts.pool_size, 10);
    assert_eq!(opts.connect_timeout_ms, 5000);
}

#[tokio::test]
async fn ping_answers_and_creates_a_missing_table() {
    let table = format!("deadbolt_ping_{}", uuid::Uuid::new_v4().simple());
    let s = MysqlStore::connect(
        TEST_URL,
        MysqlOptions {
            table: table.clone(),
            ..options(2)
        },
    )
    .unwrap();
    s.ping().await.unwrap();
    let pool = s.ready().await.unwrap();
    let found: Option<MySqlRow> = sqlx::query("SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?")
        .bind(&table)
        .fetch_optional(pool)
        .await
        .unwrap();
    let drop = format!("DROP TABLE `{table}`");
    sqlx::query(AssertSqlSafe(drop))
        .execute(pool)
        .await
        .unwrap();
    assert!(found.is_some());
}

#[tokio::test]
async fn an_account_without_the_create_privilege_uses_an_existing_table_and_fails_on_a_missing_one()
{
    let root = store();
    root.ping().await.unwrap();
    let admin = root.ready().await.unwrap();
    // Only this test uses this account, so creating and dropping it cannot race.
    let setup = format!(
        "CREATE USER IF NOT EXISTS 'deadbolt_dml_test'@'127.0.0.1' IDENTIFIED BY 'pw';
         GRANT SELECT, INSERT, UPDATE ON `{TEST_TABLE}` TO 'deadbolt_dml_test'@'127.0.0.1'"
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(admin)
        .await
        .unwrap();
    let limited = MysqlStore::connect(
        "mysql://deadbolt_dml_test:pw@127.0.0.1:3306/test",
        options(2),
    )
    .unwrap();
    let (k, a) = (name(), owner());
    let acquired = limited
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await;
    let released = limited.release(&k, &a).await;
    limited.close().await;
    let missing = MysqlStore::connect(
        "mysql://deadbolt_dml_test:pw@127.0.0.1:3306/test",
        MysqlOptions {
            table: "deadbolt_never_created".to_owned(),
            ..options(2)
        },
    )
    .unwrap();
    let refused = missing.ping().await;
    missing.close().await;
    sqlx::raw_sql("DROP USER IF EXISTS 'deadbolt_dml_test'@'127.0.0.1'")
        .execute(admin)
        .await
        .unwrap();
    fresh(acquired.unwrap());
    assert!(released.unwrap().released);
    let message = refused.unwrap_err().message;
    assert!(message.contains("creating the lock table"), "{message}");
}

#[tokio::test]
async fn operations_after_close_fail() {
    let s = store();
    s.ping().await.unwrap();
    s.close().await;
    assert!(s
        .try_acquire(&name(), &owner(), 1_000, None, ValueFormat::Fenced)
        .await
        .is_err());
    assert!(s.inspect(&name()).await.is_err());
    let never_used = store();
    never_used.close().await;
    assert!(never_used.ping().await.is_err());
}

#[tokio::test]
async fn the_driver_counts_matched_rows_so_an_unchanged_row_still_counts() {
    // `extend` and `release` read "owned" from the affected count: this pins the
    // CLIENT_FOUND_ROWS behaviour they rely on.
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    let pool = s.ready().await.unwrap();
    let noop = format!("UPDATE `{TEST_TABLE}` SET fence = fence WHERE name = ?");
    let done = sqlx::query(AssertSqlSafe(noop))
        .bind(k.as_bytes())
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
}

#[tokio::test]
#[ignore = "benchmark: cargo test -- --ignored --nocapture"]
async fn sequential_acquire_and_release_latency() {
    let s = store();
    let a = owner();
    s.ping().await.unwrap();
    let mut samples = Vec::new();
    for _ in 0..500 {
        let k = name();
        let started = Instant::now();
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
        assert!(s.release(&k, &a).await.unwrap().released);
        samples.push(started.elapsed());
    }
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "acquire+release of a new name: p50 {:?} p90 {:?} p99 {:?}",
        pick(0.5),
        pick(0.9),
        pick(0.99)
    );
    let k = name();
    let mut samples = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
        assert!(s.release(&k, &a).await.unwrap().released);
        samples.push(started.elapsed());
    }
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "acquire+release of one name again and again: p50 {:?} p90 {:?} p99 {:?}",
        pick(0.5),
        pick(0.9),
        pick(0.99)
    );
}

mod conformance {
    use super::{options, TEST_URL};
    use crate::store::bounded::{bounded, call_timeout};
    use crate::store::conformance::server_or_skip;
    use crate::store::mysql::MysqlStore;
    use crate::store::SharedStore;

    /// The store as the registry opens it: within the call bound.
    fn open() -> Option<SharedStore> {
        server_or_skip("MariaDB", 3306).then(|| {
            let store = MysqlStore::connect(TEST_URL, options(4)).unwrap();
            bounded("mysql", store, call_timeout(5000, 5000))
        })
    }

    crate::conformance_suite!(open());
    crate::permits_suite!(open());
}

#[tokio::test]
async fn a_refused_connection_is_reported_as_such_at_once() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = MysqlStore::connect(
        &format!("mysql://root@127.0.0.1:{port}/test"),
        MysqlOptions {
            connect_timeout_ms: 30_000,
            ..options(1)
        },
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("connection refused"), "{err}");
    // Not after the 30 s connect timeout, as sqlx's pool would.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
