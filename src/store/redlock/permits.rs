//! Counting semaphores over N servers: each server keeps the semaphore as a single Redis
//! server does ([`crate::store::redis::permits`]); this module combines their answers the way
//! [`super`] combines a lock's.
//!
//! - **Quorum.** A majority is not enough once a semaphore has more than one permit: with
//!   3 servers and 2 permits, three requests reaching the servers in three different orders
//!   (A B C, B C A, C A B) are each granted by two servers, so three holders would each have a
//!   majority. A grant is therefore reported when `q` servers granted it, `q` the least number
//!   with `q × (limit + 1) > N × limit` ([`RedlockStore::permit_quorum`]): holders of more than
//!   `limit` permits in all would need more than `N × limit` permits of the N servers. For one
//!   permit it is the lock's majority; it grows towards N as the limit grows. Extensions,
//!   releases and listings use the limit the servers report (the last one asked).
//! - **Acquire.** Asks every server at once, each awaited at most the lock's per-server
//!   timeout; the grant must be valid by the lock's drift rule
//!   ([`lease_end`](crate::runtime::lease::lease_end)) and its token is
//!   settled like a lock's: the largest a quorum drew, after lifting the counters of the
//!   granting servers that drew less (the `raise` operation, conditional on still holding
//!   there). Without a quorum or validity, what was taken is given back on every server that
//!   did not refuse; a request that queues keeps a place there.
//! - **Queue order.** Each server queues refused requests; if servers ordered them by arrival,
//!   three waiters could be first on one server each and none ever reach a quorum. So a
//!   waiter carries a ticket, the time of its first queued request (µs since the epoch on
//!   this host, made unique in the process), the same on every server, and each server
//!   orders its queue by ticket (then owner): all servers agree on who is first. A ticket
//!   lives here from the owner's first queued request until it is granted, releases, or its
//!   place lapses.
//! - **One request per owner at a time.** The engine may ask for an owner's permits twice at
//!   once: its waiter's own request, and the handoff a local release makes to it. A request
//!   that a server refuses gives back, by owner, what the others granted, including servers
//!   still silent; on such a server the other request may have found the owner holding and
//!   been granted in between, and the give-back then frees that grant too: reported granted,
//!   held on too few servers, and lost. So this process's requests of one owner for one
//!   semaphore run one after the other ([`Turns`]): the second finds the first's grant (and
//!   is granted the same permits) or finds it given back everywhere.
//! - **Attempts.** As a lock's (see [`super::attempt`]), every request that does not come
//!   from an owner holding the permits is an attempt of its own: its grants are tagged with
//!   the attempt's id beside the owner (`owner 0xFD attempt` in the holder's entry), its
//!   give-back frees only that attempt's permits, and a request of another attempt of the
//!   same owner is refused permits an earlier attempt left on a server (they end with their
//!   lease, or with that attempt's give-back). So a give-back a paused server reads late,
//!   after the next attempt of the same owner was granted on a new connection, never frees
//!   that grant; nor does the engine's clean-up of a request whose outcome it did not hear
//!   (a release by the owner while its last attempt was not granted is that attempt's
//!   give-back). A request of an owner that holds permits granted to this process
//!   ([`Holding`]) is of the attempt that holds them: it finds them its own and is granted
//!   its own token, as the semaphore rules want of an owner asking again (a handoff to a
//!   local waiter whose own request was just granted). Refused (a server down, where the
//!   quorum is every server), such a request gives nothing back: on the servers that granted
//!   it, what it found were the permits their holder counts on.

use super::attempt::new_attempt;
use super::quorum::{ask_all, ask_all_items, ask_grants, no_quorum, Answers, Tally};
use super::{granted, RedlockStore};
use crate::store::redis::permits::KeepPlace;
use crate::store::{ExtendItem, PermitHolder, PermitRequest, ReleaseOutcome, StoreResult};
use crate::store::{Release, Renewal};
use futures_util::FutureExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The tickets of this process's queued requests, by (semaphore, owner).
#[derive(Default)]
pub(super) struct Tickets {
    inner: Mutex<TicketMap>,
}

#[derive(Default)]
struct TicketMap {
    /// Ticket and when the place it orders lapses unless asked for again.
    by_owner: HashMap<(String, String), (u64, Instant)>,
    /// Size after the last sweep of lapsed tickets.
    swept_at: usize,
}

