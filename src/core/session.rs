//! A session is what one JavaScript client object owns: its held locks (by handle), the
//! cancellation tokens of its pending acquisitions, and where loss events go. Sessions of the
//! same store share one engine (connection, queues, heartbeat scheduler). A closed session
//! lets go of its engine, so the connection closes with the last session that uses it, even
//! while the JavaScript object that owned the session is still referenced.

use crate::core::engine::{Engine, Grant};
use crate::core::error::{LockError, LostReason};
use crate::core::held::{guard, FastHash, Held};
use crate::core::kind::Kind;
use crate::core::options::AcquireSpec;
use crate::store::{ErrorKind, HeldLock, LockInfo, PermitHolder};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod adopt;
pub use adopt::AdoptSpec;

/// Where a session reports that one of its locks was lost.
pub trait EventSink: Send + Sync + 'static {
    /// Lock `id` was lost for `reason`.
    fn lost(&self, id: u64, reason: LostReason);

    /// A heartbeat extended lock `id` (only for locks acquired with `report_extensions`).
    fn extended(&self, _id: u64) {}
}

/// What a session and its engine currently keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Locks this session holds.
    pub held: usize,
    /// Waiters queued in this process for locks of this store (all sessions).
    pub waiting: usize,
    /// Leases the heartbeat scheduler looks after (all sessions of this store).
    pub scheduled: usize,
    /// Release channels subscribed to (Redis; all sessions of this store).
    pub subscriptions: usize,
    /// Background clean-ups of grants whose reply was lost (all sessions of this store).
    pub cleanups: usize,
}

/// One client's view of an engine.
pub struct Session {
    /// `None` once closed.
    engine: Mutex<Option<Arc<Engine>>>,
    held: Mutex<HashMap<u64, Arc<Held>, FastHash>>,
    /// Cancellation tokens of acquisitions the caller may cancel one by one.
    pending: Mutex<HashMap<u64, CancellationToken, FastHash>>,
    /// Cancelled by `close`: every pending acquisition's token is this one or a child of it.
    closing: CancellationToken,
    closed: AtomicBool,
    events: Arc<dyn EventSink>,
}

impl Session {
    /// Opens a session on `engine` (shared with the other sessions of its store). No I/O.
    pub fn open(engine: Arc<Engine>, events: Arc<dyn EventSink>) -> Arc<Session> {
        Arc::new(Session {
            engine: Mutex::new(Some(engine)),
            held: Mutex::new(HashMap::default()),
            pending: Mutex::new(HashMap::default()),
            closing: CancellationToken::new(),
            closed: AtomicBool::new(false),
            events,
        })
    }

