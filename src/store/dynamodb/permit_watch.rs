//! Watched versions of semaphore entries: how this process knows that a holder's lease (or a
//! queued place) ran out, as `watch.rs` knows it of a lock. An entry lapses once its version
//! has been seen unchanged for its whole lease on this process's monotonic clock; a version
//! this store wrote counts from when its write was sent.
//!
//! What is kept for a semaphore is exactly the entries of the last state this process read or
//! wrote, so an entry goes as soon as a look finds it gone (released or purged elsewhere), and
//! a semaphore left idle by this store's write goes whole. Semaphores nobody here looked at
//! for their longest lease plus a minute are dropped (looked for at most once a second, above
//! [`SWEEP_ABOVE`] entries), and past [`MAX_ENTRIES`] entries the least recently seen quarter
//! of the semaphores goes. Losing a watch is always safe: it merely starts again.

use super::permit_item::Stored;
use super::watch::{MAX_ENTRIES, STALE_AFTER, SWEEP_ABOVE, SWEEP_EVERY};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Whether an entry holds permits or waits in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A holder.
    Holder,
    /// A queued request.
    Waiter,
}

#[derive(Debug, Clone)]
struct Watch {
    version: String,
    since: Instant,
}

/// What is watched of one semaphore.
#[derive(Debug)]
struct Semaphore {
    entries: HashMap<(Role, String), Watch>,
    /// The longest lease among them.
    longest: Duration,
    /// When it was last read or written.
    seen: Instant,
}

/// When each entry's count started, in the order of the state's holders, then its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Starts {
    /// One per holder.
    pub holders: Vec<Instant>,
    /// One per queued request.
    pub queue: Vec<Instant>,
}

/// The watched semaphore entries of one store.
#[derive(Debug, Default)]
pub struct PermitWatches {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    semaphores: HashMap<String, Semaphore>,
    /// Entries over all semaphores.
    total: usize,
    last_sweep: Option<Instant>,
}

impl PermitWatches {
    /// A read that came back at `seen` showed `stored` for semaphore `name`: what is watched
    /// of it becomes its entries; a version already watched keeps its count, a new one starts
    /// at `seen`. Returns when each entry's count started.
    pub fn observe(&self, name: &str, stored: &Stored, seen: Instant) -> Starts {
        self.replace(name, stored, seen, |_, known| known.unwrap_or(seen))
    }

    /// This store wrote `stored` for semaphore `name`, in a request sent at `sent`: the entries
    /// with the write's `version` (those it set) count from `sent`, the others as before.
    pub fn wrote(&self, name: &str, stored: &Stored, version: &str, sent: Instant) {
        self.replace(name, stored, sent, |v, old| match old {
            Some(since) if v != version => since,
            _ => sent,
        });
    }

    /// Entries watched, over all semaphores (for leak checks).
    pub fn len(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `name`'s watches `stored`'s entries. `start(version, known)`: when the count of
    /// a version starts, given when a watch of that same version started (`None`: none).
    fn replace(
        &self,
        name: &str,
        stored: &Stored,
        now: Instant,
        start: impl Fn(&str, Option<Instant>) -> Instant,
    ) -> Starts {
        let mut inner = self.lock();
        let old = inner.semaphores.remove(name);
        if let Some(old) = &old {
            inner.total -= old.entries.len();
        }
        let mut entries = HashMap::new();
        let mut longest = Duration::ZERO;
        let mut watch = |role: Role, owner: &str, version: &str, lease: u64| {
            let known = old
                .as_ref()
                .and_then(|o| o.entries.get(&(role, owner.to_owned())))
                .filter(|w| w.version == version)
                .map(|w| w.since);
            let since = start(version, known);
            longest = longest.max(Duration::from_millis(lease));
            entries.insert(
                (role, owner.to_owned()),
                Watch {
                    version: version.to_owned(),
                    since,
                },
            );
            since
        };
        let starts = Starts {
            holders: stored
                .holders
                .iter()
                .map(|h| watch(Role::Holder, &h.owner, &h.version, h.lease))
                .collect(),
            queue: stored
                .queue
                .iter()
                .map(|w| watch(Role::Waiter, &w.owner, &w.version, w.lease))
                .collect(),
        };
        if !entries.is_empty() {
            if old.is_none() {
                inner.make_room(now);
            }
            inner.total += entries.len();
            inner.semaphores.insert(
                name.to_owned(),
                Semaphore {
                    entries,
                    longest,
                    seen: now,
                },
            );
        }
        starts
    }
}

impl Inner {
    fn make_room(&mut self, now: Instant) {
        let due = self
            .last_sweep
            .is_none_or(|at| now.saturating_duration_since(at) >= SWEEP_EVERY);
        if (self.total >= SWEEP_ABOVE && due) || self.total >= MAX_ENTRIES {
            self.last_sweep = Some(now);
            self.semaphores.retain(|_, s| {
                now.saturating_duration_since(s.seen) <= s.longest.saturating_add(STALE_AFTER)
            });
        }
        if self.total_now() >= MAX_ENTRIES {
            let mut seen: Vec<Instant> = self.semaphores.values().map(|s| s.seen).collect();
            seen.sort_unstable();
            let cut = seen[seen.len() / 4];
            self.semaphores.retain(|_, s| s.seen > cut);
        }
        self.total = self.total_now();
    }

