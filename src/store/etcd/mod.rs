//! etcd store (`etcd://host:2379[,host:2379…]`, `etcds://` for TLS), on etcd's v3 API through
//! its JSON gateway (`client.rs`). etcd is a consensus store: a grant is acknowledged only
//! once a majority of the members wrote it, so it survives the loss of any minority, its
//! leader included. See docs/design.md ("etcd layout").
//!
//! - A lock is the key `deadbolt/l/<name>` (`keys.rs`), created by a transaction only if it
//!   does not exist and attached to an etcd lease of its own (`leases.rs`), which only its
//!   holder's acquisition and extensions keep alive (a released lock's lease is used again).
//!   Release, extension and handoff are one transaction each, conditioned on the holder (the
//!   value's owner).
//! - The fencing token is an etcd revision: the revision of the transaction that granted the
//!   lock (the key's `mod_revision`), which only grows across the whole cluster, with no
//!   counter of ours. A holder's key written again for a move to another lease keeps its
//!   token in the value.
//! - Each grant's lease in milliseconds is kept by this store (`held.rs`), whose timer deletes
//!   a lock that was not extended in time; etcd's lease (whole seconds, a margin more) frees
//!   the locks of a process that died or lost etcd, and any key nobody extends.
//! - Waiters in other processes are woken by a watch on the store's keys (`watch.rs`), which
//!   also tells this process's holders at once of a held key deleted by anyone else.
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
    Acquisition, ExtendItem, Handoff, LockInfo, LockStore, OperatorTools, Release,
    ReleaseNotifications, ReleaseOutcome, Renewal, StoreError, StoreResult,
};
use client::{b64, int, kvs, revision, succeeded, txn_response, Api, Kv, Retry};
use futures_util::FutureExt;
use held::{Guard, Held};
use keys::{lock_key, LockValue};
use leases::{lease_secs, Leases, Own};
use serde_json::json;
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
        let held = Arc::new(Held::new(api.clone(), call_timeout));
        Ok(EtcdStore {
            id: uuid::Uuid::new_v4().simple().to_string(),
            watches: Watches::new(api.clone(), call_timeout, held.clone()),
            held,
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

    /// Records that this store holds `k` as `guard` for `ttl_ms` from now, on its own lease
    /// `own`, the key created at revision `created`; its deletion by anyone else is watched.
    /// A grant of this store whose key it grants anew to another owner is lost now, whether
    /// or not the watch told of its deletion yet.
    fn hold(&self, k: &[u8], guard: Guard, ttl_ms: u64, own: Own, created: i64) {
        let replaced = self
            .held
            .hold_own(k, guard, ttl_after(ttl_ms), own, created);
        if let Some(owner) = replaced {
            self.watches.replaced(k, owner);
        }
        self.watches.start();
    }

    /// Deletes `k` if it is still the grant `guard` on the etcd lease `lease` (an ended lease
    /// this store holds).
    async fn delete_ended(&self, k: &[u8], guard: &Guard, lease: i64) -> StoreResult<()> {
        self.held.forget_if(k, guard);
        let body = txn::txn(guard.compares_on(k, lease), vec![txn::delete(k)], vec![]);
        self.txn(&body, Retry::Safe).await.map(|_| ())
    }

    /// See [`LockStore::try_acquire`]. The token is the grant's revision, which costs
    /// nothing: every format gets one.
    async fn try_acquire(&self, key: &str, acq: Acquisition<'_>) -> StoreResult<Option<u64>> {
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
            // A lease of the grant's own: nothing else keeps it alive (`leases.rs`).
            let own = self.leases.take(&self.api, ttl_ms, deadline).await?;
            // Refused, it reads the holder and marks the lock (once per store) so that its
            // release says other processes wait; the mark ends with this lease at the latest.
            let mark = keys::mark_key(key, &self.id);
            let body = txn::txn(
                vec![txn::absent(&k)],
                vec![txn::put(&k, &value.encode(), own.id)],
                vec![
                    txn::range(&k),
                    txn::nested(vec![txn::absent(&mark)], vec![txn::put(&mark, b"", own.id)]),
                ],
            );
            // An error leaves the lease unused or carrying a grant nobody times: it is never
            // used again, and ends with its TTL.
            let reply = match self.txn(&body, Retry::Once).await {
                Err(e) if lease_not_found(&e) => continue,
                r => r?,
            };
            if succeeded(&reply) {
                let token = revision(&reply);
                self.hold(&k, guard, ttl_ms, own, token);
                return Ok(Some(token as u64));
            }
            let marked = txn_response(&reply, 1, "response_txn")
                .and_then(|r| r.get("succeeded"))
                .and_then(serde_json::Value::as_bool)
                == Some(true);
            let kv = Self::read_back(&reply, 0);
            let current = kv.as_ref().and_then(|kv| LockValue::decode(&kv.value));
            if let (Some(kv), Some(current)) = (&kv, &current) {
                if current.owner == owner {
                    // Our own grant (a request sent again after its reply was lost): ours
                    // again, moved onto a lease of its own that this call made sure of (the
                    // lost request's lease is never kept alive).
                    let own = match marked {
                        true => {
                            self.leases.carries_mark(own);
                            self.leases.take(&self.api, ttl_ms, deadline).await?
                        }
                        false => own,
                    };
                    if let Some(t) = self.move_to(kv, current, own.id).await? {
                        self.hold(&k, guard, ttl_ms, own, kv.create_revision);
                        return Ok(Some(t));
                    }
                    continue;
                }
            }
            // Unused (unless it carries the mark): for the next acquisition.
            if marked {
                self.leases.carries_mark(own);
            } else {
                self.leases.give_back(own);
            }
            let Some(kv) = kv else {
                continue; // deleted in between
            };
            let Some(current) = current else {
                return Ok(None); // a value deadbolt did not write: held
            };
            let theirs = Guard::Owner(current.owner.clone());
            if self.held.ended_on(&k, &theirs, kv.lease) {
                self.delete_ended(&k, &theirs, kv.lease).await?;
                continue;
            }
            return Ok(None);
        }
        Ok(None)
    }

    /// See [`LockStore::extend`]. A lock this store holds: its own lease kept alive (when it
    /// would not outlive the new lease) and its key checked, at once.
    async fn extend(&self, key: &str, renewal: Renewal<'_>) -> StoreResult<bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        let k = lock_key(key);
        let guard = Guard::Owner(owner.to_owned());
        if self.held.ended(&k, &guard) {
            return Ok(false);
        }
        let deadline = self.deadline();
        let own = self.own_lease_for(&k, &guard, ttl_ms);
        let check = txn::txn(vec![], vec![txn::range(&k)], vec![]);
        let kept = async {
            match own {
                Some(own) => self.leases.ensure(&self.api, own, ttl_ms, deadline).await,
                None => Ok(None),
            }
        };
        let (kept, reply) = futures_util::future::join(kept, self.txn(&check, Retry::Safe)).await;
        let (kept, reply) = (kept?, reply?);
        if own.is_some() && kept.is_none() {
            // Its lease is gone, and the key with it.
            self.held.forget_if(&k, &guard);
            return Ok(false);
        }
        let kv = Self::read_back(&reply, 0);
        self.settle_extension(&k, owner, kv, kept, ttl_ms).await
    }

    /// The own lease of `k` held as `guard` here, if it is long enough for a lease of
    /// `ttl_ms` (one granted for a shorter lock is not).
    fn own_lease_for(&self, k: &[u8], guard: &Guard, ttl_ms: u64) -> Option<Own> {
        self.held
            .own_lease(k, guard)
            .map(|(own, _)| own)
            .filter(|own| own.secs >= lease_secs(ttl_ms))
    }

    /// An extension that read the key `kv`, `own` being its own lease alive for the new
    /// lease (`None`: this store has none for it): extended if it is `owner`'s on `own`;
    /// moved onto a lease of this store's own if it is `owner`'s elsewhere (adopted from
    /// another process, or a lease too short for the new length); otherwise not owned.
    async fn settle_extension(
        &self,
        k: &[u8],
        owner: &str,
        kv: Option<Kv>,
        own: Option<Own>,
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
        if let Some(own) = own.filter(|own| own.id == kv.lease) {
            self.hold(k, guard, ttl_ms, own, kv.create_revision);
            return Ok(true);
        }
        let target = match own {
            Some(own) => own,
            None => self.leases.take(&self.api, ttl_ms, self.deadline()).await?,
        };
        let moved = self.move_to(&kv, &value, target.id).await?.is_some();
        if moved {
            // The lease it was on carries nothing of ours any more: it lapses.
            self.hold(k, guard, ttl_ms, target, kv.create_revision);
        } else {
            self.held.forget_if(k, &guard);
            if own.is_none() {
                self.leases.give_back(target);
            }
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

    /// Extends up to [`MAX_TXN_OPS`] locks: one request keeping alive every lease among them
    /// that needs it, and one transaction reading every key, at once.
    async fn extend_chunk(&self, items: &[ExtendItem]) -> StoreResult<Vec<StoreResult<bool>>> {
        let deadline = self.deadline();
        let keys: Vec<Vec<u8>> = items.iter().map(|i| lock_key(&i.key)).collect();
        let owns: Vec<Option<Own>> = items
            .iter()
            .zip(&keys)
            .map(|(i, k)| self.own_lease_for(k, &Guard::Owner(i.owner.clone()), i.ttl_ms))
            .collect();
        let now = Instant::now();
        let mut due: Vec<i64> = items
            .iter()
            .zip(&owns)
            .filter_map(|(i, own)| {
                own.filter(|o| o.good_until < now + Duration::from_millis(i.ttl_ms))
                    .map(|o| o.id)
            })
            .collect();
        due.sort_unstable();
        due.dedup();
        let body = txn::txn(vec![], keys.iter().map(|k| txn::range(k)).collect(), vec![]);
        let (kept, reply) = futures_util::future::join(
            leases::keep_alive(&self.api, &due, deadline),
            self.txn(&body, Retry::Safe),
        )
        .await;
        let (kept, reply) = (kept?, reply?);
        let mut out = Vec::with_capacity(items.len());
        for (n, ((item, k), own)) in items.iter().zip(&keys).zip(owns).enumerate() {
            let guard = Guard::Owner(item.owner.clone());
            if self.held.ended(k, &guard) {
                out.push(Ok(false));
                continue;
            }
            let own = match own.map(|o| (o, kept.get(&o.id))) {
                Some((o, Some(Some(good_until)))) => Some(Own {
                    good_until: *good_until,
                    ..o
                }),
                Some((_, Some(None))) => {
                    // Its lease is gone, and the key with it.
                    self.held.forget_if(k, &guard);
                    out.push(Ok(false));
                    continue;
                }
                Some((o, None)) => Some(o),
                None => None,
            };
            let kv = Self::read_back(&reply, n);
            out.push(
                self.settle_extension(k, &item.owner, kv, own, item.ttl_ms)
                    .await,
            );
        }
        Ok(out)
    }

    /// Releases `key` if `owner` holds it, clearing the waiters' marks. Returns whether it
    /// did, and whether another store had marked it. The deletion is the announcement: every
    /// watching process sees it.
    async fn release(&self, key: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        let k = lock_key(key);
        let guard = Guard::Owner(owner.to_owned());
        let ended = self.held.ended(&k, &guard);
        // Forgotten first: the watch must not take this deletion for a loss.
        let forgotten = self.held.forget_if(&k, &guard);
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
        if succeeded(&reply) {
            // Its lease carries nothing any more: for the next acquisition.
            if let Some((Some(own), _)) = forgotten {
                self.leases.give_back(own);
            }
        }
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
    async fn handoff(&self, key: &str, h: Handoff<'_>) -> StoreResult<Option<u64>> {
        let (owner, next) = (h.from, h.next);
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
        // The key keeps its own lease when it is long enough for the next owner's.
        let current = self.own_lease_for(&k, &guard, next.ttl_ms);
        for step in 0..MAX_STEPS {
            let kept = match current.filter(|_| step == 0) {
                Some(own) => {
                    self.leases
                        .ensure(&self.api, own, next.ttl_ms, deadline)
                        .await?
                }
                None => None,
            };
            let own = match kept {
                Some(own) => own,
                None => self.leases.take(&self.api, next.ttl_ms, deadline).await?,
            };
            let body = txn::txn(
                txn::held_by(&k, owner).to_vec(),
                vec![txn::put_prev(&k, &value.encode(), own.id)],
                vec![],
            );
            let reply = match self.txn(&body, Retry::Once).await {
                Err(e) if lease_not_found(&e) => continue,
                r => r?,
            };
            let before = self.held.forget_if(&k, &guard);
            if !succeeded(&reply) {
                if kept.is_none() {
                    self.leases.give_back(own);
                }
                return Ok(None);
            }
            if kept.is_none() {
                // The lease it was on carries nothing any more.
                if let Some((Some(old), _)) = before {
                    self.leases.give_back(old);
                }
            }
            let created = txn_response(&reply, 0, "response_put")
                .and_then(|r| r.get("prev_kv"))
                .map(|kv| Kv::parse(kv).create_revision)
                .unwrap_or(0);
            self.hold(
                &k,
                Guard::Owner(next.owner.to_owned()),
                next.ttl_ms,
                own,
                created,
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
        try_acquire,
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
