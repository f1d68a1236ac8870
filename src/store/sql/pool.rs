//! The connection pool of a SQL store with a server (MySQL, PostgreSQL), built on first use
//! (building it spawns its maintenance task, which needs the runtime, and connects nobody),
//! and the pool once a first connection logged in; each dialect writes only its own first
//! step (`pool.rs` of its folder).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::pool::{Pool, PoolOptions};
use sqlx::{Connection, Database};
use tokio::sync::OnceCell;

use super::errors::closed_error;
use super::Dialect;
use crate::store::StoreResult;

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

/// The store's pool in `cell`, built by [`lazy_pool`] on first use; refused once the store is
/// `closed`.
pub fn built_pool<'a, DB: Database, D: Dialect>(
    cell: &'a OnceLock<Pool<DB>>,
    closed: &AtomicBool,
    size: u32,
    acquire_timeout: Duration,
    options: &<DB::Connection as Connection>::Options,
) -> StoreResult<&'a Pool<DB>> {
    if closed.load(Ordering::SeqCst) {
        return Err(closed_error::<D>());
    }
    Ok(cell.get_or_init(|| lazy_pool(size, acquire_timeout, options.clone())))
}

/// `pool` once `first` (reaching the server and logging in) has succeeded for it, which
/// `connected` records; a failure is tried again by the next call. Refused, and the pool
/// closed, when the store was closed since the pool was taken: a `close` that ran in between
/// may have missed it.
///
/// # Cancel Safety
/// Cancel safe: an abandoned first step is run again by the next call.
pub async fn connected_pool<'a, DB: Database, D: Dialect, Fut>(
    pool: &'a Pool<DB>,
    closed: &AtomicBool,
    connected: &OnceCell<()>,
    first: impl FnOnce() -> Fut,
) -> StoreResult<&'a Pool<DB>>
where
    Fut: Future<Output = StoreResult<()>>,
{
    if closed.load(Ordering::SeqCst) {
        pool.close().await;
        return Err(closed_error::<D>());
    }
    connected.get_or_try_init(first).await?;
    Ok(pool)
}
