//! MySQL / MariaDB store: one lease row per lock name (docs/design.md), and counting
//! semaphores in tables of their own (`permits`).
//!
//! Every lock operation is a single autocommit statement, so a pool of a few connections
//! serves any number of held locks and a crashed client leaves nothing but a row that expires.
//!
//! Expiry is decided by the server: `UTC_TIMESTAMP(6)` rather than `NOW(6)`, because `NOW(6)`
//! follows the session `time_zone` (a `?timezone=` URL parameter, or a zone with daylight
//! saving time would move every lease by hours), while `UTC_TIMESTAMP(6)` is the same server
//! clock without that dependency. Both are fixed for the duration of one statement.

use crate::store::delegate::delegate;
use crate::store::sql::rows::{prefix_end, LeaseRow, Remaining};
use crate::store::{Acquisition, Batch, Call, Handoff, Release, Renewal};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlRow};
use sqlx::AssertSqlSafe;
use tokio::sync::OnceCell;

use crate::store::sql::checks::{check_handoff, check_key, check_lease, check_owner};
use crate::store::sql::errors::{db_error, read};
use crate::store::sql::options::Url;
use crate::store::sql::pool::ServerPool;
use crate::store::sql::purge::PurgeClock;
use crate::store::{
    ExtendItem, HeldLock, LockInfo, LockStore, OperatorTools, ReleaseNotifications, ReleaseOutcome,
    StoreResult,
};
use doorbell::Doorbell;
use errors::{retry_on_conflict, retry_transient, Mysql};
use extend::Leases;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use permits::PermitStatements;
use sql::{Statements, SQL_PING};
use tls::apply_tls;

mod doorbell;
mod errors;
mod extend;
mod permits;
mod pool;
mod sql;
mod tls;

pub use crate::store::sql::checks::{MAX_KEY_BYTES, MAX_OWNER_BYTES, MAX_TTL_MS};

/// Options for the MySQL store (see [`ServerOptions`](crate::store::sql::options::ServerOptions)).
pub type MysqlOptions = crate::store::sql::options::ServerOptions;

/// A MySQL or MariaDB lock store over a connection pool.
///
/// Any number of locks can be held at once: each costs one row, no connection.
pub struct MysqlStore {
    /// The pool, built and logged in on first use, and whether the store is closed.
    server: ServerPool<Mysql, sqlx::MySql>,
    /// Bound on its background work and on `close`, as on a call (the registry bounds calls
    /// with [`crate::store::bounded`]).
    call_timeout: Duration,
    /// See [`MysqlOptions::purge_after_ms`].
    purge_after: Duration,
    /// When the last purge started.
    purged: PurgeClock,
    sql: Statements,
    /// Left empty when creating the table failed, so the next operation tries again.
    table_ready: OnceCell<()>,
    /// Statements of the semaphore tables (see `permits`).
    permit_sql: PermitStatements,
    /// Set once the semaphore tables exist (created on the first semaphore call); left
    /// empty when creating them failed, so the next call tries again.
    permit_tables_ready: OnceCell<()>,
    /// Release announcements for this process's waiters (see `doorbell`).
    doorbell: Doorbell,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Connect options hold the password.
        f.debug_struct("MysqlStore")
            .field("host", &self.server.options().get_host())
            .field("port", &self.server.options().get_port())
            .field("pool_size", &self.server.size())
            .finish_non_exhaustive()
    }
}

/// How a MySQL URL reads (see [`ServerOptions::connect_options`](crate::store::sql::options::ServerOptions::connect_options)).
const URL: Url<MySqlConnectOptions> = Url {
    schemes: ["mysql", "mariadb"],
    max_table: crate::limits::MAX_TABLE_NAME_BYTES,
    tls: apply_tls,
};

impl MysqlStore {
    /// Checks the URL (`mysql://` or `mariadb://`) and the options (TLS material included)
    /// and prepares the store.
    ///
    /// Does no I/O: the pool connects, and the table is created, on first use. So an
    /// unreachable server is reported by the first operation, after at most
    /// `connect_timeout_ms`.
    pub fn connect(url: &str, opts: MysqlOptions) -> StoreResult<MysqlStore> {
        let connect_options = opts.connect_options::<Mysql, MySqlConnectOptions>(url, &URL)?;
        let quoted_table = format!("`{}`", opts.table);
        let connect_timeout = Duration::from_millis(opts.connect_timeout_ms);
        Ok(MysqlStore {
            doorbell: Doorbell::new(&opts.table, connect_options.clone(), connect_timeout),
            server: ServerPool::new(connect_options, opts.pool_size, connect_timeout),
            call_timeout: Duration::from_millis(
                opts.connect_timeout_ms
                    .saturating_add(opts.response_timeout_ms),
            ),
            purge_after: Duration::from_millis(opts.purge_after_ms),
            purged: PurgeClock::default(),
            sql: Statements::new(&quoted_table),
            table_ready: OnceCell::new(),
            permit_sql: PermitStatements::new(&opts.table),
            permit_tables_ready: OnceCell::new(),
        })
    }

