//! Counting semaphores on the SQLite store: the rules of [`store::permits`](crate::store::permits)
//! applied by one statement each (`sql::ACQUIRE_PERMITS` and its siblings) on the
//! `<table>_permits` table, by the host clock as SQLite reads it, with tokens from the
//! counter the locks use (docs/design.md, "SQLite layout").
//!
//! A release that deletes the owner's row (its permits or its queued place) tells the
//! processes watching [`watch_key`] of the semaphore, through the same side channel as a
//! lock's release (`wake`), and this store's own watchers too: unlike a lock's release, which
//! the engine passes on to its local waiters itself, a semaphore's release is announced to
//! every watcher, as Redis's publish reaches its own subscriber.

use super::errors::{db_error, Sqlite};
use super::replaced::Lease;
use super::SqliteStore;
use crate::store::permits::watch_key;
use crate::store::sql::checks::{check_owner, check_request, check_semaphore};
use crate::store::sql::extend::Leases;
use crate::store::{PermitHolder, PermitRequest, ReleaseOutcome, StoreError, StoreResult};
use crate::store::{Release, Renewal};
use sqlx::{AssertSqlSafe, Row};

impl SqliteStore {
    /// Takes `req.permits` of semaphore `req.name` for `req.owner` by the rules of
    /// [`store::permits`](crate::store::permits), in one statement: the new fencing token, the
    /// owner's own token (its lease renewed) if it already holds permits of it, or `None`
    /// when refused (queued for `req.queue_ttl_ms` if that is not 0).
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the statement is on its way, dropping the future may leave the
    /// permits taken, with nobody knowing its token, until `req.ttl_ms` passes.
    pub async fn acquire_permits(&self, req: &PermitRequest<'_>) -> StoreResult<Option<u64>> {
        let (ttl, queue_ttl) = check_request::<Sqlite>(req)?;
        let mut w = self.conn.lock().await?;
        let row = sqlx::query(AssertSqlSafe(self.sql.acquire_permits.as_str()))
            .bind(req.name.as_bytes())
            .bind(req.owner.as_bytes())
            .bind(i64::from(req.permits))
            .bind(i64::from(req.limit))
            .bind(ttl)
            .bind(queue_ttl)
            .bind(super::sql::token_floor(self.floor_tag))
            .fetch_optional(w.conn())
            .await;
        let row = w.finish(row).map_err(|e| db_error("acquire_permits", e))?;
        // No row: a refused try; a NULL token: refused and queued.
        let Some(row) = row else { return Ok(None) };
        let fence: Option<i64> = row.try_get(0).map_err(|e| db_error("acquire_permits", e))?;
        if fence.is_some() {
            if self.conn.moved_since_statement() {
                // Granted in a file deleted or replaced meanwhile (see `try_acquire`).
                return Ok(None);
            }
            self.conn
                .forget_ghost(Lease::Permits, req.name.as_bytes(), req.owner.as_bytes());
        }
        fence
            .map(|fence| {
                u64::try_from(fence).ok().filter(|&t| t > 0).ok_or_else(|| {
                    StoreError::internal(format!("sqlite: acquire_permits: token {fence}"))
                })
            })
            .transpose()
    }

    /// Sets the remaining lease of `owner`'s permits of semaphore `name` to `ttl_ms` if it
    /// holds live ones (a queued place is not extended). Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    pub async fn extend_permits(&self, name: &str, renewal: Renewal<'_>) -> StoreResult<bool> {
        self.renew(Leases::Permits, name, renewal).await
    }

    /// Frees `owner`'s permits of semaphore `name` and gives up its queued place, and deletes
    /// the semaphore's lapsed rows. If the owner had a row (held or queued, live or not), the
    /// processes watching the semaphore are told. `released`: whether it held live permits.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent (a repeat after a dropped call reports `released: false`).
    pub async fn release_permits(&self, name: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        check_semaphore::<Sqlite>(name)?;
        check_owner::<Sqlite>(owner)?;
        let key = watch_key(name);
        let mut w = self.conn.lock().await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.release_permits.as_str()))
            .bind(name.as_bytes())
            .bind(owner.as_bytes())
            .bind(key.as_bytes())
            .fetch_all(w.conn())
            .await;
        let rows = w.finish(rows).map_err(|e| db_error("release_permits", e))?;
        self.purge_if_due();
        let mut outcome = ReleaseOutcome::unannounced(false);
        for row in &rows {
            let decode = |e| db_error("release_permits", e);
            let mine: bool = row.try_get(0).map_err(decode)?;
            if !mine {
                continue;
            }
            outcome.released = row.try_get(1).map_err(decode)?;
            let addrs: Option<String> = row.try_get(2).map_err(decode)?;
            if let Some(addrs) = addrs {
                outcome.others_waiting = self.tell(&key, &addrs);
            }
            self.wake.tell_here(&key);
        }
        Ok(outcome)
    }

    /// The live holders of semaphore `name`: owner, permits, token and remaining lease by the
    /// host clock.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits(&self, name: &str) -> StoreResult<Vec<PermitHolder>> {
        check_semaphore::<Sqlite>(name)?;
        if self.conn.absent() {
            return Ok(Vec::new());
        }
        let mut w = self.conn.lock().await?;
        let rows = sqlx::query(AssertSqlSafe(self.sql.permit_holders.as_str()))
            .bind(name.as_bytes())
            .fetch_all(w.conn())
            .await;
        let rows = w.finish(rows).map_err(|e| db_error("permits", e))?;
        rows.iter()
            .map(|row| {
                let decode = |e| db_error("permits", e);
                let owner: Vec<u8> = row.try_get(0).map_err(decode)?;
                let permits: i64 = row.try_get(1).map_err(decode)?;
                let fence: i64 = row.try_get(2).map_err(decode)?;
                let remaining_ms: i64 = row.try_get(3).map_err(decode)?;
                Ok(PermitHolder {
                    // Owners are only ever written from `&str`, so this never replaces anything.
                    owner: String::from_utf8_lossy(&owner).into_owned(),
                    permits: u32::try_from(permits).unwrap_or(0),
                    fencing_token: u64::try_from(fence).unwrap_or(0),
                    remaining_ms,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
