//! The PostgreSQL semaphores' own failure modes (the contract is `permits_suite!` in
//! `postgres/tests.rs`). These run against the PostgreSQL at `TEST_URL` and fail, not skip,
//! when it is down.

use crate::store::conformance::AcquireFenced;
use crate::store::permit_conformance::{queued, req, watching, Ask, LeftForPurge};
use crate::store::{Acquisition, Release, Renewal};
use crate::store::{LockStore, ValueFormat};
use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection};
use tokio::task::JoinHandle;

use super::super::tests::{
    admin, assert_announced, assert_announced_alone, drop_role, drop_tables, limited_role,
    lock_table_grants, on_table, options, purging_soon, store, TEST_TABLE, TEST_URL,
};
use super::super::{PostgresOptions, PostgresStore, MAX_KEY_BYTES, MAX_OWNER_BYTES, MAX_TTL_MS};
use crate::store::conformance::{name, owner, sleep_ms};
use crate::store::permits::watch_key;
use crate::store::{ErrorKind, PermitRequest, ReleaseNotifications, StoreResult};

/// The owners of semaphore `name`'s rows (holders and queued, lapsed or not), sorted.
async fn rows_of(name: &str) -> Vec<String> {
    let owners: Vec<Vec<u8>> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT owner FROM \"{TEST_TABLE}_perm\" WHERE name = $1 ORDER BY owner"
    )))
    .bind(name.as_bytes())
    .fetch_all(&mut admin().await)
    .await
    .unwrap();
    owners
        .into_iter()
        .map(|o| String::from_utf8(o).unwrap())
        .collect()
}

/// How many header rows the semaphores `names` have.
async fn headers_of(names: &[&str]) -> i64 {
    let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{TEST_TABLE}_sem\" WHERE name = ANY($1)"
    )))
    .bind(names)
    .fetch_one(&mut admin().await)
    .await
    .unwrap()
}

/// A store whose sessions carry an application name of their own, and that name, so that a
/// test can see when one of them waits for a lock.
fn tagged_store() -> (Arc<PostgresStore>, String) {
    let app = format!("deadbolt_sem_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{TEST_URL}?application_name={app}");
    (
        Arc::new(PostgresStore::connect(&url, options(2)).unwrap()),
        app,
    )
}

/// Returns once a session named `app` waits for a lock (at most 10 s).
async fn blocked(app: &str) {
    let mut conn = admin().await;
    let waiting = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
            )
            .bind(app)
            .fetch_one(&mut conn)
            .await
            .unwrap();
            if n > 0 {
                return;
            }
            sleep_ms(10).await;
        }
    })
    .await;
    assert!(waiting.is_ok(), "no session of {app} waited for a lock");
}

/// Runs `sql` on `conn`, its parameters bound to `binds`' bytes.
async fn run(conn: &mut sqlx::PgConnection, sql: String, binds: &[&str]) {
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for bind in binds {
        query = query.bind(bind.as_bytes());
    }
    query.execute(conn).await.unwrap();
}

/// Ends every lease and place of semaphore `n` by the server's clock.
async fn end_by_the_servers_clock(n: &str) {
    let sql = format!(
        "UPDATE \"{TEST_TABLE}_perm\" SET expires_at = clock_timestamp() - interval '1 second'
         WHERE name = $1"
    );
    run(&mut admin().await, sql, &[n]).await;
}

/// Asks `s` for the one permit of semaphore `n` for `owner`, on a task of its own.
fn asking(s: &Arc<PostgresStore>, n: &str, owner: &str) -> JoinHandle<StoreResult<Option<u64>>> {
    let (s, n, owner) = (s.clone(), n.to_owned(), owner.to_owned());
    tokio::spawn(async move { s.acquire_permits(&req(&n, &owner, 1, 1)).await })
}

