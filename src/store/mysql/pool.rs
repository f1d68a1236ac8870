//! The MySQL store's pool and schema readiness, both lazy: the pool is built, the server
//! reached and the tables created on first use, and a failure is tried again by the next
//! call.

use sqlx::mysql::MySqlPool;
use sqlx::AssertSqlSafe;

use super::errors::Mysql;
use super::MysqlStore;
use crate::store::protocol::{self, Expect};
use crate::store::sql::errors::{connect_error, db_error};
use crate::store::sql::pool::{built_pool, connected_pool};
use crate::store::StoreResult;

impl MysqlStore {
    /// The pool, built on first use, once the table exists.
    pub(super) async fn ready(&self) -> StoreResult<&MySqlPool> {
        let pool = self.connected().await?;
        self.table_ready
            .get_or_try_init(|| self.ensure_table(pool))
            .await?;
        Ok(pool)
    }

    /// The pool, built on first use, once a first connection logged in; creates nothing
    /// (read-only operations use it, so that looking never runs DDL).
    pub(super) async fn connected(&self) -> StoreResult<&MySqlPool> {
        let pool = self.pool()?;
        connected_pool::<_, Mysql, _>(pool, &self.closed, &self.connected, || async {
            self.probe().await?;
            self.log_in_checked(pool).await
        })
        .await
    }

    /// [`Self::log_in`], unless what answers at the address turns out not to speak MySQL's
    /// protocol first: looked at once the login is slow (see [`protocol::wrong_protocol`]),
    /// so that a URL pointed at an HTTP or Redis port, which never greets the driver, fails in
    /// milliseconds rather than at the connect timeout.
    ///
    /// # Cancel Safety
    /// Cancel safe, as [`Self::log_in`] is.
    pub(super) async fn log_in_checked(&self, pool: &MySqlPool) -> StoreResult<()> {
        let opts = &self.connect_options;
        if opts.get_socket().is_some() {
            return self.log_in(pool).await;
        }
        let check = async {
            tokio::time::sleep(protocol::SLOW_LOGIN).await;
            let (host, port) = (opts.get_host(), opts.get_port());
            protocol::wrong_protocol("mysql", host, port, self.acquire_timeout, Expect::Mysql).await
        };
        tokio::select! {
            done = self.log_in(pool) => done,
            wrong = check => Err(wrong),
        }
    }

    /// Opens a first pooled connection (kept in the pool for the next statement), so that a
    /// failure to connect or log in (a wrong password, an unknown database) is reported as
    /// connecting to the server, naming it, and not as the step that needed the connection.
    pub(super) async fn log_in(&self, pool: &MySqlPool) -> StoreResult<()> {
        pool.acquire().await.map(drop).map_err(|e| {
            let opts = &self.connect_options;
            let server = match opts.get_socket() {
                Some(path) => path.display().to_string(),
                None => format!("{}:{}", opts.get_host(), opts.get_port()),
            };
            connect_error::<Mysql>(&server, "MySQL", e)
        })
    }

    /// Before the first use of the pool, one plain TCP connection to the server: sqlx's pool
    /// treats "connection refused" as a server still starting and retries until the connect
    /// timeout, then reports only "pool timed out". A server that is not there is reported as
    /// such, at once. Other outcomes are left to the pool.
    pub(super) async fn probe(&self) -> StoreResult<()> {
        let opts = &self.connect_options;
        if opts.get_socket().is_some() {
            return Ok(());
        }
        crate::store::refused::check_not_refused(
            "mysql",
            opts.get_host(),
            opts.get_port(),
            self.acquire_timeout,
        )
        .await
    }

    pub(super) async fn ensure_table(&self, pool: &MySqlPool) -> StoreResult<()> {
        let created = sqlx::query(AssertSqlSafe(self.sql.create_table.clone()))
            .execute(pool)
            .await;
        let Err(e) = created else {
            return Ok(());
        };
        // The server checks the CREATE privilege even when the table exists, so an account
        // limited to reading and writing a table its DBA created would fail here: accept the
        // table if it can be read. Only when the server answered, or an unreachable server
        // would make the caller wait for a second timeout.
        if e.as_database_error().is_some() {
            let probe = sqlx::query(AssertSqlSafe(self.sql.table_probe.clone()))
                .execute(pool)
                .await;
            if probe.is_ok() {
                return Ok(());
            }
        }
        Err(db_error::<Mysql>("creating the lock table", e))
    }

    pub(super) fn pool(&self) -> StoreResult<&MySqlPool> {
        built_pool::<_, Mysql>(
            &self.pool,
            &self.closed,
            self.pool_size,
            self.acquire_timeout,
            &self.connect_options,
        )
    }
}
