//! Handing a held lock from one client to another: [`Session::adopt`] takes over a lease that
//! an owner (of another process, or of this one before a restart) holds, and
//! [`Session::stop_extending`] lets a holder stop its heartbeat so that its lease either lapses
//! or is adopted.
//!
//! A lock moves to a new owner: the store's handoff, an atomic compare-and-set of the owner
//! (the old one still holds it, then the new one does) that draws a new fencing token in the
//! same step, so only one adopter can win, and the former holder's next extension fails (it
//! hears of its loss at its next heartbeat at the latest; in this session at once). A
//! semaphore's permits have no such operation in the store contract: they are taken over
//! under their owner (its first extension, an atomic compare-and-set, proves it still holds
//! them), so their former holder must have stopped (see the README).

use super::Session;
use crate::core::error::{LockError, LostReason};
use crate::core::held::{guard, Held};
use crate::core::kind::Kind;
use crate::core::options::AutoExtend;
use crate::store::{Handoff, NextOwner, Renewal, ValueFormat};
use std::sync::Arc;
use tokio::time::Instant;

/// What [`Session::adopt`] takes over, and how it looks after it from then on.
#[derive(Debug, Clone)]
pub struct AdoptSpec {
    /// Lock name (the semaphore's name for permits).
    pub key: String,
    /// Owner token the lease is held under now.
    pub owner: String,
    /// A lock's owner from now on (the adopter's own, never used before); permits keep
    /// `owner`.
    pub new_owner: String,
    /// A lock, or a semaphore's permits (a read-write lock's holds are permits).
    pub kind: Kind,
    /// Permits: the holder's fencing token, as the store showed it (the permits keep it).
    /// Unused for a lock, which gets a new token.
    pub token: u64,
    /// A lock: whether the adopter needs a fencing token. Without one (or when the store
    /// shows the lock has none) the lock is handed over unfenced and its token is 0.
    pub fencing: bool,
    /// New lease in ms, set by the take-over (a lock's payload, read from the store, moves
    /// with it).
    pub ttl_ms: u64,
    /// Heartbeat from now on; `None` for a lease extended by hand only.
    pub auto_extend: Option<AutoExtend>,
}

impl Session {
    /// Takes over `spec.owner`'s lease of `spec.key` under handle `id` (unique among this
    /// session's pending and held locks), then keeps it as a lock this session holds
    /// (heartbeat, local deadline, loss reports, release). A lock moves to `spec.new_owner`
    /// with a new fencing token (see the module documentation), and a hold of this session
    /// under the former owner is lost (`NotOwned`) at once; permits are extended under their
    /// owner. Returns the lock's fencing token (0 when unfenced), or `None` when the owner no
    /// longer holds it (another adopter may have taken it first): nothing was taken.
    ///
    /// # Cancel Safety
    /// Cancel safe until the take-over is sent; dropping the future afterwards may leave the
    /// lease taken over once and not looked after (it lapses by its ttl).
    pub async fn adopt(
        self: &Arc<Self>,
        id: u64,
        spec: AdoptSpec,
    ) -> Result<Option<u64>, LockError> {
        let engine = self.engine()?;
        let store = engine.store();
        let (owner, token, has_data, sent) = match spec.kind {
            Kind::Lock => {
                let Some(info) = store.inspect(&spec.key).await? else {
                    return Ok(None);
                };
                if info.owner != spec.owner {
                    return Ok(None);
                }
                // A lock the store shows without a token (a Redis value that is the bare
                // owner) stays without one.
                let fenced = spec.fencing && info.fencing_token != 0;
                let next = NextOwner {
                    owner: &spec.new_owner,
                    ttl_ms: spec.ttl_ms,
                    data: info.data.as_deref(),
                    previous_had_data: info.data.is_some(),
                    format: if fenced {
                        ValueFormat::Fenced
                    } else {
                        ValueFormat::Unfenced
                    },
                };
                let sent = Instant::now();
                let Some(token) = store
                    .handoff(&spec.key, Handoff::new(&spec.owner, &next))
                    .await?
                else {
                    return Ok(None);
                };
                let token = if fenced { token } else { 0 };
                self.lose_former(&engine, &spec.key, &spec.owner);
                (spec.new_owner, token, info.data.is_some(), sent)
            }
            Kind::Permits => {
                let sent = Instant::now();
                if !store
                    .extend_permits(&spec.key, Renewal::new(&spec.owner, spec.ttl_ms))
                    .await?
                {
                    return Ok(None);
                }
                (spec.owner, spec.token, false, sent)
            }
        };
        let held = Arc::new(
            Held::new(
                id,
                spec.key,
                owner,
                token,
                spec.ttl_ms,
                sent,
                spec.auto_extend,
                true,
                has_data,
                Self::on_lost(Arc::downgrade(self)),
            )
            .of_kind(spec.kind),
        );
        {
            let mut registry = guard(&self.held);
            if !self.closed.load(std::sync::atomic::Ordering::Acquire) {
                registry.insert(id, held.clone());
                drop(registry);
                engine.scheduler().add(held);
                return Ok(Some(token));
            }
        }
        // Closed meanwhile. A lock is now the adopter's own: released, as a grant nobody
        // will be told of. Permits are still their owner's, whom a release would take them
        // from: they lapse by their ttl.
        if held.kind == Kind::Lock {
            let _ = engine
                .release_as(held.kind, &held.key, &held.owner, held.has_data)
                .await;
        }
        Err(LockError::Closed)
    }

    /// Reports this session's holds of lock `key` under `owner` lost (`NotOwned`): it was
    /// adopted from that owner, so they no longer hold it.
    fn lose_former(&self, engine: &crate::core::engine::Engine, key: &str, owner: &str) {
        let former: Vec<Arc<Held>> = guard(&self.held)
            .values()
            .filter(|h| h.kind == Kind::Lock && h.key == key && h.owner == owner)
            .cloned()
            .collect();
        for h in former {
            engine.scheduler().remove(&h);
            h.lose(LostReason::NotOwned);
        }
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
