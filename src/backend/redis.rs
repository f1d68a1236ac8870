//! A single Redis server. All locks on one server share one multiplexed connection
//! (auto-pipelined by redis-rs), opened lazily and re-opened after a failure. Waiters are woken
//! by a pub/sub message published from the release script, over one shared subscriber
//! connection that is subscribed to a key's channel only while someone here waits on it.

use super::keys::{data_key, fence_key, release_channel};
use super::scripts::{ACQUIRE, EXTEND, INSPECT, RELEASE};
use super::{BackendError, BackendResult, ExtendItem, LockInfo};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink};
use redis::{Client, RedisError, ServerErrorKind, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Mutex as AsyncMutex;

/// Reply of the inspect script: owner, pttl, fencing token, has-data flag, data.
type InspectReply = Option<(Vec<u8>, i64, String, i64, Vec<u8>)>;

/// Called with a lock key whenever a release of that key is announced.
pub type WakeFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Connection settings for a Redis store.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Bound on opening a connection, in ms (default 5 000).
    pub connect_timeout_ms: u64,
    /// Bound on a single command's reply, in ms (default 5 000).
    pub response_timeout_ms: u64,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            response_timeout_ms: 5_000,
        }
    }
}

/// A Redis server reached over one shared multiplexed connection.
pub struct RedisStore {
    client: Client,
    conn: ConnectionManager,
    closed: AtomicBool,
    subscriber: AsyncMutex<Option<PubSubSink>>,
    /// Channel → (lock key → number of local watchers); subscribed while non-empty. Two keys
    /// can share a channel (`x` and `{x}`), so a message wakes every key under its channel.
    watched: Mutex<HashMap<String, HashMap<String, usize>>>,
    wake: Mutex<Option<WakeFn>>,
}

fn backend_err(err: RedisError) -> BackendError {
    BackendError::new(err)
}

