//! The PostgreSQL store's pool and schema readiness, both lazy: the pool is built, the
//! server reached, the session checked as the store's own and the tables created on first
//! use, and a failure is tried again by the next call (the pool itself is the SQL core's
//! [`ServerPool`](crate::store::sql::pool::ServerPool)).

use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{AssertSqlSafe, Connection, Row};

use super::errors::{is_protocol_violation, Postgres};
use super::PostgresStore;
use crate::store::protocol::Expect;
use crate::store::sql::errors::{connect_error, db_error};
use crate::store::sql::pool::{created_or_readable, server_address};
use crate::store::{ErrorKind, StoreError, StoreResult};

server_address!(PgConnectOptions, Expect::Postgres);

impl PostgresStore {
    /// The pool, built on first use, once the table exists.
    pub(super) async fn ready(&self) -> StoreResult<&PgPool> {
        let pool = self.connected().await?;
        self.table_ready
            .get_or_try_init(|| {
                self.ensure_schema(
                    pool,
                    &self.sql.create,
                    &self.sql.probe,
                    "creating the lock table",
                )
            })
            .await?;
        Ok(pool)
    }

    /// The pool, built on first use, once a first session was opened and checked (see
    /// [`Self::log_in`]); creates nothing (read-only operations use it, so that looking never
    /// runs DDL).
    pub(super) async fn connected(&self) -> StoreResult<&PgPool> {
        self.server.connected(|pool| self.log_in(pool)).await
    }

    /// Opens a first pooled session (kept in the pool for the next statement), so that a
    /// failure to connect or log in (a wrong password, an unknown database) is reported as
    /// connecting to the server, naming it, and checks that the session is the store's own.
    ///
    /// The store needs sessions that are its own from connection to close: `statement_timeout`
    /// travels in the startup packet, statements are prepared once per connection, and
    /// release announcements need a session that stays `LISTEN`ing. A pooler that hands one
    /// server session to several clients (PgBouncer in transaction or statement mode) breaks
    /// all three, and PgBouncer either refuses the `options` startup parameter or drops it
    /// (`ignore_startup_parameters`) whatever its mode. So both are refused here, with
    /// [`ErrorKind::Unsupported`]: a refused startup parameter (08P01, when the same login
    /// without it is accepted) and a session whose `statement_timeout` is not the one asked for.
    ///
    /// [`ErrorKind::Unsupported`]: crate::store::ErrorKind::Unsupported
    pub(super) async fn log_in(&self, pool: &PgPool) -> StoreResult<()> {
        let connecting = format!("connecting to {}", self.server.server());
        let mut conn = match pool.acquire().await {
            Ok(conn) => conn,
            Err(e) if is_protocol_violation(&e) && self.accepted_without_options().await => {
                return Err(StoreError::new(
                    ErrorKind::Unsupported,
                    format!(
                        "postgres: {connecting}: the server refused the startup parameters \
                         that set the session's statement_timeout and extra_float_digits (what \
                         PgBouncer does unless told to ignore them), and accepts the same login \
                         without them: {UNSUPPORTED_POOLER}"
                    ),
                ))
            }
            Err(e) => {
                return Err(connect_error::<Postgres>(
                    &self.server.server(),
                    "PostgreSQL",
                    e,
                ))
            }
        };
        // A simple query: no prepared statement, whatever stands in front of the server.
        let setting: Option<String> =
            sqlx::raw_sql("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'")
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| db_error::<Postgres>(&connecting, e))?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(|e| db_error::<Postgres>(&connecting, e))?;
        if setting.as_deref() != Some(self.statement_timeout_ms.as_str()) {
            return Err(StoreError::new(
                ErrorKind::Unsupported,
                format!(
                    "postgres: {connecting}: the session runs with statement_timeout {} ms \
                     instead of the {} ms it was opened with, so something between the client \
                     and PostgreSQL dropped the `options` startup parameter (PgBouncer's \
                     ignore_startup_parameters): {UNSUPPORTED_POOLER}",
                    setting.as_deref().unwrap_or("unknown"),
                    self.statement_timeout_ms
                ),
            ));
        }
        Ok(())
    }

    /// Whether the server accepts a login without the startup parameters the store adds
    /// (`options`, `extra_float_digits`): then it was those it refused.
    pub(super) async fn accepted_without_options(&self) -> bool {
        let attempt = tokio::time::timeout(self.server.acquire_timeout(), async {
            let conn = sqlx::PgConnection::connect_with(&self.plain_options).await?;
            conn.close().await
        });
        matches!(attempt.await, Ok(Ok(())))
    }

    /// Runs the `create` script; if the server refuses it, accepts tables that `probe` can
    /// read (an account without CREATE on the schema fails here even when they exist). `what`
    /// names the step in the error.
    pub(super) async fn ensure_schema(
        &self,
        pool: &PgPool,
        create: &Arc<str>,
        probe: &Arc<str>,
        what: &str,
    ) -> StoreResult<()> {
        let created = sqlx::raw_sql(AssertSqlSafe(create.clone()))
            .execute(pool)
            .await;
        let probe = || sqlx::query(AssertSqlSafe(probe.clone())).execute(pool);
        created_or_readable::<Postgres, _, _, _>(created, probe, what).await
    }
}

/// What a refused pooler's message ends with.
const UNSUPPORTED_POOLER: &str = "deadbolt needs server sessions of its own (a pooler in \
     transaction or statement mode, such as PgBouncer's pool_mode = transaction, is not \
     supported): connect to PostgreSQL directly";
