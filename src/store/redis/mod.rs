//! A single Redis server, a Redis Cluster or a Sentinel-managed primary, as one
//! [`RedisStore`]. This file holds the store, its options and its lock operations; the rest,
//! one concern per file:
//! - how a call reaches Redis ([`link`]): one server through its connection layer
//!   ([`connection`]); a cluster through redis-rs's cluster connection ([`cluster`]); the
//!   primary that Sentinel names, followed across failovers ([`sentinel`]);
//! - one server's connections: for `redis://` and unix sockets, a connection of deadbolt's
//!   own ([`pipe`], on a [`socket`]) whose replies a driver task reads, written by the thread
//!   that issued the commands when it is in a flush scope, plus that thread's foreground lanes
//!   ([`lane`]: sockets Node's event loop reads); for `rediss://`, redis-rs's multiplexed
//!   connection fed by the [`batcher`], with the TLS client and handshake check of [`tls`];
//! - the Lua scripts ([`scripts`]), the key layout ([`keys`]) and the version-0.1 counters
//!   ([`legacy`]); semaphores ([`permits`], `permits.lua`);
//! - release announcements: a pub/sub message published by the release script, heard by one
//!   subscriber per store ([`notify`]); operator tools ([`operator`]); redis-rs errors as the
//!   store's kinds ([`errors`]).

mod batcher;
mod cluster;
mod connection;
mod errors;
pub mod keys;
#[cfg(unix)]
mod lane;
mod legacy;
mod link;
mod notify;
mod operator;
pub mod permits;
mod pipe;
mod scripts;
mod sentinel;
mod socket;
mod tls;

use crate::store::delegate::delegate;
use crate::store::tls::TlsOptions;
use crate::store::{
    Acquisition, ErrorKind, ExtendItem, Handoff, LockInfo, LockStore, NextOwner, OperatorTools,
    PermitHandoff, PermitHolder, PermitRequest, Release, ReleaseNotifications, ReleaseOutcome,
    Renewal, StoreError, StoreResult, ValueFormat,
};
use crate::store::{Batch, Call};
use batcher::evalsha;
use connection::Node;
use errors::store_err;
use futures_util::FutureExt;
use keys::{data_key, fence_key, legacy_fence_key, split_value, SideKeys, TOKEN_SEPARATOR};
use link::Link;
use redis::aio::PubSubSink;
use redis::{Client, Value};
use scripts::{ACQUIRE, EXTEND, HANDOFF, INSPECT, RAISE, RELEASE, RELEASE_ATTEMPT};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::broadcast;
use tokio::sync::Mutex as AsyncMutex;

fn parse<T: redis::FromRedisValue>(v: Value) -> StoreResult<T> {
    T::from_redis_value(v).map_err(StoreError::internal)
}

/// A script's token reply: a decimal string (exact beyond 2^53), or nil when refused.
fn token_reply(v: Value) -> StoreResult<Option<u64>> {
    // The script's reply is a bulk string of digits (a token may be past 2^53) or nil: read
    // straight from its bytes, without a String made of them; any other reply goes through
    // redis-rs's conversion as before.
    match &v {
        Value::Nil => return Ok(None),
        Value::BulkString(b) => {
            if let Some(t) = std::str::from_utf8(b).ok().and_then(|t| t.parse().ok()) {
                return Ok(Some(t));
            }
        }
        _ => {}
    }
    match parse::<Option<String>>(v)? {
        None => Ok(None),
        Some(t) => t
            .parse()
            .map(Some)
            .map_err(|_| StoreError::internal(format!("unexpected fencing token {t:?}"))),
    }
}

/// One script call's reply in a pipeline: a server's error is the call's.
fn script_reply(v: Value) -> StoreResult<Value> {
    match v {
        Value::ServerError(e) => {
            let kind = if e.code() == "WRONGTYPE" {
                ErrorKind::WrongType
            } else {
                ErrorKind::Server
            };
            Err(StoreError::new(kind, format!("{e:?}")))
        }
        other => Ok(other),
    }
}

