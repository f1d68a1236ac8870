//! What the release announcements of the SQL stores with a server share (MySQL's doorbell,
//! PostgreSQL's `LISTEN`): the names this process's waiters watch and the broadcast of their
//! releases to the engine, which the store and its background task hold together, and the
//! back-off of that task between attempts to reopen its connection.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::store::watched::Watched;

/// Releases buffered for the engine before a slow receiver loses some (each loss costs its
/// waiter one poll).
pub const RELEASES_BUFFERED: usize = 1024;

/// First and longest pause between attempts to reopen the connection.
pub const REOPEN_FIRST: Duration = Duration::from_millis(50);
/// See [`REOPEN_FIRST`].
pub const REOPEN_MAX: Duration = Duration::from_secs(1);

/// The watched names, each counted, and the broadcast of released names to the engine.
#[derive(Debug)]
pub struct Releases {
    /// Watched names and how many `watch` calls each has outstanding.
    pub watched: Watched,
    /// Released names, for the engine.
    released: broadcast::Sender<String>,
}

impl Default for Releases {
    fn default() -> Self {
        Self {
            watched: Watched::default(),
            released: broadcast::channel(RELEASES_BUFFERED).0,
        }
    }
}

impl Releases {
    /// A receiver of the names announced from now on (`ReleaseNotifications::releases`).
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.released.subscribe()
    }

    /// Announces `name` to the engine. Nobody listening (no engine) is fine: the send just
    /// finds no receiver.
    pub fn announce(&self, name: String) {
        let _ = self.released.send(name);
    }

    /// Counts an `unwatch` of `key` (`ReleaseNotifications::unwatch`): the task stops looking
    /// for it, or listening to it, once nobody watches it.
    pub fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            self.watched.remove(key);
        }
        .boxed()
    }
}

/// The pause before the next attempt to reopen a connection that failed to open: from
/// [`REOPEN_FIRST`], doubling up to [`REOPEN_MAX`], and the first again once one opened.
#[derive(Debug)]
pub struct Reopen(Duration);

impl Default for Reopen {
    fn default() -> Self {
        Reopen(REOPEN_FIRST)
    }
}

impl Reopen {
    /// Waits the pause after a failed attempt, doubling the next one. Returns `false` if
    /// `stop` came first.
    ///
    /// # Cancel Safety
    /// Cancel safe: a dropped wait leaves the pause as it was.
    pub async fn wait(&mut self, stop: &CancellationToken) -> bool {
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(self.0) => {}
        }
        self.0 = (self.0 * 2).min(REOPEN_MAX);
        true
    }

    /// A connection opened: the next failure waits the first pause again.
    pub fn opened(&mut self) {
        self.0 = REOPEN_FIRST;
    }
}
