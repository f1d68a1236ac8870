//! Semaphore tests of the MySQL store beyond `permits_suite!` (in `mysql/tests.rs`): its
//! tables, its transaction, its purge. They run against the MariaDB at `TEST_URL` and fail,
//! not skip, when it is down.

use super::*;
use crate::store::conformance::{name, owner, sleep_ms, AcquireFenced};
use crate::store::mysql::tests::{
    account, drop_account, on_table, options, purging_at_once, PURGE_TABLE, TEST_TABLE, TEST_URL,
};
use crate::store::mysql::MAX_KEY_BYTES;
use crate::store::permit_conformance::{
    a_holder_and_a_place_that_lapse, acquire_and_release_latency, queued, req, Ask, LeftForPurge,
    LAPSE_MS,
};
use crate::store::{ErrorKind, LockStore};
use sqlx::Connection;

fn store() -> MysqlStore {
    MysqlStore::connect(TEST_URL, options(4)).unwrap()
}

/// How many header rows and permit rows semaphore `name` has in the test tables.
async fn rows_of(s: &MysqlStore, name: &str) -> (i64, i64) {
    rows_in(TEST_TABLE, s, name).await
}

/// How many header rows and permit rows semaphore `name` has in the tables of the lock
/// table `table`.
async fn rows_in(table: &str, s: &MysqlStore, name: &str) -> (i64, i64) {
    let pool = s.permits_ready().await.unwrap();
    let (semaphores, permits) = table_names(table);
    let mut counts = [0; 2];
    for (count, table) in counts.iter_mut().zip([semaphores, permits]) {
        *count = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM `{table}` WHERE name = ?"
        )))
        .bind(name.as_bytes())
        .fetch_one(pool)
        .await
        .unwrap();
    }
    (counts[0], counts[1])
}

async fn table_exists(pool: &MySqlPool, table: &str) -> bool {
    sqlx::query("SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?")
        .bind(table)
        .fetch_optional(pool)
        .await
        .unwrap()
        .is_some()
}

#[test]
fn semaphore_tables_are_named_after_the_lock_table() {
    assert_eq!(
        table_names("deadbolt_locks"),
        (
            "deadbolt_locks_semaphores".to_owned(),
            "deadbolt_locks_permits".to_owned()
        )
    );
}

#[test]
fn long_lock_table_names_give_distinct_valid_semaphore_table_names() {
    let a = "a".repeat(64);
    let b = format!("{}b", "a".repeat(63));
    let (sa, pa) = table_names(&a);
    let (sb, pb) = table_names(&b);
    for t in [&sa, &pa, &sb, &pb] {
        assert!(crate::limits::valid_table_name(t), "{t}");
    }
    assert_ne!(sa, sb);
    assert_ne!(pa, pb);
    assert_ne!(sa, pa);
}

#[tokio::test]
async fn the_semaphore_tables_are_created_by_the_first_semaphore_call_only() {
    let table = format!("deadbolt_sem_{}", uuid::Uuid::new_v4().simple());
    let (semaphores, permits) = table_names(&table);
    let s = on_table(&table);
    s.ping().await.unwrap();
    let pool = s.ready().await.unwrap();
    let before = (
        table_exists(pool, &semaphores).await,
        table_exists(pool, &permits).await,
    );
    let granted = s.acquire_permits(&req(&name(), &owner(), 1, 1)).await;
    let after = (
        table_exists(pool, &semaphores).await,
        table_exists(pool, &permits).await,
    );
    let drop = format!("DROP TABLE IF EXISTS `{table}`, `{semaphores}`, `{permits}`");
    sqlx::query(AssertSqlSafe(drop))
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(before, (false, false));
    assert!(granted.unwrap().is_some());
    assert_eq!(after, (true, true));
}

