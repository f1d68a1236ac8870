//! These run against the PostgreSQL at `TEST_URL` and fail, not skip, when it is down.

use super::notify::decode_hex;
use super::*;
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, next_owner, owner};
use crate::store::sql::conformance::{
    bad_urls_and_empty_pools_are_refused, only_plain_table_names_up_to_the_longest_are_accepted,
    SqlHarness,
};
use crate::store::tls::TlsOptions;
use crate::store::ErrorKind;
use crate::store::ValueFormat;
use sqlx::Connection;
use tokio::sync::broadcast::error::TryRecvError;

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

/// A store on the test database whose lock table is `table` (a table of the test's own, for
/// a test that looks for the relations the store creates or listens on their channel).
pub(super) fn on_table(table: &str) -> PostgresStore {
    let opts = PostgresOptions {
        table: table.to_owned(),
        ..options(2)
    };
    PostgresStore::connect(TEST_URL, opts).unwrap()
}

/// Drops the lock table `table` that a test made for itself, with its sequence and its
/// semaphore tables (if the test made them too).
pub(super) async fn drop_tables(conn: &mut sqlx::PgConnection, table: &str) {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS \"{table}\", \"{table}_sem\", \"{table}_perm\";
         DROP SEQUENCE \"{table}_fence\""
    )))
    .execute(conn)
    .await
    .unwrap();
}

fn next_for(owner: &str) -> crate::store::NextOwner<'_> {
    next_owner(owner, 10_000, ValueFormat::Fenced)
}

/// A plain connection to the test database, for looking at or disturbing what the store does.
pub(super) async fn admin() -> sqlx::PgConnection {
    sqlx::PgConnection::connect(TEST_URL).await.unwrap()
}

#[tokio::test]
async fn the_holder_asking_again_gets_its_own_token_and_a_new_lease() {
    // What makes a retry after a lost reply safe.
    let s = store();
    let (k, a) = (name(), owner());
    let token = s.acquire_fenced(&k, &a, 2_000).await.unwrap();
    assert_eq!(s.acquire_fenced(&k, &a, 60_000).await, Some(token));
    let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
    assert!(remaining > 50_000, "{remaining}");
}

#[tokio::test]
async fn a_retried_handoff_finds_the_lock_with_the_next_owner_and_returns_its_token() {
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    s.try_acquire(
        &k,
        Acquisition {
            data: Some(b"a"),
            ..Acquisition::fenced(&a, 10_000)
        },
    )
    .await
    .unwrap();
    let token = s
        .handoff(&k, Handoff::new(&a, &next_for(&b)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.handoff(&k, Handoff::new(&a, &next_for(&b)))
            .await
            .unwrap(),
        Some(token)
    );
    let info = s.inspect(&k).await.unwrap().unwrap();
    assert_eq!((info.owner, info.data), (b, None));
}

#[tokio::test]
async fn a_released_row_is_free_even_when_dated_after_the_acquirers_clock_reading() {
    // An acquisition reads the clock, then may wait for the row lock while a release commits
    // with a later `expires_at`: the row must still count as free. Dated an hour ahead here.
    let s = store();
    let (k, a, b) = (name(), owner(), owner());
    let first = s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{TEST_TABLE}\" SET owner = NULL, expires_at = clock_timestamp() + interval '1 hour' WHERE name = $1"
    )))
    .bind(k.as_bytes())
    .execute(&mut admin().await)
    .await
    .unwrap();
    let second = s.acquire_fenced(&k, &b, 10_000).await.unwrap();
    assert!(second > first);
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

/// Receives the next release announcement, waiting at most 5 s.
async fn next_release(rx: &mut tokio::sync::broadcast::Receiver<String>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .ok()
        .and_then(Result::ok)
}

/// Asserts that the next release announcement on `rx` (within 5 s) is of `key`.
pub(super) async fn assert_announced(rx: &mut tokio::sync::broadcast::Receiver<String>, key: &str) {
    assert_eq!(next_release(rx).await.as_deref(), Some(key));
}

