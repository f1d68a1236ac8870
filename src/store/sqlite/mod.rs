//! SQLite store: locks shared by every process on one host through one database file, with
//! no server (docs/design.md, "SQLite layout").
//!
//! The file is in WAL mode, so reads never wait for a writer and a commit is an append to the
//! log. Every lock operation is one statement, hence one short transaction; each store uses
//! a single connection (`connection`), so the process's own operations queue in the process.
//! Processes meet in SQLite's busy handler: a statement that finds another process's write in
//! progress waits for it (`busy_timeout`), which takes microseconds since no transaction does
//! more than one statement.
//!
//! Expiry is decided by the host's wall clock as SQLite reads it, at the moment each
//! statement runs under the write lock: every process of the host shares it.
//!
//! Counting semaphores (`permits`) live in a table of their own, by the same rules: one
//! statement per operation, the same clock, tokens from the same counter.

mod connection;
mod errors;
mod extend;
mod path;
mod permits;
mod replaced;
mod sql;
#[cfg_attr(not(unix), path = "wake_none.rs")]
mod wake;

use crate::runtime::debug::debug;
use crate::store::delegate::delegate;
use crate::store::{Acquisition, Batch, Call, Handoff, Release, Renewal};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sqlx::sqlite::{SqliteConnectOptions, SqliteRow, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Row};

use crate::store::bounded::within;
use crate::store::sql::checks::{check_handoff, check_key, check_lease, check_owner};
use crate::store::sql::purge::PurgeClock;
use crate::store::sql::rows::{prefix_end, LeaseRow, Remaining};
use crate::store::{
    ErrorKind, ExtendItem, HeldLock, LockInfo, LockStore, OperatorTools, ReleaseOutcome,
    StoreError, StoreResult,
};
use connection::{Rewatch, SharedConnection};
use errors::{db_error, Sqlite};
use extend::Leases;
pub use path::database_path;
use replaced::Lease;
use sql::Statements;
use wake::{alive, Wake};

pub use crate::store::sql::checks::{MAX_KEY_BYTES, MAX_OWNER_BYTES, MAX_TTL_MS};

/// Options for the SQLite store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Lease table, created on first use with its three side tables (`<table>_fence`,
    /// `<table>_waiters`, `<table>_permits`): 1 to 64 ASCII letters, digits or underscores.
    /// Default `"deadbolt_locks"`.
    pub table: String,
    /// How long opening the file may take, in milliseconds. Default 5000.
    pub connect_timeout_ms: u64,
    /// How long a statement waits for another process's write to finish (SQLite's
    /// `busy_timeout`), in milliseconds. Default 5000. A whole call is bounded by
    /// `connect_timeout_ms + response_timeout_ms` (the registry wraps the store in [`crate::store::bounded`]).
    pub response_timeout_ms: u64,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            table: crate::limits::DEFAULT_TABLE.to_owned(),
            connect_timeout_ms: crate::limits::DEFAULT_CONNECT_TIMEOUT_MS,
            response_timeout_ms: crate::limits::DEFAULT_RESPONSE_TIMEOUT_MS,
        }
    }
}

/// A lock store in one SQLite database file, shared by every process on the host that opens
/// the same file.
pub struct SqliteStore {
    path: PathBuf,
    /// Bound on its background work and on `close`, as on a call (the registry bounds calls
    /// with [`crate::store::bounded`]).
    call_timeout: Duration,
    sql: Arc<Statements>,
    /// The store's one connection (shared with background clean-ups).
    conn: Arc<SharedConnection>,
    closed: AtomicBool,
    /// When the last purge started.
    purged: PurgeClock,
    /// Whether this store looked for the registrations of dead processes yet.
    swept: AtomicBool,
    wake: Wake,
    /// This store's tag in the floor of the tokens it draws (see [`sql::token_floor`]).
    floor_tag: u64,
}

crate::store::redact::debug_fields!(SqliteStore: path);

