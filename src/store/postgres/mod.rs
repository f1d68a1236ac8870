//! PostgreSQL store: one lease row per lock name, tokens from one sequence per table, and
//! release announcements over `LISTEN`/`NOTIFY` (docs/design.md, "PostgreSQL layout").
//! Counting semaphores live in two tables of their own beside it (see [`permits`]).
//!
//! Every lock operation is a single autocommit statement (see [`sql`]), so a pool of a few
//! connections serves any number of held locks and a crashed client leaves nothing but a row
//! that expires. Expiry is decided by the server's `clock_timestamp()` against `timestamptz`
//! columns: absolute instants, whatever the session's time zone.

mod errors;
mod extend;
mod notify;
mod permit_sql;
mod permits;
mod pool;
mod sql;
mod tls;

use crate::store::delegate::delegate;
use crate::store::{Acquisition, Batch, Call, Handoff, Release, Renewal};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgPool, PgRow};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::OnceCell;

use self::errors::{retry, Postgres};
use self::notify::Notifier;
use self::permit_sql::PermitStatements;
use self::sql::Statements;
use crate::store::sql::checks::{check_handoff, check_key, check_lease, check_owner};
use crate::store::sql::errors::{db_error, read};
use crate::store::sql::extend::Leases;
use crate::store::sql::options::Url;
use crate::store::sql::pool::ServerPool;
use crate::store::sql::purge::PurgeClock;
use crate::store::sql::rows::{prefix_end, LeaseRow, Remaining};
use crate::store::{
    ExtendItem, HeldLock, LockInfo, LockStore, OperatorTools, ReleaseNotifications, ReleaseOutcome,
    StoreResult,
};

pub use crate::store::sql::checks::{MAX_KEY_BYTES, MAX_OWNER_BYTES, MAX_TTL_MS};

/// Longest table name: PostgreSQL identifiers have at most 63 bytes, and the sequence is
/// named `<table>_fence` (the semaphore tables' suffixes, `_sem` and `_perm`, are shorter).
pub const MAX_TABLE_NAME_BYTES: usize = 63 - "_fence".len();

/// Options for the PostgreSQL store (see [`ServerOptions`](crate::store::sql::options::ServerOptions)).
pub type PostgresOptions = crate::store::sql::options::ServerOptions;

/// A PostgreSQL lock store over a connection pool.
///
/// Any number of locks can be held at once: each costs one row, no connection.
pub struct PostgresStore {
    /// The pool's connect options without the startup parameters the store adds.
    plain_options: PgConnectOptions,
    /// The `statement_timeout` the sessions are opened with, in milliseconds, as the server
    /// reports it in `pg_settings` (see [`PostgresStore::log_in`]).
    statement_timeout_ms: String,
    /// The pool, built and logged in on first use, and whether the store is closed.
    server: ServerPool<Postgres, sqlx::Postgres>,
    /// Bound on its background work and on `close`, as on a call (the registry bounds calls
    /// with [`crate::store::bounded`]).
    call_timeout: Duration,
    /// See [`PostgresOptions::purge_after_ms`].
    purge_after: Duration,
    /// When the last purge started.
    purged: PurgeClock,
    sql: Statements,
    /// The semaphore statements.
    permit_sql: PermitStatements,
    /// This store's identity in the `waiter` column: random, so two stores (two processes)
    /// never share one.
    id: [u8; 16],
    /// The announcement channel: the table's name.
    channel: String,
    /// Left empty when creating the table failed, so the next operation tries again.
    table_ready: OnceCell<()>,
    /// The same for the semaphore tables, created on the first semaphore operation.
    permits_ready: OnceCell<()>,
    notifier: Notifier,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Connect options hold the password.
        f.debug_struct("PostgresStore")
            .field("host", &self.server.options().get_host())
            .field("port", &self.server.options().get_port())
            .field("pool_size", &self.server.size())
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.notifier.stop();
    }
}

/// How a PostgreSQL URL reads (see [`ServerOptions::connect_options`](crate::store::sql::options::ServerOptions::connect_options)).
const URL: Url<PgConnectOptions> = Url {
    schemes: ["postgres", "postgresql"],
    max_table: MAX_TABLE_NAME_BYTES,
    tls: tls::apply_tls,
};

