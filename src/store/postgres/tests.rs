//! These run against the PostgreSQL at `TEST_URL` and fail, not skip, when it is down.

use super::notify::decode_hex;
use super::*;
use crate::store::conformance::{name, next_owner, owner, sleep_ms};
use crate::store::tls::TlsOptions;
use crate::store::ErrorKind;
use crate::store::ValueFormat;
use sqlx::Connection;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::task::JoinSet;

pub(super) const TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
// Its own table, so these tests never meet another suite's rows; names are random uuids,
// so tests running at once never meet each other's.
pub(super) const TEST_TABLE: &str = "deadbolt_locks_pg_rs_test";

pub(super) fn options(pool_size: u32) -> PostgresOptions {
    PostgresOptions {
        table: TEST_TABLE.to_owned(),
        pool_size,
        connect_timeout_ms: 5000,
        response_timeout_ms: 5000,
        purge_after_ms: 300_000,
        tls: None,
    }
}

pub(super) fn store() -> PostgresStore {
    PostgresStore::connect(TEST_URL, options(4)).unwrap()
}

fn next_for(owner: &str) -> NextOwner<'_> {
    next_owner(owner, 10_000, ValueFormat::Fenced)
}

/// A plain connection to the test database, for looking at or disturbing what the store does.
pub(super) async fn admin() -> sqlx::PgConnection {
    sqlx::PgConnection::connect(TEST_URL).await.unwrap()
}

#[tokio::test]
async fn acquire_on_a_new_name_returns_a_token_and_after_release_a_higher_one() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = s
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.release(&k, &a).await.unwrap().released);
    let second = s
        .try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(second > first, "{second} after {first}");
}

#[tokio::test]
async fn a_held_name_is_refused_to_another_owner_and_stays_with_its_holder() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let token = s
        .try_acquire(&k, &a, 10_000, Some(b"mine"), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, Some(b"theirs"), ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (a.as_str(), token)
    );
    assert_eq!(info.data.as_deref(), Some(&b"mine"[..]));
    assert!(info.remaining_ms > 9_000, "{info:?}");
}

#[tokio::test]
async fn the_holder_asking_again_gets_its_own_token_and_a_new_lease() {
    // What makes a retry after a lost reply safe.
    let s = store();
    let (k, a) = (name(), owner());
    let token = s
        .try_acquire(&k, &a, 2_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.try_acquire(&k, &a, 60_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        Some(token)
    );
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!(remaining > 50_000, "{remaining}");
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_a_higher_token_and_the_old_holder_is_out() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = s
        .try_acquire(&k, &a, 50, Some(b"old"), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(150).await;
    let second = s
        .try_acquire(&k, &b, 10_000, Some(b"new"), ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(second > first);
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.fencing_token),
        (b.as_str(), second)
    );
    assert_eq!(info.data.as_deref(), Some(&b"new"[..]));
    assert!(!s.extend(&k, &a, 10_000, false).await.unwrap());
    assert!(!s.release(&k, &a).await.unwrap().released);
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, b);
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_across_releases_expiries_handoffs_and_new_stores() {
    let k = name();
    let mut last = 0;
    for round in 0..3 {
        // A new store (a new pool) stands in for a restarted client.
        let s = store();
        let (a, b) = (owner(), owner());
        // A long lease for the lock that is handed over: a loaded machine must not expire it
        // before the handoff. The last acquisition of the round is the short one that expires.
        let token = s
            .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
        assert!(token > last, "round {round}: {token} after {last}");
        let handed = s.handoff(&k, &a, &next_for(&b)).await.unwrap().unwrap();
        assert!(handed > token);
        assert!(s.release(&k, &b).await.unwrap().released);
        let expiring = s
            .try_acquire(&k, &a, 50, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
        assert!(expiring > handed);
        last = expiring;
        sleep_ms(100).await;
        s.close().await;
    }
}

#[tokio::test]
async fn a_retried_handoff_finds_the_lock_with_the_next_owner_and_returns_its_token() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    s.try_acquire(&k, &a, 10_000, Some(b"a"), ValueFormat::Fenced)
        .await
        .unwrap();
    let token = s.handoff(&k, &a, &next_for(&b)).await.unwrap().unwrap();
    assert_eq!(s.handoff(&k, &a, &next_for(&b)).await.unwrap(), Some(token));
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner, info.data), (b, None));
}

