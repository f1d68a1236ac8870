//! Counting semaphores: one item per semaphore (`permit_item.rs`), changed by reading it,
//! applying [`PermitTable`]'s rules and writing it back on the condition that its version did
//! not change in between (optimistic concurrency: a failed condition means another client
//! wrote first, so the change is worked out again on the new state, after a jittered pause).
//!
//! DynamoDB has no clock a condition can read, so leases are reckoned as the store's locks
//! reckon them, the Java lock client's way (`watch.rs`): a holder's lease (and a queued
//! request's place) is a duration with a version that changes whenever it is set again, and
//! a reader counts it from when it first saw that version on its own monotonic clock, or,
//! for a version this store wrote, from when that write was sent. [`PermitTable`]'s times are
//! that count in ms since the store was created: a holder lapses for this process once its
//! version has been seen unchanged for its whole lease.

use super::client::Failure;
use super::permit_item::{self, Stored, StoredHolder, StoredWaiter};
use super::permit_watch::{PermitWatches, Role};
use super::{first_token, new_version, DynamoStore, EXTEND_CONCURRENCY};
use crate::runtime::debug::debug;
use crate::store::permits::{PermitTable, TableHolder, TableWaiter};
use crate::store::{
    ErrorKind, ExtendItem, PermitHolder, PermitRequest, ReleaseOutcome, StoreError, StoreResult,
};
use crate::store::{Release, Renewal};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// Most conditional writes an acquisition makes: each failed condition means another client
/// changed the semaphore in between, and an acquisition that meets them all is busy (its next
/// poll asks again). Releases and extensions have no next poll: see [`Patience`].
const MAX_WRITES: u32 = 12;

/// How long an operation keeps writing while every write meets a concurrent change.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Patience {
    /// At most [`MAX_WRITES`] writes (acquisitions: busy then, the next poll asks again).
    Writes,
    /// Until the call's deadline (releases and extensions: however many holders of one
    /// semaphore change it at once, each gets its write in or meets its deadline).
    Deadline,
}
/// Pause before the second write; each further one doubles it, up to [`BACKOFF_CAP`], and the
/// actual pause is drawn uniformly below it.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_CAP: Duration = Duration::from_millis(200);
/// Largest `permitState`, in bytes: a DynamoDB item holds at most 400 KB.
pub const MAX_STATE_BYTES: usize = 384 * 1024;

/// `at` in ms since `origin`, rounded down (for "now").
fn ms_floor(origin: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(origin).as_millis()).unwrap_or(u64::MAX)
}

/// `at` in ms since `origin`, rounded up (for the start of a lease, so that it never ends
/// early).
fn ms_ceil(origin: Instant, at: Instant) -> u64 {
    u64::try_from(
        at.saturating_duration_since(origin)
            .as_micros()
            .div_ceil(1000),
    )
    .unwrap_or(u64::MAX)
}

/// One attempt's view of a semaphore: its table on this process's watch clock, and whose
/// leases the operation set.
pub(super) struct Draft {
    table: PermitTable,
    now: u64,
    renewed: Vec<(Role, String, u64)>,
}

impl Draft {
    /// `owner`'s entry gets a new version and the lease `lease_ms`.
    fn renew(&mut self, role: Role, owner: &str, lease_ms: u64) {
        self.renewed.retain(|(r, o, _)| !(*r == role && o == owner));
        self.renewed.push((role, owner.to_owned(), lease_ms));
    }

    fn renewed(&self, role: Role, owner: &str) -> Option<u64> {
        self.renewed
            .iter()
            .find(|(r, o, _)| *r == role && o == owner)
            .map(|(_, _, lease)| *lease)
    }

    /// Rules 1 to 4 of [`crate::store::permits`], renewing what they renew.
    fn acquire(&mut self, req: &PermitRequest<'_>) -> Option<u64> {
        let granted = self.table.acquire(req, self.now);
        if granted.is_some() {
            self.renew(Role::Holder, req.owner, req.ttl_ms);
        } else if req.queue_ttl_ms > 0 {
            self.renew(Role::Waiter, req.owner, req.queue_ttl_ms);
        }
        granted
    }

