//! Batched extensions (heartbeats) of MySQL leases, of locks or of semaphore holders: one
//! multi-row `UPDATE` per batch, the batches running concurrently over the pool.

use std::sync::Arc;

use sqlx::mysql::MySqlPool;
use sqlx::AssertSqlSafe;
use tokio::task::JoinSet;

use super::errors::{retry_on_conflict, Mysql};
use super::MysqlStore;
use crate::store::sql::errors::db_error;
use crate::store::sql::extend::Answers;
pub(super) use crate::store::sql::extend::Leases;
use crate::store::Renewal;
use crate::store::{ExtendItem, StoreResult};

impl MysqlStore {
    /// Extends `name`'s lease (a lock's, or `r.owner`'s permits of a semaphore, as `leases`
    /// says): one statement, sent again after a deadlock.
    ///
    /// # Cancel Safety
    /// Cancel safe: the statement is idempotent.
    pub(super) async fn renew(
        &self,
        leases: Leases,
        name: &str,
        r: Renewal<'_>,
    ) -> StoreResult<bool> {
        let ttl = statement_ttl(leases, leases.check::<Mysql>(name, r.owner, r.ttl_ms)?);
        let (pool, sql) = match leases {
            Leases::Locks => (self.ready().await?, &self.sql.extend),
            Leases::Permits => (self.permits_ready().await?, &self.permit_sql.extend),
        };
        extend_one(pool, sql, leases.operation(), name, r.owner, ttl).await
    }

    /// [`crate::store::LockStore::extend_many`] for locks or permits.
    pub(super) async fn extend_leases(
        &self,
        leases: Leases,
        items: &[ExtendItem],
    ) -> Vec<StoreResult<bool>> {
        if items.len() <= 1 {
            return leases.one_by_one(self, items).await;
        }
        let (mut answers, checked) = Answers::check::<Mysql>(leases, items);
        let valid: Vec<Job> = checked
            .into_iter()
            .map(|(index, ttl_ms)| Job {
                index,
                key: items[index].key.clone(),
                owner: items[index].owner.clone(),
                ttl: statement_ttl(leases, ttl_ms),
            })
            .collect();
        if !valid.is_empty() {
            let (ready, bulk, one) = match leases {
                Leases::Locks => (self.ready().await, &self.sql.extend_many, &self.sql.extend),
                Leases::Permits => (
                    self.permits_ready().await,
                    &self.permit_sql.extend_many,
                    &self.permit_sql.extend,
                ),
            };
            match ready {
                Ok(pool) => {
                    let mut tasks = JoinSet::new();
                    let mut rest = valid;
                    while !rest.is_empty() {
                        let tail = rest.split_off(rest.len().min(EXTEND_BATCH_MAX));
                        let batch = std::mem::replace(&mut rest, tail);
                        let padded = batch.len().max(2).next_power_of_two();
                        let bulk_sql = bulk[padded.trailing_zeros() as usize - 1].clone();
                        let one_sql = one.clone();
                        let pool = pool.clone();
                        tasks.spawn(async move {
                            extend_batch(&pool, leases, &bulk_sql, &one_sql, batch).await
                        });
                    }
                    answers.join(tasks).await;
                }
                Err(e) => {
                    for job in &valid {
                        answers.set(job.index, Err(e.clone()));
                    }
                }
            }
        }
        answers.finish::<Mysql>(leases)
    }
}

/// A checked lease in the unit of `leases`' statements: microseconds for locks (see
/// [`super::micros`]), milliseconds for permits.
fn statement_ttl(leases: Leases, ttl_ms: i64) -> u64 {
    match leases {
        Leases::Locks => super::micros(ttl_ms),
        Leases::Permits => ttl_ms as u64,
    }
}

/// Most items per multi-row extend statement: 4 placeholders each (5 for permits), far below
/// the protocol's 65 535, and a statement small enough not to hold many row locks for long.
pub(super) const EXTEND_BATCH_MAX: usize = 256;

/// One valid item of an `extend_many` call, owned so that its batch can run in a spawned task.
#[derive(Clone)]
struct Job {
    index: usize,
    key: String,
    owner: String,
    /// The new lease, in the unit of its [`Leases`].
    ttl: u64,
}

/// Extends one batch with a single statement, falling back to one statement per item when the
/// matched count does not prove that every item was extended. Returns each item's outcome
/// with its index in the caller's list.
async fn extend_batch(
    pool: &MySqlPool,
    leases: Leases,
    bulk_sql: &Arc<str>,
    one_sql: &Arc<str>,
    batch: Vec<Job>,
) -> Vec<(usize, StoreResult<bool>)> {
    let operation = leases.operation();
    if batch.len() == 1 {
        let job = &batch[0];
        let result = extend_one(pool, one_sql, operation, &job.key, &job.owner, job.ttl).await;
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
            query = query.bind(slot(i).key.as_bytes());
            if leases == Leases::Permits {
                query = query.bind(slot(i).owner.as_bytes());
            }
            query = query.bind(slot(i).ttl);
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
            let error = db_error::<Mysql>(operation, e);
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
            let result = extend_one(&pool, &sql, operation, &job.key, &job.owner, job.ttl).await;
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

/// Runs `SQL_EXTEND` (or the permit table's) for one lease, `ttl` in the statement's unit.
async fn extend_one(
    pool: &MySqlPool,
    sql: &Arc<str>,
    operation: &str,
    key: &str,
    owner: &str,
    ttl: u64,
) -> StoreResult<bool> {
    let done = retry_on_conflict(|| {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(ttl)
            .bind(key.as_bytes())
            .bind(owner.as_bytes())
            .execute(pool)
    })
    .await
    .map_err(|e| db_error::<Mysql>(operation, e))?;
    Ok(done.rows_affected() > 0)
}
