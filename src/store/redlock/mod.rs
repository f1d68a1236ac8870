//! Redlock: one lock over N independent Redis servers (no replication between them), as the
//! Redis documentation publishes it. Each server is a [`RedisStore`] of its own (the same
//! scripts, keys and pub/sub as a single server); this module only combines their answers.
//!
//! - **Acquire** asks every server at once. A server's answer is awaited at most a tenth of the
//!   ttl (at least 50 ms, at most `responseTimeout`: see [`RedlockStore::server_timeout`]); the
//!   outcome is decided as soon as a quorum (⌊N/2⌋ + 1) granted, or too many refused or failed
//!   for one to. A grant is reported only while it is still valid: `ttl − elapsed − drift`
//!   with drift = ttl × 1 % + 2 ms, which is exactly the engine's local deadline reckoned from
//!   this request's send time ([`crate::runtime::lease::lease_end`]): one clock, not two. Without a
//!   quorum or validity, every partial grant is released at once (awaited, bounded by the same
//!   timeout) and the attempt reports busy, so the engine retries after its jittered delay; if
//!   so many servers *failed* that no quorum could have formed, it reports that failure.
//!   Every attempt tags its grants with an id of its own, and the give-back frees only that
//!   attempt's grant ([`attempt`]): a give-back a paused server reads late never frees the
//!   grant of the next attempt of the same owner.
//! - **Extend** (one or a batch) goes to every server and succeeds with a quorum; the local
//!   deadline is then reckoned from its send time as for any store.
//! - **Release** goes to every server; it reports `released` when a quorum freed it.
//! - **Handoff** goes to every server and succeeds with a quorum; otherwise the partial
//!   handoff is undone and the lock released on every server
//!   ([`HandoffOutcome::Released`]), and the waiter acquires it as anyone would.
//! - **Fencing tokens**: each server draws its own token from its slot's counter. The reported
//!   token `T` is the largest a quorum drew. Taking the maximum alone would not be enough: it
//!   may come from a server that is not in the next holder's quorum, whose counters can be
//!   behind. So unless a quorum already drew exactly `T`, a second round ([`RedisStore::
//!   raise_token`], conditional on still holding the lock there) lifts the counters of the
//!   granting servers to `T` before the grant is reported, and needs a quorum too. Hence a
//!   quorum of servers counted to `T` while the holder held the lock on them; the next
//!   holder's quorum shares one of those servers and draws there after that, so its token is
//!   greater. Tokens strictly increase per name in the order the lock is held, as long as
//!   Redlock's own assumptions hold (servers keep their data: with persistence, or restarted
//!   no sooner than a ttl after a crash). When the servers' counters agree (the usual case:
//!   every attempt draws once on every server that answers) there is no second round.
//! - **Wake-ups**: a release is announced by every server that freed it; the N subscriptions
//!   are merged ([`notify`]).

mod attempt;
mod notify;
mod operator;
mod permits;
mod quorum;

use super::redis::{RedisOptions, RedisStore};
use super::{
    Acquisition, ErrorKind, ExtendItem, Handoff, HandoffOutcome, LockInfo, LockStore, NextOwner,
    OperatorTools, Release, ReleaseNotifications, ReleaseOutcome, Renewal, StoreError, StoreResult,
    ValueFormat,
};
use crate::limits;
use crate::runtime::debug::debug;
use crate::runtime::lease::lease_end;
use crate::store::delegate::delegate;
use crate::store::Call;
use attempt::{new_attempt, Latest};
use futures_util::FutureExt;
use notify::Subscriptions;
use quorum::{ask_all, ask_all_items, ask_grants, no_quorum, Answers, Tally};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// A lock store over N independent Redis servers.
pub struct RedlockStore {
    servers: Vec<Arc<RedisStore>>,
    quorum: usize,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// Releases announced by any server, merged.
    released: broadcast::Sender<String>,
    subscriptions: Subscriptions,
    /// Queue tickets of this process's waiters for semaphores ([`permits`]).
    tickets: permits::Tickets,
    /// Requests for permits under way, one per owner at a time ([`permits`]).
    turns: permits::Turns,
    /// Each owner's last attempt while it is not granted ([`attempt`]).
    latest: Latest,
    /// The same for semaphores' permits, by semaphore name ([`permits`]).
    latest_permits: Latest,
    /// The attempt whose grant of permits each owner holds ([`permits`]).
    holding: permits::Holding,
}

