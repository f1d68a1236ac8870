//! The MySQL store's pool and schema readiness, both lazy: the pool is built, the server
//! reached and the tables created on first use, and a failure is tried again by the next
//! call (the pool itself is the SQL core's [`ServerPool`](crate::store::sql::pool::ServerPool)).

use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::AssertSqlSafe;

use super::errors::Mysql;
use super::MysqlStore;
use crate::store::protocol::Expect;
use crate::store::sql::errors::connect_error;
use crate::store::sql::pool::{created_or_readable, server_address};
use crate::store::StoreResult;

server_address!(MySqlConnectOptions, Expect::Mysql);

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
        self.server.connected(|pool| self.log_in(pool)).await
    }

    /// Opens a first pooled connection (kept in the pool for the next statement), so that a
    /// failure to connect or log in (a wrong password, an unknown database) is reported as
    /// connecting to the server, naming it, and not as the step that needed the connection.
    pub(super) async fn log_in(&self, pool: &MySqlPool) -> StoreResult<()> {
        pool.acquire()
            .await
            .map(drop)
            .map_err(|e| connect_error::<Mysql>(&self.server.server(), "MySQL", e))
    }

    /// Creates the lock table if it does not exist, or accepts one the account can read.
    pub(super) async fn ensure_table(&self, pool: &MySqlPool) -> StoreResult<()> {
        let created = sqlx::query(AssertSqlSafe(self.sql.create_table.clone()))
            .execute(pool)
            .await;
        // The server checks the CREATE privilege even when the table exists.
        let probe = || sqlx::query(AssertSqlSafe(self.sql.table_probe.clone())).execute(pool);
        created_or_readable::<Mysql, _, _, _>(created, probe, "creating the lock table").await
    }
}
