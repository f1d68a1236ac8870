//! One plain TCP connection before a SQL pool's first use: sqlx's pool treats "connection
//! refused" as a server still starting and retries until its timeout, then reports only "pool
//! timed out". A server that is not there is reported as such, at once.

use super::{ErrorKind, StoreError, StoreResult};
use std::time::Duration;

/// Fails with [`ErrorKind::Unreachable`] if `host:port` refuses a TCP connection within
/// `timeout`; any other outcome (connected, timed out, another error) is left to the pool.
/// `store` names the store in the message.
///
/// # Cancel Safety
/// Cancel safe: it only opens and drops a socket.
pub async fn check_not_refused(
    store: &str,
    host: &str,
    port: u16,
    timeout: Duration,
) -> StoreResult<()> {
    let connect = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(timeout, connect).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(StoreError::new(
            ErrorKind::Unreachable,
            format!("{store}: connection refused by {host}:{port}"),
        )),
        _ => Ok(()),
    }
}
