//! These run against real files in a temporary directory; several stores on one file stand
//! for several processes (each has its own connections, as a process does). The helpers are
//! shared with the semaphore tests (`permits/tests.rs`).

use super::*;
use crate::store::bounded::{bounded, call_timeout, Bounded};
use crate::store::conformance::AcquireFenced;
use crate::store::conformance::{name, next_owner, owner, sleep_ms};
use crate::store::sql::conformance::only_plain_table_names_up_to_the_longest_are_accepted;
use crate::store::ValueFormat;
use crate::store::{ReleaseNotifications, SharedStore};
use sqlx::sqlite::SqlitePool;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A temporary directory, removed with everything in it when dropped.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("deadbolt-sqlite-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(super) fn url(&self) -> String {
        format!("sqlite://{}", self.0.join("locks.db").display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn options() -> SqliteOptions {
    SqliteOptions::default()
}

pub(super) fn open(url: &str) -> SqliteStore {
    SqliteStore::connect(url, options()).unwrap()
}

/// A store on a file of its own, the directory that holds the file (deleted when dropped) and
/// the file's URL.
pub(super) fn alone() -> (TempDir, String, SqliteStore) {
    let dir = TempDir::new();
    let url = dir.url();
    let s = open(&url);
    (dir, url, s)
}

/// Two stores (two processes) on a file of their own, with the directory that holds the file
/// (deleted when dropped) and the file's URL.
pub(super) fn on_one_file() -> (TempDir, String, SqliteStore, SqliteStore) {
    let (dir, url, first) = alone();
    let second = open(&url);
    (dir, url, first, second)
}

/// A connection pool of the test's own to the store's file (another "process").
pub(super) async fn raw(url: &str) -> SqlitePool {
    let path = database_path(url).unwrap();
    SqlitePool::connect_with(SqliteConnectOptions::new().filename(path))
        .await
        .unwrap()
}

/// A connection of the test's own to the store's file (another "process") that holds the
/// write lock (`BEGIN IMMEDIATE`) until it rolls back.
pub(super) async fn writing(url: &str) -> sqlx::SqliteConnection {
    let path = database_path(url).unwrap();
    let options = SqliteConnectOptions::new().filename(&path);
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect_with(&options)
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// Rows in one of the store's tables, read with a connection of the test's own.
pub(super) async fn rows(url: &str, table: &str) -> i64 {
    let pool = raw(url).await;
    let n = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM \"{table}\"")))
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

#[test]
fn urls_name_an_absolute_path_or_one_relative_to_the_working_directory() {
    assert_eq!(
        database_path("sqlite:///var/lib/app/locks.db").unwrap(),
        Path::new("/var/lib/app/locks.db")
    );
    assert_eq!(
        database_path("SQLite://data/locks.db").unwrap(),
        std::env::current_dir().unwrap().join("data/locks.db")
    );
    // Taken literally: no percent-decoding.
    assert_eq!(
        database_path("sqlite:///tmp/a%20b.db").unwrap(),
        Path::new("/tmp/a%20b.db")
    );
}

#[test]
fn urls_without_a_file_with_parameters_or_in_memory_are_refused() {
    for url in [
        "sqlite://",
        "sqlite:///tmp/",
        "sqlite:///tmp/x.db?mode=ro",
        "sqlite://:memory:",
        "sqlite://file:x.db",
        "mysql://root@127.0.0.1/test",
    ] {
        let err = database_path(url).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Invalid, "{url}");
        assert!(err.message.starts_with("sqlite:"), "{url}: {}", err.message);
    }
}

#[test]
fn connect_refuses_table_names_sqlite_cannot_hold_without_a_runtime() {
    only_plain_table_names_up_to_the_longest_are_accepted('"', 64, |table| {
        let opts = SqliteOptions {
            table: table.to_owned(),
            ..options()
        };
        SqliteStore::connect("sqlite:///tmp/x.db", opts).is_err()
    });
}