/// Reply of the inspect script: value, pttl, has-data flag, data.
type InspectReply = Option<(Vec<u8>, i64, i64, Vec<u8>)>;

/// Connection settings for a Redis store.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Bound on opening a connection, in ms (default 5 000).
    pub connect_timeout_ms: u64,
    /// Bound on a single command's reply, in ms (default 5 000).
    pub response_timeout_ms: u64,
    /// TLS settings for a `rediss://` URL: a private CA, a client certificate. None: the
    /// built-in public roots (and no TLS at all for `redis://`).
    pub tls: Option<TlsOptions>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            response_timeout_ms: 5_000,
            tls: None,
        }
    }
}

/// Replica acknowledgement asked of every write that grants or extends a lease (`WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acks {
    /// Replicas that must have the write.
    pub replicas: u32,
    /// How long to wait for them, in ms.
    pub timeout_ms: u64,
}

/// A Redis server (or cluster) reached over shared multiplexed connections.
pub struct RedisStore {
    /// Itself, for the subscriber's reader task.
    me: Weak<RedisStore>,
    link: Link,
    /// Replica acknowledgement of grants and extensions (Sentinel's `waitReplicas`).
    acks: Option<Acks>,
    closed: AtomicBool,
    connect_timeout_ms: u64,
    subscriber: AsyncMutex<Option<PubSubSink>>,
    /// Channel → (lock key, number of local watchers); subscribed while present.
    watched: Mutex<HashMap<String, (String, usize)>>,
    /// Released keys announced on watched channels.
    released: broadcast::Sender<String>,
    /// Names whose version-0.1 counter the acquire script already looked for.
    legacy_checked: legacy::CheckedNames,
}

impl RedisStore {
    /// Builds the store for `url` (`redis://`, `rediss://`, `redis+unix://`), with
    /// `opts.tls` for a `rediss://` URL. No I/O happens until the first operation.
    ///
    /// Must be called inside a tokio runtime.
    pub fn connect(url: &str, opts: &RedisOptions) -> StoreResult<Arc<RedisStore>> {
        Self::connect_with(url, opts, false)
    }

    /// [`RedisStore::connect`], with `ordered`: operations reach the server in the order they
    /// were issued, even when the caller did not wait for one before issuing the next (see
    /// `batcher::batch_loop`). Redlock needs it; a single server's callers always wait.
    pub fn connect_ordered(url: &str, opts: &RedisOptions) -> StoreResult<Arc<RedisStore>> {
        Self::connect_with(url, opts, true)
    }

    fn connect_with(url: &str, opts: &RedisOptions, ordered: bool) -> StoreResult<Arc<RedisStore>> {
        let client = match &opts.tls {
            Some(tls) => tls::tls_client(url, tls)?,
            None => Client::open(url).map_err(|e| StoreError::invalid(e.to_string()))?,
        };
        let node = Node::open(client, opts, ordered)?;
        Ok(Self::with_link(Link::Single(Arc::new(node)), opts, None))
    }

    fn with_link(link: Link, opts: &RedisOptions, acks: Option<Acks>) -> Arc<RedisStore> {
        let (released, _) = broadcast::channel(1024);
        Arc::new_cyclic(|me| RedisStore {
            me: me.clone(),
            link,
            acks,
            closed: AtomicBool::new(false),
            connect_timeout_ms: opts.connect_timeout_ms,
            subscriber: AsyncMutex::new(None),
            watched: Mutex::new(HashMap::new()),
            released,
            legacy_checked: Default::default(),
        })
    }

    /// The primary that the sentinels `sentinels` name `name` (followed across failovers),
    /// with `opts.tls` for `rediss://` URLs and `auth` (username, password) for the primary.
    /// `acks`: wait for replicas to have every write that grants or extends a lease. No I/O
    /// happens until the first operation. Must be called inside a tokio runtime.
    pub fn connect_sentinel(
        sentinels: &[String],
        name: &str,
        auth: (Option<&str>, Option<&str>),
        opts: &RedisOptions,
        acks: Option<Acks>,
    ) -> StoreResult<Arc<RedisStore>> {
        let sentinel = sentinel::Sentinel::connect(sentinels, name, auth, opts)?;
        Ok(Self::with_link(
            Link::Sentinel(Box::new(sentinel)),
            opts,
            acks,
        ))
    }

