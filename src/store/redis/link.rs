//! How a store reaches Redis: one server ([`Node`]), a Redis Cluster or the primary that
//! Sentinel names; every command of the store goes through [`RedisStore::exec`] or, for many
//! leases in one round trip, [`RedisStore::batch`], which pick the way and add the replica
//! acknowledgement (`WAIT`) that `acks` asks for.

use super::batcher::Command;
use super::connection::Node;
use super::errors::{closed, store_err};
use super::{cluster, parse, script_reply, sentinel, Acks, RedisStore};
use crate::store::{ExtendItem, StoreError, StoreResult};
use redis::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How a store reaches Redis.
pub(super) enum Link {
    /// One server.
    Single(Arc<Node>),
    /// A Redis Cluster.
    Cluster(cluster::Cluster),
    /// The primary that Redis Sentinel names, followed across failovers.
    Sentinel(Box<sentinel::Sentinel>),
}

impl RedisStore {
    /// Whether this store is a cluster (announcements then use sharded pub/sub).
    pub(super) fn sharded(&self) -> &'static [u8] {
        match self.link {
            Link::Cluster(_) => b"1",
            Link::Single(_) | Link::Sentinel(_) => b"0",
        }
    }

    pub(super) fn check_open(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        Ok(())
    }

    /// Sends one command: through the batcher to one server (the primary, under Sentinel), or
    /// routed by its first key in a cluster.
    pub(super) async fn exec(
        &self,
        cmd: redis::Cmd,
        script: Option<&'static redis::Script>,
    ) -> StoreResult<Value> {
        let wait = None;
        self.exec_with(Command { cmd, script, wait }).await
    }

    /// [`RedisStore::exec`] of a [`Command`], which may carry a `WAIT` (not in a cluster).
    pub(super) async fn exec_with(&self, command: Command) -> StoreResult<Value> {
        self.check_open()?;
        // Boxed apart: inline, their state made every call's future ~4.5 KB (see tests).
        match &self.link {
            Link::Single(node) => node.send(command).await,
            Link::Cluster(c) => Box::pin(c.exec(&command.cmd, command.script))
                .await
                .map_err(store_err),
            Link::Sentinel(s) => Box::pin(s.send(command)).await,
        }
    }

    /// [`RedisStore::exec`] for a write that grants or extends a lease: with `acks`, a `WAIT`
    /// goes right behind it. Returns the reply and whether enough replicas acknowledged.
    pub(super) async fn exec_acked(
        &self,
        cmd: redis::Cmd,
        script: Option<&'static redis::Script>,
    ) -> StoreResult<(Value, bool)> {
        let Some(acks) = self.acks else {
            return Ok((self.exec(cmd, script).await?, true));
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(acks.replicas).arg(acks.timeout_ms);
        let wait = Some(wait);
        match self.exec_with(Command { cmd, script, wait }).await? {
            Value::Array(mut parts) if parts.len() == 2 => {
                let acked = parse::<i64>(parts.pop().unwrap_or(Value::Nil))?;
                let reply = parts.pop().unwrap_or(Value::Nil);
                Ok((reply, acked >= i64::from(acks.replicas)))
            }
            other => Err(StoreError::internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// The error for a write that too few replicas acknowledged.
    pub(super) fn not_acked(&self) -> StoreError {
        let acks = self.acks.unwrap_or(Acks {
            replicas: 0,
            timeout_ms: 0,
        });
        StoreError::timeout(format!(
            "the write was not acknowledged by {} replica(s) within {} ms (waitReplicas)",
            acks.replicas, acks.timeout_ms
        ))
    }

    /// Runs `cmd(item)` (a call of `script` that grants or extends a lease) for every item in
    /// one pipelined round trip, or one per node on a cluster, where each item is routed by
    /// the slot of its `key`; with `acks`, a `WAIT` ends the pipeline. One reply per item, in
    /// order.
    ///
    /// # Cancel Safety
    /// Cancel safe if every call is idempotent.
    pub(super) async fn batch(
        &self,
        items: &[ExtendItem],
        script: &'static redis::Script,
        cmd: impl Fn(&ExtendItem) -> redis::Cmd,
    ) -> Vec<StoreResult<Value>> {
        if items.is_empty() {
            return Vec::new();
        }
        if let Err(e) = self.check_open() {
            return items.iter().map(|_| Err(e.clone())).collect();
        }
        // Under Sentinel, a look-up after a failed pipeline ends within the batch's time.
        let deadline = match &self.link {
            Link::Sentinel(s) => Some(s.deadline()),
            _ => None,
        };
        let node = match &self.link {
            Link::Single(node) => node.clone(),
            Link::Sentinel(s) => match s.node().await {
                Ok(node) => node,
                Err(e) => return items.iter().map(|_| Err(e.clone())).collect(),
            },
            Link::Cluster(c) => return c.extend_many(items, cmd, script).await,
        };
        let mut cmds: Vec<redis::Cmd> = items.iter().map(cmd).collect();
        if let Some(acks) = self.acks {
            // The replicas must have the new leases too (its reply comes last).
            let mut wait = redis::cmd("WAIT");
            wait.arg(acks.replicas).arg(acks.timeout_ms);
            cmds.push(wait);
        }
        let first = node.pipeline(&cmds, script).await;
        if let (Link::Sentinel(sentinel), Err(e), Some(deadline)) = (&self.link, &first, deadline) {
            // Perhaps the primary changed: look it up for the next batch.
            sentinel.check_after(e, deadline).await;
        }
        match first {
            Ok(mut values) => {
                if let Some(acks) = self.acks {
                    let acked = values.pop().and_then(|v| parse::<i64>(v).ok()).unwrap_or(0);
                    if acked < i64::from(acks.replicas) {
                        let e = self.not_acked();
                        return items.iter().map(|_| Err(e.clone())).collect();
                    }
                }
                values.into_iter().map(script_reply).collect()
            }
            Err(e) => items.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}
