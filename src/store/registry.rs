//! The one table of stores: which URL schemes name each, how to open it, whether it takes
//! TLS options and which connect options it reads. [`super::open::open_store`], the
//! JavaScript client's URL check, its error messages and the CLI's help all read it
//! (JavaScript through the binding's `stores()`). Adding a store is its folder (with its
//! `open`), one line here, and its test suites.

use super::open::ConnectOptions;
use super::{dynamodb, memory, mysql, postgres, redis, sqlite, SharedStore, StoreResult};

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
        open: redis::open,
    },
    StoreEntry {
        name: "mysql",
        schemes: &["mysql", "mariadb"],
        example: "mysql://user@host/db",
        tls: &["mysql", "mariadb"],
        options: &["table", "poolSize", "tls"],
        open: mysql::open,
    },
    StoreEntry {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        example: "postgres://user@host/db",
        tls: &["postgres", "postgresql"],
        options: &["table", "poolSize", "tls"],
        open: postgres::open,
    },
    StoreEntry {
        name: "sqlite",
        schemes: &["sqlite"],
        example: "sqlite:///path/locks.db",
        tls: &[],
        options: &["table"],
        open: sqlite::open,
    },
    StoreEntry {
        name: "dynamodb",
        schemes: &["dynamodb"],
        example: "dynamodb://<table>?region=…",
        tls: &[],
        options: &["dynamodb"],
        open: dynamodb::open,
    },
    StoreEntry {
        name: "memory",
        schemes: &["memory"],
        example: "memory://[name]",
        tls: &[],
        options: &[],
        open: memory::open,
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
            "rediss://, mysql://, mariadb://, postgres:// or postgresql://"
        );
    }
}
