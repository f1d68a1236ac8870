//! A client's connect options as JavaScript passes them (checked by `lib/client.js` first),
//! and their conversion into the stores' [`ConnectOptions`].

use crate::store::dynamodb::{AwsCredentials, DynamoOptions, SortKey};
use crate::store::open::ConnectOptions;
use crate::store::tls::TlsOptions;
use crate::store::topology::{SentinelTarget, Topology};
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Connection settings of a native client. Validated by `lib/client.js` (`connect`).
#[napi(object)]
pub struct NativeConnectOptions {
    /// Bound on opening a connection, in ms. Default 5 000.
    pub connect_timeout: Option<u32>,
    /// Bound on one command's reply, in ms (Redis). Default 5 000.
    pub response_timeout: Option<u32>,
    /// Lease table, for the stores whose registry entry lists `table`. Default
    /// `deadbolt_locks`.
    pub table: Option<String>,
    /// Connection pool size, for the stores whose registry entry lists `poolSize`. Default 10.
    pub pool_size: Option<u32>,
    /// TLS settings, for the schemes the registry marks as TLS; normalized by `lib/tls.js`.
    #[napi(ts_type = "NativeTlsOptions")]
    pub tls: Option<NativeTlsOptions>,
    /// The servers of a multi-server Redis form (`lib/topology.js`); the URL names the store
    /// when absent.
    #[napi(ts_type = "NativeTopology")]
    pub topology: Option<NativeTopology>,
    /// DynamoDB settings (`dynamodb://`), checked by `lib/dynamodb.js`.
    #[napi(ts_type = "NativeDynamoOptions")]
    pub dynamodb: Option<NativeDynamoOptions>,
}

/// A multi-server Redis form, checked by `lib/topology.js`.
#[napi(object)]
pub struct NativeTopology {
    /// `"redlock"`, `"cluster"` or `"sentinel"`.
    pub kind: String,
    /// The servers' URLs (Redlock servers, cluster seeds, sentinels).
    pub servers: Vec<String>,
    /// Sentinel: the name of the monitored primary.
    pub name: Option<String>,
    /// Sentinel: the primary's username.
    pub username: Option<String>,
    /// Sentinel: the primary's password.
    pub password: Option<String>,
    /// Sentinel: replicas that must acknowledge grants and extensions. Default 0.
    pub wait_replicas: Option<u32>,
    /// Sentinel: how long to wait for them, in ms. Default 1 000.
    pub wait_timeout: Option<u32>,
}

impl TryFrom<NativeTopology> for Topology {
    type Error = Error<String>;

    fn try_from(t: NativeTopology) -> Result<Self, String> {
        match t.kind.as_str() {
            "redlock" => Ok(Topology::Redlock(t.servers)),
            "cluster" => Ok(Topology::Cluster(t.servers)),
            "sentinel" => Ok(Topology::Sentinel(SentinelTarget {
                sentinels: t.servers,
                name: t.name.unwrap_or_default(),
                username: t.username,
                password: t.password,
                wait_replicas: t.wait_replicas.unwrap_or(0),
                wait_timeout_ms: t
                    .wait_timeout
                    .map_or(crate::limits::DEFAULT_WAIT_TIMEOUT_MS, u64::from),
            })),
            other => Err(Error::new(
                "ERR_INVALID_ARG_VALUE".to_string(),
                format!("unknown topology {other:?}"),
            )),
        }
    }
}

/// DynamoDB settings of a native client.
#[napi(object)]
pub struct NativeDynamoOptions {
    /// Create the table on first use. Default false.
    pub create_table: Option<bool>,
    /// Partition key attribute. Default `key`.
    pub partition_key: Option<String>,
    /// Sort key attribute and value, if the table has one.
    #[napi(ts_type = "NativeSortKey")]
    pub sort_key: Option<NativeSortKey>,
    /// Delete items on release instead of marking them released. Default false.
    pub delete_on_release: Option<bool>,
    /// Credentials to sign with instead of the environment's.
    #[napi(ts_type = "NativeAwsCredentials")]
    pub credentials: Option<NativeAwsCredentials>,
}

/// The sort key of a DynamoDB lock table and the value this client's locks use.
#[napi(object)]
pub struct NativeSortKey {
    /// Attribute name.
    pub name: String,
    /// Value in every lock item.
    pub value: String,
}

/// Static AWS credentials.
#[napi(object)]
pub struct NativeAwsCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl From<NativeDynamoOptions> for DynamoOptions {
    fn from(o: NativeDynamoOptions) -> Self {
        let d = DynamoOptions::default();
        DynamoOptions {
            create_table: o.create_table.unwrap_or(d.create_table),
            partition_key: o.partition_key.unwrap_or(d.partition_key),
            sort_key: o.sort_key.map(|k| SortKey {
                name: k.name,
                value: k.value,
            }),
            delete_on_release: o.delete_on_release.unwrap_or(d.delete_on_release),
            credentials: o.credentials.map(|c| AwsCredentials {
                access_key_id: c.access_key_id,
                secret_access_key: c.secret_access_key,
                session_token: c.session_token,
            }),
        }
    }
}

/// TLS settings of a native client: PEM bytes, checked by `lib/tls.js` and again natively.
#[napi(object)]
pub struct NativeTlsOptions {
    /// CA certificates (PEM) to verify the server with instead of the public roots.
    pub ca: Option<Buffer>,
    /// Client certificate chain (PEM) for mutual TLS.
    pub cert: Option<Buffer>,
    /// Unencrypted client private key (PEM) for mutual TLS.
    pub key: Option<Buffer>,
    /// Name the server's certificate must carry (only the URL's host is supported).
    pub servername: Option<String>,
    /// Verify the server's certificate. Default true.
    pub reject_unauthorized: Option<bool>,
}

impl From<NativeTlsOptions> for TlsOptions {
    fn from(o: NativeTlsOptions) -> Self {
        TlsOptions {
            ca: o.ca.map(|b| b.to_vec()),
            cert: o.cert.map(|b| b.to_vec()),
            key: o.key.map(|b| b.to_vec()),
            servername: o.servername,
            reject_unauthorized: o.reject_unauthorized.unwrap_or(true),
        }
    }
}

impl TryFrom<NativeConnectOptions> for ConnectOptions {
    type Error = Error<String>;

    fn try_from(o: NativeConnectOptions) -> Result<Self, String> {
        let d = ConnectOptions::default();
        Ok(ConnectOptions {
            connect_timeout_ms: o.connect_timeout.map_or(d.connect_timeout_ms, u64::from),
            response_timeout_ms: o.response_timeout.map_or(d.response_timeout_ms, u64::from),
            table: o.table.unwrap_or(d.table),
            pool_size: o.pool_size.unwrap_or(d.pool_size),
            tls: o.tls.map(Into::into),
            topology: o
                .topology
                .map(TryInto::try_into)
                .transpose()?
                .unwrap_or_default(),
            dynamodb: o.dynamodb.map(Into::into),
        })
    }
}
