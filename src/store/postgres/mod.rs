//! PostgreSQL store: one lease row per lock name, tokens from one sequence per table, and
//! release announcements over `LISTEN`/`NOTIFY` (docs/design.md, "PostgreSQL layout").
//! Counting semaphores live in two tables of their own beside it (see [`permits`]).
//!
//! Every lock operation is a single autocommit statement (see [`sql`]), so a pool of a few
//! connections serves any number of held locks and a crashed client leaves nothing but a row
//! that expires. Expiry is decided by the server's `clock_timestamp()` against `timestamptz`
//! columns: absolute instants, whatever the session's time zone.

mod errors;
mod notify;
mod permit_sql;
mod permits;
mod sql;
mod tls;

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Connection, Row};
use tokio::sync::OnceCell;
use tokio::task::JoinSet;

use self::errors::{is_protocol_violation, no_such_table, retry, Postgres};
use self::notify::Notifier;
use self::permit_sql::PermitStatements;
use self::sql::Statements;
use crate::store::sql::checks::{check_key, check_owner, check_ttl};
use crate::store::sql::errors::{closed_error, db_error};
use crate::store::sql::purge::PurgeClock;
use crate::store::tls::TlsOptions;
use crate::store::{
    ErrorKind, ExtendItem, HeldLock, LockInfo, LockStore, NextOwner, OperatorTools, PermitHolder,
    PermitRequest, ReleaseNotifications, ReleaseOutcome, StoreError, StoreResult,
};

pub use crate::store::sql::checks::{MAX_KEY_BYTES, MAX_OWNER_BYTES, MAX_TTL_MS};

/// Longest table name: PostgreSQL identifiers have at most 63 bytes, and the sequence is
/// named `<table>_fence` (the semaphore tables' suffixes, `_sem` and `_perm`, are shorter).
pub const MAX_TABLE_NAME_BYTES: usize = 63 - "_fence".len();

/// A pooled connection idle for longer than this is pinged before use, so that one dropped by
/// the server (a restart, `idle_session_timeout`, a proxy) is replaced instead of failing a
/// lock operation; busier connections skip the ping, which would double every round trip.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(30);

/// Most items per batched extension statement: one statement holds the row locks of its
/// items until it commits, so batches stay short; larger batches run concurrently.
const EXTEND_BATCH_MAX: usize = 1000;

/// Options for the PostgreSQL store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// Lease table, created on first use with its sequence `<table>_fence`: 1 to 57 ASCII
    /// letters, digits or underscores (quoted, so case matters). Default `"deadbolt_locks"`.
    /// Semaphores use `<table>_sem` and `<table>_perm`, created on their first use.
    pub table: String,
    /// Most connections the pool opens; held locks pin none of them. The listening
    /// connection for release announcements comes on top. Default 10.
    pub pool_size: u32,
    /// How long an operation waits to connect or for a free pooled connection, in
    /// milliseconds. Default 5000.
    pub connect_timeout_ms: u64,
    /// How long the server may take over one statement (its `statement_timeout`), in
    /// milliseconds. Default 5000. A whole call is bounded by `connect_timeout_ms +
    /// response_timeout_ms` (the registry wraps the store in [`crate::store::bounded`]).
    pub response_timeout_ms: u64,
    /// How long a name's row stays after the name was freed or expired before it is purged,
    /// in milliseconds. Default 300 000 (5 minutes); never less than twice
    /// `response_timeout_ms` (see `sql::ACQUIRE` for why it must exceed a statement's run).
    pub purge_after_ms: u64,
    /// TLS settings. When set, the connection is encrypted and, unless
    /// `reject_unauthorized` is false, the server's certificate is verified against `ca` (or
    /// the built-in public roots) and the URL's host. A `?sslmode=` in the URL still applies
    /// and must not contradict them. None: only what the URL says (default: `prefer`).
    pub tls: Option<TlsOptions>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            table: crate::limits::DEFAULT_TABLE.to_owned(),
            pool_size: crate::limits::DEFAULT_POOL_SIZE,
            connect_timeout_ms: crate::limits::DEFAULT_CONNECT_TIMEOUT_MS,
            response_timeout_ms: crate::limits::DEFAULT_RESPONSE_TIMEOUT_MS,
            purge_after_ms: 300_000,
            tls: None,
        }
    }
}