impl Tickets {
    /// The ticket of `owner`'s request for `name`, made now if it has none, kept for
    /// `queue_ttl_ms` more.
    fn take(&self, name: &str, owner: &str, queue_ttl_ms: u64) -> u64 {
        let now = Instant::now();
        let until = crate::runtime::clock::after(now, Duration::from_millis(queue_ttl_ms));
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Tickets of waiters that stopped asking without releasing are swept now and then
        // (amortised O(1) per ticket made).
        if map.by_owner.len() >= (2 * map.swept_at).max(64) {
            map.by_owner.retain(|_, (_, until)| *until > now);
            map.swept_at = map.by_owner.len();
        }
        let entry = map
            .by_owner
            .entry((name.to_string(), owner.to_string()))
            .or_insert_with(|| (next_ticket(), until));
        entry.1 = until;
        entry.0
    }

    /// Forgets `owner`'s ticket for `name` (granted, or given up).
    fn forget(&self, name: &str, owner: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.by_owner.remove(&(name.to_string(), owner.to_string()));
    }

    /// How many tickets are kept (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_owner
            .len()
    }
}

/// Requests for permits under way in this process, by (semaphore, owner): each owner's
/// requests run one at a time (see the module docs).
#[derive(Default)]
pub(super) struct Turns {
    inner: Mutex<HashMap<OwnerOf, Gate>>,
}

/// A semaphore's name and an owner.
type OwnerOf = (String, String);

/// The attempt whose grant each (semaphore, owner) holds, as far as this process knows, until
/// the owner releases (or the grant would have ended, once many are kept): a new request of
/// that owner is of the same attempt (see the module docs).
#[derive(Default)]
pub(super) struct Holding {
    inner: Mutex<HashMap<OwnerOf, (u64, Instant)>>,
}

/// Past this many kept attempts, those whose grants would have ended are forgotten.
const PRUNE_ABOVE: usize = 1024;

impl Holding {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<OwnerOf, (u64, Instant)>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The attempt of a new request of `owner` for `name`, and whether it is a new one.
    fn attempt_for(&self, name: &str, owner: &str) -> (u64, bool) {
        let map = self.map();
        let held = map
            .get(&(name.to_owned(), owner.to_owned()))
            .filter(|(_, until)| *until > Instant::now());
        match held {
            Some(&(attempt, _)) => (attempt, false),
            None => (new_attempt(), true),
        }
    }

    /// `attempt` was granted `owner`'s permits of `name`; they may last `lasts` from now.
    fn granted(&self, name: &str, owner: &str, attempt: u64, lasts: Duration) {
        let now = Instant::now();
        let mut map = self.map();
        if map.len() >= PRUNE_ABOVE {
            map.retain(|_, (_, until)| *until > now);
        }
        map.insert((name.to_owned(), owner.to_owned()), (attempt, now + lasts));
    }

    /// `owner`'s permits of `name` were extended: they may last `lasts` from now.
    fn extended(&self, name: &str, owner: &str, lasts: Duration) {
        let mut map = self.map();
        if let Some((_, until)) = map.get_mut(&(name.to_owned(), owner.to_owned())) {
            *until = (*until).max(Instant::now() + lasts);
        }
    }

    /// `owner` released its permits of `name`.
    fn released(&self, name: &str, owner: &str) {
        let mut map = self.map();
        if !map.is_empty() {
            map.remove(&(name.to_owned(), owner.to_owned()));
        }
    }
}

/// What an owner's requests take turns on.
type Gate = Arc<tokio::sync::Mutex<()>>;

/// A request's place among its owner's: keeps the owner's entry in [`Turns`] while it lives.
struct Turn<'a> {
    turns: &'a Turns,
    id: OwnerOf,
    gate: Gate,
}

impl Turns {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<OwnerOf, Gate>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `request`, a request of `owner` for semaphore `name`, once no other of this
    /// process's requests of that owner for it is under way.
    ///
    /// # Cancel Safety
    /// As `request`: dropped while waiting for its turn, it has done nothing.
    pub(super) async fn one_at_a_time<T>(
        &self,
        name: &str,
        owner: &str,
        request: impl std::future::Future<Output = T>,
    ) -> T {
        let id = (name.to_string(), owner.to_string());
        let gate = self.map().entry(id.clone()).or_default().clone();
        let turn = Turn {
            turns: self,
            id,
            gate,
        };
        let _mine = turn.gate.lock().await;
        request.await
    }

    /// How many owners have requests under way (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map().len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Every clone of the gate is a live Turn's, made under the map's lock: the last one
        // removes the entry.
        let mut map = self.turns.map();
        if Arc::strong_count(&self.gate) == 2 {
            map.remove(&self.id);
        }
    }
}

