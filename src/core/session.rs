//! A session is what one JavaScript client object owns: its held locks (by handle), the
//! cancellation tokens of its pending acquisitions, and where loss events go. Sessions of the
//! same store share one engine (connection, queues, heartbeat scheduler).

use crate::backend::LockInfo;
use crate::core::engine::Engine;
use crate::core::error::{LockError, LostReason};
use crate::core::heartbeat::Held;
use crate::core::options::AcquireSpec;
use crate::core::url::ConnectOptions;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where a session reports that one of its locks was lost.
pub trait EventSink: Send + Sync + 'static {
    /// Lock `id` was lost for `reason`.
    fn lost(&self, id: u64, reason: LostReason);
}

/// A granted lock as the caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Fencing token.
    pub token: u64,
}

/// What a session and its engine currently keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Locks this session holds.
    pub held: usize,
    /// Waiters queued in this process for locks of this store (all sessions).
    pub waiting: usize,
    /// Leases the heartbeat scheduler looks after (all sessions of this store).
    pub scheduled: usize,
    /// Release channels subscribed to (Redis; all sessions of this store).
    pub subscriptions: usize,
}

/// One client's view of an engine.
pub struct Session {
    engine: Arc<Engine>,
    held: Mutex<HashMap<u64, Arc<Held>>>,
    /// Cancellation tokens of acquisitions the caller may cancel one by one.
    pending: Mutex<HashMap<u64, CancellationToken>>,
    /// Cancelled by `close`: every pending acquisition's token is this one or a child of it.
    closing: CancellationToken,
    closed: AtomicBool,
    events: Arc<dyn EventSink>,
}

impl Session {
    /// Opens a session on the engine for `url`. Must run inside a tokio runtime; no I/O.
    pub fn open(
        url: &str,
        opts: &ConnectOptions,
        events: Arc<dyn EventSink>,
    ) -> Result<Arc<Session>, LockError> {
        Ok(Arc::new(Session {
            engine: Engine::open(url, opts)?,
            held: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            closing: CancellationToken::new(),
            closed: AtomicBool::new(false),
            events,
        }))
    }

    fn check_open(&self) -> Result<(), LockError> {
        if self.closed.load(Ordering::Acquire) {
            Err(LockError::Closed)
        } else {
            Ok(())
        }
    }

    /// Acquires `spec.key` under handle `id` (unique among this session's pending and held
    /// locks). `None`: still busy when the wait ended. `cancellable`: whether
    /// [`Session::cancel`] may cancel this one (it costs a token and a registry entry).
    ///
    /// # Cancel Safety
    /// Cancel safe through [`Session::cancel`] with the same `id`, or [`Session::close`]
    /// (nothing is left behind); dropping the future may leave a grant in flight held until
    /// its ttl.
    pub async fn acquire(
        self: &Arc<Self>,
        id: u64,
        spec: AcquireSpec,
        cancellable: bool,
    ) -> Result<Option<Grant>, LockError> {
        self.check_open()?;
        let cancel = if cancellable {
            let token = self.closing.child_token();
            self.pending.lock().unwrap().insert(id, token.clone());
            token
        } else {
            self.closing.clone()
        };
        let sent = Instant::now();
        let mut result = self.engine.acquire(&spec, &cancel).await;
        if cancellable {
            self.pending.lock().unwrap().remove(&id);
        }
        if matches!(result, Err(LockError::Aborted)) && self.closed.load(Ordering::Acquire) {
            // Cancelled by close(), not by the caller's signal.
            result = Err(LockError::Closed);
        }
        let token = match result? {
            Some(token) => token,
            None => return Ok(None),
        };
        let weak = Arc::downgrade(self);
        let has_data = spec.data.is_some();
        let held = Arc::new(Held::new(
            id,
            spec.key,
            spec.owner,
            token,
            spec.ttl_ms,
            sent,
            spec.auto_extend,
            spec.watch_expiry,
            has_data,
            Box::new(move |held: &Held, reason| {
                if let Some(session) = weak.upgrade() {
                    session.held.lock().unwrap().remove(&held.id);
                    session.events.lost(held.id, reason);
                }
            }),
        ));
        if self.closed.load(Ordering::Acquire) {
            // Closed while we waited: do not hand out a lock nobody will release.
            let _ = self
                .engine
                .release(&held.key, &held.owner, held.has_data)
                .await;
            return Err(LockError::Closed);
        }
        self.held.lock().unwrap().insert(id, held.clone());
        self.engine.scheduler().add(held);
        Ok(Some(Grant { token }))
    }

    /// Cancels the pending acquisition `id`, if there is one.
    pub fn cancel(&self, id: u64) {
        if let Some(token) = self.pending.lock().unwrap().get(&id) {
            token.cancel();
        }
    }

    /// Sets the remaining lease of held lock `id` to `ttl_ms`. `false`: it is no longer held
    /// (it was released, expired or taken); a lock found gone this way counts as lost.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(&self, id: u64, ttl_ms: u64) -> Result<bool, LockError> {
        let held = self.held.lock().unwrap().get(&id).cloned();
        let Some(held) = held else { return Ok(false) };
        let owned = self.engine.extend(&held, ttl_ms).await?;
        if !owned {
            self.engine.scheduler().remove(&held);
            held.lose(LostReason::NotOwned);
        }
        Ok(owned)
    }

    /// Releases held lock `id`. `true`: this call released it; `false`: it had already been
    /// released, had expired or was taken.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn release(&self, id: u64) -> Result<bool, LockError> {
        let held = self.held.lock().unwrap().remove(&id);
        let Some(held) = held else { return Ok(false) };
        held.finish();
        self.engine.scheduler().remove(&held);
        Ok(self
            .engine
            .release(&held.key, &held.owner, held.has_data)
            .await?)
    }

    /// Reads who holds `key`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        self.check_open()?;
        Ok(self.engine.inspect(key).await?)
    }

    /// Checks that the store answers.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> Result<(), LockError> {
        self.check_open()?;
        Ok(self.engine.store().ping().await?)
    }

    /// Counters for diagnostics and leak checks.
    pub fn stats(&self) -> Stats {
        Stats {
            held: self.held_count(),
            waiting: self.engine.waiting(),
            scheduled: self.engine.scheduler().len(),
            subscriptions: self.engine.subscriptions(),
        }
    }

    /// Number of locks this session holds.
    pub fn held_count(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Cancels pending acquisitions, stops heartbeats and releases every held lock.
    /// Returns how many locks it released.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the locks are taken out of the registry first, so a close dropped
    /// half way leaves the rest to expire by their ttl.
    pub async fn close(&self) -> usize {
        if self.closed.swap(true, Ordering::AcqRel) {
            return 0;
        }
        self.closing.cancel();
        let held: Vec<Arc<Held>> = self.held.lock().unwrap().drain().map(|(_, h)| h).collect();
        let mut released = 0;
        let futures = held.iter().map(|h| {
            h.finish();
            self.engine.scheduler().remove(h);
            self.engine.release(&h.key, &h.owner, h.has_data)
        });
        for result in futures_util::future::join_all(futures).await {
            if matches!(result, Ok(true)) {
                released += 1;
            }
        }
        released
    }
}