    /// After a statement was sent twice (its connection broke), the token of `owner`'s live
    /// lease on `key`, if the first sending took effect (or a local handoff gave it to
    /// `owner` meanwhile). The lease is set anew first, so that it runs from after this call
    /// began, as the caller reckons it.
    async fn owned_token(&self, key: &str, owner: &str, ttl_ms: u64) -> StoreResult<Option<u64>> {
        if !LockStore::extend(self, key, Renewal::new(owner, ttl_ms)).await? {
            return Ok(None);
        }
        Ok(self
            .inspect(key)
            .await?
            .filter(|info| info.owner == owner)
            .map(|info| info.fencing_token))
    }

    /// Deletes the rows of names free or expired for longer than the purge delay (see
    /// `SQL_PURGE`), and of semaphores the same (see `permits`), 1 000 at a time until none
    /// is left. Returns how many it deleted.
    ///
    /// # Cancel Safety
    /// Cancel safe: each statement deletes only rows whose loss changes nothing.
    pub async fn purge(&self) -> StoreResult<u64> {
        let pool = self.ready().await?;
        let mut total = 0;
        for (sql, after) in self.purges() {
            total += purge_rows(pool, &sql, after).await?;
        }
        Ok(total)
    }

    /// The purge statements to run, each with the purge delay in its unit: the lock
    /// table's, and the semaphore tables' (`permits`) once this process created or found
    /// them.
    fn purges(&self) -> Vec<(Arc<str>, u64)> {
        let after_us = u64::try_from(self.purge_after.as_micros()).unwrap_or(u64::MAX);
        let after_ms = u64::try_from(self.purge_after.as_millis()).unwrap_or(u64::MAX);
        let mut out = vec![(self.sql.purge.clone(), after_us)];
        if self.permit_tables_ready.initialized() {
            out.extend(
                self.permit_sql
                    .purge
                    .iter()
                    .map(|sql| (sql.clone(), after_ms)),
            );
        }
        out
    }

    /// Starts a purge in the background if it is due (see [`PurgeClock`]).
    fn purge_if_due(&self, pool: &MySqlPool) {
        self.purged.run_if_due(self.call_timeout, || {
            let (pool, purges) = (pool.clone(), self.purges());
            async move {
                for (sql, after) in purges {
                    purge_rows(&pool, &sql, after).await?;
                }
                StoreResult::Ok(())
            }
        });
    }
}

/// Runs a purge statement (`SQL_PURGE` or a semaphore table's), binding the purge delay
/// `after` in its unit, until it deletes fewer rows than its limit.
async fn purge_rows(pool: &MySqlPool, sql: &Arc<str>, after: u64) -> StoreResult<u64> {
    let mut total = 0;
    loop {
        let done = retry_on_conflict(|| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(after)
                .execute(pool)
        })
        .await
        .map_err(|e| db_error::<Mysql>("purge", e))?;
        total += done.rows_affected();
        if done.rows_affected() < 1000 {
            return Ok(total);
        }
    }
}

/// A checked lease (see `sql::checks`) in microseconds, the unit of the lock table's
/// statements.
fn micros(ttl_ms: i64) -> u64 {
    ttl_ms as u64 * 1000
}

/// The contract; every call is bounded by the decorator the registry wraps the store in
/// ([`crate::store::bounded`]).
impl LockStore for MysqlStore {
    delegate!(acquire_permits, extend_permits, release_permits, permits);

