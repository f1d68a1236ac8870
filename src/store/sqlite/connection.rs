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
//! Opening it the first time also sets the file up: WAL mode and the tables. Before every
//! statement it checks that the file at the path is still the one it opened, and leaves a
//! file that was deleted or replaced for the one now there (see `replaced`); after a
//! statement that grants or extends a lease, the store checks once more
//! ([`SharedConnection::moved_since_statement`]).

use super::errors::{closed_error, db_error, is_busy};
use super::replaced::{file_id, moved, FileId, Ghosts, Lease};
use crate::runtime::debug::debug;
use crate::store::{ErrorKind, StoreError, StoreResult};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, MutexGuard};

/// The names this process waits for (the wake-up side channel's).
pub type WatchedFn = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// This process's wake-up registrations, made again in a new file (the old file had them).
pub struct Rewatch {
    /// Registers ?1 (a name) for ?2 (the address).
    pub sql: String,
    /// This store's address.
    pub addr: String,
    /// The names waited for now.
    pub names: WatchedFn,
}

/// The statements that read a replaced file's live leases and carry its fencing counter over.
#[derive(Debug, Clone, Default)]
pub struct Takeover {
    /// Live locks: name, owner, remaining ms.
    pub locks: String,
    /// Live permits of semaphore holders: name, owner, remaining ms.
    pub permits: String,
    /// The fencing counter.
    pub counter: String,
    /// Raises the new file's counter to ?1.
    pub carry: String,
}

