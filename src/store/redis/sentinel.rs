//! Redis Sentinel: the store talks to the primary that the sentinels name, found with
//! redis-rs's sentinel client (which checks the server's `ROLE`), and looks it up again when
//! the primary lets it down: a refused or broken connection, a timeout, or `READONLY` (a
//! primary demoted to replica). A command that failed that way is sent once more to the new
//! primary: every script is safe to repeat for its owner, and the whole call (look-up and
//! resend included) ends within `connectTimeout + responseTimeout`. Heartbeats and wake-ups
//! follow (the subscriber reconnects to whatever primary is current). Before a primary serves
//! a call, its fencing counters are lifted into the band of the configuration epoch the
//! sentinels named it in ([`enter`]), so tokens never go back across failovers.

use super::batcher::Command;
use super::{Node, RedisOptions};
use crate::runtime::debug::debug;
use crate::store::{ErrorKind, StoreError, StoreResult};
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, TlsCertificates, TlsMode, Value,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;

/// The primary a set of sentinels names, and the connection to it.
pub(super) struct Sentinel {
    /// Looks the primary up; one look-up at a time.
    client: AsyncMutex<SentinelClient>,
    /// One client per sentinel, asked for the primary's configuration epoch.
    sentinels: Vec<Client>,
    /// The name the sentinels monitor the primary by.
    name: String,
    current: Mutex<Option<Current>>,
    opts: RedisOptions,
}

