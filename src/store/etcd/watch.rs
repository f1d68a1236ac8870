//! Release announcements from etcd's watch: one stream per store over every key of the
//! store's namespace, deletions only (`NOPUT`), read from the gateway's `/v3/watch` as lines
//! of JSON. A deleted lock key (a release, a compare-and-delete of an expired grant, an
//! operator's delete, the end of a lease) announces its lock; a deleted semaphore holder or
//! queued request announces its semaphore's watch key. Only names a local waiter watches are
//! broadcast.
//!
//! The same stream tells this process's holders at once of a key they hold that anyone else
//! deleted (an operator's force release, a lease etcd revoked or let end): its deletion, with
//! the value it had (`prev_kv`), is a grant `held.rs` still counts (same holder, lease and
//! life of the key), and its holder is reported lost through [`ReleaseNotifications::losses`]
//! rather than at its next extension. This store's own deletions forget the grant first. A
//! waiter of this store may read the deletion (and be granted the key) before the stream
//! does: that grant reports the holder it replaced ([`Watches::replaced`]).
//!
//! The stream is opened on the first `watch` or grant and kept while the store lives. When it breaks
//! (a member stopped, lost its leader, a connection that died: TCP keep-alive finds those),
//! it is opened again on the next member from the revision after the last one it saw, so no
//! deletion in between is missed; a revision etcd compacted away starts from now (the
//! waiters' polls cover the gap). Between the two, waiters poll, as they always do as a
//! fallback.

use super::client::{int, Api, Kv};
use super::held::{Guard, Held};
use super::keys;
use crate::runtime::debug::debug;
use crate::store::permits::watch_key;
use crate::store::reopen::Reopen;
use crate::store::{Loss, ReleaseNotifications};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Releases a lagging receiver may miss (it then polls).
const CHANNEL: usize = 1024;

/// Longest a `watch` waits for the stream to be open (etcd confirmed the watch), so that a
/// waiter that asks once more right after subscribing cannot miss a release in between; never
/// longer than a call's bound.
const READY_WAIT: Duration = Duration::from_secs(2);

/// The store's watch.
pub struct Watches {
    tx: broadcast::Sender<String>,
    /// Grants of this store deleted by someone else.
    lost: broadcast::Sender<Loss>,
    shared: Arc<Shared>,
    api: Arc<Api>,
    started: AtomicBool,
    stop: CancellationToken,
    /// Whether the stream is open now.
    ready: tokio::sync::watch::Receiver<bool>,
    ready_tx: Arc<tokio::sync::watch::Sender<bool>>,
    /// How long `watch` waits for the stream.
    ready_wait: Duration,
}

struct Shared {
    watched: Mutex<HashMap<String, usize>>,
    held: Arc<Held>,
    lost: broadcast::Sender<Loss>,
}

impl Watches {
    /// Watches through `api`, for waiters and for the grants `held` counts; nothing is
    /// opened before the first `watch` (which waits for the stream at most `call_timeout` and
    /// [`READY_WAIT`]) or [`Watches::start`].
    pub fn new(api: Arc<Api>, call_timeout: Duration, held: Arc<Held>) -> Watches {
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let lost = broadcast::channel(CHANNEL).0;
        Watches {
            lost: lost.clone(),
            ready_wait: READY_WAIT.min(call_timeout),
            ready,
            ready_tx: Arc::new(ready_tx),
            tx: broadcast::channel(CHANNEL).0,
            shared: Arc::new(Shared {
                watched: Mutex::new(HashMap::new()),
                held,
                lost,
            }),
            api,
            started: AtomicBool::new(false),
            stop: CancellationToken::new(),
        }
    }