/// Locks a std mutex, ignoring poisoning (its data is a plain value).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

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
    /// Whether this store ever set a file up (never reset, unlike `set_up`).
    ever_set_up: AtomicBool,
    closed: AtomicBool,
    /// The identity of the file the connection opened last.
    opened: std::sync::Mutex<Option<FileId>>,
    takeover: Takeover,
    /// Leases live in the files replaced under this store.
    ghosts: std::sync::Mutex<Ghosts>,
    /// The highest fencing counter read from a replaced file, carried into the next one.
    carried: std::sync::Mutex<i64>,
    /// How many times the file at the path was found deleted or replaced.
    replacements: AtomicU64,
    rewatch: Rewatch,
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
        takeover: Takeover,
        rewatch: Rewatch,
        open_timeout: Duration,
    ) -> Self {
        SharedConnection {
            options,
            path,
            schema,
            open_timeout,
            slot: Mutex::new(None),
            set_up: AtomicBool::new(false),
            ever_set_up: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            opened: std::sync::Mutex::new(None),
            takeover,
            ghosts: Default::default(),
            carried: std::sync::Mutex::new(0),
            replacements: AtomicU64::new(0),
            rewatch,
        }
    }

    /// Whether (`lease`, `name`, `owner`) was live in a file replaced since, and its lease
    /// there has not ended: its extension must fail. Ask with the connection held, so that
    /// the file was checked first.
    pub fn is_ghost(&self, lease: Lease, name: &[u8], owner: &[u8]) -> bool {
        lock(&self.ghosts).contains(lease, name, owner)
    }

    /// Whether another owner than `owner` held the lock `name` in a file replaced since, and
    /// its lease there has not ended: the name stays busy for `owner` until then.
    pub fn ghost_of_another(&self, name: &[u8], owner: &[u8]) -> bool {
        lock(&self.ghosts).held_by_another(Lease::Lock, name, owner)
    }

    /// Forgets a ghost taken again in the file now at the path.
    pub fn forget_ghost(&self, lease: Lease, name: &[u8], owner: &[u8]) {
        lock(&self.ghosts).forget(lease, name, owner)
    }

    /// How many times the file at the path was found deleted or replaced (for tests).
    #[cfg(test)]
    pub fn replacements(&self) -> u64 {
        self.replacements.load(Ordering::Relaxed)
    }

    /// Whether a statement of the store is under way (for tests: one that waits in the busy
    /// handler holds the connection).
    #[cfg(test)]
    pub fn in_use(&self) -> bool {
        self.slot.try_lock().is_err()
    }

    /// Ghosts remembered (for tests).
    #[cfg(test)]
    pub fn ghosts(&self) -> usize {
        lock(&self.ghosts).len()
    }

    /// Whether the file at the path is no longer the one the connection opened, asked after
    /// a statement that granted or extended a lease. The check before the statement and the
    /// statement are not one step: a statement that waited in the busy handler (another
    /// process held the write lock) may run in a file deleted or replaced meanwhile, where
    /// processes that left it already read its leases, or never will. A grant or extension
    /// the path still shows after its commit was made while the file was the one at the
    /// path, so whoever leaves the file later reads it; any other is disowned by the caller
    /// (its lease stays in the old file, a ghost for whoever reads it).
    pub fn moved_since_statement(&self) -> bool {
        self.file_moved()
    }

    /// Whether the file at the path is no longer the one the connection opened.
    fn file_moved(&self) -> bool {
        let opened = *lock(&self.opened);
        opened.is_some_and(|id| moved(&self.path, id))
    }

    /// Leaves the connection's file, which was deleted or replaced: its live leases become
    /// ghosts and its fencing counter is carried to the next file, then the connection is
    /// closed (SQLite neither checkpoints nor deletes the `-wal` and `-shm` files of a
    /// database that moved, which may now be the new file's). Best effort within the open
    /// timeout: a file that cannot be read leaves no ghosts, and its holders then hear
    /// `not-owned` from the new file.
    async fn leave(&self, mut old: SqliteConnection) {
        self.replacements.fetch_add(1, Ordering::Relaxed);
        self.set_up.store(false, Ordering::Release);
        debug!("sqlite: the database file was deleted or replaced: reopening it");
        let read = tokio::time::timeout(self.open_timeout, self.read_leases(&mut old)).await;
        if let Ok(Ok((leases, counter))) = read {
            lock(&self.ghosts).add(Instant::now(), leases);
            let mut carried = lock(&self.carried);
            *carried = (*carried).max(counter);
        }
        let _ = tokio::time::timeout(self.open_timeout, old.close()).await;
    }

    /// The live leases of the connection's file and its fencing counter.
    async fn read_leases(
        &self,
        conn: &mut SqliteConnection,
    ) -> sqlx::Result<(Vec<(Lease, Vec<u8>, Vec<u8>, i64)>, i64)> {
        let mut leases = Vec::new();
        for (lease, sql) in [
            (Lease::Lock, &self.takeover.locks),
            (Lease::Permits, &self.takeover.permits),
        ] {
            for row in sqlx::query(AssertSqlSafe(sql.as_str()))
                .fetch_all(&mut *conn)
                .await?
            {
                leases.push((lease, row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
            }
        }
        let counter: Option<i64> =
            sqlx::query_scalar(AssertSqlSafe(self.takeover.counter.as_str()))
                .fetch_optional(&mut *conn)
                .await?;
        Ok((leases, counter.unwrap_or(0)))
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
        if guard.is_some() && self.file_moved() {
            if let Some(old) = guard.take() {
                self.leave(old).await;
            }
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
        // Not on a file that was deleted or replaced: the next call leaves it.
        if self.file_moved() {
            return None;
        }
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

    /// Whether a read can answer "nothing held" without opening anything: this store never
    /// set a file up and there is no file at the path. Reads (`inspect`, `list`, a
    /// semaphore's holders) then create neither the file nor its tables, as the SQL stores'
    /// reads create no table.
    pub fn absent(&self) -> bool {
        !self.ever_set_up.load(Ordering::Acquire) && !self.path.exists()
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
        let mut conn = self.connect().await?;
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
            // After a replaced file: tokens continue above the old file's counter.
            let carried = *lock(&self.carried);
            if carried > 0 {
                sqlx::query(AssertSqlSafe(self.takeover.carry.as_str()))
                    .bind(carried)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db_error("creating the lock tables", e))?;
            }
            // After a replaced file: this process's waiters are told of releases in this one.
            for name in (self.rewatch.names)() {
                sqlx::query(AssertSqlSafe(self.rewatch.sql.as_str()))
                    .bind(name.into_bytes())
                    .bind(self.rewatch.addr.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db_error("creating the lock tables", e))?;
            }
            tx.commit()
                .await
                .map_err(|e| db_error("creating the lock tables", e))?;
            self.set_up.store(true, Ordering::Release);
            self.ever_set_up.store(true, Ordering::Release);
        }
        Ok(conn)
    }

    /// Connects to the file at the path and records its identity. A file replaced between
    /// the two is found by comparing its identity before and after, and connected to again.
    async fn connect(&self) -> StoreResult<SqliteConnection> {
        for _ in 0..3 {
            let before = file_id(&self.path).ok();
            let connect = tokio::time::timeout(self.open_timeout, self.options.connect());
            let conn = match connect.await {
                Ok(conn) => conn.map_err(|e| db_error("open", e))?,
                Err(_) => {
                    return Err(StoreError::timeout(format!(
                        "sqlite: opening {} took longer than {} ms",
                        self.path.display(),
                        self.open_timeout.as_millis()
                    )))
                }
            };
            // `None` before: the connection created the file.
            let after = file_id(&self.path).ok();
            if after.is_some() && (before.is_none() || before == after) {
                let mut opened = lock(&self.opened);
                if opened.is_some() && *opened != after {
                    // Another file than last time (the connection broke meanwhile): set it up.
                    self.set_up.store(false, Ordering::Release);
                }
                *opened = after;
                return Ok(conn);
            }
            let _ = conn.close().await;
        }
        Err(StoreError::new(
            ErrorKind::Unreachable,
            format!(
                "sqlite: {} was replaced or deleted each time it was opened",
                self.path.display()
            ),
        ))
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
