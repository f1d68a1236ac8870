//! Turning a connection URL into a store.

use crate::backend::memory::MemoryStore;
use crate::backend::mysql::{MysqlOptions, MysqlStore};
use crate::backend::redis::{RedisOptions, RedisStore};
use crate::backend::Store;
use crate::core::error::LockError;
use std::sync::Arc;

/// Connection settings that are not part of the URL.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Bound on opening a connection, in ms.
    pub connect_timeout_ms: u64,
    /// Bound on one command's reply, in ms.
    pub response_timeout_ms: u64,
    /// Lease table name (MySQL).
    pub table: String,
    /// Connection pool size (MySQL).
    pub pool_size: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            response_timeout_ms: 5_000,
            table: "deadbolt_locks".into(),
            pool_size: 10,
        }
    }
}

/// The scheme part of `url`, lower-cased, if it has one.
pub fn scheme(url: &str) -> Option<String> {
    url.split_once("://").map(|(s, _)| s.to_ascii_lowercase())
}

/// Builds the store a URL names: `redis://`, `rediss://`, `redis+unix://`, `unix://`,
/// `mysql://`, `mariadb://` or `memory://[name]`. Must run inside a tokio runtime.
pub fn open_store(url: &str, opts: &ConnectOptions) -> Result<Store, LockError> {
    let Some(scheme) = scheme(url) else {
        return Err(LockError::Invalid(format!(
            "The \"url\" argument must be a URL such as redis://host:6379, mysql://user@host/db or memory://; received {url:?}"
        )));
    };
    match scheme.as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" => {
            let redis_opts = RedisOptions {
                connect_timeout_ms: opts.connect_timeout_ms,
                response_timeout_ms: opts.response_timeout_ms,
            };
            // A URL the client cannot parse is bad input, not a store failure.
            let store = RedisStore::connect(url, &redis_opts)
                .map_err(|e| LockError::Invalid(format!("Invalid Redis URL: {e}")))?;
            Ok(Store::Redis(Arc::new(store)))
        }
        "mysql" | "mariadb" => {
            let url = if scheme == "mariadb" {
                format!("mysql{}", &url["mariadb".len()..])
            } else {
                url.to_string()
            };
            let mysql_opts = MysqlOptions {
                table: opts.table.clone(),
                pool_size: opts.pool_size,
                connect_timeout_ms: opts.connect_timeout_ms,
                response_timeout_ms: opts.response_timeout_ms,
            };
            let store = MysqlStore::connect(&url, mysql_opts)
                .map_err(|e| LockError::Invalid(format!("Invalid MySQL URL or options: {e}")))?;
            Ok(Store::Mysql(Arc::new(store)))
        }
        "memory" => {
            let name = url.split_once("://").map(|(_, n)| n).unwrap_or("");
            Ok(Store::Memory(MemoryStore::named(name)))
        }
        other => Err(LockError::Invalid(format!(
            "Unsupported URL scheme \"{other}:\"; use redis:, rediss:, mysql:, mariadb: or memory:"
        ))),
    }
}