#[tokio::test]
async fn a_released_row_is_free_even_when_dated_after_the_acquirers_clock_reading() {
    // An acquisition reads the clock, then may wait for the row lock while a release commits
    // with a later `expires_at`: the row must still count as free. Dated an hour ahead here.
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = s
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{TEST_TABLE}\" SET owner = NULL, expires_at = clock_timestamp() + interval '1 hour' WHERE name = $1"
    )))
    .bind(k.as_bytes())
    .execute(&mut admin().await)
    .await
    .unwrap();
    let second = s
        .try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(second > first);
}

#[tokio::test]
async fn extend_by_the_owner_succeeds_and_can_shorten_and_by_a_stranger_fails() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    s.try_acquire(&k, &a, 1_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.extend(&k, &a, 60_000, false).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!((59_000..=60_000).contains(&remaining), "{remaining}");
    assert!(s.extend(&k, &a, 2_000, false).await.unwrap());
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!((1_000..=2_000).contains(&remaining), "{remaining}");
    assert!(!s.extend(&k, &b, 120_000, false).await.unwrap());
    assert!(!s.extend(&name(), &a, 1_000, false).await.unwrap());
}

#[tokio::test]
async fn extend_after_expiry_fails_and_inspect_sees_nothing() {
    let s = store();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 50, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(150).await;
    assert!(!s.extend(&k, &a, 10_000, false).await.unwrap());
    assert_eq!(s.inspect(&k).await.unwrap(), None);
}

#[tokio::test]
async fn extend_many_reports_each_items_outcome_in_order_duplicates_included() {
    let s = store();
    let a = owner();
    let held: Vec<String> = (0..3).map(|_| name()).collect();
    for k in &held {
        s.try_acquire(k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap()
            .unwrap();
    }
    let item = |key: &str, owner: &str, ttl_ms: u64| ExtendItem {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl_ms,
        has_data: false,
    };
    let items = vec![
        item(&held[0], &a, 30_000),
        item(&name(), &a, 30_000),
        item(&held[1], &owner(), 30_000),
        item(&held[2], &a, 40_000),
        item(&held[2], &a, 40_000),
        item(&"x".repeat(MAX_KEY_BYTES + 1), &a, 30_000),
    ];
    let results = s.extend_many(&items).await;
    let ok: Vec<Option<bool>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
    assert_eq!(
        ok,
        vec![
            Some(true),
            Some(false),
            Some(false),
            Some(true),
            Some(true),
            None
        ]
    );
    assert_eq!(results[5].as_ref().unwrap_err().kind, ErrorKind::Invalid);
    let remaining = s.inspect(&held[2]).await.unwrap().unwrap().remaining_ms;
    assert!((39_000..=40_000).contains(&remaining), "{remaining}");
    assert!(s.extend_many(&[]).await.is_empty());
}

#[tokio::test]
async fn release_by_a_stranger_or_twice_or_after_expiry_reports_not_released() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(!s.release(&k, &b).await.unwrap().released);
    assert!(s.release(&k, &a).await.unwrap().released);
    assert!(!s.release(&k, &a).await.unwrap().released);
    let expiring = name();
    s.try_acquire(&expiring, &a, 50, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(150).await;
    assert!(!s.release(&expiring, &a).await.unwrap().released);
}

#[tokio::test]
async fn names_are_bytes_exact_including_nul_case_and_trailing_spaces() {
    let s = store();
    let base = name();
    let a = owner();
    for k in [
        base.clone(),
        base.to_uppercase(),
        format!("{base} "),
        format!("{base}\0"),
    ] {
        assert!(
            s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
                .await
                .unwrap()
                .is_some(),
            "{k:?} is a lock of its own"
        );
    }
    let info = s.inspect(&format!("{base}\0")).await.unwrap().unwrap();
    assert_eq!(info.owner, a);
}

#[tokio::test]
async fn data_round_trips_every_byte_and_a_few_megabytes() {
    let s = store();
    let (k, a) = (name(), owner());
    let mut data: Vec<u8> = (0..=255u8).cycle().take(3 << 20).collect();
    data.extend_from_slice(b"\0'\\");
    s.try_acquire(&k, &a, 10_000, Some(&data), ValueFormat::Fenced)
        .await
        .unwrap();
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, Some(data));
}

