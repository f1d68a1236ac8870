//! Freeing a semaphore holder that is not the caller (an operator's tool, and how a Web Locks
//! `steal` takes a read-write lock from its holders).

use super::Engine;
use crate::core::kind::Kind;
use crate::store::{Release, StoreResult};

impl Engine {
    /// Frees `owner`'s permits of semaphore `key` (and its place in the store's queue)
    /// whoever holds them, announces it, and lets this process's head waiter look. Unlike
    /// [`Engine::release_permits`] it hands nothing to a local waiter: the evicted holder's
    /// permits are not this process's to give. Returns whether `owner` held permits.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn evict_permits(&self, key: &str, owner: &str) -> StoreResult<bool> {
        let outcome = self.store.release_permits(key, Release::new(owner)).await?;
        self.wake(key, Kind::Permits, true);
        Ok(outcome.released)
    }
}
