//! What this store holds, with each grant's own lease in milliseconds: etcd's leases count
//! whole seconds and run a margin longer (`leases.rs`), so the end of one lock's lease is
//! kept here, and a timer deletes the lock's key when it passes without an extension (a
//! compare-and-delete on the holder and on the etcd lease this store put the key on, so it
//! never frees someone else's grant: not even one with the same owner, adopted by another
//! process, which moved the key onto its own lease).
//! Until the key is gone, `inspect` and `try_acquire` of this store already treat it as
//! free. A process that dies or loses etcd has no timer, and a timer's delete may fail: then
//! the key's etcd lease, which nothing keeps alive any more, ends it a little later (never
//! earlier: see `leases.rs`).
//!
//! A held key deleted by anyone else (an operator, a lease etcd revoked) is found here by the
//! watch (`watch.rs`, [`Held::deleted`]), which tells the engine at once.

use super::client::{Api, Kv, Retry};
use super::keys::LockValue;
use super::leases::Own;
use super::txn;
use crate::runtime::debug::debug;
use crate::store::StoreResult;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How a timer makes sure the key it deletes is still the grant it times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// The key's value is held by this owner (a lock).
    Owner(String),
    /// The key was created at this revision (a semaphore holder's or queued request's key,
    /// whose name is its owner).
    Created(i64),
}

impl Guard {
    /// The compares of a transaction that acts only on this grant of `key`.
    pub fn compares(&self, key: &[u8]) -> Vec<Value> {
        match self {
            Guard::Owner(owner) => txn::held_by(key, owner).to_vec(),
            Guard::Created(rev) => vec![txn::created_at(key, *rev)],
        }
    }

    /// [`Guard::compares`], and the key still on the etcd lease `lease` (where this store put
    /// it: a process that adopted the grant moved it onto its own).
    pub fn compares_on(&self, key: &[u8], lease: i64) -> Vec<Value> {
        let mut compares = self.compares(key);
        compares.push(txn::on_lease(key, lease));
        compares
    }
}

/// The own lease of an entry that has one.
fn own_of(e: &Entry) -> Option<Own> {
    e.own
}

#[derive(Debug)]
struct Entry {
    guard: Guard,
    deadline: Instant,
    /// The etcd lease this store put the key on: a key found on another lease is no longer
    /// this store's grant (another process adopted it), whatever its owner.
    lease: i64,
    /// The key's own lease (`lease`), if it has one.
    own: Option<Own>,
    /// The key's `create_revision`: which life of the key this grant is (0: unknown).
    created: i64,
}

/// The grants of this store and the ends of their leases.
pub struct Held {
    entries: Mutex<HashMap<Vec<u8>, Entry>>,
    api: Arc<Api>,
    call_timeout: Duration,
    closed: AtomicBool,
}