    /// A Redis Cluster reached through `seeds` (the other nodes are discovered), with
    /// `opts.tls` for `rediss://` seeds. No I/O happens until the first operation. Must be
    /// called inside a tokio runtime.
    pub fn connect_cluster(seeds: &[String], opts: &RedisOptions) -> StoreResult<Arc<RedisStore>> {
        let (cluster, pushes) = cluster::Cluster::connect(
            seeds,
            opts.connect_timeout_ms,
            opts.response_timeout_ms,
            opts.tls.as_ref(),
        )?;
        let store = Self::with_link(Link::Cluster(cluster), opts, None);
        // The cluster's pushes (sharded announcements) reach the store through a weak link,
        // so that the forwarder never keeps a dropped store alive.
        tokio::spawn(notify::forward_pushes(Arc::downgrade(&store), pushes));
        Ok(store)
    }

    /// The release script's announcement argument: the sharding flag, then the slot's tag
    /// (at most [`keys::MAX_TAG_LEN`] bytes), made without an allocation.
    fn announce_spec(&self, side: &SideKeys) -> ([u8; 1 + keys::MAX_TAG_LEN], usize) {
        let tag = side.tag().as_bytes();
        let mut spec = [0u8; 1 + keys::MAX_TAG_LEN];
        spec[0] = self.sharded()[0];
        spec[1..1 + tag.len()].copy_from_slice(tag);
        (spec, 1 + tag.len())
    }

    /// See [`LockStore::try_acquire`]. The script looks for a counter version 0.1 left for
    /// the name only until this store has been granted the name once (see [`legacy`]).
    ///
    /// An unfenced acquisition ([`ValueFormat::unfenced`]) without a payload is first one
    /// top-level `SET`, which costs Redis a fraction of any script call:
    /// `SET key owner 0xFF NX PX ttl` ([`ValueFormat::Unfenced`]), or redislock's own
    /// `SET key owner PX ttl NX` ([`ValueFormat::PlainUnfenced`], byte for byte what
    /// redislock 1.3 sends). Only when that finds the key taken does the script run (without
    /// drawing a token), to mark the holder's value as waited for, so that its release is
    /// announced, and to tell a retried request its own lock (a `SET NX` sent again after a
    /// lost reply finds it).
    ///
    /// A name that holds another application's data of another kind (a hash, a list…) is
    /// refused with an error of kind [`ErrorKind::WrongType`] naming the key and the kind; that
    /// key is never changed.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the command may have run when the future is dropped.
    pub async fn try_acquire(&self, key: &str, acq: Acquisition<'_>) -> StoreResult<Option<u64>> {
        let Acquisition {
            owner,
            ttl_ms,
            data,
            format,
        } = acq;
        let result = self
            .try_acquire_tagged(key, owner, ttl_ms, data, format, None)
            .await;
        self.name_wrong_type(key, result).await
    }

    /// [`RedisStore::try_acquire`] for one attempt of a Redlock acquisition: a grant with a
    /// token is tagged with `attempt`, so that only [`RedisStore::release_attempt`] of the
    /// same attempt gives it back, and another attempt of the same owner is refused it (see
    /// `scripts::ACQUIRE`). A [`ValueFormat::Plain`] value (the bare owner) is not tagged.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the command may have run when the future is dropped.
    pub async fn try_acquire_attempt(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
        format: ValueFormat,
        attempt: u64,
    ) -> StoreResult<Option<u64>> {
        let tag = (format == ValueFormat::Fenced).then_some(attempt);
        self.try_acquire_tagged(key, owner, ttl_ms, data, format, tag)
            .await
    }