#[tokio::test]
async fn an_account_without_the_create_privilege_uses_existing_semaphore_tables() {
    let root = store();
    root.permits_ready().await.unwrap();
    let admin = root.ready().await.unwrap();
    let (semaphores, permits) = table_names(TEST_TABLE);
    // Only this test uses this account, so creating and dropping it cannot race.
    let user = "deadbolt_sem_dml_test";
    let grants = [
        format!("SELECT, INSERT, UPDATE ON `{TEST_TABLE}`"),
        format!("SELECT, INSERT, UPDATE, DELETE ON `{semaphores}`"),
        format!("SELECT, INSERT, UPDATE, DELETE ON `{permits}`"),
    ];
    let url = account(admin, user, &grants).await;
    let limited = MysqlStore::connect(&url, options(2)).unwrap();
    let (n, a) = (name(), owner());
    let acquired = limited.acquire_permits(&req(&n, &a, 1, 1)).await;
    let released = limited.release_permits(&n, Release::new(&a)).await;
    limited.close().await;
    drop_account(admin, user).await;
    assert!(acquired.unwrap().is_some());
    assert!(released.unwrap().released);
}

#[tokio::test]
async fn a_semaphore_name_too_long_is_rejected_before_any_io() {
    // Nothing listens there: an answer other than "invalid" would mean it was contacted.
    let s = MysqlStore::connect("mysql://root@127.0.0.1:9/test", options(1)).unwrap();
    let long = "x".repeat(MAX_KEY_BYTES + 1);
    let err = s
        .acquire_permits(&req(&long, &owner(), 1, 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
}

#[tokio::test]
async fn lapsed_holders_and_places_leave_no_row_once_their_semaphore_is_touched() {
    let (s, n) = (store(), name());
    a_holder_and_a_place_that_lapse(&s, &n).await;
    assert_eq!(rows_of(&s, &n).await, (1, 2));
    sleep_ms(LAPSE_MS + 100).await;
    s.grant(&req(&n, &owner(), 1, 2)).await;
    assert_eq!(rows_of(&s, &n).await, (1, 1));
}

#[tokio::test]
async fn a_purged_semaphore_leaves_no_row_and_comes_back_with_a_higher_token() {
    let s = purging_at_once();
    let left = LeftForPurge::leave(&s).await;
    s.purge().await.unwrap();
    assert_eq!(rows_in(PURGE_TABLE, &s, &left.released).await, (0, 0));
    assert_eq!(rows_in(PURGE_TABLE, &s, &left.lapsed).await, (0, 0));
    left.assert_it_comes_back_with_a_higher_token(&s).await;
}

#[tokio::test]
async fn a_purge_keeps_live_holders_and_tokens_stay_higher_than_theirs() {
    let s = purging_at_once();
    let (n, a, b) = (name(), owner(), owner());
    let held = s.grant(&req(&n, &a, 1, 2)).await;
    sleep_ms(20).await;
    s.purge().await.unwrap();
    // The header went (no token for longer than the delay); the holder stays.
    assert_eq!(rows_in(PURGE_TABLE, &s, &n).await, (0, 1));
    let holders = s.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].owner.as_str(), holders[0].fencing_token),
        (a.as_str(), held)
    );
    let next = s.grant(&req(&n, &b, 1, 2)).await;
    assert!(next > held, "{next} > {held}");
    assert_eq!(s.grant(&req(&n, &a, 1, 2)).await, held);
    s.refuse(&req(&n, &owner(), 1, 2)).await;
}

