//! A single Redis server. All locks on one server share one multiplexed connection
//! (auto-pipelined by redis-rs, with one write per scheduler tick: see [`batcher`]), opened
//! lazily and re-opened after a failure. Waiters in other processes are woken by a pub/sub
//! message published from the release script (see [`pubsub`]). Key layout: [`keys`].

mod batcher;
pub mod keys;
mod pubsub;
mod scripts;
mod tls_client;

use crate::store::tls::TlsOptions;
use crate::store::{
    ErrorKind, ExtendItem, HeldLock, LockInfo, LockStore, NextOwner, OperatorTools,
    ReleaseNotifications, ReleaseOutcome, StoreError, StoreResult,
};
use batcher::{batch_loop, evalsha, is_reconnectable, Request};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use keys::{data_key, fence_key, legacy_fence_key, release_channel, split_value};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink};
use redis::{Client, RedisError, ServerErrorKind, Value};
use scripts::{ACQUIRE, EXTEND, FORCE_RELEASE, HANDOFF, INSPECT, RELEASE};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::{broadcast, mpsc, oneshot};

/// The kind of a redis-rs error, from redis-rs's own predicates.
fn kind_of(e: &RedisError) -> ErrorKind {
    if e.is_timeout() {
        ErrorKind::Timeout
    } else if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        ErrorKind::Unreachable
    } else if matches!(e.kind(), redis::ErrorKind::Server(_)) {
        ErrorKind::Server
    } else if matches!(e.kind(), redis::ErrorKind::Parse) {
        ErrorKind::Internal
    } else {
        // Authentication, a refused TLS handshake, a client-side protocol error: the store
        // cannot be used, as if it could not be reached.
        ErrorKind::Unreachable
    }
}

fn store_err(e: RedisError) -> StoreError {
    StoreError::new(kind_of(&e), e)
}

fn closed() -> StoreError {
    StoreError::closed("the connection has been closed")
}

fn parse<T: redis::FromRedisValue>(v: Value) -> StoreResult<T> {
    T::from_redis_value(v).map_err(StoreError::internal)
}

