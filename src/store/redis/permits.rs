//! Counting semaphores on Redis (the rules: [`crate::store::permits`]): one script,
//! `permits.lua`, one `EVALSHA` per operation, decided by the server's `TIME`.
//!
//! A semaphore is one string key, `0xFF deadbolt:permits:{t}<watch key>` (see
//! [`keys::permits_key`]), holding its holders and its queue as one MessagePack array and
//! expiring with the last lease or queued place in it, so an idle semaphore leaves nothing.
//! Its tokens come from the fencing counter of its slot (the one the slot's locks draw from,
//! which only increases), and releases are announced on the release channel of its watch key.
//! All three are reckoned from the watch key ([`watch_key`]), so they share a slot and one
//! script touches them all on a cluster; the lock of the same name has other keys.
//!
//! Server commands per operation (besides `TIME`): an acquisition `GET`s the state, and a
//! grant `INCR`s the counter and `SET`s the state; a refused try writes nothing unless lapsed
//! entries were dropped, and a refused poll of a queued waiter writes only to take its place or
//! renew it once less than half of it is left. A release `GET`s, `SET`s (or `DEL`s) and
//! publishes; a handoff is a release and a grant in one call, reporting the room left, and
//! announces only when someone besides this store's own subscriber listens.

use super::batcher::evalsha;
use super::keys::{self, fence_key, release_channel};
use super::scripts::PERMITS;
use super::{parse, token_reply, RedisStore};
use crate::store::permits::{watch_key, PermitHandoff, PermitHolder, PermitRequest};
use crate::store::{ExtendItem, ReleaseOutcome, StoreError, StoreResult};
use redis::Value;

/// Where a Redlock undo keeps the place of a queued request whose partial grant it gives back.
#[derive(Debug, Clone, Copy)]
pub struct KeepPlace {
    /// Permits the request asks for.
    pub permits: u32,
    /// How long the place is kept, in ms (0: none is kept).
    pub queue_ttl_ms: u64,
    /// The request's ticket (see [`RedisStore::acquire_permits_ticketed`]).
    pub ticket: u64,
}

/// The keys serving semaphore `name`.
struct Keys {
    /// Its watch key, from which the others are reckoned.
    watch: String,
    /// Its state.
    state: Vec<u8>,
}

impl Keys {
    fn of(name: &str) -> Keys {
        let watch = watch_key(name);
        Keys {
            state: keys::permits_key(&watch),
            watch,
        }
    }

    fn fence(&self) -> Vec<u8> {
        fence_key(&self.watch)
    }
}

/// The permits script's `op` on `keys` for `owner` with one number (a ttl or a token).
fn owner_cmd(op: &[u8], keys: &[&[u8]], owner: &str, n: u64) -> redis::Cmd {
    evalsha(
        &PERMITS,
        keys,
        &[op, owner.as_bytes(), n.to_string().as_bytes()],
    )
}

/// An `extend` reply: the semaphore's limit when extended, 0 when not held.
fn limit_reply(v: Value) -> StoreResult<u32> {
    parse::<u32>(v)
}

