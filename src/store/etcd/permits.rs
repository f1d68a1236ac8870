//! Counting semaphores on etcd, by the rules of [`crate::store::permits`]: each holder is a
//! key `… 0xFF h <owner>` (value: its permits) and each queued request a key `… 0xFF q
//! <owner>` (value: the permits it asks), attached to the store's leases as locks are, and
//! timed by this store (`held.rs`) to the millisecond. The queue's order is the keys'
//! `create_revision`: a request keeps its place while it asks again, since writing a key
//! again keeps its creation.
//!
//! An acquisition reads the semaphore's keys (one range), decides by the rules, and writes
//! its grant in a transaction conditioned on no key of the semaphore having been written
//! since that read (a `MOD` compare over the whole prefix): two clients never both take the
//! last permits. The token is the grant's revision, as for locks.

use super::client::{kvs, prefix_end, revision, succeeded, txn_response, Kv, Retry};
use super::held::Guard;
use super::keys::{holder_key, parse_permit_value, permit_value, queued_key, semaphore_entry};
use super::{keys, ttl_after, txn, EtcdStore, MAX_STEPS};
use crate::store::{PermitHolder, PermitRequest, ReleaseOutcome, StoreResult};
use crate::store::{Release, Renewal};
use serde_json::json;

/// One entry of a semaphore as read.
struct Entry {
    kv: Kv,
    owner: String,
    permits: u32,
    token: Option<u64>,
}

/// A semaphore's live holders and queued requests (in queue order), and the revision read.
struct State {
    holders: Vec<Entry>,
    queue: Vec<Entry>,
    /// Keys whose lease this store counted out, still to delete.
    ended: Vec<Kv>,
    revision: i64,
}

impl EtcdStore {
    async fn read_semaphore(&self, name: &str) -> StoreResult<State> {
        let prefix = keys::semaphore_prefix(name);
        let reply = self
            .request(
                "/v3/kv/range",
                &json!({"key": super::b64(&prefix), "range_end": super::b64(&prefix_end(&prefix))}),
            )
            .await?;
        let mut state = State {
            holders: Vec::new(),
            queue: Vec::new(),
            ended: Vec::new(),
            revision: revision(&reply),
        };
        for kv in kvs(&reply) {
            let Some((_, holder, owner)) = semaphore_entry(&kv.key) else {
                continue;
            };
            let Some((permits, token)) = parse_permit_value(&kv.value) else {
                continue;
            };
            if self
                .held
                .ended_on(&kv.key, &Guard::Created(kv.create_revision), kv.lease)
            {
                state.ended.push(kv);
                continue;
            }
            let entry = Entry {
                kv,
                owner,
                permits,
                token,
            };
            if holder {
                state.holders.push(entry);
            } else {
                state.queue.push(entry);
            }
        }
        state.queue.sort_by_key(|e| e.kv.create_revision);
        Ok(state)
    }

    /// Attaches the entry `e` to `lease` if it is on another, keeping its creation (and for a
    /// holder its token), if nobody wrote it since. Returns whether it is on `lease` now.
    async fn keep_on(&self, e: &Entry, lease: i64, token: Option<u64>) -> StoreResult<bool> {
        if e.kv.lease == lease {
            return Ok(true);
        }
        let body = txn::txn(
            vec![txn::modified_at(&e.kv.key, e.kv.mod_revision)],
            vec![txn::put(&e.kv.key, &permit_value(e.permits, token), lease)],
            vec![],
        );
        Ok(succeeded(&self.txn(&body, Retry::Once).await?))
    }