/// A script's token reply: a decimal string (exact beyond 2^53), or nil when refused.
fn token_reply(v: Value) -> StoreResult<Option<u64>> {
    match parse::<Option<String>>(v)? {
        None => Ok(None),
        Some(t) => t
            .parse()
            .map(Some)
            .map_err(|_| StoreError::internal(format!("unexpected fencing token {t:?}"))),
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

/// A Redis server reached over one shared multiplexed connection.
pub struct RedisStore {
    /// Itself, for the subscriber's reader task.
    me: Weak<RedisStore>,
    client: Client,
    conn: ConnectionManager,
    batcher: mpsc::UnboundedSender<Request>,
    closed: AtomicBool,
    connect_timeout_ms: u64,
    subscriber: AsyncMutex<Option<PubSubSink>>,
    /// Channel → (lock key, number of local watchers); subscribed while present.
    watched: Mutex<HashMap<String, (String, usize)>>,
    /// Released keys announced on watched channels.
    released: broadcast::Sender<String>,
    /// For `rediss://`: that the server speaks TLS, checked before the first connection.
    handshake: Option<tls_client::HandshakeCheck>,
}

impl RedisStore {
    /// Builds the store for `url` (`redis://`, `rediss://`, `redis+unix://`), with
    /// `opts.tls` for a `rediss://` URL. No I/O happens until the first operation.
    ///
    /// Must be called inside a tokio runtime.
    pub fn connect(url: &str, opts: &RedisOptions) -> StoreResult<Arc<RedisStore>> {
        let client = match &opts.tls {
            Some(tls) => tls_client::tls_client(url, tls)?,
            None => Client::open(url).map_err(|e| StoreError::invalid(e.to_string()))?,
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(opts.connect_timeout_ms)))
            .set_response_timeout(Some(Duration::from_millis(opts.response_timeout_ms)))
            // Reconnect a couple of times, then report: a lock call must fail in bounded time.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| StoreError::invalid(e.to_string()))?;
        let (batcher, requests) = mpsc::unbounded_channel();
        tokio::spawn(batch_loop(conn.clone(), requests));
        let (released, _) = broadcast::channel(1024);
        let handshake = tls_client::HandshakeCheck::for_client(&client, opts.connect_timeout_ms);
        Ok(Arc::new_cyclic(|me| RedisStore {
            me: me.clone(),
            client,
            conn,
            batcher,
            closed: AtomicBool::new(false),
            connect_timeout_ms: opts.connect_timeout_ms,
            subscriber: AsyncMutex::new(None),
            watched: Mutex::new(HashMap::new()),
            released,
            handshake,
        }))
    }

    fn conn(&self) -> StoreResult<ConnectionManager> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        Ok(self.conn.clone())
    }

    /// Sends one command through the batcher.
    async fn exec(
        &self,
        cmd: redis::Cmd,
        script: Option<&'static redis::Script>,
    ) -> StoreResult<Value> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        if let Some(check) = &self.handshake {
            check.ensure().await?;
        }
        let (reply, rx) = oneshot::channel();
        self.batcher
            .send(Request { cmd, script, reply })
            .map_err(|_| closed())?;
        match rx.await {
            Ok(result) => result.map_err(store_err),
            Err(_) => Err(closed()),
        }
    }

    /// See [`LockStore::try_acquire`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: the script may have run when the future is dropped.
    pub async fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
        plain: bool,
    ) -> StoreResult<Option<u64>> {
        let (flag, payload): (&[u8], &[u8]) = match data {
            Some(d) => (b"1", d),
            None => (b"0", b""),
        };
        let with_token: &[u8] = if plain { b"0" } else { b"1" };
        let ttl = ttl_ms.to_string();
        let (fence, data_k, legacy) = (fence_key(key), data_key(key), legacy_fence_key(key));
        let cmd = evalsha(
            &ACQUIRE,
            &[key.as_bytes(), &fence, &data_k, legacy.as_bytes()],
            &[owner.as_bytes(), ttl.as_bytes(), with_token, flag, payload],
        );
        token_reply(self.exec(cmd, Some(&ACQUIRE)).await?)
    }

    /// See [`LockStore::extend`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        has_data: bool,
    ) -> StoreResult<bool> {
        let ttl = ttl_ms.to_string();
        let data_k = data_key(key);
        let flag: &[u8] = if has_data { b"1" } else { b"0" };
        let cmd = evalsha(
            &EXTEND,
            &[key.as_bytes(), &data_k],
            &[owner.as_bytes(), ttl.as_bytes(), flag],
        );
        parse::<i64>(self.exec(cmd, Some(&EXTEND)).await?).map(|n| n == 1)
    }

    /// Extends many leases in one pipelined round trip.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_many(&self, items: &[ExtendItem]) -> Vec<StoreResult<bool>> {
        if items.is_empty() {
            return Vec::new();
        }
        let mut conn = match self.conn() {
            Ok(c) => c,
            Err(e) => return items.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for item in items {
            pipe.cmd("EVALSHA")
                .arg(EXTEND.get_hash())
                .arg(2)
                .arg(&item.key)
                .arg(data_key(&item.key))
                .arg(&item.owner)
                .arg(item.ttl_ms)
                .arg(if item.has_data { "1" } else { "0" });
        }
        let mut first = pipe.query_async::<Vec<Value>>(&mut conn).await;
        if first.as_ref().is_err_and(is_reconnectable) {
            first = pipe.query_async::<Vec<Value>>(&mut conn).await;
        }
        // After a server restart the script cache is empty: load it once and send again.
        if let Ok(values) = &first {
            if values
                .iter()
                .any(|v| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript)))
            {
                if let Err(e) = EXTEND.prepare_invoke().load_async(&mut conn).await {
                    return items.iter().map(|_| Err(store_err(e.clone()))).collect();
                }
                first = pipe.query_async::<Vec<Value>>(&mut conn).await;
            }
        }
        match first {
            Ok(values) => values
                .into_iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(n == 1),
                    Value::ServerError(e) => {
                        Err(StoreError::new(ErrorKind::Server, format!("{e:?}")))
                    }
                    other => Err(StoreError::internal(format!("unexpected reply {other:?}"))),
                })
                .collect(),
            Err(e) => {
                let e = store_err(e);
                items.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// See [`LockStore::release`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release(&self, key: &str, owner: &str) -> StoreResult<ReleaseOutcome> {
        let (data_k, channel) = (data_key(key), release_channel(key));
        let cmd = evalsha(
            &RELEASE,
            &[key.as_bytes(), &data_k],
            &[owner.as_bytes(), channel.as_bytes()],
        );
        let n = parse::<i64>(self.exec(cmd, Some(&RELEASE)).await?)?;
        // Our own subscriber heard it too if someone here watches the key.
        let ours = i64::from(
            self.watched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&channel),
        );
        Ok(ReleaseOutcome {
            released: n >= 1,
            others_waiting: n - 1 > ours,
        })
    }

    /// See [`LockStore::handoff`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have been handed over when the future is dropped.
    pub async fn handoff(
        &self,
        key: &str,
        owner: &str,
        next: &NextOwner<'_>,
    ) -> StoreResult<Option<u64>> {
        let ttl = next.ttl_ms.to_string();
        let (fence, data_k) = (fence_key(key), data_key(key));
        let (flag, payload): (&[u8], &[u8]) = match next.data {
            Some(d) => (b"1", d),
            None => (b"0", b""),
        };
        let had: &[u8] = if next.previous_had_data { b"1" } else { b"0" };
        let with_token: &[u8] = if next.plain { b"0" } else { b"1" };
        let cmd = evalsha(
            &HANDOFF,
            &[key.as_bytes(), &fence, &data_k],
            &[
                owner.as_bytes(),
                next.owner.as_bytes(),
                ttl.as_bytes(),
                flag,
                payload,
                had,
                with_token,
            ],
        );
        token_reply(self.exec(cmd, Some(&HANDOFF)).await?)
    }

    /// See [`LockStore::inspect`].
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> StoreResult<Option<LockInfo>> {
        let data_k = data_key(key);
        let cmd = evalsha(&INSPECT, &[key.as_bytes(), &data_k], &[]);
        let reply: InspectReply = parse(self.exec(cmd, Some(&INSPECT)).await?)?;
        Ok(reply.map(|(value, pttl, has_data, data)| {
            let (owner, token) = split_value(&value);
            LockInfo {
                owner: String::from_utf8_lossy(owner).into_owned(),
                // A value without a token was written by redislock or the redislock face.
                fencing_token: token.unwrap_or(0),
                remaining_ms: pttl,
                data: (has_data == 1).then_some(data),
            }
        }))
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
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl_ms: u64,
        data: Option<&'a [u8]>,
        plain: bool,
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        RedisStore::try_acquire(self, key, owner, ttl_ms, data, plain).boxed()
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        ttl_ms: u64,
        has_data: bool,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        RedisStore::extend(self, key, owner, ttl_ms, has_data).boxed()
    }

    fn extend_many<'a>(&'a self, items: &'a [ExtendItem]) -> BoxFuture<'a, Vec<StoreResult<bool>>> {
        RedisStore::extend_many(self, items).boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, StoreResult<ReleaseOutcome>> {
        RedisStore::release(self, key, owner).boxed()
    }

    fn handoff<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        next: &'a NextOwner<'a>,
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        RedisStore::handoff(self, key, owner, next).boxed()
    }

    fn inspect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, StoreResult<Option<LockInfo>>> {
        RedisStore::inspect(self, key).boxed()
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        RedisStore::ping(self).boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        RedisStore::close(self).boxed()
    }

    fn release_notifications(&self) -> Option<&dyn ReleaseNotifications> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorTools> {
        Some(self)
    }
}

