//! Wake-ups across N servers: a release is announced by every server that freed the lock,
//! and the announcements of all servers are merged into one stream (see
//! [`RedlockStore::connect`]). Watching a key subscribes on every server; each server's
//! subscriptions are made in order by a task of its own, so a server that is paused delays
//! only its own, and a quick watch–unwatch–watch can never leave a server out of step.

use super::quorum::{ask_all, Tally};
use super::RedlockStore;
use crate::store::redis::RedisStore;
use crate::store::watched::Watched;
use crate::store::ReleaseNotifications;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, oneshot};

enum Change {
    Watch(String, oneshot::Sender<()>),
    Unwatch(String),
}

/// The watched keys (with their local watcher counts) and one subscription queue per server.
pub(super) struct Subscriptions {
    watched: Watched,
    queues: Vec<mpsc::UnboundedSender<Change>>,
}

impl Subscriptions {
    /// Starts one subscription task per server; each ends with this value.
    pub(super) fn new(servers: &[Arc<RedisStore>]) -> Subscriptions {
        let queues = servers
            .iter()
            .map(|server| {
                let (tx, mut rx) = mpsc::unbounded_channel::<Change>();
                let server = server.clone();
                tokio::spawn(async move {
                    while let Some(change) = rx.recv().await {
                        match change {
                            Change::Watch(key, done) => {
                                server.watch(&key).await;
                                let _ = done.send(());
                            }
                            Change::Unwatch(key) => server.unwatch(&key).await,
                        }
                    }
                });
                tx
            })
            .collect();
        Subscriptions {
            watched: Watched::default(),
            queues,
        }
    }
}

impl ReleaseNotifications for RedlockStore {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.released.subscribe()
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            if !self.subscriptions.watched.add(key) {
                return;
            }
            let acks: Vec<_> = self
                .subscriptions
                .queues
                .iter()
                .map(|queue| {
                    let (done, ack) = oneshot::channel();
                    let _ = queue.send(Change::Watch(key.to_string(), done));
                    async move { Ok(ack.await.is_ok()) }
                })
                .collect();
            // A release reaches a quorum of servers, so listening on N − quorum + 1 of them is
            // enough to hear it; the rest subscribe in the background.
            let enough = self.servers.len() - self.quorum + 1;
            ask_all(acks, Some(self.connect_timeout), |a| {
                Tally::of(a, |ok| *ok).yes >= enough
            })
            .await;
        }
        .boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            if !self.subscriptions.watched.remove(key) {
                return;
            }
            for queue in &self.subscriptions.queues {
                let _ = queue.send(Change::Unwatch(key.to_string()));
            }
        }
        .boxed()
    }

    fn watched(&self) -> usize {
        self.subscriptions.watched.len()
    }
}
