//! MySQL / MariaDB store: one lease row per lock name (docs/design.md).
//!
//! Every lock operation is a single autocommit statement, so a pool of a few connections
//! serves any number of held locks and a crashed client leaves nothing but a row that expires.
//!
//! Expiry is decided by the server: `UTC_TIMESTAMP(6)` rather than `NOW(6)`, because `NOW(6)`
//! follows the session `time_zone` (a `?timezone=` URL parameter, or a zone with daylight
//! saving time would move every lease by hours), while `UTC_TIMESTAMP(6)` is the same server
//! clock without that dependency. Both are fixed for the duration of one statement.

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow, MySqlSslMode};
use sqlx::{AssertSqlSafe, Connection, Row};
use tokio::sync::OnceCell;
use tokio::task::JoinSet;

use super::tls::TlsOptions;
use super::{BackendError, BackendResult, ExtendItem, LockInfo};

/// Longest lock name accepted, in bytes (the width of the `name` column).
///
/// Checked before any I/O: a server in non-strict SQL mode would otherwise silently truncate
/// longer names, and two different names would then share one lock.
pub const MAX_KEY_BYTES: usize = 1024;

/// Longest owner token accepted, in bytes (the width of the `owner` column).
pub const MAX_OWNER_BYTES: usize = 255;

/// Longest lease accepted, in milliseconds (100 years).
///
/// Keeps `ttl * 1000` microseconds far from `u64` overflow and the expiry inside `DATETIME`'s
/// range (year 9999).
pub const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// A pooled connection idle for longer than this is pinged before use, so that one dropped by
/// the server (`wait_timeout`, restart, a proxy) is replaced instead of failing a lock
/// operation; busier connections skip the ping, which would double every round trip.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(30);

/// Most items per multi-row extend statement: 4 placeholders each, far below the protocol's
/// 65 535, and a statement small enough not to hold many row locks for long.
const EXTEND_BATCH_MAX: usize = 256;

// Placeholder substituted with the validated, backtick-quoted table name when the store is built.
const TABLE: &str = "{table}";

// Creates the lease table on first use. `name` and `owner` are binary so comparisons are
// byte-exact whatever the server's default collation. A free row keeps `fence` until it is
// purged (see `SQL_PURGE`), and has `expires_at` at the moment it was freed (see
// `SQL_RELEASE`), which lets the statements below decide "free or expired" from
// `expires_at` alone.
const SQL_CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS {table} (
    name VARBINARY(1024) NOT NULL,
    owner VARBINARY(255) NULL,
    fence BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    data LONGBLOB NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB";

// Tells whether the lease table exists and is readable, when creating it was refused.
const SQL_TABLE_PROBE: &str = "SELECT 1 FROM {table} WHERE 1 = 0";

// Takes a lock that is absent, free or expired, and reports the new fencing token through the
// OK packet's last-insert-id, all in one autocommit statement:
// - absent row: the VALUES row is inserted with the server's clock in microseconds since the
//   epoch as its token (the server reports the argument of the last `LAST_INSERT_ID(expr)`
//   call of a statement). A name's row is only purged long after its last token was issued,
//   and a row's token grows by one per acquisition, far slower than a microsecond clock, so
//   a name that comes back after its row was purged still gets a higher token (see
//   `SQL_PURGE` for the one assumption: the server clock never steps back by more than the
//   purge delay).
// - existing row: the VALUES row is still evaluated (so `LAST_INSERT_ID(clock)` ran), then the
//   UPDATE list runs under the row lock. Its first assignment always calls `LAST_INSERT_ID`
//   again, overriding that value: with `fence + 1` when the lease is free or expired, with 0
//   when it is held. The caller reads 0 as "busy"; 0 is never a token.
// The UPDATE assignments run left to right and see the values already assigned, so every one
// of them tests only `expires_at`, which is assigned last: each one sees the old expiry and
// they all take the same branch. `owner` is deliberately not tested: a release sets the epoch
// expiry (`SQL_RELEASE`), so "free" already reads as "expired". The holder itself calling
// again gets "busy" too, like Redis `SET NX`.
// `VALUES(col)` is the only way to name the inserted row that both MariaDB and MySQL 8 accept
// (MySQL deprecates it for a row alias that MariaDB lacks); binding the payload twice instead
// would halve the largest `data` that fits in `max_allowed_packet`.
const SQL_ACQUIRE: &str = "INSERT INTO {table} (name, owner, fence, expires_at, data)
VALUES (?, ?, LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
        UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?)
ON DUPLICATE KEY UPDATE
    fence = IF(expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(fence + 1), fence + LAST_INSERT_ID(0)),
    owner = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner),
    data = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(data), data),
    expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)";

// Extends a lease its owner still holds. The driver sets CLIENT_FOUND_ROWS, so the affected
// count is the matched count: 1 even if the new expiry equals the old one.
const SQL_EXTEND: &str = "UPDATE {table}
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)";

// Extends many leases in one statement, hence one commit (one log flush) for a whole batch of
// heartbeats. It is followed by `SQL_EXTEND_MANY_ARM` once per item, `SQL_EXTEND_MANY_MIDDLE`,
// one `SQL_EXTEND_MANY_PAIR` per item joined by commas, and `SQL_EXTEND_MANY_TAIL`.
const SQL_EXTEND_MANY_HEAD: &str =
    "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (CASE name";
// One item's new lease in microseconds, chosen by name.
const SQL_EXTEND_MANY_ARM: &str = " WHEN ? THEN ?";
// Closes the lease expression and opens the list of (name, owner) pairs to match.
const SQL_EXTEND_MANY_MIDDLE: &str = " END) MICROSECOND WHERE (name, owner) IN (";
// One item's name and owner.
const SQL_EXTEND_MANY_PAIR: &str = "(?, ?)";
// Only leases that have not expired may be extended.
const SQL_EXTEND_MANY_TAIL: &str = ") AND expires_at > UTC_TIMESTAMP(6)";

// Frees a lease its owner still holds. The counter stays until the row is purged; an expiry of
// "now" marks the row free for `SQL_ACQUIRE` and dates it for `SQL_PURGE`, and the payload
// goes so that free rows stay small.
const SQL_RELEASE: &str = "UPDATE {table}
SET owner = NULL, data = NULL, expires_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)";

// Deletes the rows of names that have been free or expired for longer than the purge delay,
// so a name leaves nothing behind once it is no longer used: the table holds the names used
// within the last purge delay, however many names were ever locked. Safe for fencing because
// a purged name's last token is at most the server clock (in microseconds) when it was
// issued, and `SQL_ACQUIRE` gives a returning name the clock at least one purge delay later:
// tokens keep increasing unless the server clock steps back by more than the delay. A row
// that an acquisition takes over meanwhile is locked and re-read by this DELETE, and no longer
// matches. At most 1 000 rows per statement, so it never holds many locks for long.
const SQL_PURGE: &str = "DELETE FROM {table}
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT 1000";

// Hands a lease its owner still holds straight to the next owner (a waiter in the same
// process) with a new expiry and payload. The new token travels back in the OK packet's
// last-insert-id through LAST_INSERT_ID(expr), as in `SQL_ACQUIRE`; one row matched means
// handed over.
const SQL_HANDOFF: &str = "UPDATE {table}
SET fence = LAST_INSERT_ID(fence + 1), owner = ?, data = ?,
    expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)";

// Reads a live lease; the remaining time is computed by the server in microseconds.
const SQL_INSPECT: &str =
    "SELECT owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), data
FROM {table}
WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)";

// Liveness check.
const SQL_PING: &str = "SELECT 1";

