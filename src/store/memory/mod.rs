//! The in-process store: no server, same semantics (leases, fencing, data), for tests, single
//! process deployments and as the embedded backend. Stores are named, so every client in a
//! process that connects to `memory://name` shares one store.

use crate::store::permits::PermitTable;
use crate::store::{Acquisition, Batch, Call, Handoff, Release, Renewal};
use crate::store::{
    ExtendItem, HeldLock, LockInfo, LockStore, NextOwner, OperatorTools, PermitHolder,
    PermitRequest, ReleaseOutcome,
};
use futures_util::future::{ready, BoxFuture};
use futures_util::FutureExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

struct Entry {
    owner: String,
    token: u64,
    expires: Instant,
    data: Option<Vec<u8>>,
}

#[derive(Default)]
struct State {
    held: HashMap<String, Entry>,
    /// Semaphores with holders or queued requests (an idle one is dropped: its tokens come
    /// from `fence`).
    semaphores: HashMap<String, PermitTable>,
    /// One fencing counter for the whole store: it only increases, so tokens strictly
    /// increase per name, and a name leaves nothing behind once released or expired.
    fence: u64,
    /// Insertions since expired entries were last swept out.
    since_sweep: usize,
}

impl State {
    fn next_token(&mut self) -> u64 {
        self.fence += 1;
        self.fence
    }

    /// Drops expired entries now and then (amortised O(1) per insertion), so names that
    /// expire and are never touched again do not accumulate.
    fn sweep(&mut self, now: Instant) {
        self.since_sweep += 1;
        if self.since_sweep >= self.held.len().max(64) {
            self.since_sweep = 0;
            self.held.retain(|_, e| e.expires > now);
        }
    }
}

/// Milliseconds on this store's clock (a monotonic clock from the first call).
fn clock_ms(now: Instant) -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    now.saturating_duration_since(origin).as_millis() as u64 + 1
}

/// `now + ttl`, saturating far in the future instead of overflowing.
fn expiry(now: Instant, ttl_ms: u64) -> Instant {
    crate::runtime::clock::after(now, Duration::from_millis(ttl_ms))
}

/// An in-process lock table with the same contract as the server-backed stores.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

fn registry() -> &'static Mutex<HashMap<String, Arc<MemoryStore>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<MemoryStore>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl MemoryStore {
    /// The process-wide store called `name`, created on first use.
    pub fn named(name: &str) -> Arc<MemoryStore> {
        registry()
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// See [`LockStore::try_acquire`].
    pub fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
    ) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        if let Some(entry) = state.held.get(key) {
            if entry.expires > now {
                return None;
            }
        }
        state.sweep(now);
        let token = state.next_token();
        state.held.insert(
            key.to_string(),
            Entry {
                owner: owner.to_string(),
                token,
                expires: expiry(now, ttl_ms),
                data: data.map(<[u8]>::to_vec),
            },
        );
        Some(token)
    }

    /// See [`LockStore::extend`].
    pub fn extend(&self, key: &str, owner: &str, ttl_ms: u64) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        match state.held.get_mut(key) {
            Some(entry) if entry.owner == owner && entry.expires > now => {
                entry.expires = expiry(now, ttl_ms);
                true
            }
            _ => false,
        }
    }

    /// See [`LockStore::release`].
    pub fn release(&self, key: &str, owner: &str) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        match state.held.get(key) {
            Some(entry) if entry.owner == owner => {
                let live = entry.expires > now;
                state.held.remove(key);
                live
            }
            Some(entry) if entry.expires <= now => {
                // Drop expired entries as we meet them so the table does not grow forever.
                state.held.remove(key);
                false
            }
            _ => false,
        }
    }

    /// See [`LockStore::handoff`].
    pub fn handoff(&self, key: &str, owner: &str, next: &NextOwner<'_>) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        match state.held.get(key) {
            Some(entry) if entry.owner == owner && entry.expires > now => {}
            _ => return None,
        }
        let token = state.next_token();
        state.held.insert(
            key.to_string(),
            Entry {
                owner: next.owner.to_string(),
                token,
                expires: expiry(now, next.ttl_ms),
                data: next.data.map(<[u8]>::to_vec),
            },
        );
        Some(token)
    }

    /// Runs `f` on semaphore `name`'s table, drawing tokens from the store's fence, and
    /// drops the table once idle.
    fn with_table<T>(&self, name: &str, f: impl FnOnce(&mut PermitTable, u64) -> T) -> T {
        let now = clock_ms(Instant::now());
        let mut state = self.state.lock().unwrap();
        let fence = state.fence;
        let table = state.semaphores.entry(name.to_string()).or_default();
        table.fence = fence;
        let out = f(table, now);
        let (fence, idle) = (table.fence, table.is_idle());
        if idle {
            state.semaphores.remove(name);
        }
        state.fence = fence;
        out
    }

    /// See [`LockStore::acquire_permits`].
    pub fn acquire_permits(&self, req: &PermitRequest<'_>) -> Option<u64> {
        self.with_table(req.name, |t, now| t.acquire(req, now))
    }

    /// See [`LockStore::extend_permits`].
    pub fn extend_permits(&self, name: &str, owner: &str, ttl_ms: u64) -> bool {
        self.with_table(name, |t, now| t.extend(owner, ttl_ms, now))
    }

    /// See [`LockStore::release_permits`].
    pub fn release_permits(&self, name: &str, owner: &str) -> bool {
        self.with_table(name, |t, now| t.release(owner, now))
    }

    /// See [`LockStore::permits`].
    pub fn permits(&self, name: &str) -> Vec<PermitHolder> {
        self.with_table(name, |t, now| {
            t.purge(now);
            t.live(now)
        })
    }

    /// [`MemoryStore::try_acquire`] as Redis answers it: an owner asking again for the lock it
    /// holds gets its own token, with the lease set anew from this request. For the engine's
    /// tests, whose stores wrap this one.
    #[cfg(test)]
    pub(crate) fn try_acquire_or_own(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
    ) -> Option<u64> {
        self.try_acquire(key, owner, ttl_ms, data).or_else(|| {
            self.inspect(key)
                .filter(|i| i.owner == owner && self.extend(key, owner, ttl_ms))
                .map(|i| i.fencing_token)
        })
    }

    /// See [`LockStore::inspect`].
    pub fn inspect(&self, key: &str) -> Option<LockInfo> {
        let now = Instant::now();
        let state = self.state.lock().unwrap();
        let entry = state.held.get(key).filter(|e| e.expires > now)?;
        Some(LockInfo {
            owner: entry.owner.clone(),
            fencing_token: entry.token,
            remaining_ms: (entry.expires - now).as_millis() as i64,
            data: entry.data.clone(),
        })
    }
}

