//! What the release announcements of the SQL stores with a server share (MySQL's doorbell,
//! PostgreSQL's `LISTEN`): the names this process's waiters watch and the broadcast of their
//! releases to the engine, which the store and its background task hold together. (The
//! task's back-off between attempts to reopen its connection is [`crate::store::reopen`].)

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::broadcast;

use crate::store::watched::Watched;

/// Releases buffered for the engine before a slow receiver loses some (each loss costs its
/// waiter one poll).
pub const RELEASES_BUFFERED: usize = 1024;

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
