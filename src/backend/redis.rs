//! A single Redis server. All locks on one server share one multiplexed connection
//! (auto-pipelined by redis-rs), opened lazily and re-opened after a failure. Waiters are woken
//! by a pub/sub message published from the release script, over one shared subscriber
//! connection that is subscribed to a key's channel only while someone here waits on it.

use super::keys::{data_key, fence_key, legacy_fence_key, release_channel, split_value};
use super::scripts::{ACQUIRE, EXTEND, HANDOFF, INSPECT, RELEASE};
use super::tls::TlsOptions;
use super::{BackendError, BackendResult, ExtendItem, LockInfo, ReleaseOutcome};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSubSink};
use redis::{
    Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisError, ServerErrorKind,
    TlsCertificates, Value,
};
use redis::{RedisResult, Script};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::{mpsc, oneshot};

/// Most commands one batch carries (one write on the socket).
const MAX_BATCH: usize = 512;

/// A command waiting for the batcher, with where its reply goes.
struct Request {
    cmd: redis::Cmd,
    /// The script the command runs by hash, to load it if the server answers NOSCRIPT.
    script: Option<&'static Script>,
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// Coalesces the commands issued in one scheduler tick into one pipelined write. Without it
/// the multiplexed connection writes each command with its own syscall, which on a loaded
/// core costs more than the command itself. Batches are sent concurrently, replies are
/// matched by order on the multiplexed connection.
async fn batch_loop(conn: ConnectionManager, mut requests: mpsc::UnboundedReceiver<Request>) {
    while let Some(first) = requests.recv().await {
        // Let every task that is ready this tick queue its command before we send.
        tokio::task::yield_now().await;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        tokio::spawn(send_batch(conn.clone(), batch));
    }
}

async fn send_batch(mut conn: ConnectionManager, batch: Vec<Request>) {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut replies = Vec::with_capacity(batch.len());
    for r in batch {
        pipe.add_command(r.cmd);
        replies.push((r.script, r.reply));
    }
    let mut results = conn.req_packed_commands(&pipe, 0, replies.len()).await;
    if results.as_ref().is_err_and(is_reconnectable) {
        // The connection broke (a server restart, a killed client): the manager reconnects,
        // and every script here is safe to send again (see `scripts`).
        results = conn.req_packed_commands(&pipe, 0, replies.len()).await;
    }
    let values = match results {
        Ok(values) if values.len() == replies.len() => values,
        Ok(values) => {
            let e = BackendError::new(format!(
                "expected {} replies, got {}",
                replies.len(),
                values.len()
            ));
            for (_, reply) in replies {
                let _ = reply.send(Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "pipeline",
                    e.message.clone(),
                ))));
            }
            return;
        }
        Err(e) => {
            for (_, reply) in replies {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
    };
    for (((script, reply), value), cmd) in replies.into_iter().zip(values).zip(pipe.cmd_iter()) {
        let result = match value {
            Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript) => {
                // The script cache is empty (a restart, SCRIPT FLUSH): load it and ask again.
                match script {
                    Some(script) => match script.prepare_invoke().load_async(&mut conn).await {
                        Ok(_) => conn.req_packed_command(cmd).await,
                        Err(e) => Err(e),
                    },
                    None => Err(e.into()),
                }
            }
            Value::ServerError(e) => Err(e.into()),
            v => Ok(v),
        };
        let _ = reply.send(result);
    }
}

