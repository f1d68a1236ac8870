//! Watched versions: how this process knows that a lease ran out without a server clock.
//!
//! DynamoDB conditions cannot read a clock, so a lock's expiry is decided as the Java lock
//! client decides it: a contender may take a held lock only once it has seen the same
//! `recordVersionNumber` for a whole `leaseDuration` on its own monotonic clock; any new
//! version (a heartbeat, a new holder) starts the count again. The count starts when the read
//! that first showed the version came back, which is after the holder wrote it, hence after
//! the holder started its own reckoning of the lease.
//!
//! A version this store wrote itself starts its count when its request was sent: the holder
//! in this process reckons its lease from no earlier than that on the same clock, so a
//! contender here needs no separate watch. (Other processes still watch it.)
//!
//! The engine calls `try_acquire` again at every poll, so what was seen lives here, one entry
//! per name, bounded: an entry goes when this process takes, releases or hands off the lock,
//! when a new version replaces it, or once nobody looked at it for its lease plus a minute;
//! past [`MAX_ENTRIES`] the least recently seen quarter goes. Losing an entry is always safe:
//! the watch merely starts again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Most names watched at once.
pub const MAX_ENTRIES: usize = 65_536;
/// Entries unseen for their lease plus this long are dropped.
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// Stale entries are looked for at most this often (and only when there are many).
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Below this many entries, none is ever swept.
pub const SWEEP_ABOVE: usize = 1024;

#[derive(Debug, Clone)]
struct Entry {
    version: String,
    /// When the count for this version started.
    since: Instant,
    lease: Duration,
    /// When a read last showed this version.
    seen: Instant,
}

/// What is known of one lock's current version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The version.
    pub version: String,
    /// When the count started.
    pub since: Instant,
    /// The lease its item states.
    pub lease: Duration,
}

impl Watched {
    /// Whether the version has been seen unchanged for longer than its lease at `now` (the
    /// Java client's test: elapsed > lease).
    pub fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) > self.lease
    }

    /// What is left of the lease at `now`, as this process can tell.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.lease
            .saturating_sub(now.saturating_duration_since(self.since))
    }
}

/// The watched versions of one store.
#[derive(Debug, Default)]
pub struct Watches {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    last_sweep: Option<Instant>,
}

impl Watches {
    /// What is known of `key`, if anything.
    pub fn get(&self, key: &str) -> Option<Watched> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.entries.get(key).map(|e| Watched {
            version: e.version.clone(),
            since: e.since,
            lease: e.lease,
        })
    }

    /// A read at `now` showed `version` with `lease`: starts its count unless it was already
    /// running for this version. Returns the watch.
    pub fn observe(&self, key: &str, version: &str, lease: Duration, now: Instant) -> Watched {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = inner.entries.get_mut(key) {
            if e.version == version {
                e.seen = now;
                e.lease = lease;
                return Watched {
                    version: e.version.clone(),
                    since: e.since,
                    lease,
                };
            }
        }
        inner.insert(key, version, lease, now, now);
        Watched {
            version: version.to_owned(),
            since: now,
            lease,
        }
    }

    /// This store wrote `version` with `lease` in a request sent at `sent`.
    pub fn wrote(&self, key: &str, version: &str, lease: Duration, sent: Instant) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.insert(key, version, lease, sent, Instant::now());
    }

    /// Forgets `key` (released, or its version is unknown now).
    pub fn forget(&self, key: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.entries.remove(key);
    }

    /// Number of names watched.
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.entries.len()
    }
}

impl Inner {
    fn insert(&mut self, key: &str, version: &str, lease: Duration, since: Instant, seen: Instant) {
        if !self.entries.contains_key(key) {
            self.make_room(seen);
        }
        self.entries.insert(
            key.to_owned(),
            Entry {
                version: version.to_owned(),
                since,
                lease,
                seen,
            },
        );
    }

    fn make_room(&mut self, now: Instant) {
        let n = self.entries.len();
        let due = self
            .last_sweep
            .is_none_or(|at| now.saturating_duration_since(at) >= SWEEP_EVERY);
        if (n >= SWEEP_ABOVE && due) || n >= MAX_ENTRIES {
            self.last_sweep = Some(now);
            self.entries.retain(|_, e| {
                now.saturating_duration_since(e.seen) <= e.lease.saturating_add(STALE_AFTER)
            });
        }
        if self.entries.len() >= MAX_ENTRIES {
            let mut seen: Vec<Instant> = self.entries.values().map(|e| e.seen).collect();
            seen.sort_unstable();
            let cut = seen[MAX_ENTRIES / 4];
            self.entries.retain(|_, e| e.seen > cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(100);

    #[test]
    fn the_count_runs_while_the_version_stays_and_restarts_when_it_changes() {
        let w = Watches::default();
        let t0 = Instant::now();
        let first = w.observe("k", "v1", LEASE, t0);
        assert_eq!(first.since, t0);
        let again = w.observe("k", "v1", LEASE, t0 + Duration::from_millis(60));
        assert_eq!(again.since, t0);
        assert!(!again.expired(t0 + LEASE), "not past the lease yet");
        assert!(again.expired(t0 + LEASE + Duration::from_millis(1)));
        assert_eq!(
            again.remaining(t0 + Duration::from_millis(30)),
            Duration::from_millis(70)
        );
        let changed = w.observe("k", "v2", LEASE, t0 + Duration::from_millis(150));
        assert_eq!(changed.since, t0 + Duration::from_millis(150));
        assert!(!changed.expired(t0 + Duration::from_millis(200)));
    }

    #[test]
    fn an_own_write_counts_from_when_it_was_sent() {
        let w = Watches::default();
        let sent = Instant::now();
        w.wrote("k", "mine", LEASE, sent);
        let seen = w.observe("k", "mine", LEASE, sent + Duration::from_millis(50));
        assert_eq!(seen.since, sent);
        w.forget("k");
        assert_eq!(w.get("k"), None);
    }

    #[test]
    fn entries_stay_bounded() {
        let w = Watches::default();
        let t0 = Instant::now();
        for i in 0..MAX_ENTRIES + 10 {
            // Every entry is fresh: only the cap can remove them.
            w.observe(
                &format!("k{i}"),
                "v",
                Duration::from_secs(3600),
                t0 + Duration::from_micros(i as u64),
            );
        }
        assert!(w.len() <= MAX_ENTRIES, "{}", w.len());
        assert!(
            w.get(&format!("k{}", MAX_ENTRIES + 9)).is_some(),
            "the newest stays"
        );
        assert!(w.get("k0").is_none(), "the least recently seen went");
        // Stale ones are swept once there are many.
        let later = t0 + Duration::from_secs(3600) + STALE_AFTER + Duration::from_secs(1);
        w.observe("fresh", "v", LEASE, later + Duration::from_secs(60));
        assert_eq!(w.len(), 1);
    }
}
