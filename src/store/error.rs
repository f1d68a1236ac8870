//! The store error model: every failure has a kind, mapped once per store from its driver's
//! own classification (redis-rs error predicates, sqlx error variants and SQLSTATE), and a
//! message. The kind travels to JavaScript as data (`cause.code`), so no program has to read
//! a message. Expected outcomes (busy, not owned) are values, never errors.

use std::fmt;

/// What kind of failure a store met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The server could not be reached: refused, reset, a broken connection, a failed TLS
    /// handshake, a name that does not resolve.
    Unreachable,
    /// The server did not answer within the configured bound.
    Timeout,
    /// The store (or the client) was closed.
    Closed,
    /// The server answered with an error (permissions, a script error, an SQL error…).
    Server,
    /// The server refused the credentials: a wrong password or user name, an unknown access
    /// key, a bad request signature. Trying again does not help; the configuration must change.
    Auth,
    /// The server has no such database (an unknown PostgreSQL or MySQL database, a Redis
    /// database index beyond the server's `databases`).
    NoDatabase,
    /// The server, or what stands between it and the client, cannot give what the store
    /// needs: a connection pooler that shares server sessions between clients (PgBouncer in
    /// transaction mode) or drops the session's settings.
    Unsupported,
    /// The request was refused before it was sent: an argument the store cannot take.
    Invalid,
    /// A bug in deadbolt (a panic, a reply it did not expect).
    Internal,
    /// The store's file was deleted or replaced while a lease was held in it (SQLite): the
    /// lease is gone with the old file.
    Replaced,
    /// The name is taken by another application's data of another kind (Redis: a hash, a
    /// list, a set… under the lock's key), which deadbolt leaves as it is.
    WrongType,
    /// Something answered at the server's address, but not in the store's protocol: the URL
    /// names another kind of server (a `redis://` URL at a MySQL or HTTP port, a `mysql://`
    /// URL at a Redis port…). Trying again does not help; the URL must change.
    Protocol,
}

impl ErrorKind {
    /// Every kind, in the order of [`ErrorKind::code`]'s table (Redlock's quorum counts the
    /// kinds of its servers' errors over it).
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::Unreachable,
        ErrorKind::Timeout,
        ErrorKind::Closed,
        ErrorKind::Server,
        ErrorKind::Auth,
        ErrorKind::NoDatabase,
        ErrorKind::Unsupported,
        ErrorKind::Invalid,
        ErrorKind::Internal,
        ErrorKind::Replaced,
        ErrorKind::WrongType,
        ErrorKind::Protocol,
    ];

    /// Whether a request that failed this way may still have been carried out by the store
    /// (or may yet be, when the store reads what it holds): no reply within the bound, or a
    /// connection that broke while it may have been on its way. Closed, invalid and server
    /// errors say the store did not act on it.
    pub fn outcome_unknown(self) -> bool {
        matches!(self, ErrorKind::Timeout | ErrorKind::Unreachable)
    }

    /// The stable code JavaScript puts on the error's `cause`.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Unreachable => "ERR_LOCK_STORE_UNREACHABLE",
            ErrorKind::Timeout => "ERR_LOCK_STORE_TIMEOUT",
            ErrorKind::Closed => "ERR_LOCK_STORE_CLOSED",
            ErrorKind::Server => "ERR_LOCK_STORE_SERVER",
            ErrorKind::Auth => "ERR_LOCK_STORE_AUTH",
            ErrorKind::NoDatabase => "ERR_LOCK_STORE_NO_DATABASE",
            ErrorKind::Unsupported => "ERR_LOCK_STORE_UNSUPPORTED",
            ErrorKind::Invalid => "ERR_LOCK_STORE_INVALID",
            ErrorKind::Internal => "ERR_LOCK_STORE_INTERNAL",
            ErrorKind::Replaced => "ERR_LOCK_STORE_REPLACED",
            ErrorKind::WrongType => "ERR_LOCK_STORE_WRONG_TYPE",
            ErrorKind::Protocol => "ERR_LOCK_STORE_PROTOCOL",
        }
    }
}

/// A store failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Human-readable cause, suitable for an error's `cause.message`; never holds a secret.
    pub message: String,
}

impl StoreError {
    /// A failure of `kind` described by `message`.
    pub fn new(kind: ErrorKind, message: impl fmt::Display) -> Self {
        StoreError {
            kind,
            message: message.to_string(),
        }
    }

    /// The store or client was closed.
    pub fn closed(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Closed, message)
    }

    /// A reply deadbolt did not expect, or another bug.
    pub fn internal(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// An argument the store cannot take.
    pub fn invalid(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    /// No answer within the bound.
    pub fn timeout(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;