    /// Opens the stream if it is not open yet (without waiting for it).
    pub fn start(&self) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (api, shared, tx, stop, ready) = (
            self.api.clone(),
            self.shared.clone(),
            self.tx.clone(),
            self.stop.clone(),
            self.ready_tx.clone(),
        );
        tokio::spawn(async move {
            let mut from = 0;
            let mut reopen = Reopen::default();
            while !stop.is_cancelled() {
                let followed = follow(&api, &shared, &tx, &stop, &ready, from).await;
                ready.send_replace(false);
                match followed {
                    Ok(_) => return,
                    Err((next, why)) => {
                        debug!("etcd: watch: {why}; opening it again");
                        // The stream got further than before: start the back-off afresh.
                        if next > from {
                            reopen.opened();
                        }
                        from = next;
                    }
                }
                if !reopen.wait(&stop).await {
                    return;
                }
            }
        });
    }

    /// Reports `owner`'s grant of the lock key `key` lost: this store granted the key anew to
    /// another owner, so someone else deleted it, and the stream may not have told yet (a
    /// waiter's poll can read the deletion first). Its deletion, if the stream reads it
    /// later, no longer matches what this store holds, and is not reported twice.
    pub fn replaced(&self, key: &[u8], owner: String) {
        if let Some(name) = keys::lock_name(key) {
            debug!(
                "etcd: {name:?} of {owner:?} was deleted by someone else and granted anew: lost"
            );
            let _ = self.lost.send(Loss { key: name, owner });
        }
    }

    /// Ends the stream.
    pub fn close(&self) {
        self.stop.cancel();
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Shared {
    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The name a deleted key announces, if it is one of the store's.
fn announced(key: &[u8]) -> Option<String> {
    if let Some(name) = keys::lock_name(key) {
        return Some(name);
    }
    keys::semaphore_entry(key).map(|(name, _, _)| watch_key(&name))
}

/// Reads the stream until it ends, the store closes or etcd cancels the watch; returns the
/// revision to go on from (0: from now).
async fn follow(
    api: &Api,
    shared: &Shared,
    tx: &broadcast::Sender<String>,
    stop: &CancellationToken,
    ready: &tokio::sync::watch::Sender<bool>,
    from: i64,
) -> Result<i64, (i64, String)> {
    let end = super::client::prefix_end(keys::ROOT);
    let mut create = json!({
        "key": super::client::b64(keys::ROOT),
        "range_end": super::client::b64(&end),
        "filters": ["NOPUT"],
        "prev_kv": true,
    });
    if from > 0 {
        create["start_revision"] = json!(from.to_string());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reply = api
        .open_stream("/v3/watch", &json!({"create_request": create}), deadline)
        .await
        .map_err(|e| (from, e.to_string()))?;
    let mut next = from;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = stop.cancelled() => return Ok(next),
            c = reply.chunk() => c,
        };
        let chunk = match chunk {
            Ok(Some(c)) => c,
            Ok(None) => return Err((next, "the watch stream ended".into())),
            Err(e) => return Err((next, e.to_string())),
        };
        buf.extend_from_slice(&chunk);
        while let Some(at) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let Some(result) = msg.get("result") else {
                return Err((next, format!("etcd: watch: {msg}")));
            };
            if int(result.get("compact_revision")) > 0 {
                return Err((0, "etcd: watch: revision compacted".into()));
            }
            if result.get("canceled").and_then(Value::as_bool) == Some(true) {
                return Err((next, format!("etcd: watch canceled: {result}")));
            }
            let revision = int(result.pointer("/header/revision"));
            let events = result.get("events").and_then(Value::as_array);
            for event in events.into_iter().flatten() {
                let Some(kv) = event.get("kv") else { continue };
                let kv = Kv::parse(kv);
                next = next.max(kv.mod_revision + 1);
                if let Some(prev) = event.get("prev_kv").map(Kv::parse) {
                    lost_grant(shared, &kv.key, &prev);
                }
                if let Some(name) = announced(&kv.key) {
                    if shared.watched().contains_key(&name) {
                        let _ = tx.send(name);
                    }
                }
            }
            // A watch opened from now starts after the revision its creation reports.
            if result.get("created").and_then(Value::as_bool) == Some(true) {
                if from == 0 {
                    next = next.max(revision + 1);
                }
                ready.send_replace(true);
            }
        }
    }
}

/// Reports the holder of `key` lost if `prev`, which someone deleted, is a grant this store
/// holds.
fn lost_grant(shared: &Shared, key: &[u8], prev: &Kv) {
    // A lock, or a semaphore's holder (a queued request's key is deleted by its grant).
    let (name, holder) = match keys::lock_name(key) {
        Some(name) => (name, None),
        None => match keys::semaphore_entry(key) {
            Some((name, true, owner)) => (name, Some(owner)),
            _ => return,
        },
    };
    let loss = match (shared.held.deleted(key, prev), holder) {
        (Some(Guard::Owner(owner)), None) => Loss { key: name, owner },
        (Some(Guard::Created(_)), Some(owner)) => Loss { key: name, owner },
        _ => return,
    };
    debug!(
        "etcd: {:?} of {:?} was deleted by someone else: lost",
        loss.key, loss.owner
    );
    let _ = shared.lost.send(loss);
}

impl ReleaseNotifications for Watches {
    fn releases(&self) -> broadcast::Receiver<String> {
        self.tx.subscribe()
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        *self.shared.watched().entry(key.to_owned()).or_default() += 1;
        self.start();
        let mut ready = self.ready.clone();
        let wait = self.ready_wait;
        async move {
            let _ = tokio::time::timeout(wait, ready.wait_for(|open| *open)).await;
        }
        .boxed()
    }

    fn unwatch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        let mut watched = self.shared.watched();
        if let Some(n) = watched.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                watched.remove(key);
            }
        }
        futures_util::future::ready(()).boxed()
    }

    fn watched(&self) -> usize {
        self.shared.watched().len()
    }

    fn losses(&self) -> Option<broadcast::Receiver<Loss>> {
        Some(self.lost.subscribe())
    }
}