    fn extend(&mut self, owner: &str, ttl_ms: u64) -> bool {
        let extended = self.table.extend(owner, ttl_ms, self.now);
        if extended {
            self.renew(Role::Holder, owner, ttl_ms);
        }
        extended
    }
}

/// The table of `stored` on this process's watch clock at `now`, for semaphore `name` read
/// at `seen` (see `permit_watch.rs`).
fn draft(
    stored: &Stored,
    name: &str,
    watches: &PermitWatches,
    origin: Instant,
    (seen, now): (Instant, Instant),
) -> Draft {
    let starts = watches.observe(name, stored, seen);
    let expires = |since: Instant, lease: u64| ms_ceil(origin, since).saturating_add(lease);
    let table = PermitTable {
        holders: stored
            .holders
            .iter()
            .zip(&starts.holders)
            .map(|(h, &since)| TableHolder {
                owner: h.owner.clone(),
                permits: h.permits,
                token: h.token,
                expires: expires(since, h.lease),
            })
            .collect(),
        queue: stored
            .queue
            .iter()
            .zip(&starts.queue)
            .map(|(w, &since)| TableWaiter {
                owner: w.owner.clone(),
                permits: w.permits,
                expires: expires(since, w.lease),
            })
            .collect(),
        fence: stored.fence,
    };
    Draft {
        table,
        now: ms_floor(origin, now),
        renewed: Vec::new(),
    }
}

/// The state to store after `draft`: entries it renewed get `version` and their new lease,
/// the others keep what `before` had for them.
fn settle(before: &Stored, draft: &Draft, version: &str) -> StoreResult<Stored> {
    let holders = before
        .holders
        .iter()
        .map(|h| (&h.owner, h.lease, &h.version));
    let waiters = before.queue.iter().map(|w| (&w.owner, w.lease, &w.version));
    let kept: HashMap<(Role, &str), (u64, &String)> = holders
        .map(|e| (Role::Holder, e))
        .chain(waiters.map(|e| (Role::Waiter, e)))
        .map(|(role, (owner, lease, version))| ((role, owner.as_str()), (lease, version)))
        .collect();
    // The entry's new lease and version if the draft renewed it, else what it had.
    let lease = |role: Role, owner: &str| -> StoreResult<(u64, String)> {
        if let Some(lease) = draft.renewed(role, owner) {
            return Ok((lease, version.to_owned()));
        }
        let (lease, version) = kept
            .get(&(role, owner))
            .ok_or_else(|| StoreError::internal("dynamodb: a semaphore entry lost its lease"))?;
        Ok((*lease, (*version).clone()))
    };
    let holders = draft
        .table
        .holders
        .iter()
        .map(|h| {
            let (lease, version) = lease(Role::Holder, &h.owner)?;
            Ok(StoredHolder {
                owner: h.owner.clone(),
                permits: h.permits,
                token: h.token,
                lease,
                version,
            })
        })
        .collect::<StoreResult<_>>()?;
    let queue = draft
        .table
        .queue
        .iter()
        .map(|w| {
            let (lease, version) = lease(Role::Waiter, &w.owner)?;
            Ok(StoredWaiter {
                owner: w.owner.clone(),
                permits: w.permits,
                lease,
                version,
            })
        })
        .collect::<StoreResult<_>>()?;
    Ok(Stored {
        fence: draft.table.fence,
        holders,
        queue,
    })
}

fn check_request(req: &PermitRequest<'_>) -> StoreResult<()> {
    super::checks::check_name(req.name, "semaphore name")
}

