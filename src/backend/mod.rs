//! Stores: each offers the same single-round-trip operations (see docs/design.md).
//! Nothing here knows about retries, heartbeats or JavaScript.

pub mod keys;
pub mod memory;
pub mod mysql;
pub mod redis;
mod scripts;
pub mod tls;

use std::fmt;
use std::sync::Arc;

/// An infrastructure failure: the store could not be reached or answered with an error.
/// Expected outcomes (busy, not owned) are never errors.
#[derive(Debug, Clone)]
pub struct BackendError {
    /// Human-readable cause, suitable for an error's `cause.message`.
    pub message: String,
}

impl BackendError {
    /// Wraps any displayable cause.
    pub fn new(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {}

/// Result of a store operation.
pub type BackendResult<T> = Result<T, BackendError>;

/// What a store knows about a held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// Owner token of the current holder.
    pub owner: String,
    /// The holder's fencing token; 0 when the store cannot tell (a Redis lock taken by
    /// redislock or the redislock face, whose value is the bare owner).
    pub fencing_token: u64,
    /// Remaining lease in milliseconds, by the store's clock (-1: no expiry).
    pub remaining_ms: i64,
    /// Payload stored with the lock, if any.
    pub data: Option<Vec<u8>>,
}

/// One lease to extend in a batch (heartbeats).
#[derive(Debug, Clone)]
pub struct ExtendItem {
    /// Lock name.
    pub key: String,
    /// Owner token.
    pub owner: String,
    /// New remaining lease in milliseconds.
    pub ttl_ms: u64,
    /// Whether a payload was stored with the lock (its lease is extended too).
    pub has_data: bool,
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseOutcome {
    /// Whether the caller held the lock (and this call freed it).
    pub released: bool,
    /// Whether waiters in other processes are known to be listening for this release
    /// (Redis: subscribers other than this process; other stores cannot tell).
    pub others_waiting: bool,
}

/// Who a lock is handed to by [`Store::handoff`].
#[derive(Debug, Clone, Copy)]
pub struct NextOwner<'a> {
    /// Owner token of the next holder.
    pub owner: &'a str,
    /// Its lease in ms.
    pub ttl_ms: u64,
    /// Its payload, if any.
    pub data: Option<&'a [u8]>,
    /// Whether the current holder stored a payload (that must not leak to the next one).
    pub previous_had_data: bool,
    /// Store the owner alone as the value, without the token (the redislock face's wire
    /// format; Redis only).
    pub plain: bool,
}

/// A connected store. Cloning is cheap and shares the connection(s).
#[derive(Clone)]
pub enum Store {
    /// A single Redis server.
    Redis(Arc<redis::RedisStore>),
    /// MySQL or MariaDB.
    Mysql(Arc<mysql::MysqlStore>),
    /// In-process store (no server).
    Memory(Arc<memory::MemoryStore>),
}

impl Store {
    /// Takes `key` for `owner` for `ttl_ms` if it is free or expired. `plain`: store the owner
    /// alone as the value (the redislock wire format; Redis only).
    /// Returns the new fencing token, or `None` when someone else holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: dropping the future after the request was sent may leave the lock taken.
    pub async fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        data: Option<&[u8]>,
        plain: bool,
    ) -> BackendResult<Option<u64>> {
        match self {
            Store::Redis(s) => s.try_acquire(key, owner, ttl_ms, data, plain).await,
            Store::Mysql(s) => {
                s.bounded("try_acquire", s.try_acquire(key, owner, ttl_ms, data))
                    .await
            }
            Store::Memory(s) => Ok(s.try_acquire(key, owner, ttl_ms, data)),
        }
    }

    /// Sets the remaining lease of `key` to `ttl_ms` if `owner` still holds it (and of its
    /// payload, `has_data`).
    ///
    /// # Cancel Safety
    /// Cancel safe: the operation is idempotent.
    pub async fn extend(
        &self,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        has_data: bool,
    ) -> BackendResult<bool> {
        match self {
            Store::Redis(s) => s.extend(key, owner, ttl_ms, has_data).await,
            Store::Mysql(s) => s.bounded("extend", s.extend(key, owner, ttl_ms)).await,
            Store::Memory(s) => Ok(s.extend(key, owner, ttl_ms)),
        }
    }

    /// Extends many leases in as few round trips as the store allows (one pipeline on Redis).
    /// The result has one entry per item, in order.
    ///
    /// # Cancel Safety
    /// Cancel safe: each extension is idempotent.
    pub async fn extend_many(&self, items: &[ExtendItem]) -> Vec<BackendResult<bool>> {
        match self {
            Store::Redis(s) => s.extend_many(items).await,
            Store::Mysql(s) => s.extend_many_bounded(items).await,
            Store::Memory(s) => items
                .iter()
                .map(|i| Ok(s.extend(&i.key, &i.owner, i.ttl_ms)))
                .collect(),
        }
    }

    /// Frees `key` if `owner` still holds it. Returns whether this call freed it.
    ///
    /// # Cancel Safety
    /// Cancel safe: the operation is idempotent.
    pub async fn release(&self, key: &str, owner: &str) -> BackendResult<bool> {
        Ok(self.release_outcome(key, owner).await?.released)
    }

    /// [`Store::release`], also telling whether other processes wait for the key.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release_outcome(&self, key: &str, owner: &str) -> BackendResult<ReleaseOutcome> {
        let local = |released| ReleaseOutcome {
            released,
            others_waiting: false,
        };
        match self {
            Store::Redis(s) => s.release(key, owner).await,
            Store::Mysql(s) => s.bounded("release", s.release(key, owner)).await.map(local),
            Store::Memory(s) => Ok(local(s.release(key, owner))),
        }
    }

    /// If `owner` holds `key`, gives it straight to `next` (new lease, new fencing token) in
    /// one atomic step and returns the token; `None` if `owner` no longer holds it.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the lock may have changed hands when the future is dropped.
    pub async fn handoff(
        &self,
        key: &str,
        owner: &str,
        next: &NextOwner<'_>,
    ) -> BackendResult<Option<u64>> {
        match self {
            Store::Redis(s) => s.handoff(key, owner, next).await,
            Store::Memory(s) => Ok(s.handoff(key, owner, next)),
            Store::Mysql(s) => s.bounded("handoff", s.handoff(key, owner, next)).await,
        }
    }

    /// Reads who holds `key`, or `None` when it is free.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> BackendResult<Option<LockInfo>> {
        match self {
            Store::Redis(s) => s.inspect(key).await,
            Store::Mysql(s) => s.bounded("inspect", s.inspect(key)).await,
            Store::Memory(s) => Ok(s.inspect(key)),
        }
    }

    /// Checks that the store answers.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> BackendResult<()> {
        match self {
            Store::Redis(s) => s.ping().await,
            Store::Mysql(s) => s.bounded("ping", s.ping()).await,
            Store::Memory(_) => Ok(()),
        }
    }

    /// Closes connections. Operations after this fail with a `BackendError`.
    pub async fn close(&self) {
        match self {
            Store::Redis(s) => s.close().await,
            Store::Mysql(s) => s.close().await,
            Store::Memory(_) => {}
        }
    }
}
