//! Redis Sentinel: the store talks to the primary that the sentinels name, found with
//! redis-rs's sentinel client (which checks the server's `ROLE`), and looks it up again when
//! the primary lets it down: a refused or broken connection, a timeout, or `READONLY` (a
//! primary demoted to replica). A command that failed that way is sent once more to the new
//! primary: every script is safe to repeat for its owner. Heartbeats and wake-ups follow (the
//! subscriber reconnects to whatever primary is current).

use super::batcher::Command;
use super::{Node, RedisOptions};
use crate::store::{ErrorKind, StoreError, StoreResult};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, TlsCertificates, TlsMode, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Mutex as AsyncMutex;

/// The primary a set of sentinels names, and the connection to it.
pub(super) struct Sentinel {
    /// Looks the primary up; one look-up at a time.
    client: AsyncMutex<SentinelClient>,
    current: Mutex<Option<(String, Arc<Node>)>>,
    opts: RedisOptions,
}

fn node_tls(opts: &RedisOptions) -> Option<(TlsMode, TlsCertificates)> {
    let tls = opts.tls.as_ref()?;
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        }),
        _ => None,
    };
    let mode = if tls.reject_unauthorized {
        TlsMode::Secure
    } else {
        TlsMode::Insecure
    };
    Some((
        mode,
        TlsCertificates {
            client_tls,
            root_cert: tls.ca.clone(),
        },
    ))
}

