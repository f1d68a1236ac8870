//! Operator tools on Redis: force-release a lock, list the held ones (`SCAN`, on every
//! primary of a cluster).

use super::batcher::evalsha;
use super::errors::store_err;
use super::keys::SideKeys;
use super::link::Link;
use super::scripts::FORCE_RELEASE;
use super::{parse, RedisStore};
use crate::store::Call;
use crate::store::{HeldLock, OperatorTools, StoreError, StoreResult};
use futures_util::FutureExt;

/// Most SCAN rounds one listing makes (each reads up to 1 000 keys).
const MAX_SCAN_ROUNDS: usize = 10_000;

impl OperatorTools for RedisStore {
    fn force_release<'a>(&'a self, key: &'a str) -> Call<'a, bool> {
        async move {
            let side = SideKeys::of(key);
            let (data_k, channel) = (side.data(), side.channel());
            let cmd = evalsha(
                &FORCE_RELEASE,
                &[key.as_bytes(), &data_k],
                &[channel.as_bytes(), self.sharded()],
            );
            Ok(parse::<i64>(self.exec(cmd, Some(&FORCE_RELEASE)).await?)? == 1)
        }
        .boxed()
    }

    /// Lock keys are ordinary keys: every key with an expiry under `prefix` is listed (a lock
    /// in the redislock format cannot be told from another key; its token shows as 0). Side
    /// keys (reserved namespace) never are.
    fn list<'a>(&'a self, prefix: &'a str, limit: usize) -> Call<'a, Vec<HeldLock>> {
        async move {
            let mut pattern = String::with_capacity(prefix.len() + 1);
            for c in prefix.chars() {
                if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
            pattern.push('*');
            self.check_open()?;
            // SCAN walks one node: every primary of a cluster in turn.
            let nodes = match &self.link {
                Link::Single(_) | Link::Sentinel(_) => vec![None],
                Link::Cluster(c) => c
                    .primaries()
                    .await
                    .map_err(store_err)?
                    .into_iter()
                    .map(Some)
                    .collect(),
            };
            let mut out = Vec::new();
            for node in nodes {
                let mut cursor = String::from("0");
                for _ in 0..MAX_SCAN_ROUNDS {
                    let (next, keys) = self.scan(node.as_ref(), &cursor, &pattern).await?;
                    for key in keys {
                        // Side keys are not UTF-8 (they start with 0xFF), lock names are.
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
            }
            Ok(out)
        }
        .boxed()
    }
}

impl RedisStore {
    /// One `SCAN` round from `cursor` on this server, or on the cluster node `node`.
    async fn scan(
        &self,
        node: Option<&(String, u16)>,
        cursor: &str,
        pattern: &str,
    ) -> StoreResult<(String, Vec<Vec<u8>>)> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let reply = match (&self.link, node) {
            (Link::Cluster(c), Some((host, port))) => {
                c.on_node(host, *port, cmd).await.map_err(store_err)
            }
            (Link::Single(n), _) => n.query(cmd).await,
            (Link::Sentinel(s), _) => s.node().await?.query(cmd).await,
            (Link::Cluster(_), None) => return Err(StoreError::internal("SCAN needs a node")),
        };
        parse(reply?)
    }
}