    fn total_now(&self) -> usize {
        self.semaphores.values().map(|s| s.entries.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dynamodb::permit_item::{StoredHolder, StoredWaiter};

    fn holder(owner: &str, version: &str) -> StoredHolder {
        StoredHolder {
            owner: owner.into(),
            permits: 1,
            token: 1,
            lease: 100,
            version: version.into(),
        }
    }

    fn state(holders: Vec<StoredHolder>) -> Stored {
        Stored {
            fence: 1,
            holders,
            queue: vec![StoredWaiter {
                owner: "w".into(),
                permits: 1,
                lease: 100,
                version: "vw".into(),
            }],
        }
    }

    #[test]
    fn a_count_runs_while_the_version_stays_and_restarts_when_it_changes() {
        let w = PermitWatches::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(60);
        w.observe("s", &state(vec![holder("a", "v1")]), t0);
        let starts = w.observe(
            "s",
            &state(vec![holder("a", "v1"), holder("b", "v1")]),
            later,
        );
        assert_eq!(starts.holders, [t0, later]);
        assert_eq!(starts.queue, [t0]);
        let changed = w.observe("s", &state(vec![holder("a", "v2")]), later);
        assert_eq!(changed.holders, [later]);
    }

    #[test]
    fn entries_found_gone_are_dropped_and_an_idle_semaphore_goes_whole() {
        let w = PermitWatches::default();
        let t0 = Instant::now();
        w.observe("s", &state(vec![holder("a", "v1"), holder("b", "v1")]), t0);
        assert_eq!(w.len(), 3);
        w.observe("s", &state(vec![holder("b", "v1")]), t0);
        assert_eq!(w.len(), 2);
        w.wrote("s", &Stored::default(), "v9", t0);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn what_this_store_wrote_counts_from_the_send_and_the_rest_as_before() {
        let w = PermitWatches::default();
        let t0 = Instant::now();
        let sent = t0 + Duration::from_millis(30);
        w.observe("s", &state(vec![holder("a", "v1")]), t0);
        w.wrote(
            "s",
            &state(vec![holder("a", "v1"), holder("b", "mine")]),
            "mine",
            sent,
        );
        let starts = w.observe(
            "s",
            &state(vec![holder("a", "v1"), holder("b", "mine")]),
            sent + Duration::from_millis(5),
        );
        assert_eq!(starts.holders, [t0, sent]);
    }

    #[test]
    fn semaphores_nobody_looks_at_are_dropped_once_there_are_many() {
        let w = PermitWatches::default();
        let t0 = Instant::now();
        for i in 0..SWEEP_ABOVE {
            w.observe(&format!("s{i}"), &state(vec![]), t0);
        }
        assert_eq!(w.len(), SWEEP_ABOVE);
        let later = t0 + Duration::from_millis(100) + STALE_AFTER + Duration::from_secs(1);
        w.observe("fresh", &state(vec![]), later);
        assert_eq!(w.len(), 1);
    }
}
