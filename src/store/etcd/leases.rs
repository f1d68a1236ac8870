//! The etcd leases of one store, in two kinds.
//!
//! - **Each held lock has an etcd lease of its own** ([`Own`]), which nothing but that lock's
//!   own acquisition and extensions keep alive: a key nobody extends any more (its holder's
//!   timer could not delete it, a grant applied after its request timed out, a process that
//!   died) ends with its lease, whatever the store's other locks do. A released lock's lease
//!   carries nothing any more and goes back to a pool (`give_back`), so the next acquisition
//!   of that length takes it without a grant while it has life enough left (`take`); a lease
//!   whose request's outcome is unknown is never used again and lapses by itself.
//! - **Shared leases**, one per length of lease asked for ([`Leases::lease_for`]), carry the
//!   keys whose life a little longer does no harm: waiters' marks, and the semaphores' keys.
//!
//! Lengths are whole seconds, see [`lease_secs`]. A lease's end as this store counts it
//! (`good_until`) is the send time of the grant or keep-alive plus the TTL etcd answered: etcd
//! starts the TTL when it receives the request, so etcd never ends the lease before
//! `good_until`. A lock's local deadline (the engine's) is reckoned from before the call, and
//! the call makes sure `good_until` is past it: no other client can be granted the lock
//! before its holder's deadline, whatever happens to this process or the network.
//!
//! Keep-alives of many leases (a heartbeat's) go in one request: the gateway's keep-alive is
//! a stream, and takes one message a line.

use super::client::{int, Api, Retry};
use crate::runtime::debug::debug;
use crate::store::StoreResult;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The etcd lease length (s) for locks of `ttl_ms`: one and a half times the lease, rounded up
/// to seconds, so that one keep-alive covers the locks' leases for at least half a lease (a
/// heartbeat renews a lease well before that). A process that dies holds its locks that long
/// (and up to etcd's half-second check of its leases more).
pub fn lease_secs(ttl_ms: u64) -> i64 {
    ttl_ms.saturating_mul(3).div_ceil(2000).max(1) as i64
}

#[derive(Debug, Default)]
struct Slot {
    /// The lease's ID; 0: none yet, or it lapsed.
    id: i64,
    good_until: Option<Instant>,
}

/// A lease of one lock, and until when etcd keeps it at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Own {
    /// The lease's ID.
    pub id: i64,
    /// Its length in seconds ([`lease_secs`] of the locks it was granted for).
    pub secs: i64,
    /// The send time of its last grant or keep-alive plus the TTL etcd answered.
    pub good_until: Instant,
}

/// Most leases kept in the pool per length: as many as locks of one length released at once.
const POOL: usize = 256;

/// The store's leases.
#[derive(Debug, Default)]
pub struct Leases {
    /// The shared leases, by length.
    slots: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Leases no key is attached to, by length, most recently given back last.
    pool: Mutex<HashMap<i64, Vec<Own>>>,
    /// Leases that carry waiters' marks only (until they end), to revoke on close.
    marks: Mutex<Vec<Own>>,
}

/// Keeps `ids` alive with one request: for each, its new `good_until`, or `None` when etcd no
/// longer has it (every key attached to it is gone).
///
/// # Cancel Safety
/// Cancel safe: a keep-alive is idempotent.
pub async fn keep_alive(
    api: &Api,
    ids: &[i64],
    deadline: Instant,
) -> StoreResult<HashMap<i64, Option<Instant>>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let bodies: Vec<_> = ids.iter().map(|id| json!({"ID": id.to_string()})).collect();
    let sent = Instant::now();
    let answers = api
        .call_lines("/v3/lease/keepalive", &bodies, deadline, Retry::Safe)
        .await?;
    let mut out: HashMap<i64, Option<Instant>> = ids.iter().map(|&id| (id, None)).collect();
    for a in &answers {
        let id = int(a.pointer("/result/ID"));
        let ttl = int(a.pointer("/result/TTL"));
        if ttl > 0 {
            if let Some(slot) = out.get_mut(&id) {
                *slot = Some(sent + Duration::from_secs(ttl as u64));
            }
        }
    }
    Ok(out)
}

/// Grants a lease of `secs` seconds: its id, and until when it lives (reckoned from before
/// the request was sent, by the TTL the server granted).
///
/// # Cancel Safety
/// Cancel safe: a lease granted and never used lapses by itself.
async fn grant_secs(api: &Api, secs: i64, deadline: Instant) -> StoreResult<(i64, Instant)> {
    let sent = Instant::now();
    let reply = api
        .call(
            "/v3/lease/grant",
            &json!({"TTL": secs.to_string()}),
            deadline,
            Retry::Safe,
        )
        .await?;
    let (id, ttl) = (int(reply.get("ID")), int(reply.get("TTL")));
    if id == 0 || ttl <= 0 {
        return Err(crate::store::StoreError::internal(
            "etcd: lease grant: no lease in the answer",
        ));
    }
    Ok((id, sent + Duration::from_secs(ttl as u64)))
}

/// Grants a lease for locks of `ttl_ms`.
async fn grant(api: &Api, ttl_ms: u64, deadline: Instant) -> StoreResult<Own> {
    let secs = lease_secs(ttl_ms);
    let (id, good_until) = grant_secs(api, secs, deadline).await?;
    Ok(Own {
        id,
        secs,
        good_until,
    })
}