/// A PostgreSQL lock store over a connection pool.
///
/// Any number of locks can be held at once: each costs one row, no connection.
pub struct PostgresStore {
    connect_options: PgConnectOptions,
    /// [`Self::connect_options`] without the startup parameters the store adds.
    plain_options: PgConnectOptions,
    /// The `statement_timeout` the sessions are opened with, in milliseconds, as the server
    /// reports it in `pg_settings` (see [`PostgresStore::log_in`]).
    statement_timeout_ms: String,
    pool_size: u32,
    acquire_timeout: Duration,
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
    /// Built on first use rather than in `connect`, because building a pool spawns its
    /// maintenance task, which needs to run inside a tokio runtime.
    pool: OnceLock<PgPool>,
    closed: AtomicBool,
    /// Set once a first session was opened and checked (see [`PostgresStore::connected`]);
    /// left empty when that failed, so the next operation tries again.
    connected: OnceCell<()>,
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
            .field("host", &self.connect_options.get_host())
            .field("port", &self.connect_options.get_port())
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.notifier.stop();
    }
}

impl PostgresStore {
    /// Checks the URL (`postgres://` or `postgresql://`) and the options (TLS material
    /// included) and prepares the store.
    ///
    /// Does no I/O: the pool connects, and the table is created, on first use. So an
    /// unreachable server is reported by the first operation.
    pub fn connect(url: &str, opts: PostgresOptions) -> StoreResult<PostgresStore> {
        let known_scheme = url.split_once("://").is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
        });
        if !known_scheme {
            return Err(StoreError::invalid(
                "postgres: the URL must start with postgres:// or postgresql://",
            ));
        }
        // The message names the problem but not the URL, which may hold a password.
        let mut connect_options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::invalid(format!("postgres: invalid URL: {e}")))?;
        if let Some(tls) = &opts.tls {
            connect_options = tls::apply_tls(connect_options, url, tls)
                .map_err(|e| StoreError::invalid(format!("postgres: {e}")))?;
        }
        if !valid_table_name(&opts.table) {
            return Err(StoreError::invalid(format!(
                "postgres: invalid table name {:?}: use 1 to {MAX_TABLE_NAME_BYTES} ASCII \
                 letters, digits or underscores",
                opts.table
            )));
        }
        if opts.pool_size == 0 {
            return Err(StoreError::invalid(
                "postgres: pool_size must be at least 1",
            ));
        }
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
            connect_options,
            plain_options,
            statement_timeout_ms,
            pool_size: opts.pool_size,
            acquire_timeout: connect_timeout,
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
            pool: OnceLock::new(),
            closed: AtomicBool::new(false),
            connected: OnceCell::new(),
            table_ready: OnceCell::new(),
            permits_ready: OnceCell::new(),
        })
    }

    /// Runs batched extensions with `sql` (bound to the names, owners and ttls as three
    /// arrays, returning the (name, owner) pairs it extended) over the pool `ready` yields,
    /// once `check` passed each item (returning its ttl); `ready` is awaited only if some
    /// item is valid. The body of [`Self::extend_many`] and of the semaphores' batches.
    async fn extend_batched<'a>(
        &self,
        items: &[ExtendItem],
        check: impl Fn(&ExtendItem) -> StoreResult<i64>,
        ready: impl Future<Output = StoreResult<&'a PgPool>>,
        sql: &Arc<str>,
    ) -> Vec<StoreResult<bool>> {
        let mut out: Vec<Option<StoreResult<bool>>> = vec![None; items.len()];
        // Invalid items fail alone instead of failing their batch.
        let mut valid = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            match check(item) {
                Ok(ttl) => valid.push((index, ttl)),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        if !valid.is_empty() {
            match ready.await {
                Ok(pool) => {
                    let mut tasks = JoinSet::new();
                    for batch in valid.chunks(EXTEND_BATCH_MAX) {
                        let batch: Vec<Job> = batch
                            .iter()
                            .map(|&(index, ttl_ms)| Job {
                                index,
                                key: items[index].key.clone().into(),
                                owner: items[index].owner.clone().into(),
                                ttl_ms,
                            })
                            .collect();
                        let (pool, sql) = (pool.clone(), sql.clone());
                        tasks.spawn(async move { extend_batch(&pool, &sql, batch).await });
                    }
                    while let Some(joined) = tasks.join_next().await {
                        // A panicked task leaves its items unanswered (reported below).
                        if let Ok(done) = joined {
                            for (index, result) in done {
                                out[index] = Some(result);
                            }
                        }
                    }
                }
                Err(e) => {
                    for &(index, _) in &valid {
                        out[index] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    Err(StoreError::internal(
                        "postgres: extend_many: no result (the task extending it panicked)",
                    ))
                })
            })
            .collect()
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

    /// The pool, built on first use, once the table exists.
    async fn ready(&self) -> StoreResult<&PgPool> {
        let pool = self.connected().await?;
        self.table_ready
            .get_or_try_init(|| {
                self.ensure_schema(
                    pool,
                    &self.sql.create,
                    &self.sql.probe,
                    "creating the lock table",
                )
            })
            .await?;
        Ok(pool)
    }

    /// The pool, built on first use, once a first session was opened and checked (see
    /// [`Self::log_in`]); creates nothing (read-only operations use it, so that looking never
    /// runs DDL).
    pub(super) async fn connected(&self) -> StoreResult<&PgPool> {
        let pool = self.pool()?;
        // A `close` that ran between `pool()` and now may have missed this pool.
        if self.closed.load(Ordering::SeqCst) {
            pool.close().await;
            return Err(closed_error::<Postgres>());
        }
        self.connected
            .get_or_try_init(|| async {
                self.probe().await?;
                self.log_in(pool).await
            })
            .await?;
        Ok(pool)
    }

    /// The server as messages name it: `host:port`, or the socket's path.
    fn server(&self) -> String {
        let opts = &self.connect_options;
        match opts.get_socket() {
            Some(path) => path.display().to_string(),
            None => format!("{}:{}", opts.get_host(), opts.get_port()),
        }
    }

    /// Opens a first pooled session (kept in the pool for the next statement), so that a
    /// failure to connect or log in (a wrong password, an unknown database) is reported as
    /// connecting to the server, naming it, and checks that the session is the store's own.
    ///
    /// The store needs sessions that are its own from connection to close: `statement_timeout`
    /// travels in the startup packet, statements are prepared once per connection, and
    /// release announcements need a session that stays `LISTEN`ing. A pooler that hands one
    /// server session to several clients (PgBouncer in transaction or statement mode) breaks
    /// all three, and PgBouncer either refuses the `options` startup parameter or drops it
    /// (`ignore_startup_parameters`) whatever its mode. So both are refused here, with
    /// [`ErrorKind::Unsupported`]: a refused startup parameter (08P01, when the same login
    /// without it is accepted) and a session whose `statement_timeout` is not the one asked for.
    ///
    /// [`ErrorKind::Unsupported`]: crate::store::ErrorKind::Unsupported
    async fn log_in(&self, pool: &PgPool) -> StoreResult<()> {
        let connecting = format!("connecting to {}", self.server());
        let mut conn = match pool.acquire().await {
            Ok(conn) => conn,
            Err(e) if is_protocol_violation(&e) && self.accepted_without_options().await => {
                return Err(StoreError::new(
                    ErrorKind::Unsupported,
                    format!(
                        "postgres: {connecting}: the server refused the startup parameters \
                         that set the session's statement_timeout and extra_float_digits (what \
                         PgBouncer does unless told to ignore them), and accepts the same login \
                         without them: {UNSUPPORTED_POOLER}"
                    ),
                ))
            }
            Err(e) => return Err(db_error::<Postgres>(&connecting, e)),
        };
        // A simple query: no prepared statement, whatever stands in front of the server.
        let setting: Option<String> =
            sqlx::raw_sql("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'")
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| db_error::<Postgres>(&connecting, e))?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(|e| db_error::<Postgres>(&connecting, e))?;
        if setting.as_deref() != Some(self.statement_timeout_ms.as_str()) {
            return Err(StoreError::new(
                ErrorKind::Unsupported,
                format!(
                    "postgres: {connecting}: the session runs with statement_timeout {} ms \
                     instead of the {} ms it was opened with, so something between the client \
                     and PostgreSQL dropped the `options` startup parameter (PgBouncer's \
                     ignore_startup_parameters): {UNSUPPORTED_POOLER}",
                    setting.as_deref().unwrap_or("unknown"),
                    self.statement_timeout_ms
                ),
            ));
        }
        Ok(())
    }

    /// Whether the server accepts a login without the startup parameters the store adds
    /// (`options`, `extra_float_digits`): then it was those it refused.
    async fn accepted_without_options(&self) -> bool {
        let attempt = tokio::time::timeout(self.acquire_timeout, async {
            let conn = sqlx::PgConnection::connect_with(&self.plain_options).await?;
            conn.close().await
        });
        matches!(attempt.await, Ok(Ok(())))
    }

    /// Before the first use of the pool, one plain TCP connection to the server: sqlx's pool
    /// treats "connection refused" as a server still starting and retries until the connect
    /// timeout, then reports only "pool timed out". A server that is not there is reported as
    /// such, at once. Other outcomes are left to the pool.
    async fn probe(&self) -> StoreResult<()> {
        let opts = &self.connect_options;
        if opts.get_socket().is_some() {
            return Ok(());
        }
        crate::store::refused::check_not_refused(
            "postgres",
            opts.get_host(),
            opts.get_port(),
            self.acquire_timeout,
        )
        .await
    }

    /// Runs the `create` script; if the server refuses it, accepts tables that `probe` can
    /// read. `what` names the step in the error.
    async fn ensure_schema(
        &self,
        pool: &PgPool,
        create: &Arc<str>,
        probe: &Arc<str>,
        what: &str,
    ) -> StoreResult<()> {
        let created = sqlx::raw_sql(AssertSqlSafe(create.clone()))
            .execute(pool)
            .await;
        let Err(e) = created else {
            return Ok(());
        };
        // An account without CREATE on the schema fails here even when the table exists:
        // accept the table if it can be read. Only when the server answered, or an
        // unreachable server would make the caller wait for a second timeout.
        if e.as_database_error().is_some() {
            let probe = sqlx::query(AssertSqlSafe(probe.clone()))
                .execute(pool)
                .await;
            if probe.is_ok() {
                return Ok(());
            }
        }
        Err(db_error::<Postgres>(what, e))
    }

    fn pool(&self) -> StoreResult<&PgPool> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error::<Postgres>());
        }
        Ok(self.pool.get_or_init(|| {
            PgPoolOptions::new()
                .max_connections(self.pool_size)
                .min_connections(0)
                .acquire_timeout(self.acquire_timeout)
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for > PING_IF_IDLE_FOR {
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                })
                .connect_lazy_with(self.connect_options.clone())
        }))
    }
}