/// Whether `e` says the connection broke before a reply came, so the same commands can be
/// sent again on a fresh one (a timeout is not: it already used the caller's time budget).
fn is_reconnectable(e: &RedisError) -> bool {
    (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout()
}

/// An `EVALSHA` of `script` with `keys` and `args`.
fn evalsha(script: &Script, keys: &[&[u8]], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

fn parse<T: redis::FromRedisValue>(v: Value) -> BackendResult<T> {
    T::from_redis_value(v).map_err(BackendError::new)
}

/// A script's token reply: a decimal string (exact beyond 2^53), or nil when refused.
fn token_reply(v: Value) -> BackendResult<Option<u64>> {
    match parse::<Option<String>>(v)? {
        None => Ok(None),
        Some(t) => t
            .parse()
            .map(Some)
            .map_err(|_| BackendError::new(format!("unexpected fencing token {t:?}"))),
    }
}

/// Reply of the inspect script: value, pttl, has-data flag, data.
type InspectReply = Option<(Vec<u8>, i64, i64, Vec<u8>)>;

/// Called with a lock key whenever a release of that key is announced.
pub type WakeFn = Arc<dyn Fn(&str) + Send + Sync>;

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

/// A client for `url` that uses `tls`. Errors name the option at fault, never its contents.
fn tls_client(url: &str, tls: &TlsOptions) -> BackendResult<Client> {
    tls.check().map_err(BackendError::new)?;
    let info = url.into_connection_info().map_err(backend_err)?;
    let ConnectionAddr::TcpTls {
        host,
        port,
        insecure,
        ..
    } = info.addr().clone()
    else {
        return Err(BackendError::new(
            "options.tls needs a rediss:// URL (TLS over TCP)",
        ));
    };
    tls.check_servername(&host, "Redis")
        .map_err(BackendError::new)?;
    let info = info.set_addr(ConnectionAddr::TcpTls {
        host,
        port,
        // `rediss://…#insecure` keeps meaning what it meant.
        insecure: insecure || !tls.reject_unauthorized,
        tls_params: None,
    });
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        _ => None,
    };
    let certs = TlsCertificates {
        client_tls,
        root_cert: tls.ca.clone(),
    };
    // The material was checked above; redis-rs's own message could quote a line of it.
    Client::build_with_tls(info, certs)
        .map_err(|_| BackendError::new("options.tls: the certificates or key could not be used"))
}

/// A Redis server reached over one shared multiplexed connection.
pub struct RedisStore {
    client: Client,
    conn: ConnectionManager,
    batcher: mpsc::UnboundedSender<Request>,
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
    /// Builds the store for `url` (`redis://`, `rediss://`, `redis+unix://`), with
    /// `opts.tls` for a `rediss://` URL. No I/O happens until the first operation.
    ///
    /// Must be called inside a tokio runtime.
    pub fn connect(url: &str, opts: &RedisOptions) -> BackendResult<RedisStore> {
        let client = match &opts.tls {
            Some(tls) => tls_client(url, tls)?,
            None => Client::open(url).map_err(backend_err)?,
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(opts.connect_timeout_ms)))
            .set_response_timeout(Some(Duration::from_millis(opts.response_timeout_ms)))
            // Reconnect a couple of times, then report: a lock call must fail in bounded time.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(backend_err)?;
        let (batcher, requests) = mpsc::unbounded_channel();
        tokio::spawn(batch_loop(conn.clone(), requests));
        Ok(RedisStore {
            client,
            conn,
            batcher,
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

    /// Sends one command through the batcher.
    async fn exec(&self, cmd: redis::Cmd, script: Option<&'static Script>) -> BackendResult<Value> {
        if self.closed.load(Ordering::Acquire) {
            return Err(BackendError::new("the connection has been closed"));
        }
        let (reply, rx) = oneshot::channel();
        self.batcher
            .send(Request { cmd, script, reply })
            .map_err(|_| BackendError::new("the connection has been closed"))?;
        match rx.await {
            Ok(result) => result.map_err(backend_err),
            Err(_) => Err(BackendError::new("the connection has been closed")),
        }
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
        plain: bool,
    ) -> BackendResult<Option<u64>> {
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

    /// See [`super::Store::extend`].
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        has_data: bool,
    ) -> BackendResult<bool> {
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
    pub async fn release(&self, key: &str, owner: &str) -> BackendResult<ReleaseOutcome> {
        let (data_k, channel) = (data_key(key), release_channel(key));
        let cmd = evalsha(
            &RELEASE,
            &[key.as_bytes(), &data_k],
            &[owner.as_bytes(), channel.as_bytes()],
        );
        let n = parse::<i64>(self.exec(cmd, Some(&RELEASE)).await?)?;
        // Our own subscriber heard it too if someone here watches the key.
        let ours = i64::from(self.watched.lock().unwrap().contains_key(&channel));
        Ok(ReleaseOutcome {
            released: n >= 1,
            others_waiting: n - 1 > ours,
        })
    }

    /// See [`super::Store::handoff`].
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have been handed over when the future is dropped.
    pub async fn handoff(
        &self,
        key: &str,
        owner: &str,
        next: &super::NextOwner<'_>,
    ) -> BackendResult<Option<u64>> {
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

    /// See [`super::Store::inspect`].
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> BackendResult<Option<LockInfo>> {
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

    /// See [`super::Store::ping`].
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> BackendResult<()> {
        parse::<String>(self.exec(redis::cmd("PING"), None).await?).map(|_| ())
    }

    /// Marks the store closed; the shared connection is dropped with the last clone.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.subscriber.lock().await = None;
    }

    /// Number of release channels a local waiter listens to.
    pub fn watched_channels(&self) -> usize {
        self.watched.lock().unwrap().len()
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
