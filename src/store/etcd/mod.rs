//! etcd store (`etcd://host:2379[,host:2379…]`, `etcds://` for TLS), on etcd's v3 API through
//! its JSON gateway (`client.rs`). etcd is a consensus store: a grant is acknowledged only
//! once a majority of the members wrote it, so it survives the loss of any minority, its
//! leader included. See docs/design.md ("etcd layout").
//!
//! - A lock is the key `deadbolt/l/<name>` (`keys.rs`), created by a transaction only if it
//!   does not exist and attached to an etcd lease of this store (`leases.rs`: one per lease
//!   length, kept alive by the acquisitions and heartbeats that need it). Release, extension
//!   and handoff are one transaction each, conditioned on the holder (the value's owner).
//! - The fencing token is an etcd revision: the revision of the transaction that granted the
//!   lock (the key's `mod_revision`), which only grows across the whole cluster, with no
//!   counter of ours. A holder's key written again for a move to another lease keeps its
//!   token in the value.
//! - Each grant's lease in milliseconds is kept by this store (`held.rs`), whose timer deletes
//!   a lock that was not extended in time; etcd's lease (whole seconds, a margin more) frees
//!   the locks of a process that died or lost etcd.
//! - Waiters in other processes are woken by a watch on the store's keys (`watch.rs`).
//! - Semaphores keep a key per holder and per queued request (`permits.rs`).

mod client;
mod config;
mod errors;
mod held;
mod keys;
mod leases;
mod operator;
mod permits;
mod tls;
mod txn;
mod watch;

pub use config::DEFAULT_PORT;

use crate::store::delegate::delegate;
use crate::store::tls::TlsOptions;
use crate::store::Call;
use crate::store::{
    Acquisition, ExtendItem, LockInfo, LockStore, NextOwner, OperatorTools, ReleaseNotifications,
    ReleaseOutcome, StoreError, StoreResult,
};
use client::{b64, int, kvs, revision, succeeded, txn_response, Api, Kv, Retry};
use futures_util::FutureExt;
use held::{Guard, Held};
use keys::{lock_key, LockValue};
use leases::Leases;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use watch::Watches;

/// Most operations in one etcd transaction (etcd's `--max-txn-ops` default).
const MAX_TXN_OPS: usize = 128;

/// Most tries of one acquisition: each failed compare means another client acted in
/// between (or a lease lapsed), and the caller's next poll looks again.
const MAX_STEPS: usize = 3;

/// Options for the etcd store.
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    /// Bound on opening a connection, in ms.
    pub connect_timeout_ms: u64,
    /// Bound on an answer, in ms; a call is bounded by the sum of the two.
    pub response_timeout_ms: u64,
    /// TLS settings (`etcds://`).
    pub tls: Option<TlsOptions>,
}

/// A lock store on an etcd cluster.
pub struct EtcdStore {
    /// This store's name in the waiters' marks.
    id: String,
    api: Arc<Api>,
    leases: Leases,
    held: Arc<Held>,
    watches: Watches,
    call_timeout: Duration,
    closed: AtomicBool,
}

crate::store::redact::debug_fields!(EtcdStore: api);

/// Whether etcd refused a request because its lease does not exist (any more).
fn lease_not_found(e: &StoreError) -> bool {
    e.message.contains("lease not found")
}

impl EtcdStore {
    /// Checks the URL and the options. No I/O: the first call connects.
    pub fn connect(url: &str, opts: EtcdOptions) -> StoreResult<EtcdStore> {
        let invalid = |e: String| StoreError::invalid(format!("etcd: {e}"));
        let location = config::Location::parse(url).map_err(invalid)?;
        let tls = match (&opts.tls, location.tls) {
            (Some(t), true) => Some(t.clone()),
            (None, true) => Some(TlsOptions::default()),
            (Some(_), false) => {
                return Err(invalid(
                    "options.tls needs an etcds:// URL (etcd:// is plain HTTP)".into(),
                ))
            }
            (None, false) => None,
        };
        let connect_timeout = Duration::from_millis(opts.connect_timeout_ms.max(1));
        let http =
            tls::http_client(tls.as_ref(), &location.hosts, connect_timeout).map_err(invalid)?;
        let api = Arc::new(Api::new(
            http,
            location.endpoints,
            location.credentials,
            Duration::from_millis(opts.response_timeout_ms.max(1)),
        ));
        let call_timeout = Duration::from_millis(
            opts.connect_timeout_ms
                .saturating_add(opts.response_timeout_ms)
                .max(1),
        );
        Ok(EtcdStore {
            id: uuid::Uuid::new_v4().simple().to_string(),
            held: Arc::new(Held::new(api.clone(), call_timeout)),
            watches: Watches::new(api.clone(), call_timeout),
            leases: Leases::default(),
            api,
            call_timeout,
            closed: AtomicBool::new(false),
        })
    }