impl Sentinel {
    /// The primary `name` that `sentinels` (URLs, with their own credentials) monitor, reached
    /// with `auth` (username, password) and `opts`. No I/O.
    pub(super) fn connect(
        sentinels: &[String],
        name: &str,
        auth: (Option<&str>, Option<&str>),
        opts: &RedisOptions,
    ) -> StoreResult<Sentinel> {
        let mut addrs = Vec::with_capacity(sentinels.len());
        let mut sentinel_auth = (None, None);
        for (i, url) in sentinels.iter().enumerate() {
            let info = url.as_str().into_connection_info().map_err(|_| {
                StoreError::invalid(format!("sentinel {} is not a valid URL", i + 1))
            })?;
            if sentinel_auth == (None, None) {
                sentinel_auth = (
                    info.redis_settings().username().map(str::to_string),
                    info.redis_settings().password().map(str::to_string),
                );
            }
            addrs.push(info.addr().clone());
        }
        let tls_sentinels = addrs
            .iter()
            .any(|a| matches!(a, ConnectionAddr::TcpTls { .. }));
        let mut builder = SentinelClientBuilder::new(addrs, name, SentinelServerType::Master)
            .map_err(|e| StoreError::invalid(format!("Invalid sentinels ({:?})", e.kind())))?;
        if let Some(user) = auth.0 {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = auth.1 {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &sentinel_auth.0 {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &sentinel_auth.1 {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let Some((mode, certs)) = node_tls(opts) {
            if let Some(tls) = &opts.tls {
                tls.check().map_err(StoreError::invalid)?;
            }
            builder = builder
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_redis_certificates(certs.clone());
            if tls_sentinels {
                builder = builder
                    .set_client_to_sentinel_tls_mode(mode)
                    .set_client_to_sentinel_certificates(certs);
            }
        }
        let client = builder
            .build()
            .map_err(|e| StoreError::invalid(format!("Invalid sentinels ({:?})", e.kind())))?;
        Ok(Sentinel {
            client: AsyncMutex::new(client),
            current: Mutex::new(None),
            opts: opts.clone(),
        })
    }

    fn current(&self) -> Option<(String, Arc<Node>)> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The primary's node, looked up on first use.
    pub(super) async fn node(&self) -> StoreResult<Arc<Node>> {
        match self.current() {
            Some((_, node)) => Ok(node),
            None => self.look_up(None).await,
        }
    }

    /// Asks the sentinels which server is the primary (at most `connectTimeout` +
    /// `responseTimeout`), unless another caller already moved on from `failed`; switches to
    /// it if it changed.
    async fn look_up(&self, failed: Option<&Arc<Node>>) -> StoreResult<Arc<Node>> {
        let mut client = self.client.lock().await;
        if let Some((_, node)) = self.current() {
            if failed.is_none_or(|f| !Arc::ptr_eq(f, &node)) {
                return Ok(node);
            }
        }
        let bound =
            Duration::from_millis(self.opts.connect_timeout_ms + self.opts.response_timeout_ms);
        let primary = tokio::time::timeout(bound, client.async_get_client())
            .await
            .map_err(|_| StoreError::timeout("no sentinel named the primary in time"))?
            .map_err(|e| {
                StoreError::new(
                    ErrorKind::Unreachable,
                    format!("no sentinel named a reachable primary ({:?})", e.kind()),
                )
            })?;
        let addr = primary.get_connection_info().addr().to_string();
        if let Some((current, node)) = self.current() {
            if current == addr {
                return Ok(node);
            }
        }
        crate::debug!("sentinel: the primary is now another server; switching to it");
        let node = Arc::new(Node::open(primary, &self.opts, false)?);
        enter(&node).await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((addr, node.clone()));
        Ok(node)
    }

    /// After `error` from the current primary: looks the primary up again if the error may
    /// mean it changed.
    pub(super) async fn check_after(&self, error: &StoreError) {
        if primary_may_have_changed(error) {
            if let Some((_, node)) = self.current() {
                let _ = self.look_up(Some(&node)).await;
            }
        }
    }

    /// Sends a command to the primary; if it failed in a way that says the primary may have
    /// changed and the sentinels now name another, sends it there once more.
    pub(super) async fn send(&self, command: Command) -> StoreResult<Value> {
        let node = self.node().await?;
        let first = node.send(command.clone()).await;
        match &first {
            Err(e) if primary_may_have_changed(e) => {
                let next = match self.look_up(Some(&node)).await {
                    Ok(next) => next,
                    Err(_) => return first,
                };
                if Arc::ptr_eq(&next, &node) {
                    return first;
                }
                next.send(command).await
            }
            _ => first,
        }
    }
}

/// How far [`enter`] lifts every fencing counter: more grants than a demoted primary can make
/// before it follows the new one, and room for ~2^31 failovers below `INCR`'s 2^63.
const EPOCH_STEP: u64 = 1 << 32;

/// The replication history whose counters were last lifted (a side key: `0xFF` first).
const EPOCH_KEY: &[u8] = b"\xFFdeadbolt:primary";

/// Readies a primary before any call goes to it. Replication is asynchronous, and after
/// `SENTINEL FAILOVER` the old primary keeps granting (to clients that have not switched)
/// until the sentinels demote it, seconds later; what it granted meanwhile, counter steps
/// included, is then lost, and the promoted replica's counters would hand the same tokens out
/// again: the resource would accept a token it had accepted from another holder. So the first
/// client to meet a primary of a new replication history (`master_replid` changes on
/// promotion) lifts every slot's counter by [`EPOCH_STEP`] in one script, which also marks the
/// history so that it happens once: every token the new primary draws is then above any the
/// old one drew, and a stale holder's writes are refused. Costs two commands per look-up, and
/// one script per failover. A user whose ACL denies `INFO` skips it (and keeps the hazard).
pub(super) async fn enter(node: &Node) -> StoreResult<()> {
    let mut info = redis::cmd("INFO");
    info.arg("replication");
    let text: String = match node.send(Command::plain(info)).await {
        Ok(v) => super::parse(v)?,
        // A user whose ACL denies INFO still gets its locks, without the lift.
        Err(e) if e.kind == ErrorKind::Server => {
            crate::debug!("sentinel: INFO refused; fencing counters not lifted on this primary");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let replid = text
        .lines()
        .find_map(|l| l.strip_prefix("master_replid:"))
        .map(str::trim)
        .ok_or_else(|| StoreError::internal("INFO replication names no master_replid"))?;
    let mut get = redis::cmd("GET");
    get.arg(EPOCH_KEY);
    let seen: Option<Vec<u8>> = super::parse(node.send(Command::plain(get)).await?)?;
    if seen.as_deref() == Some(replid.as_bytes()) {
        return Ok(());
    }
    let mut eval = redis::cmd("EVAL");
    eval.arg(super::scripts::NEW_PRIMARY.as_str())
        .arg(1 + super::keys::SLOTS)
        .arg(EPOCH_KEY);
    for key in super::keys::every_fence_key() {
        eval.arg(key);
    }
    eval.arg(replid).arg(EPOCH_STEP);
    node.send(Command::plain(eval)).await?;
    Ok(())
}

/// Whether `e` may mean the primary changed: it cannot be reached or answered in time, or it
/// refuses writes (or `WAIT`) as a replica.
fn primary_may_have_changed(e: &StoreError) -> bool {
    match e.kind {
        ErrorKind::Unreachable | ErrorKind::Timeout => true,
        ErrorKind::Server => {
            e.message.contains("READONLY")
                || e.message.contains("read only")
                || e.message.contains("replica")
        }
        _ => false,
    }
}
