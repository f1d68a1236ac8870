//! The Redis deployments that take more than one URL: Redlock over independent servers, a
//! Redis Cluster named by seed nodes, and a primary that Redis Sentinel names. `connect()`
//! names them by the shape of its first argument (`lib/topology.js` checks them); they reach
//! the native side as [`Topology`] in the connection options, and [`open`] builds their store.

use super::redact::fingerprint;
use super::redis::{Acks, RedisOptions, RedisStore};
use super::redlock::RedlockStore;
use super::{SharedStore, StoreError};
use std::fmt;

/// Which servers a store spans, when one URL does not say it.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub enum Topology {
    /// The URL alone names the store (every store but the multi-server Redis forms).
    #[default]
    Url,
    /// Redlock over these independent servers (`redis://` or `rediss://` URLs).
    Redlock(Vec<String>),
    /// A Redis Cluster, reached through these seed nodes (the rest is discovered).
    Cluster(Vec<String>),
    /// The primary that these sentinels name `name`.
    Sentinel(SentinelTarget),
}

/// A Sentinel-managed primary.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct SentinelTarget {
    /// The sentinels' URLs (with their own credentials, if any).
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    pub name: String,
    /// The primary's username.
    pub username: Option<String>,
    /// The primary's password.
    pub password: Option<String>,
    /// Replicas that must acknowledge every write that grants or extends a lease (`WAIT`);
    /// 0: none.
    pub wait_replicas: u32,
    /// How long to wait for them, in ms.
    pub wait_timeout_ms: u64,
}

/// Shows the form and how many servers, and a fingerprint of the URLs (never the URLs: a URL
/// may hold a password).
impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topology::Url => f.write_str("Url"),
            Topology::Redlock(servers) => f
                .debug_struct("Redlock")
                .field("servers", &servers.len())
                .field("fingerprint", &fingerprint(self))
                .finish(),
            Topology::Cluster(seeds) => f
                .debug_struct("Cluster")
                .field("seeds", &seeds.len())
                .field("fingerprint", &fingerprint(self))
                .finish(),
            Topology::Sentinel(t) => f
                .debug_struct("Sentinel")
                .field("sentinels", &t.sentinels.len())
                .field("wait_replicas", &t.wait_replicas)
                .field("wait_timeout_ms", &t.wait_timeout_ms)
                .field("fingerprint", &fingerprint(self))
                .finish(),
        }
    }
}

/// The scheme part of `url`, lower-cased, if it has one.
pub fn scheme(url: &str) -> Option<String> {
    url.split_once("://").map(|(s, _)| s.to_ascii_lowercase())
}

/// Checks that every URL of a multi-server form is a Redis URL over TCP, naming it by its
/// position only (a URL may hold a password). `lib/topology.js` checks the same before any
/// call reaches here; this keeps the native side safe on its own (its tests, the simulator).
fn check_urls(form: &str, urls: &[String]) -> Result<(), StoreError> {
    for (i, url) in urls.iter().enumerate() {
        let scheme = scheme(url).unwrap_or_default();
        if scheme != "redis" && scheme != "rediss" {
            return Err(StoreError::invalid(format!(
                "{form}: server {} must be a redis:// or rediss:// URL",
                i + 1
            )));
        }
    }
    Ok(())
}

/// The store of a multi-server form, or `None` for [`Topology::Url`] (the URL names it).
/// Must run inside a tokio runtime; no I/O.
pub fn open(topology: &Topology, opts: &RedisOptions) -> Result<Option<SharedStore>, StoreError> {
    match topology {
        Topology::Url => Ok(None),
        Topology::Redlock(urls) => {
            check_urls("Redlock", urls)?;
            let store = RedlockStore::connect(urls, opts)
                .map_err(|e| StoreError::invalid(format!("Invalid Redlock servers: {e}")))?;
            Ok(Some(store))
        }
        Topology::Cluster(seeds) => {
            check_urls("Redis Cluster", seeds)?;
            let store = RedisStore::connect_cluster(seeds, opts)?;
            Ok(Some(store))
        }
        Topology::Sentinel(t) => {
            check_urls("Redis Sentinel", &t.sentinels)?;
            let acks = (t.wait_replicas > 0).then_some(Acks {
                replicas: t.wait_replicas,
                timeout_ms: t.wait_timeout_ms,
            });
            let auth = (t.username.as_deref(), t.password.as_deref());
            let store = RedisStore::connect_sentinel(&t.sentinels, &t.name, auth, opts, acks)?;
            Ok(Some(store))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_prints_the_server_urls() {
        let a = Topology::Redlock(vec!["redis://:SECRET-ONE@a:1".into()]);
        let da = format!("{a:?}");
        assert!(!da.contains("SECRET"), "{da}");
    }

    #[tokio::test]
    async fn a_server_that_is_not_a_redis_url_is_refused_by_position_without_echoing_it() {
        let t = Topology::Redlock(vec![
            "redis://127.0.0.1:1".into(),
            "mysql://root:SECRET@h/db".into(),
        ]);
        let err = match open(&t, &RedisOptions::default()) {
            Err(e) => e.message,
            Ok(_) => panic!("accepted"),
        };
        assert!(err.contains("server 2"), "{err}");
        assert!(!err.contains("SECRET"), "{err}");
    }
}
