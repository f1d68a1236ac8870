//! The leases of one store: one etcd lease per length of lease asked for (in whole seconds,
//! see [`lease_secs`]), shared by every lock and permit of this store with that length, and
//! kept alive by the calls that need it: an acquisition or an extension makes sure its lease
//! lives at least as long as the lock's own lease from the moment of the call, and sends one
//! keep-alive when it would not. The engine's batched heartbeat extends every held lock, so
//! a client holding any number of locks of one length sends one keep-alive per renewal.
//!
//! A lease's end as this store counts it (`good_until`) is the send time of the grant or
//! keep-alive plus the TTL etcd answered: etcd starts the TTL when it receives the request,
//! so etcd never ends the lease before `good_until`. A lock's local deadline (the engine's)
//! is reckoned from before the call, and the call makes sure `good_until` is past it: no
//! other client can be granted the lock before its holder's deadline, whatever happens to
//! this process or the network.

use super::client::{int, Api, Retry};
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

/// The store's leases, by length.
#[derive(Debug, Default)]
pub struct Leases {
    slots: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl Leases {
    fn slot(&self, secs: i64) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(secs).or_default().clone()
    }

    /// The lease to attach a lock of `ttl_ms` to, alive for at least `ttl_ms` from now.
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
                crate::debug!("etcd: lease {} lapsed; its locks are lost", s.id);
                *s = Slot::default();
            }
        }
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
        *s = Slot {
            id,
            good_until: Some(sent + Duration::from_secs(ttl as u64)),
        };
        Ok(id)
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

    /// The IDs of the leases in use (to revoke on close).
    pub async fn ids(&self) -> Vec<i64> {
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
