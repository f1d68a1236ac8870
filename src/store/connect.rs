//! A client's connection settings that are not part of its URL, for every store.

use super::dynamodb::DynamoOptions;
use super::tls::TlsOptions;
use super::topology::Topology;
use crate::limits;

/// Connection settings that are not part of the URL. Compared field by field: clients whose
/// URL and options are equal share one engine. `Debug` prints TLS material and credentials
/// only as fingerprints, server lists without their URLs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ConnectOptions {
    /// Bound on opening a connection, in ms.
    pub connect_timeout_ms: u64,
    /// Bound on one command's reply, in ms.
    pub response_timeout_ms: u64,
    /// Lease table name, for the stores whose registry entry lists `table`
    /// ([`super::registry::StoreEntry::options`]).
    pub table: String,
    /// Connection pool size, for the stores whose registry entry lists `poolSize`.
    pub pool_size: u32,
    /// TLS settings, for the schemes the registry marks ([`super::registry::StoreEntry::tls`]:
    /// `etcds://` among them); refused for other URLs.
    pub tls: Option<TlsOptions>,
    /// The servers of a multi-server Redis form (Redlock, Cluster, Sentinel);
    /// [`Topology::Url`] otherwise.
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