impl SqliteStore {
    /// Checks the URL (`sqlite:///absolute/path` or `sqlite://relative/path`, resolved
    /// against the working directory now) and the options, and prepares the store.
    ///
    /// Does no I/O: the file is opened (and created, not its directory) on first use.
    pub fn connect(url: &str, opts: SqliteOptions) -> StoreResult<SqliteStore> {
        let path = database_path(url)?;
        if !crate::limits::valid_table_name(&opts.table) {
            return Err(StoreError::invalid(format!(
                "sqlite: invalid table name {:?}: use 1 to 64 ASCII letters, digits or underscores",
                opts.table
            )));
        }
        let connect_options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            // A statement that meets another process's write waits for it this long.
            .busy_timeout(Duration::from_millis(opts.response_timeout_ms))
            // In WAL mode: a commit is durable across a process crash (the log is written
            // before it returns), and is synced to disk at checkpoints, not at every commit.
            .synchronous(SqliteSynchronous::Normal)
            .thread_name(|id| format!("deadbolt-sqlite-{id}"));
        let sql = Arc::new(Statements::new(&opts.table));
        let wake = Wake::new();
        let rewatch = Rewatch {
            sql: sql.watch.clone(),
            addr: wake.addr().to_string(),
            names: wake.watched(),
        };
        let conn = SharedConnection::new(
            connect_options,
            path.clone(),
            sql.schema.clone(),
            sql.takeover.clone(),
            rewatch,
            Duration::from_millis(opts.connect_timeout_ms),
        );
        Ok(SqliteStore {
            path,
            call_timeout: Duration::from_millis(
                opts.connect_timeout_ms
                    .saturating_add(opts.response_timeout_ms),
            ),
            sql,
            conn: Arc::new(conn),
            closed: AtomicBool::new(false),
            purged: PurgeClock::default(),
            swept: AtomicBool::new(false),
            wake,
            floor_tag: fastrand::u64(0..sql::FLOOR_TAGS),
        })
    }

    /// The database file's absolute path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The error of an extension of a lease that was live in a file since deleted or replaced.
    pub(super) fn replaced_error(&self, operation: &str) -> StoreError {
        StoreError::new(
            ErrorKind::Replaced,
            format!(
                "sqlite: {operation}: {} was deleted or replaced while the lease was held; the lease was in the old file",
                self.path.display()
            ),
        )
    }

    /// After a row was deleted (by a release or a force release): whether its lease was live,
    /// and whether other processes wait for the name (they are told).
    fn deleted(&self, key: &str, row: &SqliteRow, operation: &str) -> StoreResult<(bool, bool)> {
        let live: bool = row.try_get(0).map_err(|e| db_error(operation, e))?;
        let addrs: Option<String> = row.try_get(1).map_err(|e| db_error(operation, e))?;
        let others = match addrs {
            Some(addrs) => self.tell(key, &addrs),
            None => false,
        };
        Ok((live, others))
    }

    /// Tells the processes at `addrs` (newline-separated) that `key` was released, and
    /// forgets the addresses nobody listens on any more. Returns whether another process
    /// waits for it.
    fn tell(&self, key: &str, addrs: &str) -> bool {
        let told = self.wake.tell(key, addrs);
        self.forget(told.dead);
        told.others
    }

    /// Deletes the rows of leases that ended without a release, and of semaphores' lapsed
    /// holders and queued places, 1 000 at a time until none is left. Returns how many it
    /// deleted.
    ///
    /// # Cancel Safety
    /// Cancel safe: each statement deletes only rows nobody holds.
    pub async fn purge(&self) -> StoreResult<u64> {
        purge_all(&self.conn, &self.sql).await
    }

    /// Starts a purge in the background if it is due (see [`PurgeClock`]).
    fn purge_if_due(&self) {
        self.purged.run_if_due(self.call_timeout, || {
            let (conn, sql) = (self.conn.clone(), self.sql.clone());
            async move { purge_all(&conn, &sql).await }
        });
    }