/// Options for the MySQL store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlOptions {
    /// Lease table, created on first use: 1 to 64 ASCII letters, digits or underscores.
    /// Default `"deadbolt_locks"`.
    pub table: String,
    /// Most connections the pool opens; held locks pin none of them. Default 10.
    pub pool_size: u32,
    /// How long an operation waits to connect or for a free pooled connection before it fails
    /// with a `BackendError`, in milliseconds. Default 5000.
    pub connect_timeout_ms: u64,
    /// How long an operation waits for the server's answer once connected, in milliseconds.
    /// Default 5000. A whole call is bounded by `connect_timeout_ms + response_timeout_ms`
    /// (see [`MysqlStore::bounded`]), however the server or the network misbehaves.
    pub response_timeout_ms: u64,
    /// How long a name's row stays after the name was freed or expired before it is purged,
    /// in milliseconds. Default 300 000 (5 minutes). Fencing tokens stay increasing unless the
    /// server clock steps back by more than this (see `SQL_PURGE`).
    pub purge_after_ms: u64,
    /// TLS settings. When set, the connection is encrypted and, unless
    /// `reject_unauthorized` is false, the server's certificate is verified against `ca` (or
    /// the built-in public roots) and the URL's host. A `?ssl-mode=` in the URL still applies
    /// and must not contradict them. None: only what the URL says (default: TLS if offered).
    pub tls: Option<TlsOptions>,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        Self {
            table: "deadbolt_locks".to_owned(),
            pool_size: 10,
            connect_timeout_ms: 5000,
            response_timeout_ms: 5000,
            purge_after_ms: 300_000,
            tls: None,
        }
    }
}

/// The TLS query parameters of a `mysql://` URL (names as sqlx reads them), by what they set.
fn url_tls_params(url: &str) -> Vec<(&'static str, String)> {
    let query = url
        .split_once('?')
        .map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let what = match k {
                "sslmode" | "ssl-mode" => "ssl-mode",
                "sslca" | "ssl-ca" => "ssl-ca",
                "sslcert" | "ssl-cert" => "ssl-cert",
                "sslkey" | "ssl-key" => "ssl-key",
                _ => return None,
            };
            Some((what, v.to_ascii_lowercase()))
        })
        .collect()
}

