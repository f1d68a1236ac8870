//! The SQLite dialect of the SQL core's error model ([`crate::store::sql::errors`]): what
//! SQLite's result codes mean. SQLite has no deadlock victims to send again: a statement that
//! meets another process's write waits in SQLite's busy handler instead.

use crate::store::sql::{errors, Dialect};
use crate::store::{ErrorKind, StoreError};
use sqlx::error::DatabaseError;

/// The SQLite dialect.
pub struct Sqlite;

impl Dialect for Sqlite {
    const NAME: &'static str = "sqlite";

    fn server_kind(e: &dyn DatabaseError) -> ErrorKind {
        match result_code(e).map(|c| c & 0xFF) {
            // SQLITE_BUSY, SQLITE_LOCKED: another process held the file past busy_timeout.
            Some(5 | 6) => ErrorKind::Timeout,
            // SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN: the file cannot be used.
            Some(3 | 8 | 14) => ErrorKind::Unreachable,
            _ => ErrorKind::Server,
        }
    }

    fn is_conflict(_: &sqlx::Error) -> bool {
        false
    }
}

/// SQLite's extended result code of a database error.
fn result_code(e: &dyn DatabaseError) -> Option<i64> {
    e.code()?.parse().ok()
}

/// Whether SQLite reported that the database was busy (another connection's lock).
pub(super) fn is_busy(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(result_code)
        .is_some_and(|code| matches!(code & 0xFF, 5 | 6))
}

/// A store error for `operation`, saying so when the file stayed locked by another process.
pub(super) fn db_error(operation: &str, e: sqlx::Error) -> StoreError {
    if is_busy(&e) {
        return StoreError::timeout(format!(
            "sqlite: {operation}: the database stayed locked by another connection past the busy timeout ({e})"
        ));
    }
    errors::db_error::<Sqlite>(operation, e)
}

/// The store was closed.
pub(super) fn closed_error() -> StoreError {
    errors::closed_error::<Sqlite>()
}