    /// Registers this process as waiting for `key` (see `wake`). The first registration also
    /// looks for those of processes that are gone, once.
    async fn register(&self, key: &str) -> StoreResult<()> {
        within("sqlite", "watch", self.call_timeout, async {
            let mut w = self.conn.lock().await?;
            let done = sqlx::query(AssertSqlSafe(self.sql.watch.as_str()))
                .bind(key.as_bytes())
                .bind(self.wake.addr())
                .execute(w.conn())
                .await;
            w.finish(done).map_err(|e| db_error("watch", e))?;
            if !self.swept.swap(true, Ordering::AcqRel) {
                self.sweep();
            }
            Ok(())
        })
        .await
    }

    /// Unregisters this process for `key`.
    async fn unregister(&self, key: &str) -> StoreResult<()> {
        within("sqlite", "unwatch", self.call_timeout, async {
            let mut w = self.conn.lock().await?;
            let done = sqlx::query(AssertSqlSafe(self.sql.unwatch.as_str()))
                .bind(key.as_bytes())
                .bind(self.wake.addr())
                .execute(w.conn())
                .await;
            w.finish(done).map_err(|e| db_error("unwatch", e))?;
            Ok(())
        })
        .await
    }

    /// Forgets, in the background, the registrations of addresses nobody listens on.
    fn forget(&self, dead: Vec<String>) {
        if dead.is_empty() {
            return;
        }
        let (conn, sql, bound) = (self.conn.clone(), self.sql.clone(), self.call_timeout);
        tokio::spawn(async move {
            let forget = forget_addresses(&conn, &sql.forget, dead);
            let _ = tokio::time::timeout(bound, forget).await;
        });
    }

    /// Looks, in the background, for registered addresses nobody listens on any more (the
    /// processes died waiting) and forgets them: the waiter table holds the live waiters
    /// plus at most the names the dead ones waited for until someone sweeps.
    fn sweep(&self) {
        let (conn, sql, own) = (
            self.conn.clone(),
            self.sql.clone(),
            self.wake.addr().to_string(),
        );
        let bound = self.call_timeout;
        tokio::spawn(async move {
            let sweep = async {
                let addrs: Vec<String> = {
                    let Some(mut w) = conn.lock_if_open().await else {
                        return Ok(());
                    };
                    let addrs = sqlx::query_scalar(AssertSqlSafe(sql.addresses.as_str()))
                        .fetch_all(w.conn())
                        .await;
                    w.finish(addrs)?
                };
                let dead = addrs
                    .into_iter()
                    .filter(|a| *a != own && !alive(a))
                    .collect();
                forget_addresses(&conn, &sql.forget, dead).await
            };
            let _ = tokio::time::timeout(bound, sweep).await;
        });
    }
}

/// Purges lapsed locks, then lapsed permits and queued places.
async fn purge_all(conn: &SharedConnection, sql: &Statements) -> StoreResult<u64> {
    let locks = purge_rows(conn, &sql.purge).await?;
    Ok(locks + purge_rows(conn, &sql.purge_permits).await?)
}

/// Runs the purge statement until it deletes fewer rows than its limit.
async fn purge_rows(conn: &SharedConnection, sql: &str) -> StoreResult<u64> {
    let mut total = 0;
    loop {
        // One statement at a time: this process's lock operations get the connection
        // between them.
        let mut w = conn.lock().await?;
        let done = sqlx::query(AssertSqlSafe(sql)).execute(w.conn()).await;
        let done = w.finish(done).map_err(|e| db_error("purge", e))?;
        total += done.rows_affected();
        if done.rows_affected() < 1000 {
            return Ok(total);
        }
    }
}

/// Deletes every registration of each address (if the connection is open).
async fn forget_addresses(
    conn: &SharedConnection,
    sql: &str,
    addrs: Vec<String>,
) -> sqlx::Result<()> {
    for addr in addrs {
        let Some(mut w) = conn.lock_if_open().await else {
            return Ok(());
        };
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(addr)
            .execute(w.conn())
            .await;
        w.finish(done)?;
    }
    Ok(())
}