#[tokio::test]
async fn the_first_use_creates_the_file_in_wal_mode_with_its_tables() {
    let dir = TempDir::new();
    let s = open(&dir.url());
    assert!(
        !dir.0.join("locks.db").exists(),
        "no I/O before the first use"
    );
    s.ping().await.unwrap();
    assert!(dir.0.join("locks.db").exists());
    let path = dir.0.join("locks.db");
    let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        tables,
        [
            "deadbolt_locks",
            "deadbolt_locks_fence",
            "deadbolt_locks_permits",
            "deadbolt_locks_waiters"
        ]
    );
    pool.close().await;
    s.close().await;
}

#[tokio::test]
async fn a_missing_directory_is_reported_and_not_created() {
    let dir = TempDir::new();
    let url = format!("sqlite://{}", dir.0.join("nope/locks.db").display());
    let s = open(&url);
    let err = s.ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unreachable);
    assert!(err.message.contains("does not exist"), "{}", err.message);
    assert!(!dir.0.join("nope").exists());
    // Once the directory is there, the same store opens the file.
    std::fs::create_dir(dir.0.join("nope")).unwrap();
    s.ping().await.unwrap();
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_reported_as_a_store_error() {
    let dir = TempDir::new();
    std::fs::write(dir.0.join("locks.db"), vec![b'x'; 8192]).unwrap();
    let err = open(&dir.url()).ping().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Server, "{err:?}");
}

#[tokio::test]
async fn a_release_deletes_the_row_and_tokens_keep_increasing_in_a_new_store_on_the_file() {
    let (_dir, url, s) = alone();
    let (k, a, b) = (name(), owner(), owner());
    let first = s.acquire_fenced(&k, &a, 10_000).await.unwrap();
    assert!(s.released(&k, &a).await);
    assert_eq!(
        rows(&url, "deadbolt_locks").await,
        0,
        "nothing left of the name"
    );
    s.close().await;
    drop(s);
    // A new process on the same file.
    let s = open(&url);
    let second = s.acquire_fenced(&k, &b, 10_000).await.unwrap();
    assert!(second > first, "{second} after {first}");
    assert_eq!(rows(&url, "deadbolt_locks_fence").await, 1);
}

#[tokio::test]
async fn tokens_are_at_least_the_host_clock_in_microseconds() {
    let dir = TempDir::new();
    let s = open(&dir.url());
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let token = s.acquire_fenced(&name(), &owner(), 10_000).await.unwrap();
    // The floor is the clock in microseconds times the number of floor tags, plus a tag.
    assert!(
        token / super::sql::FLOOR_TAGS >= before,
        "{token} vs {before}"
    );
}

#[tokio::test]
async fn a_lease_taken_over_after_expiry_raises_the_counter_for_every_name() {
    let dir = TempDir::new();
    let s = open(&dir.url());
    let (k, a, b) = (name(), owner(), owner());
    s.ping().await.unwrap();
    // Push the counter far above the clock, so the clock floor cannot hide a missed raise.
    let pool = raw(&dir.url()).await;
    sqlx::query("UPDATE deadbolt_locks_fence SET value = 9000000000000000000")
        .execute(&pool)
        .await
        .unwrap();
    let first = s.acquire_fenced(&k, &a, 30).await.unwrap();
    assert_eq!(first, 9_000_000_000_000_000_001);
    sleep_ms(80).await;
    // The upsert's update path (an expired row) must raise the counter too.
    let second = s.acquire_fenced(&k, &b, 10_000).await.unwrap();
    assert_eq!(second, first + 1);
    let other = s.acquire_fenced(&name(), &a, 10_000).await.unwrap();
    assert_eq!(other, second + 1);
    let next = next_owner(&a, 10_000, ValueFormat::Fenced);
    assert_eq!(
        s.handoff(&k, Handoff::new(&b, &next)).await.unwrap(),
        Some(other + 1)
    );
    assert_eq!(s.acquire_fenced(&name(), &a, 10_000).await, Some(other + 2));
}