impl Held {
    /// An empty table whose timers delete through `api`, each delete within `call_timeout`.
    pub fn new(api: Arc<Api>, call_timeout: Duration) -> Held {
        Held {
            entries: Mutex::new(HashMap::new()),
            api,
            call_timeout,
            closed: AtomicBool::new(false),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `key` is held as `guard` says until `deadline` (a grant or an
    /// extension), on the shared etcd lease `lease`, and times it.
    pub fn hold(self: &Arc<Self>, key: &[u8], guard: Guard, deadline: Instant, lease: i64) {
        let created = match guard {
            Guard::Created(rev) => rev,
            Guard::Owner(_) => 0,
        };
        self.insert(
            key,
            Entry {
                guard,
                deadline,
                lease,
                own: None,
                created,
            },
        );
    }

    /// Records that `key`, created at revision `created`, is held as `guard` says until
    /// `deadline` (a grant or an extension), on its own etcd lease `own`, and times it.
    /// Returns the owner of the lock this grant replaces, if it was another owner's, of
    /// another life of the key, and its lease had not ended: that holder lost it.
    pub fn hold_own(
        self: &Arc<Self>,
        key: &[u8],
        guard: Guard,
        deadline: Instant,
        own: Own,
        created: i64,
    ) -> Option<String> {
        let owner = match &guard {
            Guard::Owner(owner) => Some(owner.clone()),
            Guard::Created(_) => None,
        };
        let replaced = self.insert(
            key,
            Entry {
                guard,
                deadline,
                lease: own.id,
                own: Some(own),
                created,
            },
        )?;
        // Another owner's lock, still held by its lease, that this grant of a new life of the
        // key replaces: someone else deleted it, and the watch has not told yet (a waiter of
        // this store polled first).
        match (replaced.guard, owner) {
            (Guard::Owner(old), Some(new))
                if old != new
                    && replaced.created != created
                    && replaced.deadline > Instant::now() =>
            {
                Some(old)
            }
            _ => None,
        }
    }

    /// Records `entry` for `key`, timing it unless it extends the same grant; returns the
    /// entry it replaced.
    fn insert(self: &Arc<Self>, key: &[u8], entry: Entry) -> Option<Entry> {
        let (fresh, replaced) = {
            let mut entries = self.entries();
            let fresh = entries.get(key).is_none_or(|e| e.guard != entry.guard);
            (fresh, entries.insert(key.to_vec(), entry))
        };
        if fresh {
            let me = self.clone();
            let key = key.to_vec();
            tokio::spawn(async move { me.time(key).await });
        }
        replaced
    }

    /// Forgets `key` (released, handed to an owner elsewhere, or found gone).
    pub fn forget(&self, key: &[u8]) {
        self.entries().remove(key);
    }

    /// Forgets `key` if it is held as `guard`; returns its own lease, if it had one, and the
    /// key's creation revision.
    pub fn forget_if(&self, key: &[u8], guard: &Guard) -> Option<(Option<Own>, i64)> {
        let mut entries = self.entries();
        if entries.get(key).is_some_and(|e| &e.guard == guard) {
            return entries.remove(key).map(|e| (own_of(&e), e.created));
        }
        None
    }

    /// The own lease of `key` held as `guard` whose lease has not ended, and the key's
    /// creation revision.
    pub fn own_lease(&self, key: &[u8], guard: &Guard) -> Option<(Own, i64)> {
        let entries = self.entries();
        let e = entries
            .get(key)
            .filter(|e| &e.guard == guard && e.deadline > Instant::now())?;
        own_of(e).map(|own| (own, e.created))
    }

    /// A deletion of `key` the watch saw, `prev` being what it deleted: if that was a grant
    /// this store holds (same holder, lease and life of the key), it is forgotten and its
    /// guard returned: its holder lost it. Deletions this store makes forget the grant first.
    pub fn deleted(&self, key: &[u8], prev: &Kv) -> Option<Guard> {
        let mut entries = self.entries();
        let e = entries.get(key)?;
        if e.lease != prev.lease || e.created == 0 || e.created != prev.create_revision {
            return None;
        }
        let theirs = match &e.guard {
            Guard::Owner(owner) => {
                LockValue::decode(&prev.value).is_some_and(|v| &v.owner == owner)
            }
            Guard::Created(rev) => *rev == prev.create_revision,
        };
        if !theirs {
            return None;
        }
        entries.remove(key).map(|e| e.guard)
    }

    /// The remaining lease of `key` held as `guard`, in ms (0 or less: its lease ended),
    /// if this store holds it.
    pub fn remaining_ms(&self, key: &[u8], guard: &Guard) -> Option<i64> {
        self.remaining_where(key, |e| &e.guard == guard)
    }

    /// The remaining lease of `key`'s entry if `matches` it, in ms (0 or less: ended), read
    /// under one lock.
    fn remaining_where(&self, key: &[u8], matches: impl Fn(&Entry) -> bool) -> Option<i64> {
        let entries = self.entries();
        let e = entries.get(key).filter(|e| matches(e))?;
        let now = Instant::now();
        Some(if e.deadline > now {
            (e.deadline - now).as_millis().min(i64::MAX as u128) as i64
        } else {
            0
        })
    }

    /// Whether `key` is held by this store as `guard` with its lease ended.
    pub fn ended(&self, key: &[u8], guard: &Guard) -> bool {
        self.remaining_ms(key, guard).is_some_and(|r| r <= 0)
    }

    /// [`Held::remaining_ms`] of a key read on the etcd lease `lease`: `None` when this store
    /// did not put it there (another process adopted it and moved it onto its own lease).
    pub fn remaining_on(&self, key: &[u8], guard: &Guard, lease: i64) -> Option<i64> {
        self.remaining_where(key, |e| &e.guard == guard && e.lease == lease)
    }

    /// [`Held::ended`] of a key read on the etcd lease `lease`.
    pub fn ended_on(&self, key: &[u8], guard: &Guard, lease: i64) -> bool {
        self.remaining_on(key, guard, lease).is_some_and(|r| r <= 0)
    }

    /// The etcd leases the grants held now are on.
    pub fn leases(&self) -> std::collections::HashSet<i64> {
        self.entries().values().map(|e| e.lease).collect()
    }

    /// Stops the timers.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.entries().clear();
    }

    /// Deletes the key once its lease ends, unless it was extended, released or handed on.
    async fn time(&self, key: Vec<u8>) {
        loop {
            let (deadline, guard, lease) = match self.entries().get(&key) {
                Some(e) => (e.deadline, e.guard.clone(), e.lease),
                None => return,
            };
            if Instant::now() < deadline {
                tokio::time::sleep_until(deadline).await;
                continue;
            }
            {
                let mut entries = self.entries();
                match entries.get(&key) {
                    Some(e)
                        if e.guard == guard && e.lease == lease && e.deadline <= Instant::now() =>
                    {
                        entries.remove(&key);
                    }
                    Some(_) => continue,
                    None => return,
                }
            }
            self.expire(&key, &guard, lease).await;
            return;
        }
    }

    /// Deletes `key` if it is still `guard`'s grant: a few tries, then the etcd lease is left
    /// to end it.
    async fn expire(&self, key: &[u8], guard: &Guard, lease: i64) {
        for attempt in 0..3u32 {
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            match self.delete(key, guard, lease).await {
                Ok(()) => return,
                Err(e) => {
                    debug!("etcd: deleting an expired grant failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
            }
        }
    }

    async fn delete(&self, key: &[u8], guard: &Guard, lease: i64) -> StoreResult<()> {
        let deadline = Instant::now() + self.call_timeout;
        let body = txn::txn(
            guard.compares_on(key, lease),
            vec![txn::delete(key)],
            vec![],
        );
        self.api
            .call("/v3/kv/txn", &body, deadline, Retry::Safe)
            .await
            .map(|_| ())
    }
}
