//! Redis Cluster: the same keys and scripts as one server, reached through redis-rs's cluster
//! connection, which routes each command by its first key's slot and follows `MOVED` and
//! `ASK` (and retries `TRYAGAIN` while a slot migrates). Every script's keys share the lock
//! key's slot (see [`super::keys`]), so no command is ever cross-slot.
//!
//! - Heartbeats are batched per node: this module keeps its own copy of the slot map
//!   (`CLUSTER SLOTS`), groups a batch's extensions by the node that serves their slot and
//!   sends one pipeline per node. An extension the node answers with a redirection (the slot
//!   moved) is sent again through the routed connection, and the map is read again before
//!   the next batch.
//! - Wake-ups use sharded pub/sub (Redis 7): the release script announces with `SPUBLISH` on
//!   the key's channel, which hashes to the key's slot, and waiters subscribe with
//!   `SSUBSCRIBE` on a second, RESP3 cluster connection that redis-rs keeps subscribed to the
//!   right node across reconnections and slot moves. `SPUBLISH` counts the subscribers of
//!   the shard, so a releaser knows whether other processes wait, as on one server.

use super::batcher::is_reconnectable;
use crate::store::tls::TlsOptions;
use crate::store::{ExtendItem, StoreError, StoreResult};
use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    ClientTlsConfig, Cmd, PushInfo, RedisError, RedisResult, Script, ServerErrorKind,
    TlsCertificates, TlsMode, Value,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// One node's share of the slots.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    start: u16,
    end: u16,
    host: String,
    port: u16,
}

/// A Redis Cluster, as a [`super::RedisStore`] reaches it.
pub(super) struct Cluster {
    conn: ClusterConnection,
    /// RESP3 connection for `SSUBSCRIBE`; its pushes go to the receiver handed out by
    /// [`Cluster::connect`].
    subscriber: ClusterConnection,
    /// Slot ranges by node, as last read; empty until the first batch of heartbeats.
    slots: Mutex<Vec<Range>>,
    /// Set when a node answered with a redirection: read the map again before the next batch.
    stale: AtomicBool,
}

/// The cluster client for `seeds`, with the store's timeouts and TLS material; `push` makes
/// it a RESP3 client whose pushes (pub/sub messages) go there.
fn client(
    seeds: &[String],
    connect_timeout: Duration,
    response_timeout: Duration,
    tls: Option<&TlsOptions>,
    push: Option<mpsc::UnboundedSender<PushInfo>>,
) -> StoreResult<ClusterClient> {
    let mut builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        // A call is bounded as on one server; redirections and TRYAGAIN during a slot
        // migration are retried quickly inside that bound. A script's keys stay split between
        // two nodes (TRYAGAIN) until the last of them has moved, which can take seconds on a
        // busy slot: the retries must outlast that, so the bound ends them, not their count
        // (8 gave up after ~0.7 s whatever the bound). 56 waits drawn between 5 and 200 ms
        // last ~5.5 s on average, and 10 * 2^56 still fits the u64 of redis-rs's backoff.
        .overall_response_timeout(Some(response_timeout))
        .retries(56)
        .min_retry_wait(5)
        .max_retry_wait(200);
    if let Some(tls) = tls {
        tls.check().map_err(StoreError::invalid)?;
        let client_tls = match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            _ => None,
        };
        builder = builder
            .certs(TlsCertificates {
                client_tls,
                root_cert: tls.ca.clone(),
            })
            .tls(if tls.reject_unauthorized {
                TlsMode::Secure
            } else {
                TlsMode::Insecure
            });
    }
    if let Some(push) = push {
        builder = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push);
    }
    // The material was checked above; redis-rs's own message could quote a URL.
    builder.build().map_err(|e| {
        StoreError::invalid(format!(
            "Invalid Redis Cluster seed URLs or options ({:?})",
            e.kind()
        ))
    })
}

impl Cluster {
    /// A cluster reached through `seeds` (the rest is discovered); no I/O until first use.
    /// Returns the receiver of the subscriber connection's pushes. Must run inside a tokio
    /// runtime.
    pub(super) fn connect(
        seeds: &[String],
        connect_timeout_ms: u64,
        response_timeout_ms: u64,
        tls: Option<&TlsOptions>,
    ) -> StoreResult<(Cluster, mpsc::UnboundedReceiver<PushInfo>)> {
        let (connect_timeout, response_timeout) = (
            Duration::from_millis(connect_timeout_ms),
            Duration::from_millis(response_timeout_ms),
        );
        let commands = client(seeds, connect_timeout, response_timeout, tls, None)?;
        let (push, pushes) = mpsc::unbounded_channel();
        let pubsub = client(seeds, connect_timeout, response_timeout, tls, Some(push))?;
        let cluster = Cluster {
            conn: commands.get_pending_async_connection_with_config(ClusterConfig::default()),
            subscriber: pubsub.get_pending_async_connection_with_config(ClusterConfig::default()),
            slots: Mutex::new(Vec::new()),
            stale: AtomicBool::new(true),
        };
        Ok((cluster, pushes))
    }

