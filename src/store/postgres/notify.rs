//! Release announcements over `LISTEN`/`NOTIFY`: the release statement calls `pg_notify` on
//! the table's channel (its name is the table's) with the lock name in hex as the payload, and
//! one listening connection per store, opened when a key is first watched, hears them all. A
//! payload is mapped back to the exact name it encodes and reaches the engine only if a waiter
//! of this process watches that name.
//!
//! The listening connection is sqlx's `PgListener`, on a pool of its own (one connection, not
//! taken from the store's pool). When it drops (a server restart, a network failure), it is
//! opened again and every watched name is announced once, since releases made meanwhile went
//! unheard; until then waiters poll.

use crate::runtime::debug::debug;
use crate::store::reopen::Reopen;
use crate::store::sql::releases::Releases;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::PostgresStore;
use crate::store::ReleaseNotifications;

/// What the store and its listening task share.
struct Shared {
    /// Watched names, and released ones for the engine.
    releases: Releases,
    /// Whether the listening connection is open and listening.
    listening: watch::Sender<bool>,
}

impl Shared {
    /// Passes on the name a payload encodes, if a local waiter watches it.
    fn deliver(&self, payload: &str) {
        let Some(key) = decode_hex(payload).and_then(|b| String::from_utf8(b).ok()) else {
            return;
        };
        if self.releases.watched.contains(&key) {
            self.releases.announce(key);
        }
    }

    /// Announces every watched name: releases may have gone unheard.
    fn wake_all(&self) {
        for key in self.releases.watched.keys() {
            self.releases.announce(key);
        }
    }
}

/// The bytes a lower- or upper-case hex string encodes (`encode(name, 'hex')`).
pub(super) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// The release announcements of one store.
pub(super) struct Notifier {
    shared: Arc<Shared>,
    /// The channel: the table's name.
    channel: String,
    connect_options: PgConnectOptions,
    connect_timeout: Duration,
    started: AtomicBool,
    /// Ends the listening task (on `close`, or when the store is dropped).
    stop: CancellationToken,
}

impl Notifier {
    pub(super) fn new(
        channel: &str,
        connect_options: PgConnectOptions,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                releases: Releases::default(),
                listening: watch::channel(false).0,
            }),
            channel: channel.to_owned(),
            connect_options,
            connect_timeout,
            started: AtomicBool::new(false),
            stop: CancellationToken::new(),
        }
    }

    /// Ends the listening task and closes its connection.
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }

    /// Starts the listening task, once.
    fn start(&self) {
        if self.stop.is_cancelled() || self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        // One connection, never recycled for age or idleness: it is meant to sit idle.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(self.connect_timeout)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(self.connect_options.clone());
        tokio::spawn(listen(
            self.shared.clone(),
            pool,
            self.channel.clone(),
            self.connect_timeout,
            self.stop.clone(),
        ));
    }
}

/// Opens a listening connection on `channel`, within `bound`.
async fn open(pool: &PgPool, channel: &str, bound: Duration) -> Option<PgListener> {
    let opened = tokio::time::timeout(bound, async {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(channel).await?;
        Ok::<_, sqlx::Error>(listener)
    })
    .await;
    match opened {
        Ok(Ok(listener)) => Some(listener),
        Ok(Err(e)) => {
            debug!(
                "postgres: cannot open the listening connection ({:?})",
                crate::store::sql::errors::kind_of::<super::errors::Postgres>(&e)
            );
            None
        }
        Err(_) => None,
    }
}

/// The listening task: hears announcements and passes them on, reopening the connection when
/// it drops, until `stop`.
async fn listen(
    shared: Arc<Shared>,
    pool: PgPool,
    channel: String,
    bound: Duration,
    stop: CancellationToken,
) {
    let mut reopen = Reopen::default();
    let mut first = true;
    'reopen: while !stop.is_cancelled() {
        let opened = tokio::select! {
            _ = stop.cancelled() => break,
            opened = open(&pool, &channel, bound) => opened,
        };
        let Some(mut listener) = opened else {
            if !reopen.wait(&stop).await {
                break;
            }
            continue;
        };
        reopen.opened();
        shared.listening.send_replace(true);
        // Releases made while the connection was down went unheard. (Before the first
        // opening, nothing was missed: `watch` returns once listening, and its caller looks
        // at the lock after that.)
        if !first {
            shared.wake_all();
        }
        first = false;
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => break 'reopen,
                next = listener.try_recv() => next,
            };
            match next {
                Ok(Some(notification)) => shared.deliver(notification.payload()),
                // The connection dropped and sqlx opened another (listening again): what was
                // announced in between went unheard.
                Ok(None) => shared.wake_all(),
                Err(e) => {
                    debug!(
                        "postgres: the listening connection ended ({:?}); reopening it",
                        crate::store::sql::errors::kind_of::<super::errors::Postgres>(&e)
                    );
                    shared.listening.send_replace(false);
                    continue 'reopen;
                }
            }
        }
    }
    shared.listening.send_replace(false);
    // The listener's drop hands its connection back to the pool (after an UNLISTEN); a server
    // that stopped answering must not keep this task alive.
    let _ = tokio::time::timeout(bound, pool.close()).await;
}

impl ReleaseNotifications for PostgresStore {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.notifier.shared.releases.subscribe()
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let notifier = &self.notifier;
            notifier.shared.releases.watched.add(key);
            if notifier.stop.is_cancelled() {
                return;
            }
            notifier.start();
            // Return once the connection listens, so that the caller's next look at the lock
            // is followed by every later release; if it cannot, waiters poll.
            let mut listening = notifier.shared.listening.subscribe();
            let _ =
                tokio::time::timeout(notifier.connect_timeout, listening.wait_for(|on| *on)).await;
        }
        .boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        self.notifier.shared.releases.unwatch(key)
    }

    fn watched(&self) -> usize {
        self.notifier.shared.releases.watched.len()
    }
}