/// The `read` reply: `[limit, (owner, permits, token, remaining) …]`.
fn holders_reply(v: Value) -> StoreResult<(u32, Vec<PermitHolder>)> {
    let values: Vec<Value> = parse(v)?;
    let mut values = values.into_iter();
    let limit = parse::<u32>(values.next().unwrap_or(Value::Int(0)))?;
    let rest: Vec<Value> = values.collect();
    if !rest.len().is_multiple_of(4) {
        return Err(StoreError::internal("unexpected semaphore reply"));
    }
    let holders = rest
        .chunks(4)
        .map(|h| {
            let token: String = parse(h[2].clone())?;
            let remaining: String = parse(h[3].clone())?;
            Ok(PermitHolder {
                owner: parse(h[0].clone())?,
                permits: parse(h[1].clone())?,
                fencing_token: token.parse().map_err(|_| {
                    StoreError::internal(format!("unexpected fencing token {token:?}"))
                })?,
                remaining_ms: remaining
                    .parse()
                    .map_err(|_| StoreError::internal("unexpected remaining lease"))?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    Ok((limit, holders))
}

impl RedisStore {
    /// Whether this store's subscriber listens on `channel` (someone here watches it).
    fn watches(&self, channel: &str) -> bool {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(channel)
    }

    /// [`LockStore::acquire_permits`](crate::store::LockStore::acquire_permits), with a
    /// `ticket` that orders a refused request among the queued ones instead of its arrival
    /// (0: at the back, as it arrives). Redlock sends the same ticket to every server, so that
    /// they all queue alike, and tags the grant with its `attempt`: only a give-back of that
    /// attempt ([`RedisStore::release_permits_keeping`]) frees it, and a request of another
    /// attempt of the same owner is refused it (see `store::redlock::permits`). Without an
    /// attempt, an owner's permits are its own whatever attempt was granted them.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the script may have run when the future is dropped.
    pub async fn acquire_permits_ticketed(
        &self,
        req: &PermitRequest<'_>,
        ticket: u64,
        attempt: Option<u64>,
    ) -> StoreResult<Option<u64>> {
        let k = Keys::of(req.name);
        let (permits, limit) = (req.permits.to_string(), req.limit.to_string());
        let (ttl, queue_ttl) = (req.ttl_ms.to_string(), req.queue_ttl_ms.to_string());
        let ticket = ticket.to_string();
        let attempt = attempt.map(|a| a.to_string()).unwrap_or_default();
        let cmd = evalsha(
            &PERMITS,
            &[&k.state, &k.fence()],
            &[
                b"acquire",
                req.owner.as_bytes(),
                permits.as_bytes(),
                limit.as_bytes(),
                ttl.as_bytes(),
                queue_ttl.as_bytes(),
                ticket.as_bytes(),
                attempt.as_bytes(),
            ],
        );
        let (reply, acked) = self.exec_acked(cmd, Some(&PERMITS)).await?;
        let token = token_reply(reply)?;
        if token.is_some() && !acked {
            // A grant the replicas may not have could vanish in a failover: give it back.
            let _ = self
                .release_permits_keeping(req.name, req.owner, None, None)
                .await;
            return Err(self.not_acked());
        }
        Ok(token)
    }

    /// [`LockStore::extend_permits`](crate::store::LockStore::extend_permits), reporting the
    /// semaphore's limit (as last asked) when extended, 0 when `owner` holds no permits.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_permits_limit(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> StoreResult<u32> {
        let cmd = owner_cmd(b"extend", &[&Keys::of(name).state], owner, ttl_ms);
        let (reply, acked) = self.exec_acked(cmd, Some(&PERMITS)).await?;
        let limit = limit_reply(reply)?;
        if limit > 0 && !acked {
            return Err(self.not_acked());
        }
        Ok(limit)
    }

    /// [`LockStore::extend_permits_many`](crate::store::LockStore::extend_permits_many) in one
    /// pipeline (one per node on a cluster), each reply as in
    /// [`RedisStore::extend_permits_limit`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_permits_many_limits(&self, items: &[ExtendItem]) -> Vec<StoreResult<u32>> {
        // Keyed by the watch key, which is in the slot of the state: a cluster routes by it.
        let routed: Vec<ExtendItem> = items
            .iter()
            .map(|i| ExtendItem {
                key: watch_key(&i.key),
                ..i.clone()
            })
            .collect();
        let cmd = |item: &ExtendItem| {
            let state = keys::permits_key(&item.key);
            owner_cmd(b"extend", &[&state], &item.owner, item.ttl_ms)
        };
        self.batch(&routed, &PERMITS, cmd)
            .await
            .into_iter()
            .map(|r| r.and_then(limit_reply))
            .collect()
    }

    /// [`LockStore::release_permits`](crate::store::LockStore::release_permits), reporting the
    /// semaphore's limit as last asked (0 when it has no state). `keep`: take a place in the
    /// queue afterwards (Redlock's undo of a partial grant to a request that queues).
    /// `attempt`: give back only that attempt's grant ([`RedisStore::acquire_permits_ticketed`]);
    /// when the owner holds by another attempt, nothing changes.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release_permits_keeping(
        &self,
        name: &str,
        owner: &str,
        keep: Option<KeepPlace>,
        attempt: Option<u64>,
    ) -> StoreResult<(ReleaseOutcome, u32)> {
        let k = Keys::of(name);
        let channel = release_channel(&k.watch);
        let keep = keep.unwrap_or(KeepPlace {
            permits: 0,
            queue_ttl_ms: 0,
            ticket: 0,
        });
        let (permits, queue_ttl, ticket) = (
            keep.permits.to_string(),
            keep.queue_ttl_ms.to_string(),
            keep.ticket.to_string(),
        );
        let attempt = attempt.map(|a| a.to_string()).unwrap_or_default();
        let cmd = evalsha(
            &PERMITS,
            &[&k.state],
            &[
                b"release",
                owner.as_bytes(),
                channel.as_bytes(),
                self.sharded(),
                permits.as_bytes(),
                queue_ttl.as_bytes(),
                ticket.as_bytes(),
                attempt.as_bytes(),
            ],
        );
        let (held, heard, limit): (i64, i64, u32) = parse(self.exec(cmd, Some(&PERMITS)).await?)?;
        // Our own subscriber heard it too if someone here watches the semaphore.
        let ours = i64::from(self.watches(&channel));
        Ok((
            ReleaseOutcome {
                released: held == 1,
                others_waiting: heard > ours,
            },
            limit,
        ))
    }

    /// [`LockStore::handoff_permits`](crate::store::LockStore::handoff_permits) in one script:
    /// the release, then the next owner's request (without a queued place of its own).
    ///
    /// # Cancel Safety
    /// Not cancel safe: `next` may be granted permits nobody hears of until their lease ends.
    pub async fn handoff_permits_once(
        &self,
        owner: &str,
        next: &PermitRequest<'_>,
    ) -> StoreResult<PermitHandoff> {
        let k = Keys::of(next.name);
        let channel = release_channel(&k.watch);
        let (permits, limit, ttl) = (
            next.permits.to_string(),
            next.limit.to_string(),
            next.ttl_ms.to_string(),
        );
        // Our own subscriber, if someone here watches the semaphore: an announcement only it
        // would hear is not made (our waiters learn from the reply).
        let ours = self.watches(&channel);
        let cmd = evalsha(
            &PERMITS,
            &[&k.state, &k.fence()],
            &[
                b"handoff",
                owner.as_bytes(),
                channel.as_bytes(),
                self.sharded(),
                next.owner.as_bytes(),
                permits.as_bytes(),
                limit.as_bytes(),
                ttl.as_bytes(),
                if ours { b"1" } else { b"0" },
            ],
        );
        let (reply, acked) = self.exec_acked(cmd, Some(&PERMITS)).await?;
        // The room (permits free beside holders and queue) tells the engine whether its next
        // waiter could fit.
        let (held, token, _heard, room): (i64, Value, i64, u32) = parse(reply)?;
        let granted = token_reply(token)?;
        if granted.is_some() && !acked {
            // As in acquire: a grant the replicas may not have is given back, and the next
            // owner asks for itself.
            let _ = self
                .release_permits_keeping(next.name, next.owner, None, None)
                .await;
            return Ok(PermitHandoff {
                released: held == 1,
                granted: None,
                room: None,
            });
        }
        Ok(PermitHandoff {
            released: held == 1,
            granted,
            room: Some(room),
        })
    }

    /// [`LockStore::permits`](crate::store::LockStore::permits), with the semaphore's limit as
    /// last asked (0 when it has no state).
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits_limit(&self, name: &str) -> StoreResult<(u32, Vec<PermitHolder>)> {
        let k = Keys::of(name);
        let cmd = evalsha(&PERMITS, &[&k.state], &[b"read"]);
        holders_reply(self.exec(cmd, Some(&PERMITS)).await?)
    }

    /// If `owner` still holds permits of `name` (given an `attempt`, by that attempt's grant),
    /// lifts the fencing counter of the semaphore's slot to at least `token` and makes `token`
    /// the holder's own (Redlock: see [`RedisStore::raise_token`]). Returns whether it held
    /// them.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn raise_permit_token(
        &self,
        name: &str,
        owner: &str,
        token: u64,
        attempt: Option<u64>,
    ) -> StoreResult<bool> {
        let k = Keys::of(name);
        let (token, attempt) = (token.to_string(), attempt.map(|a| a.to_string()));
        let cmd = evalsha(
            &PERMITS,
            &[&k.state, &k.fence()],
            &[
                b"raise",
                owner.as_bytes(),
                token.as_bytes(),
                attempt.as_deref().unwrap_or("").as_bytes(),
            ],
        );
        parse::<i64>(self.exec(cmd, Some(&PERMITS)).await?).map(|n| n == 1)
    }
}

#[cfg(test)]
mod tests;