/// Most SCAN rounds one listing makes (each reads up to 1 000 keys).
const MAX_SCAN_ROUNDS: usize = 10_000;

impl OperatorTools for RedisStore {
    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, StoreResult<bool>> {
        async move {
            let (data_k, channel) = (data_key(key), release_channel(key));
            let cmd = evalsha(
                &FORCE_RELEASE,
                &[key.as_bytes(), &data_k],
                &[channel.as_bytes()],
            );
            Ok(parse::<i64>(self.exec(cmd, Some(&FORCE_RELEASE)).await?)? == 1)
        }
        .boxed()
    }

    /// Lock keys are ordinary keys: every key with an expiry under `prefix` is listed (a lock
    /// in the redislock format cannot be told from another key; its token shows as 0). Side
    /// keys (reserved namespace) never are.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<HeldLock>>> {
        async move {
            let mut pattern = String::with_capacity(prefix.len() + 1);
            for c in prefix.chars() {
                if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
            pattern.push('*');
            let mut conn = self.conn()?;
            if let Some(check) = &self.handshake {
                check.ensure().await?;
            }
            let mut cursor = String::from("0");
            let mut out = Vec::new();
            for _ in 0..MAX_SCAN_ROUNDS {
                let (next, keys): (String, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(&cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(store_err)?;
                for key in keys {
                    // Side keys are not UTF-8 (they start with 0xFF), lock names always are.
                    let Ok(key) = String::from_utf8(key) else {
                        continue;
                    };
                    if let Some(info) = RedisStore::inspect(self, &key).await? {
                        if info.remaining_ms > 0 {
                            out.push(HeldLock { key, info });
                            if out.len() >= limit {
                                return Ok(out);
                            }
                        }
                    }
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
            Ok(out)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests;