#[tokio::test]
async fn leases_do_not_depend_on_the_session_time_zone() {
    let far = MysqlStore::connect(&format!("{TEST_URL}?timezone=%2B09:00"), options(1)).unwrap();
    let utc = store();
    let (n, a) = (name(), owner());
    far.grant(&req(&n, &a, 1, 1)).await;
    let holders = utc.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert!(
        holders[0].remaining_ms > 5_000 && holders[0].remaining_ms <= 10_000,
        "{holders:?}"
    );
    assert!(utc
        .extend_permits(&n, Renewal::new(&a, 20_000))
        .await
        .unwrap());
    let holders = far.permits(&n).await.unwrap();
    assert!(
        holders[0].remaining_ms > 15_000 && holders[0].remaining_ms <= 20_000,
        "{holders:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_never_waits_for_one_of_a_neighbouring_name() {
    let s = store();
    let (prefix, a, b) = (name(), owner(), owner());
    // Adjacent in the key order: `second`'s rows go right after `first`'s.
    let (first, second) = (format!("{prefix}:1"), format!("{prefix}:2"));
    s.grant(&req(&first, &a, 1, 2)).await;
    // An acquisition of `first` left open, as the store runs it.
    let mut other = sqlx::MySqlConnection::connect(TEST_URL).await.unwrap();
    let mut tx = other.begin_with(SQL_BEGIN).await.unwrap();
    let held = lock(&mut tx, &s.permit_sql, &first).await.unwrap();
    assert_eq!(held.len(), 1);
    // Under REPEATABLE READ its next-key locks would cover the gap `second`'s row goes into,
    // and this would wait until the call's bound.
    let granted = LockStore::acquire_permits(&s, &req(&second, &b, 1, 2)).await;
    tx.rollback().await.unwrap();
    assert!(granted.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_whose_connection_is_killed_while_it_waits_is_sent_again() {
    let s = std::sync::Arc::new(store());
    let (n, a, b) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 2)).await;
    let mut other = sqlx::MySqlConnection::connect(TEST_URL).await.unwrap();
    let (semaphores, _) = table_names(TEST_TABLE);
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT fence FROM `{semaphores}` WHERE name = ? FOR UPDATE"
    )))
    .bind(n.as_bytes())
    .fetch_one(&mut other)
    .await
    .unwrap();
    let waiting = tokio::spawn({
        let (s, n, b) = (s.clone(), n.clone(), b.clone());
        async move { s.acquire_permits(&req(&n, &b, 1, 2)).await }
    });
    // The store's connection, waiting for the header this transaction locked.
    let victim: u64 = loop {
        let found: Option<u64> = sqlx::query_scalar(
            "SELECT r.trx_mysql_thread_id
             FROM information_schema.innodb_lock_waits w
             JOIN information_schema.innodb_trx r ON r.trx_id = w.requesting_trx_id
             JOIN information_schema.innodb_trx h ON h.trx_id = w.blocking_trx_id
             WHERE h.trx_mysql_thread_id = CONNECTION_ID()",
        )
        .fetch_optional(&mut other)
        .await
        .unwrap();
        if let Some(id) = found {
            break id;
        }
        assert!(!waiting.is_finished(), "did not wait: {:?}", waiting.await);
        // InnoDB refreshes these tables only when they were not read for 100 ms.
        sleep_ms(150).await;
    };
    sqlx::query(AssertSqlSafe(format!("KILL CONNECTION {victim}")))
        .execute(&mut other)
        .await
        .unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
    let granted = waiting.await.unwrap();
    assert!(granted.unwrap().is_some());
    assert_eq!(s.permits(&n).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test -- --ignored --nocapture"]
async fn permit_latency_and_contention() {
    let s = std::sync::Arc::new(store());
    s.permits_ready().await.unwrap();
    let [p50, p90, p99] = acquire_and_release_latency(&*s, 500, false).await;
    println!(
        "acquire_permits+release_permits of one semaphore: p50 {p50:?} p90 {p90:?} p99 {p99:?}"
    );
    // 32 clients, each taking and giving back a permit of one of 4 neighbouring semaphores
    // of 2 permits 50 times, waiting in the queue when refused.
    let prefix = name();
    let started = std::time::Instant::now();
    let clients = (0..32).map(|i| {
        let (s, n) = (s.clone(), format!("{prefix}:{}", i % 4));
        tokio::spawn(async move {
            let o = owner();
            let (mut granted, mut refused) = (0, 0);
            while granted < 50 {
                match s.acquire_permits(&queued(&n, &o, 1, 2)).await.unwrap() {
                    Some(_) => {
                        granted += 1;
                        let holders = s.permits(&n).await.unwrap();
                        assert!(holders.iter().map(|h| h.permits).sum::<u32>() <= 2);
                        assert!(s.permits_released(&n, &o).await);
                    }
                    None => {
                        refused += 1;
                        sleep_ms(2).await;
                    }
                }
            }
            refused
        })
    });
    let refused: u32 = futures_util::future::join_all(clients)
        .await
        .into_iter()
        .map(Result::unwrap)
        .sum();
    println!(
        "32 clients x 50 grants on 4 semaphores of 2: {:?}, {refused} refusals",
        started.elapsed()
    );
}