/// The fencing token in column 0.
fn token(row: &SqliteRow, operation: &str) -> StoreResult<u64> {
    let fence: i64 = row.try_get(0).map_err(|e| db_error(operation, e))?;
    u64::try_from(fence)
        .ok()
        .filter(|&t| t > 0)
        .ok_or_else(|| StoreError::internal(format!("sqlite: {operation}: token {fence}")))
}

/// The contract; every call is bounded by the decorator the registry wraps the store in
/// ([`crate::store::bounded`]).
impl LockStore for SqliteStore {
    delegate!(acquire_permits, extend_permits, release_permits, permits);

    /// Takes `key` for `owner` for `ttl_ms` if it is free or its lease has ended, and stores
    /// `data` with it. Returns the new fencing token, or `None` when the lease is held, also
    /// when `owner` itself holds it, or when the file was deleted or replaced before the
    /// statement committed (see [`connection::SharedConnection::moved_since_statement`]).
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the statement is on its way, dropping the future may leave the
    /// lock taken, with nobody knowing its token, until `ttl_ms` passes.
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        async move {
            let ttl = check_lease::<Sqlite>(key, owner, ttl_ms)?;
            let mut w = self.conn.lock().await?;
            // Held by another owner in a file replaced since, whose holder has not heard yet.
            if self.conn.ghost_of_another(key.as_bytes(), owner.as_bytes()) {
                w.finish(Ok(())).ok();
                return Ok(None);
            }
            let row = sqlx::query(AssertSqlSafe(self.sql.acquire.as_str()))
                .bind(key.as_bytes())
                .bind(owner.as_bytes())
                .bind(ttl)
                .bind(data)
                .bind(sql::token_floor(self.floor_tag))
                .fetch_optional(w.conn())
                .await;
            let row = w.finish(row).map_err(|e| db_error("try_acquire", e))?;
            let Some(row) = row else { return Ok(None) };
            if self.conn.moved_since_statement() {
                // Granted in a file deleted or replaced meanwhile: not a grant anyone else
                // is sure to see. Busy; the next call leaves the old file.
                debug!("sqlite: try_acquire {key:?}: granted in a replaced file, disowned");
                return Ok(None);
            }
            self.conn
                .forget_ghost(Lease::Lock, key.as_bytes(), owner.as_bytes());
            token(&row, "try_acquire").map(Some)
        }
        .boxed()
    }

    /// Sets the remaining lease of `key` to `ttl_ms` if `owner` holds it and it has not
    /// ended. Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        self.renew(Leases::Locks, key, renewal).boxed()
    }

    /// Extends many leases, as [`LockStore::extend`] would each, in one statement per 256
    /// items; the result has one entry per item, in order. The statement returns the
    /// (name, owner) of every lease it extended, so each item's outcome is exact.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent.
    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        self.extend_each(items, Leases::Locks).boxed()
    }

    /// Frees `key` if `owner` holds it (its row goes, live or not) and tells the processes
    /// waiting for it. `released`: whether the lease was live.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent (a repeat after a dropped call reports `released: false`).
    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let owner = r.owner;
        async move {
            check_key::<Sqlite>(key)?;
            check_owner::<Sqlite>(owner)?;
            let mut w = self.conn.lock().await?;
            let row = sqlx::query(AssertSqlSafe(self.sql.release.as_str()))
                .bind(key.as_bytes())
                .bind(owner.as_bytes())
                .fetch_optional(w.conn())
                .await;
            let row = w.finish(row).map_err(|e| db_error("release", e))?;
            self.purge_if_due();
            let Some(row) = row else {
                return Ok(ReleaseOutcome::unannounced(false));
            };
            let (released, others_waiting) = self.deleted(key, &row, "release")?;
            Ok(ReleaseOutcome {
                released,
                others_waiting,
            })
        }
        .boxed()
    }

    /// Gives `key`, if `owner` holds it, straight to `next` with a new lease and fencing
    /// token in one statement; `None` if `owner` no longer holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have changed hands when the future is dropped.
    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>> {
        let (owner, next) = (h.from, h.next);
        async move {
            let ttl = check_handoff::<Sqlite>(key, &h)?;
            let mut w = self.conn.lock().await?;
            let row = sqlx::query(AssertSqlSafe(self.sql.handoff.as_str()))
                .bind(key.as_bytes())
                .bind(owner.as_bytes())
                .bind(next.owner.as_bytes())
                .bind(next.data)
                .bind(ttl)
                .bind(sql::token_floor(self.floor_tag))
                .fetch_optional(w.conn())
                .await;
            let row = w.finish(row).map_err(|e| db_error("handoff", e))?;
            let Some(row) = row else { return Ok(None) };
            if self.conn.moved_since_statement() {
                // Handed over in a file deleted or replaced meanwhile (see `try_acquire`).
                debug!("sqlite: handoff {key:?}: handed over in a replaced file, disowned");
                return Ok(None);
            }
            self.conn
                .forget_ghost(Lease::Lock, key.as_bytes(), next.owner.as_bytes());
            token(&row, "handoff").map(Some)
        }
        .boxed()
    }

    /// Reads the live lease on `key`: owner, fencing token, remaining time by the host clock
    /// and data. `None` when it is free or its lease has ended.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        async move {
            check_key::<Sqlite>(key)?;
            if self.conn.absent() {
                return Ok(None);
            }
            let mut w = self.conn.lock().await?;
            let row = sqlx::query(AssertSqlSafe(self.sql.inspect.as_str()))
                .bind(key.as_bytes())
                .fetch_optional(w.conn())
                .await;
            let row = w.finish(row).map_err(|e| db_error("inspect", e))?;
            SqliteRow::inspected(row)
        }
        .boxed()
    }

    /// Checks that the file can be opened and written, creating it and the tables if needed.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    fn ping(&self) -> Call<'_, ()> {
        async move {
            let mut w = self.conn.lock().await?;
            let done = sqlx::query("SELECT 1").execute(w.conn()).await;
            w.finish(done).map_err(|e| db_error("ping", e))?;
            Ok(())
        }
        .boxed()
    }

    fn extend_permits_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        self.extend_each(items, Leases::Permits).boxed()
    }

    /// Unregisters this process's waiters and closes the connections (waiting at most one
    /// call's bound). Operations after this fail with [`ErrorKind::Closed`].
    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            if self.closed.swap(true, Ordering::SeqCst) {
                return;
            }
            self.wake.close();
            let bound = self.call_timeout;
            let own = vec![self.wake.addr().to_string()];
            let forget = forget_addresses(&self.conn, &self.sql.forget, own);
            let _ = tokio::time::timeout(bound, forget).await;
            let _ = tokio::time::timeout(bound, self.conn.close()).await;
        }
        .boxed()
    }

    #[cfg(unix)]
    fn release_notifications(&self) -> Option<&dyn crate::store::ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

