//! The in-process store: no server, same semantics (leases, fencing, data), for tests, single
//! process deployments and as the embedded backend. Stores are named, so every client in a
//! process that connects to `memory://name` shares one store.

use super::LockInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Entry {
    owner: String,
    expires: Instant,
    data: Option<Vec<u8>>,
}

#[derive(Default)]
struct State {
    held: HashMap<String, Entry>,
    /// Fencing counters survive release, like the Redis side key and the MySQL column.
    fences: HashMap<String, u64>,
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

    /// See [`super::Store::try_acquire`].
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
        let token = {
            let fence = state.fences.entry(key.to_string()).or_insert(0);
            *fence += 1;
            *fence
        };
        state.held.insert(
            key.to_string(),
            Entry {
                owner: owner.to_string(),
                expires: now + Duration::from_millis(ttl_ms),
                data: data.map(<[u8]>::to_vec),
            },
        );
        Some(token)
    }

    /// See [`super::Store::extend`].
    pub fn extend(&self, key: &str, owner: &str, ttl_ms: u64) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        match state.held.get_mut(key) {
            Some(entry) if entry.owner == owner && entry.expires > now => {
                entry.expires = now + Duration::from_millis(ttl_ms);
                true
            }
            _ => false,
        }
    }

    /// See [`super::Store::release`].
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

    /// See [`super::Store::handoff`].
    pub fn handoff(&self, key: &str, owner: &str, next: &super::NextOwner<'_>) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        match state.held.get(key) {
            Some(entry) if entry.owner == owner && entry.expires > now => {}
            _ => return None,
        }
        let token = {
            let fence = state.fences.entry(key.to_string()).or_insert(0);
            *fence += 1;
            *fence
        };
        state.held.insert(
            key.to_string(),
            Entry {
                owner: next.owner.to_string(),
                expires: now + Duration::from_millis(next.ttl_ms),
                data: next.data.map(<[u8]>::to_vec),
            },
        );
        Some(token)
    }

    /// See [`super::Store::inspect`].
    pub fn inspect(&self, key: &str) -> Option<LockInfo> {
        let now = Instant::now();
        let state = self.state.lock().unwrap();
        let entry = state.held.get(key).filter(|e| e.expires > now)?;
        Some(LockInfo {
            owner: entry.owner.clone(),
            fencing_token: state.fences.get(key).copied().unwrap_or(0),
            remaining_ms: (entry.expires - now).as_millis() as i64,
            data: entry.data.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_key_is_refused_to_another_owner() {
        let s = MemoryStore::default();
        assert_eq!(s.try_acquire("k", "a", 1000, None), Some(1));
        assert_eq!(s.try_acquire("k", "b", 1000, None), None);
    }

    #[test]
    fn fencing_tokens_keep_increasing_after_release() {
        let s = MemoryStore::default();
        assert_eq!(s.try_acquire("k", "a", 1000, None), Some(1));
        assert!(s.release("k", "a"));
        assert_eq!(s.try_acquire("k", "b", 1000, None), Some(2));
    }

    #[test]
    fn an_expired_lease_can_be_taken_and_not_extended_by_its_old_owner() {
        let s = MemoryStore::default();
        assert_eq!(s.try_acquire("k", "a", 1, None), Some(1));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!s.extend("k", "a", 1000));
        assert_eq!(s.try_acquire("k", "b", 1000, None), Some(2));
        assert!(!s.release("k", "a"));
    }

    #[test]
    fn a_handoff_moves_the_lock_to_the_next_owner_with_a_new_token() {
        let s = MemoryStore::default();
        s.try_acquire("k", "a", 1000, Some(b"x"));
        let next = crate::backend::NextOwner {
            owner: "b",
            ttl_ms: 500,
            data: None,
            previous_had_data: true,
        };
        assert_eq!(s.handoff("k", "a", &next), Some(2));
        let info = s.inspect("k").unwrap();
        assert_eq!((info.owner.as_str(), info.data), ("b", None));
        assert_eq!(s.handoff("k", "a", &next), None, "a no longer holds it");
    }

    #[test]
    fn inspect_reports_owner_token_and_data() {
        let s = MemoryStore::default();
        s.try_acquire("k", "a", 1000, Some(b"\x00hi"));
        let info = s.inspect("k").unwrap();
        assert_eq!(info.owner, "a");
        assert_eq!(info.fencing_token, 1);
        assert_eq!(info.data.as_deref(), Some(&b"\x00hi"[..]));
        assert!(info.remaining_ms > 900 && info.remaining_ms <= 1000);
    }
}