#[tokio::test]
async fn a_purge_deletes_the_rows_of_ended_leases_and_never_a_live_one() {
    let (_dir, url, s) = alone();
    let a = owner();
    for _ in 0..3 {
        s.acquire_fenced(&name(), &a, 20).await.unwrap();
    }
    let live = name();
    s.acquire_fenced(&live, &a, 60_000).await.unwrap();
    sleep_ms(60).await;
    assert_eq!(s.purge().await.unwrap(), 3);
    assert_eq!(rows(&url, "deadbolt_locks").await, 1);
    assert_eq!(s.inspect(&live).await.unwrap().unwrap().owner, a);
}

/// What the stores take turns at in [`six_stores_take_turns`]: a lock or a semaphore.
pub(super) trait Turns: 'static {
    /// Asks `s` for a turn at `name` for `owner`, of at most `limit` at once: its token, or
    /// `None` when refused.
    fn take(
        s: &SqliteStore,
        name: &str,
        owner: &str,
        limit: u32,
    ) -> impl std::future::Future<Output = Option<u64>> + Send;

    /// Ends `owner`'s turn at `name` on `s`: whether it was released.
    fn give(
        s: &SqliteStore,
        name: &str,
        owner: &str,
    ) -> impl std::future::Future<Output = bool> + Send;
}

