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
//! not granted, that release is the attempt's give-back, tagged as well ([`Latest`]). So is a
//! release of a grant this process holds: the engine gives back a grant that reached its
//! caller past its lease and asks again with the same owner, and an owner may be reused on
//! purpose; a release read late must not free the owner's next grant either.

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

/// The last attempt of each (name, owner) this store made, granted or not, while its grants
/// may still be on a server: a release by that owner is that attempt's release (or give-back).
#[derive(Default)]
pub(super) struct Latest {
    inner: Mutex<Attempts>,
}

#[derive(Default)]
struct Attempts {
    /// The attempt, and until when its grants may remain on a server.
    by_owner: HashMap<(String, String), (u64, Instant)>,
    /// Size after the last sweep of lapsed attempts.
    swept_at: usize,
}

/// Attempts are swept when there are at least this many (and twice as many as after the last
/// sweep: amortised O(1) per attempt, however many grants are held).
const PRUNE_ABOVE: usize = 1024;

impl Latest {
    fn map(&self) -> std::sync::MutexGuard<'_, Attempts> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `attempt` as `owner`'s last attempt of `key`, granted or not; its grants end
    /// `lasts` from now at the latest (unless extended).
    pub(super) fn started(&self, key: &str, owner: &str, attempt: u64, lasts: Duration) {
        let now = Instant::now();
        let mut map = self.map();
        if map.by_owner.len() >= (2 * map.swept_at).max(PRUNE_ABOVE) {
            map.by_owner.retain(|_, (_, until)| *until > now);
            map.swept_at = map.by_owner.len();
        }
        map.by_owner
            .insert((key.to_owned(), owner.to_owned()), (attempt, now + lasts));
    }

    /// `attempt` was granted: a release by the owner is that attempt's, for `lasts` more.
    pub(super) fn settled(&self, key: &str, owner: &str, attempt: u64, lasts: Duration) {
        self.started(key, owner, attempt, lasts);
    }

    /// The owner's grant of `key` was extended: its attempt is remembered for `lasts` more.
    pub(super) fn extended(&self, key: &str, owner: &str, lasts: Duration) {
        let mut map = self.map();
        if map.by_owner.is_empty() {
            return;
        }
        if let Some((_, until)) = map.by_owner.get_mut(&(key.to_owned(), owner.to_owned())) {
            *until = (*until).max(Instant::now() + lasts);
        }
    }

    /// `attempt` was refused and undone, and its caller told so: when it is still the owner's
    /// last attempt of `key`, a release by the owner is an ordinary one again (the owner may
    /// hold the key by an earlier grant: a handoff that raced this attempt). So is one after
    /// an untagged grant (`attempt` `None`).
    pub(super) fn forget(&self, key: &str, owner: &str, attempt: Option<u64>) {
        let mut map = self.map();
        if map.by_owner.is_empty() {
            return;
        }
        let id = (key.to_owned(), owner.to_owned());
        if map
            .by_owner
            .get(&id)
            .is_some_and(|&(a, _)| attempt.is_none_or(|x| x == a))
        {
            map.by_owner.remove(&id);
        }
    }

    /// The attempt a release by `owner` of `key` releases or gives back: its last one, while
    /// that attempt's grants may still be on a server.
    pub(super) fn release_tag(&self, key: &str, owner: &str) -> Option<u64> {
        let map = self.map();
        if map.by_owner.is_empty() {
            return None;
        }
        map.by_owner
            .get(&(key.to_owned(), owner.to_owned()))
            .filter(|(_, until)| *until > Instant::now())
            .map(|&(attempt, _)| attempt)
    }

    /// How many attempts are remembered (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map().by_owner.len()
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