impl PostgresStore {
    /// Checks the URL (`postgres://` or `postgresql://`) and the options (TLS material
    /// included) and prepares the store.
    ///
    /// Does no I/O: the pool connects, and the table is created, on first use. So an
    /// unreachable server is reported by the first operation.
    pub fn connect(url: &str, opts: PostgresOptions) -> StoreResult<PostgresStore> {
        let mut connect_options = opts.connect_options::<Postgres, PgConnectOptions>(url, &URL)?;
        // The server ends any statement of ours that runs past the response bound, so one
        // abandoned by the caller's bound does not take effect later, and no statement runs
        // longer than the purge delay (see `sql::ACQUIRE`).
        // The same login without the startup parameters the store adds (see `log_in`).
        let plain_options = connect_options.clone().extra_float_digits(None);
        let statement_timeout_ms = opts.response_timeout_ms.max(1).to_string();
        connect_options =
            connect_options.options([("statement_timeout", statement_timeout_ms.as_str())]);
        if connect_options.get_application_name().is_none() {
            connect_options = connect_options.application_name("deadbolt");
        }
        let connect_timeout = Duration::from_millis(opts.connect_timeout_ms);
        Ok(PostgresStore {
            notifier: Notifier::new(&opts.table, connect_options.clone(), connect_timeout),
            server: ServerPool::new(connect_options, opts.pool_size, connect_timeout),
            plain_options,
            statement_timeout_ms,
            call_timeout: Duration::from_millis(
                opts.connect_timeout_ms
                    .saturating_add(opts.response_timeout_ms),
            ),
            purge_after: Duration::from_millis(
                opts.purge_after_ms
                    .max(opts.response_timeout_ms.saturating_mul(2)),
            ),
            purged: PurgeClock::default(),
            sql: Statements::new(&opts.table),
            permit_sql: PermitStatements::new(&opts.table),
            id: *uuid::Uuid::new_v4().as_bytes(),
            channel: opts.table.clone(),
            table_ready: OnceCell::new(),
            permits_ready: OnceCell::new(),
        })
    }

    /// Deletes the rows of names free or expired for longer than the purge delay, and, once
    /// this store used semaphores, their lapsed holders and queued places and the headers of
    /// semaphores left without any, 1 000 at a time until none is left. Returns how many rows
    /// it deleted.
    ///
    /// # Cancel Safety
    /// Cancel safe: each statement deletes only rows nobody holds.
    pub async fn purge(&self) -> StoreResult<u64> {
        let pool = self.ready().await?;
        purge_rows(pool, &self.purge_statements(), self.purge_after).await
    }

    /// The purge statements: the lock table's, then, if this store created or found the
    /// semaphore tables, theirs.
    fn purge_statements(&self) -> Vec<Arc<str>> {
        let mut all = vec![self.sql.purge.clone()];
        if self.permits_ready.initialized() {
            all.extend(self.permit_sql.purge.iter().cloned());
        }
        all
    }

    /// Starts a purge in the background if it is due (see [`PurgeClock`]).
    fn purge_if_due(&self, pool: &PgPool) {
        self.purged.run_if_due(self.call_timeout, || {
            let (pool, sql, after) = (pool.clone(), self.purge_statements(), self.purge_after);
            async move { purge_rows(&pool, &sql, after).await }
        });
    }
}

/// Runs each purge statement (`sql::PURGE`, `permit_sql::PURGE_ROWS`, …), in order, until it
/// deletes fewer rows than its limit.
async fn purge_rows(pool: &PgPool, statements: &[Arc<str>], after: Duration) -> StoreResult<u64> {
    let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    let mut total = 0;
    for sql in statements {
        loop {
            let done = retry(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(after_ms)
                    .execute(pool)
            })
            .await
            .map_err(|e| db_error::<Postgres>("purge", e))?;
            total += done.rows_affected();
            if done.rows_affected() < 1000 {
                break;
            }
        }
    }
    Ok(total)
}

/// A sequence value as a token (sequences start at 1 and never go below).
fn token_of(fence: i64) -> u64 {
    u64::try_from(fence).unwrap_or(0)
}

/// The contract; every call is bounded by the decorator the registry wraps the store in
/// ([`crate::store::bounded`]).
impl LockStore for PostgresStore {
    delegate!(
        acquire_permits,
        extend_permits,
        extend_permits_many,
        release_permits,
        permits
    );