/// Applies `tls` to options parsed from `url`, refusing combinations with the URL's own TLS
/// parameters that would silently drop one of them. Messages never quote the material.
fn apply_tls(
    mut options: MySqlConnectOptions,
    url: &str,
    tls: &TlsOptions,
) -> Result<MySqlConnectOptions, String> {
    tls.check()?;
    tls.check_servername(options.get_host(), "MySQL")
        .map_err(|e| format!("{e} (or use ?ssl-mode=verify_ca to verify the CA only)"))?;
    let params = url_tls_params(url);
    let in_url = |what: &str| params.iter().find(|(w, _)| *w == what).map(|(_, v)| v);
    for (what, given) in [
        ("ssl-ca", tls.ca.is_some()),
        ("ssl-cert", tls.cert.is_some()),
        ("ssl-key", tls.key.is_some()),
    ] {
        let option = &what[4..];
        if given && in_url(what).is_some() {
            return Err(format!(
                "options.tls.{option} and the URL's {what} both name a {option}: give one"
            ));
        }
    }
    let mode = match (
        in_url("ssl-mode").map(String::as_str),
        tls.reject_unauthorized,
    ) {
        (None, true) => MySqlSslMode::VerifyIdentity,
        (None, false) => MySqlSslMode::Required,
        (Some("verify_identity"), true) => MySqlSslMode::VerifyIdentity,
        (Some("verify_ca"), true) => MySqlSslMode::VerifyCa,
        (Some("required"), false) => MySqlSslMode::Required,
        (Some(mode @ ("verify_identity" | "verify_ca")), false) => {
            return Err(format!(
                "options.tls.rejectUnauthorized is false but the URL's ssl-mode={mode} verifies \
                 the server: drop one of them"
            ))
        }
        (Some(mode @ ("required" | "preferred")), true) => {
            return Err(format!(
                "the URL's ssl-mode={mode} does not verify the server's certificate, so \
                 options.tls would not be checked: drop ssl-mode (options.tls then verifies \
                 the server), use verify_ca or verify_identity, or set \
                 options.tls.rejectUnauthorized to false"
            ))
        }
        (Some(mode), _) => {
            return Err(format!(
                "the URL's ssl-mode={mode} cannot be combined with options.tls, which \
                 requires an encrypted connection"
            ))
        }
    };
    options = options.ssl_mode(mode);
    if let Some(ca) = &tls.ca {
        options = options.ssl_ca_from_pem(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        options = options
            .ssl_client_cert_from_pem(cert)
            .ssl_client_key_from_pem(key);
    }
    Ok(options)
}

/// Statement texts for one table, shared with spawned tasks without copying.
struct Statements {
    create_table: Arc<str>,
    table_probe: Arc<str>,
    acquire: Arc<str>,
    extend: Arc<str>,
    release: Arc<str>,
    handoff: Arc<str>,
    inspect: Arc<str>,
    purge: Arc<str>,
    /// `extend_many[i]` handles `2 << i` items. Batches are padded to these sizes so a few
    /// texts, each prepared once per connection, serve every batch size.
    extend_many: Vec<Arc<str>>,
}

impl Statements {
    fn new(quoted_table: &str) -> Self {
        let sql = |template: &str| -> Arc<str> { template.replace(TABLE, quoted_table).into() };
        let mut extend_many = Vec::new();
        let mut size = 2;
        while size <= EXTEND_BATCH_MAX {
            let mut text = SQL_EXTEND_MANY_HEAD.replace(TABLE, quoted_table);
            text.push_str(&SQL_EXTEND_MANY_ARM.repeat(size));
            text.push_str(SQL_EXTEND_MANY_MIDDLE);
            text.push_str(&vec![SQL_EXTEND_MANY_PAIR; size].join(", "));
            text.push_str(SQL_EXTEND_MANY_TAIL);
            extend_many.push(text.into());
            size *= 2;
        }
        Self {
            create_table: sql(SQL_CREATE_TABLE),
            table_probe: sql(SQL_TABLE_PROBE),
            acquire: sql(SQL_ACQUIRE),
            extend: sql(SQL_EXTEND),
            release: sql(SQL_RELEASE),
            handoff: sql(SQL_HANDOFF),
            inspect: sql(SQL_INSPECT),
            purge: sql(SQL_PURGE),
            extend_many,
        }
    }
}

/// A MySQL or MariaDB lock store over a connection pool.
///
/// Any number of locks can be held at once: each costs one row, no connection.
pub struct MysqlStore {
    connect_options: MySqlConnectOptions,
    pool_size: u32,
    acquire_timeout: Duration,
    /// Bound on a whole call (see [`MysqlStore::bounded`]).
    call_timeout: Duration,
    /// See [`MysqlOptions::purge_after_ms`].
    purge_after: Duration,
    /// When the last purge started (`None`: never), so it runs at most once per
    /// [`PURGE_EVERY`] and process.
    last_purge: std::sync::Mutex<Option<std::time::Instant>>,
    sql: Statements,
    /// Built on first use rather than in `connect`, because building a pool spawns its
    /// maintenance task, which needs to run inside a tokio runtime.
    pool: OnceLock<MySqlPool>,
    closed: AtomicBool,
    /// Left empty when creating the table failed, so the next operation tries again.
    table_ready: OnceCell<()>,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Connect options hold the password.
        f.debug_struct("MysqlStore")
            .field("host", &self.connect_options.get_host())
            .field("port", &self.connect_options.get_port())
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

impl MysqlStore {
    /// Checks the URL (`mysql://` or `mariadb://`) and the options (TLS material included)
    /// and prepares the store.
    ///
    /// Does no I/O: the pool connects, and the table is created, on first use. So an
    /// unreachable server is reported by the first operation, after at most
    /// `connect_timeout_ms`.
    pub fn connect(url: &str, opts: MysqlOptions) -> BackendResult<MysqlStore> {
        let known_scheme = url.split_once("://").is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("mysql") || scheme.eq_ignore_ascii_case("mariadb")
        });
        if !known_scheme {
            return Err(BackendError::new(
                "mysql: the URL must start with mysql:// or mariadb://",
            ));
        }
        // The message names the problem but not the URL, which may hold a password.
        let mut connect_options = MySqlConnectOptions::from_str(url)
            .map_err(|e| BackendError::new(format!("mysql: invalid URL: {e}")))?;
        if let Some(tls) = &opts.tls {
            connect_options = apply_tls(connect_options, url, tls)
                .map_err(|e| BackendError::new(format!("mysql: {e}")))?;
        }
        if !valid_table_name(&opts.table) {
            return Err(BackendError::new(format!(
                "mysql: invalid table name {:?}: use 1 to 64 ASCII letters, digits or underscores",
                opts.table
            )));
        }
        if opts.pool_size == 0 {
            return Err(BackendError::new("mysql: pool_size must be at least 1"));
        }
        Ok(MysqlStore {
            connect_options,
            pool_size: opts.pool_size,
            acquire_timeout: Duration::from_millis(opts.connect_timeout_ms),
            call_timeout: Duration::from_millis(
                opts.connect_timeout_ms
                    .saturating_add(opts.response_timeout_ms),
            ),
            purge_after: Duration::from_millis(opts.purge_after_ms),
            last_purge: std::sync::Mutex::new(None),
            sql: Statements::new(&format!("`{}`", opts.table)),
            pool: OnceLock::new(),
            closed: AtomicBool::new(false),
            table_ready: OnceCell::new(),
        })
    }

    /// Takes `key` for `owner` for `ttl_ms` if it is free or its lease has expired, and stores
    /// `data` with it. Returns the new fencing token, or `None` when the lease is held, also
    /// when `owner` itself holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the statement was sent, dropping the future may leave the lock
    /// taken, with nobody knowing its token, until `ttl_ms` passes.
    pub async fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
    ) -> BackendResult<Option<u64>> {
        check_key(key)?;
        check_owner(owner)?;
        let ttl_us = ttl_micros(ttl_ms)?;
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
        let done = done.map_err(|e| db_error("try_acquire", e))?;
        Ok(match done.last_insert_id() {
            0 if reconnected => self.owned_token(key, owner).await?,
            0 => None,
            token => Some(token),
        })
    }

    /// Sets the remaining lease of `key` to `ttl_ms` if `owner` holds it and it has not
    /// expired. Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent, so a dropped call can simply be repeated.
    pub async fn extend(&self, key: &str, owner: &str, ttl_ms: u64) -> BackendResult<bool> {
        check_key(key)?;
        check_owner(owner)?;
        let ttl_us = ttl_micros(ttl_ms)?;
        let pool = self.ready().await?;
        extend_one(pool, &self.sql.extend, key, owner, ttl_us).await
    }

    /// Extends many leases, as [`MysqlStore::extend`] would each; the result has one entry per
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
    pub async fn extend_many(&self, items: &[ExtendItem]) -> Vec<BackendResult<bool>> {
        if items.len() <= 1 {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(self.extend(&item.key, &item.owner, item.ttl_ms).await);
            }
            return out;
        }
        let mut out: Vec<Option<BackendResult<bool>>> = vec![None; items.len()];
        // Invalid items fail alone instead of failing their batch.
        let mut valid = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let checked = check_key(&item.key)
                .and_then(|()| check_owner(&item.owner))
                .and_then(|()| ttl_micros(item.ttl_ms));
            match checked {
                Ok(ttl_us) => valid.push(Job {
                    index,
                    key: item.key.clone(),
                    owner: item.owner.clone(),
                    ttl_us,
                }),
                Err(e) => out[index] = Some(Err(e)),
            }
        }
        if !valid.is_empty() {
            match self.ready().await {
                Ok(pool) => {
                    let mut tasks = JoinSet::new();
                    let mut rest = valid;
                    while !rest.is_empty() {
                        let tail = rest.split_off(rest.len().min(EXTEND_BATCH_MAX));
                        let batch = std::mem::replace(&mut rest, tail);
                        let padded = batch.len().max(2).next_power_of_two();
                        let bulk_sql =
                            self.sql.extend_many[padded.trailing_zeros() as usize - 1].clone();
                        let one_sql = self.sql.extend.clone();
                        let pool = pool.clone();
                        tasks.spawn(async move {
                            extend_batch(&pool, &bulk_sql, &one_sql, batch).await
                        });
                    }
                    join_into(tasks, &mut out).await;
                }
                Err(e) => {
                    for job in &valid {
                        out[job.index] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    Err(BackendError::new(
                        "mysql: extend_many: no result (the task extending it panicked)",
                    ))
                })
            })
            .collect()
    }

    /// After a statement was sent twice (its connection broke), the token of `owner`'s live
    /// lease on `key`, if the first sending took effect.
    async fn owned_token(&self, key: &str, owner: &str) -> BackendResult<Option<u64>> {
        Ok(self
            .inspect(key)
            .await?
            .filter(|info| info.owner == owner)
            .map(|info| info.fencing_token))
    }

    /// Gives `key`, if `owner` holds it, straight to `next` with a new lease and fencing
    /// token in one statement (see `SQL_HANDOFF`); `None` if `owner` no longer holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have changed hands when the future is dropped.
    pub async fn handoff(
        &self,
        key: &str,
        owner: &str,
        next: &super::NextOwner<'_>,
    ) -> BackendResult<Option<u64>> {
        check_key(key)?;
        check_owner(owner)?;
        check_owner(next.owner)?;
        let micros = ttl_micros(next.ttl_ms)?;
        let pool = self.ready().await?;
        let sql = &self.sql.handoff;
        let (done, reconnected) = retry_transient(|| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(next.owner.as_bytes())
                .bind(next.data)
                .bind(micros)
                .bind(key.as_bytes())
                .bind(owner.as_bytes())
                .execute(pool)
        })
        .await;
        let done = done.map_err(|e| db_error("handoff", e))?;
        if done.rows_affected() == 0 && reconnected {
            return self.owned_token(key, next.owner).await;
        }
        Ok((done.rows_affected() > 0).then(|| done.last_insert_id()))
    }

    /// Frees `key` if `owner` holds it and its lease has not expired. Returns whether this call
    /// freed it. The fencing counter is kept, so the next holder gets a higher token.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent, but a dropped call may have freed the lock, and
    /// repeating it then returns `false`.
    pub async fn release(&self, key: &str, owner: &str) -> BackendResult<bool> {
        check_key(key)?;
        check_owner(owner)?;
        let pool = self.ready().await?;
        let sql = &self.sql.release;
        let done = retry_on_conflict(|| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(key.as_bytes())
                .bind(owner.as_bytes())
                .execute(pool)
        })
        .await
        .map_err(|e| db_error("release", e))?;
        self.purge_if_due(pool);
        Ok(done.rows_affected() > 0)
    }

    /// Deletes the rows of names free or expired for longer than the purge delay (see
    /// `SQL_PURGE`), 1 000 at a time until none is left. Returns how many it deleted.
    ///
    /// # Cancel Safety
    /// Cancel safe: each statement deletes only rows nobody holds.
    pub async fn purge(&self) -> BackendResult<u64> {
        let pool = self.ready().await?;
        purge_rows(pool, &self.sql.purge, self.purge_after).await
    }

    /// Starts a purge in the background if none ran in this process for [`PURGE_EVERY`].
    /// Called after releases, so an idle store costs nothing and a busy one purges rarely.
    fn purge_if_due(&self, pool: &MySqlPool) {
        let now = std::time::Instant::now();
        {
            let mut last = self.last_purge.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < PURGE_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let (pool, sql, after) = (pool.clone(), self.sql.purge.clone(), self.purge_after);
        let bound = self.call_timeout;
        tokio::spawn(async move {
            // Best effort: a failed purge is tried again after the next interval.
            let _ = tokio::time::timeout(bound, purge_rows(&pool, &sql, after)).await;
        });
    }

    /// Reads the live lease on `key`: owner, fencing token, remaining time by the server's
    /// clock (rounded up to whole milliseconds) and data. `None` when it is free or expired.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> BackendResult<Option<LockInfo>> {
        check_key(key)?;
        let pool = self.ready().await?;
        let row: Option<MySqlRow> = sqlx::query(AssertSqlSafe(self.sql.inspect.clone()))
            .bind(key.as_bytes())
            .fetch_optional(pool)
            .await
            .map_err(|e| db_error("inspect", e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let decode = |e: sqlx::Error| db_error("inspect", e);
        let owner: Vec<u8> = row.try_get(0).map_err(decode)?;
        let fencing_token: u64 = row.try_get(1).map_err(decode)?;
        let remaining_us: i64 = row.try_get(2).map_err(decode)?;
        let data: Option<Vec<u8>> = row.try_get(3).map_err(decode)?;
        Ok(Some(LockInfo {
            // Owners are only ever written from `&str`, so this never replaces anything.
            owner: String::from_utf8_lossy(&owner).into_owned(),
            fencing_token,
            remaining_ms: (remaining_us + 999) / 1000,
            data,
        }))
    }

    /// Checks that the server answers, creating the table if it does not exist yet.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> BackendResult<()> {
        let pool = self.ready().await?;
        sqlx::query(SQL_PING)
            .execute(pool)
            .await
            .map_err(|e| db_error("ping", e))?;
        Ok(())
    }

    /// Closes the pool, waiting (at most one call's bound) for connections in use to come
    /// back. Operations after this fail with a `BackendError`.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(pool) = self.pool.get() {
            // A connection stuck on a stalled server never comes back: do not wait for it.
            let _ = tokio::time::timeout(self.call_timeout, pool.close()).await;
        }
    }

    /// Runs one store operation within the call bound (`connect_timeout_ms +
    /// response_timeout_ms`). sqlx bounds connecting and waiting for a pooled connection,
    /// but not a statement whose answer never comes (a server stopped with SIGSTOP, a frozen
    /// network path), and the reconnect loop may try several connections: this bounds it all.
    /// A statement abandoned this way may still take effect on the server; its connection is
    /// not reused (sqlx tests a connection whose operation was dropped before pooling it).
    ///
    /// # Cancel Safety
    /// As cancel safe as `fut`.
    pub async fn bounded<T>(
        &self,
        operation: &str,
        fut: impl Future<Output = BackendResult<T>>,
    ) -> BackendResult<T> {
        match tokio::time::timeout(self.call_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(BackendError::new(format!(
                "mysql: {operation}: no answer from the server within {} ms",
                self.call_timeout.as_millis()
            ))),
        }
    }

    /// [`MysqlStore::extend_many`] within the call bound: on time-out every item fails.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent.
    pub async fn extend_many_bounded(&self, items: &[ExtendItem]) -> Vec<BackendResult<bool>> {
        match tokio::time::timeout(self.call_timeout, self.extend_many(items)).await {
            Ok(results) => results,
            Err(_) => {
                let e = BackendError::new(format!(
                    "mysql: extend: no answer from the server within {} ms",
                    self.call_timeout.as_millis()
                ));
                items.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// The pool, built on first use, once the table exists.
    async fn ready(&self) -> BackendResult<&MySqlPool> {
        let pool = self.pool()?;
        // A `close` that ran between `pool()` and now may have missed this pool.
        if self.closed.load(Ordering::SeqCst) {
            pool.close().await;
            return Err(closed_error());
        }
        self.table_ready
            .get_or_try_init(|| self.ensure_table(pool))
            .await?;
        Ok(pool)
    }

    async fn ensure_table(&self, pool: &MySqlPool) -> BackendResult<()> {
        let created = sqlx::query(AssertSqlSafe(self.sql.create_table.clone()))
            .execute(pool)
            .await;
        let Err(e) = created else {
            return Ok(());
        };
        // The server checks the CREATE privilege even when the table exists, so an account
        // limited to reading and writing a table its DBA created would fail here: accept the
        // table if it can be read. Only when the server answered, or an unreachable server
        // would make the caller wait for a second timeout.
        if e.as_database_error().is_some() {
            let probe = sqlx::query(AssertSqlSafe(self.sql.table_probe.clone()))
                .execute(pool)
                .await;
            if probe.is_ok() {
                return Ok(());
            }
        }
        Err(db_error("creating the lock table", e))
    }

    fn pool(&self) -> BackendResult<&MySqlPool> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        Ok(self.pool.get_or_init(|| {
            MySqlPoolOptions::new()
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

/// One valid item of an `extend_many` call, owned so that its batch can run in a spawned task.
#[derive(Clone)]
struct Job {
    index: usize,
    key: String,
    owner: String,
    ttl_us: u64,
}

/// Extends one batch with a single statement, falling back to one statement per item when the
/// matched count does not prove that every item was extended. Returns each item's outcome
/// with its index in the caller's list.
async fn extend_batch(
    pool: &MySqlPool,
    bulk_sql: &Arc<str>,
    one_sql: &Arc<str>,
    batch: Vec<Job>,
) -> Vec<(usize, BackendResult<bool>)> {
    if batch.len() == 1 {
        let job = &batch[0];
        let result = extend_one(pool, one_sql, &job.key, &job.owner, job.ttl_us).await;
        return vec![(job.index, result)];
    }
    // Padding repeats the last item: a duplicate matches no extra row and, being identical,
    // cannot change which lease a name gets, so it never makes a partial batch look complete.
    let padded = batch.len().next_power_of_two();
    let last = batch.len() - 1;
    let slot = |i: usize| &batch[i.min(last)];
    let bulk = retry_on_conflict(|| {
        let mut query = sqlx::query(AssertSqlSafe(bulk_sql.clone()));
        for i in 0..padded {
            query = query.bind(slot(i).key.as_bytes()).bind(slot(i).ttl_us);
        }
        for i in 0..padded {
            query = query
                .bind(slot(i).key.as_bytes())
                .bind(slot(i).owner.as_bytes());
        }
        query.execute(pool)
    })
    .await;
    match bulk {
        Ok(done) if done.rows_affected() == batch.len() as u64 => {
            return batch.iter().map(|job| (job.index, Ok(true))).collect();
        }
        Ok(_) => {}
        // The server was not reached, or the answer was lost: one statement per item would
        // only wait for the same failure again.
        Err(e) if e.as_database_error().is_none() => {
            let error = db_error("extend", e);
            return batch
                .iter()
                .map(|job| (job.index, Err(error.clone())))
                .collect();
        }
        // The server refused the batch as a whole: try the items on their own.
        Err(_) => {}
    }
    // Some item was not extended: ask each item on its own, concurrently, so that every
    // answer is exact.
    let mut tasks = JoinSet::new();
    for job in batch.iter() {
        let (pool, sql, job) = (pool.clone(), one_sql.clone(), job.clone());
        tasks.spawn(async move {
            let result = extend_one(&pool, &sql, &job.key, &job.owner, job.ttl_us).await;
            vec![(job.index, result)]
        });
    }
    let mut results = Vec::with_capacity(batch.len());
    while let Some(joined) = tasks.join_next().await {
        // A panicked task leaves its item unanswered; `extend_many` reports it as an error.
        if let Ok(mut done) = joined {
            results.append(&mut done);
        }
    }
    results
}

/// Collects the outcomes of batch tasks into their slots; a panicked task leaves its slots
/// empty, and `extend_many` reports those as errors.
async fn join_into(
    mut tasks: JoinSet<Vec<(usize, BackendResult<bool>)>>,
    out: &mut [Option<BackendResult<bool>>],
) {
    while let Some(joined) = tasks.join_next().await {
        if let Ok(done) = joined {
            for (index, result) in done {
                out[index] = Some(result);
            }
        }
    }
}

/// How often a process purges free rows at most.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Runs `SQL_PURGE` until it deletes fewer rows than its limit.
async fn purge_rows(pool: &MySqlPool, sql: &Arc<str>, after: Duration) -> BackendResult<u64> {
    let after_us = u64::try_from(after.as_micros()).unwrap_or(u64::MAX);
    let mut total = 0;
    loop {
        let done = retry_on_conflict(|| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(after_us)
                .execute(pool)
        })
        .await
        .map_err(|e| db_error("purge", e))?;
        total += done.rows_affected();
        if done.rows_affected() < 1000 {
            return Ok(total);
        }
    }
}

/// Runs `SQL_EXTEND` for one lease.
async fn extend_one(
    pool: &MySqlPool,
    sql: &Arc<str>,
    key: &str,
    owner: &str,
    ttl_us: u64,
) -> BackendResult<bool> {
    let done = retry_on_conflict(|| {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(ttl_us)
            .bind(key.as_bytes())
            .bind(owner.as_bytes())
            .execute(pool)
    })
    .await
    .map_err(|e| db_error("extend", e))?;
    Ok(done.rows_affected() > 0)
}

/// Repeats a statement that the server rolled back as a deadlock victim (SQLSTATE 40001). That
/// is safe for every statement here: the victim's statement was rolled back whole, and in
/// autocommit nothing else belonged to its transaction. Rare (stress runs on MariaDB 10.11 saw
/// none between these statements), but a multi-row extend can meet another client's
/// transaction in a lock cycle, MySQL's `INSERT ... ON DUPLICATE KEY UPDATE` is known for
/// gap-lock cycles, and Galera reports certification conflicts with this state.
///
/// It also repeats a statement after its connection broke (I/O or protocol error): a pooled
/// connection the server closed (a restart, a wait_timeout) is only found dead when used, and
/// after a restart every idle connection in the pool is dead, so it may take several tries.
/// Each costs next to nothing (a dead socket fails at once; a server that is down fails the
/// pool's acquire with a timeout instead, which is not retried). Every statement here is safe
/// to send again, provided the caller of a non-idempotent one checks the outcome (see
/// [`MysqlStore::try_acquire`]).
async fn retry_on_conflict<T, F, Fut>(run: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    retry_transient(run).await.0
}

/// [`retry_on_conflict`], also telling whether a broken connection was retried (so the
/// statement may have run twice).
async fn retry_transient<T, F, Fut>(mut run: F) -> (Result<T, sqlx::Error>, bool)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    const ATTEMPTS: u32 = 5;
    const RECONNECTS: u32 = 32;
    let mut attempt = 1;
    let mut reconnects = 0;
    loop {
        match run().await {
            Err(e) if attempt < ATTEMPTS && is_conflict(&e) => {
                attempt += 1;
                // Jitter separates the transactions that collided.
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..2000))).await;
            }
            Err(e) if reconnects < RECONNECTS && is_broken_connection(&e) => reconnects += 1,
            other => return (other, reconnects > 0),
        }
    }
}

fn is_broken_connection(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
}

fn is_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "40001")
}