/// What a refused pooler's message ends with.
const UNSUPPORTED_POOLER: &str = "deadbolt needs server sessions of its own (a pooler in \
     transaction or statement mode, such as PgBouncer's pool_mode = transaction, is not \
     supported): connect to PostgreSQL directly";

/// One valid item of an `extend_many` call, owned so that its batch can run in a spawned task.
struct Job {
    /// Its place in the caller's list.
    index: usize,
    key: Vec<u8>,
    owner: Vec<u8>,
    ttl_ms: i64,
}

/// A (name, owner) pair as the batched extension returns it.
type Extended = (Vec<u8>, Vec<u8>);

/// Extends one batch with a single statement; returns each item's outcome with its index.
async fn extend_batch(
    pool: &PgPool,
    sql: &Arc<str>,
    batch: Vec<Job>,
) -> Vec<(usize, StoreResult<bool>)> {
    let names: Vec<&[u8]> = batch.iter().map(|j| j.key.as_slice()).collect();
    let owners: Vec<&[u8]> = batch.iter().map(|j| j.owner.as_slice()).collect();
    let ttls: Vec<i64> = batch.iter().map(|j| j.ttl_ms).collect();
    let extended: Result<Vec<Extended>, sqlx::Error> = retry(|| {
        sqlx::query_as(AssertSqlSafe(sql.clone()))
            .bind(&names)
            .bind(&owners)
            .bind(&ttls)
            .fetch_all(pool)
    })
    .await;
    match extended {
        Ok(rows) => {
            let rows: std::collections::HashSet<Extended> = rows.into_iter().collect();
            batch
                .into_iter()
                .map(|j| (j.index, Ok(rows.contains(&(j.key, j.owner)))))
                .collect()
        }
        Err(e) => {
            let error = db_error::<Postgres>("extend", e);
            batch
                .into_iter()
                .map(|j| (j.index, Err(error.clone())))
                .collect()
        }
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

/// A lease read from columns `first..first + 4` (owner, fence, remaining µs, data).
fn lock_info(row: &PgRow, first: usize) -> Result<LockInfo, sqlx::Error> {
    let owner: Vec<u8> = row.try_get(first)?;
    let fence: i64 = row.try_get(first + 1)?;
    let remaining_us: i64 = row.try_get(first + 2)?;
    let data: Option<Vec<u8>> = row.try_get(first + 3)?;
    Ok(LockInfo {
        // Owners are only ever written from `&str`, so this never replaces anything.
        owner: String::from_utf8_lossy(&owner).into_owned(),
        fencing_token: token_of(fence),
        remaining_ms: (remaining_us + 999) / 1000,
        data,
    })
}

/// A sequence value as a token (sequences start at 1 and never go below).
fn token_of(fence: i64) -> u64 {
    u64::try_from(fence).unwrap_or(0)
}

/// The first byte string greater than every string that starts with `prefix`, or `None`
/// when there is none (empty, or all `0xFF`): the prefix with trailing `0xFF` bytes dropped
/// and its last byte incremented.
fn prefix_upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut upper = prefix.to_vec();
    while let Some(last) = upper.pop() {
        if last < 0xFF {
            upper.push(last + 1);
            return Some(upper);
        }
    }
    None
}

/// The lease in milliseconds, if the dialect can keep it.
fn ttl_millis(ttl_ms: u64) -> StoreResult<i64> {
    check_ttl::<Postgres>(ttl_ms)
}

fn valid_table_name(name: &str) -> bool {
    crate::limits::valid_table_name(name) && name.len() <= MAX_TABLE_NAME_BYTES
}

/// The contract; every call is bounded by the decorator the registry wraps the store in
/// ([`crate::store::bounded`]).
impl LockStore for PostgresStore {
    /// Takes `key` for `owner` for `ttl_ms` if it is free or its lease has expired, and stores
    /// `data` with it. Returns the new fencing token, or `None` when another owner holds it.
    /// `owner` asking again while it holds the lock gets its own token back, with the lease
    /// set anew (so a retry after a lost reply is safe).
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the statement was sent, dropping the future may leave the lock
    /// taken, with nobody knowing its token, until `ttl_ms` passes.
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl_ms: u64,
        data: Option<&'a [u8]>,
        _format: crate::store::ValueFormat,
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        async move {
            check_key::<Postgres>(key)?;
            check_owner::<Postgres>(owner)?;
            let ttl = ttl_millis(ttl_ms)?;
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
    fn extend<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl_ms: u64,
        _has_data: bool,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        async move {
            check_key::<Postgres>(key)?;
            check_owner::<Postgres>(owner)?;
            let ttl = ttl_millis(ttl_ms)?;
            let pool = self.ready().await?;
            let sql = &self.sql.extend;
            let done = retry(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .bind(owner.as_bytes())
                    .bind(ttl)
                    .execute(pool)
            })
            .await
            .map_err(|e| db_error::<Postgres>("extend", e))?;
            Ok(done.rows_affected() > 0)
        }
        .boxed()
    }

    /// Extends many leases, as [`LockStore::extend`] would each; the result has one entry
    /// per item, in order. Items go in batches of up to 1 000, one statement each (the items
    /// as three arrays), the batches running concurrently over the pool. Each statement
    /// returns the (name, owner) pairs it extended, so every item's answer is exact.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent.
    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> BoxFuture<'a, Vec<StoreResult<bool>>> {
        async move {
            let check = |item: &ExtendItem| {
                check_key::<Postgres>(&item.key)?;
                check_owner::<Postgres>(&item.owner)?;
                ttl_millis(item.ttl_ms)
            };
            self.extend_batched(items, check, self.ready(), &self.sql.extend_many)
                .await
        }
        .boxed()
    }

    /// Frees `key` if `owner` holds it and its lease has not expired, announcing it to the
    /// other stores that were refused it. The row keeps its place until purged.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped call may have freed the lock, and repeating it then reports
    /// `released: false`.
    fn release<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, StoreResult<ReleaseOutcome>> {
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
    fn handoff<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        next: &'a NextOwner<'a>,
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        async move {
            check_key::<Postgres>(key)?;
            check_owner::<Postgres>(owner)?;
            check_owner::<Postgres>(next.owner)?;
            let ttl = ttl_millis(next.ttl_ms)?;
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
    fn inspect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, StoreResult<Option<LockInfo>>> {
        async move {
            check_key::<Postgres>(key)?;
            // A read creates nothing: a table that does not exist holds no lock.
            let pool = self.connected().await?;
            let sql = &self.sql.inspect;
            let row: Option<PgRow> = retry(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(key.as_bytes())
                    .fetch_optional(pool)
            })
            .await
            .or_else(|e| if no_such_table(&e) { Ok(None) } else { Err(e) })
            .map_err(|e| db_error::<Postgres>("inspect", e))?;
            row.map(|row| lock_info(&row, 0).map_err(|e| db_error::<Postgres>("inspect", e)))
                .transpose()
        }
        .boxed()
    }

    /// Checks that the server answers, creating the table if it does not exist yet.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
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
            self.closed.store(true, Ordering::SeqCst);
            self.notifier.stop();
            if let Some(pool) = self.pool.get() {
                // A connection stuck on a stalled server never comes back: do not wait for it.
                let _ = tokio::time::timeout(self.call_timeout, pool.close()).await;
            }
        }
        .boxed()
    }

    fn acquire_permits<'a>(
        &'a self,
        req: &'a PermitRequest<'a>,
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        PostgresStore::acquire_permits(self, req).boxed()
    }

    fn extend_permits<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        PostgresStore::extend_permits(self, name, owner, ttl_ms).boxed()
    }

    fn extend_permits_many<'a>(
        &'a self,
        items: &'a [ExtendItem],
    ) -> BoxFuture<'a, Vec<StoreResult<bool>>> {
        PostgresStore::extend_permits_many(self, items).boxed()
    }

    fn release_permits<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, StoreResult<ReleaseOutcome>> {
        PostgresStore::release_permits(self, name, owner).boxed()
    }

    fn permits<'a>(&'a self, name: &'a str) -> BoxFuture<'a, StoreResult<Vec<PermitHolder>>> {
        PostgresStore::permits(self, name).boxed()
    }

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

impl OperatorTools for PostgresStore {
    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, StoreResult<bool>> {
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

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<HeldLock>>> {
        async move {
            // A read creates nothing: a table that does not exist holds no lock.
            let pool = self.connected().await?;
            let upper = prefix_upper_bound(prefix.as_bytes());
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let sql = &self.sql.list;
            let rows: Vec<PgRow> = retry(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(prefix.as_bytes())
                    .bind(upper.as_deref())
                    .bind(limit)
                    .fetch_all(pool)
            })
            .await
            .or_else(|e| {
                if no_such_table(&e) {
                    Ok(Vec::new())
                } else {
                    Err(e)
                }
            })
            .map_err(|e| db_error::<Postgres>("list", e))?;
            rows.iter()
                .map(|row| {
                    let name: Vec<u8> = row.try_get(0)?;
                    Ok(HeldLock {
                        key: String::from_utf8_lossy(&name).into_owned(),
                        info: lock_info(row, 1)?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(|e| db_error::<Postgres>("list", e))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests;