/// The servers that granted, with the token each drew.
fn granted(answers: &Answers<Option<u64>>) -> Vec<(usize, u64)> {
    answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            Some(Ok(Some(token))) => Some((i, *token)),
            _ => None,
        })
        .collect()
}

impl RedlockStore {
    /// A store over the servers `urls` (each `redis://` or `rediss://`, `opts.tls` applying to
    /// every `rediss://` one). No I/O happens until the first operation. Must be called inside
    /// a tokio runtime.
    pub fn connect(urls: &[String], opts: &RedisOptions) -> StoreResult<Arc<RedlockStore>> {
        if urls.is_empty() || urls.len() > limits::MAX_REDIS_SERVERS {
            return Err(StoreError::invalid(format!(
                "Redlock takes 1 to {} server URLs, got {}",
                limits::MAX_REDIS_SERVERS,
                urls.len()
            )));
        }
        let servers = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                RedisStore::connect_ordered(url, opts)
                    .map_err(|e| StoreError::invalid(format!("server {}: {e}", i + 1)))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let (released, _) = broadcast::channel(1024);
        for server in &servers {
            // Each server's announcements go out on the merged channel; the forwarder ends
            // when the server's store does.
            let mut from = server.releases();
            let to = released.clone();
            tokio::spawn(async move {
                use broadcast::error::RecvError;
                loop {
                    match from.recv().await {
                        Ok(key) => {
                            let _ = to.send(key);
                        }
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return,
                    }
                }
            });
        }
        Ok(Arc::new(RedlockStore {
            quorum: servers.len() / 2 + 1,
            subscriptions: Subscriptions::new(&servers),
            servers,
            response_timeout: Duration::from_millis(opts.response_timeout_ms),
            connect_timeout: Duration::from_millis(opts.connect_timeout_ms),
            released,
            tickets: permits::Tickets::default(),
            turns: permits::Turns::default(),
            latest: Latest::default(),
            latest_permits: Latest::default(),
            holding: permits::Holding::default(),
        }))
    }

    /// How many servers make a quorum: ⌊N/2⌋ + 1.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The servers, in the order their URLs were given.
    pub fn servers(&self) -> &[Arc<RedisStore>] {
        &self.servers
    }

    /// How long a server's answer to an acquisition (or handoff) of a `ttl_ms` lease is
    /// awaited: a tenth of the ttl, at least 50 ms, never longer than `responseTimeout`.
    pub fn server_timeout(&self, ttl_ms: u64) -> Duration {
        Duration::from_millis(ttl_ms)
            .mul_f64(limits::REDLOCK_SERVER_TIMEOUT_FRACTION)
            .max(Duration::from_millis(limits::REDLOCK_MIN_SERVER_TIMEOUT_MS))
            .min(self.response_timeout)
    }

    /// Settles the token of a grant a quorum gave to `owner` in attempt `tag` (`grants`:
    /// server and token drawn; `tag` `None`: an untagged grant, see [`attempt`]), for a
    /// request sent at `start`: the largest token drawn, once a quorum counted to it (see the
    /// module docs), and while the grant is still valid. `None`: it cannot be reported (the
    /// raise reached too few servers, or the validity ran out).
    async fn settle_grant(
        &self,
        key: &str,
        (owner, tag): (&str, Option<u64>),
        grants: &[(usize, u64)],
        start: Instant,
        ttl_ms: u64,
    ) -> Option<u64> {
        self.settle_with(key, grants, start, ttl_ms, self.quorum, |i, top| {
            self.servers[i].raise_attempt(key, owner, top, tag).boxed()
        })
        .await
    }