/// A new ticket: µs since the epoch on this host (exact in the servers' Lua numbers until the
/// year 2255), and greater than any ticket this process made before, so that two waiters of
/// one process are queued in the order they first asked.
fn next_ticket() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The largest limit the servers reported (at least 1).
fn reported_limit<T>(answers: &Answers<T>, limit: impl Fn(&T) -> u32) -> u32 {
    answers
        .iter()
        .filter_map(|a| match a {
            Some(Ok(v)) => Some(limit(v)),
            _ => None,
        })
        .max()
        .unwrap_or(0)
        .max(1)
}

impl RedlockStore {
    /// How many servers must grant a request of a semaphore of `limit` permits: the least `q`
    /// with `q × (limit + 1) > N × limit` (see the module docs). A majority for one permit.
    pub fn permit_quorum(&self, limit: u32) -> usize {
        let n = self.servers.len() as u64;
        let limit = u64::from(limit.max(1));
        (n * limit / (limit + 1) + 1) as usize
    }

    /// See [`LockStore::acquire_permits`](crate::store::LockStore::acquire_permits).
    ///
    /// # Cancel Safety
    /// Not cancel safe: servers may hold the permits when the future is dropped.
    pub async fn acquire_permits(&self, req: &PermitRequest<'_>) -> StoreResult<Option<u64>> {
        // Never beside another request of the same owner (see the module docs).
        self.turns
            .one_at_a_time(req.name, req.owner, self.acquire_permits_alone(req))
            .await
    }

    /// [`RedlockStore::acquire_permits`], while no other request of `req.owner` runs.
    async fn acquire_permits_alone(&self, req: &PermitRequest<'_>) -> StoreResult<Option<u64>> {
        let start = Instant::now();
        let bound = self.server_timeout(req.ttl_ms);
        let q = self.permit_quorum(req.limit);
        let ticket = if req.queue_ttl_ms > 0 {
            self.tickets.take(req.name, req.owner, req.queue_ttl_ms)
        } else {
            0
        };
        // An attempt of its own, unless the owner holds permits here (see the module docs).
        let (attempt, fresh) = self.holding.attempt_for(req.name, req.owner);
        let (name, owner, lasts) = (req.name, req.owner, self.attempt_lasts(req.ttl_ms));
        if fresh {
            self.latest_permits.started(name, owner, attempt, lasts);
        }
        let calls = self
            .servers
            .iter()
            .map(|s| s.acquire_permits_ticketed(req, ticket, Some(attempt)))
            .collect();
        let (answers, tally) = ask_grants(calls, bound, q).await;
        if tally.yes >= q {
            let grants = granted(&answers);
            let token = self
                .settle_with(req.name, &grants, start, req.ttl_ms, q, |i, top| {
                    self.servers[i]
                        .raise_permit_token(req.name, req.owner, top, Some(attempt))
                        .boxed()
                })
                .await;
            if let Some(token) = token {
                self.tickets.forget(name, owner);
                self.latest_permits.settled(name, owner, attempt, lasts);
                self.holding.granted(name, owner, attempt, lasts);
                return Ok(Some(token));
            }
        }
        // A request that queues gives back what it got, keeping (or taking) its place there.
        let keep = (req.queue_ttl_ms > 0).then_some(KeepPlace {
            permits: req.permits,
            queue_ttl_ms: req.queue_ttl_ms,
            ticket,
        });
        // A request of the attempt that holds the owner's permits found them its own where it
        // was granted: giving that back would free the permits their holder counts on (a
        // server down, where the quorum is every server, refuses it on its own). Only a new
        // attempt's partial grant is undone.
        if fresh {
            self.undo_with(req.name, &answers, bound, |i| {
                self.servers[i]
                    .release_permits_keeping(name, owner, keep, Some(attempt))
                    .map(|r| r.map(drop))
                    .boxed()
            })
            .await;
        }
        if tally.failed > self.servers.len() - q {
            return Err(no_quorum(&answers, "acquire permits"));
        }
        // A refusal the caller hears: no clean-up follows (as for a lock's, see `attempt`). A
        // held attempt stays the owner's: a release by the owner is still that attempt's.
        if fresh {
            self.latest_permits.forget(name, owner, Some(attempt));
        }
        Ok(None)
    }

