//! These run against the MariaDB at `TEST_URL` and fail, not skip, when it is down.

use super::*;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{extend_item, name, next_owner, owner, sleep_ms};
use crate::store::sql::conformance::{
    bad_urls_and_empty_pools_are_refused, only_plain_table_names_up_to_the_longest_are_accepted,
    SqlHarness,
};
use crate::store::ValueFormat;
use sqlx::Connection;
use std::time::Instant;

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

/// A store on the test database whose lock table is `table` (a table of the test's own, for
/// a test that looks for the tables the store creates).
pub(super) fn on_table(table: &str) -> MysqlStore {
    let opts = MysqlOptions {
        table: table.to_owned(),
        ..options(2)
    };
    MysqlStore::connect(TEST_URL, opts).unwrap()
}

/// The lock table of the stores that purge at once, apart from [`TEST_TABLE`]: their purge
/// deletes any row the moment it lapses, which would restart a name's count of tokens, or
/// take a semaphore's header, under another test's feet.
pub(super) const PURGE_TABLE: &str = "deadbolt_purged_mysql_rs_test";

/// A store whose purge deletes rows as soon as they lapse, on [`PURGE_TABLE`].
pub(super) fn purging_at_once() -> MysqlStore {
    let opts = MysqlOptions {
        table: PURGE_TABLE.to_owned(),
        purge_after_ms: 0,
        ..options(2)
    };
    MysqlStore::connect(TEST_URL, opts).unwrap()
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
    let first = fresh(s.acquire_fenced(&k, &a, 10_000).await);
    assert!(s.released(&k, &a).await);
    assert_eq!(s.acquire_fenced(&k, &b, 10_000).await, Some(first + 1));
}

#[tokio::test]
async fn the_same_owner_acquiring_again_while_holding_gets_none() {
    let s = store();
    let (k, a) = (name(), owner());
    let first = fresh(s.acquire_fenced(&k, &a, 10_000).await);
    assert_eq!(s.acquire_fenced(&k, &a, 10_000).await, None);
    assert_eq!(s.inspect(&k).await.unwrap().unwrap().fencing_token, first);
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_the_next_token_of_the_name() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = fresh(s.acquire_fenced(&k, &a, 100).await);
    sleep_ms(250).await;
    assert_eq!(s.acquire_fenced(&k, &b, 10_000).await, Some(first + 1));
}

#[tokio::test]
async fn a_token_from_an_earlier_statement_on_the_same_connection_never_leaks_into_busy() {
    // One connection, so every statement below runs on the connection that just reported
    // a token; a busy acquire must still report busy.
    let s = MysqlStore::connect(TEST_URL, options(1)).unwrap();
    let (k, a, b) = (name(), owner(), owner());
    fresh(s.acquire_fenced(&k, &a, 10_000).await);
    let other = name();
    let first = fresh(s.acquire_fenced(&other, &a, 10_000).await);
    assert!(s.released(&other, &a).await);
    assert_eq!(s.acquire_fenced(&other, &a, 10_000).await, Some(first + 1));
    assert_eq!(s.acquire_fenced(&k, &b, 10_000).await, None);
    let pool = s.ready().await.unwrap();
    sqlx::query("SELECT LAST_INSERT_ID(99)")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(s.acquire_fenced(&k, &b, 10_000).await, None);
    assert_eq!(s.acquire_fenced(&other, &b, 10_000).await, None);
}

