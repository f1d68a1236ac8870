//! sqlx's errors as the store's kinds, and the retries that a deadlock victim or a broken
//! pooled connection calls for: once for every SQL dialect ([`super::Dialect`]).

use std::future::Future;
use std::time::Duration;

use super::Dialect;
use crate::store::{ErrorKind, StoreError};

/// The kind of an sqlx error: sqlx's own classification of its variants, and the dialect's
/// reading of the server's codes.
pub fn kind_of<D: Dialect>(e: &sqlx::Error) -> ErrorKind {
    match e {
        sqlx::Error::PoolTimedOut => ErrorKind::Timeout,
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            ErrorKind::Unreachable
        }
        sqlx::Error::Database(d) => D::server_kind(d.as_ref()),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => ErrorKind::Closed,
        sqlx::Error::Configuration(_) => ErrorKind::Invalid,
        _ => ErrorKind::Internal,
    }
}

/// A store error for `operation`. sqlx's messages name the server's error and never the
/// connection options, so no password reaches the message.
pub fn db_error<D: Dialect>(operation: &str, e: sqlx::Error) -> StoreError {
    StoreError::new(
        kind_of::<D>(&e),
        format!("{}: {operation}: {}", D::NAME, words(&e)),
    )
}

/// A failure to connect to `server` or log in. Bytes the driver could not read as the
/// dialect's protocol (`protocol` names it) there are another kind of server's answer:
/// [`ErrorKind::Protocol`].
pub fn connect_error<D: Dialect>(server: &str, protocol: &str, e: sqlx::Error) -> StoreError {
    if let sqlx::Error::Protocol(_) = e {
        return StoreError::new(
            ErrorKind::Protocol,
            format!(
                "{} {server}: the server does not speak the {protocol} protocol; is the URL's \
                 port that of a {protocol} server?",
                D::NAME,
            ),
        );
    }
    db_error::<D>(&format!("connecting to {server}"), e)
}

/// sqlx's text of `e` without what only its authors need: a protocol error's place in
/// sqlx's source (`… (sqlx_postgres::connection::tls:95)`).
fn words(e: &sqlx::Error) -> String {
    let text = e.to_string();
    if let Some(start) = text.rfind(" (") {
        let place = &text[start + 2..];
        if place.ends_with(')')
            && place.starts_with("sqlx")
            && place.contains("::")
            && place[..place.len() - 1]
                .rsplit(':')
                .next()
                .is_some_and(|line| !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()))
        {
            return text[..start].to_string();
        }
    }
    text
}

/// A read's outcome as `operation`'s, where a table nobody created yet holds nothing: it
/// reads as `T::default()` (no row, no rows), since a read creates no table.
pub fn read<D: Dialect, T: Default>(
    operation: &str,
    outcome: Result<T, sqlx::Error>,
) -> Result<T, StoreError> {
    match outcome {
        Err(e) if D::is_missing_table(&e) => Ok(T::default()),
        other => other.map_err(|e| db_error::<D>(operation, e)),
    }
}

/// The store was closed.
pub fn closed_error<D: Dialect>() -> StoreError {
    StoreError::closed(format!("{}: the store is closed", D::NAME))
}

/// Runs a statement, sending it again after a conflict (a few times, with jitter) or a broken
/// connection (on another connection; a dead socket fails at once, and a server that is down
/// fails the pool's acquire with a time-out, which is not retried). Returns its outcome and
/// whether a broken connection was retried, so that the statement may have run twice: a
/// caller whose statement is not idempotent checks for its own earlier success. The call
/// bound ([`crate::store::bounded`]) ends the loop in any case.
pub async fn retry_transient<D: Dialect, T, F, Fut>(mut run: F) -> (Result<T, sqlx::Error>, bool)
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
            Err(e) if attempt < ATTEMPTS && D::is_conflict(&e) => {
                attempt += 1;
                // Jitter separates the transactions that collided.
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..2000))).await;
            }
            Err(e) if reconnects < RECONNECTS && D::is_broken_connection(&e) => reconnects += 1,
            other => return (other, reconnects > 0),
        }
    }
}

/// [`retry_transient`] for a statement that is safe to repeat (or whose caller reads the
/// outcome either way).
pub async fn retry<D: Dialect, T, F, Fut>(run: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    retry_transient::<D, _, _, _>(run).await.0
}