#[tokio::test]
async fn names_owners_and_ttls_beyond_the_limits_are_refused_before_any_io() {
    // Port 1: nothing listens, so only a check before I/O can answer Invalid.
    let s = PostgresStore::connect("postgres://postgres@127.0.0.1:1/test", options(1)).unwrap();
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let long_owner = "o".repeat(MAX_OWNER_BYTES + 1);
    for result in [
        s.try_acquire(&long_key, "o", 1_000, None, ValueFormat::Fenced)
            .await,
        s.try_acquire("k", &long_owner, 1_000, None, ValueFormat::Fenced)
            .await,
        s.try_acquire("k", "o", MAX_TTL_MS + 1, None, ValueFormat::Fenced)
            .await,
    ] {
        assert_eq!(result.unwrap_err().kind, ErrorKind::Invalid);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_200_concurrent_acquirers_of_a_free_or_expired_name_wins() {
    let s = Arc::new(PostgresStore::connect(TEST_URL, options(8)).unwrap());
    for expired in [false, true] {
        let k = name();
        if expired {
            s.try_acquire(&k, &owner(), 1, None, ValueFormat::Fenced)
                .await
                .unwrap()
                .unwrap();
            sleep_ms(20).await;
        }
        let mut tasks = JoinSet::new();
        for _ in 0..200 {
            let (s, k) = (s.clone(), k.clone());
            tasks.spawn(async move {
                s.try_acquire(&k, &owner(), 10_000, None, ValueFormat::Fenced)
                    .await
            });
        }
        let mut winners = 0;
        while let Some(joined) = tasks.join_next().await {
            if joined.unwrap().unwrap().is_some() {
                winners += 1;
            }
        }
        assert_eq!(winners, 1, "expired: {expired}");
    }
}

/// A store whose purge deletes rows as soon as they are free or expired (below the delay
/// `connect` allows, which is what the purge tests need to see rows go).
pub(super) fn purging_soon() -> PostgresStore {
    let mut s = PostgresStore::connect(TEST_URL, options(2)).unwrap();
    s.purge_after = Duration::ZERO;
    s
}

#[test]
fn the_purge_delay_is_never_shorter_than_twice_the_response_bound() {
    let opts = PostgresOptions {
        purge_after_ms: 0,
        response_timeout_ms: 50,
        ..options(2)
    };
    let s = PostgresStore::connect(TEST_URL, opts).unwrap();
    assert_eq!(s.purge_after, Duration::from_millis(100));
}

async fn rows_named(keys: &[&str]) -> i64 {
    let names: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{TEST_TABLE}\" WHERE name = ANY($1)"
    )))
    .bind(names)
    .fetch_one(&mut admin().await)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_purged_name_leaves_no_row_and_comes_back_with_a_higher_token() {
    let s = purging_soon();
    let (k, expired, a) = (name(), name(), owner());
    let first = s
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(s.release(&k, &a).await.unwrap().released);
    s.try_acquire(&expired, &a, 1, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    sleep_ms(20).await;
    s.purge().await.unwrap();
    assert_eq!(rows_named(&[&k, &expired]).await, 0);
    let again = s
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(again > first, "{again} > {first}");
}

#[tokio::test]
async fn a_purge_never_deletes_a_held_lock() {
    let s = purging_soon();
    let (k, a) = (name(), owner());
    let token = s
        .try_acquire(&k, &a, 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .unwrap();
    s.purge().await.unwrap();
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner, info.fencing_token), (a, token));
}