    async fn try_acquire_tagged(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
        format: ValueFormat,
        attempt: Option<u64>,
    ) -> StoreResult<Option<u64>> {
        let unfenced = format.unfenced();
        if unfenced && data.is_none() {
            let mut cmd = redis::cmd("SET");
            if format.plain() {
                // redislock's command, argument for argument.
                cmd.arg(key).arg(owner).arg("PX").arg(ttl_ms).arg("NX");
            } else {
                let mut value = Vec::with_capacity(owner.len() + 1);
                value.extend_from_slice(owner.as_bytes());
                value.push(TOKEN_SEPARATOR);
                cmd.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
            }
            let (reply, acked) = self.exec_acked(cmd, None).await?;
            // redis-rs parses `+OK` as `Value::Okay`.
            match reply {
                Value::Okay => return self.granted(key, owner, 0, acked).await,
                Value::Nil => {}
                other => return Err(StoreError::internal(format!("unexpected reply {other:?}"))),
            }
        }
        // The 0.1 counter matters only to a token: an unfenced request never looks for it.
        let check = !unfenced && self.legacy_checked.must_check(key);
        let mut ttl = itoa::Buffer::new();
        let ttl = ttl.format(ttl_ms);
        let side = SideKeys::of(key);
        let fence = side.fence_inline();
        // The data key goes only with a payload, and the 0.1 counter is named (and so looked
        // at, and its name made) only while this store has not been granted the name.
        let data_k = if data.is_some() {
            side.data()
        } else {
            Vec::new()
        };
        let legacy = if check {
            legacy_fence_key(key)
        } else {
            String::new()
        };
        let mut keys: [&[u8]; 4] = [key.as_bytes(), &fence, &data_k, legacy.as_bytes()];
        let mut n_keys = 2;
        for (present, k) in [(data.is_some(), &*data_k), (check, legacy.as_bytes())] {
            if present {
                keys[n_keys] = k;
                n_keys += 1;
            }
        }
        let mode: &[u8] = match (format, check) {
            (ValueFormat::Unfenced, _) => b"n",
            (ValueFormat::PlainUnfenced, _) => b"pn",
            (ValueFormat::Fenced, false) => b"",
            (ValueFormat::Plain, false) => b"p",
            (ValueFormat::Fenced, true) => b"l",
            (ValueFormat::Plain, true) => b"pl",
        };
        let mut tagged = [0u8; 23];
        let mode: &[u8] = match attempt {
            Some(attempt) => tagged_mode(mode, attempt, &mut tagged),
            None => mode,
        };
        let args: [&[u8]; 4] = [owner.as_bytes(), ttl.as_bytes(), mode, data.unwrap_or(b"")];
        // The mode goes only when it says something or a payload follows it.
        let n_args = if data.is_some() {
            4
        } else if mode.is_empty() {
            2
        } else {
            3
        };
        let (keys, args) = (&keys[..n_keys], &args[..n_args]);
        let cmd = evalsha(&ACQUIRE, keys, args);
        let (reply, acked) = self.exec_acked(cmd, Some(&ACQUIRE)).await?;
        let Some(token) = token_reply(reply)? else {
            return Ok(None);
        };
        if check {
            self.legacy_checked.checked(key);
        }
        self.granted(key, owner, token, acked).await
    }

    /// A grant of `token`, or, when too few replicas acknowledged it, the lock given back
    /// and the error that says so: a grant the replicas may not have could vanish in a
    /// failover.
    async fn granted(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        acked: bool,
    ) -> StoreResult<Option<u64>> {
        if !acked {
            let _ = RedisStore::release(self, key, Release::new(owner)).await;
            return Err(self.not_acked());
        }
        Ok(Some(token))
    }