    /// The engine, or `Closed`.
    fn engine(&self) -> Result<Arc<Engine>, LockError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LockError::Closed);
        }
        guard(&self.engine).clone().ok_or(LockError::Closed)
    }

    /// Registers acquisition `id` as cancellable by [`Session::cancel`] and returns its
    /// token. Called when the operation is submitted, on the caller's thread, so that a cancel
    /// that follows the submission is never lost however late the acquisition starts.
    pub fn cancellable(&self, id: u64) -> CancellationToken {
        let token = self.closing.child_token();
        guard(&self.pending).insert(id, token.clone());
        token
    }

    /// Acquires `spec.key` under handle `id` (unique among this session's pending and held
    /// locks). `None`: still busy when the wait ended. `cancel`: the token from
    /// [`Session::cancellable`], or `None` when only `close` may cancel it.
    ///
    /// # Cancel Safety
    /// Cancel safe through [`Session::cancel`] with the same `id`, or [`Session::close`]
    /// (nothing is left behind); dropping the future may leave a grant in flight held until
    /// its ttl.
    pub async fn acquire(
        self: &Arc<Self>,
        id: u64,
        spec: AcquireSpec,
        cancel: Option<CancellationToken>,
    ) -> Result<Option<Grant>, LockError> {
        let registered = cancel.is_some();
        let cancel = cancel.unwrap_or_else(|| self.closing.clone());
        let engine = match self.engine() {
            Ok(engine) => engine,
            Err(e) => {
                guard(&self.pending).remove(&id);
                return Err(e);
            }
        };
        let mut result = engine.acquire(&spec, &cancel).await;
        if registered {
            guard(&self.pending).remove(&id);
        }
        if matches!(result, Err(LockError::Aborted)) && self.closed.load(Ordering::Acquire) {
            // Cancelled by close(), not by the caller's signal.
            result = Err(LockError::Closed);
        }
        let grant = match result? {
            Some(grant) => grant,
            None => return Ok(None),
        };
        let weak = Arc::downgrade(self);
        let has_data = spec.data.is_some();
        let kind = Kind::of(&spec);
        let report_extensions = spec.report_extensions;
        let mut held = Held::new(
            id,
            spec.key,
            spec.owner,
            grant.token,
            spec.ttl_ms,
            grant.sent,
            spec.auto_extend,
            spec.watch_expiry,
            has_data,
            Self::on_lost(weak),
        )
        .of_kind(kind);
        if report_extensions {
            let weak = Arc::downgrade(self);
            held = held.reporting_extensions(Box::new(move |held: &Held| {
                if let Some(session) = weak.upgrade() {
                    session.events.extended(held.id);
                }
            }));
        }
        let held = Arc::new(held);
        {
            // Checked under the registry's lock, which `close` drains under: a grant either
            // lands before the drain (and is released by it) or sees `closed` here.
            let mut registry = guard(&self.held);
            if !self.closed.load(Ordering::Acquire) {
                registry.insert(id, held.clone());
                drop(registry);
                engine.scheduler().add(held);
                return Ok(Some(grant));
            }
        }
        // Closed while we waited: do not hand out a lock nobody will release.
        let _ = engine
            .release_as(held.kind, &held.key, &held.owner, held.has_data)
            .await;
        Err(LockError::Closed)
    }

    /// What a held lock of this session runs when it is lost: it leaves the registry and the
    /// loss is reported.
    fn on_lost(weak: std::sync::Weak<Session>) -> crate::core::held::LostFn {
        Box::new(move |held: &Held, reason| {
            if let Some(session) = weak.upgrade() {
                guard(&session.held).remove(&held.id);
                session.events.lost(held.id, reason);
            }
        })
    }

    /// Cancels the pending acquisition `id`, if there is one.
    pub fn cancel(&self, id: u64) {
        if let Some(token) = guard(&self.pending).get(&id) {
            token.cancel();
        }
    }

    /// Whether held lock `id` may still be acted on: held by this session, neither released
    /// nor lost, and its local deadline not passed (even if the loss is not reported yet).
    pub fn is_held(&self, id: u64) -> bool {
        self.is_held_at(id, Instant::now())
    }

    /// [`Session::is_held`] at instant `now` (one clock read for a batch of checks).
    pub fn is_held_at(&self, id: u64, now: Instant) -> bool {
        let held = guard(&self.held).get(&id).cloned();
        held.is_some_and(|h| h.is_live(now))
    }

    /// How long held lock `id` may still be acted on (see [`Session::is_held`]); `None` when
    /// it may not.
    pub fn valid_for(&self, id: u64) -> Option<std::time::Duration> {
        let held = guard(&self.held).get(&id).cloned()?;
        let end = held.valid_until()?;
        let left = end.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Sets the remaining lease of held lock `id` to `ttl_ms`. `false`: it is no longer held
    /// (it was released, expired or taken); a lock found gone this way counts as lost.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn extend(&self, id: u64, ttl_ms: u64) -> Result<bool, LockError> {
        let held = guard(&self.held).get(&id).cloned();
        let Some(held) = held else { return Ok(false) };
        if !held.is_live(Instant::now()) {
            // Past its local deadline: the loss is being reported; extending now could
            // resurrect a lock someone else may already have been promised.
            return Ok(false);
        }
        let engine = self.engine()?;
        let owned = match engine.extend(&held, ttl_ms).await {
            // The lease was in a file since replaced: lost, as a heartbeat would find it.
            Err(e) if e.kind == ErrorKind::Replaced => {
                engine.scheduler().remove(&held);
                held.lose(LostReason::StoreReplaced);
                return Ok(false);
            }
            owned => owned?,
        };
        if !owned {
            engine.scheduler().remove(&held);
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
        let held = guard(&self.held).remove(&id);
        let Some(held) = held else { return Ok(false) };
        held.finish();
        let engine = self.engine()?;
        engine.scheduler().remove(&held);
        Ok(engine
            .release_as(held.kind, &held.key, &held.owner, held.has_data)
            .await?)
    }

    /// Reads who holds `key`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        Ok(self.engine()?.inspect(key).await?)
    }

    /// Frees `key` whoever holds it (an operator's tool). Returns whether a live lock was
    /// freed; its holder learns of it at its next extension.
    ///
    /// # Cancel Safety
    /// Cancel safe: idempotent.
    pub async fn force_release(&self, key: &str) -> Result<bool, LockError> {
        Ok(self.engine()?.force_release(key).await?)
    }

    /// Up to `limit` held locks whose names start with `prefix`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<HeldLock>, LockError> {
        Ok(self.engine()?.list(prefix, limit).await?)
    }

    /// The live holders of semaphore `name`.
    ///
    /// # Cancel Safety
    /// Cancel safe: read only.
    pub async fn permits(&self, name: &str) -> Result<Vec<PermitHolder>, LockError> {
        Ok(self.engine()?.permits(name).await?)
    }

    /// Checks that the store answers.
    ///
    /// # Cancel Safety
    /// Cancel safe.
    pub async fn ping(&self) -> Result<(), LockError> {
        Ok(self.engine()?.store().ping().await?)
    }

    /// Counters for diagnostics and leak checks (all zero once closed).
    pub fn stats(&self) -> Stats {
        let Ok(engine) = self.engine() else {
            return Stats::default();
        };
        Stats {
            held: self.held_count(),
            waiting: engine.waiting(),
            scheduled: engine.scheduler().len(),
            subscriptions: engine.subscriptions(),
            cleanups: engine.cleanups(),
        }
    }

    /// Whether the session was closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Number of locks this session holds.
    pub fn held_count(&self) -> usize {
        guard(&self.held).len()
    }

    /// Marks the session closed, cancels pending acquisitions and stops heartbeats, at once
    /// and without I/O; returns what [`Session::close`] still has to release. Safe to call
    /// from any thread (a terminated worker's clean-up hook calls it).
    fn shut(&self) -> Option<(Arc<Engine>, Vec<Arc<Held>>)> {
        let held: Vec<Arc<Held>> = {
            let mut registry = guard(&self.held);
            if self.closed.swap(true, Ordering::AcqRel) {
                return None;
            }
            registry.drain().map(|(_, h)| h).collect()
        };
        self.closing.cancel();
        let engine = guard(&self.engine).take()?;
        for h in &held {
            h.finish();
            engine.scheduler().remove(h);
        }
        Some((engine, held))
    }

    /// Cancels pending acquisitions, stops heartbeats and releases every held lock (but those
    /// whose holder stopped extending them: they lapse), then lets go of the engine, closing
    /// its store if no other client uses it. Returns how many locks it released.
    ///
    /// # Cancel Safety
    /// Not cancel safe: the locks are taken out of the registry first, so a close dropped
    /// half way leaves the rest to expire by their ttl.
    pub async fn close(&self) -> usize {
        let Some((engine, held)) = self.shut() else {
            return 0;
        };
        // A lock whose holder stopped extending it is left to lapse: it may have been
        // adopted by another process, which a release by its owner would take from it.
        let futures = held
            .iter()
            .filter(|h| !h.is_stopped())
            .map(|h| engine.release_as(h.kind, &h.key, &h.owner, h.has_data));
        let released = futures_util::future::join_all(futures)
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(true)))
            .count();
        Engine::close_if_last(engine).await;
        released
    }
}