impl Leases {
    fn slot(&self, secs: i64) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(secs).or_default().clone()
    }

    /// The shared lease for keys of `ttl_ms` (waiters' marks, semaphores' keys), alive for at
    /// least `ttl_ms` from now.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped keep-alive or grant leaves the slot as it was (a lease granted
    /// and never used lapses by itself).
    pub async fn lease_for(&self, api: &Api, ttl_ms: u64, deadline: Instant) -> StoreResult<i64> {
        let secs = lease_secs(ttl_ms);
        let slot = self.slot(secs);
        let mut s = slot.lock().await;
        let need = Instant::now() + Duration::from_millis(ttl_ms);
        if s.id != 0 {
            if s.good_until.is_some_and(|g| g >= need) {
                return Ok(s.id);
            }
            let sent = Instant::now();
            let reply = api
                .call(
                    "/v3/lease/keepalive",
                    &json!({"ID": s.id.to_string()}),
                    deadline,
                    Retry::Safe,
                )
                .await?;
            let ttl = int(reply.pointer("/result/TTL"));
            if ttl > 0 {
                s.good_until = Some(sent + Duration::from_secs(ttl as u64));
                if s.good_until.is_some_and(|g| g >= need) {
                    return Ok(s.id);
                }
            } else {
                // Every lock and permit attached to it is gone: their holders hear it at their
                // next extension, which finds the key gone or on another lease.
                debug!("etcd: lease {} lapsed; its locks are lost", s.id);
                *s = Slot::default();
            }
        }
        let (id, good_until) = grant_secs(api, secs, deadline).await?;
        *s = Slot {
            id,
            good_until: Some(good_until),
        };
        Ok(id)
    }

    /// A lease no key is attached to, alive for at least `ttl_ms` from now, for one lock: one
    /// from the pool (kept alive first if it would not live that long), else a new one.
    ///
    /// # Cancel Safety
    /// Cancel safe: a lease taken and dropped unused lapses by itself.
    pub async fn take(&self, api: &Api, ttl_ms: u64, deadline: Instant) -> StoreResult<Own> {
        let need = Instant::now() + Duration::from_millis(ttl_ms);
        let pooled = {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            let idle = pool.entry(lease_secs(ttl_ms)).or_default();
            // Those that already ended are dropped (etcd dropped them too).
            let now = Instant::now();
            idle.retain(|l| l.good_until > now);
            idle.pop()
        };
        if let Some(own) = pooled {
            if own.good_until >= need {
                return Ok(own);
            }
            if let Some(own) = self.ensure(api, own, ttl_ms, deadline).await? {
                return Ok(own);
            }
        }
        grant(api, ttl_ms, deadline).await
    }

    /// `own`, alive for at least `ttl_ms` from now (one keep-alive if it would not be), or
    /// `None` if etcd no longer has it.
    ///
    /// # Cancel Safety
    /// Cancel safe: a keep-alive is idempotent.
    pub async fn ensure(
        &self,
        api: &Api,
        own: Own,
        ttl_ms: u64,
        deadline: Instant,
    ) -> StoreResult<Option<Own>> {
        if own.good_until >= Instant::now() + Duration::from_millis(ttl_ms) {
            return Ok(Some(own));
        }
        let alive = keep_alive(api, &[own.id], deadline).await?;
        Ok(alive
            .get(&own.id)
            .copied()
            .flatten()
            .map(|good_until| Own { good_until, ..own }))
    }

    /// Takes back `own`, a lease that no key is attached to any more (its lock was released
    /// by a transaction that said so, or its acquisition was refused), for the next
    /// acquisition of its length.
    pub fn give_back(&self, own: Own) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.entry(own.secs).or_default();
        if idle.len() < POOL && own.good_until > Instant::now() {
            idle.push(own);
        }
    }

    /// Records that `own` carries a waiters' mark, and no lock: closing revokes it.
    pub fn carries_mark(&self, own: Own) {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        marks.retain(|l| l.good_until > now);
        marks.push(own);
    }

    /// Forgets `id`, which etcd said does not exist (any more).
    pub async fn lapsed(&self, id: i64) {
        let all: Vec<_> = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.values().cloned().collect()
        };
        for slot in all {
            let mut s = slot.lock().await;
            if s.id == id {
                *s = Slot::default();
            }
        }
    }

    /// The IDs of the shared leases, of those in the pool and of those carrying marks (to
    /// revoke on close).
    pub async fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            pool.drain().flat_map(|(_, v)| v).map(|l| l.id).collect()
        };
        let marks = std::mem::take(&mut *self.marks.lock().unwrap_or_else(|p| p.into_inner()));
        ids.extend(marks.iter().map(|l| l.id));
        ids.extend(self.shared_ids().await);
        ids
    }

    async fn shared_ids(&self) -> Vec<i64> {
        let all: Vec<_> = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.values().cloned().collect()
        };
        let mut ids = Vec::new();
        for slot in all {
            let s = slot.lock().await;
            if s.id != 0 {
                ids.push(s.id);
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_one_and_a_half_times_its_locks_in_whole_seconds() {
        assert_eq!(lease_secs(50), 1);
        assert_eq!(lease_secs(500), 1);
        assert_eq!(lease_secs(1000), 2);
        assert_eq!(lease_secs(10_000), 15);
        assert_eq!(lease_secs(10_001), 16);
    }
}