    /// See [`LockStore::extend_permits`](crate::store::LockStore::extend_permits): extended
    /// when a quorum (for the limit the servers report) extended it.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_permits(&self, name: &str, renewal: Renewal<'_>) -> StoreResult<bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        let calls = self
            .servers
            .iter()
            .map(|s| s.extend_permits_limit(name, owner, ttl_ms))
            .collect();
        let answers = ask_all(calls, None, |a| self.extended(a).1).await;
        let extended = self.extended(&answers).0;
        if matches!(extended, Ok(true)) {
            let lasts = self.attempt_lasts(ttl_ms);
            self.latest_permits.extended(name, owner, lasts);
            self.holding.extended(name, owner, lasts);
        }
        extended
    }

    /// What `answers` (each server's limit if it extended, else 0) say, by the quorum of the
    /// limit they report, and whether that is settled (no server still silent could change it).
    fn extended(&self, answers: &Answers<u32>) -> (StoreResult<bool>, bool) {
        let q = self.permit_quorum(reported_limit(answers, |&l| l));
        let owned: Answers<bool> = answers
            .iter()
            .map(|a| {
                a.as_ref()
                    .map(|r| r.as_ref().map(|&l| l > 0).map_err(Clone::clone))
            })
            .collect();
        let t = Tally::of(&owned, |o| *o);
        (self.owned_by(&owned, q, "extend permits"), t.settled(q))
    }

    /// See [`LockStore::extend_permits_many`](crate::store::LockStore::extend_permits_many): one
    /// pipeline per server; each item is decided by a quorum of its own.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_permits_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        let calls = self
            .servers
            .iter()
            .map(|s| s.extend_permits_many_limits(items))
            .collect();
        ask_all_items(calls, items.len(), |a| self.extended(a).1)
            .await
            .iter()
            .zip(items)
            .map(|(answers, item)| {
                let extended = self.extended(answers).0;
                if matches!(extended, Ok(true)) {
                    let lasts = self.attempt_lasts(item.ttl_ms);
                    self.latest_permits.extended(&item.key, &item.owner, lasts);
                    self.holding.extended(&item.key, &item.owner, lasts);
                }
                extended
            })
            .collect()
    }

    /// See [`LockStore::release_permits`](crate::store::LockStore::release_permits): on every
    /// server; released when the permits were held on a quorum and are let go (as for a lock:
    /// [`RedlockStore::release`]).
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release_permits(&self, name: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        self.tickets.forget(name, owner);
        self.holding.released(name, owner);
        // A release by the owner is that of its last attempt here, granted or not (see
        // `super::attempt`): it must not free a later attempt's grant when it reaches a server
        // late (see the module docs).
        let attempt = self.latest_permits.release_tag(name, owner);
        let calls = self
            .servers
            .iter()
            .map(|s| s.release_permits_keeping(name, owner, None, attempt))
            .collect();
        let answers = ask_all(calls, None, |a| {
            let q = self.permit_quorum(reported_limit(a, |(_, l)| *l));
            Tally::of(a, |(o, _)| o.released).let_go(q)
        })
        .await;
        let q = self.permit_quorum(reported_limit(&answers, |(_, l)| *l));
        let outcomes: Answers<ReleaseOutcome> = answers
            .into_iter()
            .map(|a| a.map(|r| r.map(|(o, _)| o)))
            .collect();
        self.release_outcome_by(&outcomes, 0, q)
    }

    /// See [`LockStore::permits`](crate::store::LockStore::permits): the holders a quorum of
    /// servers lists, each with its token as a quorum counted it (the quorum-th largest) and
    /// the lease as long as a quorum keeps it.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits(&self, name: &str) -> StoreResult<Vec<PermitHolder>> {
        let calls = self.servers.iter().map(|s| s.permits_limit(name)).collect();
        let answers = ask_all(calls, None, |_| false).await;
        let q = self.permit_quorum(reported_limit(&answers, |(l, _)| *l));
        if Tally::of(&answers, |_| true).yes < q {
            return Err(no_quorum(&answers, "list permits"));
        }
        let mut seen: HashMap<&str, Vec<&PermitHolder>> = HashMap::new();
        for (_, holders) in answers.iter().flatten().flatten() {
            for h in holders {
                seen.entry(h.owner.as_str()).or_default().push(h);
            }
        }
        let mut out = Vec::new();
        for (owner, copies) in seen {
            if copies.len() < q {
                continue;
            }
            let mut tokens: Vec<u64> = copies.iter().map(|h| h.fencing_token).collect();
            tokens.sort_unstable_by(|a, b| b.cmp(a));
            let mut leases: Vec<i64> = copies.iter().map(|h| h.remaining_ms).collect();
            leases.sort_unstable_by(|a, b| b.cmp(a));
            out.push(PermitHolder {
                owner: owner.to_string(),
                permits: copies.iter().map(|h| h.permits).max().unwrap_or(0),
                fencing_token: tokens[q - 1],
                remaining_ms: leases[q - 1],
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
