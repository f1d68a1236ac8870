//! The connection pool of a SQL store with a server (MySQL, PostgreSQL), built on first use
//! (building it spawns its maintenance task, which needs the runtime, and connects nobody),
//! the looks at the server before its first login (does it refuse connections, does it speak
//! the protocol), the pool once a first connection logged in, its closing, and the creation of
//! a schema an account may only be able to read; each dialect writes only its own login and
//! its DDL (`pool.rs` of its folder).

use std::future::Future;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::pool::{Pool, PoolOptions};
use sqlx::{Connection, Database};
use tokio::sync::OnceCell;

use super::errors::{closed_error, db_error};
use super::Dialect;
use crate::store::protocol::{self, Expect};
use crate::store::refused::check_not_refused;
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

/// Where a server store's connect options point (implemented by each dialect's options):
/// what [`ServerPool`] names in its messages and looks at before the pool's first login.
pub trait ServerAddress {
    /// The protocol the server speaks, for [`protocol::wrong_protocol`].
    const PROTOCOL: Expect;

    /// The host, the port, and the Unix socket when the options name one (then the host and
    /// port are not used).
    fn address(&self) -> (&str, u16, Option<&Path>);
}

/// Implements [`ServerAddress`] for a sqlx driver's connect options (`$options`), whose server
/// speaks `$protocol`: sqlx's MySQL and PostgreSQL options name their address with the same
/// accessors (`get_host`, `get_port`, `get_socket`), but through no trait of sqlx's.
macro_rules! server_address {
    ($options:ty, $protocol:expr) => {
        impl $crate::store::sql::pool::ServerAddress for $options {
            const PROTOCOL: $crate::store::protocol::Expect = $protocol;

            fn address(&self) -> (&str, u16, Option<&std::path::Path>) {
                (
                    self.get_host(),
                    self.get_port(),
                    self.get_socket().map(std::path::PathBuf::as_path),
                )
            }
        }
    };
}
pub(crate) use server_address;

/// The connection pool of a store with a server: built on first use by [`lazy_pool`], then
/// logged in once (a failure is tried again by the next call), and closed with the store.
/// `D` names the store in its messages.
pub struct ServerPool<D, DB: Database> {
    options: <DB::Connection as Connection>::Options,
    size: u32,
    /// Bound on waiting for a pooled connection, and on the looks before the first login.
    acquire_timeout: Duration,
    /// Built on first use rather than when the store is made, because building a pool spawns
    /// its maintenance task, which needs to run inside a tokio runtime.
    pool: OnceLock<Pool<DB>>,
    closed: AtomicBool,
    /// Set once a first connection logged in (see [`ServerPool::connected`]); left empty when
    /// that failed, so the next operation tries again.
    connected: OnceCell<()>,
    dialect: PhantomData<D>,
}

