//! sqlx's errors as the store's kinds (MySQL error numbers, sqlx's variants), and the
//! retries that a deadlock victim or a broken pooled connection calls for.

use crate::store::{ErrorKind, StoreError};
use sqlx::mysql::MySqlDatabaseError;
use std::future::Future;
use std::time::Duration;

/// Repeats a statement that the server rolled back as a deadlock victim (SQLSTATE 40001). That
/// is safe for every statement here: the victim's statement was rolled back whole, and in
/// autocommit nothing else belonged to its transaction. Rare (stress runs on MariaDB 10.11 saw
/// none between these statements), but a multi-row extend can meet another client's
/// transaction in a lock cycle, MySQL's `INSERT ... ON DUPLICATE KEY UPDATE` is known for
/// gap-lock cycles, and Galera reports certification conflicts with this state.
///
/// It also repeats a statement after its connection broke (I/O or protocol error): a pooled
/// connection the server closed (a restart, a wait_timeout) is only found dead when used, and
/// after a restart every idle connection in the pool is dead, so it may take several tries.
/// Each costs next to nothing (a dead socket fails at once; a server that is down fails the
/// pool's acquire with a timeout instead, which is not retried). Every statement here is safe
/// to send again, provided the caller of a non-idempotent one checks the outcome (see
/// [`LockStore::try_acquire`](crate::store::LockStore::try_acquire)).
pub(super) async fn retry_on_conflict<T, F, Fut>(run: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    retry_transient(run).await.0
}

/// [`retry_on_conflict`], also telling whether a broken connection was retried (so the
/// statement may have run twice).
pub(super) async fn retry_transient<T, F, Fut>(mut run: F) -> (Result<T, sqlx::Error>, bool)
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
            other => return (other, reconnects > 0),
        }
    }
}

pub(super) fn is_broken_connection(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
}

/// Whether `e` is ER_NO_SUCH_TABLE (1146): a read of a table nobody created yet.
pub(super) fn no_such_table(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|m| m.number() == 1146)
}

pub(super) fn is_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "40001")
}

/// The kind of an sqlx error, from sqlx's own classification.
pub(super) fn kind_of(e: &sqlx::Error) -> ErrorKind {
    match e {
        sqlx::Error::PoolTimedOut => ErrorKind::Timeout,
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            ErrorKind::Unreachable
        }
        sqlx::Error::Database(d) => match d.try_downcast_ref::<MySqlDatabaseError>() {
            // ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR,
            // ER_ACCESS_DENIED_NO_PASSWORD_ERROR: the server refused the account.
            Some(m) if matches!(m.number(), 1044 | 1045 | 1698) => ErrorKind::Auth,
            // ER_BAD_DB_ERROR: the URL's database does not exist.
            Some(m) if m.number() == 1049 => ErrorKind::NoDatabase,
            _ => ErrorKind::Server,
        },
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => ErrorKind::Closed,
        sqlx::Error::Configuration(_) => ErrorKind::Invalid,
        _ => ErrorKind::Internal,
    }
}

pub(super) fn db_error(operation: &str, e: sqlx::Error) -> StoreError {
    StoreError::new(kind_of(&e), format!("mysql: {operation}: {e}"))
}

pub(super) fn closed_error() -> StoreError {
    StoreError::closed("mysql: the store is closed")
}