/// The primary in use: its address, the configuration epoch the sentinels named it in (None:
/// they refused to tell) and its node.
#[derive(Clone)]
struct Current {
    addr: String,
    epoch: Option<u64>,
    node: Arc<Node>,
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
        let mut clients = Vec::with_capacity(sentinels.len());
        let mut sentinel_auth = (None, None);
        for (i, url) in sentinels.iter().enumerate() {
            let invalid = || StoreError::invalid(format!("sentinel {} is not a valid URL", i + 1));
            let info = url.as_str().into_connection_info().map_err(|_| invalid())?;
            let tls_url = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            clients.push(match &opts.tls {
                Some(tls) if tls_url => super::tls::tls_client(url, tls).map_err(|_| invalid())?,
                _ => Client::open(info.clone()).map_err(|_| invalid())?,
            });
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
            sentinels: clients,
            name: name.to_string(),
            current: Mutex::new(None),
            opts: opts.clone(),
        })
    }

    fn current(&self) -> Option<Current> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// When a call that starts now must be over: `connectTimeout + responseTimeout`, the
    /// whole of it (look-up and resend included).
    pub(super) fn deadline(&self) -> Instant {
        Instant::now()
            + Duration::from_millis(self.opts.connect_timeout_ms + self.opts.response_timeout_ms)
    }

    /// The primary's node, looked up on first use (by [`Sentinel::deadline`] from now).
    pub(super) async fn node(&self) -> StoreResult<Arc<Node>> {
        self.node_by(self.deadline()).await
    }

    /// The primary's node, looked up on first use (by `deadline`).
    async fn node_by(&self, deadline: Instant) -> StoreResult<Arc<Node>> {
        match self.current() {
            Some(current) => Ok(current.node),
            None => self.look_up(None, deadline).await,
        }
    }

    /// Asks the sentinels which server is the primary and in which configuration epoch they
    /// named it (by `deadline`), unless another caller already moved on from `failed`;
    /// switches to it if it changed, readies it with [`enter`] if it or its epoch is new.
    ///
    /// # Cancel Safety
    /// Cancel safe: a look-up cut short switches to nothing, and [`enter`] is idempotent.
    async fn look_up(
        &self,
        failed: Option<&Arc<Node>>,
        deadline: Instant,
    ) -> StoreResult<Arc<Node>> {
        tokio::time::timeout_at(deadline, self.look_up_now(failed))
            .await
            .map_err(|_| StoreError::timeout("no sentinel named the primary in time"))?
    }

    async fn look_up_now(&self, failed: Option<&Arc<Node>>) -> StoreResult<Arc<Node>> {
        let mut client = self.client.lock().await;
        if let Some(current) = self.current() {
            if failed.is_none_or(|f| !Arc::ptr_eq(f, &current.node)) {
                return Ok(current.node);
            }
        }
        let primary = client.async_get_client().await.map_err(|e| {
            StoreError::new(
                ErrorKind::Unreachable,
                format!("no sentinel named a reachable primary ({:?})", e.kind()),
            )
        })?;
        let addr = primary.get_connection_info().addr().clone();
        let epoch = self.config_epoch(&addr).await?;
        let addr = addr.to_string();
        let node = match self.current() {
            Some(current) if current.addr == addr && current.epoch == epoch => {
                return Ok(current.node)
            }
            // The same server, named again in a later epoch: lifted again.
            Some(current) if current.addr == addr => current.node,
            _ => {
                debug!("sentinel: the primary is now another server; switching to it");
                Arc::new(Node::open(primary, &self.opts, false)?)
            }
        };
        enter(&node, epoch).await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(Current {
            addr,
            epoch,
            node: node.clone(),
        });
        Ok(node)
    }

    /// The configuration epoch in which the sentinels named `primary` (`SENTINEL MASTER`,
    /// every sentinel asked at once, answered once a majority of the sentinels given name
    /// `primary` in the same epoch): it grows with every failover. A sentinel alone is not
    /// believed: while a `SENTINEL FAILOVER` crosses a failover of the sentinels' own, one
    /// can name the old primary with the new epoch for a moment (seen in the fault harness,
    /// where the old primary, restarted, was then lifted into the new one's band and tokens
    /// were drawn twice). None if the sentinels refused the command (an ACL) and none named
    /// anything; an error if no majority named `primary` in one epoch (the primary changing
    /// meanwhile) or answered.
    async fn config_epoch(&self, primary: &ConnectionAddr) -> StoreResult<Option<u64>> {
        let (host, port) = match primary {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.as_str(), *port)
            }
            _ => {
                return Err(StoreError::internal(
                    "the sentinels named a non-TCP primary",
                ))
            }
        };
        let mut asks: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|client| async move {
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(&self.name)
                    .query_async::<HashMap<String, String>>(&mut conn)
                    .await
            })
            .collect();
        // A majority of the sentinels given must name `primary` in one epoch: while a
        // `SENTINEL FAILOVER` crosses a failover of their own, one sentinel can name the old
        // primary with the new epoch, and a server that still answers as a primary would be
        // lifted into the same band as the new one (the same tokens drawn twice).
        let majority = self.sentinels.len() / 2 + 1;
        let mut named: HashMap<u64, usize> = HashMap::new();
        let (mut refused, mut other) = (false, false);
        while let Some(reply) = asks.next().await {
            match reply {
                Ok(m)
                    if m.get("ip").map(String::as_str) == Some(host)
                        && m.get("port").and_then(|p| p.parse().ok()) == Some(port) =>
                {
                    let epoch: u64 = m
                        .get("config-epoch")
                        .and_then(|e| e.parse().ok())
                        .ok_or_else(|| {
                            StoreError::internal("SENTINEL MASTER names no config-epoch")
                        })?;
                    let n = named.entry(epoch).or_insert(0);
                    *n += 1;
                    if *n >= majority {
                        return Ok(Some(epoch));
                    }
                }
                Ok(_) => other = true,
                Err(e) if e.code() == Some("NOPERM") => refused = true,
                Err(_) => {}
            }
        }
        if refused && !other && named.is_empty() {
            debug!("sentinel: SENTINEL MASTER refused; fencing counters lifted per history only");
            return Ok(None);
        }
        Err(StoreError::new(
            ErrorKind::Unreachable,
            "no majority of the sentinels confirmed the primary in one configuration epoch",
        ))
    }

    /// After `error` from the current primary in a call that must be over by `deadline`:
    /// looks the primary up again (by then) if the error may mean it changed.
    pub(super) async fn check_after(&self, error: &StoreError, deadline: Instant) {
        if primary_may_have_changed(error) {
            if let Some(current) = self.current() {
                let _ = self.look_up(Some(&current.node), deadline).await;
            }
        }
    }

    /// Sends a command to the primary; if it failed in a way that says the primary may have
    /// changed and the sentinels now name another, sends it there once more. All within
    /// [`Sentinel::deadline`]: a call to a primary that stopped answering takes
    /// `responseTimeout`, and the look-up and resend get what is left.
    ///
    /// # Cancel Safety
    /// As [`Node::send`]: a command cut short may still run; every script is safe to repeat
    /// for its owner.
    pub(super) async fn send(&self, command: Command) -> StoreResult<Value> {
        let deadline = self.deadline();
        let node = self.node_by(deadline).await?;
        let first = within(deadline, node.send(command.clone())).await;
        match &first {
            Err(e) if primary_may_have_changed(e) => {
                let next = match self.look_up(Some(&node), deadline).await {
                    Ok(next) => next,
                    Err(_) => return first,
                };
                if Arc::ptr_eq(&next, &node) {
                    return first;
                }
                within(deadline, next.send(command)).await
            }
            _ => first,
        }
    }
}