impl<D, DB> ServerPool<D, DB>
where
    D: Dialect,
    DB: Database,
    <DB::Connection as Connection>::Options: ServerAddress,
{
    /// A pool of at most `size` connections made with `options`, none made yet.
    pub fn new(
        options: <DB::Connection as Connection>::Options,
        size: u32,
        acquire_timeout: Duration,
    ) -> Self {
        Self {
            options,
            size,
            acquire_timeout,
            pool: OnceLock::new(),
            closed: AtomicBool::new(false),
            connected: OnceCell::new(),
            dialect: PhantomData,
        }
    }

    /// The connect options.
    pub fn options(&self) -> &<DB::Connection as Connection>::Options {
        &self.options
    }

    /// The most connections the pool opens.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The bound on waiting for a connection.
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// The server as messages name it: `host:port`, or the socket's path.
    pub fn server(&self) -> String {
        match self.options.address() {
            (_, _, Some(path)) => path.display().to_string(),
            (host, port, None) => format!("{host}:{port}"),
        }
    }

    /// The pool, built on first use; refused once the store is closed.
    pub fn pool(&self) -> StoreResult<&Pool<DB>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error::<D>());
        }
        Ok(self
            .pool
            .get_or_init(|| lazy_pool(self.size, self.acquire_timeout, self.options.clone())))
    }

    /// The pool once a first connection logged in: first a look at whether the server refuses
    /// connections ([`ServerPool::probe`]), then `log_in`, raced against a look at whether
    /// the server speaks the protocol at all (see [`ServerPool::log_in_checked`]). A failure
    /// is tried again by the next call. Refused, and the pool closed, when the store was
    /// closed since the pool was taken: a `close` that ran in between may have missed it.
    ///
    /// # Cancel Safety
    /// Cancel safe if `log_in` is: an abandoned first login is run again by the next call.
    pub async fn connected<'a, Fut>(
        &'a self,
        log_in: impl FnOnce(&'a Pool<DB>) -> Fut,
    ) -> StoreResult<&'a Pool<DB>>
    where
        Fut: Future<Output = StoreResult<()>>,
    {
        let pool = self.pool()?;
        if self.closed.load(Ordering::SeqCst) {
            pool.close().await;
            return Err(closed_error::<D>());
        }
        self.connected
            .get_or_try_init(|| async {
                self.probe().await?;
                self.log_in_checked(log_in(pool)).await
            })
            .await?;
        Ok(pool)
    }

    /// Before the first use of the pool, one plain TCP connection to the server: sqlx's pool
    /// treats "connection refused" as a server still starting and retries until the connect
    /// timeout, then reports only "pool timed out". A server that is not there is reported as
    /// such, at once. Other outcomes are left to the pool.
    ///
    /// # Cancel Safety
    /// Cancel safe: it only opens and drops a socket.
    async fn probe(&self) -> StoreResult<()> {
        match self.options.address() {
            (_, _, Some(_)) => Ok(()),
            (host, port, None) => {
                check_not_refused(D::NAME, host, port, self.acquire_timeout).await
            }
        }
    }

    /// `log_in`, unless what answers at the address turns out not to speak the server's
    /// protocol first: looked at once the login is slow (see [`protocol::wrong_protocol`]),
    /// so that a URL pointed at an HTTP or Redis port, which never answers the driver, fails
    /// in milliseconds rather than at the connect timeout.
    ///
    /// # Cancel Safety
    /// Cancel safe if `log_in` is.
    async fn log_in_checked(
        &self,
        log_in: impl Future<Output = StoreResult<()>>,
    ) -> StoreResult<()> {
        let (host, port, None) = self.options.address() else {
            return log_in.await;
        };
        let check = async {
            tokio::time::sleep(protocol::SLOW_LOGIN).await;
            protocol::wrong_protocol(
                D::NAME,
                host,
                port,
                self.acquire_timeout,
                <DB::Connection as Connection>::Options::PROTOCOL,
            )
            .await
        };
        tokio::select! {
            done = log_in => done,
            wrong = check => Err(wrong),
        }
    }

    /// Marks the store closed (every later call is refused) and closes the pool if it was
    /// built, waiting at most `bound` for connections in use to come back: a connection
    /// stuck on a stalled server never comes back.
    ///
    /// # Cancel Safety
    /// Cancel safe: the store is closed from the first poll on.
    pub async fn close(&self, bound: Duration) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(pool) = self.pool.get() {
            let _ = tokio::time::timeout(bound, pool.close()).await;
        }
    }
}

/// Accepts a schema that `created` failed to create if `probe` can read it: an account
/// without the CREATE privilege fails to create even a table that exists, and may use tables
/// its DBA created. Only when the server answered, or an unreachable server would make the
/// caller wait for a second timeout. `what` names the step in the error.
///
/// # Cancel Safety
/// Cancel safe: the probe only reads.
pub async fn created_or_readable<D: Dialect, T, P, Fut>(
    created: Result<T, sqlx::Error>,
    probe: impl FnOnce() -> Fut,
    what: &str,
) -> StoreResult<()>
where
    Fut: Future<Output = Result<P, sqlx::Error>>,
{
    let Err(e) = created else {
        return Ok(());
    };
    if e.as_database_error().is_some() && probe().await.is_ok() {
        return Ok(());
    }
    Err(db_error::<D>(what, e))
}
