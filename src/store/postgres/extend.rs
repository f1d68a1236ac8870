//! Batched extensions (heartbeats) of PostgreSQL leases, of locks or of semaphore holders:
//! one statement per batch with the items as three arrays, returning the (name, owner) pairs
//! it extended, so that every item's answer is exact.

use std::future::Future;
use std::sync::Arc;

use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;
use tokio::task::JoinSet;

use super::errors::{retry, Postgres};
use super::PostgresStore;
use crate::store::sql::errors::db_error;
use crate::store::sql::extend::{Answers, Leases};
use crate::store::{ExtendItem, Renewal, StoreResult};

impl PostgresStore {
    /// Extends `name`'s lease (a lock's, or `r.owner`'s permits of a semaphore, as `leases`
    /// says): one autocommit statement, retried as every statement is.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    pub(super) async fn renew(
        &self,
        leases: Leases,
        name: &str,
        r: Renewal<'_>,
    ) -> StoreResult<bool> {
        let (owner, ttl) = (r.owner, leases.check::<Postgres>(name, r.owner, r.ttl_ms)?);
        let (pool, sql) = match leases {
            Leases::Locks => (self.ready().await?, &self.sql.extend),
            Leases::Permits => (self.permits_ready().await?, &self.permit_sql.extend),
        };
        let done = retry(|| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(name.as_bytes())
                .bind(owner.as_bytes())
                .bind(ttl)
                .execute(pool)
        })
        .await
        .map_err(|e| db_error::<Postgres>(leases.operation(), e))?;
        Ok(done.rows_affected() > 0)
    }

    /// Runs batched extensions of `leases` with `sql` (bound to the names, owners and ttls as
    /// three arrays, returning the (name, owner) pairs it extended) over the pool `ready`
    /// yields, once each item passed its checks; `ready` is awaited only if some item is
    /// valid. The body of [`Self::extend_many`] and of the semaphores' batches.
    pub(super) async fn extend_batched<'a>(
        &self,
        leases: Leases,
        items: &[ExtendItem],
        ready: impl Future<Output = StoreResult<&'a PgPool>>,
        sql: &Arc<str>,
    ) -> Vec<StoreResult<bool>> {
        let (mut answers, valid) = Answers::check::<Postgres>(leases, items);
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
                    answers.join(tasks).await;
                }
                Err(e) => {
                    for &(index, _) in &valid {
                        answers.set(index, Err(e.clone()));
                    }
                }
            }
        }
        answers.finish::<Postgres>(leases)
    }
}

/// Most items per batched extension statement: one statement holds the row locks of its
/// items until it commits, so batches stay short; larger batches run concurrently.
pub(super) const EXTEND_BATCH_MAX: usize = 1000;

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