#[tokio::test]
async fn a_handoff_gives_the_lock_to_the_next_owner_with_the_next_token() {
    let store = store();
    let (key, a, b) = (name(), owner(), owner());
    let first = store
        .acquire_granted(&key, &a, 30_000, Some(b"a-data"), ValueFormat::Fenced)
        .await;
    let next = crate::store::NextOwner {
        previous_had_data: true,
        ..next_owner(&b, 30_000, ValueFormat::Fenced)
    };
    let token = store.handoff(&key, Handoff::new(&a, &next)).await.unwrap();
    assert_eq!(token, Some(first + 1));
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(
        (info.owner.as_str(), info.data, info.fencing_token),
        (b.as_str(), None, first + 1)
    );
    assert_eq!(
        store.handoff(&key, Handoff::new(&a, &next)).await.unwrap(),
        None,
        "a no longer holds it"
    );
    assert!(store.released(&key, &b).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_many_chosen_as_a_deadlock_victim_still_reports_every_outcome() {
    let s = Arc::new(store());
    let (a, prefix) = (owner(), name());
    // `first` sorts before `second`, so the multi-row extend locks `first`, then waits for
    // `second`, which the other transaction holds.
    let (first, second) = (format!("{prefix}:1"), format!("{prefix}:2"));
    for k in [&first, &second] {
        s.acquire_fenced(k, &a, 60_000).await.unwrap();
    }
    // Many rows changed make the other transaction the heavier one, so InnoDB rolls back
    // the extend instead.
    for i in 0..50 {
        let filler = format!("{prefix}:filler:{i}");
        s.acquire_fenced(&filler, &a, 60_000).await.unwrap();
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
        .map(|k| extend_item(k, &a, 30_000))
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
        .try_acquire(&name(), Acquisition::fenced(&owner(), 1_000))
        .await;
    let elapsed = started.elapsed();
    assert!(result.is_err());
    assert!(elapsed < Duration::from_millis(2_000), "{elapsed:?}");
    let started = Instant::now();
    assert!(s.ping().await.is_err());
    assert!(started.elapsed() < Duration::from_millis(2_000));
}

#[test]
fn connect_refuses_bad_urls_and_pool_sizes_without_a_runtime() {
    bad_urls_and_empty_pools_are_refused("mysql", TEST_URL, |url, pool_size| {
        let opts = MysqlOptions {
            pool_size,
            ..MysqlOptions::default()
        };
        MysqlStore::connect(url, opts).is_err()
    });
    assert!(MysqlStore::connect("mariadb://root@127.0.0.1/test", MysqlOptions::default()).is_ok());
}

#[test]
fn connect_refuses_table_names_mysql_cannot_hold_without_a_runtime() {
    only_plain_table_names_up_to_the_longest_are_accepted('`', 64, |table| {
        let opts = MysqlOptions {
            table: table.to_owned(),
            ..MysqlOptions::default()
        };
        MysqlStore::connect(TEST_URL, opts).is_err()
    });
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
    let s = on_table(&table);
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

/// Makes the account `user` on 127.0.0.1 with the password `pw` and only the privileges
/// `grants` (each `GRANT`ed as written: "SELECT ON `t`"); returns the URL it logs in with.
pub(super) async fn account(admin: &MySqlPool, user: &str, grants: &[String]) -> String {
    let mut setup = format!("CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY 'pw';");
    for grant in grants {
        setup.push_str(&format!("GRANT {grant} TO '{user}'@'127.0.0.1';"));
    }
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(admin)
        .await
        .unwrap();
    format!("mysql://{user}:pw@127.0.0.1:3306/test")
}

/// Drops the account `user` that [`account`] made.
pub(super) async fn drop_account(admin: &MySqlPool, user: &str) {
    let drop = format!("DROP USER IF EXISTS '{user}'@'127.0.0.1'");
    sqlx::raw_sql(AssertSqlSafe(drop))
        .execute(admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_account_without_the_create_privilege_uses_an_existing_table_and_fails_on_a_missing_one()
{
    let root = store();
    root.ping().await.unwrap();
    let admin = root.ready().await.unwrap();
    // Only this test uses this account, so creating and dropping it cannot race.
    let user = "deadbolt_dml_test";
    let url = account(
        admin,
        user,
        &[format!("SELECT, INSERT, UPDATE ON `{TEST_TABLE}`")],
    )
    .await;
    let limited = MysqlStore::connect(&url, options(2)).unwrap();
    let (k, a) = (name(), owner());
    let acquired = limited
        .try_acquire(&k, Acquisition::fenced(&a, 10_000))
        .await;
    let released = limited.release(&k, Release::new(&a)).await;
    limited.close().await;
    let never_created = MysqlOptions {
        table: "deadbolt_never_created".to_owned(),
        ..options(2)
    };
    let missing = MysqlStore::connect(&url, never_created).unwrap();
    let refused = missing.ping().await;
    missing.close().await;
    drop_account(admin, user).await;
    fresh(acquired.unwrap());
    assert!(released.unwrap().released);
    let message = refused.unwrap_err().message;
    assert!(message.contains("creating the lock table"), "{message}");
}

#[tokio::test]
async fn the_driver_counts_matched_rows_so_an_unchanged_row_still_counts() {
    // `extend` and `release` read "owned" from the affected count: this pins the
    // CLIENT_FOUND_ROWS behaviour they rely on.
    let s = store();
    let (k, a) = (name(), owner());
    s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    let pool = s.ready().await.unwrap();
    let noop = format!("UPDATE `{TEST_TABLE}` SET fence = fence WHERE name = ?");
    let done = sqlx::query(AssertSqlSafe(noop))
        .bind(k.as_bytes())
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
}

mod conformance {
    use super::{options, MysqlStore, TEST_URL};
    use crate::store::conformance::served;

    fn open() -> MysqlStore {
        MysqlStore::connect(TEST_URL, options(4)).unwrap()
    }

    crate::conformance_suite!(served("mysql", "MariaDB", 3306, open));
    crate::permits_suite!(served("mysql", "MariaDB", 3306, open));
}

/// The MySQL store for the suite the SQL stores share (`sql::conformance`).
struct Harness;

impl SqlHarness for Harness {
    type Store = MysqlStore;
    const SERVED: bool = true;

    fn url_at(port: u16) -> String {
        format!("mysql://root:S3cretPassw0rd@127.0.0.1:{port}/test")
    }

    fn connect(url: Option<&str>, pool: u32, connect_ms: u64, at_once: bool) -> MysqlStore {
        let (table, purge_after_ms) = match at_once {
            true => (PURGE_TABLE, 0),
            false => (TEST_TABLE, 300_000),
        };
        let opts = MysqlOptions {
            table: table.to_owned(),
            connect_timeout_ms: connect_ms,
            purge_after_ms,
            ..options(pool)
        };
        MysqlStore::connect(url.unwrap_or(TEST_URL), opts).unwrap()
    }

    async fn purge(s: &MysqlStore) -> StoreResult<u64> {
        s.purge().await
    }

    async fn rows_named(key: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM `{PURGE_TABLE}` WHERE name = ?");
        let mut conn = sqlx::MySqlConnection::connect(TEST_URL).await.unwrap();
        let query = sqlx::query_scalar(AssertSqlSafe(sql)).bind(key.as_bytes());
        query.fetch_one(&mut conn).await.unwrap()
    }

    async fn connections(s: &MysqlStore) -> Option<u32> {
        s.ready().await.ok().map(|pool| pool.size())
    }
}

crate::sql_conformance_suite!(Harness);