impl DynamoStore {
    /// Reads semaphore `name`: its state (a new one when there is no item) and version, and
    /// when the reply came.
    async fn read_permits(
        &self,
        api: &super::client::Api,
        name: &str,
        deadline: Instant,
    ) -> StoreResult<(Stored, Option<String>, Instant)> {
        let reply = api
            .call("GetItem", &self.requests.get_permits(name), deadline)
            .await
            .map_err(|f| self.failure("GetItem", f))?;
        let seen = Instant::now();
        let item = reply.get("Item").and_then(serde_json::Value::as_object);
        let parsed = permit_item::parse(item).map_err(|e| {
            StoreError::new(
                ErrorKind::Server,
                format!("dynamodb: semaphore {name:?}: {e}"),
            )
        })?;
        Ok(match parsed {
            Some((stored, version)) => (stored, Some(version), seen),
            // Tokens of a new item start from the clock, as a lock's do (see `first_token`).
            None => (
                Stored {
                    fence: first_token(),
                    ..Stored::default()
                },
                None,
                seen,
            ),
        })
    }

    /// Applies `op` to semaphore `name` and stores the outcome, with optimistic concurrency.
    /// Writes nothing when `op` changed nothing. `None`: every write met a concurrent change,
    /// for as long as `patience` allows.
    ///
    /// # Cancel Safety
    /// Not cancel safe: a write sent before the future is dropped may take effect.
    async fn update<T>(
        &self,
        name: &str,
        patience: Patience,
        mut op: impl FnMut(&mut Draft) -> T,
    ) -> StoreResult<Option<T>> {
        let deadline = self.deadline();
        let api = self.api(deadline).await?;
        for attempt in 0u32.. {
            if patience == Patience::Writes && attempt >= MAX_WRITES {
                break;
            }
            if attempt > 0 {
                let cap = BACKOFF_CAP.min(BACKOFF_BASE.saturating_mul(1 << (attempt - 1).min(10)));
                let pause = cap.mul_f64(fastrand::f64());
                if Instant::now() + pause >= deadline {
                    break;
                }
                tokio::time::sleep(pause).await;
            }
            let (before, old, seen) = self.read_permits(api, name, deadline).await?;
            let mut draft = draft(
                &before,
                name,
                &self.permit_watches,
                self.origin,
                (seen, Instant::now()),
            );
            let out = op(&mut draft);
            let version = new_version();
            let after = settle(&before, &draft, &version)?;
            if after == before {
                return Ok(Some(out));
            }
            let (operation, body) = match &old {
                Some(old) if after.is_idle() && self.options.delete_on_release => {
                    ("DeleteItem", self.requests.delete_permits(name, old))
                }
                _ => {
                    let state = after.encode();
                    if state.len() > MAX_STATE_BYTES {
                        return Err(StoreError::invalid(format!(
                            "dynamodb: semaphore {name:?}: {} holders and queued requests take \
                             {} bytes, more than one DynamoDB item holds",
                            after.holders.len() + after.queue.len(),
                            state.len()
                        )));
                    }
                    let body = self
                        .requests
                        .put_permits(name, &state, &version, old.as_deref());
                    ("UpdateItem", body)
                }
            };
            let sent = Instant::now();
            match api.call(operation, &body, deadline).await {
                Ok(_) => {
                    self.permit_watches.wrote(name, &after, &version, sent);
                    return Ok(Some(out));
                }
                Err(Failure::Condition(_)) => {
                    debug!("dynamodb semaphore {name:?}: changed meanwhile, again");
                }
                Err(f) => return Err(self.failure(operation, f)),
            }
        }
        Ok(None)
    }

    /// The error of an operation whose every write met a concurrent change.
    fn contended(name: &str) -> StoreError {
        StoreError::new(
            ErrorKind::Server,
            format!(
                "dynamodb: semaphore {name:?}: every write until the call's deadline met a \
                 concurrent change; try again"
            ),
        )
    }

    /// See [`crate::store::LockStore::acquire_permits`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: a write sent before the future is dropped may take permits.
    pub(super) async fn acquire_permits(
        &self,
        req: &PermitRequest<'_>,
    ) -> StoreResult<Option<u64>> {
        check_request(req)?;
        let granted = self
            .update(req.name, Patience::Writes, |d| d.acquire(req))
            .await?;
        // Every write met a concurrent change: busy, as a lock's take after as many failed
        // conditions; the next poll asks again.
        Ok(granted.flatten())
    }

