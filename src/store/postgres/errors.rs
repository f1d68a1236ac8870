//! How the PostgreSQL store reads sqlx's errors: the store error kind, from sqlx's error
//! variants and the server's SQLSTATE, and which failures are worth sending a statement again.

use std::future::Future;
use std::time::Duration;

use crate::store::{ErrorKind, StoreError};

/// The SQLSTATE of a server error, if that is what `e` is.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

/// Whether the server ended the session: class 08 (connection exception), or the server
/// shutting down, crashing or still starting (57P01 admin_shutdown, 57P02 crash_shutdown,
/// 57P03 cannot_connect_now). A pooled connection that a server restart closed reports one of
/// these, or an I/O error, when it is next used.
fn is_session_gone(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
}

/// The kind of an sqlx error, from sqlx's own classification and the SQLSTATE.
pub fn kind_of(e: &sqlx::Error) -> ErrorKind {
    match e {
        sqlx::Error::PoolTimedOut => ErrorKind::Timeout,
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            ErrorKind::Unreachable
        }
        sqlx::Error::Database(_) => match sqlstate(e).as_deref() {
            Some(code) if is_session_gone(code) => ErrorKind::Unreachable,
            // too_many_connections: the server refused the connection.
            Some("53300") => ErrorKind::Unreachable,
            // query_canceled: `statement_timeout` (the response bound) ran out on the server.
            Some("57014") => ErrorKind::Timeout,
            // invalid_password, invalid_authorization_specification (no such role, a
            // pg_hba.conf rejection).
            Some("28P01" | "28000") => ErrorKind::Auth,
            // invalid_catalog_name: the URL's database does not exist.
            Some("3D000") => ErrorKind::NoDatabase,
            _ => ErrorKind::Server,
        },
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => ErrorKind::Closed,
        sqlx::Error::Configuration(_) => ErrorKind::Invalid,
        _ => ErrorKind::Internal,
    }
}

/// A store error for `operation`. sqlx's messages name the server's error and never the
/// connection options, so no password reaches the message.
pub fn db_error(operation: &str, e: sqlx::Error) -> StoreError {
    StoreError::new(kind_of(&e), format!("postgres: {operation}: {e}"))
}

/// Whether `e` is undefined_table (42P01): a read of a table nobody created yet.
pub fn no_such_table(e: &sqlx::Error) -> bool {
    sqlstate(e).as_deref() == Some("42P01")
}

/// Whether the server (or what answers in its place) refused the connection as a protocol
/// violation (08P01): what PgBouncer answers to startup parameters it does not support, such
/// as the `options` that carry the store's `statement_timeout`.
pub fn is_protocol_violation(e: &sqlx::Error) -> bool {
    sqlstate(e).as_deref() == Some("08P01")
}

/// The store was closed.
pub fn closed_error() -> StoreError {
    StoreError::closed("postgres: the store is closed")
}

/// Whether the statement was rolled back as a serialization failure (40001) or a deadlock
/// victim (40P01): safe to send again, since in autocommit the statement was the whole
/// transaction. A batched extension can meet another multi-row statement in a lock cycle.
pub fn is_conflict(e: &sqlx::Error) -> bool {
    matches!(sqlstate(e).as_deref(), Some("40001" | "40P01"))
}

/// Whether the connection broke under the statement (I/O, protocol, or the server ending
/// the session): a server restart leaves every pooled connection like this.
pub fn is_broken_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(_) => sqlstate(e).is_some_and(|c| is_session_gone(&c)),
        _ => false,
    }
}

/// Runs a statement, sending it again after a conflict (a few times, with jitter) or a broken
/// connection (on another connection; a dead socket fails at once, and a server that is down
/// fails the pool's acquire with a time-out, which is not retried). Every statement of the
/// store is safe to repeat: acquire and handoff recognise their own earlier success, extend
/// is idempotent, and a repeated release reports "not owned". The caller's bound
/// ([`crate::store::bounded`]) ends the loop in any case.
pub async fn retry<T, F, Fut>(mut run: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    const ATTEMPTS: u32 = 5;
    const RECONNECTS: u32 = 32;
    let mut attempt = 1;
    let mut reconnects = 0;
    loop {
        match run().await {
            Err(e) if attempt < ATTEMPTS && is_conflict(&e) => {
                attempt += 1;
                // Jitter separates the transactions that collided.
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..2000))).await;
            }
            Err(e) if reconnects < RECONNECTS && is_broken_connection(&e) => reconnects += 1,
            other => return other,
        }
    }
}