    /// See [`LockStore::acquire_permits`](crate::store::LockStore::acquire_permits).
    pub(super) async fn acquire_permits(
        &self,
        req: &PermitRequest<'_>,
    ) -> StoreResult<Option<u64>> {
        let prefix = keys::semaphore_prefix(req.name);
        let end = prefix_end(&prefix);
        let hk = holder_key(req.name, req.owner);
        let qk = queued_key(req.name, req.owner);
        let deadline = self.deadline();
        for _ in 0..MAX_STEPS {
            let state = self.read_semaphore(req.name).await?;
            if let Some(mine) = state.holders.iter().find(|e| e.owner == req.owner) {
                // A request sent again after its reply was lost: its own token, renewed.
                let token = mine.token.unwrap_or(mine.kv.mod_revision as u64);
                let lease = self
                    .leases
                    .lease_for(&self.api, req.ttl_ms, deadline)
                    .await?;
                if !self.keep_on(mine, lease, Some(token)).await? {
                    continue;
                }
                self.held.hold(
                    &hk,
                    Guard::Created(mine.kv.create_revision),
                    ttl_after(req.ttl_ms),
                    lease,
                );
                return Ok(Some(token));
            }
            let taken: u64 = state.holders.iter().map(|e| u64::from(e.permits)).sum();
            let place = state.queue.iter().position(|e| e.owner == req.owner);
            let ahead: u64 = state.queue[..place.unwrap_or(state.queue.len())]
                .iter()
                .map(|e| u64::from(e.permits))
                .sum();
            if taken + ahead + u64::from(req.permits) <= u64::from(req.limit) {
                let lease = self
                    .leases
                    .lease_for(&self.api, req.ttl_ms, deadline)
                    .await?;
                let mut ops = vec![
                    txn::put(&hk, &permit_value(req.permits, None), lease),
                    txn::delete(&qk),
                ];
                ops.extend(state.ended.iter().map(|kv| txn::delete(&kv.key)));
                let body = txn::txn(
                    vec![txn::unchanged_since(&prefix, &end, state.revision)],
                    ops,
                    vec![],
                );
                let reply = match self.txn(&body, Retry::Once).await {
                    Err(e) if super::lease_not_found(&e) => {
                        self.leases.lapsed(lease).await;
                        continue;
                    }
                    r => r?,
                };
                if !succeeded(&reply) {
                    continue;
                }
                let token = revision(&reply);
                self.held.forget(&qk);
                for kv in &state.ended {
                    self.held
                        .forget_if(&kv.key, &Guard::Created(kv.create_revision));
                }
                self.held
                    .hold(&hk, Guard::Created(token), ttl_after(req.ttl_ms), lease);
                return Ok(Some(token as u64));
            }
            if req.queue_ttl_ms == 0 {
                return Ok(None);
            }
            let lease = self
                .leases
                .lease_for(&self.api, req.queue_ttl_ms, deadline)
                .await?;
            if let Some(at) = place {
                let e = &state.queue[at];
                if self.keep_on(e, lease, None).await? {
                    self.held.hold(
                        &qk,
                        Guard::Created(e.kv.create_revision),
                        ttl_after(req.queue_ttl_ms),
                        lease,
                    );
                }
                return Ok(None);
            }
            let body = txn::txn(
                vec![txn::absent(&qk)],
                vec![txn::put(&qk, &permit_value(req.permits, None), lease)],
                vec![],
            );
            let reply = self.txn(&body, Retry::Once).await?;
            if succeeded(&reply) {
                self.held.hold(
                    &qk,
                    Guard::Created(revision(&reply)),
                    ttl_after(req.queue_ttl_ms),
                    lease,
                );
            }
            return Ok(None);
        }
        Ok(None)
    }

    /// See [`LockStore::extend_permits`](crate::store::LockStore::extend_permits).
    pub(super) async fn extend_permits(
        &self,
        name: &str,
        renewal: Renewal<'_>,
    ) -> StoreResult<bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        let state = self.read_semaphore(name).await?;
        let Some(mine) = state.holders.iter().find(|e| e.owner == owner) else {
            return Ok(false);
        };
        let token = mine.token.unwrap_or(mine.kv.mod_revision as u64);
        let lease = self
            .leases
            .lease_for(&self.api, ttl_ms, self.deadline())
            .await?;
        if !self.keep_on(mine, lease, Some(token)).await? {
            return Ok(false);
        }
        self.held.hold(
            &mine.kv.key,
            Guard::Created(mine.kv.create_revision),
            ttl_after(ttl_ms),
            lease,
        );
        Ok(true)
    }

    /// See [`LockStore::release_permits`](crate::store::LockStore::release_permits): nobody
    /// is told (waiters watch the keys).
    pub(super) async fn release_permits(
        &self,
        name: &str,
        r: Release<'_>,
    ) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        let hk = holder_key(name, owner);
        let qk = queued_key(name, owner);
        let body = txn::txn(vec![], vec![txn::delete(&hk), txn::delete(&qk)], vec![]);
        let reply = self.txn(&body, Retry::Safe).await?;
        let gone = txn_response(&reply, 0, "response_delete_range")
            .and_then(|r| r.get("prev_kvs"))
            .and_then(|v| v.as_array())
            .and_then(|a| a.first())
            .map(Kv::parse);
        let released = gone.is_some_and(|kv| {
            let guard = Guard::Created(kv.create_revision);
            let ended = self.held.ended(&hk, &guard);
            !ended
        });
        self.held.forget(&hk);
        self.held.forget(&qk);
        Ok(ReleaseOutcome::unannounced(released))
    }

    /// See [`LockStore::permits`](crate::store::LockStore::permits).
    pub(super) async fn permits(&self, name: &str) -> StoreResult<Vec<PermitHolder>> {
        let state = self.read_semaphore(name).await?;
        let mut out = Vec::new();
        for e in state.holders {
            let remaining_ms = self
                .remaining_ms(&e.kv, &Guard::Created(e.kv.create_revision))
                .await?;
            if remaining_ms == 0 {
                continue;
            }
            out.push(PermitHolder {
                owner: e.owner,
                permits: e.permits,
                fencing_token: e.token.unwrap_or(e.kv.mod_revision as u64),
                remaining_ms,
            });
        }
        Ok(out)
    }
}