fn db_error(operation: &str, e: sqlx::Error) -> BackendError {
    BackendError::new(format!("mysql: {operation}: {e}"))
}

fn closed_error() -> BackendError {
    BackendError::new("mysql: the store is closed")
}

fn valid_table_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn check_key(key: &str) -> BackendResult<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(BackendError::new(format!(
            "mysql: lock name is {} bytes, at most {MAX_KEY_BYTES} are supported",
            key.len()
        )));
    }
    Ok(())
}

fn check_owner(owner: &str) -> BackendResult<()> {
    if owner.len() > MAX_OWNER_BYTES {
        return Err(BackendError::new(format!(
            "mysql: owner token is {} bytes, at most {MAX_OWNER_BYTES} are supported",
            owner.len()
        )));
    }
    Ok(())
}

fn ttl_micros(ttl_ms: u64) -> BackendResult<u64> {
    if ttl_ms > MAX_TTL_MS {
        return Err(BackendError::new(format!(
            "mysql: ttl of {ttl_ms} ms is longer than the {MAX_TTL_MS} ms supported"
        )));
    }
    Ok(ttl_ms * 1000)
}

#[cfg(test)]
mod tests {
    //! These run against the MariaDB at `TEST_URL` and fail, not skip, when it is down.

    use super::*;
    use std::time::Instant;