/// `call`, or a timeout once `deadline` passed.
async fn within<T>(
    deadline: Instant,
    call: impl std::future::Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::timeout(
                "no reply within connectTimeout + responseTimeout (the primary looked up again)",
            ))
        })
}

/// How far apart [`enter`] puts the tokens of two configuration epochs: every counter of a
/// primary named in epoch `e` starts at `e` × 2^40 or above. Room for 2^23 failovers below
/// `INCR`'s 2^63, and, within one epoch, for 255 new histories (below) and 2^32 grants each.
const EPOCH_BAND: u64 = 1 << 40;

/// How far [`enter`] lifts every counter on a new replication history: more grants than a
/// server can make and then lose (a restart, the last second before a failover).
const HISTORY_STEP: u64 = 1 << 32;

/// The configuration epoch and replication history whose counters were last lifted,
/// `"<epoch> <master_replid>"` (a side key: `0xFF` first; before epochs, the replid alone).
const EPOCH_KEY: &[u8] = b"\xFFdeadbolt:primary";

/// Readies a primary that the sentinels named in configuration epoch `epoch` (None: unknown)
/// before any call goes to it. Replication is asynchronous, and the primary a failover
/// promotes may lack what the clients last drew: after `SENTINEL FAILOVER` the old primary
/// keeps granting (to clients that have not switched) until the sentinels demote it, seconds
/// later, and what it granted meanwhile is lost; a replica that missed the last primary's
/// history altogether (it could not follow it) can be promoted next, with counters from
/// several failovers back. Lifting by a fixed step once per history fell short there (tokens
/// went back by the step's worth after two quick failovers). The sentinels' configuration
/// epoch grows with every failover, whichever replica wins it, and a sentinel changes a
/// primary's address and epoch together: so the first client to meet a primary in a later
/// epoch than the marker's lifts every slot's counter to at least `epoch` × [`EPOCH_BAND`],
/// above every token drawn in an earlier epoch (fewer than 2^40 per counter and epoch), and
/// by [`HISTORY_STEP`] on top when the replication history (`master_replid`, new on every
/// promotion and restart) is new too, for a primary that restarted with the last second of
/// its writes lost. One script, which also writes the marker: it happens once per epoch and
/// history. Costs `SENTINEL MASTER`, `INFO` and `GET` per look-up. A user whose ACL denies
/// `INFO` skips it (and keeps the hazard); one denied `SENTINEL MASTER` gets the lift per
/// history only.
pub(super) async fn enter(node: &Node, epoch: Option<u64>) -> StoreResult<()> {
    let mut info = redis::cmd("INFO");
    info.arg("replication");
    let text: String = match node.send(Command::plain(info)).await {
        Ok(v) => super::parse(v)?,
        // A user whose ACL denies INFO still gets its locks, without the lift.
        Err(e) if e.kind == ErrorKind::Server => {
            debug!("sentinel: INFO refused; fencing counters not lifted on this primary");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let replid = text
        .lines()
        .find_map(|l| l.strip_prefix("master_replid:"))
        .map(str::trim)
        .ok_or_else(|| StoreError::internal("INFO replication names no master_replid"))?;
    let mark = match epoch {
        Some(e) => format!("{e} {replid}"),
        None => replid.to_string(),
    };
    let mut get = redis::cmd("GET");
    get.arg(EPOCH_KEY);
    let seen: Option<Vec<u8>> = super::parse(node.send(Command::plain(get)).await?)?;
    if seen.as_deref() == Some(mark.as_bytes()) {
        return Ok(());
    }
    let floor = match epoch {
        Some(e) => Some(
            e.checked_mul(EPOCH_BAND)
                .filter(|f| *f < 1 << 62)
                .ok_or_else(|| {
                    StoreError::internal(format!("configuration epoch {e} too large"))
                })?,
        ),
        None => None,
    };
    let text = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    let mut eval = redis::cmd("EVAL");
    eval.arg(super::scripts::NEW_PRIMARY.as_str())
        .arg(1 + super::keys::SLOTS)
        .arg(EPOCH_KEY);
    for key in super::keys::every_fence_key() {
        eval.arg(key);
    }
    eval.arg(text(epoch))
        .arg(replid)
        .arg(text(floor))
        .arg(HISTORY_STEP)
        .arg(text(floor.map(|f| f + HISTORY_STEP)));
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
