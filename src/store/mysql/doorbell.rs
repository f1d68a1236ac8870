//! Release announcements for the waiters of this process: the doorbell.
//!
//! MySQL and MariaDB have no server push a lock store could use (no `LISTEN`/`NOTIFY`; a
//! blocked `GET_LOCK` is woken only by the session holding the name, so a push would pin a
//! session per held lock on the holder's side and a session per waited-for name on the
//! waiter's, as sql-lock does). Instead one connection per process, opened when a name is
//! first watched, looks at the lease rows of every watched name at once every
//! [`RING_PERIOD`] (one primary-key read, [`MAX_NAMES`] names a statement), and rings for a
//! lock it finds free or expired when it was live at its previous look, or at its first look,
//! and for a semaphore whose live rows (holders and queued places: how many, their permits
//! and tokens) changed since its previous look, or at its first look.
//! A ring is only a hint to ask the store again, never a grant: the waiter's own acquisition
//! decides. A ring lost (the connection failed, a name freed and taken again between two
//! looks) delays a waiter until its own poll (`retryDelay`), which stays as the fallback; a
//! spurious one costs a look.
//!
//! The connection is a single one of its own (not one of the pool's), reopened with a
//! back-off after a failure, and closed once nothing was watched for [`IDLE_CLOSE`]. It only
//! reads, so it cannot collide with anything another application does on the server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::debug::debug;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{AssertSqlSafe, Connection, Row};
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use super::MysqlStore;
use crate::store::permits::watch_key;
use crate::store::reopen::Reopen;
use crate::store::sql::releases::Releases;
use crate::store::ReleaseNotifications;

/// How often the watched names are looked at while any is watched: a waiter learns of a
/// release after half of it on average, plus one read.
pub(super) const RING_PERIOD: Duration = Duration::from_millis(2);

/// Names looked at by one statement; more watched names take more statements per look.
pub(super) const MAX_NAMES: usize = 256;

/// With nothing watched for this long, the connection is closed.
pub(super) const IDLE_CLOSE: Duration = Duration::from_secs(10);

