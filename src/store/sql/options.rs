//! The options of a SQL store with a server (MySQL, PostgreSQL), one struct for both, and
//! the checks of its URL and options that `connect` makes before any I/O.

use std::fmt::Display;
use std::str::FromStr;

use super::Dialect;
use crate::store::tls::TlsOptions;
use crate::store::{StoreError, StoreResult};

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

/// How a server dialect reads its URL: the schemes it accepts, its longest table name, and
/// how it applies `options.tls` to its driver's connect options `O`.
pub struct Url<O> {
    /// The two schemes it accepts (`mysql`, `mariadb`).
    pub schemes: [&'static str; 2],
    /// The longest table name it accepts, in bytes.
    pub max_table: usize,
    /// Applies the TLS option to the options parsed from the URL (see `sql::tls`).
    pub tls: fn(O, &str, &TlsOptions) -> Result<O, String>,
}

impl ServerOptions {
    /// Checks `url` and these options for dialect `D` before any I/O: the URL's scheme, the
    /// URL itself (parsed by the driver; the message names the problem but never quotes the
    /// URL, which may hold a password), the TLS option, the table name and the pool size.
    /// Returns the driver's connect options.
    pub fn connect_options<D: Dialect, O>(&self, url: &str, reads: &Url<O>) -> StoreResult<O>
    where
        O: FromStr,
        O::Err: Display,
    {
        let [first, second] = reads.schemes;
        let known_scheme = url.split_once("://").is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case(first) || scheme.eq_ignore_ascii_case(second)
        });
        if !known_scheme {
            return Err(StoreError::invalid(format!(
                "{}: the URL must start with {first}:// or {second}://",
                D::NAME
            )));
        }
        let mut options = O::from_str(url)
            .map_err(|e| StoreError::invalid(format!("{}: invalid URL: {e}", D::NAME)))?;
        if let Some(tls) = &self.tls {
            options = (reads.tls)(options, url, tls)
                .map_err(|e| StoreError::invalid(format!("{}: {e}", D::NAME)))?;
        }
        let table = &self.table;
        if !crate::limits::valid_table_name(table) || table.len() > reads.max_table {
            return Err(StoreError::invalid(format!(
                "{}: invalid table name {table:?}: use 1 to {} ASCII letters, digits or \
                 underscores",
                D::NAME,
                reads.max_table
            )));
        }
        if self.pool_size == 0 {
            return Err(StoreError::invalid(format!(
                "{}: pool_size must be at least 1",
                D::NAME
            )));
        }
        Ok(options)
    }
}
