//! What the SQL stores' batched extensions (heartbeats) share around their own statements:
//! which leases a batch extends, the checks of its items, its answers as batches return, and
//! the path of a batch of at most one item, which is a plain extension.

use crate::store::Renewal;
use tokio::task::JoinSet;

use super::checks::{check_key, check_owner, check_semaphore, check_ttl};
use super::Dialect;
use crate::store::{ExtendItem, LockStore, StoreError, StoreResult};

/// What a batch of extensions extends: lock leases, or holders' permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leases {
    /// Rows of the lock table, found by name.
    Locks,
    /// Holders in the permit table, found by name and owner.
    Permits,
}

impl Leases {
    /// The operation named in errors.
    pub fn operation(self) -> &'static str {
        match self {
            Leases::Locks => "extend",
            Leases::Permits => "extend_permits",
        }
    }

    /// Checks an extension before any I/O: the name (a lock's or a semaphore's), the owner
    /// and the lease. Returns the lease in ms.
    pub fn check<D: Dialect>(self, name: &str, owner: &str, ttl_ms: u64) -> StoreResult<i64> {
        match self {
            Leases::Locks => check_key::<D>(name)?,
            Leases::Permits => check_semaphore::<D>(name)?,
        }
        check_owner::<D>(owner)?;
        check_ttl::<D>(ttl_ms)
    }

    /// Extends each of `items` with its own call to `store`'s `extend` or `extend_permits`:
    /// what a batch of at most one item comes down to.
    ///
    /// # Cancel Safety
    /// As the store's extensions: an extension abandoned may still take effect.
    pub async fn one_by_one<S: LockStore>(
        self,
        store: &S,
        items: &[ExtendItem],
    ) -> Vec<StoreResult<bool>> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(match self {
                Leases::Locks => {
                    store
                        .extend(
                            &item.key,
                            Renewal {
                                owner: &item.owner,
                                ttl_ms: item.ttl_ms,
                                has_data: item.has_data,
                            },
                        )
                        .await
                }
                Leases::Permits => {
                    store
                        .extend_permits(&item.key, Renewal::new(&item.owner, item.ttl_ms))
                        .await
                }
            });
        }
        out
    }
}

/// A batched extension's answers, one slot per item, filled as its batches return.
pub struct Answers(Vec<Option<StoreResult<bool>>>);

impl Answers {
    /// Checks every item before any I/O ([`Leases::check`]) and answers the invalid ones at
    /// once, so that an invalid item fails alone instead of failing its batch. Returns the
    /// answers so far and the valid items, as (index, lease in ms).
    pub fn check<D: Dialect>(leases: Leases, items: &[ExtendItem]) -> (Answers, Vec<(usize, i64)>) {
        let mut answers = Answers(vec![None; items.len()]);
        let mut valid = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            match leases.check::<D>(&item.key, &item.owner, item.ttl_ms) {
                Ok(ttl_ms) => valid.push((index, ttl_ms)),
                Err(e) => answers.set(index, Err(e)),
            }
        }
        (answers, valid)
    }

    /// Answers item `index`.
    pub fn set(&mut self, index: usize, result: StoreResult<bool>) {
        self.0[index] = Some(result);
    }

    /// Answers each of the batches run as `tasks` as it returns. A task that panicked leaves
    /// its items unanswered (see [`Answers::finish`]).
    ///
    /// # Cancel Safety
    /// Cancel safe: dropping it aborts the tasks not yet joined.
    pub async fn join(&mut self, mut tasks: JoinSet<Vec<(usize, StoreResult<bool>)>>) {
        while let Some(joined) = tasks.join_next().await {
            if let Ok(done) = joined {
                for (index, result) in done {
                    self.set(index, result);
                }
            }
        }
    }

    /// The answers, in the items' order; an item left unanswered fails as an internal error.
    pub fn finish<D: Dialect>(self, leases: Leases) -> Vec<StoreResult<bool>> {
        self.0
            .into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    Err(StoreError::internal(format!(
                        "{}: {}: no result (the task extending it panicked)",
                        D::NAME,
                        leases.operation()
                    )))
                })
            })
            .collect()
    }
}