impl OperatorTools for SqliteStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        async move {
            check_key::<Sqlite>(key)?;
            let mut w = self.conn.lock().await?;
            let row = sqlx::query(AssertSqlSafe(self.sql.force_release.as_str()))
                .bind(key.as_bytes())
                .fetch_optional(w.conn())
                .await;
            let row = w.finish(row).map_err(|e| db_error("force_release", e))?;
            match row {
                Some(row) => Ok(self.deleted(key, &row, "force_release")?.0),
                None => Ok(false),
            }
        }
        .boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        async move {
            if self.conn.absent() {
                return Ok(Vec::new());
            }
            let mut w = self.conn.lock().await?;
            let rows = sqlx::query(AssertSqlSafe(self.sql.list.as_str()))
                .bind(prefix.as_bytes())
                .bind(prefix_end(prefix.as_bytes()))
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(w.conn())
                .await;
            let rows = w.finish(rows).map_err(|e| db_error("list", e))?;
            SqliteRow::listed(&rows)
        }
        .boxed()
    }
}

/// Tokens are `BIGINT`; remaining time comes in milliseconds.
impl LeaseRow for SqliteRow {
    type Dialect = Sqlite;
    type Token = i64;
    const REMAINING: Remaining = Remaining::Millis;
}

#[cfg(test)]
mod tests;
