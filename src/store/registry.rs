//! The one table of stores: which URL schemes name each, how to open it from a client's
//! connect options, whether it takes TLS options and which connect options it reads.
//! [`super::open::open_store`] reads it, and so does JavaScript through the binding's
//! `stores()` (`lib/registry.js`: the URL check, the options, the diagnostics' store names,
//! the CLI's help); what cannot read it is checked against it by `__test__/registry.test.js`.
//! Adding a store is its folder, its entry and constructor here, and its test suites (see
//! docs/design.md).
//!
//! The constructors live here, not in the stores' folders: they turn [`ConnectOptions`]
//! (which names every store's options) into each store's own, so a store never imports the
//! table that imports it.

use super::bounded::{bounded, call_timeout};
use super::connect::ConnectOptions;
use super::dynamodb::{DynamoStore, DynamoStoreOptions};
use super::etcd::{EtcdOptions, EtcdStore};
use super::memory::MemoryStore;
use super::mysql::{MysqlOptions, MysqlStore};
use super::postgres::{PostgresOptions, PostgresStore};
use super::redis::{RedisOptions, RedisStore};
use super::sqlite::{SqliteOptions, SqliteStore};
use super::{SharedStore, StoreError, StoreResult};

/// A kind of store, as the registry knows it.
pub struct StoreEntry {
    /// Its name: what diagnostics call it (`redis`, `mysql`, …).
    pub name: &'static str,
    /// The URL schemes that name it, the usual one first.
    pub schemes: &'static [&'static str],
    /// What its URL looks like, for messages and the CLI's help.
    pub example: &'static str,
    /// The schemes among [`StoreEntry::schemes`] that take `options.tls`; an empty list: TLS
    /// options are refused (the store has no TLS of its own, or verifies another way).
    pub tls: &'static [&'static str],
    /// The connect options it reads beyond the timeouts (JavaScript's names).
    pub options: &'static [&'static str],
    /// Opens it (no I/O; inside the runtime).
    pub open: fn(&str, &ConnectOptions) -> StoreResult<SharedStore>,
}

/// Every store, in the order the docs list them.
pub const STORES: &[StoreEntry] = &[
    StoreEntry {
        name: "redis",
        schemes: &["redis", "rediss", "redis+unix", "unix"],
        example: "redis://host:6379",
        tls: &["rediss"],
        options: &["tls"],
        open: open_redis,
    },
    StoreEntry {
        name: "mysql",
        schemes: &["mysql", "mariadb"],
        example: "mysql://user@host/db",
        tls: &["mysql", "mariadb"],
        options: &["table", "poolSize", "tls"],
        open: open_mysql,
    },
    StoreEntry {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        example: "postgres://user@host/db",
        tls: &["postgres", "postgresql"],
        options: &["table", "poolSize", "tls"],
        open: open_postgres,
    },
    StoreEntry {
        name: "sqlite",
        schemes: &["sqlite"],
        example: "sqlite:///path/locks.db",
        tls: &[],
        options: &["table"],
        open: open_sqlite,
    },
    StoreEntry {
        name: "dynamodb",
        schemes: &["dynamodb"],
        example: "dynamodb://<table>?region=…",
        tls: &[],
        options: &[
            "createTable",
            "partitionKey",
            "sortKey",
            "deleteOnRelease",
            "credentials",
        ],
        open: open_dynamodb,
    },
    StoreEntry {
        name: "etcd",
        schemes: &["etcd", "etcds"],
        example: "etcd://host:2379[,host:2379…]",
        tls: &["etcds"],
        options: &["tls"],
        open: open_etcd,
    },
    StoreEntry {
        name: "memory",
        schemes: &["memory"],
        example: "memory://[name]",
        tls: &[],
        options: &[],
        open: open_memory,
    },
];

/// The store a (lower-case) scheme names.
pub fn find(scheme: &str) -> Option<&'static StoreEntry> {
    STORES.iter().find(|e| e.schemes.contains(&scheme))
}

/// Every scheme, in the registry's order.
pub fn schemes() -> impl Iterator<Item = &'static str> {
    STORES.iter().flat_map(|e| e.schemes.iter().copied())
}

