//! The in-process store: no server, same semantics (leases, fencing, data), for tests, single
//! process deployments and as the embedded backend. Stores are named, so every client in a
//! process that connects to `memory://name` shares one store.

use super::LockInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Entry {
    owner: String,
    token: u64,
    expires: Instant,
    data: Option<Vec<u8>>,
}

#[derive(Default)]
struct State {
    held: HashMap<String, Entry>,
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

/// `now + ttl`, saturating far in the future instead of overflowing.
fn expiry(now: Instant, ttl_ms: u64) -> Instant {
    crate::core::clock::after(now, Duration::from_millis(ttl_ms))
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

    /// See [`super::Store::extend`].
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

    /// See [`super::Store::inspect`].
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
            plain: false,
        };
        assert_eq!(s.handoff("k", "a", &next), Some(2));
        let info = s.inspect("k").unwrap();
        assert_eq!((info.owner.as_str(), info.data), ("b", None));
        assert_eq!(s.handoff("k", "a", &next), None, "a no longer holds it");
    }

    #[test]
    fn released_and_expired_names_leave_nothing_behind() {
        let s = MemoryStore::default();
        for i in 0..1000 {
            s.try_acquire(&format!("gone{i}"), "a", 1, None);
        }
        std::thread::sleep(Duration::from_millis(5));
        for i in 0..1000 {
            let key = format!("kept{i}");
            s.try_acquire(&key, "a", 60_000, None);
            assert!(s.release(&key, "a"));
        }
        assert!(
            s.state.lock().unwrap().held.len() <= 64,
            "expired names were swept"
        );
        assert_eq!(s.try_acquire("kept0", "b", 1000, None), Some(2001));
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