    /// See [`LockStore::extend`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(&self, key: &str, renewal: Renewal<'_>) -> StoreResult<bool> {
        let Renewal {
            owner,
            ttl_ms,
            has_data,
        } = renewal;
        let ttl = ttl_ms.to_string();
        let data_k = data_key(key);
        let flag: &[u8] = if has_data { b"1" } else { b"0" };
        let cmd = evalsha(
            &EXTEND,
            &[key.as_bytes(), &data_k],
            &[owner.as_bytes(), ttl.as_bytes(), flag],
        );
        let (reply, acked) = self.exec_acked(cmd, Some(&EXTEND)).await?;
        let owned = parse::<i64>(reply)? == 1;
        if owned && !acked {
            return Err(self.not_acked());
        }
        Ok(owned)
    }

    /// Extends many leases in one pipelined round trip.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        let cmd = |item: &ExtendItem| {
            let ttl = item.ttl_ms.to_string();
            let flag: &[u8] = if item.has_data { b"1" } else { b"0" };
            evalsha(
                &EXTEND,
                &[item.key.as_bytes(), &data_key(&item.key)],
                &[item.owner.as_bytes(), ttl.as_bytes(), flag],
            )
        };
        self.batch(items, &EXTEND, cmd)
            .await
            .into_iter()
            .map(|r| r.and_then(parse::<i64>).map(|n| n == 1))
            .collect()
    }

    /// See [`LockStore::release`]: without a payload (`r.had_data: false`) the data key is
    /// not sent (nor deleted: a lock's payload lives and expires with the holder that stored
    /// it).
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release(&self, key: &str, r: Release<'_>) -> StoreResult<ReleaseOutcome> {
        let Release { owner, had_data } = r;
        let side = SideKeys::of(key);
        let data_k = if had_data { side.data() } else { Vec::new() };
        let keys: [&[u8]; 2] = [key.as_bytes(), &data_k];
        let keys = if had_data { &keys[..] } else { &keys[..1] };
        let (spec, spec_len) = self.announce_spec(&side);
        let cmd = evalsha(&RELEASE, keys, &[owner.as_bytes(), &spec[..spec_len]]);
        let n = parse::<i64>(self.exec(cmd, Some(&RELEASE)).await?)?;
        Ok(self.release_reply(&side, n))
    }

    /// What a release script's reply `n` (0: not held, else 1 + the subscribers its
    /// announcement reached) says, for the key of `side`.
    fn release_reply(&self, side: &SideKeys, n: i64) -> ReleaseOutcome {
        // Our own subscriber heard it too if someone here watches the key (asked only when
        // the release was announced and heard at all, which an uncontended one is not).
        let ours = if n > 1 {
            i64::from(
                self.watched
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&side.channel()),
            )
        } else {
            0
        };
        ReleaseOutcome {
            released: n >= 1,
            others_waiting: n - 1 > ours,
        }
    }

    /// Gives back what attempt `attempt` of a Redlock acquisition (or handoff) for `owner`
    /// may have been granted ([`RedisStore::try_acquire_attempt`]), and nothing else: not
    /// the same owner's grant of another attempt, which a give-back that reaches the server
    /// late (its connection was replaced while the server was paused) would otherwise
    /// delete. `had_data`: whether the attempt stored a payload. A grant it frees is
    /// announced as [`RedisStore::release`] announces one.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release_attempt(
        &self,
        key: &str,
        owner: &str,
        attempt: u64,
        had_data: bool,
    ) -> StoreResult<ReleaseOutcome> {
        let side = SideKeys::of(key);
        let data_k = if had_data { side.data() } else { Vec::new() };
        let keys: [&[u8]; 2] = [key.as_bytes(), &data_k];
        let keys = if had_data { &keys[..] } else { &keys[..1] };
        let (spec, spec_len) = self.announce_spec(&side);
        let attempt = attempt.to_string();
        let cmd = evalsha(
            &RELEASE_ATTEMPT,
            keys,
            &[owner.as_bytes(), &spec[..spec_len], attempt.as_bytes()],
        );
        let n = parse::<i64>(self.exec(cmd, Some(&RELEASE_ATTEMPT)).await?)?;
        Ok(self.release_reply(&side, n))
    }

    /// See [`LockStore::handoff`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have been handed over when the future is dropped.
    pub async fn handoff(&self, key: &str, h: Handoff<'_>) -> StoreResult<Option<u64>> {
        self.handoff_tagged(key, h.from, h.next, None).await
    }

    /// [`RedisStore::handoff`] as one attempt of a Redlock handoff: the next owner's grant
    /// (with a token) is tagged with `attempt`, as [`RedisStore::try_acquire_attempt`] tags
    /// one.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have been handed over when the future is dropped.
    pub async fn handoff_attempt(
        &self,
        key: &str,
        owner: &str,
        next: &NextOwner<'_>,
        attempt: u64,
    ) -> StoreResult<Option<u64>> {
        let tag = (next.format == ValueFormat::Fenced).then_some(attempt);
        self.handoff_tagged(key, owner, next, tag).await
    }

    async fn handoff_tagged(
        &self,
        key: &str,
        owner: &str,
        next: &NextOwner<'_>,
        attempt: Option<u64>,
    ) -> StoreResult<Option<u64>> {
        let ttl = next.ttl_ms.to_string();
        let side = SideKeys::of(key);
        let (fence, data_k) = (side.fence(), side.data());
        let (flag, payload): (&[u8], &[u8]) = match next.data {
            Some(d) => (b"1", d),
            None => (b"0", b""),
        };
        let had: &[u8] = if next.previous_had_data { b"1" } else { b"0" };
        let with_token: &[u8] = match next.format {
            ValueFormat::Fenced => b"1",
            ValueFormat::Plain => b"0",
            ValueFormat::Unfenced => b"n",
            ValueFormat::PlainUnfenced => b"pn",
        };
        let attempt = attempt.map(|a| a.to_string());
        let args: [&[u8]; 8] = [
            owner.as_bytes(),
            next.owner.as_bytes(),
            ttl.as_bytes(),
            flag,
            payload,
            had,
            with_token,
            attempt.as_deref().unwrap_or("").as_bytes(),
        ];
        let args = if attempt.is_some() {
            &args[..]
        } else {
            &args[..7]
        };
        let cmd = evalsha(&HANDOFF, &[key.as_bytes(), &fence, &data_k], args);
        let (reply, acked) = self.exec_acked(cmd, Some(&HANDOFF)).await?;
        match token_reply(reply)? {
            // Not acknowledged: the next owner's grant is given back (the caller's lock went
            // with the handoff), and the waiter acquires anew.
            Some(token) => self.granted(key, next.owner, token, acked).await,
            None => Ok(None),
        }
    }

    /// If `owner` still holds `key`, lifts the fencing counter of its slot to at least `token`
    /// and stores `token` as the lock's own (Redlock reports the largest token a quorum drew,
    /// and needs a quorum to count past it: see `store::redlock`). Returns whether `owner`
    /// held it.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn raise_token(&self, key: &str, owner: &str, token: u64) -> StoreResult<bool> {
        self.raise_tagged(key, owner, token, None).await
    }

    /// [`RedisStore::raise_token`] for the grant of one attempt (see
    /// [`RedisStore::try_acquire_attempt`]): only a grant of that attempt counts as held, and
    /// keeps its tag. `None`: an untagged grant (a [`ValueFormat::Plain`] value).
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn raise_attempt(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        attempt: Option<u64>,
    ) -> StoreResult<bool> {
        self.raise_tagged(key, owner, token, attempt).await
    }

    async fn raise_tagged(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        attempt: Option<u64>,
    ) -> StoreResult<bool> {
        let fence = fence_key(key);
        let token = token.to_string();
        let attempt = attempt.map(|a| a.to_string());
        let args: [&[u8]; 3] = [
            owner.as_bytes(),
            token.as_bytes(),
            attempt.as_deref().unwrap_or("").as_bytes(),
        ];
        let args = if attempt.is_some() {
            &args[..]
        } else {
            &args[..2]
        };
        let cmd = evalsha(&RAISE, &[key.as_bytes(), &fence], args);
        parse::<i64>(self.exec(cmd, Some(&RAISE)).await?).map(|n| n == 1)
    }

    /// See [`LockStore::inspect`].
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> StoreResult<Option<LockInfo>> {
        let read = self.read_lock(key).await;
        Ok(self.name_wrong_type(key, read).await?.map(|(_, info)| info))
    }

    /// The lock under `key` and whether its value is one a lock writes (see
    /// [`keys::is_lock_value`]), or None when the key is free.
    async fn read_lock(&self, key: &str) -> StoreResult<Option<(bool, LockInfo)>> {
        let data_k = data_key(key);
        let cmd = evalsha(&INSPECT, &[key.as_bytes(), &data_k], &[]);
        let reply: InspectReply = parse(self.exec(cmd, Some(&INSPECT)).await?)?;
        Ok(reply.map(|(value, pttl, has_data, data)| {
            let (owner, token) = split_value(&value);
            let info = LockInfo {
                owner: String::from_utf8_lossy(owner).into_owned(),
                // A value without a token was written by redislock or the redislock face.
                fencing_token: token.unwrap_or(0),
                remaining_ms: pttl,
                data: (has_data == 1).then_some(data),
            };
            (keys::is_lock_value(&value), info)
        }))
    }

    /// `result`, or, when it failed because `key` holds data of another kind, the error that
    /// says so in words: the key and its kind (read with `TYPE`), and that it was left alone.
    async fn name_wrong_type<T>(&self, key: &str, result: StoreResult<T>) -> StoreResult<T> {
        match result {
            Err(e) if e.kind == ErrorKind::WrongType => {
                let mut cmd = redis::cmd("TYPE");
                cmd.arg(key);
                let kind = match self.exec(cmd, None).await.and_then(parse::<String>) {
                    Ok(kind) => kind,
                    Err(_) => "value of another kind".to_string(),
                };
                Err(StoreError::new(
                    ErrorKind::WrongType,
                    format!(
                        "the key {key:?} holds a Redis {kind} that is not a lock (another \
                         application's data under that name): deadbolt left it as it is; \
                         use another name"
                    ),
                ))
            }
            other => other,
        }
    }

    /// See [`LockStore::ping`].
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> StoreResult<()> {
        parse::<String>(self.exec(redis::cmd("PING"), None).await?).map(|_| ())
    }

    /// Marks the store closed; the shared connection is dropped with the last clone.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.subscriber.lock().await = None;
    }
}

