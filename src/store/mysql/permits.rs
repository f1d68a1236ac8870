//! Counting semaphores on MySQL / MariaDB (the rules of [`crate::store::permits`]), in two
//! tables of their own next to the lock table (docs/design.md, "MySQL layout"):
//!
//! - `<table>_semaphores`: one header row per semaphore, with its fencing counter. Every
//!   acquisition locks it first (`SELECT … FOR UPDATE`), so acquisitions of one semaphore
//!   take turns, and those of different semaphores never meet.
//! - `<table>_permits`: one row per holder and per queued request, keyed by (name, owner).
//!
//! An acquisition is one short transaction: lock the header and the semaphore's rows, apply
//! [`PermitTable::acquire`] (the reference rules, unchanged) to what was read, by the
//! server's clock read in the same statement, and write back what changed. Extending,
//! releasing and listing are single autocommit statements on the permit rows, which the
//! acquisition's row locks order against it.
//!
//! Times are milliseconds since the epoch by the server's clock (`UTC_TIMESTAMP(6)`, as the
//! lock table's), so the rules' arithmetic applies to the stored values as they are.

use crate::store::{Release, Renewal};
use std::sync::Arc;

use sqlx::mysql::{MySqlPool, MySqlRow};
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::errors::{retry_on_conflict, Mysql};
use super::extend::Leases;
use super::MysqlStore;
use crate::store::permits::{PermitTable, TableHolder, TableWaiter};
use crate::store::sql::checks::{check_key, check_owner, check_request};
use crate::store::sql::errors::{db_error, read};
use crate::store::sql::pool::created_or_readable;
use crate::store::{PermitHolder, PermitRequest, ReleaseOutcome, StoreResult};

/// `kind` of a holder's row.
const HOLDER: u8 = 1;
/// `kind` of a queued request's row.
const QUEUED: u8 = 2;

/// Suffix of the header table's name (after the lock table's).
const SEMAPHORES_SUFFIX: &str = "_semaphores";
/// Suffix of the permit table's name.
const PERMITS_SUFFIX: &str = "_permits";

// Placeholders substituted when the store is built: the two backtick-quoted table names, the
// server clock in milliseconds since the epoch, and the holder kind.
const SEMAPHORES: &str = "{semaphores}";
const PERMITS: &str = "{permits}";
const NOW_MS: &str = "{now_ms}";
const HOLDER_KIND: &str = "{holder}";

// The server clock in ms since the epoch, independent of the session time zone (see the
// module documentation of `mysql`). `UTC_TIMESTAMP(6)` is fixed for a statement, so every use
// in one statement reads the same instant.
const SQL_NOW_MS: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

// One row per semaphore that was used within the purge delay: its fencing counter, and when
// it was created or last issued a token (for `SQL_PURGE_SEMAPHORES`).
const SQL_CREATE_SEMAPHORES: &str = "CREATE TABLE IF NOT EXISTS {semaphores} (
    name VARBINARY(1024) NOT NULL,
    fence BIGINT UNSIGNED NOT NULL,
    touched_ms BIGINT NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB";

// One row per holder (`kind` 1: its permits, token and lease end) and per queued request
// (`kind` 2: the permits it asks for, when its place lapses, and `seq`, its place in the
// queue). An owner is either, never both, so (name, owner) is the key. Binary columns compare
// byte-exact, as the lock table's.
const SQL_CREATE_PERMITS: &str = "CREATE TABLE IF NOT EXISTS {permits} (
    name VARBINARY(1024) NOT NULL,
    owner VARBINARY(255) NOT NULL,
    kind TINYINT UNSIGNED NOT NULL,
    permits INT UNSIGNED NOT NULL,
    token BIGINT UNSIGNED NOT NULL,
    expires_ms BIGINT NOT NULL,
    seq BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name, owner)
) ENGINE=InnoDB";

// Tells whether both tables exist and are readable, when creating them was refused.
const SQL_PROBE: &str = "SELECT 1 FROM {semaphores}, {permits} WHERE 1 = 0";

