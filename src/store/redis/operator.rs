//! Operator tools on Redis: force-release a lock, list the held ones (`SCAN`, on every
//! primary of a cluster).

use super::batcher::evalsha;
use super::errors::store_err;
use super::keys::SideKeys;
use super::link::Link;
use super::scripts::FORCE_RELEASE;
use super::{parse, RedisStore};
use crate::store::Call;
use crate::store::{ErrorKind, HeldLock, OperatorTools, StoreError, StoreResult};
use futures_util::future::join_all;
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
            // A key of another kind (another application's data) is refused, never deleted.
            let reply = self.exec(cmd, Some(&FORCE_RELEASE)).await;
            Ok(parse::<i64>(self.name_wrong_type(key, reply).await?)? == 1)
        }
        .boxed()
    }

    /// Lock keys are ordinary string keys on a server other applications may share: `SCAN`
    /// asks the server for strings under `prefix` only (`MATCH`, `TYPE string`), so hashes,
    /// lists, sets, sorted sets and streams never come back, and a string is listed only when
    /// its value is one a lock writes ([`super::keys::is_lock_value`]: a modern lock, or redislock's
    /// UUID, whose token shows as 0) and it has an expiry. Side keys (reserved namespace)
    /// never are. The candidates of one `SCAN` round are read together (one pipelined batch),
    /// so a listing costs one `SCAN` per 1 000 keys under the prefix plus one read per string.
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
                    // Side keys are not UTF-8 (they start with 0xFF), lock names are.
                    let names: Vec<String> = keys
                        .into_iter()
                        .filter_map(|k| String::from_utf8(k).ok())
                        .collect();
                    // Issued together, the reads leave in one pipelined batch.
                    let reads = join_all(names.iter().map(|k| self.read_lock(k))).await;
                    for (key, read) in names.into_iter().zip(reads) {
                        match read {
                            Ok(Some((true, info))) if info.remaining_ms > 0 => {
                                out.push(HeldLock { key, info });
                                if out.len() >= limit {
                                    return Ok(out);
                                }
                            }
                            // Free since the scan, another application's string, or a key
                            // that changed kind since the scan: not a lock.
                            Ok(_) => {}
                            Err(e) if e.kind == ErrorKind::WrongType => {}
                            Err(e) => return Err(e),
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
            .arg(1000)
            .arg("TYPE")
            .arg("string");
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