    /// [`RedlockStore::settle_grant`] for any kind of grant: `quorum` servers must count to
    /// the token, and `raise(server, token)` lifts one that is behind (if the grant still
    /// holds there; `false` if not).
    async fn settle_with<'a>(
        &'a self,
        what: &str,
        grants: &[(usize, u64)],
        start: Instant,
        ttl_ms: u64,
        quorum: usize,
        raise: impl Fn(usize, u64) -> Call<'a, bool>,
    ) -> Option<u64> {
        let valid_until = lease_end(start, ttl_ms);
        let top = grants.iter().map(|&(_, t)| t).max()?;
        let at_top = grants.iter().filter(|&&(_, t)| t == top).count();
        if at_top < quorum {
            let need = quorum - at_top;
            let behind: Vec<usize> = grants
                .iter()
                .filter(|&&(_, t)| t < top)
                .map(|&(i, _)| i)
                .collect();
            debug!(
                "redlock {what:?}: tokens differ, raising {} server(s) to {top}",
                behind.len()
            );
            let bound = valid_until
                .saturating_duration_since(Instant::now())
                .min(self.server_timeout(ttl_ms));
            let calls = behind.iter().map(|&i| raise(i, top)).collect();
            let raised = ask_all(calls, Some(bound), |a| {
                Tally::of(a, |owned| *owned).settled(need)
            })
            .await;
            if Tally::of(&raised, |owned| *owned).yes < need {
                return None;
            }
        }
        (Instant::now() < valid_until).then_some(top)
    }

    /// Gives back what attempt `tag` for `owner` may have taken (`had_data`: with a
    /// payload): releases that attempt's grant, and no other of the same owner (see
    /// [`attempt`]; `tag` `None`: an untagged grant, released by owner), on every server that
    /// did not refuse (one that failed or was not heard from may have granted all the same:
    /// the release reaches it after the acquisition, see [`RedisStore::connect_ordered`]),
    /// and waits, at most `bound`, for the answers of all but those that already timed out:
    /// those are paused or cut off, and would only make the caller wait a second time for
    /// nothing.
    async fn undo(
        &self,
        key: &str,
        (owner, tag, had_data): (&str, Option<u64>, bool),
        answers: &Answers<Option<u64>>,
        bound: Duration,
    ) {
        self.undo_with(key, answers, bound, |i| {
            let server = &self.servers[i];
            match tag {
                Some(attempt) => server
                    .release_attempt(key, owner, attempt, had_data)
                    .map(|r| r.map(drop))
                    .boxed(),
                None => server
                    .release(key, Release::new(owner))
                    .map(|r| r.map(drop))
                    .boxed(),
            }
        })
        .await
    }

    /// [`RedlockStore::undo`] for any kind of grant: `give_back(server)` gives it back on one.
    async fn undo_with<'a>(
        &'a self,
        what: &str,
        answers: &Answers<Option<u64>>,
        bound: Duration,
        give_back: impl Fn(usize) -> Call<'a, ()>,
    ) {
        let targets: Vec<(usize, bool)> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| !matches!(a, Some(Ok(None))))
            .map(|(i, a)| (i, matches!(a, Some(Err(e)) if e.kind == ErrorKind::Timeout)))
            .collect();
        if targets.is_empty() {
            return;
        }
        debug!("redlock {what:?}: no valid quorum, undoing the partial grant");
        let calls = targets.iter().map(|&(i, _)| give_back(i)).collect();
        ask_all(calls, Some(bound), |a| {
            targets
                .iter()
                .zip(a)
                .all(|(&(_, timed_out), answer)| timed_out || answer.is_some())
        })
        .await;
    }

    /// See [`LockStore::try_acquire`]. An
    /// [`ValueFormat::Unfenced`](crate::store::ValueFormat::Unfenced) acquisition draws tokens
    /// all the same: the quorum's token is raised on every server that granted it, which
    /// needs one.
    ///
    /// # Cancel Safety
    /// Not cancel safe: servers may hold the lock when the future is dropped.
    pub async fn try_acquire(&self, key: &str, acq: Acquisition<'_>) -> StoreResult<Option<u64>> {
        let (owner, ttl_ms, data) = (acq.owner, acq.ttl_ms, acq.data);
        let format = acq.format.with_token();
        let start = Instant::now();
        let bound = self.server_timeout(ttl_ms);
        let q = self.quorum;
        // A fresh attempt: its grants are its own (see `attempt`). Plain values (the bare
        // owner, redislock's wire format) have no room for a tag.
        let attempt = new_attempt();
        let tag = (format == ValueFormat::Fenced).then_some(attempt);
        match tag {
            Some(attempt) => self
                .latest
                .started(key, owner, attempt, self.attempt_lasts(ttl_ms)),
            // An earlier tagged grant of the owner's must not tag this one's release.
            None => self.latest.forget(key, owner, None),
        }
        let calls = self
            .servers
            .iter()
            .map(|s| s.try_acquire_attempt(key, owner, ttl_ms, data, format, attempt))
            .collect();
        let (answers, tally) = ask_grants(calls, bound, q).await;
        if tally.yes >= q {
            let grants = granted(&answers);
            if let Some(token) = self
                .settle_grant(key, (owner, tag), &grants, start, ttl_ms)
                .await
            {
                if let Some(attempt) = tag {
                    let lasts = self.attempt_lasts(ttl_ms);
                    self.latest.settled(key, owner, attempt, lasts);
                }
                return Ok(Some(token));
            }
        }
        self.undo(key, (owner, tag, data.is_some()), &answers, bound)
            .await;
        if tally.failed > self.servers.len() - q {
            return Err(no_quorum(&answers, "acquire"));
        }
        // A refusal the caller hears: no clean-up will follow for this attempt (its undo has
        // run), so it must not make a release by the owner give back this attempt alone; the
        // owner may hold the lock by an earlier grant (a handoff that raced this attempt).
        if let Some(attempt) = tag {
            self.latest.forget(key, owner, Some(attempt));
        }
        Ok(None)
    }

    /// See [`LockStore::extend`]: extended when a quorum extended it.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(&self, key: &str, r: Renewal<'_>) -> StoreResult<bool> {
        let calls = self.servers.iter().map(|s| s.extend(key, r)).collect();
        let q = self.quorum;
        let answers = ask_all(calls, None, |a| Tally::of(a, |owned| *owned).settled(q)).await;
        let extended = self.owned(&answers, "extend");
        if matches!(extended, Ok(true)) {
            self.latest
                .extended(key, r.owner, self.attempt_lasts(r.ttl_ms));
        }
        extended
    }

    /// Whether a quorum says yes; `false` when too many said no for a quorum to, an error
    /// when failures leave it open.
    fn owned(&self, answers: &Answers<bool>, what: &str) -> StoreResult<bool> {
        self.owned_by(answers, self.quorum, what)
    }

    /// [`RedlockStore::owned`] with a quorum of `quorum` servers.
    fn owned_by(&self, answers: &Answers<bool>, quorum: usize, what: &str) -> StoreResult<bool> {
        let t = Tally::of(answers, |owned| *owned);
        if t.yes >= quorum {
            Ok(true)
        } else if t.no > self.servers.len() - quorum {
            Ok(false)
        } else {
            Err(no_quorum(answers, what))
        }
    }

    /// See [`LockStore::extend_many`]: one pipeline per server; each item is decided by a
    /// quorum of its own.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        let calls = self.servers.iter().map(|s| s.extend_many(items)).collect();
        let q = self.quorum;
        ask_all_items(calls, items.len(), |a| {
            Tally::of(a, |owned| *owned).settled(q)
        })
        .await
        .iter()
        .zip(items)
        .map(|(answers, item)| {
            let extended = self.owned(answers, "extend");
            if matches!(extended, Ok(true)) {
                let lasts = self.attempt_lasts(item.ttl_ms);
                self.latest.extended(&item.key, &item.owner, lasts);
            }
            extended
        })
        .collect()
    }

    /// See [`LockStore::release`]: released when a quorum freed it. Every server is asked to
    /// clear the payload too, whatever `r.had_data` says.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release(&self, key: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let owner = r.owner;
        // A release by the owner is that of its last attempt here, granted or not (the
        // engine's clean-up of an outcome it did not hear, its give-back of a grant that came
        // past its lease, an ordinary release), which must not free a later attempt's grant
        // when it reaches a server late (see `attempt`).
        let calls = match self.latest.release_tag(key, owner) {
            Some(attempt) => self
                .servers
                .iter()
                .map(|s| s.release_attempt(key, owner, attempt, true).boxed())
                .collect(),
            None => self
                .servers
                .iter()
                .map(|s| s.release(key, Release::new(owner)).boxed())
                .collect::<Vec<_>>(),
        };
        let q = self.quorum;
        let answers = ask_all(calls, None, |a| {
            Tally::of(a, |o: &ReleaseOutcome| o.released).let_go(q)
        })
        .await;
        self.release_outcome(&answers, 0)
    }

    /// What releases on every server amount to, `ended` servers having let go already (by a
    /// handoff). Released when a quorum let go, or when the lock may have been on a quorum
    /// (counting the servers that could not answer), this call let go wherever it reached it,
    /// and the unreachable servers are too few to hold it for a quorum (what may remain there
    /// ends with its lease, and nobody needs those servers to grant the key). An error when
    /// the unreachable servers could still make a quorum; not held otherwise (it was on fewer
    /// than a quorum: lost before this call).
    fn release_outcome(
        &self,
        answers: &Answers<ReleaseOutcome>,
        ended: usize,
    ) -> StoreResult<ReleaseOutcome> {
        self.release_outcome_by(answers, ended, self.quorum)
    }

    /// [`RedlockStore::release_outcome`] with a quorum of `quorum` servers.
    fn release_outcome_by(
        &self,
        answers: &Answers<ReleaseOutcome>,
        ended: usize,
        quorum: usize,
    ) -> StoreResult<ReleaseOutcome> {
        let t = Tally::of(answers, |o| o.released);
        let others_waiting = answers
            .iter()
            .any(|a| matches!(a, Some(Ok(o)) if o.others_waiting));
        let let_go = t.yes + ended;
        // Servers that may still hold the lock: those that failed or did not answer.
        let unknown = t.failed + t.silent;
        let maybe_held = let_go + unknown >= quorum;
        if let_go >= quorum || (maybe_held && let_go > 0 && unknown < quorum) {
            return Ok(ReleaseOutcome {
                released: true,
                others_waiting,
            });
        }
        if unknown >= quorum {
            return Err(no_quorum(answers, "release"));
        }
        Ok(ReleaseOutcome {
            released: false,
            others_waiting,
        })
    }

    /// See [`LockStore::handoff_or_release`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may be half handed over when the future is dropped.
    pub async fn handoff_or_release(
        &self,
        key: &str,
        h: Handoff<'_>,
    ) -> StoreResult<HandoffOutcome> {
        let (owner, next) = (h.from, h.next);
        // Tokens are drawn all the same, as for an acquisition: the quorum's is raised.
        let next = &NextOwner {
            format: next.format.with_token(),
            ..*next
        };
        let start = Instant::now();
        let bound = self.server_timeout(next.ttl_ms);
        let q = self.quorum;
        // The next owner's grant is an attempt of its own, as an acquisition's (see
        // `attempt`): the waiter acquires anew with the same owner if this one fails.
        let attempt = new_attempt();
        let tag = (next.format == ValueFormat::Fenced).then_some(attempt);
        match tag {
            Some(attempt) => {
                self.latest
                    .started(key, next.owner, attempt, self.attempt_lasts(next.ttl_ms))
            }
            None => self.latest.forget(key, next.owner, None),
        }
        let calls = self
            .servers
            .iter()
            .map(|s| s.handoff_attempt(key, owner, next, attempt))
            .collect();
        let (answers, tally) = ask_grants(calls, bound, q).await;
        let handed = tally.yes;
        if handed >= q {
            let grants = granted(&answers);
            if let Some(token) = self
                .settle_grant(key, (next.owner, tag), &grants, start, next.ttl_ms)
                .await
            {
                if let Some(attempt) = tag {
                    let lasts = self.attempt_lasts(next.ttl_ms);
                    self.latest.settled(key, next.owner, attempt, lasts);
                }
                return Ok(HandoffOutcome::Handed(token));
            }
        }
        // Not handed over to a quorum in time: the next owner gives back what it got, and the
        // caller's lock is released everywhere (on the servers that handed it over, the
        // caller's hold ended with the handoff).
        let undo = (next.owner, tag, next.data.is_some());
        self.undo(key, undo, &answers, bound).await;
        let release = Release::new(owner);
        let calls = self
            .servers
            .iter()
            .map(|s| s.release(key, release))
            .collect();
        let released = ask_all(calls, Some(self.response_timeout), |_| false).await;
        self.release_outcome(&released, handed)
            .map(HandoffOutcome::Released)
    }

    /// See [`LockStore::handoff`]: [`RedlockStore::handoff_or_release`], `None`
    /// unless handed.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may be half handed over when the future is dropped.
    pub async fn handoff(&self, key: &str, h: Handoff<'_>) -> StoreResult<Option<u64>> {
        Ok(match self.handoff_or_release(key, h).await? {
            HandoffOutcome::Handed(token) => Some(token),
            HandoffOutcome::Released(_) => None,
        })
    }

    /// See [`LockStore::inspect`]: the owner a quorum names, its token as a quorum counted it
    /// (the quorum-th largest), and the lease as long as a quorum keeps it.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> StoreResult<Option<LockInfo>> {
        let calls = self.servers.iter().map(|s| s.inspect(key)).collect();
        let q = self.quorum;
        let answers = ask_all(calls, None, |a| {
            let (best, _) = holders(a);
            let t = Tally::of(a, Option::is_some);
            // A quorum names an owner, or none can any more, not even among the servers that
            // failed (whose silence would make "free" a guess: then every server is heard).
            best >= q || best + t.failed + t.silent < q
        })
        .await;
        let (best, owner) = holders(&answers);
        if best >= q {
            let owner = owner.expect("a quorum names an owner");
            let mut infos: Vec<&LockInfo> = answers
                .iter()
                .filter_map(|a| match a {
                    Some(Ok(Some(info))) if info.owner == owner => Some(info),
                    _ => None,
                })
                .collect();
            let mut tokens: Vec<u64> = infos.iter().map(|i| i.fencing_token).collect();
            tokens.sort_unstable_by(|a, b| b.cmp(a));
            let mut leases: Vec<i64> = infos
                .iter()
                .map(|i| {
                    if i.remaining_ms < 0 {
                        i64::MAX
                    } else {
                        i.remaining_ms
                    }
                })
                .collect();
            leases.sort_unstable_by(|a, b| b.cmp(a));
            let remaining = leases[q - 1];
            infos.sort_by_key(|i| i.data.is_none());
            return Ok(Some(LockInfo {
                owner,
                fencing_token: tokens[q - 1],
                remaining_ms: if remaining == i64::MAX { -1 } else { remaining },
                data: infos[0].data.clone(),
            }));
        }
        let t = Tally::of(&answers, Option::is_some);
        if best + t.failed + t.silent >= q && t.failed > 0 {
            return Err(no_quorum(&answers, "inspect"));
        }
        Ok(None)
    }

    /// See [`LockStore::ping`]: answers when a quorum answers.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> StoreResult<()> {
        let calls = self.servers.iter().map(|s| s.ping()).collect();
        let q = self.quorum;
        let answers = ask_all(calls, None, |a| Tally::of(a, |_| true).settled(q)).await;
        if Tally::of(&answers, |_| true).yes >= q {
            Ok(())
        } else {
            Err(no_quorum(&answers, "ping"))
        }
    }

    /// Closes every server's connections.
    pub async fn close(&self) {
        futures_util::future::join_all(self.servers.iter().map(|s| s.close())).await;
    }
}

/// How many servers name the most named owner, and that owner.
fn holders(answers: &Answers<Option<LockInfo>>) -> (usize, Option<String>) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for a in answers {
        if let Some(Ok(Some(info))) = a {
            *counts.entry(info.owner.as_str()).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(_, n)| n)
        .map_or((0, None), |(o, n)| (n, Some(o.to_string())))
}

/// The contract, delegating to the inherent methods above.
impl LockStore for RedlockStore {
    delegate!(
        try_acquire,
        extend,
        extend_many,
        release,
        handoff,
        handoff_or_release,
        inspect,
        ping,
        acquire_permits,
        extend_permits,
        extend_permits_many,
        release_permits,
        permits,
        close
    );

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