    const TEST_URL: &str = "mysql://root@127.0.0.1:3306/test";
    // Its own table, so these tests never meet another suite's rows; names are random uuids,
    // so tests running at once never meet each other's.
    const TEST_TABLE: &str = "deadbolt_locks_mysql_rs_test";

    fn options(pool_size: u32) -> MysqlOptions {
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

    fn name() -> String {
        format!("test:{}", uuid::Uuid::new_v4())
    }

    fn owner() -> String {
        uuid::Uuid::new_v4().to_string()
    }

    async fn sleep_ms(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
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
        let first = fresh(s.try_acquire(&k, &a, 10_000, None).await.unwrap());
        assert!(s.release(&k, &a).await.unwrap());
        assert_eq!(
            s.try_acquire(&k, &b, 10_000, None).await.unwrap(),
            Some(first + 1)
        );
    }

    #[tokio::test]
    async fn a_held_name_returns_none_for_another_owner_and_stays_with_its_holder() {
        let s = store();
        let (k, a, b) = (name(), owner(), owner());
        let first = fresh(s.try_acquire(&k, &a, 10_000, Some(b"mine")).await.unwrap());
        assert_eq!(
            s.try_acquire(&k, &b, 10_000, Some(b"theirs"))
                .await
                .unwrap(),
            None
        );
        let info = s.inspect(&k).await.unwrap().unwrap();
        assert_eq!(info.owner, a);
        assert_eq!(info.fencing_token, first);
        assert_eq!(info.data.as_deref(), Some(&b"mine"[..]));
        assert!(info.remaining_ms > 9_000, "{info:?}");
    }

    #[tokio::test]
    async fn the_same_owner_acquiring_again_while_holding_gets_none() {
        let s = store();
        let (k, a) = (name(), owner());
        let first = fresh(s.try_acquire(&k, &a, 10_000, None).await.unwrap());
        assert_eq!(s.try_acquire(&k, &a, 10_000, None).await.unwrap(), None);
        assert_eq!(s.inspect(&k).await.unwrap().unwrap().fencing_token, first);
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_by_another_owner_with_a_higher_token() {
        let s = store();
        let (k, a, b) = (name(), owner(), owner());
        let first = fresh(s.try_acquire(&k, &a, 100, Some(b"old")).await.unwrap());
        sleep_ms(250).await;
        assert_eq!(
            s.try_acquire(&k, &b, 10_000, Some(b"new")).await.unwrap(),
            Some(first + 1)
        );
        let info = s.inspect(&k).await.unwrap().unwrap();
        assert_eq!(
            (info.owner.as_str(), info.fencing_token),
            (b.as_str(), first + 1)
        );
        assert_eq!(info.data.as_deref(), Some(&b"new"[..]));
        // The old holder's lease is gone: it can neither extend nor release the new one.
        assert!(!s.extend(&k, &a, 10_000).await.unwrap());
        assert!(!s.release(&k, &a).await.unwrap());
        assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, b);
    }

    #[tokio::test]
    async fn fencing_tokens_keep_increasing_across_releases_expiries_and_new_stores() {
        let (k, a) = (name(), owner());
        let mut expected = fresh(store().try_acquire(&k, &a, 50, None).await.unwrap());
        sleep_ms(150).await;
        for round in 0..3 {
            // A new store (a new pool) stands in for a restarted client.
            let s = store();
            expected += 1;
            assert_eq!(
                s.try_acquire(&k, &a, 10_000, None).await.unwrap(),
                Some(expected)
            );
            assert!(s.release(&k, &a).await.unwrap());
            expected += 1;
            assert_eq!(
                s.try_acquire(&k, &a, 50, None).await.unwrap(),
                Some(expected)
            );
            sleep_ms(150).await;
            s.close().await;
            assert!(round < 3);
        }
    }

    #[tokio::test]
    async fn a_token_from_an_earlier_statement_on_the_same_connection_never_leaks_into_busy() {
        // One connection, so every statement below runs on the connection that just reported
        // a token; a busy acquire must still report busy.
        let s = MysqlStore::connect(TEST_URL, options(1)).unwrap();
        let (k, a, b) = (name(), owner(), owner());
        fresh(s.try_acquire(&k, &a, 10_000, None).await.unwrap());
        let other = name();
        let first = fresh(s.try_acquire(&other, &a, 10_000, None).await.unwrap());
        assert!(s.release(&other, &a).await.unwrap());
        assert_eq!(
            s.try_acquire(&other, &a, 10_000, None).await.unwrap(),
            Some(first + 1)
        );
        assert_eq!(s.try_acquire(&k, &b, 10_000, None).await.unwrap(), None);
        let pool = s.ready().await.unwrap();
        sqlx::query("SELECT LAST_INSERT_ID(99)")
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(s.try_acquire(&k, &b, 10_000, None).await.unwrap(), None);
        assert_eq!(s.try_acquire(&other, &b, 10_000, None).await.unwrap(), None);
    }

    #[tokio::test]
    async fn extend_by_the_owner_succeeds_and_by_a_stranger_fails() {
        let s = store();
        let (k, a, b) = (name(), owner(), owner());
        s.try_acquire(&k, &a, 1_000, None).await.unwrap().unwrap();
        assert!(s.extend(&k, &a, 60_000).await.unwrap());
        let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
        assert!((59_000..=60_000).contains(&remaining), "{remaining}");
        assert!(!s.extend(&k, &b, 120_000).await.unwrap());
        let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
        assert!(remaining <= 60_000, "{remaining}");
    }

    #[tokio::test]
    async fn extend_can_shorten_a_lease() {
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 60_000, None).await.unwrap().unwrap();
        assert!(s.extend(&k, &a, 2_000).await.unwrap());
        let remaining = s.inspect(&k).await.unwrap().unwrap().remaining_ms;
        assert!((1_000..=2_000).contains(&remaining), "{remaining}");
    }

