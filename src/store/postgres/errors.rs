//! The PostgreSQL dialect of the SQL core's error model ([`crate::store::sql::errors`]): what
//! the server's SQLSTATEs mean, and which failures are worth sending a statement again.

use std::future::Future;

use crate::store::sql::{errors, Dialect};
use crate::store::ErrorKind;
use sqlx::error::DatabaseError;

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

/// The PostgreSQL dialect.
pub struct Postgres;

impl Dialect for Postgres {
    const NAME: &'static str = "postgres";

    /// undefined_table (42P01).
    fn is_missing_table(e: &sqlx::Error) -> bool {
        sqlstate(e).as_deref() == Some("42P01")
    }

    fn server_kind(e: &dyn DatabaseError) -> ErrorKind {
        match e.code().as_deref() {
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
        }
    }

    /// A serialization failure (40001) or a deadlock victim (40P01). A batched extension can
    /// meet another multi-row statement in a lock cycle.
    fn is_conflict(e: &sqlx::Error) -> bool {
        matches!(sqlstate(e).as_deref(), Some("40001" | "40P01"))
    }

    /// I/O, protocol, or the server ending the session.
    fn is_broken_connection(e: &sqlx::Error) -> bool {
        match e {
            sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(_) => sqlstate(e).is_some_and(|c| is_session_gone(&c)),
            _ => false,
        }
    }
}

/// Whether the server (or what answers in its place) refused the connection as a protocol
/// violation (08P01): what PgBouncer answers to startup parameters it does not support, such
/// as the `options` that carry the store's `statement_timeout`.
pub fn is_protocol_violation(e: &sqlx::Error) -> bool {
    sqlstate(e).as_deref() == Some("08P01")
}

/// [`errors::retry`] in this dialect. Every statement of the store is safe to repeat: acquire and handoff recognise their own earlier success, extend
/// is idempotent, and a repeated release reports "not owned". The caller's bound
/// ([`crate::store::bounded`]) ends the loop in any case.
pub async fn retry<T, F, Fut>(run: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    errors::retry::<Postgres, _, _, _>(run).await
}
