//! Turning a connection URL into a store, through the registry of stores (`registry.rs`).
//!
//! JavaScript has parsed the target once already (`lib/topology.js`: scheme, store, topology)
//! and hands over the URL and the topology; the scheme is read again here, a split at `://`,
//! because this is also the entry for Rust's own callers (tests, the simulator), which must get
//! the same checks without JavaScript in front.

pub use super::connect::ConnectOptions;
use super::registry;
use super::topology;
use super::{SharedStore, StoreError};

/// Builds the store a URL names by its scheme (the schemes: [`registry::STORES`]), or the
/// multi-server Redis form of `opts.topology`. Must run inside a tokio runtime; no I/O. A URL or option the store cannot use is an
/// [`super::ErrorKind::Invalid`] error, whose message never repeats the URL (it may hold a
/// password).
pub fn open_store(url: &str, opts: &ConnectOptions) -> Result<SharedStore, StoreError> {
    if let Some(store) = topology::open(&opts.topology, &registry::redis_options(opts))? {
        return Ok(store);
    }
    let Some(scheme) = topology::scheme(url) else {
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
    if opts.dynamodb.is_some() && entry.name != "dynamodb" {
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
    use crate::store::tls::TlsOptions;

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