// Opens an acquisition's transaction. READ COMMITTED because the locking reads then lock the
// rows they find and no gaps: under REPEATABLE READ, the next-key locks of two acquisitions of
// neighbouring names cover the same gap, and their inserts into it deadlock. The header lock
// already makes acquisitions of one semaphore take turns, and each statement reads the latest
// committed rows.
const SQL_BEGIN: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

// Locks the header and every row of the semaphore (the header first: it is the outer table of
// the join) and reads them with the server's clock. No row: the header does not exist yet.
const SQL_LOCK: &str = "SELECT s.fence, {now_ms}, p.owner, p.kind, p.permits, p.token,
       p.expires_ms, p.seq
FROM {semaphores} s LEFT JOIN {permits} p ON p.name = s.name
WHERE s.name = ?
FOR UPDATE";

// Creates a missing header, its counter starting at the server clock in microseconds since the
// epoch, like a new lock row's (see `SQL_ACQUIRE` in `mysql`): a semaphore whose header was
// purged comes back with tokens above every one it issued before. A header created meanwhile
// by another acquisition is kept as it is (the no-op update only waits for its lock).
const SQL_CREATE_HEADER: &str = "INSERT INTO {semaphores} (name, fence, touched_ms)
VALUES (?, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)), {now_ms})
ON DUPLICATE KEY UPDATE name = name";

// Drops the semaphore's lapsed holders and queued places (rule 1), by the instant the
// acquisition read.
const SQL_DELETE_LAPSED: &str = "DELETE FROM {permits} WHERE name = ? AND expires_ms <= ?";

// Adds the caller's row (a new holder or a new place in the queue).
const SQL_INSERT: &str =
    "INSERT INTO {permits} (name, owner, kind, permits, token, expires_ms, seq)
VALUES (?, ?, ?, ?, ?, ?, ?)";

// Rewrites the caller's row (a renewed lease or place, or a queued request granted).
const SQL_UPDATE: &str = "UPDATE {permits}
SET kind = ?, permits = ?, token = ?, expires_ms = ?, seq = ?
WHERE name = ? AND owner = ?";

// Stores the counter after a grant, and when it was issued.
const SQL_ADVANCE: &str = "UPDATE {semaphores} SET fence = ?, touched_ms = ? WHERE name = ?";

// Extends a holder's lease if it has not ended. The driver counts matched rows.
const SQL_EXTEND: &str = "UPDATE {permits}
SET expires_ms = {now_ms} + ?
WHERE name = ? AND owner = ? AND kind = {holder} AND expires_ms > {now_ms}";

// Extends many holders' leases in one statement (and one commit): followed by one
// `SQL_EXTEND_MANY_ARM` per item, `SQL_EXTEND_MANY_MIDDLE`, one `SQL_EXTEND_MANY_PAIR` per item
// joined by commas, and `SQL_EXTEND_MANY_TAIL`.
const SQL_EXTEND_MANY_HEAD: &str = "UPDATE {permits} SET expires_ms = {now_ms} + (CASE";
// One item's new lease in ms, chosen by name and owner (a semaphore has several holders).
const SQL_EXTEND_MANY_ARM: &str = " WHEN name = ? AND owner = ? THEN ?";
const SQL_EXTEND_MANY_MIDDLE: &str = " END) WHERE (name, owner) IN (";
const SQL_EXTEND_MANY_PAIR: &str = "(?, ?)";
const SQL_EXTEND_MANY_TAIL: &str = ") AND kind = {holder} AND expires_ms > {now_ms}";

// Frees a holder's live permits; one row deleted means it held them.
const SQL_RELEASE_HELD: &str = "DELETE FROM {permits}
WHERE name = ? AND owner = ? AND kind = {holder} AND expires_ms > {now_ms}";

// Then gives up the owner's place in the queue, or drops its lapsed holder row.
const SQL_RELEASE_REST: &str = "DELETE FROM {permits} WHERE name = ? AND owner = ?";

// The live holders, with their remaining lease by the server's clock.
const SQL_HOLDERS: &str = "SELECT owner, permits, token, expires_ms - {now_ms}
FROM {permits}
WHERE name = ? AND kind = {holder} AND expires_ms > {now_ms}";