impl RedisStore {
    /// Builds the store for `url` (`redis://`, `rediss://`, `redis+unix://`). No I/O happens
    /// until the first operation.
    ///
    /// Must be called inside a tokio runtime.
    pub fn connect(url: &str, opts: &RedisOptions) -> BackendResult<RedisStore> {
        let client = Client::open(url).map_err(backend_err)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(opts.connect_timeout_ms)))
            .set_response_timeout(Some(Duration::from_millis(opts.response_timeout_ms)))
            // Reconnect a couple of times, then report: a lock call must fail in bounded time.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(backend_err)?;
        Ok(RedisStore {
            client,
            conn,
            closed: AtomicBool::new(false),
            subscriber: AsyncMutex::new(None),
            watched: Mutex::new(HashMap::new()),
            wake: Mutex::new(None),
        })
    }

    fn conn(&self) -> BackendResult<ConnectionManager> {
        if self.closed.load(Ordering::Acquire) {
            return Err(BackendError::new("the connection has been closed"));
        }
        Ok(self.conn.clone())
    }

    /// See [`super::Store::try_acquire`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: the script may have run when the future is dropped.
    pub async fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
    ) -> BackendResult<Option<u64>> {
        let mut conn = self.conn()?;
        let (flag, payload): (&str, &[u8]) = match data {
            Some(d) => ("1", d),
            None => ("0", b""),
        };
        ACQUIRE
            .key(key)
            .key(fence_key(key))
            .key(data_key(key))
            .arg(owner)
            .arg(ttl_ms)
            .arg(flag)
            .arg(payload)
            .invoke_async::<Option<u64>>(&mut conn)
            .await
            .map_err(backend_err)
    }

    /// See [`super::Store::extend`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(&self, key: &str, owner: &str, ttl_ms: u64) -> BackendResult<bool> {
        let mut conn = self.conn()?;
        EXTEND
            .key(key)
            .key(data_key(key))
            .arg(owner)
            .arg(ttl_ms)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|n| n == 1)
            .map_err(backend_err)
    }

    /// Extends many leases in one pipelined round trip.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend_many(&self, items: &[ExtendItem]) -> Vec<BackendResult<bool>> {
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
                .arg(item.ttl_ms);
        }
        let mut first = pipe.query_async::<Vec<Value>>(&mut conn).await;
        // After a server restart the script cache is empty: load it once and send again.
        if let Ok(values) = &first {
            if values
                .iter()
                .any(|v| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript)))
            {
                if let Err(e) = EXTEND.prepare_invoke().load_async(&mut conn).await {
                    return items.iter().map(|_| Err(backend_err(e.clone()))).collect();
                }
                first = pipe.query_async::<Vec<Value>>(&mut conn).await;
            }
        }
        match first {
            Ok(values) => values
                .into_iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(n == 1),
                    Value::ServerError(e) => Err(BackendError::new(format!("{e:?}"))),
                    other => Err(BackendError::new(format!("unexpected reply {other:?}"))),
                })
                .collect(),
            Err(e) => {
                let e = backend_err(e);
                items.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// See [`super::Store::release`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release(&self, key: &str, owner: &str) -> BackendResult<bool> {
        let mut conn = self.conn()?;
        RELEASE
            .key(key)
            .key(data_key(key))
            .arg(owner)
            .arg(release_channel(key))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|n| n == 1)
            .map_err(backend_err)
    }

    /// See [`super::Store::inspect`].
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> BackendResult<Option<LockInfo>> {
        let mut conn = self.conn()?;
        let reply: InspectReply = INSPECT
            .key(key)
            .key(fence_key(key))
            .key(data_key(key))
            .invoke_async(&mut conn)
            .await
            .map_err(backend_err)?;
        Ok(reply.map(|(owner, pttl, token, has_data, data)| LockInfo {
            owner: String::from_utf8_lossy(&owner).into_owned(),
            fencing_token: token.parse().unwrap_or(0),
            remaining_ms: pttl,
            data: (has_data == 1).then_some(data),
        }))
    }

    /// See [`super::Store::ping`].
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> BackendResult<()> {
        let mut conn = self.conn()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(|_| ())
            .map_err(backend_err)
    }

    /// Marks the store closed; the shared connection is dropped with the last clone.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.subscriber.lock().await = None;
    }

    /// Sets the function called when a watched key's release is announced.
    pub fn set_wake(&self, wake: WakeFn) {
        *self.wake.lock().unwrap() = Some(wake);
    }

    /// Starts listening for releases of `key`. Each `watch` needs a matching `unwatch`.
    /// A failure to subscribe is not an error: waiters fall back to polling.
    ///
    /// # Cancel Safety
    /// Cancel safe: at worst the subscription is made late or not at all.
    pub async fn watch(self: &Arc<Self>, key: &str) {
        let channel = release_channel(key);
        {
            let mut watched = self.watched.lock().unwrap();
            let keys = watched.entry(channel.clone()).or_default();
            let first = keys.is_empty();
            *keys.entry(key.to_string()).or_insert(0) += 1;
            if !first {
                return;
            }
        }
        if let Some(mut sink) = self.subscriber_sink().await {
            let _ = sink.subscribe(&channel).await;
        }
    }

    /// Stops listening for releases of `key` when no local waiter is left.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn unwatch(&self, key: &str) {
        let channel = release_channel(key);
        {
            let mut watched = self.watched.lock().unwrap();
            let Some(keys) = watched.get_mut(&channel) else {
                return;
            };
            match keys.get_mut(key) {
                Some(count) if *count > 1 => *count -= 1,
                Some(_) => {
                    keys.remove(key);
                }
                None => return,
            }
            if !keys.is_empty() {
                return;
            }
            watched.remove(&channel);
        }
        let sink = self.subscriber.lock().await.clone();
        if let Some(mut sink) = sink {
            let _ = sink.unsubscribe(&channel).await;
        }
    }

    /// The shared subscriber, opened on first use. Its reader task maps each message back to
    /// the lock key and calls the wake function; if the connection drops, the next watch opens
    /// a new one and re-subscribes every watched channel.
    async fn subscriber_sink(self: &Arc<Self>) -> Option<PubSubSink> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let mut guard = self.subscriber.lock().await;
        if let Some(sink) = guard.as_ref() {
            return Some(sink.clone());
        }
        let pubsub = tokio::time::timeout(Duration::from_secs(5), self.client.get_async_pubsub())
            .await
            .ok()?
            .ok()?;
        let (mut sink, mut stream) = pubsub.split();
        let channels: Vec<String> = self.watched.lock().unwrap().keys().cloned().collect();
        for channel in channels {
            let _ = sink.subscribe(&channel).await;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            use futures_util::StreamExt;
            while let Some(msg) = stream.next().await {
                let Some(store) = weak.upgrade() else { return };
                let keys: Vec<String> =
                    match store.watched.lock().unwrap().get(msg.get_channel_name()) {
                        Some(keys) => keys.keys().cloned().collect(),
                        None => continue,
                    };
                let wake = store.wake.lock().unwrap().clone();
                if let Some(wake) = wake {
                    for key in &keys {
                        wake(key);
                    }
                }
            }
            // The subscriber connection ended: forget it so the next watch opens a new one.
            if let Some(store) = weak.upgrade() {
                *store.subscriber.lock().await = None;
            }
        });
        *guard = Some(sink.clone());
        Some(sink)
    }
}
