//! Counting semaphores on PostgreSQL: the rules of [`crate::store::permits`] applied by the
//! statements of [`permit_sql`](super::permit_sql), in two tables created on the first
//! semaphore operation, with tokens from the lock table's sequence and releases announced on
//! the lock table's channel under [`watch_key`].

use crate::store::{Release, Renewal};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{AssertSqlSafe, Row};

use super::errors::{retry, Postgres};
use super::{token_of, PostgresStore};
use crate::store::permits::watch_key;
use crate::store::sql::checks::{check_owner, check_request, check_semaphore};
use crate::store::sql::errors::{db_error, read};
use crate::store::sql::extend::Leases;
use crate::store::{ExtendItem, PermitHolder, PermitRequest, ReleaseOutcome, StoreResult};

impl PostgresStore {
    /// The pool, once the lock table and the semaphore tables exist (created on the first
    /// semaphore operation, so a store used only for locks never creates them).
    pub(super) async fn permits_ready(&self) -> StoreResult<&PgPool> {
        let pool = self.ready().await?;
        self.permits_ready
            .get_or_try_init(|| {
                self.ensure_schema(
                    pool,
                    &self.permit_sql.create,
                    &self.permit_sql.probe,
                    "creating the semaphore tables",
                )
            })
            .await?;
        Ok(pool)
    }

    /// Takes `req.permits` permits of semaphore `req.name` for `req.owner` by the rules of
    /// [`crate::store::permits`], in one transaction that locks the semaphore's header row
    /// first. Returns the new token, the owner's own token if it already holds permits (its
    /// lease set anew), or `None` when refused (queued when `req.queue_ttl_ms > 0`).
    ///
    /// # Cancel Safety
    /// Not cancel safe: once the commit was sent, dropping the future may leave the permits
    /// taken (or the place queued) until the lease (or the place) runs out. A future dropped
    /// earlier rolls the transaction back when its connection returns to the pool.
    pub async fn acquire_permits(&self, req: &PermitRequest<'_>) -> StoreResult<Option<u64>> {
        let (ttl, queue_ttl) = check_request::<Postgres>(req)?;
        let pool = self.permits_ready().await?;
        let (lock, acquire) = (&self.permit_sql.lock, &self.permit_sql.acquire);
        // Safe to repeat as a whole: a commit whose reply was lost left the owner holding
        // (its own token comes back) or queued (its place is kept).
        let token: Option<i64> = retry(|| async move {
            let mut tx = pool.begin().await?;
            sqlx::query(AssertSqlSafe(lock.clone()))
                .bind(req.name.as_bytes())
                .execute(&mut *tx)
                .await?;
            let token: Option<i64> = sqlx::query_scalar(AssertSqlSafe(acquire.clone()))
                .bind(req.name.as_bytes())
                .bind(req.owner.as_bytes())
                .bind(i64::from(req.permits))
                .bind(i64::from(req.limit))
                .bind(ttl)
                .bind(queue_ttl)
                .bind(&self.id[..])
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(token)
        })
        .await
        .map_err(|e| db_error::<Postgres>("acquire_permits", e))?;
        Ok(token.map(token_of))
    }

    /// Sets the lease of `owner`'s permits of semaphore `name` to `ttl_ms` if it still holds
    /// them. Returns whether it did.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    pub async fn extend_permits(&self, name: &str, renewal: Renewal<'_>) -> StoreResult<bool> {
        self.renew(Leases::Permits, name, renewal).await
    }

    /// Extends many holders' permits (`key`: the semaphore), as [`Self::extend_permits`]
    /// would each, in batches of one statement like [`Self::extend_many`]. One result per
    /// item, in order.
    ///
    /// # Cancel Safety
    /// Cancel safe: every extension is idempotent.
    pub async fn extend_permits_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        let (ready, sql) = (self.permits_ready(), &self.permit_sql.extend_many);
        self.extend_batched(Leases::Permits, items, ready, sql)
            .await
    }

    /// Frees `owner`'s permits of semaphore `name` and its queued place, and announces it
    /// under [`watch_key`]`(name)` when the row was live and another store was refused since
    /// the queue was last empty. `released`: whether it held live permits.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped call may have freed the permits, and repeating it then reports
    /// `released: false`.
    pub async fn release_permits(&self, name: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        check_semaphore::<Postgres>(name)?;
        check_owner::<Postgres>(owner)?;
        let pool = self.permits_ready().await?;
        let sql = &self.permit_sql.release;
        let key = watch_key(name);
        let row: Option<PgRow> = retry(|| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(name.as_bytes())
                .bind(owner.as_bytes())
                .bind(&self.id[..])
                .bind(&self.channel)
                .bind(key.as_bytes())
                .fetch_optional(pool)
        })
        .await
        .map_err(|e| db_error::<Postgres>("release_permits", e))?;
        self.purge_if_due(pool);
        let Some(row) = row else {
            return Ok(ReleaseOutcome::unannounced(false));
        };
        let decode = |e: sqlx::Error| db_error::<Postgres>("release_permits", e);
        Ok(ReleaseOutcome {
            released: row.try_get(0).map_err(decode)?,
            others_waiting: row.try_get(1).map_err(decode)?,
        })
    }

    /// The live holders of semaphore `name`, remaining leases by the server's clock (rounded
    /// up to whole milliseconds).
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits(&self, name: &str) -> StoreResult<Vec<PermitHolder>> {
        check_semaphore::<Postgres>(name)?;
        // A read creates nothing: tables that do not exist hold no permits.
        let pool = self.connected().await?;
        let sql = &self.permit_sql.holders;
        let rows: Vec<PgRow> = read::<Postgres, _>(
            "permits",
            retry(|| {
                sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(name.as_bytes())
                    .fetch_all(pool)
            })
            .await,
        )?;
        rows.iter()
            .map(|row| {
                let owner: Vec<u8> = row.try_get(0)?;
                let permits: i64 = row.try_get(1)?;
                let token: i64 = row.try_get(2)?;
                let remaining_us: i64 = row.try_get(3)?;
                Ok(PermitHolder {
                    // Owners are only ever written from `&str`.
                    owner: String::from_utf8_lossy(&owner).into_owned(),
                    // Written from a `u32`.
                    permits: u32::try_from(permits).unwrap_or(u32::MAX),
                    fencing_token: token_of(token),
                    remaining_ms: (remaining_us + 999) / 1000,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| db_error::<Postgres>("permits", e))
    }
}

#[cfg(test)]
mod tests;
