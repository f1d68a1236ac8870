//! Attempts: every request of an acquisition (or of a handoff to a waiter) is an attempt of
//! its own, with an id of its own, and its grants on the servers are tagged with it (see
//! [`RedisStore::try_acquire_attempt`](crate::store::redis::RedisStore::try_acquire_attempt)).
//!
//! An attempt without a valid quorum gives back what it got on every server that did not
//! refuse, without waiting for the servers that were silent: those get the give-back later,
//! behind the attempt's own request on the same connection. But a connection replaced while
//! its server was paused (nothing came back for a whole response timeout) still holds both
//! in the server's socket, and the server may read them after what the next attempt sent on
//! the new connection. Released by owner, that late give-back would delete the grant the
//! next attempt of the same owner counts on. Tagged, it frees only its own attempt's grant,
//! and the next attempt is refused the old one rather than taking it over.
//!
//! The engine's own clean-up of an acquisition that failed with its outcome unknown releases
//! by owner too ([`RedlockStore::release`]): while the owner's last attempt is one that was
//! not granted, that release is the attempt's give-back, tagged as well ([`Latest`]).

use super::RedlockStore;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// A new attempt's id: random, so that two processes' attempts of one owner (an owner shared
/// on purpose) never share one either.
pub(super) fn new_attempt() -> u64 {
    fastrand::u64(..)
}

/// The last attempt of each (name, owner) this store made, while the attempt was not
/// granted: a release by that owner is then the give-back of that attempt.
#[derive(Default)]
pub(super) struct Latest {
    attempts: Mutex<HashMap<(String, String), (u64, Instant)>>,
}

/// Past this many remembered attempts, those whose grants would have ended are forgotten.
const PRUNE_ABOVE: usize = 1024;

impl Latest {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (u64, Instant)>> {
        self.attempts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `attempt` as `owner`'s last attempt of `key`, not granted (yet); a grant of
    /// it would end `lasts` from now at the latest.
    pub(super) fn started(&self, key: &str, owner: &str, attempt: u64, lasts: Duration) {
        let now = Instant::now();
        let mut map = self.map();
        if map.len() >= PRUNE_ABOVE {
            map.retain(|_, (_, until)| *until > now);
        }
        map.insert((key.to_owned(), owner.to_owned()), (attempt, now + lasts));
    }

    /// The last attempt was granted (or the owner released): a release by the owner is an
    /// ordinary one again.
    pub(super) fn settled(&self, key: &str, owner: &str) {
        let mut map = self.map();
        if !map.is_empty() {
            map.remove(&(key.to_owned(), owner.to_owned()));
        }
    }

    /// `attempt` was refused and undone, and its caller told so: when it is still the owner's
    /// last attempt of `key`, a release by the owner is an ordinary one again.
    pub(super) fn forget(&self, key: &str, owner: &str, attempt: u64) {
        let mut map = self.map();
        let id = (key.to_owned(), owner.to_owned());
        if map.get(&id).is_some_and(|&(a, _)| a == attempt) {
            map.remove(&id);
        }
    }

    /// The attempt a release by `owner` of `key` gives back, if its last one was not granted
    /// and its grants may still be on a server.
    pub(super) fn ungranted(&self, key: &str, owner: &str) -> Option<u64> {
        let map = self.map();
        if map.is_empty() {
            return None;
        }
        map.get(&(key.to_owned(), owner.to_owned()))
            .filter(|(_, until)| *until > Instant::now())
            .map(|&(attempt, _)| attempt)
    }
}

impl RedlockStore {
    /// How long the grants of an attempt for a `ttl_ms` lease may remain on a server: its
    /// ttl from a request that reaches a paused server when it goes on, up to a response
    /// timeout after the attempt, and once more for the engine's clean-up to end.
    pub(super) fn attempt_lasts(&self, ttl_ms: u64) -> Duration {
        Duration::from_millis(ttl_ms).saturating_mul(2) + self.response_timeout * 2
    }
}