// Deletes holders and queued places that lapsed longer than the purge delay ago (the rows of a
// semaphore nobody touches any more; an acquisition drops its semaphore's lapsed rows itself).
const SQL_PURGE_PERMITS: &str = "DELETE FROM {permits}
WHERE expires_ms < {now_ms} - ?
LIMIT 1000";

// Deletes headers that issued no token for longer than the purge delay. Safe for fencing even
// while such a semaphore still has holders: its last token is at most the server clock (in
// microseconds) when it was issued, and a new header starts at the clock at least one purge
// delay later (see `SQL_CREATE_HEADER`), unless the server clock steps back by more than the
// delay, the one assumption the lock table's purge makes too. A header an acquisition holds is
// locked and re-read by this DELETE, and no longer matches once that acquisition issued a
// token.
const SQL_PURGE_SEMAPHORES: &str = "DELETE FROM {semaphores}
WHERE touched_ms < {now_ms} - ?
LIMIT 1000";

/// The names of the semaphore tables that go with lock table `table` (already validated):
/// `<table>_semaphores` and `<table>_permits`. When that would be longer than a MySQL
/// identifier (64 characters), the lock table's name is cut and a hash of the whole name
/// appended, so that different lock tables still get different semaphore tables.
pub(super) fn table_names(table: &str) -> (String, String) {
    let longest = SEMAPHORES_SUFFIX.len().max(PERMITS_SUFFIX.len());
    let base = if table.len() + longest <= crate::limits::MAX_TABLE_NAME_BYTES {
        table.to_owned()
    } else {
        // 64-bit FNV-1a: stable across builds and platforms, unlike std's hasher.
        let hash = table.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let tag = format!("_{:08x}", hash as u32);
        // The name is ASCII, so any cut is on a character boundary.
        let keep = crate::limits::MAX_TABLE_NAME_BYTES - longest - tag.len();
        format!("{}{tag}", &table[..keep])
    };
    (
        format!("{base}{SEMAPHORES_SUFFIX}"),
        format!("{base}{PERMITS_SUFFIX}"),
    )
}

/// `template` with the names of the semaphore tables of lock table `table` (already
/// validated), the server clock in ms and the holder kind filled in.
pub(super) fn fill_template(table: &str, template: &str) -> String {
    let (semaphores, permits) = table_names(table);
    template
        .replace(SEMAPHORES, &format!("`{semaphores}`"))
        .replace(PERMITS, &format!("`{permits}`"))
        .replace(NOW_MS, SQL_NOW_MS)
        .replace(HOLDER_KIND, &HOLDER.to_string())
}

/// Statement texts of the semaphore tables, shared with spawned tasks without copying.
pub(super) struct PermitStatements {
    /// Both `CREATE TABLE`s, header table first.
    create: [Arc<str>; 2],
    probe: Arc<str>,
    lock: Arc<str>,
    create_header: Arc<str>,
    delete_lapsed: Arc<str>,
    insert: Arc<str>,
    update: Arc<str>,
    advance: Arc<str>,
    /// Binds the lease in ms, the name and the owner, as the lock table's `extend` binds
    /// its lease in µs, name and owner.
    pub(super) extend: Arc<str>,
    release_held: Arc<str>,
    release_rest: Arc<str>,
    holders: Arc<str>,
    /// Purges of the permit rows and of the headers, in that order.
    pub(super) purge: [Arc<str>; 2],
    /// `extend_many[i]` handles `2 << i` items, as the lock table's.
    pub(super) extend_many: Vec<Arc<str>>,
}