    /// See [`crate::store::LockStore::extend_permits`].
    pub(super) async fn extend_permits(
        &self,
        name: &str,
        renewal: Renewal<'_>,
    ) -> StoreResult<bool> {
        let (owner, ttl_ms) = (renewal.owner, renewal.ttl_ms);
        super::checks::check_name(name, "semaphore name")?;
        self.update(name, Patience::Deadline, |d| d.extend(owner, ttl_ms))
            .await?
            .ok_or_else(|| Self::contended(name))
    }

    /// Extends the permits of `owners` (owner, ttl) of one semaphore in one write.
    async fn extend_group(&self, name: &str, owners: &[(&str, u64)]) -> StoreResult<Vec<bool>> {
        super::checks::check_name(name, "semaphore name")?;
        self.update(name, Patience::Deadline, |d| {
            owners
                .iter()
                .map(|(owner, ttl_ms)| d.extend(owner, *ttl_ms))
                .collect()
        })
        .await?
        .ok_or_else(|| Self::contended(name))
    }

    /// See [`crate::store::LockStore::extend_permits_many`]: one write per semaphore, for
    /// every holder of it in `items`.
    pub(super) async fn extend_permits_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let g = *index.entry(item.key.as_str()).or_insert_with(|| {
                groups.push((item.key.as_str(), Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        // Futures do nothing until polled: `buffer_unordered` runs this many at a time.
        let each: Vec<_> = groups
            .into_iter()
            .map(|(name, members)| async move {
                let owners: Vec<(&str, u64)> = members
                    .iter()
                    .map(|&i| (items[i].owner.as_str(), items[i].ttl_ms))
                    .collect();
                let result = self.extend_group(name, &owners).await;
                (members, result)
            })
            .collect();
        let done: Vec<_> = futures_util::stream::iter(each)
            .buffer_unordered(EXTEND_CONCURRENCY)
            .collect()
            .await;
        let mut out: Vec<Option<StoreResult<bool>>> = vec![None; items.len()];
        for (members, result) in done {
            match result {
                Ok(extended) => {
                    for (&i, ok) in members.iter().zip(extended) {
                        out[i] = Some(Ok(ok));
                    }
                }
                Err(e) => {
                    for &i in &members {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::internal("dynamodb: a lost result"))))
            .collect()
    }

    /// See [`crate::store::LockStore::release_permits`]: whether `owner` held live permits.
    pub(super) async fn release_permits(
        &self,
        name: &str,
        r: Release<'_>,
    ) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        super::checks::check_name(name, "semaphore name")?;
        let released = self
            .update(name, Patience::Deadline, |d| {
                let now = d.now;
                d.table.release(owner, now)
            })
            .await?
            .ok_or_else(|| Self::contended(name))?;
        // No announcements: waiters elsewhere poll.
        Ok(ReleaseOutcome::unannounced(released))
    }

    /// See [`crate::store::LockStore::permits`]: one read, nothing written.
    pub(super) async fn permits(&self, name: &str) -> StoreResult<Vec<PermitHolder>> {
        super::checks::check_name(name, "semaphore name")?;
        let deadline = self.deadline();
        let api = self.api(deadline).await?;
        let (stored, _, seen) = self.read_permits(api, name, deadline).await?;
        let draft = draft(
            &stored,
            name,
            &self.permit_watches,
            self.origin,
            (seen, Instant::now()),
        );
        Ok(holders_of(&stored, &draft))
    }
}

/// The live holders of `draft`, each lease left at most its stored lease: a lease's start is
/// rounded up to the ms (it must never end early) and `now` down, so a holder read in the
/// millisecond it was first seen would otherwise show 1 ms more than it was granted.
fn holders_of(stored: &Stored, draft: &Draft) -> Vec<PermitHolder> {
    let mut holders = draft.table.live(draft.now);
    for h in &mut holders {
        if let Some(s) = stored.holders.iter().find(|s| s.owner == h.owner) {
            h.remaining_ms = h
                .remaining_ms
                .min(i64::try_from(s.lease).unwrap_or(i64::MAX));
        }
    }
    holders
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> Stored {
        Stored {
            fence: 7,
            holders: vec![
                StoredHolder {
                    owner: "a".into(),
                    permits: 1,
                    token: 6,
                    lease: 60_000,
                    version: "va".into(),
                },
                StoredHolder {
                    owner: "gone".into(),
                    permits: 1,
                    token: 7,
                    lease: 0,
                    version: "vg".into(),
                },
            ],
            queue: vec![StoredWaiter {
                owner: "w".into(),
                permits: 3,
                lease: 60_000,
                version: "vw".into(),
            }],
        }
    }

    fn req<'a>(owner: &'a str, permits: u32, queue_ttl_ms: u64) -> PermitRequest<'a> {
        PermitRequest {
            name: "s",
            owner,
            permits,
            limit: 3,
            ttl_ms: 5_000,
            queue_ttl_ms,
        }
    }

    #[test]
    fn a_write_renews_only_what_the_operation_set_and_drops_what_lapsed() {
        let (watches, origin) = (PermitWatches::default(), Instant::now());
        let before = stored();
        let at = origin + Duration::from_millis(10);
        let mut d = draft(&before, "s", &watches, origin, (at, at));
        // "gone" has a lease of 0: lapsed at once. "w" is queued for all 3 permits ahead of b.
        assert_eq!(d.acquire(&req("b", 1, 1_000)), None);
        assert!(d.extend("a", 9_000));
        let after = settle(&before, &d, "new").unwrap();
        let holders: Vec<_> = after
            .holders
            .iter()
            .map(|h| (h.owner.as_str(), h.lease, h.version.as_str()))
            .collect();
        assert_eq!(holders, [("a", 9_000, "new")]);
        let queue: Vec<_> = after
            .queue
            .iter()
            .map(|w| (w.owner.as_str(), w.lease, w.version.as_str()))
            .collect();
        assert_eq!(queue, [("w", 60_000, "vw"), ("b", 1_000, "new")]);
        assert_eq!(after.fence, 7);
    }

    #[test]
    fn nothing_changes_when_a_try_is_refused_and_nothing_lapsed() {
        let (watches, origin) = (PermitWatches::default(), Instant::now());
        let mut before = stored();
        before.holders.pop();
        let at = origin + Duration::from_millis(10);
        let mut d = draft(&before, "s", &watches, origin, (at, at));
        assert_eq!(d.acquire(&req("b", 1, 0)), None);
        assert!(!d.extend("nobody", 1_000));
        assert_eq!(settle(&before, &d, "new").unwrap(), before);
    }

    #[test]
    fn a_holder_read_in_the_millisecond_it_was_first_seen_shows_no_more_than_its_lease() {
        let (watches, origin) = (PermitWatches::default(), Instant::now());
        let mut before = stored();
        before.holders.truncate(1);
        before.holders[0].lease = 100;
        // First seen 50.3 ms after the origin: its lease starts at 51 (rounded up), and now
        // reads 50 (rounded down).
        let at = origin + Duration::from_micros(50_300);
        let d = draft(&before, "s", &watches, origin, (at, at));
        assert_eq!(d.table.live(d.now)[0].remaining_ms, 101);
        assert_eq!(holders_of(&before, &d)[0].remaining_ms, 100);
    }

    #[test]
    fn a_lease_counts_from_the_first_sight_of_its_version_and_restarts_with_a_new_one() {
        let (watches, origin) = (PermitWatches::default(), Instant::now());
        let mut before = stored();
        before.holders.truncate(1);
        before.holders[0].lease = 100;
        let first = origin + Duration::from_millis(50);
        let d = draft(&before, "s", &watches, origin, (first, first));
        assert_eq!(d.table.holders[0].expires, 150);
        // Seen again later: the count goes on from the first sight.
        let later = first + Duration::from_millis(80);
        let d = draft(&before, "s", &watches, origin, (later, later));
        assert_eq!((d.table.holders[0].expires, d.now), (150, 130));
        before.holders[0].version = "va2".into();
        let renewed = first + Duration::from_millis(90);
        let d = draft(&before, "s", &watches, origin, (renewed, renewed));
        assert_eq!(d.table.holders[0].expires, 240);
    }
}
