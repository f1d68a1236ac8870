//! Batched extensions (heartbeats) of SQLite leases, of locks or of semaphore holders: one
//! statement per batch, returning the (name, owner) of every lease it extended, so each
//! item's outcome is exact.

use sqlx::{AssertSqlSafe, Row};

use super::errors::{db_error, Sqlite};
use super::replaced::Lease;
use super::sql::EXTEND_BATCH_MAX;
use super::SqliteStore;
use crate::store::sql::extend::Answers;
pub(super) use crate::store::sql::extend::Leases;
use crate::store::{ExtendItem, Renewal, StoreResult};

impl SqliteStore {
    /// Extends `name`'s lease (a lock's, or `r.owner`'s permits of a semaphore, as `leases`
    /// says): one statement under the file's write lock; a lease of a replaced file (a ghost),
    /// or one extended in a file replaced while the statement waited, is refused.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    pub(super) async fn renew(
        &self,
        leases: Leases,
        name: &str,
        r: Renewal<'_>,
    ) -> StoreResult<bool> {
        let (owner, ttl) = (r.owner, leases.check::<Sqlite>(name, r.owner, r.ttl_ms)?);
        let (lease, sql) = match leases {
            Leases::Locks => (Lease::Lock, &self.sql.extend),
            Leases::Permits => (Lease::Permits, &self.sql.extend_permits),
        };
        let mut w = self.conn.lock().await?;
        if self.conn.is_ghost(lease, name.as_bytes(), owner.as_bytes()) {
            w.finish(Ok(())).ok();
            return Err(self.replaced_error(leases.operation()));
        }
        let done = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(name.as_bytes())
            .bind(owner.as_bytes())
            .bind(ttl)
            .execute(w.conn())
            .await;
        let done = w
            .finish(done)
            .map_err(|e| db_error(leases.operation(), e))?;
        if done.rows_affected() > 0 && self.conn.moved_since_statement() {
            // Extended in a file deleted or replaced meanwhile: a ghost's extension.
            return Err(self.replaced_error(leases.operation()));
        }
        Ok(done.rows_affected() > 0)
    }

    /// [`crate::store::LockStore::extend_many`] of locks or of permits.
    pub(super) async fn extend_each(
        &self,
        items: &[ExtendItem],
        leases: Leases,
    ) -> Vec<StoreResult<bool>> {
        if items.len() <= 1 {
            return leases.one_by_one(self, items).await;
        }
        let (mut answers, valid) = Answers::check::<Sqlite>(leases, items);
        for batch in valid.chunks(EXTEND_BATCH_MAX) {
            let result = self.extend_batch(items, batch, leases).await;
            for &(index, _) in batch {
                let item = &items[index];
                answers.set(
                    index,
                    match &result {
                        Ok((_, ghosts)) if ghosts.contains(&index) => {
                            Err(self.replaced_error(leases.operation()))
                        }
                        Ok((extended, _)) => Ok(extended
                            .iter()
                            .any(|(k, o)| k == item.key.as_bytes() && o == item.owner.as_bytes())),
                        Err(e) => Err(e.clone()),
                    },
                );
            }
        }
        answers.finish::<Sqlite>(leases)
    }

    /// One batched extension: the (name, owner) of every lease extended, and the indexes of
    /// the items that were leases of a replaced file (ghosts, left out of the statement). The
    /// batch is padded to a power of two by repeating its last item, which cannot change any
    /// outcome.
    async fn extend_batch(
        &self,
        items: &[ExtendItem],
        batch: &[(usize, i64)],
        leases: Leases,
    ) -> StoreResult<(Vec<(Vec<u8>, Vec<u8>)>, Vec<usize>)> {
        let operation = leases.operation();
        let texts = match leases {
            Leases::Locks => &self.sql.extend_many,
            Leases::Permits => &self.sql.extend_permits_many,
        };
        let mut w = self.conn.lock().await?;
        let mut ghosts = Vec::new();
        let mut live = Vec::with_capacity(batch.len());
        for &(index, ttl) in batch {
            let item = &items[index];
            if self.conn.is_ghost(
                ghost_lease(leases),
                item.key.as_bytes(),
                item.owner.as_bytes(),
            ) {
                ghosts.push(index);
            } else {
                live.push((index, ttl));
            }
        }
        let batch = live;
        if batch.is_empty() {
            w.finish(Ok(())).ok();
            return Ok((Vec::new(), ghosts));
        }
        let padded = batch.len().max(2).next_power_of_two();
        let text = &texts[padded.trailing_zeros() as usize - 1];
        let mut query = sqlx::query(AssertSqlSafe(text.as_str()));
        for i in 0..padded {
            let (index, ttl) = batch[i.min(batch.len() - 1)];
            let item = &items[index];
            query = query
                .bind(item.key.as_bytes())
                .bind(item.owner.as_bytes())
                .bind(ttl);
        }
        let rows = query.fetch_all(w.conn()).await;
        let rows = w.finish(rows).map_err(|e| db_error(operation, e))?;
        let extended = rows
            .iter()
            .map(|row| {
                let name: Vec<u8> = row.try_get(0).map_err(|e| db_error(operation, e))?;
                let owner: Vec<u8> = row.try_get(1).map_err(|e| db_error(operation, e))?;
                Ok((name, owner))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        if !extended.is_empty() && self.conn.moved_since_statement() {
            // Extended in a file deleted or replaced meanwhile: every item was a ghost's.
            let mut all = ghosts;
            all.extend(batch.iter().map(|&(index, _)| index));
            return Ok((Vec::new(), all));
        }
        Ok((extended, ghosts))
    }
}

/// The kind of lease `leases` are, as ghosts are kept.
fn ghost_lease(leases: Leases) -> Lease {
    match leases {
        Leases::Locks => Lease::Lock,
        Leases::Permits => Lease::Permits,
    }
}