// Which of the names bound are held by a live lease: the lease table's primary key. It is
// followed by `?, ` repeated and `?)`, one placeholder per name.
const SQL_LIVE_HEAD: &str = "SELECT name FROM {table}
WHERE owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AND name IN (";

// The live rows of the semaphores bound, one line per semaphore that has any: a fingerprint
// that changes when a holder or a queued place comes or goes (tokens grow with each grant).
// Followed by the placeholders as `SQL_LIVE_HEAD`, then `SQL_PERMITS_TAIL`.
const SQL_PERMITS_HEAD: &str =
    "SELECT name, CONCAT(COUNT(*), ':', SUM(permits), ':', SUM(token), ':', SUM(kind))
FROM {permits} WHERE expires_ms > {now_ms} AND name IN (";
const SQL_PERMITS_TAIL: &str = " GROUP BY name";

/// The texts of a look, `texts[i]` for `1 << i` names: a look pads its names to the next
/// size (repeating the last), so a few texts, each prepared once, serve every count.
fn sized(head: &str, tail: &str) -> Vec<Arc<str>> {
    let mut out = Vec::new();
    let mut size = 1;
    while size <= MAX_NAMES {
        let mut text = head.to_owned();
        text.push_str(&"?, ".repeat(size - 1));
        text.push_str("?)");
        text.push_str(tail);
        out.push(text.into());
        size *= 2;
    }
    out
}

/// The statements of the looks of the store on lock table `table` (already validated).
pub(super) struct Looking {
    /// At the lock table (see [`sized`]).
    locks: Vec<Arc<str>>,
    /// At the permit table.
    permits: Vec<Arc<str>>,
}

impl Looking {
    pub(super) fn new(table: &str) -> Self {
        let quoted = format!("`{table}`");
        let locks = sized(&SQL_LIVE_HEAD.replace(super::sql::TABLE, &quoted), "");
        let permits = sized(
            &super::permits::fill_template(table, SQL_PERMITS_HEAD),
            SQL_PERMITS_TAIL,
        );
        Self { locks, permits }
    }
}

/// The index in [`live_statements`] of the text for `n` names (1..=[`MAX_NAMES`]).
pub(super) fn bucket(n: usize) -> usize {
    n.max(1).next_power_of_two().trailing_zeros() as usize
}

/// The semaphore a watched name is the [`watch_key`] of, if it is one.
pub(super) fn semaphore_of(watched: &str) -> Option<&str> {
    watched.strip_suffix(&*watch_key(""))
}

/// What a look found of a watched name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// A lock: whether a live lease holds it.
    Lock(bool),
    /// A semaphore: the fingerprint of its live rows (empty: none).
    Permits(String),
}

impl Seen {
    /// Whether finding `self` after `before` (`None`: a first look) rings: a lock found free
    /// that was not free before; a semaphore whose rows changed.
    fn rings(&self, before: Option<&Seen>) -> bool {
        match self {
            Seen::Lock(true) => false,
            Seen::Lock(false) => before != Some(&Seen::Lock(false)),
            Seen::Permits(_) => before != Some(self),
        }
    }
}

/// What each watched name looked like at the last look. Decides the rings.
#[derive(Debug, Default)]
pub(super) struct Looks(HashMap<String, Seen>);

impl Looks {
    /// Records a look (each watched name and what was found), forgetting names no longer
    /// watched, and returns the names to ring (see [`Seen::rings`]).
    pub(super) fn record(&mut self, seen: Vec<(String, Seen)>) -> Vec<String> {
        let mut ring = Vec::new();
        let mut next = HashMap::with_capacity(seen.len());
        for (name, now) in seen {
            if now.rings(self.0.get(&name)) {
                ring.push(name.clone());
            }
            next.insert(name, now);
        }
        self.0 = next;
        ring
    }

    /// Forgets every look: after the connection failed, what happened meanwhile is unknown,
    /// so each name counts as looked at for the first time.
    pub(super) fn forget(&mut self) {
        self.0.clear();
    }
}

/// What the store and its looking task share.
struct Shared {
    /// Watched names, and released ones for the engine.
    releases: Releases,
    /// Signalled when a name is watched, so an idle task looks again.
    woken: Notify,
    /// Looks completed (for tests: a look that started after an event has completed once
    /// this grew by two).
    looks: AtomicU64,
}

/// The doorbell of one store.
pub(super) struct Doorbell {
    shared: Arc<Shared>,
    connect_options: MySqlConnectOptions,
    connect_timeout: Duration,
    statements: Arc<Looking>,
    period: Duration,
    started: AtomicBool,
    /// Ends the looking task (on `close`, or when the store is dropped).
    stop: CancellationToken,
}

impl Doorbell {
    /// The doorbell of the store on lock table `table` (already validated).
    pub(super) fn new(
        table: &str,
        connect_options: MySqlConnectOptions,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                releases: Releases::default(),
                woken: Notify::new(),
                looks: AtomicU64::new(0),
            }),
            connect_options,
            connect_timeout,
            statements: Arc::new(Looking::new(table)),
            period: RING_PERIOD,
            started: AtomicBool::new(false),
            stop: CancellationToken::new(),
        }
    }

    /// Ends the looking task and closes its connection.
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }

    /// Looks completed so far (for tests).
    #[cfg(test)]
    pub(super) fn looks(&self) -> u64 {
        self.shared.looks.load(Ordering::Acquire)
    }

    /// Starts the looking task, once.
    fn start(&self) {
        if self.stop.is_cancelled() || self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let task = Task {
            shared: self.shared.clone(),
            connect_options: self.connect_options.clone(),
            bound: self.connect_timeout,
            statements: self.statements.clone(),
            period: self.period,
            stop: self.stop.clone(),
        };
        tokio::spawn(task.run());
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The looking task's state.
struct Task {
    shared: Arc<Shared>,
    connect_options: MySqlConnectOptions,
    /// Bound on opening the connection and on each look.
    bound: Duration,
    statements: Arc<Looking>,
    period: Duration,
    stop: CancellationToken,
}

impl Task {
    /// The watched names, in no particular order.
    fn names(&self) -> Vec<String> {
        self.shared.releases.watched.keys()
    }

    /// Opens the connection, within the bound.
    async fn open(&self) -> Option<MySqlConnection> {
        match tokio::time::timeout(
            self.bound,
            MySqlConnection::connect_with(&self.connect_options),
        )
        .await
        {
            Ok(Ok(conn)) => Some(conn),
            Ok(Err(e)) => {
                debug!(
                    "mysql: the doorbell cannot connect ({:?})",
                    crate::store::sql::errors::kind_of::<super::errors::Mysql>(&e)
                );
                None
            }
            Err(_) => None,
        }
    }

    /// Runs `texts` (see [`sized`]) over `names`, [`MAX_NAMES`] at a time, and collects the
    /// rows: the name, and the second column as text if there is one.
    async fn rows(
        conn: &mut MySqlConnection,
        texts: &[Arc<str>],
        names: &[&str],
    ) -> Result<HashMap<String, String>, sqlx::Error> {
        let mut found = HashMap::new();
        for chunk in names.chunks(MAX_NAMES) {
            let size = chunk.len().next_power_of_two();
            let mut query = sqlx::query(AssertSqlSafe(texts[bucket(size)].clone()));
            for i in 0..size {
                query = query.bind(chunk[i.min(chunk.len() - 1)].as_bytes());
            }
            for row in query.fetch_all(&mut *conn).await? {
                let name: Vec<u8> = row.try_get(0)?;
                let value = match row.columns().len() {
                    1 => String::new(),
                    _ => {
                        let print: Option<Vec<u8>> = row.try_get(1)?;
                        String::from_utf8_lossy(&print.unwrap_or_default()).into_owned()
                    }
                };
                if let Ok(name) = String::from_utf8(name) {
                    found.insert(name, value);
                }
            }
        }
        Ok(found)
    }

    /// One look at every name in `watched`.
    async fn look(
        &self,
        conn: &mut MySqlConnection,
        watched: &[String],
    ) -> Result<Vec<(String, Seen)>, sqlx::Error> {
        let (mut locks, mut semaphores) = (Vec::new(), Vec::new());
        for name in watched {
            match semaphore_of(name) {
                Some(semaphore) => semaphores.push(semaphore),
                None => locks.push(name.as_str()),
            }
        }
        let mut seen = Vec::with_capacity(watched.len());
        if !locks.is_empty() {
            let live = Self::rows(conn, &self.statements.locks, &locks).await?;
            seen.extend(
                locks
                    .iter()
                    .map(|name| (name.to_string(), Seen::Lock(live.contains_key(*name)))),
            );
        }
        if !semaphores.is_empty() {
            let mut rows = Self::rows(conn, &self.statements.permits, &semaphores).await?;
            seen.extend(semaphores.iter().map(|name| {
                let print = rows.remove(*name).unwrap_or_default();
                (watch_key(name), Seen::Permits(print))
            }));
        }
        Ok(seen)
    }

    /// Waits until a name is watched (`true`), or the connection has been idle for
    /// [`IDLE_CLOSE`] (`false`), or the store stops (`None`).
    async fn idle(&self, connected: bool) -> Option<bool> {
        loop {
            let woken = self.shared.woken.notified();
            if !self.names().is_empty() {
                return Some(true);
            }
            let idle = async {
                if connected {
                    tokio::time::sleep(IDLE_CLOSE).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                _ = woken => {}
                _ = idle => return Some(false),
            }
        }
    }

    async fn run(self) {
        let mut conn: Option<MySqlConnection> = None;
        let mut looks = Looks::default();
        let mut reopen = Reopen::default();
        loop {
            match self.idle(conn.is_some()).await {
                None => break,
                Some(false) => {
                    if let Some(c) = conn.take() {
                        let _ = tokio::time::timeout(self.bound, c.close()).await;
                    }
                    looks.forget();
                    continue;
                }
                Some(true) => {}
            }
            if conn.is_none() {
                conn = tokio::select! {
                    _ = self.stop.cancelled() => break,
                    opened = self.open() => opened,
                };
                if conn.is_none() {
                    if !reopen.wait(&self.stop).await {
                        break;
                    }
                    continue;
                }
                reopen.opened();
                looks.forget();
            }
            let names = self.names();
            let Some(c) = conn.as_mut() else { continue };
            let looked = tokio::select! {
                _ = self.stop.cancelled() => break,
                looked = tokio::time::timeout(self.bound, self.look(c, &names)) => looked,
            };
            match looked {
                Ok(Ok(seen)) => {
                    self.shared.looks.fetch_add(1, Ordering::AcqRel);
                    for name in looks.record(seen) {
                        self.shared.releases.announce(name);
                    }
                }
                failed => {
                    if let Ok(Err(e)) = failed {
                        debug!(
                            "mysql: the doorbell's look failed ({:?}); reconnecting",
                            crate::store::sql::errors::kind_of::<super::errors::Mysql>(&e)
                        );
                    }
                    // A connection that failed or stalled is dropped (not closed politely:
                    // that could wait on the stall); waiters poll until the next one opens.
                    conn = None;
                    continue;
                }
            }
            tokio::select! {
                _ = self.stop.cancelled() => break,
                _ = tokio::time::sleep(self.period) => {}
            }
        }
        if let Some(c) = conn.take() {
            let _ = tokio::time::timeout(self.bound, c.close()).await;
        }
    }
}

impl ReleaseNotifications for MysqlStore {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.doorbell.shared.releases.subscribe()
    }

    /// Adds `key` to the names looked at; returns at once (the first look at a name rings
    /// if it is free, so a release before the connection opened is not missed).
    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let doorbell = &self.doorbell;
            doorbell.shared.releases.watched.add(key);
            doorbell.start();
            doorbell.shared.woken.notify_one();
        }
        .boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        self.doorbell.shared.releases.unwatch(key)
    }

    fn watched(&self) -> usize {
        self.doorbell.shared.releases.watched.len()
    }

    fn tells_others_waiting(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