/// Receives the next release announcement, waiting at most 5 s.
pub(super) async fn next_release(
    rx: &mut tokio::sync::broadcast::Receiver<String>,
) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .ok()
        .and_then(Result::ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_announced_to_another_store_that_was_refused_the_lock() {
    let (holder, waiter) = (store(), store());
    let (k, a, b) = (name(), owner(), owner());
    holder
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    let mut releases = waiter.releases();
    waiter.watch(&k).await;
    assert_eq!(
        waiter
            .try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    let outcome = holder.release(&k, &a).await.unwrap();
    assert!(outcome.released && outcome.others_waiting, "{outcome:?}");
    assert_eq!(
        next_release(&mut releases).await.as_deref(),
        Some(k.as_str())
    );
    // The holder takes it again before the waiter: that grant clears the record of who
    // waited, so its release, which nobody was refused since, announces nothing.
    holder
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    let outcome = holder.release(&k, &a).await.unwrap();
    assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    assert!(waiter
        .try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap()
        .is_some());
    waiter.unwatch(&k).await;
    assert_eq!(waiter.watched(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_nobody_elsewhere_waits_for_is_not_announced() {
    let (s, other) = (store(), store());
    let (k, a, b) = (name(), owner(), owner());
    let mut releases = other.releases();
    other.watch(&k).await;
    s.try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    // Refused by its own store: local waiters are woken locally, not through the server.
    assert_eq!(
        s.try_acquire(&k, &b, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap(),
        None
    );
    let outcome = s.release(&k, &a).await.unwrap();
    assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    // A later announcement on the same channel arrives, and it is the only one.
    let marker = name();
    other.watch(&marker).await;
    s.try_acquire(&marker, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    other
        .try_acquire(&marker, &b, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    assert!(s.release(&marker, &a).await.unwrap().others_waiting);
    assert_eq!(
        next_release(&mut releases).await.as_deref(),
        Some(marker.as_str())
    );
    assert!(matches!(releases.try_recv(), Err(TryRecvError::Empty)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_reaches_only_a_waiter_of_exactly_that_name() {
    let (holder, waiter) = (store(), store());
    let a = owner();
    let base = name();
    let mut releases = waiter.releases();
    // Watched: the base name. Released: names that share a prefix, differ in case, or hold
    // a NUL or non-ASCII characters.
    waiter.watch(&base).await;
    let others = [
        format!("{base}x"),
        base.to_uppercase(),
        format!("{base}\0"),
        format!("{base}é"),
    ];
    for k in others.iter().chain([&base]) {
        holder
            .try_acquire(k, &a, 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap();
        waiter
            .try_acquire(k, &owner(), 10_000, None, ValueFormat::Fenced)
            .await
            .unwrap();
        assert!(holder.release(k, &a).await.unwrap().others_waiting);
    }
    assert_eq!(
        next_release(&mut releases).await.as_deref(),
        Some(base.as_str())
    );
    assert!(matches!(releases.try_recv(), Err(TryRecvError::Empty)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_announces_the_release_to_refused_waiters() {
    let (holder, waiter) = (store(), store());
    let (k, a) = (name(), owner());
    holder
        .try_acquire(&k, &a, 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    let mut releases = waiter.releases();
    waiter.watch(&k).await;
    waiter
        .try_acquire(&k, &owner(), 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    assert!(holder.force_release(&k).await.unwrap());
    assert_eq!(
        next_release(&mut releases).await.as_deref(),
        Some(k.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listening_connection_is_reopened_after_the_server_ends_it() {
    // A table (so a channel) of its own, to find this store's listening session.
    let table = format!("deadbolt_listen_{}", uuid::Uuid::new_v4().simple());
    let opts = PostgresOptions {
        table: table.clone(),
        ..options(2)
    };
    let (holder, waiter) = (
        PostgresStore::connect(TEST_URL, opts.clone()).unwrap(),
        PostgresStore::connect(TEST_URL, opts).unwrap(),
    );
    let (k, a) = (name(), owner());
    let mut releases = waiter.releases();
    waiter.watch(&k).await;
    let mut conn = admin().await;
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
    )
    .bind(format!("LISTEN \"{table}\""))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(ended, vec![true]);
    // Reopened: every watched name is announced once (releases may have gone unheard).
    assert_eq!(
        next_release(&mut releases).await.as_deref(),
        Some(k.as_str())
    );
    holder
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    waiter
        .try_acquire(&k, &owner(), 10_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    assert!(holder.release(&k, &a).await.unwrap().others_waiting);
    assert_eq!(
        next_release(&mut releases).await.as_deref(),
        Some(k.as_str())
    );
    holder.close().await;
    waiter.close().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE \"{table}\"; DROP SEQUENCE \"{table}_fence\""
    )))
    .execute(&mut conn)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holding_2000_locks_at_once_needs_no_connection_per_lock() {
    // 2 000 here, beside the other tests; __test__/pg.test.js holds 10 000 through the API.
    let s = Arc::new(
        PostgresStore::connect(
            // Commits without waiting for the disk: this is about connections, not durability,
            // and it keeps the load this puts on the tests running beside it short.
            &format!("{TEST_URL}?options[synchronous_commit]=off"),
            PostgresOptions {
                // 2 000 acquires queue for 3 connections: give the queue time.
                connect_timeout_ms: 120_000,
                ..options(3)
            },
        )
        .unwrap(),
    );
    let a = owner();
    let keys: Vec<String> = (0..2_000).map(|_| name()).collect();
    let mut tasks = JoinSet::new();
    for k in keys.clone() {
        let (s, a) = (s.clone(), a.clone());
        tasks.spawn(async move {
            s.try_acquire(&k, &a, 120_000, None, ValueFormat::Fenced)
                .await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        assert!(joined.unwrap().unwrap().is_some());
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
    assert!(s.ready().await.unwrap().size() <= 3);
}

#[tokio::test]
async fn a_refused_connection_is_reported_as_such_without_the_password() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = PostgresStore::connect(
        &format!("postgres://postgres:S3cretPassw0rd@127.0.0.1:{port}/test"),
        PostgresOptions {
            // Longer than the test runner would wait: only the probe can answer in time.
            connect_timeout_ms: 600_000,
            ..options(1)
        },
    )
    .unwrap();
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unreachable, "{err}");
    assert!(err.message.contains("connection refused"), "{err}");
    assert!(!err.message.contains("S3cret"), "{err}");
    assert!(!format!("{s:?}").contains("S3cret"));
}

#[tokio::test]
async fn a_statement_the_server_holds_past_the_response_bound_fails_as_a_timeout() {
    let s = PostgresStore::connect(
        TEST_URL,
        PostgresOptions {
            response_timeout_ms: 200,
            ..options(1)
        },
    )
    .unwrap();
    let (k, a) = (name(), owner());
    s.try_acquire(&k, &a, 60_000, None, ValueFormat::Fenced)
        .await
        .unwrap();
    // Another session keeps the row locked, so the next statement on it waits.
    let mut conn = admin().await;
    let mut tx = sqlx::Connection::begin(&mut conn).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM \"{TEST_TABLE}\" WHERE name = $1 FOR UPDATE"
    )))
    .bind(k.as_bytes())
    .execute(&mut *tx)
    .await
    .unwrap();
    let err = s.extend(&k, &a, 60_000, false).await.unwrap_err();
    tx.rollback().await.unwrap();
    // Cancelled by the server (`statement_timeout`), not left running behind the caller.
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(err.message.contains("statement timeout"), "{err}");
    assert!(s.extend(&k, &a, 60_000, false).await.unwrap());
}

#[test]
fn connect_rejects_bad_urls_table_names_pool_sizes_and_tls_without_a_runtime() {
    let bad = |url: &str, opts: PostgresOptions| PostgresStore::connect(url, opts).is_err();
    assert!(bad("not a url", PostgresOptions::default()));
    assert!(bad("mysql://127.0.0.1/test", PostgresOptions::default()));
    assert!(bad(
        "postgres://127.0.0.1:notaport/test",
        PostgresOptions::default()
    ));
    assert!(bad(
        "postgres://127.0.0.1/test?sslmode=sometimes",
        PostgresOptions::default()
    ));
    for table in ["", "locks; DROP TABLE x", "a\"b", "naïve", &"t".repeat(58)] {
        let opts = PostgresOptions {
            table: table.to_owned(),
            ..PostgresOptions::default()
        };
        assert!(bad(TEST_URL, opts), "{table:?}");
    }
    let opts = PostgresOptions {
        pool_size: 0,
        ..PostgresOptions::default()
    };
    assert!(bad(TEST_URL, opts));
    let with_tls = |reject_unauthorized: bool| PostgresOptions {
        tls: Some(TlsOptions {
            reject_unauthorized,
            ..TlsOptions::default()
        }),
        ..PostgresOptions::default()
    };
    for (url, reject) in [
        (format!("{TEST_URL}?sslmode=require"), true),
        (format!("{TEST_URL}?sslmode=disable"), false),
        (format!("{TEST_URL}?sslmode=verify-full"), false),
        (format!("{TEST_URL}?sslrootcert=/x.pem"), true),
    ] {
        let refused = match (url.contains("sslrootcert"), reject) {
            (true, _) => PostgresStore::connect(
                &url,
                PostgresOptions {
                    tls: Some(TlsOptions {
                        ca: Some(b"x".to_vec()),
                        ..TlsOptions::default()
                    }),
                    ..PostgresOptions::default()
                },
            ),
            _ => PostgresStore::connect(&url, with_tls(reject)),
        };
        let message = refused.unwrap_err().message;
        assert!(
            message.contains("sslmode") || message.contains("options.tls"),
            "{message}"
        );
    }
    for url in [
        TEST_URL,
        "postgresql://postgres@127.0.0.1/test",
        "POSTGRES://u:p@[::1]:5433/db?sslmode=prefer",
    ] {
        assert!(
            PostgresStore::connect(url, PostgresOptions::default()).is_ok(),
            "{url}"
        );
    }
    assert!(
        PostgresStore::connect(&format!("{TEST_URL}?sslmode=verify-ca"), with_tls(true)).is_ok()
    );
    assert!(PostgresStore::connect(
        TEST_URL,
        PostgresOptions {
            table: "T_".repeat(28),
            ..PostgresOptions::default()
        }
    )
    .is_ok());
}

#[test]
fn default_options_are_the_documented_ones() {
    let opts = PostgresOptions::default();
    assert_eq!(opts.table, "deadbolt_locks");
    assert_eq!(opts.pool_size, 10);
    assert_eq!(opts.connect_timeout_ms, 5000);
    assert_eq!(opts.response_timeout_ms, 5000);
    assert_eq!(opts.purge_after_ms, 300_000);
}

#[test]
fn hex_payloads_decode_to_exactly_the_bytes_they_encode() {
    assert_eq!(decode_hex("6b31").unwrap(), b"k1");
    assert_eq!(decode_hex("00FF").unwrap(), [0, 0xff]);
    assert_eq!(decode_hex("").unwrap(), b"");
    assert_eq!(decode_hex("6"), None);
    assert_eq!(decode_hex("zz"), None);
}

#[tokio::test]
async fn ping_answers_and_creates_a_missing_table_and_its_sequence() {
    let table = format!("deadbolt_ping_{}", uuid::Uuid::new_v4().simple());
    let s = PostgresStore::connect(
        TEST_URL,
        PostgresOptions {
            table: table.clone(),
            ..options(2)
        },
    )
    .unwrap();
    s.ping().await.unwrap();
    let mut conn = admin().await;
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relname IN ($1, $1 || '_fence') ORDER BY 1",
    )
    .bind(&table)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    s.close().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE \"{table}\"; DROP SEQUENCE \"{table}_fence\""
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(found, vec![table.clone(), format!("{table}_fence")]);
}

#[tokio::test]
async fn an_account_without_create_rights_uses_a_table_made_for_it_and_fails_on_a_missing_one() {
    store().ping().await.unwrap();
    let mut conn = admin().await;
    // Only this test uses this role, so creating and dropping it cannot race. A password, so
    // that it logs in whatever the server's rule for 127.0.0.1 is (trust or scram).
    let role = "deadbolt_dml_test";
    let setup = format!(
        "DROP ROLE IF EXISTS {role};
         CREATE ROLE {role} LOGIN PASSWORD 'pw';
         GRANT SELECT, INSERT, UPDATE, DELETE ON \"{TEST_TABLE}\" TO {role};
         GRANT USAGE ON SEQUENCE \"{TEST_TABLE}_fence\" TO {role};
         REVOKE CREATE ON SCHEMA public FROM {role}"
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(&mut conn)
        .await
        .unwrap();
    let url = format!("postgres://{role}:pw@127.0.0.1:5432/test");
    let limited = PostgresStore::connect(&url, options(2)).unwrap();
    let (k, a) = (name(), owner());
    let acquired = limited
        .try_acquire(&k, &a, 10_000, None, ValueFormat::Fenced)
        .await;
    let released = limited.release(&k, &a).await;
    limited.close().await;
    let missing = PostgresStore::connect(
        &url,
        PostgresOptions {
            table: "deadbolt_never_created".to_owned(),
            ..options(2)
        },
    )
    .unwrap();
    let refused = missing.ping().await;
    missing.close().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "REVOKE ALL ON \"{TEST_TABLE}\" FROM {role};
         REVOKE ALL ON SEQUENCE \"{TEST_TABLE}_fence\" FROM {role};
         DROP ROLE {role}"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    assert!(acquired.unwrap().is_some());
    assert!(released.unwrap().released);
    let err = refused.unwrap_err();
    assert!(err.message.contains("creating the lock table"), "{err}");
    assert!(!err.message.contains("pw@"), "{err}");
}

#[tokio::test]
async fn operations_after_close_fail_as_closed() {
    let s = store();
    s.ping().await.unwrap();
    s.close().await;
    let err = s
        .try_acquire(&name(), &owner(), 1_000, None, ValueFormat::Fenced)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed);
    let never_used = store();
    never_used.close().await;
    assert_eq!(never_used.ping().await.unwrap_err().kind, ErrorKind::Closed);
}

mod conformance {
    use super::{options, TEST_URL};
    use crate::store::bounded::{bounded, call_timeout};
    use crate::store::conformance::server_or_skip;
    use crate::store::postgres::PostgresStore;
    use crate::store::SharedStore;

    /// The store as the registry opens it: within the call bound.
    fn open() -> Option<SharedStore> {
        server_or_skip("PostgreSQL", 5432).then(|| {
            let store = PostgresStore::connect(TEST_URL, options(4)).unwrap();
            bounded("postgres", store, call_timeout(5000, 5000))
        })
    }

    crate::conformance_suite!(open());
    crate::permits_suite!(open());
}
