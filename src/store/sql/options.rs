//! The options of a SQL store with a server (MySQL, PostgreSQL), one struct for both.

use crate::store::tls::TlsOptions;

/// Options of a SQL store with a server: `MysqlOptions` and `PostgresOptions` are this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// Lease table, created on first use: ASCII letters, digits or underscores, 1 to 64 on
    /// MySQL, 1 to 57 on PostgreSQL (its sequence is `<table>_fence`; quoted, so case
    /// matters). Default `"deadbolt_locks"`. Semaphores use two tables named after it
    /// (MySQL `<table>_semaphores` and `<table>_permits`, PostgreSQL `<table>_sem` and
    /// `<table>_perm`), created on the first semaphore call.
    pub table: String,
    /// Most connections the pool opens; held locks pin none of them (PostgreSQL's listening
    /// connection for release announcements comes on top). Default 10.
    pub pool_size: u32,
    /// How long an operation waits to connect or for a free pooled connection, in
    /// milliseconds. Default 5000.
    pub connect_timeout_ms: u64,
    /// How long the server may take to answer, in milliseconds (on PostgreSQL the sessions'
    /// `statement_timeout`, so the server ends a statement that runs longer). Default 5000.
    /// A whole call is bounded by `connect_timeout_ms + response_timeout_ms` (the registry
    /// wraps the store in [`crate::store::bounded`]), however the server or the network
    /// misbehaves.
    pub response_timeout_ms: u64,
    /// How long a name's row stays after the name was freed or expired before it is purged,
    /// in milliseconds (a semaphore's rows: after they lapsed). Default 300 000 (5 minutes);
    /// on PostgreSQL never less than twice `response_timeout_ms` (see its `sql::ACQUIRE`).
    /// Fencing tokens stay increasing unless the server clock steps back by more than this.
    pub purge_after_ms: u64,
    /// TLS settings. When set, the connection is encrypted and, unless
    /// `reject_unauthorized` is false, the server's certificate is verified against `ca` (or
    /// the built-in public roots) and the URL's host. A `?ssl-mode=` (MySQL) or `?sslmode=`
    /// (PostgreSQL) in the URL still applies and must not contradict them. None: only what
    /// the URL says (MySQL: TLS if offered; PostgreSQL: `prefer`).
    pub tls: Option<TlsOptions>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            table: crate::limits::DEFAULT_TABLE.to_owned(),
            pool_size: crate::limits::DEFAULT_POOL_SIZE,
            connect_timeout_ms: crate::limits::DEFAULT_CONNECT_TIMEOUT_MS,
            response_timeout_ms: crate::limits::DEFAULT_RESPONSE_TIMEOUT_MS,
            purge_after_ms: 300_000,
            tls: None,
        }
    }
}
