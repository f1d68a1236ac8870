//! The connection pool of a SQL store with a server (MySQL, PostgreSQL), built on first use:
//! building it spawns its maintenance task, which needs the runtime, and connects nobody.

use std::time::Duration;

use sqlx::pool::{Pool, PoolOptions};
use sqlx::{Connection, Database};

/// A pooled connection idle for longer than this is pinged before use, so that one dropped
/// by the server (a restart, `wait_timeout` or `idle_session_timeout`, a proxy) is replaced
/// instead of failing a lock operation; busier connections skip the ping, which would double
/// every round trip.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(30);

/// A lazy pool of at most `size` connections (none kept open for nothing), where waiting for
/// a connection is bounded by `acquire_timeout`.
pub fn lazy_pool<DB: Database>(
    size: u32,
    acquire_timeout: Duration,
    options: <DB::Connection as Connection>::Options,
) -> Pool<DB> {
    PoolOptions::<DB>::new()
        .max_connections(size)
        .min_connections(0)
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_IF_IDLE_FOR {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options)
}