    /// Takes `key` for `owner` for `ttl_ms` if it is free or its lease has expired, and stores
    /// `data` with it. Returns the new fencing token, or `None` when another owner holds it.
    /// `owner` asking again while it holds the lock gets its own token back, with the lease
    /// set anew (so a retry after a lost reply is safe).
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the statement was sent, dropping the future may leave the lock
    /// taken, with nobody knowing its token, until `ttl_ms` passes.
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        async move {
            let ttl = check_lease::<Postgres>(key, owner, ttl_ms)?;
            let pool = self.ready().await?;
            let sql = &self.sql.acquire;
            let row: Option<PgRow> = retry(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .bind(ttl)
                    .bind(data)
                    .bind(&self.id[..])
                    .fetch_optional(pool)
            })
            .await
            .map_err(|e| db_error::<Postgres>("try_acquire", e))?;
            let Some(row) = row else {
                return Ok(None);
            };
            let decode = |e: sqlx::Error| db_error::<Postgres>("try_acquire", e);
            let token: i64 = row.try_get(0).map_err(decode)?;
            let granted: Option<bool> = row.try_get(1).map_err(decode)?;
            Ok((granted == Some(true)).then(|| token_of(token)))
        }
        .boxed()
    }

    /// Sets the remaining lease of `key` to `ttl_ms` if `owner` holds it and it has not
    /// expired. Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        self.renew(Leases::Locks, key, renewal).boxed()
    }

    /// Extends many leases, as [`LockStore::extend`] would each; the result has one entry
    /// per item, in order. Items go in batches of up to 1 000, one statement each (the items
    /// as three arrays), the batches running concurrently over the pool. Each statement
    /// returns the (name, owner) pairs it extended, so every item's answer is exact.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent.
    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        async move {
            let (ready, sql) = (self.ready(), &self.sql.extend_many);
            self.extend_batched(Leases::Locks, items, ready, sql).await
        }
        .boxed()
    }

    /// Frees `key` if `owner` holds it and its lease has not expired, announcing it to the
    /// other stores that were refused it. The row keeps its place until purged.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped call may have freed the lock, and repeating it then reports
    /// `released: false`.
    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let owner = r.owner;
        async move {
            check_key::<Postgres>(key)?;
            check_owner::<Postgres>(owner)?;
            let pool = self.ready().await?;
            let sql = &self.sql.release;
            let others: Option<bool> = retry(|| {
                sqlx::query_scalar(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .bind(&self.id[..])
                    .bind(&self.channel)
                    .fetch_optional(pool)
            })
            .await
            .map_err(|e| db_error::<Postgres>("release", e))?;
            self.purge_if_due(pool);
            Ok(ReleaseOutcome {
                released: others.is_some(),
                others_waiting: others.unwrap_or(false),
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
            let ttl = check_handoff::<Postgres>(key, &h)?;
            let pool = self.ready().await?;
            let sql = &self.sql.handoff;
            let token: Option<i64> = retry(|| {
                sqlx::query_scalar(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .bind(next.owner.as_bytes())
                    .bind(ttl)
                    .bind(next.data)
                    .fetch_optional(pool)
            })
            .await
            .map_err(|e| db_error::<Postgres>("handoff", e))?;
            Ok(token.map(token_of))
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
            check_key::<Postgres>(key)?;
            // A read creates nothing: a table that does not exist holds no lock.
            let pool = self.connected().await?;
            let sql = &self.sql.inspect;
            let row: Option<PgRow> = read::<Postgres, _>(
                "inspect",
                retry(|| {
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(key.as_bytes())
                        .fetch_optional(pool)
                })
                .await,
            )?;
            PgRow::inspected(row)
        }
        .boxed()
    }

    /// Checks that the server answers, creating the table if it does not exist yet.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    fn ping(&self) -> Call<'_, ()> {
        async move {
            let pool = self.ready().await?;
            retry(|| sqlx::query(sql::PING).execute(pool))
                .await
                .map_err(|e| db_error::<Postgres>("ping", e))?;
            Ok(())
        }
        .boxed()
    }

    /// Closes the pool and the listening connection, waiting (at most one call's bound) for
    /// connections in use to come back. Operations after this fail with `Closed`.
    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            self.notifier.stop();
            self.server.close(self.call_timeout).await;
        }
        .boxed()
    }

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

impl OperatorTools for PostgresStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        async move {
            check_key::<Postgres>(key)?;
            let pool = self.ready().await?;
            let sql = &self.sql.force_release;
            let freed: Option<bool> = retry(|| {
                sqlx::query_scalar(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(&self.channel)
                    .fetch_optional(pool)
            })
            .await
            .map_err(|e| db_error::<Postgres>("force_release", e))?;
            Ok(freed.is_some())
        }
        .boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        async move {
            // A read creates nothing: a table that does not exist holds no lock.
            let pool = self.connected().await?;
            let upper = prefix_end(prefix.as_bytes());
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let sql = &self.sql.list;
            let rows: Vec<PgRow> = read::<Postgres, _>(
                "list",
                retry(|| {
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(prefix.as_bytes())
                        .bind(upper.as_deref())
                        .bind(limit)
                        .fetch_all(pool)
                })
                .await,
            )?;
            PgRow::listed(&rows)
        }
        .boxed()
    }
}

/// Tokens are `BIGINT`; remaining time comes in microseconds.
impl LeaseRow for PgRow {
    type Dialect = Postgres;
    type Token = i64;
    const REMAINING: Remaining = Remaining::Micros;
}

#[cfg(test)]
mod tests;