impl PermitStatements {
    /// The statements for lock table `table` (already validated).
    pub(super) fn new(table: &str) -> Self {
        let fill = |template: &str| -> String { fill_template(table, template) };
        let sql = |template: &str| -> Arc<str> { fill(template).into() };
        let mut extend_many = Vec::new();
        let mut size = 2;
        while size <= super::extend::EXTEND_BATCH_MAX {
            let mut text = fill(SQL_EXTEND_MANY_HEAD);
            text.push_str(&SQL_EXTEND_MANY_ARM.repeat(size));
            text.push_str(SQL_EXTEND_MANY_MIDDLE);
            text.push_str(&vec![SQL_EXTEND_MANY_PAIR; size].join(", "));
            text.push_str(&fill(SQL_EXTEND_MANY_TAIL));
            extend_many.push(text.into());
            size *= 2;
        }
        Self {
            create: [sql(SQL_CREATE_SEMAPHORES), sql(SQL_CREATE_PERMITS)],
            probe: sql(SQL_PROBE),
            lock: sql(SQL_LOCK),
            create_header: sql(SQL_CREATE_HEADER),
            delete_lapsed: sql(SQL_DELETE_LAPSED),
            insert: sql(SQL_INSERT),
            update: sql(SQL_UPDATE),
            advance: sql(SQL_ADVANCE),
            extend: sql(SQL_EXTEND),
            release_held: sql(SQL_RELEASE_HELD),
            release_rest: sql(SQL_RELEASE_REST),
            holders: sql(SQL_HOLDERS),
            purge: [sql(SQL_PURGE_PERMITS), sql(SQL_PURGE_SEMAPHORES)],
            extend_many,
        }
    }
}

/// A holder's or queued request's row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    owner: String,
    kind: u8,
    permits: u32,
    token: u64,
    expires: u64,
    seq: u64,
}

/// What an acquisition read under its locks.
struct Locked {
    fence: u64,
    /// The server's clock, ms since the epoch.
    now: u64,
    places: Vec<Place>,
}

impl Locked {
    fn from_rows(rows: &[MySqlRow]) -> Result<Option<Locked>, sqlx::Error> {
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let now: i64 = first.try_get(1)?;
        let mut places = Vec::with_capacity(rows.len());
        for row in rows {
            // The outer join's one row for a semaphore without rows has NULLs here.
            let Some(owner) = row.try_get::<Option<Vec<u8>>, _>(2)? else {
                continue;
            };
            let expires: i64 = row.try_get(6)?;
            places.push(Place {
                // Owners are only ever written from `&str`, so this never replaces anything.
                owner: String::from_utf8_lossy(&owner).into_owned(),
                kind: row.try_get(3)?,
                permits: row.try_get(4)?,
                token: row.try_get(5)?,
                expires: u64::try_from(expires).unwrap_or(0),
                seq: row.try_get(7)?,
            });
        }
        Ok(Some(Locked {
            fence: first.try_get(0)?,
            now: u64::try_from(now).unwrap_or(0),
            places,
        }))
    }

    /// The rules' view of the rows: holders, and the queue in the order its requests joined.
    fn table(&self) -> PermitTable {
        let mut queued: Vec<&Place> = self.places.iter().filter(|p| p.kind == QUEUED).collect();
        queued.sort_by_key(|p| p.seq);
        PermitTable {
            holders: self
                .places
                .iter()
                .filter(|p| p.kind == HOLDER)
                .map(|p| TableHolder {
                    owner: p.owner.clone(),
                    permits: p.permits,
                    token: p.token,
                    expires: p.expires,
                })
                .collect(),
            queue: queued
                .into_iter()
                .map(|p| TableWaiter {
                    owner: p.owner.clone(),
                    permits: p.permits,
                    expires: p.expires,
                })
                .collect(),
            fence: self.fence,
        }
    }

    /// `owner`'s row after the rules changed `table`, if it has one: the rules keep a queued
    /// request's place, and a newcomer to the queue goes behind everyone queued before.
    fn place_after(&self, table: &PermitTable, owner: &str) -> Option<Place> {
        if let Some(h) = table.holders.iter().find(|h| h.owner == owner) {
            return Some(Place {
                owner: owner.to_owned(),
                kind: HOLDER,
                permits: h.permits,
                token: h.token,
                expires: h.expires,
                seq: 0,
            });
        }
        let w = table.queue.iter().find(|w| w.owner == owner)?;
        let seq = match self
            .places
            .iter()
            .find(|p| p.owner == owner && p.kind == QUEUED && p.expires > self.now)
        {
            Some(before) => before.seq,
            None => {
                self.places
                    .iter()
                    .filter(|p| p.kind == QUEUED)
                    .map(|p| p.seq)
                    .max()
                    .unwrap_or(0)
                    + 1
            }
        };
        Some(Place {
            owner: owner.to_owned(),
            kind: QUEUED,
            permits: w.permits,
            token: 0,
            expires: w.expires,
            seq,
        })
    }
}