/// The contract, delegating to the inherent methods above.
impl LockStore for RedisStore {
    delegate!(
        try_acquire,
        extend,
        extend_many,
        release,
        handoff,
        inspect,
        ping,
        close
    );

    fn acquire_permits<'a>(&'a self, req: &'a PermitRequest<'a>) -> Call<'a, Option<u64>> {
        self.acquire_permits_ticketed(req, 0, None).boxed()
    }

    fn extend_permits<'a>(&'a self, name: &'a str, renewal: Renewal<'a>) -> Call<'a, bool> {
        self.extend_permits_limit(name, renewal.owner, renewal.ttl_ms)
            .map(|r| r.map(|limit| limit > 0))
            .boxed()
    }

    fn extend_permits_many<'a>(&'a self, items: &'a [ExtendItem]) -> Batch<'a> {
        self.extend_permits_many_limits(items)
            .map(|rs| rs.into_iter().map(|r| r.map(|limit| limit > 0)).collect())
            .boxed()
    }

    fn release_permits<'a>(&'a self, name: &'a str, r: Release<'a>) -> Call<'a, ReleaseOutcome> {
        self.release_permits_keeping(name, r.owner, None, None)
            .map(|r| r.map(|(outcome, _)| outcome))
            .boxed()
    }

    fn handoff_permits<'a>(&'a self, h: Handoff<'a, PermitRequest<'a>>) -> Call<'a, PermitHandoff> {
        self.handoff_permits_once(h.from, h.next).boxed()
    }

    fn permits<'a>(&'a self, name: &'a str) -> Call<'a, Vec<PermitHolder>> {
        self.permits_limit(name)
            .map(|r| r.map(|(_, holders)| holders))
            .boxed()
    }

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

/// `mode` followed by `a` and `attempt` in decimal (the acquire script's attempt tag), in
/// `buf`: a mode is at most 2 bytes and a u64 at most 20 digits.
fn tagged_mode<'a>(mode: &[u8], attempt: u64, buf: &'a mut [u8; 23]) -> &'a [u8] {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(attempt).as_bytes();
    let len = mode.len() + 1 + digits.len();
    buf[..mode.len()].copy_from_slice(mode);
    buf[mode.len()] = b'a';
    buf[mode.len() + 1..len].copy_from_slice(digits);
    &buf[..len]
}

#[cfg(test)]
mod tests;