/// The contract, over the synchronous methods above (nothing here waits).
impl LockStore for MemoryStore {
    fn try_acquire<'a>(&'a self, key: &'a str, acq: Acquisition<'a>) -> Call<'a, Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        ready(Ok(MemoryStore::try_acquire(self, key, owner, ttl_ms, data))).boxed()
    }

    fn extend<'a>(&'a self, key: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        ready(Ok(MemoryStore::extend(self, key, owner, ttl_ms))).boxed()
    }

    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        let out = items
            .iter()
            .map(|i| Ok(MemoryStore::extend(self, &i.key, &i.owner, i.ttl_ms)))
            .collect();
        ready(out).boxed()
    }

    fn release<'a>(&'a self, key: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let released = MemoryStore::release(self, key, r.owner);
        ready(Ok(ReleaseOutcome::unannounced(released))).boxed()
    }

    fn handoff<'a>(&'a self, key: &'a str, h: Handoff<'a>) -> Call<'a, Option<u64>> {
        let (owner, next) = (h.from, h.next);
        ready(Ok(MemoryStore::handoff(self, key, owner, next))).boxed()
    }

    fn inspect<'a>(&'a self, key: &'a str) -> Call<'a, Option<LockInfo>> {
        ready(Ok(MemoryStore::inspect(self, key))).boxed()
    }

    fn acquire_permits<'a>(&'a self, req: &'a PermitRequest<'a>) -> Call<'a, Option<u64>> {
        ready(Ok(MemoryStore::acquire_permits(self, req))).boxed()
    }

    fn extend_permits<'a>(&'a self, name: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        ready(Ok(MemoryStore::extend_permits(self, name, owner, ttl_ms))).boxed()
    }

    fn release_permits<'a>(&'a self, name: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        let released = MemoryStore::release_permits(self, name, r.owner);
        ready(Ok(ReleaseOutcome::unannounced(released))).boxed()
    }

    fn permits<'a>(&'a self, name: &'a str) -> Call<'a, Vec<PermitHolder>> {
        ready(Ok(MemoryStore::permits(self, name))).boxed()
    }

    fn ping(&self) -> Call<'_, ()> {
        ready(Ok(())).boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        ready(()).boxed()
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

impl OperatorTools for MemoryStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        let now = Instant::now();
        let live = self
            .state
            .lock()
            .unwrap()
            .held
            .remove(key)
            .is_some_and(|e| e.expires > now);
        ready(Ok(live)).boxed()
    }

    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        let keys: Vec<String> = {
            let state = self.state.lock().unwrap();
            state
                .held
                .keys()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect()
        };
        let out = keys
            .into_iter()
            .filter_map(|key| MemoryStore::inspect(self, &key).map(|info| HeldLock { key, info }))
            .take(limit)
            .collect();
        ready(Ok(out)).boxed()
    }
}

#[cfg(test)]
mod tests;