/// Milliseconds on the server's clock as stored (`BIGINT`); the rules' times never come near
/// `i64::MAX` (leases are at most 100 years).
fn stored(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Locks and reads semaphore `name` within the transaction on `conn`.
async fn lock(
    conn: &mut MySqlConnection,
    sql: &PermitStatements,
    name: &str,
) -> Result<Vec<MySqlRow>, sqlx::Error> {
    sqlx::query(AssertSqlSafe(sql.lock.clone()))
        .bind(name.as_bytes())
        .fetch_all(conn)
        .await
}

/// One acquisition as one transaction (see the module documentation). Sending it again after
/// it failed in any way is safe: a first attempt that committed left the owner holding
/// (its own token comes back, rule 2) or queued (its place is kept).
async fn acquire_once(
    pool: &MySqlPool,
    sql: &PermitStatements,
    req: &PermitRequest<'_>,
) -> Result<Option<u64>, sqlx::Error> {
    let mut tx = pool.begin_with(SQL_BEGIN).await?;
    let name = req.name.as_bytes();
    let mut rows = lock(&mut tx, sql, req.name).await?;
    if rows.is_empty() {
        sqlx::query(AssertSqlSafe(sql.create_header.clone()))
            .bind(name)
            .execute(&mut *tx)
            .await?;
        rows = lock(&mut tx, sql, req.name).await?;
    }
    let Some(locked) = Locked::from_rows(&rows)? else {
        // Never: the header exists now, inserted by this transaction or by the one whose
        // insert it waited for, and locked by the no-op update until this one ends.
        return Err(sqlx::Error::RowNotFound);
    };
    let now = locked.now;
    let mut table = locked.table();
    let granted = table.acquire(req, now);
    if locked.places.iter().any(|p| p.expires <= now) {
        sqlx::query(AssertSqlSafe(sql.delete_lapsed.clone()))
            .bind(name)
            .bind(stored(now))
            .execute(&mut *tx)
            .await?;
    }
    let before = locked
        .places
        .iter()
        .find(|p| p.owner == req.owner && p.expires > now);
    match (before, locked.place_after(&table, req.owner)) {
        (Some(before), Some(after)) if *before == after => {}
        (Some(_), Some(after)) => {
            sqlx::query(AssertSqlSafe(sql.update.clone()))
                .bind(after.kind)
                .bind(after.permits)
                .bind(after.token)
                .bind(stored(after.expires))
                .bind(after.seq)
                .bind(name)
                .bind(req.owner.as_bytes())
                .execute(&mut *tx)
                .await?;
        }
        (None, Some(after)) => {
            sqlx::query(AssertSqlSafe(sql.insert.clone()))
                .bind(name)
                .bind(req.owner.as_bytes())
                .bind(after.kind)
                .bind(after.permits)
                .bind(after.token)
                .bind(stored(after.expires))
                .bind(after.seq)
                .execute(&mut *tx)
                .await?;
        }
        // The rules never drop a live row of the caller's; kept exact all the same.
        (Some(_), None) => {
            sqlx::query(AssertSqlSafe(sql.release_rest.clone()))
                .bind(name)
                .bind(req.owner.as_bytes())
                .execute(&mut *tx)
                .await?;
        }
        (None, None) => {}
    }
    if table.fence != locked.fence {
        sqlx::query(AssertSqlSafe(sql.advance.clone()))
            .bind(table.fence)
            .bind(stored(now))
            .bind(name)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(granted)
}

impl MysqlStore {
    /// Takes permits of semaphore `req.name` by the rules of
    /// [`permits`](crate::store::permits), in one transaction that locks the semaphore's
    /// header (see the module documentation). Returns the new fencing token, the owner's own
    /// token if it already holds permits, or `None` when refused (queued if
    /// `req.queue_ttl_ms > 0`).
    ///
    /// A transaction the server rolled back (a deadlock victim) or whose connection broke is
    /// sent again whole, which the rules make safe (see `acquire_once`).
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the commit was sent, dropping the future may leave the permits
    /// taken until their lease ends (or the request queued until its place lapses). Dropped
    /// earlier, the transaction is rolled back.
    pub async fn acquire_permits(&self, req: &PermitRequest<'_>) -> StoreResult<Option<u64>> {
        check_request::<Mysql>(req)?;
        let pool = self.permits_ready().await?;
        retry_on_conflict(|| acquire_once(pool, &self.permit_sql, req))
            .await
            .map_err(|e| db_error::<Mysql>("acquire_permits", e))
    }

    /// Sets the remaining lease of `owner`'s permits of `name` to `ttl_ms` if it still holds
    /// them. Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    pub async fn extend_permits(&self, name: &str, renewal: Renewal<'_>) -> StoreResult<bool> {
        self.renew(Leases::Permits, name, renewal).await
    }

    /// Frees `owner`'s permits of `name` and its place in the queue. Returns whether it held
    /// live permits (`released`). One statement when it did, a second one otherwise (for a queued place or
    /// a lapsed holder's row).
    ///
    /// # Cancel Safety
    /// Cancel safe: the statements are idempotent, but a dropped call may have freed the
    /// permits, and repeating it then returns `false`.
    pub async fn release_permits(&self, name: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        check_key::<Mysql>(name)?;
        check_owner::<Mysql>(owner)?;
        let pool = self.permits_ready().await?;
        let run = |sql: &Arc<str>| {
            let sql = sql.clone();
            retry_on_conflict(move || {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(name.as_bytes())
                    .bind(owner.as_bytes())
                    .execute(pool)
            })
        };
        let held = run(&self.permit_sql.release_held)
            .await
            .map_err(|e| db_error::<Mysql>("release_permits", e))?
            .rows_affected()
            > 0;
        if !held {
            run(&self.permit_sql.release_rest)
                .await
                .map_err(|e| db_error::<Mysql>("release_permits", e))?;
        }
        self.purge_if_due(pool);
        // No announcements, as for locks.
        Ok(ReleaseOutcome::unannounced(held))
    }

    /// The live holders of `name`, remaining leases by the server's clock.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits(&self, name: &str) -> StoreResult<Vec<PermitHolder>> {
        check_key::<Mysql>(name)?;
        // A read creates nothing: tables that do not exist hold no permits.
        let pool = self.connected().await?;
        let rows: Vec<MySqlRow> = read::<Mysql, _>(
            "permits",
            sqlx::query(AssertSqlSafe(self.permit_sql.holders.clone()))
                .bind(name.as_bytes())
                .fetch_all(pool)
                .await,
        )?;
        let decode = |e: sqlx::Error| db_error::<Mysql>("permits", e);
        rows.into_iter()
            .map(|row| {
                let owner: Vec<u8> = row.try_get(0).map_err(decode)?;
                Ok(PermitHolder {
                    owner: String::from_utf8_lossy(&owner).into_owned(),
                    permits: row.try_get(1).map_err(decode)?,
                    fencing_token: row.try_get(2).map_err(decode)?,
                    remaining_ms: row.try_get(3).map_err(decode)?,
                })
            })
            .collect()
    }

    /// The pool, once the lock table and the semaphore tables exist. The semaphore tables
    /// are created on the first semaphore call, so a store used for locks only never creates
    /// them.
    pub(super) async fn permits_ready(&self) -> StoreResult<&MySqlPool> {
        let pool = self.ready().await?;
        self.permit_tables_ready
            .get_or_try_init(|| self.ensure_permit_tables(pool))
            .await?;
        Ok(pool)
    }

    /// Creates the semaphore tables if they do not exist, or accepts ones the account can
    /// read (as for the lock table).
    async fn ensure_permit_tables(&self, pool: &MySqlPool) -> StoreResult<()> {
        let mut created = Ok(());
        for create in &self.permit_sql.create {
            created = sqlx::query(AssertSqlSafe(create.clone()))
                .execute(pool)
                .await
                .map(drop);
            if created.is_err() {
                break;
            }
        }
        let probe = || sqlx::query(AssertSqlSafe(self.permit_sql.probe.clone())).execute(pool);
        created_or_readable::<Mysql, _, _, _>(created, probe, "creating the semaphore tables").await
    }
}

#[cfg(test)]
mod tests;
