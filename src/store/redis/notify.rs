//! Release announcements: the release script publishes on the key's channel, and one shared
//! subscriber connection per store is subscribed to a channel only while someone in this
//! process waits for that key. Released keys go out on a broadcast channel the engine reads.

use super::keys::release_channel;
use super::{Link, RedisStore};
use crate::runtime::debug::debug;
use crate::store::ReleaseNotifications;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use redis::aio::PubSubSink;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::broadcast;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ReleaseNotifications for RedisStore {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.released.subscribe()
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let channel = release_channel(key);
            {
                let mut watched = lock(&self.watched);
                let count = watched
                    .entry(channel.clone())
                    .or_insert((key.to_string(), 0));
                count.1 += 1;
                if count.1 > 1 {
                    return;
                }
            }
            if let Link::Cluster(c) = &self.link {
                let _ = c.subscribe(&channel).await;
            } else if let Some(mut sink) = self.subscriber_sink().await {
                let _ = sink.subscribe(&channel).await;
            }
        }
        .boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let channel = release_channel(key);
            {
                let mut watched = lock(&self.watched);
                match watched.get_mut(&channel) {
                    Some(count) if count.1 > 1 => {
                        count.1 -= 1;
                        return;
                    }
                    Some(_) => {
                        watched.remove(&channel);
                    }
                    None => return,
                }
            }
            if let Link::Cluster(c) = &self.link {
                let _ = c.unsubscribe(&channel).await;
                return;
            }
            let sink = self.subscriber.lock().await.clone();
            if let Some(mut sink) = sink {
                let _ = sink.unsubscribe(&channel).await;
            }
        }
        .boxed()
    }

    fn watched(&self) -> usize {
        lock(&self.watched).len()
    }
}

/// Re-opens the subscriber after its connection dropped, every [`RESUBSCRIBE_EVERY`] until it
/// succeeds, while any key is watched (waiters poll meanwhile).
fn resubscribe(store: Weak<RedisStore>) -> BoxFuture<'static, ()> {
    async move {
        loop {
            tokio::time::sleep(RESUBSCRIBE_EVERY).await;
            let Some(s) = store.upgrade() else { return };
            if s.closed.load(Ordering::Acquire) || lock(&s.watched).is_empty() {
                return;
            }
            if s.subscriber_sink().await.is_some() {
                return;
            }
        }
    }
    .boxed()
}

/// How soon a dropped subscriber connection is opened again.
const RESUBSCRIBE_EVERY: Duration = Duration::from_millis(100);

impl RedisStore {
    /// The shared subscriber, opened on first use. Its reader task maps each message back to
    /// the lock key and broadcasts it; if the connection drops, the next watch opens a new one
    /// and re-subscribes every watched channel.
    async fn subscriber_sink(&self) -> Option<PubSubSink> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let mut guard = self.subscriber.lock().await;
        if let Some(sink) = guard.as_ref() {
            return Some(sink.clone());
        }
        let client = match &self.link {
            Link::Single(node) => node.client.clone(),
            Link::Sentinel(s) => s.node().await.ok()?.client.clone(),
            Link::Cluster(_) => return None,
        };
        let pubsub = tokio::time::timeout(
            Duration::from_millis(self.connect_timeout_ms),
            client.get_async_pubsub(),
        )
        .await
        .ok()?
        .ok()?;
        let (mut sink, mut stream) = pubsub.split();
        let channels: Vec<String> = lock(&self.watched).keys().cloned().collect();
        for channel in channels {
            let _ = sink.subscribe(&channel).await;
        }
        let weak = self.me.clone();
        tokio::spawn(async move {
            use futures_util::StreamExt;
            while let Some(msg) = stream.next().await {
                let Some(store) = weak.upgrade() else { return };
                let key = match lock(&store.watched).get(msg.get_channel_name()) {
                    Some((key, _)) => key.clone(),
                    None => continue,
                };
                // Nobody listening (no engine) is fine: the send just finds no receiver.
                let _ = store.released.send(key);
            }
            // The subscriber connection ended: forget it, and open a new one at once if
            // anyone still waits, so their announcements resume.
            if let Some(store) = weak.upgrade() {
                *store.subscriber.lock().await = None;
            }
            debug!("redis: the subscriber connection ended; reopening it for its waiters");
            tokio::spawn(resubscribe(weak));
        });
        *guard = Some(sink.clone());
        Some(sink)
    }
}

/// Reads a cluster subscriber's pushes: each sharded message on a watched channel is the
/// release of that channel's key. Ends with the store.
pub(super) async fn forward_pushes(
    store: Weak<RedisStore>,
    mut pushes: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
) {
    while let Some(push) = pushes.recv().await {
        if !matches!(
            push.kind,
            redis::PushKind::SMessage | redis::PushKind::Message
        ) {
            continue;
        }
        let Some(redis::Value::BulkString(channel)) = push.data.first() else {
            continue;
        };
        let Some(store) = store.upgrade() else { return };
        let key = std::str::from_utf8(channel)
            .ok()
            .and_then(|c| lock(&store.watched).get(c).map(|(key, _)| key.clone()));
        if let Some(key) = key {
            let _ = store.released.send(key);
        }
    }
}