    /// Takes `key` for `owner` for `ttl_ms` if it is free or its lease has expired, and stores
    /// `data` with it. Returns the new fencing token, or `None` when the lease is held, also
    /// when `owner` itself holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the statement was sent, dropping the future may leave the lock
    /// taken, with nobody knowing its token, until `ttl_ms` passes.
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        async move {
            let ttl_us = micros(check_lease::<Mysql>(key, owner, ttl_ms)?);
            let pool = self.ready().await?;
            let sql = &self.sql.acquire;
            let (done, reconnected) = retry_transient(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .bind(ttl_us)
                    .bind(data)
                    .execute(pool)
            })
            .await;
            let done = done.map_err(|e| db_error::<Mysql>("try_acquire", e))?;
            Ok(match done.last_insert_id() {
                0 if reconnected => self.owned_token(key, owner, ttl_ms).await?,
                0 => None,
                token => Some(token),
            })
        }
        .boxed()
    }

    /// Sets the remaining lease of `key` to `ttl_ms` if `owner` holds it and it has not
    /// expired. Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent, so a dropped call can simply be repeated.
    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        self.renew(Leases::Locks, key, renewal).boxed()
    }

    /// Extends many leases, as [`LockStore::extend`] would each; the result has one entry per
    /// item, in order.
    ///
    /// Items go in batches of up to 256, one multi-row `UPDATE` (one round trip and one commit)
    /// per batch, the batches running concurrently over the pool. A multi-row statement only
    /// reports how many rows it matched: when that equals the batch size, every item was
    /// extended (each matched row has one name, so n matched rows took n items with distinct
    /// names), which is the heartbeat's usual case. Otherwise that batch's items are extended
    /// again one by one, which is harmless for the ones already extended and tells each item's
    /// outcome.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent. Dropping the future aborts the batches not
    /// yet sent.
    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        self.extend_leases(Leases::Locks, items).boxed()
    }

    /// Frees `key` if `owner` holds it and its lease has not expired. Returns whether this call
    /// freed it. The fencing counter is kept, so the next holder gets a higher token.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent, but a dropped call may have freed the lock, and
    /// repeating it then returns `false`.
    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let owner = r.owner;
        async move {
            check_key::<Mysql>(key)?;
            check_owner::<Mysql>(owner)?;
            let pool = self.ready().await?;
            let sql = &self.sql.release;
            let done = retry_on_conflict(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .execute(pool)
            })
            .await
            .map_err(|e| db_error::<Mysql>("release", e))?;
            self.purge_if_due(pool);
            // No announcement: waiters elsewhere learn of it through their doorbell, which
            // looks at the lease row (see `doorbell`).
            Ok(ReleaseOutcome::unannounced(done.rows_affected() > 0))
        }
        .boxed()
    }

    /// Gives `key`, if `owner` holds it, straight to `next` with a new lease and fencing
    /// token in one statement (see `SQL_HANDOFF`); `None` if `owner` no longer holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have changed hands when the future is dropped.
    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>> {
        let (owner, next) = (h.from, h.next);
        async move {
            let ttl_us = micros(check_handoff::<Mysql>(key, &h)?);
            let pool = self.ready().await?;
            let sql = &self.sql.handoff;
            let (done, reconnected) = retry_transient(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(next.owner.as_bytes())
                    .bind(next.data)
                    .bind(ttl_us)
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .execute(pool)
            })
            .await;
            let done = done.map_err(|e| db_error::<Mysql>("handoff", e))?;
            if done.rows_affected() == 0 && reconnected {
                return self.owned_token(key, next.owner, next.ttl_ms).await;
            }
            Ok((done.rows_affected() > 0).then(|| done.last_insert_id()))
        }
        .boxed()
    }

    /// Reads the live lease on `key`: owner, fencing token, remaining time by the server's
    /// clock (rounded up to whole milliseconds) and data. `None` when it is free or expired.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        async move {
            check_key::<Mysql>(key)?;
            // A read creates nothing: a table that does not exist holds no lock.
            let pool = self.connected().await?;
            let row: Option<MySqlRow> = read::<Mysql, _>(
                "inspect",
                sqlx::query(AssertSqlSafe(self.sql.inspect.clone()))
                    .bind(key.as_bytes())
                    .fetch_optional(pool)
                    .await,
            )?;
            MySqlRow::inspected(row)
        }
        .boxed()
    }

    /// Extends many holders' permits (`key`: the semaphore), as
    /// [`LockStore::extend_permits`] would each, batched as [`LockStore::extend_many`]
    /// batches locks; one result per item, in order.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent. Dropping the future aborts the batches not
    /// yet sent.
    fn extend_permits_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        self.extend_leases(Leases::Permits, items).boxed()
    }

    /// Checks that the server answers, creating the table if it does not exist yet.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    fn ping(&self) -> Call<'_, ()> {
        async move {
            let pool = self.ready().await?;
            sqlx::query(SQL_PING)
                .execute(pool)
                .await
                .map_err(|e| db_error::<Mysql>("ping", e))?;
            Ok(())
        }
        .boxed()
    }

    /// Closes the pool, waiting (at most one call's bound) for connections in use to come
    /// back. Operations after this fail with a `BackendError`.
    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            self.doorbell.stop();
            self.server.close(self.call_timeout).await;
        }
        .boxed()
    }

    /// Releases are announced by the doorbell, one connection per store that looks at the
    /// lease rows of the names this process's waiters wait for (see `doorbell`).
    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

impl OperatorTools for MysqlStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        async move {
            check_key::<Mysql>(key)?;
            let pool = self.ready().await?;
            let sql = &self.sql.force_release;
            let done = retry_on_conflict(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .execute(pool)
            })
            .await
            .map_err(|e| db_error::<Mysql>("force_release", e))?;
            Ok(done.rows_affected() > 0)
        }
        .boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        async move {
            // A read creates nothing: a table that does not exist holds no lock.
            let pool = self.connected().await?;
            let end = prefix_end(prefix.as_bytes());
            let rows: Vec<MySqlRow> = read::<Mysql, _>(
                "list",
                sqlx::query(AssertSqlSafe(self.sql.list.clone()))
                    .bind(prefix.as_bytes())
                    .bind(end.as_deref())
                    .bind(end.as_deref())
                    .bind(u64::try_from(limit).unwrap_or(u64::MAX))
                    .fetch_all(pool)
                    .await,
            )?;
            MySqlRow::listed(&rows)
        }
        .boxed()
    }
}

/// Tokens are `BIGINT UNSIGNED`; remaining time comes in microseconds.
impl LeaseRow for MySqlRow {
    type Dialect = Mysql;
    type Token = u64;
    const REMAINING: Remaining = Remaining::Micros;
}

#[cfg(test)]
mod tests;