/// Which of `table`'s relations (itself, its sequence, its semaphore tables) exist.
async fn relations(conn: &mut sqlx::PgConnection, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT relname::text FROM pg_class
         WHERE relname IN ($1, $1 || '_fence', $1 || '_sem', $1 || '_perm') ORDER BY 1",
    )
    .bind(table)
    .fetch_all(conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_semaphore_tables_are_created_by_the_first_semaphore_operation_only() {
    // The longest table name a store accepts: the semaphore tables' names still fit.
    let table = format!(
        "{:x<57}",
        format!("dbsem_{}", uuid::Uuid::new_v4().simple())
    );
    let s = on_table(&table);
    let mut conn = admin().await;
    s.acquire_granted(&name(), &owner(), 1_000, None, ValueFormat::Fenced)
        .await;
    let before = relations(&mut conn, &table).await;
    let granted = s.acquire_permits(&req(&name(), &owner(), 1, 1)).await;
    let after = relations(&mut conn, &table).await;
    s.close().await;
    drop_tables(&mut conn, &table).await;
    assert_eq!(before, vec![table.clone(), format!("{table}_fence")]);
    assert!(granted.unwrap().is_some());
    assert_eq!(
        after,
        vec![
            table.clone(),
            format!("{table}_fence"),
            format!("{table}_perm"),
            format!("{table}_sem"),
        ]
    );
}

#[tokio::test]
async fn an_account_without_create_rights_uses_semaphore_tables_made_for_it_and_fails_on_missing_ones(
) {
    // The test table's semaphore tables exist once a store used them.
    let (n, a) = (name(), owner());
    store().acquire_permits(&req(&n, &a, 1, 1)).await.unwrap();
    // A lock table of its own without semaphore tables.
    let bare = format!("deadbolt_bare_{}", uuid::Uuid::new_v4().simple());
    let bare_opts = PostgresOptions {
        table: bare.clone(),
        ..options(2)
    };
    PostgresStore::connect(TEST_URL, bare_opts.clone())
        .unwrap()
        .ping()
        .await
        .unwrap();
    let mut conn = admin().await;
    // Only this test uses this role (another than the lock test's, which may run meanwhile).
    let role = "deadbolt_dml_sem_test";
    let grants = format!(
        "{}
         GRANT SELECT, INSERT, UPDATE, DELETE ON \"{TEST_TABLE}_sem\", \"{TEST_TABLE}_perm\"
             TO {role};
         {}",
        lock_table_grants(TEST_TABLE, role),
        lock_table_grants(&bare, role)
    );
    let url = limited_role(&mut conn, role, &grants).await;
    let limited = PostgresStore::connect(&url, options(2)).unwrap();
    let b = owner();
    let granted = limited.acquire_permits(&req(&n, &b, 1, 2)).await;
    let released = limited.release_permits(&n, Release::new(&b)).await;
    limited.close().await;
    let missing = PostgresStore::connect(&url, bare_opts).unwrap();
    let lock = missing
        .try_acquire(&name(), Acquisition::fenced(&b, 1_000))
        .await;
    let refused = missing.acquire_permits(&req(&n, &b, 1, 2)).await;
    missing.close().await;
    drop_role(&mut conn, role).await;
    drop_tables(&mut conn, &bare).await;
    assert!(granted.unwrap().is_some());
    assert!(released.unwrap().released);
    assert!(lock.unwrap().is_some());
    let err = refused.unwrap_err();
    assert!(
        err.message.contains("creating the semaphore tables"),
        "{err}"
    );
    assert!(!err.message.contains("pw@"), "{err}");
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_io() {
    // Port 1: nothing listens, so only a check before I/O can answer Invalid.
    let s = PostgresStore::connect("postgres://postgres@127.0.0.1:1/test", options(1)).unwrap();
    let long_name = "n".repeat(MAX_KEY_BYTES + 1);
    let long_owner = "o".repeat(MAX_OWNER_BYTES + 1);
    let too_long = MAX_TTL_MS + 1;
    for request in [
        req(&long_name, "o", 1, 1),
        req("n", &long_owner, 1, 1),
        PermitRequest {
            ttl_ms: too_long,
            ..req("n", "o", 1, 1)
        },
        PermitRequest {
            queue_ttl_ms: too_long,
            ..req("n", "o", 1, 1)
        },
    ] {
        let err = s.acquire_permits(&request).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Invalid, "{request:?}: {err}");
    }
    for err in [
        s.extend_permits(&long_name, Renewal::new("o", 1_000))
            .await
            .unwrap_err(),
        s.extend_permits("n", Renewal::new("o", too_long))
            .await
            .unwrap_err(),
        s.release_permits("n", Release::new(&long_owner))
            .await
            .unwrap_err(),
        s.permits(&long_name).await.unwrap_err(),
    ] {
        assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_waits_for_the_semaphore_and_then_counts_what_was_committed_meanwhile() {
    // What one statement could not do: its snapshot would predate the wait for the header
    // lock, and miss the holder inserted meanwhile.
    let (s, app) = tagged_store();
    let (n, a, b) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    assert!(s.permits_released(&n, &a).await);
    let mut conn = admin().await;
    let mut tx = conn.begin().await.unwrap();
    let lock = format!("SELECT 1 FROM \"{TEST_TABLE}_sem\" WHERE name = $1 FOR UPDATE");
    run(&mut tx, lock, &[&n]).await;
    let asking = asking(&s, &n, &b);
    blocked(&app).await;
    let insert = format!(
        "INSERT INTO \"{TEST_TABLE}_perm\" (name, owner, permits, token, expires_at)
         VALUES ($1, 'intruder', 1, 1, clock_timestamp() + interval '1 minute')"
    );
    run(&mut tx, insert, &[&n]).await;
    tx.commit().await.unwrap();
    assert_eq!(asking.await.unwrap().unwrap(), None);
    assert_eq!(rows_of(&n).await, vec!["intruder".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_committed_while_an_acquisition_waits_is_counted() {
    // The acquisition reads the holders' rows under a lock, so a lease its snapshot saw
    // ending but that was extended meanwhile still counts.
    let (s, app) = tagged_store();
    let (n, a, b) = (name(), owner(), owner());
    let short = PermitRequest {
        ttl_ms: 50,
        ..req(&n, &a, 1, 1)
    };
    s.grant(&short).await;
    sleep_ms(150).await;
    let mut conn = admin().await;
    let mut tx = conn.begin().await.unwrap();
    let extend = format!(
        "UPDATE \"{TEST_TABLE}_perm\" SET expires_at = clock_timestamp() + interval '1 minute'
         WHERE name = $1 AND owner = $2"
    );
    run(&mut tx, extend, &[&n, &a]).await;
    let asking = asking(&s, &n, &b);
    blocked(&app).await;
    tx.commit().await.unwrap();
    assert_eq!(asking.await.unwrap().unwrap(), None);
    let holders = s.permits(&n).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].owner, a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waits_for_an_acquisition_under_way_and_announces_to_the_store_it_refused() {
    // The acquisition records the store it refused in the header, which the release reads
    // only once that acquisition committed: no refusal goes unannounced.
    let (s, app) = tagged_store();
    let (n, a) = (name(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    let mut conn = admin().await;
    let mut tx = conn.begin().await.unwrap();
    // As an acquisition by another store would: lock the header, record the refusal.
    let refusal =
        format!("UPDATE \"{TEST_TABLE}_sem\" SET waiter = '\\x0123'::bytea WHERE name = $1");
    run(&mut tx, refusal, &[&n]).await;
    let releasing = {
        let (s, n, a) = (s.clone(), n.clone(), a.clone());
        tokio::spawn(async move { s.release_permits(&n, Release::new(&a)).await })
    };
    blocked(&app).await;
    tx.commit().await.unwrap();
    let outcome = releasing.await.unwrap().unwrap();
    assert!(outcome.released && outcome.others_waiting, "{outcome:?}");
}

#[tokio::test]
async fn the_servers_clock_decides_when_permits_lapse() {
    let s = store();
    let (n, a, b) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    // Ended by the server's clock long before the lease the client asked for.
    end_by_the_servers_clock(&n).await;
    assert_eq!(s.permits(&n).await.unwrap(), vec![]);
    assert!(!s
        .extend_permits(&n, Renewal::new(&a, 10_000))
        .await
        .unwrap());
    s.grant(&req(&n, &b, 1, 1)).await;
}

#[tokio::test]
async fn an_acquisition_deletes_its_semaphores_lapsed_rows_and_a_refused_try_writes_none() {
    let s = store();
    let (n, a, w, b, c) = (name(), owner(), owner(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    s.refuse(&queued(&n, &w, 1, 1)).await;
    // Both the lease and the place end, by the server's clock.
    end_by_the_servers_clock(&n).await;
    s.grant(&req(&n, &b, 1, 1)).await;
    s.refuse(&req(&n, &c, 1, 1)).await;
    assert_eq!(rows_of(&n).await, vec![b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_announced_only_when_another_store_was_refused_since_the_queue_emptied() {
    let (s, other) = (store(), store());
    let (n, a, b, w) = (name(), owner(), owner(), owner());
    let (mut releases, key) = watching(&other, &n).await;
    s.grant(&req(&n, &a, 1, 1)).await;
    // Refused by its own store: the engine wakes its own waiters, not the server.
    s.refuse(&queued(&n, &b, 1, 1)).await;
    let outcome = s.release_permits(&n, Release::new(&a)).await.unwrap();
    assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    s.grant(&queued(&n, &b, 1, 1)).await;
    // Refused by another store: the release is announced there.
    other.refuse(&queued(&n, &w, 1, 1)).await;
    let outcome = s.release_permits(&n, Release::new(&b)).await.unwrap();
    assert!(outcome.released && outcome.others_waiting, "{outcome:?}");
    assert_announced(&mut releases, &key).await;
    // Its grant leaves nobody queued, which forgets the refusals: nothing more to announce.
    other.grant(&queued(&n, &w, 1, 1)).await;
    s.grant(&req(&n, &a, 1, 2)).await;
    let outcome = s.release_permits(&n, Release::new(&a)).await.unwrap();
    assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    // A later announcement on the same channel arrives, and it is the only one.
    let (marker, m) = (name(), owner());
    let marker_key = watch_key(&marker);
    other.watch(&marker_key).await;
    s.grant(&req(&marker, &m, 1, 1)).await;
    other.refuse(&queued(&marker, &owner(), 1, 1)).await;
    assert!(
        s.release_permits(&marker, Release::new(&m))
            .await
            .unwrap()
            .others_waiting
    );
    assert_announced_alone(&mut releases, &marker_key).await;
    other.unwatch(&key).await;
    other.unwatch(&marker_key).await;
    assert_eq!(other.watched(), 0);
}

#[tokio::test]
async fn a_purged_semaphore_leaves_no_row_and_comes_back_with_a_higher_token() {
    let s = purging_soon();
    let left = LeftForPurge::leave(&s).await;
    s.purge().await.unwrap();
    assert_eq!(headers_of(&[&left.released, &left.lapsed]).await, 0);
    assert_eq!(rows_of(&left.lapsed).await, Vec::<String>::new());
    left.assert_it_comes_back_with_a_higher_token(&s).await;
}

#[tokio::test]
async fn a_purge_never_deletes_a_live_holder_or_place_or_their_header() {
    let s = purging_soon();
    let (n, a, w) = (name(), owner(), owner());
    s.grant(&req(&n, &a, 1, 1)).await;
    s.refuse(&queued(&n, &w, 1, 1)).await;
    s.purge().await.unwrap();
    let mut expected = vec![a, w];
    expected.sort();
    assert_eq!(rows_of(&n).await, expected);
    assert_eq!(headers_of(&[&n]).await, 1);
}