/// `a://, b:// or c://` of the schemes `pick` keeps, for messages.
pub fn listed(pick: impl Fn(&StoreEntry) -> &'static [&'static str]) -> String {
    let all: Vec<String> = STORES
        .iter()
        .flat_map(|e| pick(e).iter().map(|s| format!("{s}://")))
        .collect();
    match all.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// The bound on one call of a store that bounds whole calls ([`bounded`]).
fn call_bound(opts: &ConnectOptions) -> std::time::Duration {
    call_timeout(opts.connect_timeout_ms, opts.response_timeout_ms)
}

/// The Redis settings among a client's connect options.
pub fn redis_options(opts: &ConnectOptions) -> RedisOptions {
    RedisOptions {
        connect_timeout_ms: opts.connect_timeout_ms,
        response_timeout_ms: opts.response_timeout_ms,
        tls: opts.tls.clone(),
    }
}

fn open_redis(url: &str, opts: &ConnectOptions) -> StoreResult<SharedStore> {
    // A URL or TLS material the client cannot use is bad input, not a store failure.
    let store = RedisStore::connect(url, &redis_options(opts)).map_err(|e| {
        StoreError::invalid(if opts.tls.is_some() {
            format!("Invalid Redis URL or options: {e}")
        } else {
            format!("Invalid Redis URL: {e}")
        })
    })?;
    Ok(store)
}

fn open_mysql(url: &str, opts: &ConnectOptions) -> StoreResult<SharedStore> {
    // `mariadb://` is MySQL's protocol under another name.
    let url = match url.get(..10) {
        Some(s) if s.eq_ignore_ascii_case("mariadb://") => format!("mysql://{}", &url[10..]),
        _ => url.to_string(),
    };
    let mysql_opts = MysqlOptions {
        table: opts.table.clone(),
        pool_size: opts.pool_size,
        connect_timeout_ms: opts.connect_timeout_ms,
        response_timeout_ms: opts.response_timeout_ms,
        tls: opts.tls.clone(),
        ..MysqlOptions::default()
    };
    let store = MysqlStore::connect(&url, mysql_opts)
        .map_err(|e| StoreError::invalid(format!("Invalid MySQL URL or options: {e}")))?;
    Ok(bounded("mysql", store, call_bound(opts)))
}

fn open_postgres(url: &str, opts: &ConnectOptions) -> StoreResult<SharedStore> {
    let pg_opts = PostgresOptions {
        table: opts.table.clone(),
        pool_size: opts.pool_size,
        connect_timeout_ms: opts.connect_timeout_ms,
        response_timeout_ms: opts.response_timeout_ms,
        tls: opts.tls.clone(),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect(url, pg_opts)
        .map_err(|e| StoreError::invalid(format!("Invalid PostgreSQL URL or options: {e}")))?;
    Ok(bounded("postgres", store, call_bound(opts)))
}

fn open_sqlite(url: &str, opts: &ConnectOptions) -> StoreResult<SharedStore> {
    let sqlite_opts = SqliteOptions {
        table: opts.table.clone(),
        connect_timeout_ms: opts.connect_timeout_ms,
        response_timeout_ms: opts.response_timeout_ms,
    };
    let store = SqliteStore::connect(url, sqlite_opts)?;
    Ok(bounded("sqlite", store, call_bound(opts)))
}

fn open_dynamodb(url: &str, opts: &ConnectOptions) -> StoreResult<SharedStore> {
    let store = DynamoStore::connect(
        url,
        DynamoStoreOptions {
            dynamo: opts.dynamodb.clone().unwrap_or_default(),
            connect_timeout_ms: opts.connect_timeout_ms,
            response_timeout_ms: opts.response_timeout_ms,
        },
    )?;
    Ok(bounded("dynamodb", store, call_bound(opts)))
}

fn open_etcd(url: &str, opts: &ConnectOptions) -> StoreResult<SharedStore> {
    let store = EtcdStore::connect(
        url,
        EtcdOptions {
            connect_timeout_ms: opts.connect_timeout_ms,
            response_timeout_ms: opts.response_timeout_ms,
            tls: opts.tls.clone(),
        },
    )?;
    Ok(bounded("etcd", store, call_bound(opts)))
}

/// `memory://[name]`: the process's store of that name.
fn open_memory(url: &str, _opts: &ConnectOptions) -> StoreResult<SharedStore> {
    let name = url.split_once("://").map(|(_, n)| n).unwrap_or("");
    Ok(MemoryStore::named(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_scheme_names_two_stores() {
        let all: Vec<&str> = schemes().collect();
        for s in &all {
            assert_eq!(all.iter().filter(|t| *t == s).count(), 1, "{s}");
        }
    }

    #[test]
    fn every_scheme_that_takes_tls_names_its_own_store() {
        for e in STORES {
            for s in e.tls {
                assert!(e.schemes.contains(s), "{}: {s}", e.name);
            }
            assert_eq!(e.options.contains(&"tls"), !e.tls.is_empty(), "{}", e.name);
        }
    }

    #[test]
    fn schemes_are_listed_as_a_sentence() {
        assert_eq!(
            listed(|e| e.tls),
            "rediss://, mysql://, mariadb://, postgres://, postgresql:// or etcds://"
        );
    }
}