    /// The deadline of a call starting now.
    fn deadline(&self) -> Instant {
        crate::runtime::clock::after(Instant::now(), self.call_timeout)
    }

    /// A request to `path` that may be sent again (a read, or a write whose repeat does no
    /// harm), bounded by the call timeout.
    async fn request(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> StoreResult<serde_json::Value> {
        self.api
            .call(path, body, self.deadline(), Retry::Safe)
            .await
    }

    async fn txn(&self, body: &serde_json::Value, retry: Retry) -> StoreResult<serde_json::Value> {
        self.api
            .call("/v3/kv/txn", body, self.deadline(), retry)
            .await
    }

    /// The lock at `k` as a transaction's failure branch read it.
    fn read_back(reply: &serde_json::Value, n: usize) -> Option<Kv> {
        txn_response(reply, n, "response_range")
            .map(kvs)
            .and_then(|v| v.into_iter().next())
    }

    /// Writes the lock `kv` (held by `value.owner`) again, attached to `lease`, keeping its
    /// token, if nobody wrote it since. Returns the token.
    async fn move_to(&self, kv: &Kv, value: &LockValue, lease: i64) -> StoreResult<Option<u64>> {
        let token = value.token_at(kv.mod_revision);
        let moved = LockValue {
            token: Some(token),
            ..value.clone()
        };
        let body = txn::txn(
            vec![txn::modified_at(&kv.key, kv.mod_revision)],
            vec![txn::put(&kv.key, &moved.encode(), lease)],
            vec![],
        );
        let reply = self.txn(&body, Retry::Once).await?;
        Ok(succeeded(&reply).then_some(token))
    }

    /// Deletes `k` if it is still the grant `guard` on the etcd lease `lease` (an ended lease
    /// this store holds).
    async fn delete_ended(&self, k: &[u8], guard: &Guard, lease: i64) -> StoreResult<()> {
        self.held.forget_if(k, guard);
        let body = txn::txn(guard.compares_on(k, lease), vec![txn::delete(k)], vec![]);
        self.txn(&body, Retry::Safe).await.map(|_| ())
    }

    /// See [`LockStore::try_acquire_with`]. The token is the grant's revision, which costs
    /// nothing: every format gets one.
    async fn try_acquire_with(&self, key: &str, acq: Acquisition<'_>) -> StoreResult<Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        let k = lock_key(key);
        let deadline = self.deadline();
        let value = LockValue {
            owner: owner.to_owned(),
            token: None,
            data: data.map(<[u8]>::to_vec),
        };
        let guard = Guard::Owner(owner.to_owned());
        for _ in 0..MAX_STEPS {
            let lease = self.leases.lease_for(&self.api, ttl_ms, deadline).await?;
            // Refused, it reads the holder and marks the lock (once per store) so that its
            // release says other processes wait.
            let mark = keys::mark_key(key, &self.id);
            let body = txn::txn(
                vec![txn::absent(&k)],
                vec![txn::put(&k, &value.encode(), lease)],
                vec![
                    txn::range(&k),
                    txn::nested(vec![txn::absent(&mark)], vec![txn::put(&mark, b"", lease)]),
                ],
            );
            let reply = match self.txn(&body, Retry::Once).await {
                Err(e) if lease_not_found(&e) => {
                    self.leases.lapsed(lease).await;
                    continue;
                }
                r => r?,
            };
            if succeeded(&reply) {
                let token = revision(&reply) as u64;
                self.held.hold(&k, guard, ttl_after(ttl_ms), lease);
                return Ok(Some(token));
            }
            let Some(kv) = Self::read_back(&reply, 0) else {
                continue; // deleted in between
            };
            let Some(current) = LockValue::decode(&kv.value) else {
                return Ok(None); // a value deadbolt did not write: held
            };
            let theirs = Guard::Owner(current.owner.clone());
            if current.owner == owner {
                // Our own grant (a request sent again after its reply was lost): ours again,
                // on the lease this call made sure of.
                let token = if kv.lease == lease {
                    Some(current.token_at(kv.mod_revision))
                } else {
                    self.move_to(&kv, &current, lease).await?
                };
                if let Some(t) = token {
                    self.held.hold(&k, guard, ttl_after(ttl_ms), lease);
                    return Ok(Some(t));
                }
                continue;
            }
            if self.held.ended_on(&k, &theirs, kv.lease) {
                self.delete_ended(&k, &theirs, kv.lease).await?;
                continue;
            }
            return Ok(None);
        }
        Ok(None)
    }

    /// See [`LockStore::extend`].
    async fn extend(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        _has_data: bool,
    ) -> StoreResult<bool> {
        let k = lock_key(key);
        let guard = Guard::Owner(owner.to_owned());
        if self.held.ended(&k, &guard) {
            return Ok(false);
        }
        let lease = self
            .leases
            .lease_for(&self.api, ttl_ms, self.deadline())
            .await?;
        let mut compare = txn::held_by(&k, owner).to_vec();
        compare.push(txn::on_lease(&k, lease));
        let body = txn::txn(compare, vec![], vec![txn::range(&k)]);
        let reply = self.txn(&body, Retry::Safe).await?;
        if succeeded(&reply) {
            self.held.hold(&k, guard, ttl_after(ttl_ms), lease);
            return Ok(true);
        }
        let kv = Self::read_back(&reply, 0);
        self.settle_extension(&k, owner, kv, lease, ttl_ms).await
    }

    /// An extension whose key was not found on `lease` as `owner`'s: moved there if it is
    /// `owner`'s on another lease, otherwise not owned.
    async fn settle_extension(
        &self,
        k: &[u8],
        owner: &str,
        kv: Option<Kv>,
        lease: i64,
        ttl_ms: u64,
    ) -> StoreResult<bool> {
        let guard = Guard::Owner(owner.to_owned());
        let mine = kv.and_then(|kv| {
            LockValue::decode(&kv.value)
                .filter(|v| v.owner == owner)
                .map(|v| (kv, v))
        });
        let Some((kv, value)) = mine else {
            self.held.forget_if(k, &guard);
            return Ok(false);
        };
        if kv.lease == lease {
            self.held.hold(k, guard, ttl_after(ttl_ms), lease);
            return Ok(true);
        }
        let moved = self.move_to(&kv, &value, lease).await?.is_some();
        if moved {
            self.held.hold(k, guard, ttl_after(ttl_ms), lease);
        } else {
            self.held.forget_if(k, &guard);
        }
        Ok(moved)
    }

    /// See [`LockStore::extend_many`].
    async fn extend_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_TXN_OPS) {
            match self.extend_chunk(chunk).await {
                Ok(results) => out.extend(results),
                Err(e) => out.extend(chunk.iter().map(|_| Err(e.clone()))),
            }
        }
        out
    }

    /// Extends up to [`MAX_TXN_OPS`] locks: one keep-alive per lease length that needs one,
    /// and one read of every key, in one transaction.
    async fn extend_chunk(&self, items: &[ExtendItem]) -> StoreResult<Vec<StoreResult<bool>>> {
        let deadline = self.deadline();
        let mut leases: HashMap<u64, i64> = HashMap::new();
        for i in items {
            if let std::collections::hash_map::Entry::Vacant(e) = leases.entry(i.ttl_ms) {
                e.insert(self.leases.lease_for(&self.api, i.ttl_ms, deadline).await?);
            }
        }
        let keys: Vec<Vec<u8>> = items.iter().map(|i| lock_key(&i.key)).collect();
        let body = txn::txn(vec![], keys.iter().map(|k| txn::range(k)).collect(), vec![]);
        let reply = self.txn(&body, Retry::Safe).await?;
        let mut out = Vec::with_capacity(items.len());
        for (n, (item, k)) in items.iter().zip(&keys).enumerate() {
            if self.held.ended(k, &Guard::Owner(item.owner.clone())) {
                out.push(Ok(false));
                continue;
            }
            let kv = Self::read_back(&reply, n);
            let lease = leases[&item.ttl_ms];
            out.push(
                self.settle_extension(k, &item.owner, kv, lease, item.ttl_ms)
                    .await,
            );
        }
        Ok(out)
    }

    /// Releases `key` if `owner` holds it, clearing the waiters' marks. Returns whether it
    /// did, and whether another store had marked it. The deletion is the announcement: every
    /// watching process sees it.
    async fn release(&self, key: &str, owner: &str) -> StoreResult<ReleaseOutcome> {
        let k = lock_key(key);
        let guard = Guard::Owner(owner.to_owned());
        let ended = self.held.ended(&k, &guard);
        let marks = keys::marks_prefix(key);
        let body = txn::txn(
            txn::held_by(&k, owner).to_vec(),
            vec![
                txn::delete(&k),
                txn::delete_range(&marks, &client::prefix_end(&marks)),
            ],
            vec![],
        );
        let reply = self.txn(&body, Retry::Safe).await?;
        self.held.forget_if(&k, &guard);
        let mine = keys::mark_key(key, &self.id);
        let others_waiting = txn_response(&reply, 1, "response_delete_range")
            .and_then(|r| r.get("prev_kvs"))
            .and_then(serde_json::Value::as_array)
            .is_some_and(|kvs| kvs.iter().any(|kv| Kv::parse(kv).key != mine));
        Ok(ReleaseOutcome {
            released: succeeded(&reply) && !ended,
            others_waiting,
        })
    }

    /// See [`LockStore::handoff`].
    async fn handoff(
        &self,
        key: &str,
        owner: &str,
        next: &NextOwner<'_>,
    ) -> StoreResult<Option<u64>> {
        let k = lock_key(key);
        let guard = Guard::Owner(owner.to_owned());
        if self.held.ended(&k, &guard) {
            return Ok(None);
        }
        let value = LockValue {
            owner: next.owner.to_owned(),
            token: None,
            data: next.data.map(<[u8]>::to_vec),
        };
        let deadline = self.deadline();
        for _ in 0..MAX_STEPS {
            let lease = self
                .leases
                .lease_for(&self.api, next.ttl_ms, deadline)
                .await?;
            let body = txn::txn(
                txn::held_by(&k, owner).to_vec(),
                vec![txn::put(&k, &value.encode(), lease)],
                vec![],
            );
            let reply = match self.txn(&body, Retry::Once).await {
                Err(e) if lease_not_found(&e) => {
                    self.leases.lapsed(lease).await;
                    continue;
                }
                r => r?,
            };
            self.held.forget_if(&k, &guard);
            if !succeeded(&reply) {
                return Ok(None);
            }
            self.held.hold(
                &k,
                Guard::Owner(next.owner.to_owned()),
                ttl_after(next.ttl_ms),
                lease,
            );
            return Ok(Some(revision(&reply) as u64));
        }
        Ok(None)
    }

    /// The remaining lease of `kv` held as `guard`: this store's count if it holds it,
    /// otherwise the etcd lease's (an upper bound: the holder's own lease may end sooner).
    async fn remaining_ms(&self, kv: &Kv, guard: &Guard) -> StoreResult<i64> {
        if let Some(r) = self.held.remaining_ms(&kv.key, guard) {
            return Ok(r);
        }
        if kv.lease == 0 {
            return Ok(-1);
        }
        let reply = self
            .request("/v3/lease/timetolive", &json!({"ID": kv.lease.to_string()}))
            .await?;
        Ok(int(reply.get("TTL")).max(0).saturating_mul(1000))
    }

    /// What a listing or `inspect` shows of the lock `kv`; `None` if its lease ended.
    async fn info(&self, kv: &Kv) -> StoreResult<Option<LockInfo>> {
        let value = LockValue::decode(&kv.value).unwrap_or_else(|| LockValue {
            owner: String::from_utf8_lossy(&kv.value).into_owned(),
            token: None,
            data: None,
        });
        let remaining_ms = self
            .remaining_ms(kv, &Guard::Owner(value.owner.clone()))
            .await?;
        if remaining_ms == 0 {
            return Ok(None);
        }
        Ok(Some(LockInfo {
            fencing_token: value.token_at(kv.mod_revision),
            owner: value.owner,
            remaining_ms,
            data: value.data,
        }))
    }

    /// See [`LockStore::inspect`].
    async fn inspect(&self, key: &str) -> StoreResult<Option<LockInfo>> {
        let k = lock_key(key);
        let reply = self
            .request("/v3/kv/range", &json!({"key": b64(&k)}))
            .await?;
        match kvs(&reply).first() {
            Some(kv) => self.info(kv).await,
            None => Ok(None),
        }
    }

    /// See [`LockStore::close`].
    async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Grants still held at close were left on purpose (a lock its holder stopped extending,
        // which another process may adopt): their leases are kept, so etcd ends them (at the
        // lease's end, a margin later) unless an adopter moved them onto its own. The other
        // leases carry only what this store no longer needs (waiters' marks, queued places):
        // freed now rather than when they end.
        let kept = self.held.leases();
        self.held.close();
        self.watches.close();
        let deadline = self.deadline();
        let ids = self.leases.ids().await;
        let revokes = ids
            .iter()
            .filter(|id| !kept.contains(id))
            .map(|id| async move {
                let body = json!({"ID": id.to_string()});
                self.api
                    .call("/v3/lease/revoke", &body, deadline, Retry::Safe)
                    .await
            });
        let _ =
            tokio::time::timeout(self.call_timeout, futures_util::future::join_all(revokes)).await;
    }
}

/// The end of a lease of `ttl_ms` granted or extended by a reply that just came: what this
/// store's timer waits for (later than the holder's own deadline, reckoned from the send).
fn ttl_after(ttl_ms: u64) -> Instant {
    crate::runtime::clock::after(Instant::now(), Duration::from_millis(ttl_ms))
}

/// The contract (the registry bounds every call: `store/bounded.rs`).
impl LockStore for EtcdStore {
    delegate!(
        try_acquire_with,
        extend,
        extend_many,
        release,
        handoff,
        inspect,
        close,
        acquire_permits,
        extend_permits,
        release_permits,
        permits,
    );

    fn ping(&self) -> Call<'_, ()> {
        async {
            self.request("/v3/maintenance/status", &json!({}))
                .await
                .map(|_| ())
        }
        .boxed()
    }

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(&self.watches)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