    /// Sends `cmd` to the node serving its first key; a script the node does not have is
    /// loaded on every primary and the command sent again.
    pub(super) async fn exec(&self, cmd: &Cmd, script: Option<&Script>) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        let mut result = conn.req_packed_command(cmd).await;
        if result.as_ref().is_err_and(is_reconnectable) {
            result = conn.req_packed_command(cmd).await;
        }
        // A server's error comes back as a value here: make it an error, once the script
        // was loaded if the node did not have it.
        match (result, script) {
            (Ok(Value::ServerError(e)), Some(script))
                if e.kind() == Some(ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(&mut conn).await?;
                match conn.req_packed_command(cmd).await? {
                    Value::ServerError(e) => Err(e.into()),
                    v => Ok(v),
                }
            }
            (Ok(Value::ServerError(e)), _) => Err(e.into()),
            (result, _) => result,
        }
    }

    /// Runs `cmd` on the node at `host:port` (a SCAN, which is per node).
    pub(super) async fn on_node(&self, host: &str, port: u16, cmd: Cmd) -> RedisResult<Value> {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.to_string(),
            port,
        });
        self.conn.clone().route_command(cmd, routing).await
    }

    /// The primaries, as `(host, port)`, from a fresh read of the slot map.
    pub(super) async fn primaries(&self) -> RedisResult<Vec<(String, u16)>> {
        let ranges = self.read_slots().await?;
        let mut nodes: Vec<(String, u16)> = ranges.into_iter().map(|r| (r.host, r.port)).collect();
        nodes.sort();
        nodes.dedup();
        Ok(nodes)
    }

    async fn read_slots(&self) -> RedisResult<Vec<Range>> {
        let reply = self
            .conn
            .clone()
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        let ranges = parse_slots(reply).ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Parse,
                "CLUSTER SLOTS",
                "unexpected reply".to_string(),
            ))
        })?;
        *self.slots.lock().unwrap_or_else(|e| e.into_inner()) = ranges.clone();
        self.stale.store(false, Ordering::Release);
        Ok(ranges)
    }

    /// The node serving `slot`, from the last map read.
    fn node_of(&self, slot: usize) -> Option<(String, u16)> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .find(|r| usize::from(r.start) <= slot && slot <= usize::from(r.end))
            .map(|r| (r.host.clone(), r.port))
    }

    /// Extends `items` with one pipeline per node (`cmd(item)` builds each extension), then
    /// sends any that met a redirection or a failed pipeline through the routed connection.
    pub(super) async fn extend_many(
        &self,
        items: &[ExtendItem],
        cmd: impl Fn(&ExtendItem) -> Cmd,
        script: &Script,
    ) -> Vec<StoreResult<Value>> {
        if self.stale.load(Ordering::Acquire) {
            // Without a map every item goes through the routed connection: slower, still right.
            let _ = self.read_slots().await;
        }
        let mut by_node: HashMap<(String, u16), Vec<usize>> = HashMap::new();
        let mut unrouted = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.node_of(super::keys::hash_slot(item.key.as_bytes())) {
                Some(node) => by_node.entry(node).or_default().push(i),
                None => unrouted.push(i),
            }
        }
        let mut results: Vec<Option<StoreResult<Value>>> = items.iter().map(|_| None).collect();
        let sends = by_node.into_iter().map(|((host, port), members)| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &i in &members {
                pipe.add_command(cmd(&items[i]));
            }
            let routing = SingleNodeRoutingInfo::ByAddress { host, port };
            let mut conn = self.conn.clone();
            async move {
                let n = members.len();
                (members, conn.route_pipeline(pipe, 0, n, routing).await)
            }
        });
        for (members, outcome) in futures_util::future::join_all(sends).await {
            match outcome {
                Ok(values) if values.len() == members.len() => {
                    for (i, value) in members.into_iter().zip(values) {
                        match value {
                            Value::ServerError(e) if redirected(e.kind()) => {
                                self.stale.store(true, Ordering::Release);
                                unrouted.push(i);
                            }
                            Value::ServerError(e) => {
                                results[i] = Some(Err(super::store_err(e.into())))
                            }
                            v => results[i] = Some(Ok(v)),
                        }
                    }
                }
                _ => {
                    self.stale.store(true, Ordering::Release);
                    unrouted.extend(members);
                }
            }
        }
        let retries = unrouted.iter().map(|&i| {
            let c = cmd(&items[i]);
            async move { (i, self.exec(&c, Some(script)).await) }
        });
        for (i, r) in futures_util::future::join_all(retries).await {
            results[i] = Some(r.map_err(super::store_err));
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::internal("an extension was not sent"))))
            .collect()
    }

    /// Subscribes to a release channel (sharded pub/sub, on the node serving its slot).
    pub(super) async fn subscribe(&self, channel: &str) -> RedisResult<()> {
        self.subscriber.clone().ssubscribe(channel).await
    }

    /// Unsubscribes from a release channel.
    pub(super) async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        self.subscriber.clone().sunsubscribe(channel).await
    }
}

/// Whether a node's error says the slot is served elsewhere or is moving (the routed
/// connection follows it).
fn redirected(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::NoScript
        )
    )
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]`.
fn parse_slots(reply: Value) -> Option<Vec<Range>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let int = |v: &Value| match v {
            Value::Int(n) => u16::try_from(*n).ok(),
            _ => None,
        };
        let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
        let Value::Array(primary) = fields.get(2)? else {
            return None;
        };
        let host = match primary.first()? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        out.push(Range {
            start,
            end,
            host,
            port: int(primary.get(1)?)?,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_slots_reply_gives_each_ranges_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("10.0.0.2", 7001),
            ]),
        ]);
        let ranges = parse_slots(reply).unwrap();
        assert_eq!(ranges.len(), 2);
        assert_eq!(
            (ranges[0].start, ranges[0].end, ranges[0].port),
            (0, 5460, 7000)
        );
        assert_eq!(ranges[1].host, "10.0.0.2");
        assert_eq!(parse_slots(Value::Nil), None);
    }
}
