//! Turning a connection URL into a store, through the registry of stores (`registry.rs`).

use super::dynamodb::DynamoOptions;
use super::redis::RedisOptions;
use super::registry;
use super::tls::TlsOptions;
use super::topology::{self, Topology};
use super::{SharedStore, StoreError};
use crate::limits;

/// Connection settings that are not part of the URL.
///
/// `Debug` is what the engine registry keys engines by (with the URL), so it must tell apart
/// every setting that changes the connection; it prints TLS material only as a fingerprint.
#[derive(Clone)]
pub struct ConnectOptions {
    /// Bound on opening a connection, in ms.
    pub connect_timeout_ms: u64,
    /// Bound on one command's reply, in ms.
    pub response_timeout_ms: u64,
    /// Lease table name (MySQL, PostgreSQL, SQLite).
    pub table: String,
    /// Connection pool size (MySQL, PostgreSQL).
    pub pool_size: u32,
    /// TLS settings (`rediss://`, `mysql://`, `postgres://`); refused for other URLs.
    pub tls: Option<TlsOptions>,
    /// The servers of a multi-server Redis form (Redlock); [`Topology::Url`] otherwise.
    pub topology: Topology,
    /// DynamoDB settings (`dynamodb://`); refused for other URLs.
    pub dynamodb: Option<DynamoOptions>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured so that a new field must be considered here. `TlsOptions`' own Debug
        // shows which parts are set and a fingerprint, never the PEM.
        let Self {
            connect_timeout_ms,
            response_timeout_ms,
            table,
            pool_size,
            tls,
            topology,
            dynamodb,
        } = self;
        f.debug_struct("ConnectOptions")
            .field("connect_timeout_ms", connect_timeout_ms)
            .field("response_timeout_ms", response_timeout_ms)
            .field("table", table)
            .field("pool_size", pool_size)
            .field("tls", tls)
            .field("topology", topology)
            .field("dynamodb", dynamodb)
            .finish()
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            connect_timeout_ms: limits::DEFAULT_CONNECT_TIMEOUT_MS,
            response_timeout_ms: limits::DEFAULT_RESPONSE_TIMEOUT_MS,
            table: limits::DEFAULT_TABLE.into(),
            pool_size: limits::DEFAULT_POOL_SIZE,
            tls: None,
            topology: Topology::Url,
            dynamodb: None,
        }
    }
}

/// The scheme part of `url`, lower-cased, if it has one.
pub fn scheme(url: &str) -> Option<String> {
    url.split_once("://").map(|(s, _)| s.to_ascii_lowercase())
}

/// Builds the store a URL names (see [`registry::STORES`]): `redis://`, `rediss://`,
/// `redis+unix://`, `unix://`, `mysql://`, `mariadb://`, `postgres://`, `postgresql://`,
/// `sqlite://path`, `dynamodb://<table>` or `memory://[name]`, or a multi-server Redis form.
/// Must run inside a tokio runtime; no I/O. A URL or option the store cannot use is an
/// [`super::ErrorKind::Invalid`] error, whose message never repeats the URL (it may hold a
/// password).
pub fn open_store(url: &str, opts: &ConnectOptions) -> Result<SharedStore, StoreError> {
    if let Some(store) = topology::open(&opts.topology, &RedisOptions::of(opts))? {
        return Ok(store);
    }
    let Some(scheme) = scheme(url) else {
        return Err(StoreError::invalid(
            "The \"url\" argument must be a URL such as redis://host:6379, mysql://user@host/db or memory://",
        ));
    };
    let Some(entry) = registry::find(&scheme) else {
        return Err(StoreError::invalid(format!(
            "Unsupported URL scheme \"{scheme}:\"; use {}",
            registry::listed(|e| e.schemes)
        )));
    };
    if opts.dynamodb.is_some() && !entry.options.contains(&"dynamodb") {
        return Err(StoreError::invalid(
            "the DynamoDB options apply to dynamodb:// URLs only",
        ));
    }
    if opts.tls.is_some() && !entry.tls.contains(&scheme.as_str()) {
        return Err(StoreError::invalid(format!(
            "options.tls applies to {} URLs, not {scheme}://",
            registry::listed(|e| e.tls)
        )));
    }
    (entry.open)(url, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ca(ca: &[u8]) -> ConnectOptions {
        ConnectOptions {
            tls: Some(TlsOptions {
                ca: Some(ca.to_vec()),
                ..TlsOptions::default()
            }),
            ..ConnectOptions::default()
        }
    }

    #[test]
    fn debug_output_tells_different_cas_apart_without_printing_them() {
        let a = format!("{:?}", with_ca(b"CA-NUMBER-ONE"));
        let b = format!("{:?}", with_ca(b"CA-NUMBER-TWO"));
        assert_ne!(a, b);
        assert_eq!(a, format!("{:?}", with_ca(b"CA-NUMBER-ONE")));
        assert!(!a.contains("CA-NUMBER") && !b.contains("CA-NUMBER"), "{a}");
    }

    #[test]
    fn tls_options_for_a_url_without_tls_are_refused_before_any_io() {
        let opts = ConnectOptions {
            tls: Some(TlsOptions::default()),
            ..ConnectOptions::default()
        };
        for url in [
            "memory://x",
            "sqlite:///tmp/x.db",
            "redis://127.0.0.1:1",
            "redis+unix:///tmp/x.sock",
        ] {
            let err = match open_store(url, &opts) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{url} accepted options.tls"),
            };
            assert!(err.contains("options.tls"), "{url}: {err}");
        }
    }
}