    #[tokio::test]
    async fn extend_after_expiry_fails() {
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 100, None).await.unwrap().unwrap();
        sleep_ms(250).await;
        assert!(!s.extend(&k, &a, 10_000).await.unwrap());
        assert_eq!(s.inspect(&k).await.unwrap(), None);
    }

    #[tokio::test]
    async fn extend_of_a_name_never_locked_fails() {
        let s = store();
        assert!(!s.extend(&name(), &owner(), 10_000).await.unwrap());
    }

    #[tokio::test]
    async fn release_by_a_stranger_returns_false_and_leaves_the_lock() {
        let s = store();
        let (k, a, b) = (name(), owner(), owner());
        s.try_acquire(&k, &a, 10_000, None).await.unwrap().unwrap();
        assert!(!s.release(&k, &b).await.unwrap());
        assert_eq!(s.inspect(&k).await.unwrap().unwrap().owner, a);
        assert_eq!(s.try_acquire(&k, &b, 10_000, None).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_handoff_gives_the_lock_to_the_next_owner_with_the_next_token() {
        let store = store();
        let (key, a, b) = (name(), owner(), owner());
        let first = store
            .try_acquire(&key, &a, 30_000, Some(b"a-data"))
            .await
            .unwrap()
            .unwrap();
        let next = crate::backend::NextOwner {
            owner: &b,
            ttl_ms: 30_000,
            data: None,
            previous_had_data: true,
            plain: false,
        };
        let token = store.handoff(&key, &a, &next).await.unwrap();
        assert_eq!(token, Some(first + 1));
        let info = store.inspect(&key).await.unwrap().unwrap();
        assert_eq!(
            (info.owner.as_str(), info.data, info.fencing_token),
            (b.as_str(), None, first + 1)
        );
        assert_eq!(
            store.handoff(&key, &a, &next).await.unwrap(),
            None,
            "a no longer holds it"
        );
        assert!(store.release(&key, &b).await.unwrap());
    }

    #[tokio::test]
    async fn release_twice_returns_true_then_false() {
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 10_000, None).await.unwrap().unwrap();
        assert!(s.release(&k, &a).await.unwrap());
        assert!(!s.release(&k, &a).await.unwrap());
    }

    #[tokio::test]
    async fn release_after_expiry_returns_false() {
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 100, None).await.unwrap().unwrap();
        sleep_ms(250).await;
        assert!(!s.release(&k, &a).await.unwrap());
    }

    #[tokio::test]
    async fn inspect_returns_none_for_a_name_never_locked_released_or_expired() {
        let s = store();
        assert_eq!(s.inspect(&name()).await.unwrap(), None);
        let (released, expired, a) = (name(), name(), owner());
        s.try_acquire(&released, &a, 10_000, Some(b"x"))
            .await
            .unwrap()
            .unwrap();
        s.release(&released, &a).await.unwrap();
        assert_eq!(s.inspect(&released).await.unwrap(), None);
        s.try_acquire(&expired, &a, 100, None)
            .await
            .unwrap()
            .unwrap();
        sleep_ms(250).await;
        assert_eq!(s.inspect(&expired).await.unwrap(), None);
    }

    #[tokio::test]
    async fn inspect_reports_no_data_when_acquired_without_data() {
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 100, Some(b"first"))
            .await
            .unwrap()
            .unwrap();
        sleep_ms(250).await;
        s.try_acquire(&k, &a, 10_000, None).await.unwrap().unwrap();
        assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, None);
    }

    #[tokio::test]
    async fn data_round_trips_binary_bytes_including_zero_and_0xff() {
        let s = store();
        let (k, a) = (name(), owner());
        let mut data: Vec<u8> = (0..=255u8).collect();
        data.extend_from_slice(&[0x00, 0xff, 0x00, b'\'', b'\\', 0xff]);
        s.try_acquire(&k, &a, 10_000, Some(&data))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s.inspect(&k).await.unwrap().unwrap().data, Some(data));
    }

    #[tokio::test]
    async fn data_of_a_few_megabytes_round_trips() {
        let s = store();
        let (k, a) = (name(), owner());
        let data: Vec<u8> = (0..3 * 1024 * 1024).map(|_| fastrand::u8(..)).collect();
        s.try_acquire(&k, &a, 10_000, Some(&data))
            .await
            .unwrap()
            .unwrap();
        assert!(s.inspect(&k).await.unwrap().unwrap().data == Some(data));
    }

    #[tokio::test]
    async fn names_that_differ_only_in_case_or_trailing_spaces_are_different_locks() {
        let s = store();
        let k = name();
        let (a, b, c) = (owner(), owner(), owner());
        fresh(s.try_acquire(&k, &a, 10_000, None).await.unwrap());
        let upper = k.to_uppercase();
        fresh(s.try_acquire(&upper, &b, 10_000, None).await.unwrap());
        let spaced = format!("{k} ");
        fresh(s.try_acquire(&spaced, &c, 10_000, None).await.unwrap());
    }

    #[tokio::test]
    async fn a_name_longer_than_the_column_is_rejected_instead_of_truncated() {
        let s = store();
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        assert!(s.try_acquire(&long, &owner(), 10_000, None).await.is_err());
        let longest = format!("{}{}", name(), "y".repeat(MAX_KEY_BYTES - 41));
        assert_eq!(longest.len(), MAX_KEY_BYTES);
        fresh(
            s.try_acquire(&longest, &owner(), 10_000, None)
                .await
                .unwrap(),
        );
    }

    #[tokio::test]
    async fn a_ttl_beyond_the_supported_maximum_is_rejected() {
        let s = store();
        assert!(s
            .try_acquire(&name(), &owner(), MAX_TTL_MS + 1, None)
            .await
            .is_err());
        assert!(s
            .try_acquire(&name(), &owner(), MAX_TTL_MS, None)
            .await
            .unwrap()
            .is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exactly_one_of_200_concurrent_acquirers_of_a_free_name_wins() {
        let s = Arc::new(store());
        let k = name();
        let mut tasks = JoinSet::new();
        for _ in 0..200 {
            let (s, k) = (s.clone(), k.clone());
            tasks.spawn(async move { s.try_acquire(&k, &owner(), 10_000, None).await });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Some(token) = joined.unwrap().unwrap() {
                winners.push(token);
            }
        }
        assert_eq!(winners.len(), 1, "{winners:?}");
        fresh(Some(winners[0]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exactly_one_of_200_concurrent_acquirers_of_an_expired_name_wins() {
        let s = Arc::new(store());
        let k = name();
        let first = fresh(s.try_acquire(&k, &owner(), 50, None).await.unwrap());
        sleep_ms(150).await;
        let mut tasks = JoinSet::new();
        for _ in 0..200 {
            let (s, k) = (s.clone(), k.clone());
            tasks.spawn(async move { s.try_acquire(&k, &owner(), 10_000, None).await });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Some(token) = joined.unwrap().unwrap() {
                winners.push(token);
            }
        }
        assert_eq!(winners, vec![first + 1]);
    }

    #[tokio::test]
    async fn extend_many_reports_each_items_outcome_in_order() {
        let s = store();
        let (held, expired, taken, never) = (name(), name(), name(), name());
        let (a, b) = (owner(), owner());
        s.try_acquire(&held, &a, 1_000, None)
            .await
            .unwrap()
            .unwrap();
        s.try_acquire(&expired, &a, 50, None)
            .await
            .unwrap()
            .unwrap();
        s.try_acquire(&taken, &b, 1_000, None)
            .await
            .unwrap()
            .unwrap();
        sleep_ms(150).await;
        let item = |key: &str, owner: &str, ttl_ms: u64| ExtendItem {
            key: key.to_owned(),
            owner: owner.to_owned(),
            ttl_ms,
            has_data: false,
        };
        let items = vec![
            item(&held, &a, 30_000),
            item(&expired, &a, 30_000),
            item(&taken, &a, 30_000),
            item(&never, &a, 30_000),
            item(&taken, &b, 40_000),
            item(&"z".repeat(MAX_KEY_BYTES + 1), &a, 30_000),
        ];
        let results = s.extend_many(&items).await;
        let outcomes: Vec<Option<bool>> =
            results.iter().map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(
            outcomes,
            vec![
                Some(true),
                Some(false),
                Some(false),
                Some(false),
                Some(true),
                None
            ]
        );
        let held_left = s.inspect(&held).await.unwrap().unwrap().remaining_ms;
        assert!((29_000..=30_000).contains(&held_left), "{held_left}");
        let taken_left = s.inspect(&taken).await.unwrap().unwrap().remaining_ms;
        assert!((39_000..=40_000).contains(&taken_left), "{taken_left}");
    }

    #[tokio::test]
    async fn extend_many_gives_each_item_its_own_ttl() {
        let s = store();
        let a = owner();
        let keys: Vec<String> = (0..5).map(|_| name()).collect();
        for k in &keys {
            s.try_acquire(k, &a, 1_000, None).await.unwrap().unwrap();
        }
        let items: Vec<ExtendItem> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| ExtendItem {
                key: k.clone(),
                owner: a.clone(),
                ttl_ms: 10_000 * (i as u64 + 1),
                has_data: false,
            })
            .collect();
        let results = s.extend_many(&items).await;
        assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
        for (i, k) in keys.iter().enumerate() {
            let left = s.inspect(k).await.unwrap().unwrap().remaining_ms;
            let ttl = 10_000 * (i as i64 + 1);
            assert!((ttl - 1_000..=ttl).contains(&left), "{i}: {left}");
        }
    }

    #[tokio::test]
    async fn extend_many_with_a_duplicate_item_reports_both_as_extended() {
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 1_000, None).await.unwrap().unwrap();
        let item = ExtendItem {
            key: k.clone(),
            owner: a.clone(),
            ttl_ms: 20_000,
            has_data: false,
        };
        let results = s.extend_many(&[item.clone(), item]).await;
        assert!(results.iter().all(|r| matches!(r, Ok(true))), "{results:?}");
    }

    #[tokio::test]
    async fn extend_many_over_several_batches_keeps_every_items_place() {
        let s = store();
        let a = owner();
        // 600 items: three batches (256, 256, 88), every seventh not held, so each batch takes
        // the per-item path.
        let mut items = Vec::new();
        let mut expected = Vec::new();
        for i in 0..600 {
            let k = name();
            let held = i % 7 != 3;
            if held {
                s.try_acquire(&k, &a, 5_000, None).await.unwrap().unwrap();
            }
            items.push(ExtendItem {
                key: k,
                owner: a.clone(),
                ttl_ms: 20_000,
                has_data: false,
            });
            expected.push(held);
        }
        let got: Vec<bool> = s
            .extend_many(&items)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, expected);
        // And with every item held, the single-statement path answers.
        let held: Vec<ExtendItem> = items
            .into_iter()
            .zip(&expected)
            .filter(|(_, held)| **held)
            .map(|(item, _)| item)
            .collect();
        let got = s.extend_many(&held).await;
        assert!(got.iter().all(|r| matches!(r, Ok(true))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_extend_many_chosen_as_a_deadlock_victim_still_reports_every_outcome() {
        let s = Arc::new(store());
        let (a, prefix) = (owner(), name());
        // `first` sorts before `second`, so the multi-row extend locks `first`, then waits for
        // `second`, which the other transaction holds.
        let (first, second) = (format!("{prefix}:1"), format!("{prefix}:2"));
        for k in [&first, &second] {
            s.try_acquire(k, &a, 60_000, None).await.unwrap().unwrap();
        }
        // Many rows changed make the other transaction the heavier one, so InnoDB rolls back
        // the extend instead.
        for i in 0..50 {
            let filler = format!("{prefix}:filler:{i}");
            s.try_acquire(&filler, &a, 60_000, None)
                .await
                .unwrap()
                .unwrap();
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
            .map(|k| ExtendItem {
                key: k.clone(),
                owner: a.clone(),
                ttl_ms: 30_000,
                has_data: false,
            })
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
    async fn a_purged_name_leaves_no_row_and_comes_back_with_a_higher_token() {
        let s = MysqlStore::connect(
            TEST_URL,
            MysqlOptions {
                purge_after_ms: 0,
                ..options(2)
            },
        )
        .unwrap();
        let (k, a) = (name(), owner());
        let first = fresh(s.try_acquire(&k, &a, 10_000, None).await.unwrap());
        assert!(s.release(&k, &a).await.unwrap());
        let expired = name();
        fresh(s.try_acquire(&expired, &a, 1, None).await.unwrap());
        sleep_ms(20).await;
        s.purge().await.unwrap();
        let pool = s.ready().await.unwrap();
        let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM `{TEST_TABLE}` WHERE name IN (?, ?)"
        )))
        .bind(k.as_bytes())
        .bind(expired.as_bytes())
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(rows, 0, "released and expired names leave no row");
        let again = fresh(s.try_acquire(&k, &a, 10_000, None).await.unwrap());
        assert!(again > first, "{again} > {first}");
    }

    #[tokio::test]
    async fn a_purge_never_deletes_a_held_lock() {
        let s = MysqlStore::connect(
            TEST_URL,
            MysqlOptions {
                purge_after_ms: 0,
                ..options(2)
            },
        )
        .unwrap();
        let (k, a) = (name(), owner());
        let token = fresh(s.try_acquire(&k, &a, 60_000, None).await.unwrap());
        s.purge().await.unwrap();
        let info = s.inspect(&k).await.unwrap().unwrap();
        assert_eq!((info.owner, info.fencing_token), (a, token));
    }

    #[tokio::test]
    async fn extend_many_of_nothing_returns_nothing() {
        assert!(store().extend_many(&[]).await.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn holding_2000_locks_at_once_needs_no_connection_per_lock() {
        let s = Arc::new(
            MysqlStore::connect(
                TEST_URL,
                MysqlOptions {
                    // 2000 acquires queue for 3 connections: give the queue time.
                    connect_timeout_ms: 120_000,
                    ..options(3)
                },
            )
            .unwrap(),
        );
        let a = owner();
        let keys: Vec<String> = (0..2000).map(|_| name()).collect();
        let mut tasks = JoinSet::new();
        for k in keys.clone() {
            let (s, a) = (s.clone(), a.clone());
            tasks.spawn(async move { s.try_acquire(&k, &a, 120_000, None).await });
        }
        while let Some(joined) = tasks.join_next().await {
            fresh(joined.unwrap().unwrap());
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
                let busy = s.try_acquire(&k, &owner(), 1_000, None).await.unwrap();
                let released = s.release(&k, &a).await.unwrap();
                (busy, released)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            assert_eq!(joined.unwrap(), (None, true));
        }
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
        let result = s.try_acquire(&name(), &owner(), 1_000, None).await;
        let elapsed = started.elapsed();
        assert!(result.is_err());
        assert!(elapsed < Duration::from_millis(2_000), "{elapsed:?}");
        let started = Instant::now();
        assert!(s.ping().await.is_err());
        assert!(started.elapsed() < Duration::from_millis(2_000));
    }

    #[test]
    fn connect_rejects_bad_urls_table_names_and_pool_sizes_without_a_runtime() {
        let bad = |url: &str, opts: MysqlOptions| MysqlStore::connect(url, opts).is_err();
        assert!(bad("not a url", MysqlOptions::default()));
        assert!(bad("redis://127.0.0.1:6379", MysqlOptions::default()));
        assert!(bad(
            "mysql://root@127.0.0.1:notaport/test",
            MysqlOptions::default()
        ));
        assert!(bad(
            "mysql://127.0.0.1/test?sslmode=sometimes",
            MysqlOptions::default()
        ));
        for table in ["", "locks; DROP TABLE x", "a`b", "naïve", &"t".repeat(65)] {
            let opts = MysqlOptions {
                table: table.to_owned(),
                ..MysqlOptions::default()
            };
            assert!(bad(TEST_URL, opts), "{table:?}");
        }
        let opts = MysqlOptions {
            pool_size: 0,
            ..MysqlOptions::default()
        };
        assert!(bad(TEST_URL, opts));
        assert!(
            MysqlStore::connect("mariadb://root@127.0.0.1/test", MysqlOptions::default()).is_ok()
        );
        assert!(MysqlStore::connect(
            TEST_URL,
            MysqlOptions {
                table: "T_".repeat(32),
                ..MysqlOptions::default()
            }
        )
        .is_ok());
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
        let s = MysqlStore::connect(
            TEST_URL,
            MysqlOptions {
                table: table.clone(),
                ..options(2)
            },
        )
        .unwrap();
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

    #[tokio::test]
    async fn an_account_without_the_create_privilege_uses_an_existing_table_and_fails_on_a_missing_one(
    ) {
        let root = store();
        root.ping().await.unwrap();
        let admin = root.ready().await.unwrap();
        // Only this test uses this account, so creating and dropping it cannot race.
        let setup = format!(
            "CREATE USER IF NOT EXISTS 'deadbolt_dml_test'@'127.0.0.1' IDENTIFIED BY 'pw';
             GRANT SELECT, INSERT, UPDATE ON `{TEST_TABLE}` TO 'deadbolt_dml_test'@'127.0.0.1'"
        );
        sqlx::raw_sql(AssertSqlSafe(setup))
            .execute(admin)
            .await
            .unwrap();
        let limited = MysqlStore::connect(
            "mysql://deadbolt_dml_test:pw@127.0.0.1:3306/test",
            options(2),
        )
        .unwrap();
        let (k, a) = (name(), owner());
        let acquired = limited.try_acquire(&k, &a, 10_000, None).await;
        let released = limited.release(&k, &a).await;
        limited.close().await;
        let missing = MysqlStore::connect(
            "mysql://deadbolt_dml_test:pw@127.0.0.1:3306/test",
            MysqlOptions {
                table: "deadbolt_never_created".to_owned(),
                ..options(2)
            },
        )
        .unwrap();
        let refused = missing.ping().await;
        missing.close().await;
        sqlx::raw_sql("DROP USER IF EXISTS 'deadbolt_dml_test'@'127.0.0.1'")
            .execute(admin)
            .await
            .unwrap();
        fresh(acquired.unwrap());
        assert!(released.unwrap());
        let message = refused.unwrap_err().message;
        assert!(message.contains("creating the lock table"), "{message}");
    }

    #[tokio::test]
    async fn operations_after_close_fail() {
        let s = store();
        s.ping().await.unwrap();
        s.close().await;
        assert!(s.try_acquire(&name(), &owner(), 1_000, None).await.is_err());
        assert!(s.inspect(&name()).await.is_err());
        let never_used = store();
        never_used.close().await;
        assert!(never_used.ping().await.is_err());
    }

    #[tokio::test]
    async fn the_driver_counts_matched_rows_so_an_unchanged_row_still_counts() {
        // `extend` and `release` read "owned" from the affected count: this pins the
        // CLIENT_FOUND_ROWS behaviour they rely on.
        let s = store();
        let (k, a) = (name(), owner());
        s.try_acquire(&k, &a, 10_000, None).await.unwrap().unwrap();
        let pool = s.ready().await.unwrap();
        let noop = format!("UPDATE `{TEST_TABLE}` SET fence = fence WHERE name = ?");
        let done = sqlx::query(AssertSqlSafe(noop))
            .bind(k.as_bytes())
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }

    #[tokio::test]
    #[ignore = "benchmark: cargo test -- --ignored --nocapture"]
    async fn sequential_acquire_and_release_latency() {
        let s = store();
        let a = owner();
        s.ping().await.unwrap();
        let mut samples = Vec::new();
        for _ in 0..500 {
            let k = name();
            let started = Instant::now();
            s.try_acquire(&k, &a, 10_000, None).await.unwrap().unwrap();
            assert!(s.release(&k, &a).await.unwrap());
            samples.push(started.elapsed());
        }
        samples.sort();
        let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        println!(
            "acquire+release of a new name: p50 {:?} p90 {:?} p99 {:?}",
            pick(0.5),
            pick(0.9),
            pick(0.99)
        );
        let k = name();
        let mut samples = Vec::new();
        for _ in 0..500 {
            let started = Instant::now();
            s.try_acquire(&k, &a, 10_000, None).await.unwrap().unwrap();
            assert!(s.release(&k, &a).await.unwrap());
            samples.push(started.elapsed());
        }
        samples.sort();
        let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        println!(
            "acquire+release of one name again and again: p50 {:?} p90 {:?} p99 {:?}",
            pick(0.5),
            pick(0.9),
            pick(0.99)
        );
    }
}