/// Asserts that the next release announcement on `rx` (within 5 s) is of `key`, and that no
/// other came before it or waits behind it.
pub(super) async fn assert_announced_alone(
    rx: &mut tokio::sync::broadcast::Receiver<String>,
    key: &str,
) {
    assert_announced(rx, key).await;
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_announced_to_another_store_that_was_refused_the_lock() {
    let (holder, waiter) = (store(), store());
    let (k, a, b) = (name(), owner(), owner());
    holder.acquire_fenced(&k, &a, 10_000).await;
    let mut releases = waiter.releases();
    waiter.watch(&k).await;
    assert_eq!(waiter.acquire_fenced(&k, &b, 10_000).await, None);
    let outcome = holder.release(&k, Release::new(&a)).await.unwrap();
    assert!(outcome.released && outcome.others_waiting, "{outcome:?}");
    assert_announced(&mut releases, &k).await;
    // The holder takes it again before the waiter: that grant clears the record of who
    // waited, so its release, which nobody was refused since, announces nothing.
    holder.acquire_fenced(&k, &a, 10_000).await;
    let outcome = holder.release(&k, Release::new(&a)).await.unwrap();
    assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    assert!(waiter.acquire_fenced(&k, &b, 10_000).await.is_some());
    waiter.unwatch(&k).await;
    assert_eq!(waiter.watched(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_nobody_elsewhere_waits_for_is_not_announced() {
    let (s, other) = (store(), store());
    let (k, a, b) = (name(), owner(), owner());
    let mut releases = other.releases();
    other.watch(&k).await;
    s.acquire_fenced(&k, &a, 10_000).await;
    // Refused by its own store: local waiters are woken locally, not through the server.
    assert_eq!(s.acquire_fenced(&k, &b, 10_000).await, None);
    let outcome = s.release(&k, Release::new(&a)).await.unwrap();
    assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    // A later announcement on the same channel arrives, and it is the only one.
    let marker = name();
    other.watch(&marker).await;
    s.acquire_fenced(&marker, &a, 10_000).await;
    other.acquire_fenced(&marker, &b, 10_000).await;
    assert!(
        s.release(&marker, Release::new(&a))
            .await
            .unwrap()
            .others_waiting
    );
    assert_announced_alone(&mut releases, &marker).await;
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
        holder.acquire_fenced(k, &a, 10_000).await;
        waiter.acquire_fenced(k, &owner(), 10_000).await;
        assert!(
            holder
                .release(k, Release::new(&a))
                .await
                .unwrap()
                .others_waiting
        );
    }
    assert_announced_alone(&mut releases, &base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_announces_the_release_to_refused_waiters() {
    let (holder, waiter) = (store(), store());
    let (k, a) = (name(), owner());
    holder.acquire_fenced(&k, &a, 60_000).await;
    let mut releases = waiter.releases();
    waiter.watch(&k).await;
    waiter.acquire_fenced(&k, &owner(), 10_000).await;
    assert!(holder.force_release(&k).await.unwrap());
    assert_announced(&mut releases, &k).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listening_connection_is_reopened_after_the_server_ends_it() {
    // A table (so a channel) of its own, to find this store's listening session.
    let table = format!("deadbolt_listen_{}", uuid::Uuid::new_v4().simple());
    let (holder, waiter) = (on_table(&table), on_table(&table));
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
    assert_announced(&mut releases, &k).await;
    holder.acquire_fenced(&k, &a, 10_000).await;
    waiter.acquire_fenced(&k, &owner(), 10_000).await;
    assert!(
        holder
            .release(&k, Release::new(&a))
            .await
            .unwrap()
            .others_waiting
    );
    assert_announced(&mut releases, &k).await;
    holder.close().await;
    waiter.close().await;
    drop_tables(&mut conn, &table).await;
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
    s.acquire_fenced(&k, &a, 60_000).await;
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
    let err = s.extend(&k, Renewal::new(&a, 60_000)).await.unwrap_err();
    tx.rollback().await.unwrap();
    // Cancelled by the server (`statement_timeout`), not left running behind the caller.
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(err.message.contains("statement timeout"), "{err}");
    assert!(s.extend(&k, Renewal::new(&a, 60_000)).await.unwrap());
}

#[test]
fn connect_refuses_bad_urls_and_pool_sizes_without_a_runtime() {
    bad_urls_and_empty_pools_are_refused("postgres", TEST_URL, |url, pool_size| {
        let opts = PostgresOptions {
            pool_size,
            ..PostgresOptions::default()
        };
        PostgresStore::connect(url, opts).is_err()
    });
    assert!(PostgresStore::connect("mysql://127.0.0.1/test", PostgresOptions::default()).is_err());
}

#[test]
fn connect_refuses_table_names_postgres_cannot_hold_without_a_runtime() {
    only_plain_table_names_up_to_the_longest_are_accepted('"', MAX_TABLE_NAME_BYTES, |table| {
        let opts = PostgresOptions {
            table: table.to_owned(),
            ..PostgresOptions::default()
        };
        PostgresStore::connect(TEST_URL, opts).is_err()
    });
}

#[test]
fn connect_checks_tls_options_against_the_sslmode_and_accepts_every_postgres_url_form() {
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
    let s = on_table(&table);
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
    drop_tables(&mut conn, &table).await;
    assert_eq!(found, vec![table.clone(), format!("{table}_fence")]);
}

/// Makes the login role `role`, without the right to create in the schema, with `grants`
/// (statements run once it exists); returns the URL it logs in with. A password, so that it
/// logs in whatever the server's rule for 127.0.0.1 is (trust or scram).
pub(super) async fn limited_role(
    conn: &mut sqlx::PgConnection,
    role: &str,
    grants: &str,
) -> String {
    let setup = format!(
        "DROP ROLE IF EXISTS {role};
         CREATE ROLE {role} LOGIN PASSWORD 'pw';
         REVOKE CREATE ON SCHEMA public FROM {role};
         {grants}"
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(conn)
        .await
        .unwrap();
    format!("postgres://{role}:pw@127.0.0.1:5432/test")
}

/// The grants a store of `role` needs on the lock table `table` and its sequence.
pub(super) fn lock_table_grants(table: &str, role: &str) -> String {
    format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON \"{table}\" TO {role};
         GRANT USAGE ON SEQUENCE \"{table}_fence\" TO {role};"
    )
}

/// Drops the role [`limited_role`] made, with the grants it was given.
pub(super) async fn drop_role(conn: &mut sqlx::PgConnection, role: &str) {
    let drop = format!("DROP OWNED BY {role}; DROP ROLE {role}");
    sqlx::raw_sql(AssertSqlSafe(drop))
        .execute(conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_account_without_create_rights_uses_a_table_made_for_it_and_fails_on_a_missing_one() {
    store().ping().await.unwrap();
    let mut conn = admin().await;
    // Only this test uses this role, so creating and dropping it cannot race.
    let role = "deadbolt_dml_test";
    let url = limited_role(&mut conn, role, &lock_table_grants(TEST_TABLE, role)).await;
    let limited = PostgresStore::connect(&url, options(2)).unwrap();
    let (k, a) = (name(), owner());
    let acquired = limited
        .try_acquire(&k, Acquisition::fenced(&a, 10_000))
        .await;
    let released = limited.release(&k, Release::new(&a)).await;
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
    drop_role(&mut conn, role).await;
    assert!(acquired.unwrap().is_some());
    assert!(released.unwrap().released);
    let err = refused.unwrap_err();
    assert!(err.message.contains("creating the lock table"), "{err}");
    assert!(!err.message.contains("pw@"), "{err}");
}

mod conformance {
    use super::{options, PostgresStore, TEST_URL};
    use crate::store::conformance::served;

    fn open() -> PostgresStore {
        PostgresStore::connect(TEST_URL, options(4)).unwrap()
    }

    crate::conformance_suite!(served("postgres", "PostgreSQL", 5432, open));
    crate::permits_suite!(served("postgres", "PostgreSQL", 5432, open));
}

/// The PostgreSQL store for the suite the SQL stores share (`sql::conformance`).
struct Harness;

impl SqlHarness for Harness {
    type Store = PostgresStore;
    const SERVED: bool = true;

    fn url_at(port: u16) -> String {
        format!("postgres://postgres:S3cretPassw0rd@127.0.0.1:{port}/test")
    }

    fn connect(url: Option<&str>, pool: u32, connect_ms: u64, at_once: bool) -> PostgresStore {
        // Commits without waiting for the disk: these tests are not about durability, and
        // it keeps the load the large ones put on the tests running beside them short.
        let fast = format!("{TEST_URL}?options[synchronous_commit]=off");
        let opts = PostgresOptions {
            connect_timeout_ms: connect_ms,
            ..options(pool)
        };
        let mut s = PostgresStore::connect(url.unwrap_or(&fast), opts).unwrap();
        if at_once {
            // Below the delay `connect` allows, which is what the purge tests need.
            s.purge_after = Duration::ZERO;
        }
        s
    }

    async fn purge(s: &PostgresStore) -> StoreResult<u64> {
        s.purge().await
    }

    async fn rows_named(key: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM \"{TEST_TABLE}\" WHERE name = $1");
        let query = sqlx::query_scalar(AssertSqlSafe(sql)).bind(key.as_bytes());
        query.fetch_one(&mut admin().await).await.unwrap()
    }

    async fn connections(s: &PostgresStore) -> Option<u32> {
        s.ready().await.ok().map(|pool| pool.size())
    }
}

crate::sql_conformance_suite!(Harness);