/// Has six stores on one new file (six processes) each take `turns` turns at one name, a
/// new owner for each try with `owner_per_try` (one owner a store otherwise), asserting
/// that never more than `limit` hold a turn at once; returns every grant's token, in the
/// order of the grants.
pub(super) async fn six_stores_take_turns<T: Turns>(
    turns: usize,
    limit: u32,
    owner_per_try: bool,
) -> Vec<u64> {
    let dir = TempDir::new();
    let url = dir.url();
    let n = name();
    let inside = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (s, n) = (open(&url), n.clone());
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.spawn(async move {
            let mut me = owner();
            let mut done = 0;
            while done < turns {
                if owner_per_try {
                    me = owner();
                }
                let Some(token) = T::take(&s, &n, &me, limit).await else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let held = inside.fetch_add(1, Ordering::SeqCst);
                assert!(held < limit, "more than {limit} at once");
                tokens.lock().unwrap().push(token);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(T::give(&s, &n, &me).await);
                done += 1;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    tokens
}

/// Turns at a lock.
struct LockTurns;

impl Turns for LockTurns {
    async fn take(s: &SqliteStore, name: &str, owner: &str, _: u32) -> Option<u64> {
        s.acquire_fenced(name, owner, 10_000).await
    }

    async fn give(s: &SqliteStore, name: &str, owner: &str) -> bool {
        s.released(name, owner).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_on_one_file_never_overlap_and_tokens_strictly_increase() {
    let tokens = six_stores_take_turns::<LockTurns>(50, 1, false).await;
    assert_eq!(tokens.len(), 300);
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "in grant order");
}

#[tokio::test]
async fn a_write_held_past_the_busy_timeout_fails_as_a_timeout_within_the_bound() {
    let dir = TempDir::new();
    let url = dir.url();
    let store = SqliteStore::connect(
        &url,
        SqliteOptions {
            connect_timeout_ms: 300,
            response_timeout_ms: 300,
            ..options()
        },
    )
    .unwrap();
    // As the registry opens it: within the call bound.
    let s = Bounded::new("sqlite", store, call_timeout(300, 300));
    s.ping().await.unwrap();
    // Another "process" holds the write lock.
    let mut other = writing(&url).await;
    let started = Instant::now();
    let err = LockStore::try_acquire(&s, &name(), Acquisition::fenced(&owner(), 1_000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(600 + 500));
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    // Reads never wait for a writer.
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    assert_eq!(s.inspect(&name()).await.unwrap(), None);
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    assert!(s.acquire_fenced(&name(), &owner(), 1_000).await.is_some());
}

#[tokio::test]
async fn a_write_cancelled_midway_leaves_a_store_that_writes_on() {
    let (_dir, url, s) = alone();
    s.ping().await.unwrap();
    let mut other = writing(&url).await;
    // Dropped while its statement waits for the other connection's write lock.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        s.try_acquire(&name(), Acquisition::fenced(&owner(), 1_000)),
    )
    .await;
    assert!(cancelled.is_err());
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    let (k, a) = (name(), owner());
    assert!(s.acquire_fenced(&k, &a, 10_000).await.is_some());
    assert!(s.released(&k, &a).await);
}

#[cfg(unix)]
mod wake_ups {
    use super::*;

    /// Waits up to 2 s for the waiters' table to hold `n` rows; panics with `what` if not.
    async fn waiters_come_to(url: &str, n: i64, what: &str) {
        for _ in 0..200 {
            if rows(url, "deadbolt_locks_waiters").await == n {
                return;
            }
            sleep_ms(10).await;
        }
        panic!("{what}");
    }

    /// Two stores on a file of their own (two processes): `holding` holds `k` for `a`, and
    /// `waiting` watches it, its announcements coming on `releases`.
    struct Watched {
        _dir: TempDir,
        url: String,
        waiting: SqliteStore,
        holding: SqliteStore,
        k: String,
        a: String,
        releases: tokio::sync::broadcast::Receiver<String>,
    }

    async fn held_and_watched() -> Watched {
        let (_dir, url, waiting, holding) = on_one_file();
        let (k, a) = (name(), owner());
        holding.acquire_fenced(&k, &a, 10_000).await.unwrap();
        let releases = waiting.releases();
        waiting.watch(&k).await;
        Watched {
            _dir,
            url,
            waiting,
            holding,
            k,
            a,
            releases,
        }
    }

    #[tokio::test]
    async fn a_release_in_one_store_wakes_a_waiter_registered_in_another() {
        // `_dir` bound, so that the file lives to the end of the test.
        let Watched {
            _dir,
            waiting,
            holding,
            k,
            a,
            mut releases,
            ..
        } = held_and_watched().await;
        assert_eq!(waiting.watched(), 1);
        let outcome = holding.release(&k, Release::new(&a)).await.unwrap();
        assert!(outcome.released && outcome.others_waiting, "{outcome:?}");
        let heard = tokio::time::timeout(Duration::from_secs(5), releases.recv())
            .await
            .expect("a wake-up")
            .unwrap();
        assert_eq!(heard, k);
    }

    #[tokio::test]
    async fn a_force_release_wakes_waiters_too_and_a_release_with_nobody_waiting_says_so() {
        let Watched {
            _dir,
            url,
            waiting,
            holding,
            k,
            a,
            mut releases,
        } = held_and_watched().await;
        assert!(holding.force_release(&k).await.unwrap());
        let heard = tokio::time::timeout(Duration::from_secs(5), releases.recv()).await;
        assert_eq!(heard.unwrap().unwrap(), k);
        waiting.unwatch(&k).await;
        assert_eq!(waiting.watched(), 0);
        holding.acquire_fenced(&k, &a, 10_000).await.unwrap();
        let outcome = holding.release(&k, Release::new(&a)).await.unwrap();
        assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
        assert_eq!(rows(&url, "deadbolt_locks_waiters").await, 0);
    }

    #[tokio::test]
    async fn a_store_does_not_count_its_own_waiters_as_others() {
        let (_dir, _, s) = alone();
        let (k, a) = (name(), owner());
        s.acquire_fenced(&k, &a, 10_000).await.unwrap();
        s.watch(&k).await;
        let outcome = s.release(&k, Release::new(&a)).await.unwrap();
        assert!(outcome.released && !outcome.others_waiting, "{outcome:?}");
    }

    #[tokio::test]
    async fn registrations_of_dead_processes_are_forgotten_and_never_fail_a_release() {
        let (_dir, url, s) = alone();
        let (k, a) = (name(), owner());
        s.ping().await.unwrap();
        // A process that died while waiting left its registration behind.
        let pool = raw(&url).await;
        for dead in ["@deadbolt-gone-1", "/nonexistent/deadbolt-gone-2.sock"] {
            sqlx::query("INSERT INTO deadbolt_locks_waiters (name, addr) VALUES (?1, ?2)")
                .bind(k.as_bytes())
                .bind(dead)
                .execute(&pool)
                .await
                .unwrap();
        }
        s.acquire_fenced(&k, &a, 10_000).await.unwrap();
        let outcome = s.release(&k, Release::new(&a)).await.unwrap();
        assert!(outcome.released, "{outcome:?}");
        assert!(!outcome.others_waiting, "nobody alive waits");
        waiters_come_to(&url, 0, "the dead registrations were not forgotten").await;
    }

    #[tokio::test]
    async fn a_store_that_starts_listening_forgets_the_registrations_of_dead_processes() {
        let (_dir, url, s) = alone();
        s.ping().await.unwrap();
        let pool = raw(&url).await;
        sqlx::query(
            "INSERT INTO deadbolt_locks_waiters (name, addr) VALUES (X'01', '@deadbolt-gone')",
        )
        .execute(&pool)
        .await
        .unwrap();
        let k = name();
        s.watch(&k).await;
        waiters_come_to(&url, 1, "the dead registration was not forgotten").await;
    }

    #[tokio::test]
    async fn closing_a_store_unregisters_its_waiters() {
        let (_dir, url, s) = alone();
        s.watch(&name()).await;
        s.watch(&name()).await;
        assert_eq!(rows(&url, "deadbolt_locks_waiters").await, 2);
        s.close().await;
        assert_eq!(rows(&url, "deadbolt_locks_waiters").await, 0);
    }
}

mod conformance {
    use super::*;
    use crate::store::sql::conformance::SqlHarness;

    /// One file for every run's conformance tests (their names never meet), in the system's
    /// temporary directory: rows go with releases and purges, so it stays small.
    fn shared_url() -> String {
        let dir = std::env::temp_dir().join("deadbolt-sqlite-conformance");
        std::fs::create_dir_all(&dir).unwrap();
        format!("sqlite://{}", dir.join("locks.db").display())
    }

    /// The store as the registry opens it: within the call bound.
    fn shared() -> Option<SharedStore> {
        let bound = call_timeout(5000, 5000);
        Some(bounded("sqlite", open(&shared_url()), bound))
    }

    crate::conformance_suite!(shared());
    crate::permits_suite!(shared());

    /// The SQLite store for the suite the SQL stores share (`sql::conformance`): stores on
    /// the shared file stand for processes.
    struct Harness;

    impl SqlHarness for Harness {
        type Store = SqliteStore;
        const SERVED: bool = false;

        fn url_at(_port: u16) -> String {
            "sqlite:///nonexistent-dir-for-deadbolt/locks.db".to_owned()
        }

        /// One connection a store; a row is purged as soon as its lease ended.
        fn connect(url: Option<&str>, _: u32, connect_ms: u64, _: bool) -> SqliteStore {
            let opts = SqliteOptions {
                connect_timeout_ms: connect_ms,
                ..options()
            };
            SqliteStore::connect(url.unwrap_or(&shared_url()), opts).unwrap()
        }

        async fn purge(s: &SqliteStore) -> StoreResult<u64> {
            s.purge().await
        }

        async fn rows_named(key: &str) -> i64 {
            let pool = raw(&shared_url()).await;
            let query = sqlx::query_scalar("SELECT count(*) FROM deadbolt_locks WHERE name = ?");
            let n = query.bind(key.as_bytes()).fetch_one(&pool).await.unwrap();
            pool.close().await;
            n
        }

        async fn connections(_: &SqliteStore) -> Option<u32> {
            None
        }
    }

    crate::sql_conformance_suite!(Harness);
}
