//! Handing a held lock from one client to another: [`Session::adopt`] takes over a lease that
//! an owner (of another process, or of this one before a restart) holds, and
//! [`Session::stop_extending`] lets a holder stop its heartbeat so that its lease either lapses
//! or is adopted. Both are built on the store contract as it is: extending by owner is an
//! atomic compare-and-set, so the first extension is what proves the owner still holds it.

use super::Session;
use crate::core::error::LockError;
use crate::core::held::{guard, Held};
use crate::core::kind::Kind;
use crate::core::options::AutoExtend;
use std::sync::Arc;
use tokio::time::Instant;

/// What [`Session::adopt`] takes over, and how it looks after it from then on.
#[derive(Debug, Clone)]
pub struct AdoptSpec {
    /// Lock name (the semaphore's name for permits).
    pub key: String,
    /// Owner token the lease is held under; the adopter extends and releases it as this owner.
    pub owner: String,
    /// A lock, or a semaphore's permits (a read-write lock's holds are permits).
    pub kind: Kind,
    /// The holder's fencing token, as the store showed it: the lease keeps it.
    pub token: u64,
    /// New lease in ms, set by the first extension.
    pub ttl_ms: u64,
    /// Whether a payload is stored with the lock (its lease is extended with it).
    pub has_data: bool,
    /// Heartbeat from now on; `None` for a lease extended by hand only.
    pub auto_extend: Option<AutoExtend>,
}

impl Session {
    /// Takes over `spec.owner`'s lease of `spec.key` under handle `id` (unique among this
    /// session's pending and held locks): extends it to `spec.ttl_ms` if that owner still
    /// holds it, then keeps it as a lock this session holds (heartbeat, local deadline, loss
    /// reports, release). `false`: the owner no longer holds it, nothing was taken.
    ///
    /// # Cancel Safety
    /// Cancel safe until the extension is sent; dropping the future afterwards leaves the
    /// lease extended once and not looked after (it lapses by its ttl).
    pub async fn adopt(self: &Arc<Self>, id: u64, spec: AdoptSpec) -> Result<bool, LockError> {
        let engine = self.engine()?;
        let store = engine.store();
        let sent = Instant::now();
        let owned = match spec.kind {
            Kind::Lock => {
                store
                    .extend(&spec.key, &spec.owner, spec.ttl_ms, spec.has_data)
                    .await?
            }
            Kind::Permits => {
                store
                    .extend_permits(&spec.key, &spec.owner, spec.ttl_ms)
                    .await?
            }
        };
        if !owned {
            return Ok(false);
        }
        let held = Arc::new(
            Held::new(
                id,
                spec.key,
                spec.owner,
                spec.token,
                spec.ttl_ms,
                sent,
                spec.auto_extend,
                true,
                spec.has_data,
                Self::on_lost(Arc::downgrade(self)),
            )
            .of_kind(spec.kind),
        );
        let mut registry = guard(&self.held);
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            // Closed meanwhile: the lease stays its owner's and lapses by its ttl (releasing
            // it would take it from whoever else may look after it).
            return Err(LockError::Closed);
        }
        registry.insert(id, held.clone());
        drop(registry);
        engine.scheduler().add(held);
        Ok(true)
    }

    /// Stops the heartbeat of held lock `id` for good: its lease runs out at its local
    /// deadline, where it is reported lost (`expired`), unless it is released first; closing
    /// the session leaves it to lapse (another client may adopt it meanwhile). `false`: it is
    /// not held.
    pub fn stop_extending(&self, id: u64) -> bool {
        let held = guard(&self.held).get(&id).cloned();
        let Some(held) = held else { return false };
        if !held.stop_extending() {
            return false;
        }
        if let Ok(engine) = self.engine() {
            // Watched at its deadline from now on, not at its next heartbeat.
            engine.scheduler().reschedule(held);
        }
        true
    }

    /// Frees `owner`'s permits of semaphore `name` whoever holds them (a Web Locks `steal`
    /// takes a read-write lock from every holder this way) and wakes this process's head
    /// waiter. Returns whether `owner` held permits; its holder learns of it at its next
    /// extension.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn evict_permits(&self, name: &str, owner: &str) -> Result<bool, LockError> {
        Ok(self.engine()?.evict_permits(name, owner).await?)
    }
}

#[cfg(test)]
mod tests;
