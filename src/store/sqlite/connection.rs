//! A store's one connection to the database file.
//!
//! Every statement of the store goes through it, one at a time, in the order the operations
//! asked for it (a fair mutex): writes queue here instead of meeting in SQLite's busy handler,
//! which backs off with sleeps of 1, 2, 5, 10… ms, and reads (`inspect`, `list`) take
//! microseconds too. It is a bare connection rather than a pool: sqlx's pool pings every
//! connection it gets back, which doubles the trips to the connection's thread for each
//! statement, and a read through a pool of readers slowed the next write here (measured:
//! a few ms, against none through this one connection).
//!
//! Opening it the first time also sets the file up: WAL mode and the tables.

use super::{closed_error, db_error, is_busy};
use crate::store::{ErrorKind, StoreError, StoreResult};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, MutexGuard};

/// The connection, opened on first use and again after it broke.
pub struct SharedConnection {
    options: SqliteConnectOptions,
    path: PathBuf,
    schema: Vec<String>,
    /// Bound on opening the file (and on switching it to WAL mode).
    open_timeout: Duration,
    slot: Mutex<Option<SqliteConnection>>,
    /// Whether this process set the file up (WAL mode, tables) yet.
    set_up: AtomicBool,
    closed: AtomicBool,
}

/// The connection, held: the store's other statements wait until it is dropped.
pub struct Guard<'a> {
    guard: MutexGuard<'a, Option<SqliteConnection>>,
    /// Whether the statement using it came to an end; a guard dropped before (its future
    /// was cancelled mid-statement) drops the connection, whose state is then unknown.
    finished: bool,
}

impl Guard<'_> {
    /// The connection.
    pub fn conn(&mut self) -> &mut SqliteConnection {
        self.guard
            .as_mut()
            .expect("a Guard always holds an open connection")
    }

    /// Ends the use of the connection with the statement's result; a connection whose worker
    /// failed is dropped, to be opened again by the next statement.
    pub fn finish<T>(mut self, result: sqlx::Result<T>) -> sqlx::Result<T> {
        if matches!(
            result,
            Err(sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed | sqlx::Error::Protocol(_))
        ) {
            *self.guard = None;
        }
        self.finished = true;
        result
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            *self.guard = None;
        }
    }
}

impl SharedConnection {
    /// A connection to `path` with `options`, creating `schema` on first use.
    pub fn new(
        options: SqliteConnectOptions,
        path: PathBuf,
        schema: Vec<String>,
        open_timeout: Duration,
    ) -> Self {
        SharedConnection {
            options,
            path,
            schema,
            open_timeout,
            slot: Mutex::new(None),
            set_up: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// The connection, once the store's earlier statements are done; opened if needed.
    ///
    /// # Cancel Safety
    /// Cancel safe: a cancelled open leaves the connection closed, to be opened next time.
    pub async fn lock(&self) -> StoreResult<Guard<'_>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let mut guard = self.slot.lock().await;
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        if guard.is_none() {
            *guard = Some(self.open().await?);
        }
        Ok(Guard {
            guard,
            finished: false,
        })
    }

    /// The connection if it is open (for background work that should not open the file).
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn lock_if_open(&self) -> Option<Guard<'_>> {
        let guard = self.slot.lock().await;
        guard.as_ref()?;
        Some(Guard {
            guard,
            finished: false,
        })
    }

    /// Closes the connection once the statement in progress is done; later ones fail.
    ///
    /// # Cancel Safety
    /// Cancel safe: the connection is closed or dropped either way.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let conn = self.slot.lock().await.take();
        if let Some(conn) = conn {
            let _ = conn.close().await;
        }
    }

    /// Opens the file; the first time, also checks its directory, puts it in WAL mode and
    /// creates the tables in one write transaction (other processes doing the same wait).
    async fn open(&self) -> StoreResult<SqliteConnection> {
        if let Some(dir) = self.path.parent() {
            if !dir.as_os_str().is_empty() && !dir.is_dir() {
                return Err(StoreError::new(
                    ErrorKind::Unreachable,
                    format!(
                        "sqlite: cannot create {}: the directory {} does not exist (deadbolt creates the file, not its directory)",
                        self.path.display(),
                        dir.display()
                    ),
                ));
            }
        }
        let mut conn = match tokio::time::timeout(self.open_timeout, self.options.connect()).await {
            Ok(conn) => conn.map_err(|e| db_error("open", e))?,
            Err(_) => {
                return Err(StoreError::timeout(format!(
                    "sqlite: opening {} took longer than {} ms",
                    self.path.display(),
                    self.open_timeout.as_millis()
                )))
            }
        };
        if !self.set_up.load(Ordering::Acquire) {
            self.wal_mode(&mut conn).await?;
            let mut tx = conn
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|e| db_error("creating the lock tables", e))?;
            for statement in &self.schema {
                sqlx::query(AssertSqlSafe(statement.as_str()))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db_error("creating the lock tables", e))?;
            }
            tx.commit()
                .await
                .map_err(|e| db_error("creating the lock tables", e))?;
            self.set_up.store(true, Ordering::Release);
        }
        Ok(conn)
    }

    /// Puts the file in WAL mode (a lasting property of the file: usually it already is).
    /// Switching needs the file to itself and does not wait in the busy handler, so a
    /// switch that meets another process is tried again until the open timeout.
    async fn wal_mode(&self, conn: &mut SqliteConnection) -> StoreResult<()> {
        let give_up = Instant::now() + self.open_timeout;
        loop {
            let mode: Result<String, _> = sqlx::query_scalar("PRAGMA journal_mode = WAL")
                .fetch_one(&mut *conn)
                .await;
            match mode {
                Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
                Ok(mode) => {
                    return Err(StoreError::new(
                        ErrorKind::Server,
                        format!(
                            "sqlite: {} cannot use WAL mode (it stays in {mode} mode): it must be on a local filesystem",
                            self.path.display()
                        ),
                    ))
                }
                Err(e) if is_busy(&e) && Instant::now() < give_up => {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(1..10))).await;
                }
                Err(e) => return Err(db_error("switching to WAL mode", e)),
            }
        }
    }
}
