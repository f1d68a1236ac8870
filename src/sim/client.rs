//! A simulated client: what a session does around the engine (a held lock looked after by
//! the heartbeat scheduler, its loss reported, released by its holder), driven by a seeded
//! workload: acquisitions with and without a wait, some cancelled, leases kept by the
//! heartbeat or by hand or left to their local deadline, holds shorter and longer than the
//! lease. Everything a client believes goes into the history.

use super::history::{History, What};
use super::plan::{Plan, EVERY_MS, TTL_MS};
use crate::core::engine::Engine;
use crate::core::error::LockError;
use crate::core::held::Held;
use crate::core::options::{AcquireSpec, AutoExtend};
use crate::store::ValueFormat;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One client of one simulated process.
pub(super) struct Client {
    pub(super) id: usize,
    pub(super) process: usize,
    pub(super) engine: Arc<Engine>,
    pub(super) plan: Plan,
    pub(super) history: Arc<History>,
    /// Cancelled when the run ends: pending acquisitions are cancelled, holds released.
    pub(super) stop: CancellationToken,
}

/// Sleeps `d`, or less if the run ends; returns whether it ended.
async fn nap(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        biased;
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

impl Client {
    /// Runs the client until the run ends, then lets go of what it holds.
    pub(super) async fn run(self) {
        let mut rng = fastrand::Rng::with_seed(self.plan.seed ^ ((self.id as u64 + 1) << 40));
        let bound = self.plan.bound;
        for n in 0.. {
            if nap(Duration::from_millis(rng.u64(0..300)), &self.stop).await {
                return;
            }
            let key = format!("k{}", rng.usize(..self.plan.keys));
            let owner = format!("p{}c{}n{n}", self.process, self.id);
            let ttl_ms = TTL_MS[rng.usize(..TTL_MS.len())];
            let fitting: Vec<u64> = EVERY_MS
                .iter()
                .copied()
                .filter(|e| e * 2 <= ttl_ms)
                .collect();
            let auto = (rng.u8(..10) < 6).then(|| AutoExtend {
                every: Duration::from_millis(fitting[rng.usize(..fitting.len())]),
                max_hold: (rng.u8(..10) == 0).then(|| Duration::from_millis(rng.u64(100..3_000))),
            });
            let wait = match rng.u8(..10) {
                0..=1 => Some(Duration::ZERO),
                2..=7 => Some(Duration::from_millis(rng.u64(1..4_000))),
                _ => None,
            };
            let spec = AcquireSpec {
                key: key.clone(),
                owner: owner.clone(),
                ttl_ms,
                wait,
                max_attempts: None,
                retry_delay: Duration::from_millis([20, 100, 200][rng.usize(..3)]),
                jitter: [0.0, 0.2][rng.usize(..2)],
                data: None,
                auto_extend: auto,
                watch_expiry: true,
                report_extensions: false,
                format: ValueFormat::Fenced,
                permits: None,
            };
            // Some acquisitions are cancelled by their caller after a while.
            let cancel = self.stop.child_token();
            let cancel_after =
                (rng.u8(..10) == 0).then(|| Duration::from_millis(rng.u64(0..2_000)));
            if let Some(after) = cancel_after {
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    cancel.cancel();
                });
            }
            let started = Instant::now();
            let result = self.engine.acquire(&spec, &cancel).await;
            let took = started.elapsed();
            // An acquisition returns within its wait and one store call; one cancelled
            // (by its caller, or by the end of the run) within a store call and a release
            // after the cancellation.
            let run_end = self.history.start() + Duration::from_millis(self.plan.run_ms);
            let stopped_at = run_end.saturating_duration_since(started);
            let cancelled_at = [cancel_after, self.stop.is_cancelled().then_some(stopped_at)]
                .into_iter()
                .flatten()
                .filter(|at| *at < took)
                .min();
            let limit = match (cancelled_at, wait) {
                (Some(at), w) => Some(w.map_or(at, |w| w.min(at)) + bound * 2),
                (None, Some(w)) => Some(w + bound),
                (None, None) => None,
            };
            if let Some(limit) = limit {
                self.history.bounded(&key, &owner, "acquire", took, limit);
            }
            let grant = match result {
                Ok(Some(grant)) => grant,
                Ok(None) | Err(LockError::Aborted) | Err(LockError::Backend(_)) => continue,
                Err(e) => panic!("sim: unexpected error {e:?}"),
            };
            self.history
                .record(&key, &owner, What::Believe(grant.token));
            let history = self.history.clone();
            let held = Arc::new(Held::new(
                n,
                key.clone(),
                owner.clone(),
                grant.token,
                ttl_ms,
                grant.sent,
                spec.auto_extend,
                spec.watch_expiry,
                false,
                Box::new(move |h: &Held, reason| {
                    history.record(&h.key, &h.owner, What::Lost(reason))
                }),
            ));
            self.engine.scheduler().add(held.clone());
            let hold = Duration::from_millis(match rng.u8(..10) {
                0..=5 => rng.u64(0..ttl_ms / 2),
                6..=8 => rng.u64(ttl_ms / 2..ttl_ms * 2),
                _ => rng.u64(ttl_ms * 2..ttl_ms * 4),
            });
            // A holder without a heartbeat sometimes extends by hand half way.
            if auto.is_none() && rng.bool() {
                let stopped = nap(hold / 2, &self.stop).await;
                if !stopped {
                    self.extend_by_hand(&held, ttl_ms).await;
                }
                if stopped || nap(hold / 2, &self.stop).await {
                    self.release(&held).await;
                    return;
                }
            } else if nap(hold, &self.stop).await {
                self.release(&held).await;
                return;
            }
            self.release(&held).await;
        }
    }

    /// What [`crate::core::session::Session::extend`] does.
    async fn extend_by_hand(&self, held: &Arc<Held>, ttl_ms: u64) {
        if !held.is_live(Instant::now()) {
            return;
        }
        let started = Instant::now();
        let result = self.engine.extend(held, ttl_ms).await;
        self.history.bounded(
            &held.key,
            &held.owner,
            "extend",
            started.elapsed(),
            self.plan.bound,
        );
        if let Ok(false) = result {
            self.engine.scheduler().remove(held);
            held.lose(crate::core::error::LostReason::NotOwned);
        }
    }

    /// What [`crate::core::session::Session::release`] does.
    async fn release(&self, held: &Arc<Held>) {
        if !held.finish() {
            // Lost before: nothing to release (the session would still ask the store).
            return;
        }
        self.history.record(&held.key, &held.owner, What::Release);
        self.engine.scheduler().remove(held);
        let started = Instant::now();
        let result = self.engine.release(&held.key, &held.owner, false).await;
        // A release may hand the lock over, and again when the waiter it went to had left.
        self.history.bounded(
            &held.key,
            &held.owner,
            "release",
            started.elapsed(),
            self.plan.bound * 2,
        );
        if result.is_err() {
            self.history
                .record(&held.key, &held.owner, What::ReleaseFailed);
        }
    }
}
